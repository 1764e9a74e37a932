"""`lnk-sandbox allow` / `disallow` / `allowed` on a running wire, attacked for real: real
sandboxes, their proxy, curl and Python clients against the test hosts
(tests/testnet.py); the pure reading of the file is tests/test_additions.py."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    end_run,
    toml_list,
    wait_until,
)
from tests.test_files_attacks import Q
from tests.testnet import ORIGIN_ADDRESS, _machine_address
from tests.testservers import DNS_SERVER

PYTHON = "/usr/bin/python3"


def lnk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, *args], env=env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


def wire_spec(write_spec: WriteSpec, testnet: Path, name: str, marks: Path | None = None,
              hosts: str = '"allowed.lnkt", "allowed.lnkt:7"') -> Path:
    write = f"write = {toml_list(marks)}\n" if marks is not None else ""
    return write_spec(f'name = "{name}"\n[files]\nread = {toml_list(testnet)}\n{write}'
                      f'[network]\nmode = "proxy"\nhosts = [{hosts}]\n')


def wire_folder(env: dict[str, str], wire: str) -> Path:
    return Path(env["LNK_HOME"]) / "sandbox" / "wires" / wire


def curl_code(run_sandbox: RunSandbox, spec: Path, env: dict[str, str], url: str) -> str:
    return run_sandbox(spec, "curl", "-s", "-o", "/dev/null", "-m", "5", "-w", "%{http_code}",
                       url, env=env).stdout


_STEPS = """
m={marks}
code() {{ curl -s -o /dev/null -m 5 -w '%{{http_code}}' http://denied.lnkt/ok; }}
code > $m/first.tmp && mv $m/first.tmp $m/first
while [ ! -e $m/allowed ]; do sleep 0.02; done
code > $m/second.tmp && mv $m/second.tmp $m/second
while [ ! -e $m/disallowed ]; do sleep 0.02; done
code > $m/third
"""


def test_allow_is_taken_at_the_next_call_and_disallow_too_without_a_restart(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = wire_spec(write_spec, testnet, "live", marks)
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/sh", "-c",
                            _STEPS.format(marks=Q(str(marks)))], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: (marks / "first").exists() and (marks / "first").read_text(),
                          "the first call") == "403"
        allowed = lnk(sandbox_env, "allow", "live", "denied.lnkt")
        assert allowed.returncode == 0, allowed.stderr
        (marks / "allowed").touch()
        assert wait_until(lambda: (marks / "second").exists()
                          and (marks / "second").read_text(), "the call after allow") == "200"
        assert lnk(sandbox_env, "disallow", "live", "denied.lnkt").returncode == 0
        (marks / "disallowed").touch()
        run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert (marks / "third").read_text() == "403"
    lines = [line.split("\t") for line in (wire_folder(sandbox_env, "live") / "log")
             .read_text().splitlines()]
    changed = [fields[2:] for fields in lines if fields[1] == "changed"]
    assert [target for target, _ in changed] == ["denied.lnkt", "denied.lnkt"]
    assert [detail.split()[0] for _, detail in changed] == ["change=allow", "change=disallow"]
    assert all(re.fullmatch(r"change=\w+ by=\S+ uid=[0-9]+", detail) for _, detail in changed)
    calls = [fields[1:3] for fields in lines if fields[2] == "denied.lnkt:80"]
    assert calls[0] == ["refused", "denied.lnkt:80"]
    assert ["allowed", "denied.lnkt:80"] in calls and calls[-1] == ["refused", "denied.lnkt:80"]


_TUNNELS = """
import socket, sys, time
def tunnel(name):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(f"CONNECT {name}:7 HTTP/1.1\\r\\nHost: {name}:7\\r\\n\\r\\n".encode())
    assert b" 200 " in s.recv(4096)
    s.sendall(b"x")
    assert s.recv(10)
    return s
added, listed = tunnel("denied.lnkt"), tunnel("allowed.lnkt")
open(sys.argv[1], "w").write("open")
added.settimeout(30)
try:
    while True:
        added.sendall(b"x" * 1024)
        if not added.recv(65536):
            break
except OSError:
    pass
closed = time.time()
listed.sendall(b"still")
print(closed, listed.recv(100).decode())
"""


def _take_away(env: dict[str, str], wire: str, how: str, host: str) -> float:
    """Take `host` away from the wire's additions `how`; when the file changed."""
    added = wire_folder(env, wire) / "allowed"
    if how == "broken":  # a file that cannot be taken lets nothing more through
        added.write_bytes(b'{"version": 1, "hosts": [')
    else:
        words = {"disallow": ("disallow", wire, host), "tcp": ("disallow", "--tcp", wire, host),
                 "clear": ("disallow", wire, "--clear")}[how]
        assert lnk(env, *words).returncode == 0
    return added.stat().st_mtime


@pytest.mark.parametrize("how", ["disallow", "clear", "broken"])
def test_an_open_tunnel_to_a_host_taken_away_is_closed_within_a_second(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    run_sandbox: RunSandbox, how: str,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = wire_spec(write_spec, testnet, "taken", marks, hosts='"allowed.lnkt:7"')
    run_sandbox(spec, "true", env=sandbox_env)  # the wire has run: it may be added to
    assert lnk(sandbox_env, "allow", "taken", "denied.lnkt:7").returncode == 0
    opened = marks / "open"
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I",
                            "-c", _TUNNELS, str(opened)], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(opened.exists, "both tunnels carrying data")
        taken_at = _take_away(sandbox_env, "taken", how, "denied.lnkt:7")
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    closed, alive = stdout.split()
    elapsed = float(closed) - taken_at
    print(f"{how}: the tunnel closed {elapsed:.3f} s after the file changed")
    assert elapsed < 1.0, (elapsed, stderr)
    assert alive == "still"  # the spec's own host's tunnel was left open
    ended = [line for line in (wire_folder(sandbox_env, "taken") / "log").read_text()
             .splitlines() if "\tended\tdenied.lnkt:7\t" in line]
    assert len(ended) == 1 and "sent=" in ended[0] and "closed=taken-away" in ended[0]
    listed = [line for line in (wire_folder(sandbox_env, "taken") / "log").read_text()
              .splitlines() if "\tended\tallowed.lnkt:7\t" in line]
    assert listed and "closed=" not in listed[0]


_MANY = """
import socket, sys, threading, time
count = int(sys.argv[1])
def tunnel(name):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(f"CONNECT {name}:7 HTTP/1.1\\r\\nHost: {name}:7\\r\\n\\r\\n".encode())
    assert b" 200 " in s.recv(4096)
    return s
socks = [tunnel("denied.lnkt") for _ in range(count)]
listed = tunnel("allowed.lnkt")
closed_at = {}
echoed = threading.Semaphore(0)
def keep(index, s):
    s.settimeout(30)
    first = True
    try:
        while True:
            s.sendall(b"x" * 1024)
            if not s.recv(65536):
                break
            if first:
                first = False
                echoed.release()
    except OSError:
        pass
    closed_at[index] = time.time()
threads = [threading.Thread(target=keep, args=(i, s)) for i, s in enumerate(socks)]
[t.start() for t in threads]
[echoed.acquire(timeout=30) for _ in socks]  # every tunnel has carried data both ways
open(sys.argv[2], "w").write(str(time.time()))
[t.join() for t in threads]
listed.sendall(b"still")
print(len(closed_at), max(closed_at.values()), listed.recv(100).decode())
"""


def test_200_open_tunnels_to_a_host_taken_away_are_closed_within_a_second(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    run_sandbox: RunSandbox,
) -> None:
    """As the kill switch's test (tests/test_wire_controls.py, N9): 200 tunnels moving
    data, all closed within a second of `disallow`, by the watch's own thread."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = wire_spec(write_spec, testnet, "many", marks, hosts='"allowed.lnkt:7"')
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "many", "denied.lnkt:7").returncode == 0
    started = marks / "transferring"
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I",
                            "-c", _MANY, "200", str(started)], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(started.exists, "all 200 tunnels moving data")
        taken_at = _take_away(sandbox_env, "many", "disallow", "denied.lnkt:7")
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    count, last_closed, alive = stdout.split()
    assert count == "200", (stdout, stderr)
    elapsed = float(last_closed) - taken_at
    print(f"disallow: the last of 200 tunnels closed {elapsed:.3f} s after the file changed")
    assert elapsed < 1.0, (elapsed, stderr)
    assert alive == "still"


_KEPT_ALIVE = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
def get():
    s.sendall(b"GET http://denied.lnkt/ok HTTP/1.1\\r\\nHost: denied.lnkt\\r\\n\\r\\n")
    data = b""
    while not data.endswith(b"fine\\n"):
        chunk = s.recv(4096)
        assert chunk, data
        data += chunk
get(); get()  # the second on the kept-alive lane
open(sys.argv[1], "w").write("served")
try:
    left = s.recv(4096)
except OSError:
    left = b""
print(time.time(), len(left))
"""


def test_a_kept_alive_connection_to_a_host_taken_away_is_closed_within_a_second(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    run_sandbox: RunSandbox,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = wire_spec(write_spec, testnet, "lane", marks)
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "lane", "denied.lnkt").returncode == 0
    served = marks / "served"
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I",
                            "-c", _KEPT_ALIVE, str(served)], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(served.exists, "two requests served on one connection")
        taken_at = _take_away(sandbox_env, "lane", "disallow", "denied.lnkt")
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    closed, left = stdout.split()
    assert left == "0", stderr
    assert float(closed) - taken_at < 1.0, (float(closed) - taken_at, stderr)


def test_the_refused_line_says_the_allow_command_that_lets_the_call_through(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    spec = wire_spec(write_spec, testnet, "advised")
    assert curl_code(run_sandbox, spec, sandbox_env, "http://denied.lnkt/ok") == "403"
    # A provider's API host: the model verb is the way, not an addition (refused by name,
    # before any lookup).
    assert curl_code(run_sandbox, spec, sandbox_env, "https://api.anthropic.com/") == "000"
    # An address: the command names it, unless it is this machine's (allow refuses that).
    assert curl_code(run_sandbox, spec, sandbox_env, f"http://{ORIGIN_ADDRESS}/ok") == "403"
    assert curl_code(run_sandbox, spec, sandbox_env, f"http://{_machine_address()}/") == "403"
    shown = lnk(sandbox_env, "log", "advised", "--refused").stdout
    assert f"`lnk-sandbox allow advised {ORIGIN_ADDRESS}` lets it through" in shown
    mine = next(line for line in shown.splitlines() if f"{_machine_address()}:80" in line)
    assert "is not in this sandbox's hosts" in mine and "lnk-sandbox allow" not in mine
    command = re.search(r"`(lnk-sandbox allow advised [^`]+)` lets it through", shown)
    assert command is not None, shown
    assert command.group(1) == "lnk-sandbox allow advised denied.lnkt"
    provider = next(line for line in shown.splitlines() if "api.anthropic.com:443" in line)
    assert "[verbs] model" in provider and "lnk-sandbox allow" not in provider
    words = shlex.split(command.group(1))
    done = subprocess.run([LNK_SANDBOX, *words[1:]], env=sandbox_env, capture_output=True,
                          text=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert done.returncode == 0, done.stderr
    # Kept for the wire's next start, which says so.
    result = run_sandbox(spec, "curl", "-s", "-m", "5", "http://denied.lnkt/ok",
                         env=sandbox_env)
    assert result.stdout == "fine\n"
    note = "lnk-sandbox: the wire advised may also reach what `lnk-sandbox allow` added: " \
           "denied.lnkt (`lnk-sandbox allowed advised` shows them"
    assert note in result.stderr
    # `wrap` says it, and the kept line again at each of its starts.
    wrapped = run_sandbox(spec, "curl", "-s", "-m", "5", "http://denied.lnkt/ok",
                          env=sandbox_env, verb="wrap")
    assert note in wrapped.stderr
    kept = subprocess.run(["/bin/sh", "-c", wrapped.stdout], env=sandbox_env,
                          capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS,
                          check=False)
    assert kept.stdout == "fine\n" and note in kept.stderr, kept
    shown = json.loads(lnk(sandbox_env, "allowed", "advised", "--json").stdout)
    assert [entry["host"] for entry in shown["hosts"]] == ["denied.lnkt"]
    assert set(shown["hosts"][0]) == {"host", "added", "by"}


def test_an_added_host_gets_every_check_a_listed_host_gets(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """self-lo.lnkt resolves to 127.0.0.1: added, its calls are refused for the address,
    as a listed host's are."""
    spec = wire_spec(write_spec, testnet, "checked")
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "checked", "self-lo.lnkt").returncode == 0
    result = run_sandbox(spec, "curl", "-s", "-m", "5", "http://self-lo.lnkt/",
                         env=sandbox_env)
    assert result.stdout == "self-lo.lnkt resolves to 127.0.0.1 is this machine (loopback)\n"


_HELLO = """
import socket, ssl, sys
def tunnel(target, sni):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=8)
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
    if b" 200 " not in s.recv(4096):
        return "no-tunnel"
    context = ssl.create_default_context(cafile=sys.argv[1])
    context.check_hostname = False
    try:
        t = context.wrap_socket(s, server_hostname=sni)
        t.sendall(b"GET /ok HTTP/1.1\\r\\nHost: denied.lnkt\\r\\nConnection: close\\r\\n\\r\\n")
        data = b""
        while chunk := t.recv(4096):
            data += chunk
        return "served" if b"fine" in data else "closed"
    except (OSError, ssl.SSLError):
        return "closed"
print(tunnel("denied.lnkt:443", "denied.lnkt"), tunnel("denied.lnkt:443", "allowed.lnkt"),
      tunnel("denied.lnkt:443", None))
"""


def test_an_added_host_s_tunnel_on_443_must_name_it_in_its_client_hello(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """N5 for an addition: a CONNECT to the added host on 443 opens only once its
    ClientHello names that host (another, even a listed one, or none: closed)."""
    spec = wire_spec(write_spec, testnet, "hello")
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "hello", "denied.lnkt").returncode == 0
    result = run_sandbox(spec, PYTHON, "-I", "-c", _HELLO, str(testnet / "cert.pem"),
                         env=sandbox_env)
    assert result.stdout.split() == ["served", "closed", "closed"], result
    log = (wire_folder(sandbox_env, "hello") / "log").read_text()
    assert "reason=the tunnel's TLS ClientHello names another host (allowed.lnkt)" in log
    assert "reason=the tunnel's TLS ClientHello names no host" in log


def test_a_broken_additions_file_lets_nothing_more_through_and_says_why(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    spec = wire_spec(write_spec, testnet, "broken")
    run_sandbox(spec, "true", env=sandbox_env)
    (wire_folder(sandbox_env, "broken") / "allowed").write_bytes(
        b'{"version": 1, "hosts": [{"host": "denied.lnkt"}, {"host": "*"}]}')
    assert curl_code(run_sandbox, spec, sandbox_env, "http://denied.lnkt/ok") == "403"
    shown = lnk(sandbox_env, "log", "broken", "--refused")
    assert "the wire's additions cannot be taken" in shown.stdout, (
        shown, (wire_folder(sandbox_env, "broken") / "log").read_text())
    assert lnk(sandbox_env, "allowed", "broken").returncode == 125
    # allow never writes over it (it may hold the person's own lines); --clear replaces it.
    refused = lnk(sandbox_env, "allow", "broken", "denied.lnkt")
    assert refused.returncode == 125 and "disallow broken --clear` replaces it" in refused.stderr
    assert lnk(sandbox_env, "disallow", "broken", "--clear").returncode == 0
    assert json.loads(lnk(sandbox_env, "allowed", "broken", "--json").stdout)["hosts"] == []
    assert lnk(sandbox_env, "allow", "broken", "denied.lnkt").returncode == 0
    assert curl_code(run_sandbox, spec, sandbox_env, "http://denied.lnkt/ok") == "200"


@pytest.mark.parametrize("host", ["*", "*.", "127.0.0.1", "169.254.169.254", "localhost",
                                  "not a host", "a..b", "x.example.com:0",
                                  "api.anthropic.com", "*.googleapis.com", "MACHINE"])
def test_bad_input_is_one_line_and_changes_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
    host: str,
) -> None:
    host = _machine_address() if host == "MACHINE" else host
    spec = wire_spec(write_spec, testnet, "strict")
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "strict", "kept.example.com").returncode == 0
    folder = wire_folder(sandbox_env, "strict")
    before = ((folder / "allowed").read_bytes(), (folder / "log").read_bytes())
    refused = lnk(sandbox_env, "allow", "strict", host)
    assert refused.returncode == 125
    assert refused.stderr.count("\n") == 1 and "nothing changed" in refused.stderr, refused
    assert "Traceback" not in refused.stderr
    if host.startswith("api.") or host.endswith("googleapis.com"):
        assert "[verbs] model" in refused.stderr
    assert ((folder / "allowed").read_bytes(), (folder / "log").read_bytes()) == before


def test_an_unknown_wire_or_a_host_not_added_is_refused_and_nothing_written(
    sandbox_env: dict[str, str],
) -> None:
    for args in (("allow", "never-ran", "docs.example.com"), ("allow", "../x", "a.com"),
                 ("disallow", "never-ran", "--clear"), ("allowed", "never-ran")):
        refused = lnk(sandbox_env, *args)
        assert refused.returncode == 125 and refused.stderr.count("\n") == 1, refused
    assert not (Path(sandbox_env["LNK_HOME"]) / "sandbox").exists()
    wire_folder(sandbox_env, "ran").mkdir(parents=True)
    refused = lnk(sandbox_env, "disallow", "ran", "docs.example.com")
    assert refused.returncode == 125 and "not among its additions" in refused.stderr


def test_nothing_inside_can_read_or_change_the_additions(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    settings = Path(sandbox_env["LNK_HOME"])
    spec = wire_spec(write_spec, testnet, "hidden")
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "hidden", "docs.example.com").returncode == 0
    added = wire_folder(sandbox_env, "hidden") / "allowed"
    before = added.read_bytes()
    # A spec that writes the very folder Link's settings are in: they stay hidden.
    spec = write_spec(f'name = "hidden"\n[files]\nread = {toml_list(testnet)}\n'
                      f"write = {toml_list(settings.parent)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt"]\n')
    a = Q(str(added))
    result = run_sandbox(spec, "/bin/sh", "-c",
                         f"cat {a}; echo r=$?; echo '{{}}' > {a}; echo w=$?; "
                         f"rm -f {a}; echo d=$?; ls {Q(str(added.parent))}; echo l=$?",
                         env=sandbox_env)
    assert "docs.example.com" not in result.stdout
    for step in ("r", "w", "l"):
        assert f"{step}=0" not in result.stdout, result.stdout
    assert added.read_bytes() == before


_ECHO = """
import socket, sys
try:
    with socket.create_connection(("denied.lnkt", 7), timeout=10) as s:
        s.sendall(b"ping")
        print(s.recv(10).decode())
except OSError as error:
    print(type(error).__name__)
"""


def test_an_endpoint_added_with_tcp_is_taken_at_the_next_start_and_taken_away_too(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """`allow --tcp`: an endpoint is a socket inside made before the program starts, so
    the wire's next start takes it (a program that speaks no proxy reaches it by name);
    `disallow --tcp`, and the start after has no such name."""
    spec = wire_spec(write_spec, testnet, "ends")
    unreached = run_sandbox(spec, PYTHON, "-I", "-c", _ECHO, env=sandbox_env).stdout
    assert unreached in ("gaierror\n", "OSError\n"), unreached  # no name, or no route
    assert lnk(sandbox_env, "allow", "--tcp", "ends", "denied.lnkt:7").returncode == 0
    result = run_sandbox(spec, PYTHON, "-I", "-c", _ECHO, env=sandbox_env)
    assert result.stdout == "ping\n", result
    assert "the endpoints denied.lnkt:7" in result.stderr
    log = (wire_folder(sandbox_env, "ends") / "log").read_text()
    assert "\tallowed\tdenied.lnkt:7\t" in log and "kind=endpoint" in log
    assert "change=allow-tcp" in log
    assert lnk(sandbox_env, "disallow", "--tcp", "ends", "denied.lnkt:7").returncode == 0
    assert run_sandbox(spec, PYTHON, "-I", "-c", _ECHO, env=sandbox_env).stdout == unreached


@pytest.mark.parametrize("endpoint", ["denied.lnkt", "*:7", "127.0.0.1:7", "localhost:7",
                                      "x.localhost:7", "api.openai.com:443", "a b:7"])
def test_a_bad_endpoint_is_one_line_and_changes_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
    endpoint: str,
) -> None:
    spec = wire_spec(write_spec, testnet, "strict-ends")
    run_sandbox(spec, "true", env=sandbox_env)
    refused = lnk(sandbox_env, "allow", "--tcp", "strict-ends", endpoint)
    assert refused.returncode == 125 and refused.stderr.count("\n") == 1, refused
    assert "nothing changed" in refused.stderr
    assert not (wire_folder(sandbox_env, "strict-ends") / "allowed").exists()


def test_an_endpoint_the_plan_cannot_place_is_said_and_the_start_goes_on_without_it(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """`*.lnkt:3128` would take the proxy's own port on every loopback address: the
    start says so and takes none of the endpoint additions (nothing more opens)."""
    spec = wire_spec(write_spec, testnet, "placed")
    run_sandbox(spec, "true", env=sandbox_env)
    assert lnk(sandbox_env, "allow", "--tcp", "placed", "*.lnkt:3128").returncode == 0
    assert lnk(sandbox_env, "allow", "--tcp", "placed", "denied.lnkt:7").returncode == 0
    result = run_sandbox(spec, PYTHON, "-I", "-c", _ECHO, env=sandbox_env)
    assert result.stdout in ("gaierror\n", "OSError\n"), result
    assert "lnk-sandbox: the wire placed's endpoint additions are not taken: *.lnkt:3128: " \
        "port 3128 is the proxy's own port" in result.stderr
    assert curl_code(run_sandbox, spec, sandbox_env, "http://allowed.lnkt/ok") == "200"


def test_a_fifo_where_the_additions_are_hangs_nothing(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """A FIFO would hold a reader that opened it plainly for ever (the proxy's loop, a
    start, `allowed`): each refuses it at once and says so."""
    import os

    spec = wire_spec(write_spec, testnet, "piped")
    run_sandbox(spec, "true", env=sandbox_env)
    os.mkfifo(wire_folder(sandbox_env, "piped") / "allowed")
    result = run_sandbox(spec, "curl", "-s", "-o", "/dev/null", "-m", "5", "-w",
                         "%{http_code}", "http://denied.lnkt/ok", env=sandbox_env)
    assert result.stdout == "403" and "not a regular file" in result.stderr, result
    shown = lnk(sandbox_env, "log", "piped", "--refused").stdout
    assert "the wire's additions cannot be read (not a regular file)" in shown, shown
    refused = lnk(sandbox_env, "allowed", "piped")
    assert refused.returncode == 125 and "not a regular file" in refused.stderr
    assert lnk(sandbox_env, "disallow", "piped", "--clear").returncode == 0


def test_explain_and_status_show_the_additions_apart_from_the_spec(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """The issue's "explain and status show them apart from the spec's own hosts": each
    says what the person added, on a line of its own naming the command, and a wire
    with none says nothing of it."""
    spec = wire_spec(write_spec, testnet, "shown")
    run_sandbox(spec, "true", env=sandbox_env)
    plain = lnk(sandbox_env, "explain", "--spec", str(spec))
    assert plain.returncode == 0 and "added by you" not in plain.stdout, plain
    assert lnk(sandbox_env, "allow", "shown", "docs.example.com").returncode == 0
    assert lnk(sandbox_env, "allow", "shown", "*.mirror.example.net:8443").returncode == 0
    explained = lnk(sandbox_env, "explain", "--spec", str(spec))
    added = [line for line in explained.stdout.splitlines() if "added by you" in line]
    assert len(added) == 1 and "lnk-sandbox allow" in added[0], explained.stdout
    assert added[0].endswith(": docs.example.com, *.mirror.example.net:8443"), added
    as_json = json.loads(lnk(sandbox_env, "explain", "--spec", str(spec), "--json").stdout)
    assert "docs.example.com" in json.dumps(as_json)
    status = json.loads(lnk(sandbox_env, "status", "--json").stdout)
    wires = {wire["wire"]: wire for wire in status["wires"]}
    assert wires["shown"]["added_hosts"] == ["docs.example.com", "*.mirror.example.net:8443"]
    text = lnk(sandbox_env, "status").stdout
    assert "shown added by you, apart from its spec (lnk-sandbox allowed shown): " \
           "docs.example.com, *.mirror.example.net:8443" in text, text


# The step programs' first lines: marks written whole (a rename), waits on the test's
# marks, one echo to NAME:7 (the socket kept, and what it said or the error's name), and
# a kept connection written to until it is closed (its time marked).
_MARKED_ECHO = """
import os, socket, sys, time
marks = sys.argv[1]
def mark(name, text):
    open(f"{marks}/{name}.tmp", "w").write(text)
    os.rename(f"{marks}/{name}.tmp", f"{marks}/{name}")
def wait(name):
    while not os.path.exists(f"{marks}/{name}"):
        time.sleep(0.02)
def echo():
    try:
        s = socket.create_connection((NAME, 7), timeout=10)
        s.sendall(b"ping")
        return s, s.recv(10).decode()
    except OSError as error:
        return None, type(error).__name__
def held_until_closed(kept):
    kept.settimeout(20)
    try:
        while True:
            kept.sendall(b"x" * 1024)
            if not kept.recv(65536):
                break
    except OSError:
        pass
    mark("closed", repr(time.time()))
"""
_ENDPOINT_STEPS = _MARKED_ECHO.replace("NAME", '"denied.lnkt"') + """
mark("first", echo()[1])
wait("allowed")
began = time.monotonic()
kept, said = echo()
mark("placing", f"{time.monotonic() - began:.3f}")
address = kept.getpeername()[0]
mark("second", said)
held_until_closed(kept)
wait("disallowed")
mark("third", echo()[1])
# The address it was given: its socket inside closed too (within a second).
deadline, said = time.time() + 1, "open"
while time.time() < deadline:
    try:
        socket.create_connection((address, 7), timeout=1).close()
    except ConnectionRefusedError:
        said = "refused"
        break
    time.sleep(0.05)
mark("direct", said)
"""


@pytest.mark.parametrize("how", ["tcp", "clear", "broken"])
def test_an_endpoint_added_with_tcp_is_taken_at_the_next_call_and_taken_away_within_a_second(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    how: str,
) -> None:
    """`allow --tcp` on a running sandbox with DNS of its own (its spec names an
    endpoint): the program's next lookup of the name gets an address inside, where the
    proxy had a socket made since, and its connection goes through, without a restart;
    `disallow --tcp` (or `--clear`, or a broken file) closes the open connection within
    a second, and the next lookup is refused again."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = write_spec(f'name = "live-ends"\n[files]\nread = {toml_list(testnet)}\n'
                      f'write = {toml_list(marks)}\n[network]\nmode = "proxy"\n'
                      '[tcp]\nendpoints = ["allowed.lnkt:7"]\n')
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                            _ENDPOINT_STEPS, str(marks)], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = wait_until(lambda: (marks / "first").exists() and (marks / "first").read_text(),
                           "the first lookup")
        assert first == "gaierror", first
        allowed = lnk(sandbox_env, "allow", "--tcp", "live-ends", "denied.lnkt:7")
        assert allowed.returncode == 0, allowed.stderr
        assert "from its next call" in allowed.stdout, allowed.stdout
        (marks / "allowed").touch()
        second = wait_until(lambda: (marks / "second").exists()
                            and (marks / "second").read_text(), "the call after allow")
        assert second == "ping", second
        taken = _take_away(sandbox_env, "live-ends", how, "denied.lnkt:7")
        closed = float(str(wait_until(lambda: (marks / "closed").exists()
                                      and (marks / "closed").read_text(), "the close")))
        print(f"HOW: the first lookup and connection after allow took "
              f"{(marks / 'placing').read_text()} s (its socket made inside then); the "
              f"endpoint's connection closed {closed - taken:.3f} s after the file changed")
        assert closed - taken < 1.0
        (marks / "disallowed").touch()
        _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert (marks / "third").read_text() == "gaierror", stderr
    assert (marks / "direct").read_text() == "refused"
    log = (wire_folder(sandbox_env, "live-ends") / "log").read_text()
    lines = [line.split("\t") for line in log.splitlines()]
    ended = [fields for fields in lines if fields[1] == "ended" and fields[2] == "denied.lnkt:7"]
    assert len(ended) == 1 and "closed=taken-away" in ended[0][3], log
    assert any(fields[1] == "allowed" and fields[2] == "denied.lnkt" and "type=A" in fields[3]
               for fields in lines), log


_LOOKED_UP_LATER = """
import os, socket, sys, time
marks = sys.argv[1]
{before}
while not os.path.exists(f"{{marks}}/go"):
    time.sleep(0.02)
for name in sys.argv[2:]:
    try:
        with socket.create_connection((name.split(":")[0], 7), timeout=10) as s:
            s.sendall(b"ping")
            print(name, s.recv(10).decode())
    except OSError as error:
        print(name, type(error).__name__)
"""


def _wait_for_start(env: dict[str, str], wire: str) -> None:
    """Until the wire's run has its `started` line (its folder then exists)."""
    log = wire_folder(env, wire) / "log"
    wait_until(lambda: log.exists() and "\tstarted\t" in log.read_text(), "the run's start")


def _looked_up_after(sandbox_env: dict[str, str], spec: Path, marks: Path, added: str,
                     names: tuple[str, ...], before: str = "") -> list[str]:
    """A running program (after `before`) that waits, `allow --tcp` of `added` on its
    wire, then its lookups of `names` and a connection to port 7 of each: what each got."""
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                            _LOOKED_UP_LATER.format(before=before), str(marks), *names],
                           env=sandbox_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        _wait_for_start(sandbox_env, "later")
        allowed = lnk(sandbox_env, "allow", "--tcp", "later", added)
        assert allowed.returncode == 0, allowed.stderr
        (marks / "go").touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert run.returncode == 0, stderr
    return stdout.splitlines()


def _later_spec(write_spec: WriteSpec, testnet: Path, marks: Path, endpoint: str) -> Path:
    return write_spec(f'name = "later"\n[files]\nread = {toml_list(testnet)}\n'
                      f'write = {toml_list(marks)}\n[network]\nmode = "proxy"\n'
                      f'[tcp]\nendpoints = ["{endpoint}"]\n')


def test_a_wildcard_endpoint_added_to_a_running_sandbox_gives_each_name_its_address(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """`allow --tcp WIRE *.lnkt:7` on a running sandbox (its spec's endpoint on port 9):
    one socket on port 7 on every address inside, each name under the domain its own
    address, both reached by name."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = _later_spec(write_spec, testnet, marks, "allowed.lnkt:9")
    said = _looked_up_after(sandbox_env, spec, marks, "*.lnkt:7", ("denied.lnkt", "other.lnkt"))
    assert said == ["denied.lnkt ping", "other.lnkt ping"], said
    log = (wire_folder(sandbox_env, "later") / "log").read_text()
    answers = set(re.findall(r"\tallowed\t(?:denied|other)\.lnkt\tkind=dns type=A answer=(\S+)",
                             log))
    assert len(answers) == 2, log


def test_an_endpoint_added_on_another_port_of_a_name_the_spec_lists_gets_its_socket(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """The spec lists allowed.lnkt:9 and the program looked the name up (its answer
    kept by the sandbox's DNS); `allow --tcp allowed.lnkt:7`: the next lookup has the
    name's socket on port 7 made, at the address the name had."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = _later_spec(write_spec, testnet, marks, "allowed.lnkt:9")
    said = _looked_up_after(sandbox_env, spec, marks, "allowed.lnkt:7", ("allowed.lnkt",),
                            "socket.getaddrinfo('allowed.lnkt', 9)")
    assert said == ["allowed.lnkt ping"], said


@pytest.mark.parametrize(("spec_endpoint", "added", "before"), [
    # The program listens on every address on port 7000 before the addition: its port.
    ("allowed.lnkt:7", "denied.lnkt:7000",
     "held = socket.create_server(('0.0.0.0', 7000))"),
    # A `*.` endpoint's port is taken on every address: the spec's endpoint has port 7.
    ("allowed.lnkt:7", "*.lnkt:7", ""),
    # The program took the very address the name would get (the next one), reusable.
    ("allowed.lnkt:7", "denied.lnkt:7000",
     "held = socket.socket(); held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
     "held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1); "
     "held.bind(('127.53.0.2', 7000)); held.listen()"),
])
def test_an_endpoint_that_cannot_be_placed_in_a_running_sandbox_is_refused_and_said(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    spec_endpoint: str, added: str, before: str,
) -> None:
    """A port taken inside: the name is refused at its lookup, the log's line says why
    in one line, and nothing else changed (the spec's endpoint still served)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = _later_spec(write_spec, testnet, marks, spec_endpoint)
    said = _looked_up_after(sandbox_env, spec, marks, added, ("denied.lnkt", "allowed.lnkt"),
                            before)
    assert said == ["denied.lnkt gaierror", "allowed.lnkt ping"], said
    log = (wire_folder(sandbox_env, "later") / "log").read_text()
    refused = [line for line in log.splitlines()
               if "\trefused\tdenied.lnkt\tkind=dns type=A " in line]
    assert refused and all("not placed in the running sandbox: cannot listen on " in line
                           and "Address already in use" in line for line in refused), log


_CONNECT_LATER = """
import os, socket, sys, time
def connect():
    with socket.create_connection(("127.0.0.1", 3128), timeout=10) as s:
        s.sendall(b"CONNECT denied.lnkt:7 HTTP/1.1\\r\\nHost: denied.lnkt:7\\r\\n\\r\\n")
        head = s.recv(4096).split(b"\\r\\n")[0].decode()
        if " 200 " not in head:
            return head
        s.sendall(b"ping")
        return s.recv(10).decode()
print(connect(), flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
print(connect())
"""


def test_an_endpoint_added_to_a_running_sandbox_without_dns_is_reached_through_the_proxy(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """A sandbox that started with no DNS of its own (no endpoint, no [lan] name): a
    program that speaks the proxy reaches the added endpoint at its next call, as it
    reaches the spec's endpoints, through a CONNECT (by name: the next test)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = wire_spec(write_spec, testnet, "no-dns", marks)
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                            _CONNECT_LATER, str(marks / "go")], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        assert run.stdout.readline() == "HTTP/1.1 403 Forbidden\n"
        assert lnk(sandbox_env, "allow", "--tcp", "no-dns", "denied.lnkt:7").returncode == 0
        (marks / "go").touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert stdout == "ping\n", stderr


_TCP_LOOKUP = """
import os, socket, struct, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
name = b"".join(bytes([len(label)]) + label for label in b"denied.lnkt".split(b".")) + b"\\0"
query = struct.pack(">HHHHHH", 0xABCD, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
with socket.create_connection(("127.0.0.1", 53), timeout=10) as s:
    s.sendall(struct.pack(">H", len(query)) + query)
    answer = s.recv(4096)[2:]
address = socket.inet_ntoa(answer[-4:])
with socket.create_connection((address, 7), timeout=10) as s:
    s.sendall(b"ping")
    print(address, s.recv(10).decode())
"""


def _run_then_allow(write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
                    tmp_path: Path, program: str) -> tuple[str, str]:
    """`program` run in a sandbox of the wire `later`; once it has started,
    `allow --tcp later denied.lnkt:7`, then the program's go; its output."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = _later_spec(write_spec, testnet, marks, "allowed.lnkt:9")
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                            program, str(marks / "go")], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_start(sandbox_env, "later")
        assert lnk(sandbox_env, "allow", "--tcp", "later", "denied.lnkt:7").returncode == 0
        (marks / "go").touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    return stdout, stderr


def test_an_added_endpoint_asked_over_tcp_dns_first_waits_for_its_socket(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """The sandbox's DNS over TCP (a reply too long for UDP is asked again there): the
    first query for an added endpoint's name holds that connection until the socket is
    made inside, then answers with the name's address, which is reached."""
    stdout, stderr = _run_then_allow(write_spec, testnet, sandbox_env, tmp_path, _TCP_LOOKUP)
    assert re.fullmatch(r"127\.53\.0\.\d+ ping\n", stdout), (stdout, stderr)


_AT_ONCE = """
import os, socket, sys, threading, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
said = []
def echo():
    try:
        with socket.create_connection(("denied.lnkt", 7), timeout=10) as s:
            s.sendall(b"ping")
            said.append(s.recv(10).decode())
    except OSError as error:
        said.append(type(error).__name__)
threads = [threading.Thread(target=echo) for _ in range(20)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(sorted(set(said)), len(said))
"""


def test_many_lookups_at_once_of_an_added_name_make_its_socket_once(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """Twenty lookups at once of a name just added: one helper makes its socket (a
    second would find the place taken, and the name would be refused), and every
    lookup waits for it and is answered."""
    stdout, stderr = _run_then_allow(write_spec, testnet, sandbox_env, tmp_path, _AT_ONCE)
    assert stdout == "['ping'] 20\n", (stdout, stderr)


_WITHOUT_DNS_STEPS = _MARKED_ECHO.replace("NAME", '"db.lnkt"') + """
def looked_up():
    began = time.monotonic()
    try:
        socket.getaddrinfo("db.lnkt", 7)
        said = "found"
    except socket.gaierror as error:
        said = f"gaierror {error.errno}"
    return said, time.monotonic() - began
if sys.argv[2] == "woken":  # a call through the proxy first: it serves, its watch runs
    with socket.create_connection(("127.0.0.1", 3128), timeout=10) as s:
        s.sendall(b"CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n")
        assert b" 200 " in s.recv(4096)
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind(("127.0.0.1", 53))
    mark("bound", "bound")
except OSError as error:
    mark("bound", type(error).__name__)
mark("resolv", open("/etc/resolv.conf").read())
said, took = looked_up()
mark("first", f"{said} {took:.4f}")
mark("listed", socket.gethostbyname("denied.lnkt"))  # the machine's hosts names it
wait("allowed")
began = time.monotonic()
while True:
    kept, said = echo()
    if kept is not None or time.monotonic() - began > 5:
        break
    time.sleep(0.02)
mark("placing", f"{time.monotonic() - began:.3f}")
mark("second", said)
held_until_closed(kept)
wait("disallowed")
mark("third", echo()[1])
"""


@pytest.mark.parametrize("proxy", ["idle", "woken"])
def test_a_sandbox_without_dns_gets_its_dns_when_an_endpoint_is_added(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    proxy: str,
) -> None:
    """A sandbox of the proxy's network with no DNS of its own (no endpoint, no [lan]
    name): its resolv.conf names 127.0.0.1, where nothing listens, so a lookup fails at
    once (nothing logged), and the program cannot take port 53 itself; `allow --tcp`,
    and within the watch's quarter second its proxy serves DNS there: the program's
    lookup gets the name's address inside and its connection goes through, without a
    restart; `disallow --tcp` closes it within a second, and the name is refused. The
    proxy `idle` (no call yet: it looks at the additions while it waits for one) or
    `woken` (a call first: its watch looks)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = wire_spec(write_spec, testnet, "late-dns", marks)
    env = {**sandbox_env, "LNK_SANDBOX_DNS": DNS_SERVER}  # the test net's DNS names db.lnkt
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                            _WITHOUT_DNS_STEPS, str(marks), proxy], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = str(wait_until(lambda: (marks / "first").exists()
                               and (marks / "first").read_text(), "the first lookup"))
        assert first.startswith(f"gaierror {socket.EAI_AGAIN} "), first
        assert float(first.split()[-1]) < 1.0, first  # refused at once, no resolver's wait
        assert (marks / "bound").read_text() == "PermissionError"
        assert "nameserver 127.0.0.1\n" in (marks / "resolv").read_text()
        # A name the machine's hosts lists is answered there, as before, never asked.
        assert (marks / "listed").read_text() == ORIGIN_ADDRESS
        log = wire_folder(sandbox_env, "late-dns") / "log"
        assert "kind=dns" not in (log.read_text() if log.exists() else "")
        allowed = lnk(sandbox_env, "allow", "--tcp", "late-dns", "db.lnkt:7")
        assert allowed.returncode == 0, allowed.stderr
        (marks / "allowed").touch()
        second = wait_until(lambda: (marks / "second").exists()
                            and (marks / "second").read_text(), "the call after allow")
        assert second == "ping", second
        taken = _take_away(sandbox_env, "late-dns", "tcp", "db.lnkt:7")
        closed = float(str(wait_until(lambda: (marks / "closed").exists()
                                      and (marks / "closed").read_text(), "the close")))
        print(f"HOW ({proxy}): the first lookup took {first.split()[-1]} s before allow; "
              f"the name was reached {(marks / 'placing').read_text()} s after allow (its DNS "
              f"and socket made inside then); the connection closed {closed - taken:.3f} s "
              "after disallow")
        assert closed - taken < 1.0
        (marks / "disallowed").touch()
        _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert (marks / "third").read_text() == "gaierror", stderr
    lines = [line.split("\t") for line in log.read_text().splitlines()]
    ended = [fields for fields in lines if fields[1] == "ended" and fields[2] == "db.lnkt:7"]
    assert len(ended) == 1 and "closed=taken-away" in ended[0][3], lines
    assert any(fields[1] == "allowed" and fields[2] == "db.lnkt" and "type=A" in fields[3]
               for fields in lines), lines


def test_a_dns_that_cannot_be_made_is_one_refused_line_an_endpoint_and_not_tried_again(
    tmp_path: Path,
) -> None:
    """The helper fails (here: the socket the proxy names the sandbox's network by is no
    socket; a program inside cannot make it fail, port 53 being below 1024 and it has no
    capability, which the test above checks): one `refused` line for each added
    endpoint, saying why; not tried again until the added endpoints change."""
    import asyncio
    import os

    from lnk_common.additions import Entry, update_additions
    from lnk_common.wirelog import WireLog
    from lnk_proxy.decide import parse_hosts
    from lnk_proxy.dns_server import DnsOnAddition
    from lnk_proxy.machine import Machine
    from lnk_proxy.server import Proxy

    settings, wire = tmp_path / "settings", "late-fail"
    (settings / "sandbox" / "wires" / wire).mkdir(parents=True)
    proxy = Proxy(rules=parse_hosts(("allowed.lnkt",)), machine=Machine.gather(),
                  log=WireLog(str(settings), wire), settings=str(settings), wire=wire,
                  say=lambda _line: None)
    read_end, write_end = os.pipe()

    class NoSocket:
        def fileno(self) -> int:
            return read_end

    late = DnsOnAddition(proxy, NoSocket(), set(), rules=(), server=None)  # type: ignore[arg-type]

    def add(*endpoints: str) -> None:
        update_additions(str(settings), wire, lambda entries: (*entries, *(
            Entry(endpoint, "2026-12-05T00:00:00Z", "test (uid 0)", tcp=True)
            for endpoint in endpoints)))

    async def attempt() -> None:
        late.open()
        await asyncio.gather(*late.tasks)

    try:
        assert not late.wanted()  # no endpoint added: nothing to make
        add("denied.lnkt:7", "*.other.lnkt:9")
        assert late.wanted()
        asyncio.run(attempt())
        assert late.service is None and not late.wanted()  # not tried again
        add("third.lnkt:7")
        assert late.wanted()  # the added endpoints changed: tried again
    finally:
        os.close(read_end)
        os.close(write_end)
        proxy.log.close()
    lines = (settings / "sandbox" / "wires" / wire / "log").read_text().splitlines()
    refused = [line.split("\t")[1:] for line in lines if "\trefused\t" in line]
    assert [target for _, target, _ in refused] == ["denied.lnkt", "*.other.lnkt"], lines
    assert all(detail == "kind=dns reason=an endpoint `lnk-sandbox allow --tcp` added cannot "
               "be named in the running sandbox: its DNS cannot be made: the sandbox's "
               "network cannot be named (Inappropriate ioctl for device)"
               for _, _, detail in refused), refused


def test_allow_tcp_says_when_this_machine_s_hosts_names_the_endpoint(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
) -> None:
    """A sandbox without DNS of its own keeps this machine's /etc/hosts, which answers a
    name it lists before the DNS the proxy serves once an endpoint is added: `allow
    --tcp` says so for such a name (denied.lnkt, which the test net puts there), and
    for no other (db.lnkt, a `*.` one)."""
    spec = wire_spec(write_spec, testnet, "hosts-named")
    run_sandbox(spec, "true", env=sandbox_env)
    said = {endpoint: lnk(sandbox_env, "allow", "--tcp", "hosts-named", endpoint)
            for endpoint in ("denied.lnkt:7", "db.lnkt:7", "*.other.lnkt:9")}
    assert all(done.returncode == 0 for done in said.values()), said
    assert said["denied.lnkt:7"].stdout.splitlines()[1] == (
        "this machine's /etc/hosts names denied.lnkt: a running sandbox that started without "
        "DNS of its own reads that file before its DNS (nsswitch's `files`), and gets the "
        "name inside from its next start")
    assert "/etc/hosts" not in said["db.lnkt:7"].stdout + said["*.other.lnkt:9"].stdout
