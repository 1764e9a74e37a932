"""The tunnel's relay (lnk_common.wire): a short tunnel in the event loop, a bulk one in
two threads, pipes kept between tunnels only when empty. Real TCP sockets on loopback,
real splice(2); the relay's two ends as `splice_ends` leaves them (non-blocking)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from lnk_common import wire as wire_module
from lnk_common.wire import Splice, Wire
from lnk_common.wirelog import WireLog

_F_GETPIPE_SZ = 1032


def _pair() -> tuple[socket.socket, socket.socket]:
    """A connected TCP pair on loopback: (the end a program holds, the proxy's end)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        outer = socket.create_connection(server.getsockname())
        inner, _ = server.accept()
    inner.setblocking(False)
    return outer, inner


class _Tunnel:
    """A program's end and an upstream's end, and the relay's ends between them."""

    def __init__(self, client_held: bytes = b"", upstream_held: bytes = b"") -> None:
        self.program, client = _pair()
        self.server, upstream = _pair()
        self.ends = Splice(client.detach(), client_held, upstream.detach(), upstream_held,
                           (wire_module._PIPES.take(), wire_module._PIPES.take()))

    def close(self) -> None:
        self.program.close()
        self.server.close()


def _wire(tmp_path: Path) -> Wire:
    return Wire(log=WireLog(str(tmp_path), "w"))


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _in_thread(job: Callable[[], bytes]) -> list[bytes]:
    """`job` run in a thread (the program's or the server's side, blocking)."""
    found: list[bytes] = []
    thread = threading.Thread(target=lambda: found.append(job()), daemon=True)
    thread.start()
    return found


class _CountedWorkers(wire_module._Workers):
    """The splice threads, each job handed to them counted."""

    __slots__ = ("jobs",)

    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[Callable[[], None]] = []

    def run(self, job: Callable[[], None]) -> None:
        self.jobs.append(job)
        super().run(job)


def _threads_used(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    workers = _CountedWorkers()
    monkeypatch.setattr(wire_module, "_WORKERS", workers)
    return workers.jobs


def test_a_short_tunnel_is_relayed_in_the_loop_with_no_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _threads_used(monkeypatch)
    tunnel = _Tunnel(client_held=b"hello ", upstream_held=b"")

    async def main() -> tuple[int, int]:
        relay = asyncio.ensure_future(_wire(tmp_path).relay(tunnel.ends, None))
        await asyncio.sleep(0)
        tunnel.program.sendall(b"from the program")
        tunnel.program.shutdown(socket.SHUT_WR)
        tunnel.server.sendall(b"from the server")
        tunnel.server.shutdown(socket.SHUT_WR)
        return await asyncio.wait_for(relay, 10)

    counts = asyncio.run(main())
    assert _read_all(tunnel.server) == b"hello from the program"
    assert _read_all(tunnel.program) == b"from the server"
    assert counts == (len(b"hello from the program"), len(b"from the server"))
    assert jobs == []
    tunnel.close()


def test_an_empty_pipe_is_kept_for_the_next_tunnel(tmp_path: Path) -> None:
    wire_module._PIPES.idle.clear()
    first = _Tunnel()
    pipes = set(first.ends.pipes)

    async def carry(tunnel: _Tunnel) -> None:
        relay = asyncio.ensure_future(_wire(tmp_path).relay(tunnel.ends, None))
        await asyncio.sleep(0)
        tunnel.program.sendall(b"x" * 1000)
        tunnel.program.shutdown(socket.SHUT_WR)
        tunnel.server.shutdown(socket.SHUT_WR)
        await asyncio.wait_for(relay, 10)

    asyncio.run(carry(first))
    assert set(wire_module._PIPES.idle) == pipes
    second = _Tunnel()
    assert set(second.ends.pipes) == pipes  # the same two pipes, empty, taken again
    asyncio.run(carry(second))
    assert _read_all(second.server) == b"x" * 1000
    first.close()
    second.close()


def test_a_pipe_not_known_empty_is_closed_not_kept() -> None:
    wire_module._PIPES.idle.clear()
    read_end, write_end = os.pipe()
    os.write(write_end, b"another tunnel's bytes")
    wire_module._PIPES.give_back((read_end, write_end), empty=False, grown=False)
    assert wire_module._PIPES.idle == []
    for fd in (read_end, write_end):
        with pytest.raises(OSError):
            os.fstat(fd)


def test_pipes_past_the_most_kept_are_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_module, "MAX_IDLE_PIPES", 2)
    wire_module._PIPES.idle.clear()
    pipes = [os.pipe() for _ in range(3)]
    for pipe in pipes:
        wire_module._PIPES.give_back(pipe, empty=True, grown=False)
    assert wire_module._PIPES.idle == pipes[:2]
    with pytest.raises(OSError):
        os.fstat(pipes[2][0])
    wire_module._PIPES.idle.clear()
    for pipe in pipes[:2]:
        for fd in pipe:
            os.close(fd)


def test_a_bulk_tunnel_goes_to_threads_arrives_whole_and_its_pipes_shrink_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _threads_used(monkeypatch)
    wire_module._PIPES.idle.clear()
    tunnel = _Tunnel()
    payload = os.urandom(8 * wire_module.LOOP_BYTES + 12345)

    def send() -> bytes:
        tunnel.server.sendall(payload)
        tunnel.server.shutdown(socket.SHUT_WR)
        return b""

    async def main() -> tuple[int, int]:
        relay = asyncio.ensure_future(_wire(tmp_path).relay(tunnel.ends, None))
        received = _in_thread(lambda: _read_all(tunnel.program))
        _in_thread(send)
        await asyncio.sleep(0.01)
        tunnel.program.shutdown(socket.SHUT_WR)
        counts = await asyncio.wait_for(relay, 30)
        while not received:
            await asyncio.sleep(0.01)
        assert hashlib.sha256(received[0]).digest() == hashlib.sha256(payload).digest()
        return counts

    assert asyncio.run(main()) == (0, len(payload))
    assert len(jobs) >= 1  # the downloading direction went to a thread
    assert len(wire_module._PIPES.idle) == 2
    for _read_end, write_end in wire_module._PIPES.idle:
        assert fcntl.fcntl(write_end, _F_GETPIPE_SZ) == wire_module.LOOP_PIPE_BYTES
    tunnel.close()


def test_a_sink_that_cannot_take_a_read_sends_it_all_from_a_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The program reads nothing until the server has sent more than the sockets hold:
    the loop's splice to it cannot finish, the rest goes from a thread, in order (the
    bytes held before the tunnel first)."""
    jobs = _threads_used(monkeypatch)
    monkeypatch.setattr(wire_module, "LOOP_BYTES", 1 << 40)  # only a full sink moves it
    tunnel = _Tunnel(upstream_held=b"held first ")
    payload = os.urandom(64 << 20)  # more than loopback's socket buffers hold

    def send() -> bytes:
        tunnel.server.sendall(payload)
        tunnel.server.shutdown(socket.SHUT_WR)
        return b""

    async def main() -> tuple[int, int]:
        relay = asyncio.ensure_future(_wire(tmp_path).relay(tunnel.ends, None))
        sent = _in_thread(send)
        while not jobs:
            await asyncio.sleep(0.01)
        received = _in_thread(lambda: _read_all(tunnel.program))
        tunnel.program.shutdown(socket.SHUT_WR)
        counts = await asyncio.wait_for(relay, 30)
        while not (received and sent):
            await asyncio.sleep(0.01)
        assert received[0] == b"held first " + payload
        return counts

    assert asyncio.run(main()) == (0, len(b"held first ") + len(payload))
    tunnel.close()


@pytest.mark.parametrize("bulk", [False, True])
def test_a_cancel_ends_the_tunnel_at_once_with_its_counts_and_closes_its_sockets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk: bool) -> None:
    """The kill switch's way (a cancel of the call), in the loop and in threads: the
    program sees its tunnel closed, the relay returns what moved, nothing stays open."""
    if bulk:
        monkeypatch.setattr(wire_module, "LOOP_BYTES", 1)
    jobs = _threads_used(monkeypatch)
    tunnel = _Tunnel()
    wire = _wire(tmp_path)

    async def main() -> tuple[int, int]:
        relay = asyncio.ensure_future(wire.relay(tunnel.ends, None))
        await asyncio.sleep(0)
        tunnel.program.sendall(b"before")
        assert await asyncio.to_thread(tunnel.server.recv, 100) == b"before"
        await asyncio.sleep(0.05)
        relay.cancel()
        return await asyncio.wait_for(relay, 5)

    assert asyncio.run(main()) == (len(b"before"), 0)
    assert bool(jobs) is bulk
    tunnel.program.settimeout(5)
    assert tunnel.program.recv(100) == b""  # closed, not left hanging
    assert wire.tunnel_fds == set()
    for fd in (tunnel.ends.client_fd, tunnel.ends.upstream_fd):
        with pytest.raises(OSError):
            os.fstat(fd)
    tunnel.close()


def test_sever_ends_a_tunnel_relayed_in_the_loop(tmp_path: Path) -> None:
    """The watch's sever (shutdown from another thread) ends a loop-relayed tunnel by
    itself, before any cancel."""
    tunnel = _Tunnel()
    wire = _wire(tmp_path)

    async def main() -> tuple[int, int]:
        relay = asyncio.ensure_future(wire.relay(tunnel.ends, None))
        await asyncio.sleep(0.05)
        threading.Thread(target=wire.sever).start()
        return await asyncio.wait_for(relay, 5)

    assert asyncio.run(main()) == (0, 0)
    with contextlib.suppress(OSError):
        tunnel.program.settimeout(5)
        assert tunnel.program.recv(100) == b""
    tunnel.close()
