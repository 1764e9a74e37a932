"""What the network benches (bench/wire, bench/endpoints) share: running in the
project's venv, timing a command, and the line `wrap` prints for a spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_VENV = PROJECT_ROOT / ".venv"
# Bare bubblewrap with the namespaces lnk-sandbox uses: the floor every start is set against.
BWRAP_ARGS = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-ipc",
    "--die-with-parent",
    "--cap-drop",
    "ALL",
    "--new-session",
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",  # noqa: S108 - a path inside the sandbox, not a host temp file
)


def in_project_venv(script: str) -> None:
    """Run `script` again in the project's venv (bin/setup) when it is not already:
    the test hosts' DNS server needs dnslib, and the proxy's code h11."""
    python = _VENV / "bin" / "python"
    if Path(sys.prefix).resolve() != _VENV.resolve() and python.exists():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])  # noqa: S606


def run(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds `argv` took, and its output; a failure ends the bench, saying why."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]}… failed ({done.returncode}): {done.stderr[-600:]}")
    return elapsed, done.stdout


def wrap(lnk: str, spec: Path, command: list[str], env: dict[str, str]) -> list[str]:
    """The line `lnk-sandbox wrap` prints for `command` under `spec`."""
    done = subprocess.run([lnk, "wrap", "--json", "--spec", str(spec), "--", *command],
                          env=env, capture_output=True, text=True, check=True)
    line: list[str] = json.loads(done.stdout)
    return line


# The wire's cost per connection and per request, run inside the sandbox (and inside srt,
# and directly): argv MODE COUNT WARM SECONDS CAFILE [held]; prints the seconds the COUNT
# calls after WARM took (at most SECONDS: fewer calls then) and their count. `held`
# (bench/proxycpu): says `warm` after the warm calls and waits for a line on stdin before
# the timed ones, and for another before it exits, so that the proxy's CPU is read around
# exactly those calls. The proxy is the one the environment names (srt's carries its user
# and password: sent as Proxy-Authorization, as curl does).
CALLS_SCRIPT = """
import base64, http.client, os, socket, ssl, sys, time, urllib.parse
mode, count, warm, seconds, cafile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \\
    float(sys.argv[4]), sys.argv[5]
direct = mode.startswith("direct")
proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
                              or os.environ.get("HTTP_PROXY") or "")
auth = {}
if proxy.username:
    token = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
    auth["Proxy-Authorization"] = "Basic " + base64.b64encode(token.encode()).decode()
context = ssl.create_default_context(cafile=cafile)
def tls_once():
    if direct:
        sock = socket.create_connection(("10.212.0.2", 443), timeout=30)
    else:
        sock = socket.create_connection((proxy.hostname, proxy.port), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(b"CONNECT allowed.lnkt:443 HTTP/1.1\\r\\nHost: allowed.lnkt:443\\r\\n"
                     + b"".join(f"{k}: {v}\\r\\n".encode() for k, v in auth.items())
                     + b"\\r\\n")
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.split(b" ")[1] == b"200", head
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    tls = context.wrap_socket(sock, server_hostname="allowed.lnkt")
    tls.sendall(b"GET /ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\nConnection: close\\r\\n\\r\\n")
    response = http.client.HTTPResponse(tls)
    response.begin()
    assert response.status == 200 and response.read() == b"fine\\n"
    tls.close()
connection = None
def keep_once():
    global connection
    if connection is None:
        connection = (http.client.HTTPConnection("10.212.0.2", 80, timeout=30) if direct
                      else http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=30))
    url = "/ok" if direct else "http://allowed.lnkt/ok"
    connection.request("GET", url, headers={"Host": "allowed.lnkt", **auth})
    response = connection.getresponse()
    assert response.status == 200 and response.read() == b"fine\\n", response.status
once = tls_once if mode.endswith("tls") else keep_once
held = sys.argv[6:] == ["held"]
for _ in range(warm):
    once()
if held:
    print("warm", flush=True)
    sys.stdin.readline()
done = 0
start = time.perf_counter()
while done < count and time.perf_counter() - start < seconds:
    once()
    done += 1
print(time.perf_counter() - start, done, flush=True)
if held:
    sys.stdin.readline()
"""
