"""Test hosts that are not this machine, for the wire's tests: real network namespaces.

    python -m tests.testnet up STATE-FOLDER     (as root; .ci/run does it for the user run)
    python -m tests.testnet down STATE-FOLDER

An origin namespace (10.212.0.2) reached through a router namespace, so that its network
is not one of this machine's own (this machine's own networks are refused by the
proxy), serving HTTP on 80 and HTTPS on 443 (a self-signed certificate the clients are
told to trust) from a folder of test files, and a plain TCP echo on 7. Names go into
/etc/hosts (and are removed): allowed.lnkt, denied.lnkt, other.lnkt → the origin;
self-lo.lnkt → 127.0.0.1; self-eth.lnkt → this machine's own address; meta.lnkt →
169.254.169.254. The state folder holds the certificate, the served files and a
`ready` file the fixture reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROUTER, ORIGIN = "lnkt-router", "lnkt-origin"
ORIGIN_ADDRESS = "10.212.0.2"
NAMES = ("allowed.lnkt", "denied.lnkt", "other.lnkt")
HOSTS_MARK = "# lnk-sandbox tests"

_SERVER = r'''
import http.server, socket, socketserver, ssl, sys, threading, functools
root, cert, key, addr = sys.argv[1:5]
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    disable_nagle_algorithm = True
    def log_message(self, *args):
        pass
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        reply = f"got {len(body)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
H = functools.partial(Handler, directory=root)
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
plain = Server((addr, 80), H)
tls = Server((addr, 443), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
tls.socket = context.wrap_socket(tls.socket, server_side=True)
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)
class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
echo = EchoServer((addr, 7), Echo)
for server in (tls, echo):
    threading.Thread(target=server.serve_forever, daemon=True).start()
plain.serve_forever()
'''


def _run(*argv: str, namespace: str = "") -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, *argv], check=True, capture_output=True)


def _machine_address() -> str:
    done = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                          capture_output=True, text=True, check=True)
    for line in done.stdout.splitlines():
        address = line.split()[3].split("/")[0]
        if not address.startswith("10.211."):
            return address
    return "192.0.2.1"


def _hosts(add: list[str] | None) -> None:
    lines = [line for line in Path("/etc/hosts").read_text().splitlines()
             if HOSTS_MARK not in line]
    if add:
        lines += [f"{entry} {HOSTS_MARK}" for entry in add]
    Path("/etc/hosts").write_text("\n".join(lines) + "\n")


def _files(state: Path) -> None:
    www = state / "www"
    www.mkdir(parents=True, exist_ok=True)
    (www / "ok").write_text("fine\n")
    with open(www / "big", "wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # 64 MiB of zeros, for throughput
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=allowed.lnkt",
                    "-addext", "subjectAltName=" + ",".join(f"DNS:{name}" for name in NAMES),
                    "-keyout", str(state / "key.pem"), "-out", str(state / "cert.pem")],
                   check=True, capture_output=True)
    repo = state / "source"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text("a repository served over http\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(www / "repo.git")],
                   check=True)
    subprocess.run(["git", "-C", str(www / "repo.git"), "update-server-info"], check=True)
    _wheel(www)


def _wheel(www: Path) -> None:
    """A real, tiny wheel in a PEP 503 simple index, for pip."""
    import base64
    import hashlib
    import zipfile

    name = "lnktpkg-1.0-py3-none-any.whl"
    files = {
        "lnktpkg/__init__.py": "VALUE = 42\n",
        "lnktpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: lnktpkg\nVersion: 1.0\n",
        "lnktpkg-1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: lnk-tests\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append("lnktpkg-1.0.dist-info/RECORD,,")
    folder = www / "simple" / "lnktpkg"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / name, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr("lnktpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    (folder / "index.html").write_text(f'<a href="{name}">{name}</a>\n')
    (www / "simple" / "index.html").write_text('<a href="lnktpkg/">lnktpkg</a>\n')


def up(state: Path) -> None:
    down(state)
    state.mkdir(parents=True, exist_ok=True)
    _files(state)
    _run("ip", "netns", "add", ROUTER)
    _run("ip", "netns", "add", ORIGIN)
    _run("ip", "link", "add", "lnkt-h", "type", "veth", "peer", "name", "lnkt-r0")
    _run("ip", "link", "set", "lnkt-r0", "netns", ROUTER)
    _run("ip", "addr", "add", "10.211.0.1/30", "dev", "lnkt-h")
    _run("ip", "link", "set", "lnkt-h", "up")
    _run("ip", "addr", "add", "10.211.0.2/30", "dev", "lnkt-r0", namespace=ROUTER)
    _run("ip", "link", "set", "lnkt-r0", "up", namespace=ROUTER)
    _run("ip", "link", "set", "lo", "up", namespace=ROUTER)
    _run("ip", "link", "add", "lnkt-r1", "netns", ROUTER, "type", "veth", "peer", "name",
         "lnkt-o", "netns", ORIGIN)
    _run("ip", "addr", "add", "10.212.0.1/24", "dev", "lnkt-r1", namespace=ROUTER)
    _run("ip", "link", "set", "lnkt-r1", "up", namespace=ROUTER)
    _run("ip", "addr", "add", f"{ORIGIN_ADDRESS}/24", "dev", "lnkt-o", namespace=ORIGIN)
    _run("ip", "link", "set", "lnkt-o", "up", namespace=ORIGIN)
    _run("ip", "link", "set", "lo", "up", namespace=ORIGIN)
    _run("ip", "route", "add", "default", "via", "10.212.0.1", namespace=ORIGIN)
    _run("sysctl", "-qw", "net.ipv4.ip_forward=1", namespace=ROUTER)
    _run("ip", "route", "add", "10.212.0.0/24", "via", "10.211.0.2")
    (state / "server.py").write_text(_SERVER)
    server = subprocess.Popen(
        ["ip", "netns", "exec", ORIGIN, sys.executable, str(state / "server.py"),
         str(state / "www"), str(state / "cert.pem"), str(state / "key.pem"), ORIGIN_ADDRESS],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _hosts([f"{ORIGIN_ADDRESS} {' '.join(NAMES)}", "127.0.0.1 self-lo.lnkt",
            f"{_machine_address()} self-eth.lnkt", "169.254.169.254 meta.lnkt"])
    for _ in range(200):
        probe = subprocess.run(["curl", "-s", "-m", "1", f"http://{ORIGIN_ADDRESS}/ok"],
                               capture_output=True, text=True, check=False)
        if probe.stdout == "fine\n":
            break
        time.sleep(0.05)
    else:
        raise RuntimeError("the test origin did not come up")
    (state / "ready").write_text(json.dumps({"server": server.pid,
                                             "machine": _machine_address()}))
    os.chmod(state, 0o755)  # noqa: S103 (the ordinary-user run reads the test files)
    for path in state.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)


def down(state: Path) -> None:
    ready = state / "ready"
    if ready.exists():
        with contextlib.suppress(ProcessLookupError, KeyError, ValueError):
            os.killpg(json.loads(ready.read_text())["server"], signal.SIGKILL)
    subprocess.run(["ip", "route", "del", "10.212.0.0/24"], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", "lnkt-h"], capture_output=True, check=False)
    for namespace in (ORIGIN, ROUTER):
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
    _hosts(None)
    if state.exists():
        shutil.rmtree(state)


if __name__ == "__main__":
    action, folder = sys.argv[1], Path(sys.argv[2])
    up(folder) if action == "up" else down(folder)
