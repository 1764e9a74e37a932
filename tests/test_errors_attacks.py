"""Calls that end badly, attacked in real sandboxes: a stop or a pause closing 1,000 open
connections (N9, N10), and the relay and the proxy out of descriptors (N11: every call
on the log is a call that went, every one that did not is refused with its reason).

A closed call is ordinary work: no traceback reaches the harness's stderr, whose one
line about the stop or the pause must stay readable."""

from __future__ import annotations

import os
import resource
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, WriteSpec, end_run, toml_list

PYTHON = "/usr/bin/python3"
WIRE = "errors"

# The harness's stderr after a stop or a pause of 1,000 open calls: the pause's one line,
# and room for a line of the launcher's own; never one per call.
MOST_STDERR_LINES = 3


class HoldingServer:
    """A real server on this machine's loopback (127.0.0.1 and ::1, one port) that takes
    every connection and echoes what it gets, holding it open: what a [localhost] port
    relays to. A thread of the test's own, with as many descriptors as the machine lets."""

    def __init__(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self.selector = selectors.DefaultSelector()
        self.listeners = [socket.create_server(("127.0.0.1", 0), backlog=2048)]
        self.port = self.listeners[0].getsockname()[1]
        self.listeners.append(socket.create_server(("::1", self.port),
                                                   family=socket.AF_INET6, backlog=2048))
        for listener in self.listeners:
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ, None)
        self.accepted = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        held: list[socket.socket] = []
        while not self.stopping:
            for key, _ in self.selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data is None:
                    try:
                        conn, _ = sock.accept()
                    except OSError:
                        continue
                    conn.setblocking(False)
                    self.accepted += 1
                    held.append(conn)
                    self.selector.register(conn, selectors.EVENT_READ, "conn")
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if data:
                    try:
                        sock.sendall(data)
                    except OSError:
                        data = b""
                if not data:
                    self.selector.unregister(sock)
                    sock.close()
        for sock in held:
            sock.close()
        for listener in self.listeners:
            listener.close()

    def stop(self) -> None:
        self.stopping = True
        self.thread.join()


@pytest.fixture
def holding_server() -> Iterator[HoldingServer]:
    server = HoldingServer()
    try:
        yield server
    finally:
        server.stop()


# Inside the sandbox: `tunnels` CONNECT tunnels, `requests` absolute-form requests kept
# alive after their response, `relayed` connections to the [localhost] port (each
# answered once, so each is a call carried), all left idle; a mark once all are open; then
# each connection is read until it closes. Prints how many closed, of how many.
_IDLE_CALLS = """
import resource, selectors, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
tunnels, requests, relayed, port, mark = (int(sys.argv[1]), int(sys.argv[2]),
                                          int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
pause = sys.argv[6] == "pause"
socks = []
def until(s, wanted):
    got = b""
    while wanted not in got:
        chunk = s.recv(4096)
        if not chunk:
            raise SystemExit(f"closed early: {got!r}")
        got += chunk
for _ in range(tunnels):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n")
    until(s, b"\\r\\n\\r\\n")
    socks.append(s)
for _ in range(requests):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\n\\r\\n")
    until(s, b"fine\\n")
    socks.append(s)
for _ in range(relayed):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"ping")
    until(s, b"ping")
    socks.append(s)
open(mark, "w").write("open")
if pause:  # an attempt at a metadata service pauses the wire at once
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\\r\\n"
              b"Host: 169.254.169.254\\r\\n\\r\\n")
    s.recv(4096)
    s.close()
selector = selectors.DefaultSelector()
for s in socks:
    s.setblocking(False)
    selector.register(s, selectors.EVENT_READ)
closed = 0
deadline = time.monotonic() + 20
while closed < len(socks) and time.monotonic() < deadline:
    for key, _ in selector.select(1):
        try:
            data = key.fileobj.recv(65536)
        except OSError:
            data = b""
        if not data:
            selector.unregister(key.fileobj)
            closed += 1
print(closed, len(socks))
"""


def _idle_calls_spec(write_spec: WriteSpec, testnet: Path, marks: Path, port: int) -> Path:
    return write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(testnet)}\n'
                      f"write = {toml_list(marks)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt:7", "allowed.lnkt"]\n'
                      f"[localhost]\nports = [{port}]\n")


def _open_then(sandbox_env: dict[str, str], spec: Path, tmp_path: Path, port: int,
               counts: tuple[int, int, int], then: str) -> tuple[str, str]:
    """Run the idle calls in a sandbox; once all are open, `then`: "stop" (the kill
    switch, outside) or "pause" (the sandbox pauses its wire itself); the sandbox's
    stdout and stderr."""
    mark = tmp_path / "marks" / "open"
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON, "-I", "-c", _IDLE_CALLS,
         *(str(count) for count in counts), str(port), str(mark), then],
        env=sandbox_env, cwd=mark.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        deadline = time.monotonic() + 3 * SANDBOX_TIMEOUT_SECONDS
        while not mark.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mark.exists(), run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        if then == "stop":
            done = subprocess.run([LNK_SANDBOX, "stop"], env=sandbox_env, capture_output=True,
                                  text=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
            assert done.returncode == 0, done
        stdout, stderr = run.communicate(timeout=3 * SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    return stdout, stderr


# A thousand calls of the three kinds a wire carries (a tunnel holds six descriptors in
# the proxy, so this is some 4,000 there).
_THOUSAND = (400, 300, 300)


def test_N9_a_stop_closing_1000_open_calls_prints_no_traceback(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    holding_server: HoldingServer,
) -> None:
    (tmp_path / "marks").mkdir()
    spec = _idle_calls_spec(write_spec, testnet, tmp_path / "marks", holding_server.port)
    stdout, stderr = _open_then(sandbox_env, spec, tmp_path, holding_server.port, _THOUSAND,
                                "stop")
    assert stdout.split() == ["1000", "1000"], (stdout, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(stderr.splitlines()) <= MOST_STDERR_LINES, stderr[-3000:]
    _assert_relayed_calls_ended_with_their_bytes(sandbox_env, holding_server.port)


def _assert_relayed_calls_ended_with_their_bytes(sandbox_env: dict[str, str],
                                                 port: int) -> None:
    """Each relayed call moved its ping both ways before it was closed: its ended line
    says so (a call cut by the switch is still on the log with what it carried)."""
    log = _log_lines(Path(sandbox_env["LNK_HOME"]))
    ended = [line[3] for line in log if line[1:3] == ["ended", f"localhost:{port}"]]
    assert len(ended) == _THOUSAND[2]
    assert [detail for detail in ended if " sent=4 received=4 " not in detail] == []


def test_N10_a_pause_closing_1000_open_calls_prints_its_one_line_and_no_traceback(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    holding_server: HoldingServer,
) -> None:
    (tmp_path / "marks").mkdir()
    spec = _idle_calls_spec(write_spec, testnet, tmp_path / "marks", holding_server.port)
    stdout, stderr = _open_then(sandbox_env, spec, tmp_path, holding_server.port, _THOUSAND,
                                "pause")
    assert stdout.split() == ["1000", "1000"], (stdout, stderr[-3000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.splitlines()
    assert len(lines) <= MOST_STDERR_LINES, stderr[-3000:]
    assert [line for line in lines if "paused" in line] == [
        f"lnk-sandbox: the wire {WIRE} is paused: an attempt at a cloud metadata service "
        f"(169.254.169.254:80); the program keeps running with no way out; "
        f"`lnk-sandbox resume {WIRE}` lifts it"], stderr[-3000:]
    _assert_relayed_calls_ended_with_their_bytes(sandbox_env, holding_server.port)


def test_N9_a_call_the_switch_closes_ends_as_ordinary_work_not_as_a_cancelled_task(
    holding_server: HoldingServer, tmp_path: Path,
) -> None:
    """What a stop does to each open call, seen from the event loop: the call's task must
    end as any call does, not cancelled. asyncio's stream server asks a finished
    connection task for its exception (Python 3.12), and a cancelled one raised
    CancelledError there: some 20 lines of traceback on stderr for every open call."""
    import asyncio

    from lnk_common.controls import Controls
    from lnk_common.policy import DEFAULT_PAUSE
    from lnk_common.wirelog import WireLog
    from lnk_relay.relay import Relay

    said: list[str] = []
    reported: list[dict[str, object]] = []

    async def scenario() -> list[asyncio.Task[None]]:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: reported.append(context))
        relay = Relay(log=WireLog(str(tmp_path), WIRE), settings="", wire=WIRE,
                      controls=Controls(calls_per_minute=0, pause=DEFAULT_PAUSE),
                      say=said.append, to_port=holding_server.port)
        server = await asyncio.start_server(relay.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        clients = []
        for _ in range(20):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            clients.append((reader, writer))
        tasks = list(relay.open)
        assert len(tasks) == 20
        relay.sever()
        relay.close_all()  # what the watch does on a stop or a pause
        await asyncio.wait(tasks)
        for reader, _writer in clients:
            assert await reader.read() == b""
        server.close()
        return tasks

    tasks = asyncio.run(scenario())
    assert [task.cancelled() for task in tasks] == [False] * 20
    assert [task.exception() for task in tasks] == [None] * 20
    assert reported == [] and said == []


# -- the relay and the proxy out of descriptors ---------------------------------------------------

# The helpers inherit the launcher's limits: run under this many descriptors, soft and
# hard, a relayed call holding eight (two sockets, their two duplicates, two pipes), the
# relay carries some 60 of a burst of 150, and must refuse the rest as what they are.
DESCRIPTOR_LIMIT = 512
BURST = 150

# Inside: one call (the relay starts on the first connection), a mark, then a burst of
# BURST connections held open until each is answered (its ping echoed: it went through)
# or closed (refused); counts printed, all closed, a mark; then one call after the burst.
_BURST = """
import os, selectors, socket, sys, time
port, marks, burst, through_proxy = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                     sys.argv[4] == "proxy")
def connect():
    if not through_proxy:
        return socket.create_connection(("127.0.0.1", port), timeout=20)
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n")
    return s
def wait_for(name):
    while not os.path.exists(os.path.join(marks, name)):
        time.sleep(0.05)
def answered(s):
    # Through the proxy: the CONNECT's answer, then the echo (a refusal: its status).
    got = b""
    while b"ping" not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    return got[-4:] if got.endswith(b"ping") else got[:12] or b"closed"
def one_call():
    s = connect()
    s.sendall(b"ping")
    got = answered(s)
    s.close()
    return got
print("first", one_call())
open(os.path.join(marks, "idle"), "w").close()
wait_for("measured")
socks = [connect() for _ in range(burst)]
selector = selectors.DefaultSelector()
got = {}
for s in socks:
    s.sendall(b"ping")
    s.setblocking(False)
    selector.register(s, selectors.EVENT_READ)
    got[s] = b""
through = refused = 0
deadline = time.monotonic() + 60
while through + refused < burst and time.monotonic() < deadline:
    for key, _ in selector.select(1):
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        got[key.fileobj] += data
        if got[key.fileobj].endswith(b"ping"):
            through += 1
        elif data:
            continue
        else:
            refused += 1
        selector.unregister(key.fileobj)
print("burst", through, refused)
for s in socks:
    s.close()
open(os.path.join(marks, "burst"), "w").close()
wait_for("settled")
print("after", one_call())
"""


def _helper_pid(settings: Path, helper: str) -> int:
    """The pid of this settings folder's `helper` (by its argv: no name matching)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if helper.encode() in argv and str(settings).encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no {helper} of {settings}")


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _log_lines(settings: Path) -> list[list[str]]:
    log = settings / "sandbox" / "wires" / WIRE / "log"
    return [line.split("\t") for line in log.read_text().splitlines()]


@pytest.mark.parametrize("helper", ["relay", "proxy"])
def test_N11_out_of_descriptors_a_call_is_refused_with_the_reason_and_leaks_nothing(
    write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path, testnet: Path,
    holding_server: HoldingServer, helper: str,
) -> None:
    """A burst of BURST calls under DESCRIPTOR_LIMIT descriptors: to a [localhost] port
    through the relay, or CONNECT tunnels through the proxy."""
    marks = tmp_path / "marks"
    marks.mkdir()
    port = holding_server.port
    spec = write_spec(f'name = "{WIRE}"\n[files]\nwrite = {toml_list(marks)}\n'
                      f"read = {toml_list(testnet)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt:7"]\n'
                      f"[localhost]\nports = [{port}]\n")
    target = f"localhost:{port}" if helper == "relay" else "allowed.lnkt:7"
    settings = Path(sandbox_env["LNK_HOME"])
    run = subprocess.Popen(
        ["prlimit", f"--nofile={DESCRIPTOR_LIMIT}:{DESCRIPTOR_LIMIT}", LNK_SANDBOX, "run",
         "--spec", str(spec), "--", PYTHON, "-I", "-c", _BURST, str(port), str(marks),
         str(BURST), helper], env=sandbox_env, cwd=marks, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while not (marks / "idle").exists() and run.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (marks / "idle").exists(), run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        relay = _helper_pid(settings, helper)
        limits = Path(f"/proc/{relay}/limits").read_text()
        assert f"Max open files            {DESCRIPTOR_LIMIT}" in limits, limits
        time.sleep(0.5)  # the first call's ended line written, its descriptors closed
        idle = _descriptors(relay)
        (marks / "measured").touch()
        while not (marks / "burst").exists() and run.poll() is None \
                and time.monotonic() < deadline + 60:
            time.sleep(0.05)
        # Every call of the burst closed: the relay's descriptors back to what they were.
        after = _descriptors(relay)
        settle = time.monotonic() + 10
        while after != idle and time.monotonic() < settle:
            time.sleep(0.1)
            after = _descriptors(relay)
        (marks / "settled").touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    print(f"{helper} under {DESCRIPTOR_LIMIT} descriptors: {idle} open idle, {after} after")
    assert after == idle, (idle, after)
    lines = dict(line.split(" ", 1) for line in stdout.splitlines())
    assert lines["first"] == lines["after"] == "b'ping'", stdout
    through, refused = (int(count) for count in lines["burst"].split())
    print(f"burst of {BURST}: {through} went through, {refused} refused")
    assert through + refused == BURST
    assert 0 < through < BURST, "the limit did not bite: the test proves nothing"
    log = _log_lines(settings)
    allowed = [line for line in log if line[1:3] == ["allowed", target]]
    ended = [line for line in log if line[1:3] == ["ended", target]]
    # Exactly the calls that went through are on the log as allowed (and ended) …
    assert len(allowed) == len(ended) == through + 2, (through, len(allowed), len(ended))
    # … and every other one as refused, for that reason (written whole, or counted in a
    # folded line: refusals like these are folded past the first ten).
    whole = [line for line in log if line[1:3] == ["refused", target]]
    assert [line for line in whole if line[3] != "reason=out of descriptors (the wire's "
            "open-file limit is reached)"] == []
    folded = [line for line in log if line[1:3] == ["refused", "*"]]
    assert all("out of descriptors" in line[3] for line in folded), folded
    counted = sum(int(line[3].split("more=")[1].split()[0]) for line in folded)
    assert len(whole) + counted == refused, (len(whole), counted, refused)
    assert "Traceback" not in stderr and "Too many open files" not in stderr, stderr[-3000:]
