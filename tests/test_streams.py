"""The proxy's connections on asyncio's protocols (lnk_proxy/streams.py), over real
loopback sockets: what a connection's protocol holds and how it is read, its socket no
longer read past twice its limit, an error raised on every read after a reset, a
half-closed plain connection still answered, a drain that waits while the buffer is
full and raises once the connection is lost, and a tunnel's held bytes taken out whole
by lnk_common.wire (the relay's asyncio streams have the same test in test_wire_ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest

from lnk_common import wire
from lnk_proxy.connection import ClientConnection, Forward
from lnk_proxy.lane import CLIENT_BUFFER_BYTES, LaneProtocol, lane_server
from lnk_proxy.streams import Ends, Inbox, Outbox, read_within

# A test's whole scenario gives up after this long (a loaded machine is slow, never this).
SCENARIO_SECONDS = 60.0


async def _poll(condition: Callable[[], bool], what: str) -> None:
    """Wait, in the loop, until `condition` holds (conftest's wait_until, for a loop)."""
    pause = 0.001
    async with asyncio.timeout(SCENARIO_SECONDS):
        while not condition():
            await asyncio.sleep(pause)
            pause = min(2 * pause, 0.05)
    assert condition(), what


async def _pair(limit: int) -> tuple[Ends, socket.socket, asyncio.Server]:
    """A loopback connection: the proxy's side a bare `Ends` protocol, the other a
    blocking socket of the test's."""
    made: list[Ends] = []

    def protocol() -> Ends:
        made.append(Ends(limit))
        return made[-1]

    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    client = socket.create_connection(server.sockets[0].getsockname()[:2])
    await _poll(lambda: bool(made) and made[0].outbox is not None, "the connection made")
    return made[0], client, server


def _run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(SCENARIO_SECONDS):
            await scenario()

    asyncio.run(bounded())


def test_an_inbox_holds_what_came_and_counts_what_is_read_out() -> None:
    async def scenario() -> None:
        ends, client, server = await _pair(1024)
        client.sendall(b"abc")
        client.sendall(b"def")
        await _poll(lambda: ends.inbox.held == 6, "six bytes held")
        assert await ends.inbox.read(4) == b"abcd"
        assert ends.inbox.held == 2
        assert await read_within(ends.inbox, 10, 0.001) == b"ef"  # there: no timer
        with pytest.raises(TimeoutError):
            await read_within(ends.inbox, 10, 0.05)
        client.close()
        assert await ends.inbox.read(10) == b""
        assert ends.inbox.at_eof()
        server.close()

    _run(scenario)


def test_a_second_read_while_the_first_waits_is_a_bug() -> None:
    async def scenario() -> None:
        ends, client, server = await _pair(1024)
        first = asyncio.ensure_future(ends.inbox.read(10))
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="a second read"):
            await ends.inbox.read(10)
        client.sendall(b"x")
        assert await first == b"x"
        client.close()
        server.close()

    _run(scenario)


def test_past_twice_its_limit_the_socket_is_not_read_until_a_read_brings_it_back() -> None:
    async def scenario() -> None:
        limit = 4096
        ends, client, server = await _pair(limit)
        assert ends.outbox is not None
        transport = ends.outbox.transport
        client.sendall(b"x" * (8 * limit))
        await _poll(lambda: ends.inbox.held > 2 * limit, "more than twice the limit held")
        assert not transport.is_reading()
        while ends.inbox.held > limit:
            await ends.inbox.read(limit)
        assert transport.is_reading()
        client.close()
        rest = await ends.inbox.read(-1)
        assert ends.inbox.at_eof() and len(rest) <= 8 * limit
        server.close()

    _run(scenario)


def test_a_reset_connection_raises_its_error_on_every_read_even_with_bytes_held() -> None:
    async def scenario() -> None:
        ends, client, server = await _pair(1024)
        client.sendall(b"sent before the reset")
        await _poll(lambda: ends.inbox.held > 0, "the bytes held")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        await _poll(lambda: ends.inbox.exception() is not None, "the reset seen")
        for _ in range(2):
            with pytest.raises(ConnectionResetError):
                await ends.inbox.read(100)
        assert await wire._emptied(ends.inbox) == b""  # a tunnel's splice: nothing, no raise
        assert ends.outbox is not None
        with pytest.raises(ConnectionResetError):
            await ends.outbox.drain()
        server.close()

    _run(scenario)


def test_a_half_closed_plain_connection_is_still_answered() -> None:
    async def scenario() -> None:
        ends, client, server = await _pair(1024)
        client.sendall(b"ask")
        client.shutdown(socket.SHUT_WR)
        assert await ends.inbox.read(10) == b"ask"
        assert await ends.inbox.read(10) == b""
        assert ends.outbox is not None and not ends.outbox.is_closing()
        ends.outbox.write(b"answer")
        await ends.outbox.drain()
        ends.outbox.close()
        answer = await asyncio.to_thread(lambda: b"".join(iter(lambda: client.recv(100), b"")))
        assert answer == b"answer"
        client.close()
        server.close()

    _run(scenario)


def test_a_drain_waits_while_the_buffer_is_full_and_raises_once_the_connection_is_lost(
        ) -> None:
    async def scenario() -> None:
        ends, client, server = await _pair(1024)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        outbox = ends.outbox
        assert outbox is not None
        # Small kernel buffers on both sides: the transport's own buffer fills after a
        # few writes, and emptying it takes a few reads, not megabytes of 4 KiB reads.
        outbox.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        while not ends.writing_paused:  # the client reads nothing
            outbox.write(b"y" * 65536)
            await asyncio.sleep(0)
        waiting = asyncio.ensure_future(outbox.drain())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        client.setblocking(False)
        while not waiting.done():  # the client reads: the buffer empties, the drain returns
            try:
                client.recv(1 << 20)
            except BlockingIOError:
                await asyncio.sleep(0.001)
        await waiting
        while not ends.writing_paused:
            outbox.write(b"y" * 65536)
            await asyncio.sleep(0)
        waiting = asyncio.ensure_future(outbox.drain())
        await asyncio.sleep(0)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        with pytest.raises(ConnectionError):
            await waiting
        with pytest.raises(ConnectionError):
            await outbox.drain()
        server.close()

    _run(scenario)


def test_a_tunnels_held_bytes_are_taken_out_whole_and_the_rest_left_in_the_socket() -> None:
    """As splice_ends readies a tunnel from a client of the proxy's listener
    (lane_server): reading paused, what the inbox holds taken out, the rest read from
    the socket itself (there, by splice(2)): every byte once, in order."""
    sent = bytes(range(256)) * 4096  # 1 MiB: some held by the inbox, some not yet read

    def rest_of(fd: int) -> bytes:
        os.set_blocking(fd, True)
        with socket.socket(fileno=fd) as sock:
            return b"".join(iter(lambda: sock.recv(65536), b""))

    async def scenario() -> None:
        done: asyncio.Future[tuple[bytes, bytes, bytes]] = (
            asyncio.get_running_loop().create_future())

        async def handle(reader: Inbox, writer: Outbox) -> None:
            head = await reader.read(4)
            await asyncio.sleep(0.05)  # more comes to the inbox meanwhile
            writer.transport.pause_reading()
            held = await wire._emptied(reader)
            fd = os.dup(writer.get_extra_info("socket").fileno())
            done.set_result((head, held, await asyncio.to_thread(rest_of, fd)))
            writer.close()

        listener = socket.create_server(("127.0.0.1", 0))
        server = await lane_server(handle, listener)
        _, client = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
        client.write(sent)
        await client.drain()
        client.close()
        head, held, rest = await done
        server.close()
        assert held  # the inbox held bytes: they were taken out, not lost
        assert head + held + rest == sent

    _run(scenario)


# -- a client's connection while it is HTTP: its bytes are its machine's ----------------

async def _served() -> tuple[LaneProtocol, ClientConnection, socket.socket, asyncio.Server]:
    """A loopback connection to a `lane_server`, its protocol serving a machine (as the
    proxy's task does: Proxy._lane) once the client has sent its first bytes, which
    came to the inbox before."""
    made: list[tuple[Inbox, Outbox]] = []
    release = asyncio.Event()

    async def handle(reader: Inbox, writer: Outbox) -> None:
        made.append((reader, writer))
        await release.wait()

    listener = socket.create_server(("127.0.0.1", 0))
    server = await lane_server(handle, listener)
    client = socket.create_connection(listener.getsockname()[:2])
    client.sendall(b"GET http://a.test/ HTTP/1.1\r\n")
    await _poll(lambda: bool(made) and made[0][0].held > 0, "the first bytes in the inbox")
    protocol = made[0][1].transport.get_protocol()
    assert isinstance(protocol, LaneProtocol)
    machine = ClientConnection()
    protocol.serve(machine)
    release.set()
    return protocol, machine, client, server


def test_an_http_connections_bytes_wait_in_its_machine_until_a_relay_takes_them_back() -> None:
    async def scenario() -> None:
        protocol, machine, client, server = await _served()
        inbox = protocol.inbox
        assert inbox.held == 0 and machine.held == len(b"GET http://a.test/ HTTP/1.1\r\n")
        waiting = asyncio.ensure_future(inbox.arrival())
        await asyncio.sleep(0)
        client.sendall(b"Host: a.test\r\n\r\nnext")
        await waiting  # woken by bytes it does not hold
        await _poll(lambda: machine.held == 49, "the rest in the machine")
        assert inbox.held == 0
        command = machine.next_command()
        assert isinstance(command, Forward) and machine.held == 4  # b"next", behind it
        machine.request_done(b"")
        # A read of the inbox (a relay's) takes the machine's bytes back, first, and
        # every byte after comes to the inbox.
        assert await inbox.read(2) == b"ne"
        client.sendall(b"-more")
        await _poll(lambda: inbox.held == 7, "the next bytes in the inbox")
        assert machine.held == 0 and await inbox.read(100) == b"xt-more"
        client.close()
        assert await inbox.read(10) == b""
        server.close()

    _run(scenario)


def test_past_twice_its_limit_held_by_the_machine_the_socket_waits_for_the_next_wait() -> None:
    async def scenario() -> None:
        protocol, machine, client, server = await _served()
        transport = protocol.outbox.transport if protocol.outbox is not None else None
        assert transport is not None
        sending = asyncio.get_running_loop().run_in_executor(
            None, client.sendall, b"x" * (8 * CLIENT_BUFFER_BYTES))
        await _poll(lambda: machine.held > 2 * CLIENT_BUFFER_BYTES, "past twice the limit")
        assert not transport.is_reading()
        # Bounded: one read's worth past twice the limit at most, however much is sent.
        assert machine.held <= 2 * CLIENT_BUFFER_BYTES + 256 * 1024
        machine.take_held()
        waiting = asyncio.ensure_future(protocol.inbox.arrival())
        await _poll(transport.is_reading, "read again once the task waits")
        await waiting
        client.shutdown(socket.SHUT_RDWR)  # the sending thread woken, by an error
        with contextlib.suppress(OSError):
            await sending
        client.close()
        server.close()

    _run(scenario)


def test_closed_says_the_end_or_the_reset_and_arrival_raises_the_reset() -> None:
    async def scenario() -> None:
        protocol, machine, client, server = await _served()
        closed = asyncio.ensure_future(protocol.inbox.closed())
        await asyncio.sleep(0.01)
        assert not closed.done()
        client.shutdown(socket.SHUT_WR)  # its end: the machine is told too
        await closed
        await _poll(lambda: machine.ended, "the machine told of the end")
        await protocol.inbox.arrival()  # at the end: at once
        server.close()
        protocol2, _machine2, client2, server2 = await _served()
        closed2 = asyncio.ensure_future(protocol2.inbox.closed())
        client2.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client2.close()
        await closed2
        with pytest.raises(ConnectionResetError):
            await protocol2.inbox.arrival()
        client.close()
        server2.close()

    _run(scenario)
