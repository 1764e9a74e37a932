"""The lane (lnk_proxy.lane), every body-less request's exchange: the proxy's own code
in this process, its listener made as main makes it (`lane_server`), a client and a
scripted host over real loopback sockets.

The scripted host listens on the test network's origin address (tests/testnet.py), in
the origin's own network namespace, which no address check of the proxy's refuses: a
socket made by a thread that has entered that namespace (setns(2), as root) is the
origin's, and stays so when this process's loop serves it. Nothing of the proxy's is
set aside: its real facts about this machine (`Machine.gather`), the head check, the
target, the gate, every address's check, the lines on the log, the lane and the task it
hands to.
"""

from __future__ import annotations

import asyncio
import ctypes
import ipaddress
import os
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnk_common import wirestate
from lnk_common.wirelog import WireLog, log_path
from lnk_proxy import server as proxy_server
from lnk_proxy.decide import parse_hosts
from lnk_proxy.lane import CLIENT_BUFFER_BYTES, LaneProtocol, lane_server
from lnk_proxy.machine import Machine
from lnk_proxy.streams import Outbox
from lnk_proxy.upstream import CHUNK
from tests.testnet import ORIGIN, ORIGIN_ADDRESS

HOST = "upstream.test"
WIRE = "lane"
FINE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Seen: yes\r\n\r\nfine\n"

# What the scripted host does with a request: bytes to send back, or one of these.
CLOSE = "close"  # close the connection without an answer
HANG = "hang"  # answer nothing, keep the connection open

# Bytes to send back, CLOSE or HANG; or a tuple of parts, sent 20 ms apart (CLOSE
# among them closes the connection there).
Answer = bytes | str | tuple[bytes | str, ...]
Script = Callable[[int, bytes], Answer]


class Host:
    """A scripted HTTP host on loopback: `script(n, head)` answers the n-th request
    (counted over all connections, from 1); its connections are counted."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[bytes] = []
        self.bodies: list[bytes] = []  # each request's body as framed on the wire
        self.connections = 0
        self.served_here = 0  # answered on the connection of the request being answered
        self.ended = 0  # connections whose other end (the proxy) closed them
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, sock=_origin_listener())
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        buffer = b""
        served = 0
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await reader.read(65536)
                    if not chunk:
                        self.ended += 1
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                self.requests.append(head)
                framed = await _framed_body(head, buffer, reader)
                if framed is None:  # the proxy closed inside the body
                    self.ended += 1
                    return
                body, buffer = framed
                self.bodies.append(body)
                self.served_here = served
                served += 1
                answer = self.script(len(self.requests), head)
                if isinstance(answer, tuple):
                    for part in answer:
                        if part == CLOSE:
                            writer.close()
                            return
                        assert isinstance(part, bytes)
                        writer.write(part)
                        await writer.drain()
                        await asyncio.sleep(0.02)
                    continue
                if answer == CLOSE:
                    writer.close()
                    return
                if answer == HANG:  # until the proxy closes the connection
                    while await reader.read(65536):
                        pass
                    self.ended += 1
                    return
                assert isinstance(answer, bytes)
                writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()


async def _framed_body(head: bytes, buffer: bytes, reader: asyncio.StreamReader
                       ) -> tuple[bytes, bytes] | None:
    """(the request's body as framed on the wire, what follows it): its Content-Length
    of bytes, or chunks up to the last one (no trailer fields: the proxy sends none);
    None when the connection ended before the body did."""
    fields = head.lower().split(b"\r\n")[1:]
    length = next((int(field.split(b":", 1)[1]) for field in fields
                   if field.startswith(b"content-length:")), 0)
    chunked = b"transfer-encoding: chunked" in fields
    end = b"\r\n0\r\n\r\n"
    while (len(buffer) < length if not chunked
           else not (buffer.startswith(end[2:]) or end in buffer)):
        chunk = await reader.read(65536)
        if not chunk:
            return None
        buffer += chunk
    if chunked:
        at = 0 if buffer.startswith(end[2:]) else buffer.index(end) + 2
        return buffer[:at + len(end) - 2], buffer[at + len(end) - 2:]
    return buffer[:length], buffer[length:]


def _unchunked(framed: bytes) -> bytes:
    body = b""
    while True:
        size_line, _, framed = framed.partition(b"\r\n")
        size = int(size_line, 16)
        if not size:
            return body
        body, framed = body + framed[:size], framed[size + 2:]


class Rig:
    """The proxy of one test, its lane listener, its host and its log."""

    def __init__(self, tmp_path: Path, host: Host) -> None:
        self.settings = str(tmp_path / "settings")
        Path(self.settings).mkdir()
        self.host = host
        self.forwarded = 0  # requests the task decided (the lane took the rest itself)
        self.said: list[str] = []  # the proxy's lines on stderr

        async def resolve(_name: str, _port: int) -> list[object]:
            return [ipaddress.ip_address(ORIGIN_ADDRESS)]

        self.proxy = proxy_server.Proxy(
            rules=parse_hosts((f"{HOST}:{host.port}",)), machine=Machine.gather(),
            log=WireLog(self.settings, WIRE), settings=self.settings, wire=WIRE,
            say=self.said.append, resolver=resolve)  # type: ignore[arg-type]
        forward = self.proxy.forward

        async def counted(*args: object, **kwargs: object) -> tuple[bool, bytes] | None:
            self.forwarded += 1
            return await forward(*args, **kwargs)  # type: ignore[arg-type]

        self.proxy.forward = counted  # type: ignore[method-assign]
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self.server = await lane_server(self.proxy.handle, sock)

    def request(self, path: str = "/ok", *fields: str) -> bytes:
        lines = [f"GET http://{HOST}:{self.host.port}{path} HTTP/1.1",
                 f"Host: {HOST}:{self.host.port}", *fields]
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    def lines(self) -> list[str]:
        path = Path(log_path(self.settings, WIRE))
        return path.read_text().splitlines() if path.exists() else []

    def events(self, event: str) -> list[str]:
        return [line for line in self.lines() if line.split("\t")[1:2] == [event]]

    def close(self) -> None:
        assert self.server is not None
        self.server.close()
        self.host.close()


_CLONE_NEWNET = 0x40000000  # linux/sched.h


def _origin_listener() -> socket.socket:
    """A listening socket on the origin's address, made inside the origin's network
    namespace by a thread of its own (setns(2) moves the calling thread only; the thread
    ends there, and the socket stays the origin's)."""
    made: list[socket.socket] = []
    failed: list[str] = []

    def inside() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        handle = os.open(f"/run/netns/{ORIGIN}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(handle, _CLONE_NEWNET) != 0:
                failed.append(os.strerror(ctypes.get_errno()))
                return
        finally:
            os.close(handle)
        listener = socket.socket()
        listener.bind((ORIGIN_ADDRESS, 0))
        listener.listen(64)
        listener.setblocking(False)
        made.append(listener)

    thread = threading.Thread(target=inside)
    thread.start()
    thread.join()
    if not made:
        raise AssertionError(f"no socket in the origin's namespace: {failed}")
    return made[0]


@pytest.fixture(scope="session")
def origin(testnet: Path) -> Path:
    """The test network, whose origin the scripted host listens in: entering its
    namespace takes root (CAP_SYS_ADMIN): as another user these fail, never skip (CI's
    ordinary user's run does not run this module: tests/conftest.py NOT_USER_DEPENDENT)."""
    if os.geteuid() != 0:
        pytest.fail("the scripted host enters the test origin's network namespace: run as root")
    return testnet


async def _rig(tmp_path: Path, script: Script) -> Rig:
    host = Host(script)
    await host.start()
    rig = Rig(tmp_path, host)
    await rig.start()
    return rig


async def _kept(tmp_path: Path, script: Script
                ) -> tuple[Rig, asyncio.StreamReader, asyncio.StreamWriter]:
    """A rig and a client connection whose first request (decided by the task, which
    opens the upstream, and carried out by the lane) is answered `fine`."""
    rig = await _rig(tmp_path, script)
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
    writer.write(rig.request())
    assert (await _response(reader))[1] == b"fine\n"
    return rig, reader, writer


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One response framed by its Content-Length: (head, body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head, await reader.readexactly(length)


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 60))


def test_kept_alive_plain_requests_go_by_the_lane_each_checked_and_logged(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig = await _rig(tmp_path, lambda _n, _head: FINE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        for number in range(50):
            writer.write(rig.request(f"/ok/{number}", "Proxy-Connection: keep-alive"))
            head, body = await _response(reader)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"x-seen: yes" in head, head
            assert body == b"fine\n"
        writer.close()
        rig.close()
        # The first request the task decides (it opens the upstream); the other 49 the lane takes,
        # on the one upstream connection, each sent on written anew (no hop field).
        assert rig.forwarded == 1
        assert rig.host.connections == 1
        assert len(rig.host.requests) == 50
        assert all(b"proxy-connection" not in head.lower() for head in rig.host.requests)
        assert rig.host.requests[7].startswith(b"GET /ok/7 HTTP/1.1\r\nhost: ")
        allowed, ended = rig.events("allowed"), rig.events("ended")
        assert len(allowed) == len(ended) == 50, rig.lines()
        assert all(" kind=http" in line for line in allowed)
        assert all(" sent=0 received=5 " in line for line in ended), ended
        ids = [line.split("\tid=")[1].split()[0] for line in allowed]
        assert ids == [line.split("\tid=")[1].split()[0] for line in ended]
        assert len(set(ids)) == 50

    _run(test)


def test_a_response_that_is_not_plain_goes_to_h11_and_the_lane_goes_on(
        tmp_path: Path, origin: Path) -> None:
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\nfirst\r\n6\r\nsecond\r\n0\r\n\r\n")

    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda n, _head: chunked if n == 2 else FINE)
        writer.write(rig.request("/chunked"))
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower(), head
        assert await reader.readuntil(b"0\r\n\r\n") == b"5\r\nfirst\r\n6\r\nsecond\r\n0\r\n\r\n"
        for _ in range(3):
            writer.write(rig.request())
            assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert rig.forwarded == 1  # the chunked one was handed over, not sent again
        assert len(rig.host.requests) == 5 and rig.host.connections == 1
        assert len(rig.events("allowed")) == len(rig.events("ended")) == 5

    _run(test)


def test_a_response_framed_by_its_upstreams_end_is_the_lanes_and_the_connection_goes_on(
        tmp_path: Path, origin: Path) -> None:
    """A response with no length, read to its connection's end, is h11's reading in the
    lane (not handed to the task): the program gets it chunked and whole, the upstream
    is not used again, and the next request goes on a new one."""
    to_the_end = (b"HTTP/1.1 200 OK\r\nX-Seen: yes\r\n\r\nto the ", b"end", CLOSE)

    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path,
                                          lambda n, _head: to_the_end if n == 2 else FINE)
        writer.write(rig.request("/to-the-end"))
        head = await reader.readuntil(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head.lower() and b"x-seen: yes" in head, head
        body = b""
        while not body.endswith(b"\r\n0\r\n\r\n"):
            body += await reader.read(65536)
        assert _unchunked(body) == b"to the end"
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert rig.forwarded == 2  # the first request and the one after the close: the
        assert rig.host.connections == 2  # response read to the end was the lane's
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 3, rig.lines()
        assert " received=10 " in ended[1] and "error=" not in ended[1], ended

    _run(test)


def test_a_kept_upstream_that_answers_what_h11_refuses_is_asked_again_once(
        tmp_path: Path, origin: Path) -> None:
    """Bytes that are no response head, from a kept upstream: the request is sent again
    once on a new connection (as a kept upstream that closed unanswering), the call's
    ended line saying h11's refusal."""
    async def test() -> None:
        rig, reader, writer = await _kept(
            tmp_path, lambda n, _head: b"HTTP/1.1 abc\r\n\r\n" if n == 2 else FINE)
        writer.write(rig.request("/again"))
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert [head.split(b" ")[1] for head in rig.host.requests] == [
            b"/ok", b"/again", b"/again"]
        assert rig.host.connections == 2
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 3, rig.lines()
        assert ended[1].endswith(" error=RemoteProtocolError"), ended

    _run(test)


def test_a_kept_upstream_that_closes_unanswering_is_asked_again_once_on_a_new_one(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda n, _head: CLOSE if n == 2 else FINE)
        writer.write(rig.request("/again"))
        assert (await _response(reader))[1] == b"fine\n"
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert rig.host.requests[1].startswith(b"GET /again ")
        assert rig.host.requests[2].startswith(b"GET /again ")
        assert rig.host.connections == 2
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 4, rig.lines()
        assert ended[1].endswith(" error=ConnectionResetError"), ended

    _run(test)


@pytest.mark.parametrize(("fields", "status", "reason"), [
    (("Host: other.test",), 400, "the Host header names another host than the request's URL"),
    (("Host: x", "Transfer-Encoding: gzip"), 400, None),
])
def test_a_head_the_lane_sees_is_checked_by_the_connections_machine(
        tmp_path: Path, origin: Path, fields: tuple[str, ...], status: int,
        reason: str | None) -> None:
    """A whole head kept alive goes to the connection's one machine (no check of the
    lane's own): a refused one is refused by the task with the machine's reason, and
    logged; nothing reaches the host."""
    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda _n, _head: FINE)
        head = rig.request("/x").split(b"\r\n")[0] + b"\r\n"
        writer.write(head + "".join(f"{field}\r\n" for field in fields).encode() + b"\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        rig.close()
        assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer
        if reason is not None:
            assert answer.endswith(f"\r\n\r\n{reason}\n".encode()), answer
        assert len(rig.host.requests) == 1 and rig.forwarded == 1
        assert len(rig.events("refused")) == 1, rig.lines()

    _run(test)


@pytest.mark.parametrize(("head", "reason"), [
    (b"GET / HTTP/1.1\nHost: x\n\n", "a line of the request head ends in a bare LF"),
    (b"GET / HTTP/1.1\r\nX: " + b"y" * 70000, "the request head is larger than"),
])
def test_a_head_the_guard_refuses_while_parked_is_refused_with_its_reason(
        tmp_path: Path, origin: Path, head: bytes, reason: str) -> None:
    """Bytes the head guard refuses before the head's end (a bare LF, a head past its
    size), sent on a kept-alive connection while its task is parked: the machine's 400
    with its reason, as on a connection's first request, never a fault of the lane's."""
    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda _n, _head: FINE)
        writer.write(head)
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        rig.close()
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        assert f"\r\n\r\n{reason}".encode() in answer, answer
        assert len(rig.host.requests) == 1 and not rig.said, rig.said
        assert len(rig.events("refused")) == 1, rig.lines()

    _run(test)


def test_the_kill_switch_ends_a_lane_call_in_flight_with_its_line(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda n, _head: HANG if n == 2 else FINE)
        writer.write(rig.request("/slow"))
        while len(rig.host.requests) < 2:
            await asyncio.sleep(0.01)
        wirestate.stop(rig.settings)
        rig.proxy.close_all()  # what the proxy's watch does once the switch is on
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        assert len(rig.events("allowed")) == len(rig.events("ended")) == 2, rig.lines()
        # the call's upstream is closed too: the host reads its end
        for _ in range(250):
            if rig.host.ended == 1:
                break
            await asyncio.sleep(0.02)
        assert rig.host.ended == 1
        rig.close()

    _run(test)


def test_a_pause_between_two_kept_alive_requests_refuses_the_second_and_closes(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda _n, _head: FINE)
        wirestate.pause(rig.settings, WIRE, "held for a look")
        writer.write(rig.request())
        head, body = await _response(reader)
        assert head.startswith(b"HTTP/1.1 403 Forbidden\r\n"), head
        assert b"connection: close" in head.lower()
        assert b"held for a look" in body and b"paused" in body
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        rig.close()
        assert rig.forwarded == 1 and len(rig.host.requests) == 1
        assert len(rig.events("refused")) == 1 and "held for a look" in rig.events("refused")[0]

    _run(test)


@pytest.mark.parametrize("chunked", [False, True], ids=["bodiless", "h11s"])
def test_a_client_that_reads_nothing_holds_its_upstream_back_not_the_proxys_memory(
        tmp_path: Path, origin: Path, chunked: bool) -> None:
    """Whichever reading the response has (body-less, or h11's: chunked), the lane passes
    it as it comes and a full client buffer pauses the upstream's reading."""
    size = 64 << 20
    big = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % size
           + b"x" * size + b"\r\n0\r\n\r\n" if chunked else
           b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)

    async def test() -> None:
        rig = await _rig(tmp_path, lambda n, _head: big if n == 2 else FINE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port, limit=1 << 16)
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"fine\n"
        transport = writer.transport
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the client reads nothing for now
        writer.write(rig.request("/big"))
        await asyncio.sleep(1.0)
        lanes = [task for task in rig.proxy.open]
        assert len(lanes) == 1
        # What the proxy holds for the client is bounded by its transport's high-water
        # mark (64 KiB) plus one read of the upstream, however much the host sends.
        held = sum(transport.get_write_buffer_size() for transport in _client_transports(rig))
        assert held < 2 << 20, held
        transport.resume_reading()
        head = await reader.readuntil(b"\r\n\r\n")
        if chunked:
            assert b"transfer-encoding: chunked" in head.lower(), head
            body = bytearray()  # chunks as h11 passed them (hex sizes have no x)
            while not body.endswith(b"\r\n0\r\n\r\n"):
                body += await reader.read(1 << 20)
            assert body.count(b"x") == size
        else:
            assert b"content-length: %d" % size in head.lower()
            got = 0
            while got < size:
                got += len(await reader.read(1 << 20))
            assert got == size
        writer.write(rig.request())  # the upstream is kept after all that
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert rig.forwarded == 1 and rig.host.connections == 1
        assert f" received={size} " in rig.events("ended")[1]

    _run(test)


def _reset(writer: asyncio.StreamWriter) -> None:
    """The client gone, not half-closed (a FIN is a client still reading): a reset."""
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _until(condition: Callable[[], bool], seconds: float = 10) -> None:
    """Wait, in the loop, at most `seconds` until `condition` holds (the caller asserts
    what it needs after)."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def _client_transports(rig: Rig) -> list[asyncio.Transport]:
    """The proxy's transports to its clients (each open call's handler has its writer)."""
    found: list[asyncio.Transport] = []
    for task in rig.proxy.open:
        frame = task.get_coro().cr_frame  # type: ignore[union-attr]
        writer = frame.f_locals.get("writer") if frame is not None else None
        if isinstance(writer, Outbox):
            found.append(writer.transport)
    assert found
    return found


def test_a_client_gone_in_the_middle_ends_the_call_with_its_line(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig, _reader, writer = await _kept(tmp_path, lambda n, _head: HANG if n == 2 else FINE)
        writer.write(rig.request("/slow"))
        while len(rig.host.requests) < 2:
            await asyncio.sleep(0.01)
        # Gone, not half-closed (a FIN is a client still reading: its response goes).
        _reset(writer)
        await _until(lambda: len(rig.events("ended")) == 2, seconds=2)
        ended = rig.events("ended")
        assert len(ended) == 2 and ended[1].endswith(" error=ConnectionResetError"), ended
        assert not rig.proxy.open
        rig.close()

    _run(test)


def test_what_a_client_sends_past_its_answers_waits_bounded_in_its_machine(
        tmp_path: Path, origin: Path) -> None:
    """A request whose answer does not come, and 8 MiB of requests sent behind it: they
    wait in the connection's machine, which holds at most one read past twice
    CLIENT_BUFFER_BYTES (the socket no longer read). A socket not read is not watched
    (asyncio's): the call ends when the connection does (here, closed by the proxy's
    side; else at its idle time), with its line."""
    async def test() -> None:
        rig, _reader, writer = await _kept(tmp_path, lambda n, _head: HANG if n == 2 else FINE)
        writer.write(rig.request("/slow"))
        await _until(lambda: len(rig.host.requests) == 2)
        writer.write(rig.request() * ((8 << 20) // len(rig.request())))
        [transport] = _client_transports(rig)
        protocol = transport.get_protocol()
        assert isinstance(protocol, LaneProtocol) and protocol.machine is not None
        machine = protocol.machine
        await _until(lambda: not transport.is_reading(), seconds=30)
        assert not transport.is_reading(), machine.held
        assert 2 * CLIENT_BUFFER_BYTES < machine.held <= 2 * CLIENT_BUFFER_BYTES + CHUNK
        await asyncio.sleep(0.05)  # nothing more is read meanwhile
        assert machine.held <= 2 * CLIENT_BUFFER_BYTES + CHUNK
        transport.abort()
        await _until(lambda: len(rig.events("ended")) == 2 and not rig.proxy.open)
        assert rig.events("ended")[1].endswith(" error=ConnectionResetError")
        assert not rig.proxy.open and len(rig.host.requests) == 2
        writer.close()
        rig.close()

    _run(test)


def test_requests_sent_together_are_answered_in_order(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig = await _rig(tmp_path, lambda n, _head: FINE.replace(b"fine", b"n=%02d" % n))
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"n=01\n"
        writer.write(rig.request("/a") + rig.request("/b") + rig.request("/c"))
        assert [(await _response(reader))[1] for _ in range(3)] == [b"n=02\n", b"n=03\n",
                                                                     b"n=04\n"]
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"n=05\n"
        writer.close()
        rig.close()
        # The first; then of the three sent at once, the first is the lane's (its head
        # is whole, the rest waits in the machine) and the two behind it the task's.
        assert rig.forwarded == 3
        assert [head.split(b" ")[1] for head in rig.host.requests] == [
            b"/ok", b"/a", b"/b", b"/c", b"/ok"]

    _run(test)


def test_bytes_past_a_response_end_keep_its_upstream_from_the_next_request(
        tmp_path: Path, origin: Path) -> None:
    extra = FINE + b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"

    async def test() -> None:
        rig = await _rig(tmp_path, lambda n, _head: extra if n == 2 else FINE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        for expected in (b"fine\n", b"fine\n", b"fine\n"):
            writer.write(rig.request())
            assert (await _response(reader))[1] == expected
        writer.close()
        rig.close()
        assert rig.host.connections == 2  # the second's upstream was not used again

    _run(test)


def test_a_quiet_connection_is_closed_and_a_busy_one_is_not(
        tmp_path: Path, origin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy_server, "IDLE_SECONDS", 0.4)

    async def test() -> None:
        rig = await _rig(tmp_path, lambda n, _head: HANG if n == 30 else FINE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        # Busy for longer than the idle time, request after request by the lane.
        for _ in range(29):
            writer.write(rig.request())
            assert (await _response(reader))[1] == b"fine\n"
            await asyncio.sleep(0.03)
        assert rig.forwarded == 1
        # A host that never answers: the call ends with its line, the connection closes.
        writer.write(rig.request("/never"))
        assert await asyncio.wait_for(reader.read(), 5) == b""
        ended = rig.events("ended")
        assert len(ended) == 30 and ended[-1].endswith(" error=TimeoutError"), ended
        writer.close()
        # A connection that sends nothing is closed after the idle time.
        quiet_reader, quiet_writer = await asyncio.open_connection("127.0.0.1", rig.port)
        quiet_writer.write(rig.request())
        assert (await _response(quiet_reader))[1] == b"fine\n"
        assert await asyncio.wait_for(quiet_reader.read(), 5) == b""
        quiet_writer.close()
        rig.close()

    _run(test)


def test_a_request_taken_while_the_clients_buffer_is_full_waits_for_it_to_drain(
        tmp_path: Path, origin: Path) -> None:
    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda _n, _head: FINE)
        # asyncio says once that a transport's buffer went past its mark; a response
        # begun after that must not add to it until it drains.
        (transport,) = _client_transports(rig)
        protocol = transport.get_protocol()
        assert isinstance(protocol, asyncio.Protocol)
        protocol.pause_writing()  # as the transport does past its high-water mark
        writer.write(rig.request())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_response(reader), 0.5)
        assert len(rig.host.requests) == 2  # sent on; its answer not read yet
        protocol.resume_writing()  # as the transport does once drained
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert rig.forwarded == 1

    _run(test)


# A conversation's steps, for the one below: what the host answers to each request.
_STEPS: dict[str, Callable[[int], Answer]] = {
    "fine": lambda n: FINE.replace(b"fine", b"n%03d" % n),
    "chunked": lambda n: (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"5\r\nn%03d\n\r\n0\r\n\r\n" % n),
    # bytes past the end with the response, and a forged response after it
    "extra": lambda n: (FINE.replace(b"fine", b"n%03d" % n) + b"junk past the end",
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforgd"),
    "closing": lambda n: (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n"
                          b"\r\nn%03d\n" % n),
    "big": lambda n: (b"HTTP/1.1 200 OK\r\nContent-Length: 300005\r\n\r\n"
                      + b"b" * 300000 + b"n%03d\n" % n),
}


@settings(deadline=None, max_examples=40)
@given(steps=st.lists(st.sampled_from([*_STEPS, "unanswered", "together", "body"]),
                      min_size=1, max_size=12))
def test_any_conversation_gets_every_answer_in_order_and_a_line_for_each_call(
        tmp_path_factory: pytest.TempPathFactory, origin: Path, steps: list[str]) -> None:
    """Requests kept alive, each answered as the step says (plain, chunked, with bytes
    past its end, closing, large, unanswered by a kept upstream and asked again, two
    sent together, one with a body), in any order: each answer arrives whole and in
    order, whoever served it (the lane or the task), and the log has an ended line for
    each allowed one."""
    tmp_path = tmp_path_factory.mktemp("conversation")
    unanswered: set[bytes] = set()

    def script(n: int, head: bytes) -> Answer:
        path = head.split(b" ")[1]
        kind = path.split(b"/")[1].decode()
        # Unanswered by a kept connection only: one the proxy just opened is not asked
        # again (the program sees its connection close, as the host closed it).
        if kind == "unanswered" and path not in unanswered and rig_host[0].served_here:
            unanswered.add(path)
            return CLOSE
        return _STEPS.get(kind, _STEPS["fine"])(n)

    rig_host: list[Host] = []

    async def test() -> None:
        rig = await _rig(tmp_path, script)
        rig_host.append(rig.host)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)

        async def answer() -> bytes:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"transfer-encoding: chunked" in head.lower():
                body = await reader.readuntil(b"0\r\n\r\n")
                return body.split(b"\r\n")[1].rstrip(b"\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            return (await reader.readexactly(length))[-5:].rstrip(b"\n")

        for number, step in enumerate(["fine", *steps]):
            if step == "together":
                writer.write(rig.request(f"/fine/{number}a") + rig.request(f"/fine/{number}b"))
                names = [await answer(), await answer()]
                assert all(name.startswith(b"n") for name in names), names
                continue
            if step == "body":
                writer.write(rig.request(f"/fine/{number}", "Content-Length: 4") + b"data")
            else:
                writer.write(rig.request(f"/{step}/{number}"))
            name = await answer()
            assert name.startswith(b"n"), (step, name)
        writer.close()
        rig.close()
        answered = [int(head.split(b" ")[1].split(b"/")[2].rstrip(b"ab").decode() or 0)
                    for head in rig.host.requests]
        assert answered == sorted(answered), answered  # in order, none skipped or doubled
        assert len(rig.events("allowed")) == len(rig.events("ended")) == len(rig.host.requests)

    _run(test)


def test_a_fault_in_the_lane_is_said_its_call_ended_and_only_its_connection_closed(
        tmp_path: Path, origin: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A bug in a callback (here, the response's reading raising on the third answer)
    never escapes into asyncio (which would close the upstream's transport and leave
    the task parked): said in one line, the call's ended line, the connection closed;
    the proxy serves the next connection."""
    from lnk_proxy import bodiless  # the lane's reading of a response (BodilessResponse)

    reading = getattr(bodiless, "response_head")  # noqa: B009

    def broken(buffer: bytes) -> object:
        if b"n=03" in buffer:
            raise RuntimeError("a fault of the lane's")
        return reading(buffer)

    monkeypatch.setattr(bodiless, "response_head", broken)

    async def test() -> None:
        rig, reader, writer = await _kept(
            tmp_path, lambda n, _head: FINE if n == 1 else FINE.replace(b"fine", b"n=%02d" % n))
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"n=02\n"
        writer.write(rig.request())
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        again_reader, again_writer = await asyncio.open_connection("127.0.0.1", rig.port)
        again_writer.write(rig.request())
        assert (await _response(again_reader))[1] == b"n=04\n"
        again_writer.close()
        rig.close()
        assert [line for line in rig.said if "a fault of the lane's" in line] == [
            "lnk-sandbox: wire lane: a call ended on an unexpected error: RuntimeError at "
            "test_lane.py:" + rig.said[0].rsplit("test_lane.py:", 1)[1].split(":")[0]
            + ": a fault of the lane's"], rig.said
        ended = rig.events("ended")
        assert len(ended) == len(rig.events("allowed")) == 4, rig.lines()
        assert ended[2].endswith(" error=RuntimeError"), ended

    _run(test)
    assert "Fatal error" not in caplog.text


def test_a_note_given_as_the_parked_tasks_timer_rings_is_not_lost(
        tmp_path: Path, origin: Path) -> None:
    """The timer rings and a note comes in the same turn of the loop, before the task
    runs: the task gets the note (here END: the connection closes at once rather than
    waiting out another idle time; a NEXT lost would leave the command the lane gave
    back to the machine untaken)."""
    from lnk_proxy import lane

    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, lambda _n, _head: FINE)
        (transport,) = _client_transports(rig)
        parked = transport.get_protocol().lane  # type: ignore[attr-defined]
        assert isinstance(parked, lane.Lane) and parked.parked is not None
        getattr(lane, "_ring")(parked.parked)  # noqa: B009  (as its timer does)
        parked._wake(lane.END)  # in the same turn, before the task runs
        assert await asyncio.wait_for(reader.read(), 2) == b""
        writer.close()
        rig.close()

    _run(test)


# -- bodies, read by the connection's machine (lnk_proxy.connection) ------------------


def test_a_body_goes_on_as_the_machine_reads_it_and_the_next_request_follows(
        tmp_path: Path, origin: Path) -> None:
    """A chunked body sent in pieces and a Content-Length one after a 100: each sent on
    whole as the client sent it, counted on its ended line, and the connection goes on
    to the next request (the machine's request_done only after the body's end)."""
    async def test() -> None:
        rig = await _rig(tmp_path, lambda _n, _head: FINE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        post = rig.request("/up").replace(b"GET ", b"POST ", 1)[:-2]
        writer.write(post + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        writer.write(b"6\r\n world\r\n")
        await writer.drain()
        writer.write(b"0\r\n\r\n")
        assert (await _response(reader))[1] == b"fine\n"
        writer.write(post + b"Content-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 ")
        writer.write(b"data" + rig.request())
        assert (await _response(reader))[1] == b"fine\n"
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert len(rig.host.requests) == 3 and rig.host.connections == 1
        assert _unchunked(rig.host.bodies[0]) == b"hello world"
        assert rig.host.bodies[1:] == [b"data", b""]
        assert b"expect" not in rig.host.requests[1].lower()
        ended = rig.events("ended")
        assert [line.split(" sent=")[1].split()[0] for line in ended] == ["11", "4", "0"]

    _run(test)


def test_a_body_the_machine_refuses_ends_the_call_and_sends_none_of_it(
        tmp_path: Path, origin: Path) -> None:
    """Chunked framing h11 refuses: nothing of the body reaches the host, the call ends
    with h11's error's name on its line (never the bytes), the connection closes."""
    async def test() -> None:
        rig = await _rig(tmp_path, lambda _n, _head: FINE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        post = rig.request("/up").replace(b"GET ", b"POST ", 1)[:-2]
        writer.write(post + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nsecret\r\n")
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        await wait_for_ended(rig)
        rig.close()
        assert b"secret" not in b"".join(rig.host.bodies)
        (ended,) = rig.events("ended")
        assert " sent=0 received=0 " in ended, ended
        assert ended.endswith(" error=RemoteProtocolError"), ended
        assert "secret" not in "".join(rig.lines())

    _run(test)


async def wait_for_ended(rig: Rig) -> None:
    """Until the host saw the proxy close its connection (polled)."""
    for _ in range(500):
        if rig.host.ended:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the host's connection was never closed")


@pytest.mark.parametrize("method", ["POST", "HEAD"])
def test_an_empty_body_is_sent_again_once_when_its_kept_upstream_had_closed(
        tmp_path: Path, origin: Path, method: str) -> None:
    """A request h11 reads whose body ended before anything was sent (an empty POST, a
    HEAD), on a kept upstream that closes unanswering: sent again once on a new
    connection, its end given again by the machine (BodyEnd until request_done); main
    waited for the client there until the idle time."""
    empty = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"

    def script(number: int, _head: bytes) -> Answer:
        if number == 2:
            return CLOSE
        return empty if number == 3 and method == "HEAD" else FINE

    async def test() -> None:
        rig, reader, writer = await _kept(tmp_path, script)
        asked = rig.request("/again").replace(b"GET ", f"{method} ".encode(), 1)[:-2]
        writer.write(asked + (b"Content-Length: 0\r\n" if method == "POST" else b"")
                     + b"\r\n")
        assert (await _response(reader))[1] == (b"fine\n" if method == "POST" else b"")
        writer.write(rig.request())
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert [head.split(b" ")[:2] for head in rig.host.requests[1:3]] == [
            [method.encode(), b"/again"]] * 2
        assert rig.host.connections == 2
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 4, rig.lines()
        # h11 read the closed upstream's end: its error's name, as for any h11 call
        assert " sent=0 received=0 " in ended[1], ended
        assert ended[1].endswith(" error=RemoteProtocolError"), ended

    _run(test)


def test_a_new_upstream_that_closes_unanswering_ends_the_call_and_is_not_asked_again(
        tmp_path: Path, origin: Path) -> None:
    """A connection's first request is carried out by the lane too (`Lane.carry`), on
    the upstream the task opened: one that closes before it answers was not the last
    request's, so the request is not sent again; the call ends with its line and the
    client's connection closes with no answer."""
    async def test() -> None:
        rig = await _rig(tmp_path, lambda _n, _head: CLOSE)
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        writer.write(rig.request("/once"))
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        rig.close()
        assert len(rig.host.requests) == 1 and rig.host.connections == 1
        assert rig.forwarded == 1
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 1, rig.lines()
        assert " sent=0 received=0 " in ended[0]
        assert ended[0].endswith(" error=ConnectionResetError"), ended

    _run(test)


def test_a_request_that_asks_for_the_close_is_answered_so_and_its_connection_ends(
        tmp_path: Path, origin: Path) -> None:
    """`Connection: close` from the program: the response says so and the connection
    ends after it, on the connection's first request (the task decides it, the lane
    carries it out) and on a kept-alive one (the lane's from its head on)."""
    async def test() -> None:
        rig = await _rig(tmp_path, lambda _n, _head: FINE)
        for kept_alive in (False, True):
            reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
            if kept_alive:
                writer.write(rig.request())
                assert (await _response(reader))[1] == b"fine\n"
            writer.write(rig.request("/last", "Connection: close"))
            head, body = await _response(reader)
            assert b"\r\nConnection: close\r\n" in head and body == b"fine\n", head
            assert await asyncio.wait_for(reader.read(), 10) == b""
            writer.close()
        rig.close()
        assert rig.forwarded == 2  # each connection's first request; the rest the lane's
        assert len(rig.host.requests) == 3
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 3, rig.lines()
        assert all(" sent=0 received=5 " in line and "error" not in line for line in ended)

    _run(test)


def test_a_first_request_with_the_next_behind_it_is_answered_then_the_next(
        tmp_path: Path, origin: Path) -> None:
    """What came behind a request the lane carries out is the machine's next request
    once the response ended (`request_done` with the rest), never lost or read twice."""
    async def test() -> None:
        rig = await _rig(tmp_path, lambda n, _head: FINE.replace(b"fine", b"n=%02d" % n))
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        writer.write(rig.request("/a") + rig.request("/b"))
        assert [(await _response(reader))[1] for _ in range(2)] == [b"n=01\n", b"n=02\n"]
        writer.write(rig.request("/c"))
        assert (await _response(reader))[1] == b"n=03\n"
        writer.close()
        rig.close()
        assert rig.forwarded == 2  # /a and /b decided by the task, /c the lane's own
        assert [head.split(b" ")[1] for head in rig.host.requests] == [b"/a", b"/b", b"/c"]
        assert rig.host.connections == 1
        assert len(rig.events("allowed")) == len(rig.events("ended")) == 3

    _run(test)


@pytest.mark.parametrize("request_fields", [(), ("Content-Length: 4",)])
def test_bytes_a_kept_upstream_sent_unasked_keep_it_from_the_next_request(
        tmp_path: Path, origin: Path, request_fields: tuple[str, ...]) -> None:
    """A kept upstream that sent bytes after its response ended (while the connection
    idled) is never read for the next request, body-less (declined by the lane, decided
    by the task) or with a body (h11's): those bytes answer nothing, and the request
    goes on a new connection."""
    forged = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nforged"

    async def test() -> None:
        rig, reader, writer = await _kept(
            tmp_path, lambda n, _head: (FINE, forged) if n == 1 else FINE)
        (transport,) = _client_transports(rig)
        lane = transport.get_protocol().lane  # type: ignore[attr-defined]
        # the forged bytes reach the kept upstream's inbox
        await _until(lambda: lane.kept[0] is not None and bool(lane.kept[0].reader.held))
        assert lane.kept[0] is not None and lane.kept[0].reader.held
        body = b"body" if request_fields else b""
        writer.write(rig.request("/next", *request_fields) + body)
        assert (await _response(reader))[1] == b"fine\n"
        writer.close()
        rig.close()
        assert rig.host.connections == 2
        assert rig.host.requests[1].startswith(b"GET /next ")

    _run(test)


def test_a_client_gone_between_requests_ends_its_connection_at_once(
        tmp_path: Path, origin: Path) -> None:
    """A client reset while its connection is parked between requests: the parked task
    is woken and reads the error at once, rather than waiting out IDLE_SECONDS."""
    async def test() -> None:
        rig, _reader, writer = await _kept(tmp_path, lambda _n, _head: FINE)
        assert rig.proxy.open
        _reset(writer)
        await _until(lambda: not rig.proxy.open)
        assert not rig.proxy.open  # ended well within IDLE_SECONDS (300 s)
        rig.close()
        assert len(rig.events("allowed")) == len(rig.events("ended")) == 1

    _run(test)


def test_a_client_gone_while_its_request_is_decided_ends_the_call_and_the_connection(
        tmp_path: Path, origin: Path) -> None:
    """A client reset while the task decides its first request (here, in the lookup):
    the request the lane carries then ends at once with its line, and the connection
    with it, rather than waiting out IDLE_SECONDS for a client that is gone."""
    async def test() -> None:
        rig = await _rig(tmp_path, lambda _n, _head: FINE)
        asked, gone = asyncio.Event(), asyncio.Event()
        resolve = rig.proxy.resolver

        async def once_the_client_is_gone(name: str, port: int) -> list[object]:
            asked.set()
            await gone.wait()
            return await resolve(name, port)  # type: ignore[return-value]

        rig.proxy.resolver = once_the_client_is_gone  # type: ignore[assignment]
        _reader, writer = await asyncio.open_connection("127.0.0.1", rig.port)
        writer.write(rig.request())
        await asyncio.wait_for(asked.wait(), 10)
        (transport,) = _client_transports(rig)
        lane = transport.get_protocol().lane  # type: ignore[attr-defined]
        _reset(writer)
        await _until(lambda: lane.reader.exception() is not None)
        gone.set()
        await _until(lambda: not rig.proxy.open)
        assert not rig.proxy.open  # ended well within IDLE_SECONDS (300 s)
        rig.close()
        ended = rig.events("ended")
        assert len(rig.events("allowed")) == len(ended) == 1, rig.lines()
        assert ended[0].endswith(" error=ConnectionResetError"), ended

    _run(test)
