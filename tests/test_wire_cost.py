"""What was made once rather than per tunnel or per request (issue 18), and that each still
answers as it did: the ClientHello reader's one TLS context, the splice threads kept for
the next tunnel, /etc/hosts read again only when it changed; and the wire's controls,
which are still looked at on every call (a switch flipped between two calls is seen at
the second; a pause file is stat'ed, and read again only when it changed)."""

from __future__ import annotations

import functools
import os
import ssl
import threading
import time
from pathlib import Path

import pytest

from lnk_common import wire as wire_module
from lnk_common import wirestate
from lnk_common.controls import Controls, SharedControls
from lnk_common.wire import Refused, Wire
from lnk_common.wirelog import WireLog
from lnk_proxy import resolver, sni


def _hello(name: str | None) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


# -- the ClientHello's name: one context, a name per reading --------------------------------


def test_one_context_serves_every_reading_and_each_keeps_its_own_name() -> None:
    first, second = _hello("allowed.example"), _hello("other.example")
    assert sni.server_name(first) == "allowed.example"
    context = sni._context()
    # Interleaved: a reading cut short, another whole, then the first again; none sees
    # another's name, and the context is the one made at the first.
    assert sni.server_name(first[:60]) is sni.NEED_MORE
    assert sni.server_name(second) == "other.example"
    assert sni.server_name(_hello(None)) is None
    assert sni.server_name(first) == "allowed.example"
    assert sni.server_name(b"\x16\x03\x01\x00\x05hello") is None
    assert sni._context() is context


def test_readings_in_threads_never_mix_names() -> None:
    hellos = {f"host{number}.example": _hello(f"host{number}.example") for number in range(8)}
    wrong: list[tuple[str, object]] = []

    def read(name: str, data: bytes) -> None:
        for _ in range(50):
            found = sni.server_name(data)
            if found != name:
                wrong.append((name, found))

    threads = [threading.Thread(target=read, args=item) for item in hellos.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []


# -- splice threads: kept for the next tunnel, never a bound -------------------------------


def test_an_ended_jobs_thread_runs_the_next_job() -> None:
    workers = wire_module._Workers()
    ran: list[int] = []
    for _ in range(5):
        done = threading.Event()

        def job(done: threading.Event = done) -> None:
            ran.append(threading.get_ident())
            done.set()

        workers.run(job)
        assert done.wait(10)
        deadline = time.monotonic() + 10
        while not workers.idle and time.monotonic() < deadline:
            time.sleep(0.001)  # the thread goes back to the idle ones after its job
    assert len(set(ran)) == 1  # one thread, five jobs


def test_blocking_jobs_each_get_a_thread_of_their_own() -> None:
    """Each job waits for all the others to start: with any bound on the threads (or a
    job queued behind another), this would never end."""
    workers = wire_module._Workers()
    count = 40
    started = threading.Barrier(count + 1)
    def job() -> None:
        started.wait(10)

    for _ in range(count):
        workers.run(job)
    started.wait(10)  # raises BrokenBarrierError if a job did not start


def test_a_job_that_raises_ends_its_thread_and_the_next_job_still_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    workers = wire_module._Workers()
    seen: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: seen.append(hook.exc_value))

    def broken() -> None:
        raise RuntimeError("a bug in a job")

    workers.run(broken)
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [type(error) for error in seen] == [RuntimeError]  # said, as a thread's error
    done = threading.Event()
    workers.run(done.set)
    assert done.wait(10)


def test_idle_threads_end_after_their_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_module, "IDLE_THREAD_SECONDS", 0.2)
    workers = wire_module._Workers()
    gates = [threading.Event() for _ in range(6)]
    threads: list[threading.Thread] = []

    def job(gate: threading.Event) -> None:
        threads.append(threading.current_thread())
        gate.wait(10)

    for gate in gates:
        workers.run(functools.partial(job, gate))
    deadline = time.monotonic() + 10
    while len(threads) < len(gates) and time.monotonic() < deadline:
        time.sleep(0.01)
    for gate in gates:
        gate.set()
    while any(thread.is_alive() for thread in threads) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(threads) == len(gates)
    assert not any(thread.is_alive() for thread in threads)
    assert workers.idle == []
    done = threading.Event()
    workers.run(done.set)  # a new thread again
    assert done.wait(10)


def test_idle_threads_past_the_most_kept_end_at_once(monkeypatch: pytest.MonkeyPatch
                                                    ) -> None:
    monkeypatch.setattr(wire_module, "MAX_IDLE_THREADS", 2)
    workers = wire_module._Workers()
    gates = [threading.Event() for _ in range(6)]
    threads: list[threading.Thread] = []

    def job(gate: threading.Event) -> None:
        threads.append(threading.current_thread())
        gate.wait(10)

    for gate in gates:
        workers.run(functools.partial(job, gate))
    deadline = time.monotonic() + 10
    while len(threads) < len(gates) and time.monotonic() < deadline:
        time.sleep(0.01)
    for gate in gates:
        gate.set()
    while sum(thread.is_alive() for thread in threads) > 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(thread.is_alive() for thread in threads) == 2
    assert len(workers.idle) == 2


# -- /etc/hosts: read again whenever it changed ---------------------------------------------


@pytest.fixture
def hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hosts"
    monkeypatch.setattr(resolver, "HOSTS_FILE", str(path))
    monkeypatch.setattr(resolver, "_HOSTS", resolver._HostsFile())
    return path


def _settle(path: Path) -> None:
    """Make the file's modification time an hour old (its change time stays now, as
    the kernel keeps it: no one can set it back)."""
    old = time.time() - 3600
    os.utime(path, (old, old))


def _lookup(name: str) -> list[str]:
    return [str(address) for address in resolver._HOSTS.addresses(name)]


def test_a_hosts_file_changed_between_two_lookups_is_seen_at_the_second(hosts: Path) -> None:
    hosts.write_text("10.0.0.1 a.example\n")
    assert _lookup("a.example") == ["10.0.0.1"]
    hosts.write_text("10.0.0.2 a.example\n")  # the same size, within the same tick
    assert _lookup("a.example") == ["10.0.0.2"]


def test_a_settled_hosts_file_is_kept_and_a_change_at_the_same_size_and_time_is_seen(
        hosts: Path) -> None:
    hosts.write_text("10.0.0.1 a.example\n")
    _settle(hosts)
    time.sleep(0.01)
    # The change time must be old too for the file to count as settled: read it after.
    stat = hosts.stat()
    assert _lookup("a.example") == ["10.0.0.1"]
    if time.time_ns() - stat.st_ctime_ns > resolver.HOSTS_SETTLE_NS:
        assert resolver._HOSTS.identity != ()
    # Rewritten in place, the same size, its modification time put back as it was: the
    # change time (which no one can set) differs, so it is read again.
    with open(hosts, "r+") as handle:
        handle.write("10.0.0.9 a.example\n")
    os.utime(hosts, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert hosts.stat().st_size == stat.st_size
    assert _lookup("a.example") == ["10.0.0.9"]


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, every path `open` is given, in order (the files are still opened)."""
    opened: list[str] = []
    real_open = open

    def counting_open(path: str, *args: object, **kwargs: object) -> object:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", counting_open)
    return opened


def test_a_hosts_file_kept_is_not_read_again_until_it_changes(
        hosts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts.write_text("10.0.0.1 a.example\n10.0.0.3 b.example\n")
    monkeypatch.setattr(resolver, "HOSTS_SETTLE_NS", -1)  # every read counts as settled
    assert _lookup("a.example") == ["10.0.0.1"]
    opened = _count_opens(monkeypatch)
    assert _lookup("a.example") == ["10.0.0.1"]
    assert _lookup("b.example") == ["10.0.0.3"]
    assert _lookup("c.example") == []
    assert opened == []
    replaced = hosts.with_name("hosts.new")
    replaced.write_text("10.0.0.4 a.example\n")
    os.replace(replaced, hosts)  # a new file (as editors write), a new inode
    assert _lookup("a.example") == ["10.0.0.4"]
    assert opened == [str(hosts)]
    hosts.unlink()
    assert _lookup("a.example") == []


def test_the_kept_answers_are_the_parsers_answers(hosts: Path) -> None:
    text = ("# comment\n10.0.0.1 a.example A.example. alias\n10.0.0.2 a.example\n"
            "fe80::1%eth0 six.example\nnot-an-address b.example\n10.0.0.1 a.example\n")
    hosts.write_text(text)
    for name in ("a.example", "A.EXAMPLE.", "alias", "six.example", "b.example", "none"):
        assert resolver._HOSTS.addresses(name) == resolver.hosts_file_addresses(text, name)
        assert resolver._HOSTS.addresses(name) == resolver.hosts_file_addresses(text, name)


# -- the wire's controls: looked at on every call --------------------------------------------


def _wire(settings: Path, calls_per_minute: int = 0) -> Wire:
    window = settings / "sandbox" / "wires" / "w" / "window"
    return Wire(log=WireLog(str(settings), "w"), settings=str(settings), wire="w",
                controls=SharedControls(Controls(calls_per_minute=calls_per_minute,
                                                 pause=(30, 20, 60)), str(window)))


def test_a_kill_switch_flipped_between_two_calls_is_seen_at_the_second(tmp_path: Path) -> None:
    wire = _wire(tmp_path)
    wire.gate()
    assert not wire.closed()
    wirestate.stop(str(tmp_path))
    with pytest.raises(Refused, match="kill switch is on"):
        wire.gate()
    assert wire.closed()
    wirestate.clear_stop(str(tmp_path))
    wire.gate()
    assert not wire.closed()


def test_a_pause_between_two_calls_is_seen_at_the_second(tmp_path: Path) -> None:
    wire = _wire(tmp_path)
    wire.gate()
    wirestate.pause(str(tmp_path), "w", "a test")
    with pytest.raises(Refused, match=r"paused since .*a test"):
        wire.gate()
    assert wire.closed()
    wirestate.resume(str(tmp_path), "w")
    wire.gate()
    assert not wire.closed()


def test_a_pause_kept_is_not_read_again_until_it_changes_and_each_change_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call stats the pause file; a pause read when it had settled is not opened
    again while the stat is the same; a new reason (the same size), a resume and a
    pause again are each seen at the very next call."""
    wire = _wire(tmp_path)
    monkeypatch.setattr(wirestate, "PAUSE_SETTLE_NS", -1)  # every read counts as settled
    wirestate.pause(str(tmp_path), "w", "reason one")
    with pytest.raises(Refused, match="reason one"):
        wire.gate()
    opened = _count_opens(monkeypatch)
    for _ in range(3):
        with pytest.raises(Refused, match="reason one"):
            wire.gate()
        assert wire.closed()
    assert opened == []
    wirestate.pause(str(tmp_path), "w", "reason two")  # the same size: a new file
    with pytest.raises(Refused, match="reason two"):
        wire.gate()
    assert len(opened) == 1
    wirestate.resume(str(tmp_path), "w")
    wire.gate()
    assert not wire.closed()
    wirestate.pause(str(tmp_path), "w", "reason one")
    with pytest.raises(Refused, match="reason one"):
        wire.gate()


def test_a_pause_rewritten_in_place_at_the_same_size_and_time_is_seen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause file kept (settled when read), then rewritten in place with its size and
    modification time as they were: its change time, which no one can set, differs."""
    monkeypatch.setattr(wirestate, "PAUSE_SETTLE_NS", 50_000_000)  # settled in 50 ms
    wire = _wire(tmp_path)
    wirestate.pause(str(tmp_path), "w", "reason one")
    path = Path(wirestate.pause_path(str(tmp_path), "w"))
    _settle(path)
    time.sleep(0.2)  # the change time, set by utime, settles too
    status = path.stat()
    with pytest.raises(Refused, match="reason one"):
        wire.gate()
    assert str(path) in wirestate._KEPT_PAUSES
    path.write_bytes(path.read_bytes().replace(b"reason one", b"reason two"))
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert path.stat().st_size == status.st_size
    with pytest.raises(Refused, match="reason two"):
        wire.gate()


def test_a_pause_that_cannot_be_looked_at_still_pauses(tmp_path: Path) -> None:
    """Only a file known to be absent lets calls go: the wire's folder a file (a stat
    fails with ENOTDIR), a link loop (ELOOP), an empty or malformed file."""
    wire = _wire(tmp_path)
    folder = tmp_path / "sandbox" / "wires" / "w"
    wire.gate()
    path = Path(wirestate.pause_path(str(tmp_path), "w"))
    path.symlink_to(path)
    with pytest.raises(Refused, match="unreadable pause"):
        wire.gate()
    path.unlink()
    for data in (b"", b"{not json", b"[1, 2]"):
        path.write_bytes(data)
        with pytest.raises(Refused, match="paused since unknown: unreadable pause"):
            wire.gate()
    path.unlink()
    wire.gate()
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    folder.write_bytes(b"")
    with pytest.raises(Refused, match="unreadable pause"):
        wire.gate()
    assert wire.closed()


def test_the_window_written_by_another_process_between_two_calls_counts(tmp_path: Path
                                                                         ) -> None:
    """Two proxies of one wire share the window: one's calls count toward the other's
    limit at its very next call."""
    one, other = _wire(tmp_path, calls_per_minute=3), _wire(tmp_path, calls_per_minute=3)
    one.gate()
    other.gate()
    one.gate()
    with pytest.raises(Refused, match="more than 3 calls in a minute"):
        other.gate()


# -- a tunnel's upstream, a bare socket: closed whatever happens ------------------------------


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_tunnels_allowed_refused_or_abandoned_leave_no_descriptor(testnet: Path,
                                                                   tmp_path: Path) -> None:
    """A standalone proxy (the launcher's argv, --listen) on the test network: TLS tunnels
    carried whole, tunnels whose ClientHello names another host (refused after the
    upstream was connected) and tunnels abandoned before a ClientHello, round after
    round; then the proxy holds as many descriptors as after the first round (the
    upstream's socket, its pipes and its copy of the client's are all closed), and
    each call is on the log."""
    import socket
    import subprocess

    from lnk_common.wirelog import log_path
    from tests.conftest import start_proxy

    settings = tmp_path / "settings"
    proxy, port = start_proxy(settings, "--wire", "cost", "--host", "allowed.lnkt",
                              "--pause", "1000,1000,60", stderr=subprocess.PIPE)
    context = ssl.create_default_context(cafile=str(testnet / "cert.pem"))

    def tunnel() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(b"CONNECT allowed.lnkt:443 HTTP/1.1\r\nHost: allowed.lnkt:443\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200"), head
        return sock

    def carried() -> None:
        with context.wrap_socket(tunnel(), server_hostname="allowed.lnkt") as tls:
            tls.sendall(b"GET /ok HTTP/1.1\r\nHost: allowed.lnkt\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := tls.recv(4096):
                data += chunk
            assert data.endswith(b"\r\n\r\nfine\n"), data

    def fronted() -> None:
        fronting = ssl.create_default_context(cafile=str(testnet / "cert.pem"))
        with pytest.raises((ssl.SSLError, OSError)):  # closed before any answer
            fronting.wrap_socket(tunnel(), server_hostname="other.lnkt").close()

    def abandoned() -> None:
        tunnel().close()

    try:
        counts = []
        for _ in range(8):
            carried()
            fronted()
            abandoned()
            time.sleep(0.3)  # the proxy's ends of the last ones close meanwhile
            counts.append(_descriptors(proxy.pid))
        deadline = time.monotonic() + 10
        while _descriptors(proxy.pid) > counts[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _descriptors(proxy.pid) <= counts[0], counts
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
    lines = [line.split("\t") for line in
             Path(log_path(str(settings), "cost")).read_text().splitlines()]
    events = [(line[1], line[2]) for line in lines]
    assert events.count(("allowed", "allowed.lnkt:443")) == 8, lines
    assert events.count(("ended", "allowed.lnkt:443")) == 8, lines
    refusals = [line[3] for line in lines if line[1] == "refused"]
    assert refusals.count("reason=the tunnel's TLS ClientHello names another host "
                          "(other.lnkt)") == 8, lines
    assert refusals.count("reason=the tunnel's TLS ClientHello names no host") == 8, lines
