"""Thousands of tunnel ends at once never crowd out a signal.

A pause or the kill switch ends every tunnel together: two splice threads a call, each
telling the event loop it ended. Told one `call_soon_threadsafe` each, they filled the
loop's self-pipe (also the signal wake-up descriptor), SIGTERM's byte was dropped with
"Exception ignored when trying to write to the signal wakeup fd", and the helper would
not stop when told (test_errors_attacks N10 caught the line on a busy machine). The ends
now reach the loop in batches (lnk_common.wire._Ended). Real threads, a real signal.

And a tunnel's first bytes: what a stream holds when its tunnel is spliced is taken out
by the stream's public methods (asyncio's buffer is private), every byte once, over a
real loopback connection; no product module reads a `._buffer`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path

from lnk_common import wire

ENDS = 4000  # twice a 1,000-call pause's, each direction of each tunnel one


def test_a_flood_of_tunnel_ends_while_the_loop_is_busy_loses_no_signal() -> None:
    async def scenario() -> tuple[bool, int]:
        loop = asyncio.get_running_loop()
        termed = asyncio.Event()
        loop.add_signal_handler(signal.SIGUSR1, termed.set)
        futures = [loop.create_future() for _ in range(ENDS)]
        threads = [threading.Thread(target=wire._ENDED.put, args=(loop, done, index))
                   for index, done in enumerate(futures)]
        # The loop busy (as closing 1,000 calls keeps it) while every end comes in.
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)
        try:
            await asyncio.wait_for(termed.wait(), 30)
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        return termed.is_set(), sum(done.result() for done in futures)

    termed, total = asyncio.run(scenario())
    assert termed
    assert total == sum(range(ENDS))  # every end settled, with its own count



def test_a_streams_held_bytes_are_taken_out_whole_by_its_public_methods() -> None:
    """As splice_ends readies a tunnel: reading paused, what the stream holds taken out,
    the rest read from the socket itself (there, by splice(2)): every byte once, in
    order."""
    sent = bytes(range(256)) * 4096  # 1 MiB: some held by the stream, some not yet read

    def rest_of(fd: int) -> bytes:
        os.set_blocking(fd, True)
        with socket.socket(fileno=fd) as sock:
            return b"".join(iter(lambda: sock.recv(65536), b""))

    async def scenario() -> tuple[bytes, bytes, bytes]:
        done: asyncio.Future[tuple[bytes, bytes, bytes]] = (
            asyncio.get_running_loop().create_future())

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readexactly(4)
            await asyncio.sleep(0.05)  # more comes to the stream meanwhile
            writer.transport.pause_reading()  # type: ignore[attr-defined]
            held = await wire._emptied(reader)
            fd = os.dup(writer.get_extra_info("socket").fileno())
            done.set_result((head, held, await asyncio.to_thread(rest_of, fd)))
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=1 << 20)
        port = server.sockets[0].getsockname()[1]
        _, client = await asyncio.open_connection("127.0.0.1", port)
        client.write(sent)
        await client.drain()
        client.close()
        try:
            return await asyncio.wait_for(done, 60)
        finally:
            server.close()

    head, held, rest = asyncio.run(scenario())
    assert held  # the stream held bytes: they were taken out, not lost
    assert head + held + rest == sent


def test_a_stream_whose_connection_failed_gives_nothing_and_raises_nothing() -> None:
    async def scenario() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(b"sent before the reset")
        reader.set_exception(ConnectionResetError())
        return await wire._emptied(reader)

    assert asyncio.run(scenario()) == b""


def test_no_product_module_reads_a_streams_private_buffer() -> None:
    root = Path(__file__).resolve().parent.parent
    readers = [path.relative_to(root).as_posix() for path in root.glob("lnk_*/**/*.py")
               if "._buffer" in path.read_text(encoding="utf-8")]
    assert readers == []


def test_a_tunnel_taken_away_says_so_even_when_it_ends_before_the_loop_is_told(
        tmp_path: Path) -> None:
    """`disallow` of a host: the watch's thread shuts the tunnel's sockets down
    (`sever_calls`), then asks the loop to cancel its call (`end_calls`). The splice
    threads see the shut down at once, so the call can end, and write its `ended` line,
    before the loop runs `end_calls` (CI saw it once, at d07f197): that line says
    `closed=taken-away` all the same, and nothing of the call is kept after. Real
    sockets and real splice threads; the loop is told only once the line is written."""
    from lnk_common.wirelog import WireLog, ended_detail

    log = WireLog(str(tmp_path), "w")
    the_wire = wire.Wire(log=log, settings=str(tmp_path), wire="w")
    ours, clients = socket.socketpair()
    theirs, upstreams = socket.socketpair()

    async def call() -> None:
        started = time.monotonic()
        pipes = (os.pipe(), os.pipe())
        ends = wire.Splice(clients.detach(), b"", upstreams.detach(), b"", pipes)
        sent, received = await the_wire.relay(ends, None)
        log.write("ended", "db.lnkt:7", ended_detail(1, sent, received, started))

    async def scenario() -> asyncio.Task[None]:
        task = asyncio.create_task(call())
        the_wire.open.add(task)
        while task not in the_wire.call_fds:
            await asyncio.sleep(0.01)
        severing = threading.Thread(target=the_wire.sever_calls, args=([task],))
        severing.start()
        await asyncio.wait_for(asyncio.shield(task), 30)  # ended, the loop not told
        severing.join()
        return task

    try:
        task = asyncio.run(scenario())
        lines = (tmp_path / "sandbox" / "wires" / "w" / "log").read_text().splitlines()
        ended = [line.split("\t") for line in lines if "\tended\t" in line]
        assert len(ended) == 1 and "closed=taken-away" in ended[0][3], ended
        the_wire.open.discard(task)  # as the call's own end does
        the_wire.end_calls([task])  # the loop told late: it ended already
        assert log.closed_calls == {}
    finally:
        for sock in (ours, theirs):
            sock.close()
