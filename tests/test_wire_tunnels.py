"""N5 (port 80), N8-N10 and the proxy's forwarding bugs attacked from inside a real sandbox,
with raw sockets and real curl, against the test network's origin (tests/testnet.py).

A tunnel to port 80 is served as HTTP: each request's Host must be the tunnel's host
(domain fronting through a CDN is a Host naming another site), each request is a call of
its own (the log, calls a minute, the pause), and after a 101 the bytes are relayed."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    call_lines,
    end_run,
    toml_list,
    wire_log_of,
)
from tests.test_wire import CountingDNS, _find_child
from tests.testnet import ORIGIN_ADDRESS

PYTHON = "/usr/bin/python3"
WIRE = "tunnels"


@pytest.fixture
def names(testnet: Path) -> Iterator[CountingDNS]:
    server = CountingDNS({"allowed.lnkt": ORIGIN_ADDRESS, "other.lnkt": ORIGIN_ADDRESS})
    yield server
    server.stop()


Wire = tuple[Path, dict[str, str]]


@pytest.fixture
def tunnels(testnet: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
            names: CountingDNS, tmp_path: Path) -> Wire:
    return spec_with(write_spec, testnet, sandbox_env, names, tmp_path)


def spec_with(write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str],
              names: CountingDNS, tmp_path: Path, extra: str = "") -> Wire:
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    spec = write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(testnet)}\n'
                      f"write = {toml_list(marks)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt"]\n' + extra)
    return spec, {**sandbox_env, "LNK_SANDBOX_DNS": f"127.0.0.1:{names.port}"}


def log_lines(env: dict[str, str]) -> list[list[str]]:
    return [line.split("\t")[1:] for line in call_lines(wire_log_of(env, WIRE)).splitlines()]


def run_python(run_sandbox: RunSandbox, wire: Wire, code: str, *args: str) -> object:
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", code, *args, env=env)
    assert result.returncode == 0, result
    return eval(result.stdout)  # noqa: S307 (what the test's own script printed)


# A raw client inside the sandbox: `exchange(first, then)` opens a tunnel with `first` (a
# CONNECT, or "" for none), sends `then`, and returns every response it reads until the
# proxy closes (status line and the body's last line each).
_CLIENT = r'''
import re, socket
def exchange(first, then, wait_close=True):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    if first:
        s.sendall(first)
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        if b" 200 " not in head.split(b"\r\n")[0]:
            return ["no tunnel: " + head.decode()]
    s.sendall(then)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except OSError:
        pass
    found = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length: *([0-9]+)", head)
        size = int(length.group(1)) if length else 0
        body, data = data[:size], data[size:]
        found.append((head.split(b"\r\n")[0].decode(), body.decode().strip()))
    return found
CONNECT = b"CONNECT allowed.lnkt:80 HTTP/1.1\r\nHost: allowed.lnkt:80\r\n\r\n"
'''


# -- N5: a tunnel to port 80 carries only requests to its host --------------------------------


def test_N5_curl_proxytunnel_to_port_80_with_another_host_gets_400(
    run_sandbox: RunSandbox, tunnels: Wire
) -> None:
    spec, env = tunnels
    fronted = run_sandbox(spec, "curl", "-s", "-m", "10", "-p", "-w", "\n%{http_code}",
                          "-H", "Host: other.lnkt", "http://allowed.lnkt/ok", env=env)
    assert fronted.stdout == ("the Host header names another host than the tunnel's "
                              "(allowed.lnkt:80)\n\n400"), fronted
    served = run_sandbox(spec, "curl", "-s", "-m", "10", "-p", "-w", "\n%{http_code}",
                         "http://allowed.lnkt/ok", env=env)
    assert served.stdout == "fine\n\n200", served
    lines = log_lines(env)
    assert ["refused", "allowed.lnkt:80", "reason=the Host header names another host than "
            "the tunnel's (allowed.lnkt:80)"] in lines, lines
    # Only the request that went out is a call: the fronted one never reached the origin.
    assert [line[:2] for line in lines if line[0] == "allowed"] == [
        ["allowed", "allowed.lnkt:80"]], lines


_INSIDE = _CLIENT + r'''
get = b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\r\n\r\n"
print({
    "second request fronted": exchange(CONNECT, get + b"GET /ok HTTP/1.1\r\nHost: other.lnkt\r\n\r\n"),
    "absolute form elsewhere": exchange(CONNECT, b"GET http://other.lnkt/ok HTTP/1.1\r\nHost: other.lnkt\r\n\r\n"),
    "host with another port": exchange(CONNECT, b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt:8080\r\n\r\n"),
    "bare LF": exchange(CONNECT, b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\nX: y\r\n\r\n"),
    "bare CR": exchange(CONNECT, b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\rX: y\r\n\r\n"),
    "control character": exchange(CONNECT, b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\x01\r\n\r\n"),
    "CL+TE": exchange(CONNECT, b"POST /p HTTP/1.1\r\nHost: allowed.lnkt\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    "not HTTP": exchange(CONNECT, b"SSH-2.0-OpenSSH_9.2\r\n\r\n"),
    "HTTP/1.0 without Host": exchange(CONNECT, b"GET /ok HTTP/1.0\r\n\r\n"),
    "CONNECT in the tunnel": exchange(CONNECT, b"CONNECT other.lnkt:80 HTTP/1.1\r\nHost: other.lnkt:80\r\n\r\n"),
})
'''


def test_N5_every_request_in_a_port_80_tunnel_passes_the_head_check_and_names_its_host(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path,
    sandbox_env: dict[str, str], names: CountingDNS, tmp_path: Path,
) -> None:
    # Ten refusals in a row: the pause's threshold is set above them.
    tunnels = spec_with(write_spec, testnet, sandbox_env, names, tmp_path,
                        "[pause]\nrefusals = 100\ntargets = 100\n")
    found = run_python(run_sandbox, tunnels, _INSIDE)
    bad = "HTTP/1.1 400 Bad Request"
    assert found == {
        "second request fronted": [
            ("HTTP/1.1 200 OK", "fine"),
            (bad, "the Host header names another host than the tunnel's (allowed.lnkt:80)")],
        "absolute form elsewhere": [
            (bad, "a request in the tunnel to allowed.lnkt:80 names another host "
                  "(other.lnkt:80)")],
        "host with another port": [
            (bad, "the Host header names another host than the tunnel's (allowed.lnkt:80)")],
        "bare LF": [(bad, "the request head has a bare LF")],
        "bare CR": [(bad, "the request head has a bare CR")],
        "control character": [(bad, "the request head has a control character (0x01)")],
        "CL+TE": [(bad, "both Content-Length and Transfer-Encoding")],
        "not HTTP": [(bad, "the request line is not METHOD SP TARGET SP VERSION")],
        "HTTP/1.0 without Host": [(bad, "an HTTP/1.0 request without Host")],
        "CONNECT in the tunnel": [(bad, "a CONNECT inside a tunnel")],
    }, found
    refused = [line for line in log_lines(tunnels[1]) if line[0] == "refused"]
    assert len(refused) == 10 and all(line[1] == "allowed.lnkt:80" for line in refused), refused
    assert ["refused", "allowed.lnkt:80", "reason=the request head has a bare LF"] in refused


_PIPELINED = _CLIENT + r'''
get = b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\r\n\r\n"
print(exchange(CONNECT, get * 3))
'''


def test_N8_pipelined_requests_in_a_port_80_tunnel_are_each_a_call(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path,
    sandbox_env: dict[str, str], names: CountingDNS, tmp_path: Path,
) -> None:
    wire = spec_with(write_spec, testnet, sandbox_env, names, tmp_path,
                     "calls_per_minute = 2\n")
    found = run_python(run_sandbox, wire, _PIPELINED)
    assert isinstance(found, list) and len(found) == 3, found
    assert found[:2] == [("HTTP/1.1 200 OK", "fine")] * 2, found
    status, reason = found[2]
    assert status == "HTTP/1.1 429 Too Many Requests", found
    assert reason.startswith("more than 2 calls in a minute on this wire; try again in "), found
    lines = log_lines(wire[1])
    assert [line[1] for line in lines if line[0] == "allowed"] == ["allowed.lnkt:80"] * 2
    assert all("kind=http" in line[2] for line in lines if line[0] == "allowed"), lines
    assert [line[2].split(";")[0] for line in lines if line[0] == "refused"] == [
        "reason=more than 2 calls in a minute on this wire"], lines


_UPGRADE = _CLIENT + r'''
def upgrade(first, request):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    if first:
        s.sendall(first)
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
    # The first frame goes with the request, before the 101: it is relayed after it.
    s.sendall(request + b"early;")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(1)
    echoed = b""
    while len(echoed) < len(b"early;"):
        echoed += s.recv(100)
    s.sendall(b"\x81\x04ping")
    while len(echoed) < len(b"early;\x81\x04ping"):
        echoed += s.recv(100)
    s.shutdown(socket.SHUT_WR)
    rest = s.recv(100)
    return head.split(b"\r\n")[0].decode(), echoed, rest
ask = (b"Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
       b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
h2c = (b"Upgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings, close\r\n"
       b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
print({
    "tunnel": upgrade(CONNECT, b"GET /upgrade HTTP/1.1\r\nHost: allowed.lnkt\r\n" + ask),
    "absolute form": upgrade(b"", b"GET http://allowed.lnkt/upgrade HTTP/1.1\r\nHost: allowed.lnkt\r\n" + ask),
    # HTTP/2 in clear would carry requests of its own past every check: not asked of
    # the server, which answers as HTTP/1.1 (the test origin's /upgrade is a file it lacks).
    "h2c": [status for status, _ in exchange(CONNECT, b"GET /upgrade HTTP/1.1\r\nHost: allowed.lnkt\r\n" + h2c)],
})
'''


def test_N5_after_101_switching_protocols_the_bytes_are_relayed_both_ways(
    run_sandbox: RunSandbox, tunnels: Wire
) -> None:
    found = run_python(run_sandbox, tunnels, _UPGRADE)
    relayed = ("HTTP/1.1 101 Switching Protocols", b"early;\x81\x04ping", b"")
    assert found == {"tunnel": relayed, "absolute form": relayed,
                     "h2c": ["HTTP/1.1 404 File not found"]}, found
    lines = log_lines(tunnels[1])
    ended = [line for line in lines if line[0] == "ended"][:2]
    assert len(ended) == 2 and all(
        "sent=12 received=12 " in line[2] and "error" not in line[2] for line in ended), lines


# -- N10: refused ClientHellos count toward a pause ------------------------------------------

_FRONTED_TLS = r'''
import socket, ssl
for _ in range(3):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT allowed.lnkt:443 HTTP/1.1\r\nHost: allowed.lnkt:443\r\n\r\n")
    assert b" 200 " in s.recv(4096)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        context.wrap_socket(s, server_hostname="other.lnkt")
    except (OSError, ssl.SSLError):
        pass
'''


def test_N10_a_burst_of_tunnels_naming_another_host_pauses_the_wire(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path,
    sandbox_env: dict[str, str], names: CountingDNS, tmp_path: Path,
) -> None:
    spec, env = spec_with(write_spec, testnet, sandbox_env, names, tmp_path,
                          "[pause]\nrefusals = 3\ntargets = 100\n")
    result = run_sandbox(spec, PYTHON, "-I", "-c", _FRONTED_TLS, env=env)
    reason = "3 calls refused within 60 s (the [pause] threshold is 3)"
    assert (f"lnk-sandbox: the wire {WIRE} is paused: {reason}; the program keeps running "
            "with no way out") in result.stderr, result
    pause = Path(env["LNK_HOME"]) / "sandbox" / "wires" / WIRE / "paused"
    assert json.loads(pause.read_text())["reason"] == reason
    refused = [line for line in log_lines(env) if line[0] == "refused"]
    assert refused == [["refused", "allowed.lnkt:443", "reason=the tunnel's TLS ClientHello "
                        "names another host (other.lnkt)"]] * 3, refused


# -- forwarding bugs ----------------------------------------------------------------------------


_NO_HOST = _CLIENT + r'''
print(exchange(b"", b"GET http://allowed.lnkt/ok HTTP/1.0\r\n\r\n"))
'''


def test_an_http_1_0_request_without_host_gets_400_saying_why(
    run_sandbox: RunSandbox, tunnels: Wire
) -> None:
    found = run_python(run_sandbox, tunnels, _NO_HOST)
    assert found == [("HTTP/1.1 400 Bad Request", "an HTTP/1.0 request without Host")], found
    assert ["refused", "allowed.lnkt:80", "reason=an HTTP/1.0 request without Host"] in \
        log_lines(tunnels[1])


# Rounds on one kept-alive connection: /drop-next makes the origin close its connection
# unanswered at the next request, which the proxy then sends again on a new connection.
_RETRIES = _CLIENT + r'''
import os, sys, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
reader = s.makefile("rb")
def get(path):
    s.sendall(b"GET http://allowed.lnkt" + path + b" HTTP/1.1\r\nHost: allowed.lnkt\r\n\r\n")
    status = reader.readline().decode().strip()
    size = 0
    while (line := reader.readline()) != b"\r\n":
        if line.lower().startswith(b"content-length:"):
            size = int(line.split(b":")[1])
    return status, reader.read(size).decode().strip()
def rounds(count):
    return [get(b"/drop-next")[0] + " " + " ".join(get(b"/ok")) for _ in range(count)]
marks = sys.argv[1]
def mark(name):
    open(os.path.join(marks, name), "w").close()
    while not os.path.exists(os.path.join(marks, name + ".go")):
        time.sleep(0.02)
found = rounds(1)
mark("first")
found += rounds(20)
mark("many")
print(found)
'''


def _sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            continue
    return count


def test_the_keep_alive_retry_keeps_its_new_connection_and_leaks_none(
    tunnels: Wire, tmp_path: Path
) -> None:
    spec, env = tunnels
    marks = tmp_path / "marks"
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c", _RETRIES,
         str(marks)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    counts = {}
    try:
        proxy = _find_child(run.pid, b"proxy")
        for name in ("first", "many"):
            deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
            while not (marks / name).exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            counts[name] = _sockets(proxy)
            (marks / f"{name}.go").touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert eval(stdout) == ["HTTP/1.1 200 OK HTTP/1.1 200 OK fine"] * 21, (stdout, stderr)  # noqa: S307
    # Twenty more retries, not one socket more: each new connection is the one kept.
    assert counts["many"] == counts["first"], counts
    retried = [line for line in log_lines(env)
               if line[0] == "ended" and "error=" in line[2]]
    assert len(retried) == 21, log_lines(env)


# An endpoint on port 80 (a name the sandbox's DNS gives an address of its own) is a
# tunnel to port 80 too: served as HTTP, its Host held to the endpoint's name.
_ENDPOINT = _CLIENT + r'''
import socket
address = socket.getaddrinfo("allowed.lnkt", 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
def direct(then):
    s = socket.create_connection((address, 80), timeout=10)
    s.sendall(then)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body.decode().strip()
print({
    "same host": direct(b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\r\nConnection: close\r\n\r\n"),
    "another host": direct(b"GET /ok HTTP/1.1\r\nHost: other.lnkt\r\n\r\n"),
})
'''


def test_N5_an_endpoint_on_port_80_carries_only_requests_to_its_name(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path,
    sandbox_env: dict[str, str], names: CountingDNS,
) -> None:
    spec = write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(testnet)}\n'
                      '[tcp]\nendpoints = ["allowed.lnkt:80"]\n')
    env = {**sandbox_env, "LNK_SANDBOX_DNS": f"127.0.0.1:{names.port}"}
    found = run_python(run_sandbox, (spec, env), _ENDPOINT)
    assert found == {
        "same host": ("HTTP/1.1 200 OK", "fine"),
        "another host": ("HTTP/1.1 400 Bad Request", "the Host header names another host "
                         "than the tunnel's (allowed.lnkt:80)"),
    }, found
    allowed = [line for line in log_lines(env)
               if line[0] == "allowed" and "kind=dns" not in line[2]]
    assert [line[1] for line in allowed] == ["allowed.lnkt:80"], allowed
    assert "kind=http" in allowed[0][2], allowed


# -- N3: this machine as it is now, not as it was when the proxy started ------------------------

# Run in a network namespace of the test's own (`unshare -rn`: as root and as an ordinary
# user alike): a standalone proxy is started, asked for two addresses while they are no
# one's, then this namespace gains an interface holding one of them (10.99.0.1/24), and
# the proxy is asked again.
_NEW_ADDRESS = r'''
set -u
ip link set lo up
ip link add lnkm0 type veth peer name lnkm1
"$1" --settings "$2" --wire renumbered --host 10.99.0.1 --host 10.99.0.7 \
    --listen 127.0.0.1:3128 &
proxy=$!
tries=0
until curl -s -o /dev/null http://127.0.0.1:3128/; do
    tries=$((tries + 1)); [ $tries -lt 400 ] || exit 3; sleep 0.05
done
ask() { curl -s -m 10 -x http://127.0.0.1:3128 -w '|%{http_code}\n' "$1"; }
ask http://10.99.0.1/
ask http://10.99.0.7/
ip addr add 10.99.0.1/24 dev lnkm0
ip link set lnkm1 up
ip link set lnkm0 up
ask http://10.99.0.1/
ask http://10.99.0.7/
kill $proxy
'''


def test_N3_an_address_this_machine_gains_after_the_proxy_started_is_refused(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings"
    settings.mkdir()
    proxy = str(Path(LNK_SANDBOX).with_name("lnk-sandbox-proxy"))
    done = subprocess.run(["unshare", "-rn", "/bin/sh", "-c", _NEW_ADDRESS, "sh", proxy,
                           str(settings)], capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    answers = [[reply, code] for reply, code
               in re.findall(r"(.*?)\n\|([0-9]{3})\n", done.stdout, re.DOTALL)]
    assert len(answers) == 4, done
    for reply, _code in answers[:2]:  # no one's yet: nothing to connect to
        assert "could not be reached" in reply, done
    assert answers[2:] == [["10.99.0.1 is this machine", "403"],
                           ["10.99.0.7 is on one of this machine's own networks", "403"]], done


# A port-80 tunnel with no request in it: decided, but no connection to the host (one
# would reach it with no call on the log).
_IDLE_TUNNEL = _CLIENT + r'''
import os, sys, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(CONNECT)
print(s.recv(100))
open(os.path.join(sys.argv[1], "open"), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "open.go")):
    time.sleep(0.02)
'''


def _connections_to(pid: int, address: str, port: int) -> int:
    """The TCP connections of process `pid` whose other end is address:port (its socket
    descriptors matched with its network namespace's table by inode)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    peer = f"{bytes(reversed(ipaddress.IPv4Address(address).packed)).hex().upper()}:{port:04X}"
    rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[2] == peer and row.split()[9] in inodes)


def test_N5_a_port_80_tunnel_opens_no_connection_before_a_request(
    tunnels: Wire, tmp_path: Path
) -> None:
    spec, env = tunnels
    marks = tmp_path / "marks"
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c", _IDLE_TUNNEL,
         str(marks)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proxy = _find_child(run.pid, b"proxy")
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while not (marks / "open").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        connections = _connections_to(proxy, ORIGIN_ADDRESS, 80)
        (marks / "open.go").touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert stdout == "b'HTTP/1.1 200 Connection established\\r\\n\\r\\n'\n", stderr
    assert connections == 0
    assert log_lines(env) == []
