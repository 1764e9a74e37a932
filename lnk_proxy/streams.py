"""The proxy's connections on asyncio's public protocol API: each connection's protocol
(`Ends`, an asyncio.Protocol) owns the bytes it received (`Inbox`) and says when its
transport's buffer is full (`Outbox.drain`); no StreamReader, StreamReaderProtocol or
StreamWriter, whose buffers and flow control are asyncio's private parts.

Trust: none in the bytes; this module only holds and moves them. What it keeps of
asyncio streams' behaviour, on purpose (the proxy's paths were written against it):
- a read returns what is there (up to its size) at once, else waits for the next bytes
  or the end; a connection that failed raises its error on every read after, even with
  bytes held (they are no longer worth answering);
- the socket is no longer read while more than twice the inbox's limit is held, and is
  read again once a read brings it to the limit (a client that sends faster than its
  calls go holds a bounded amount of the proxy's memory);
- a drain waits while the transport's buffer is past its high-water mark, and raises
  once the connection is lost;
- a half-closed plain connection stays open for the answer (`eof_received` True); over
  TLS asyncio closes it whatever we say, so we say False.

Two decisions need to know whether an inbox holds bytes not read yet (`held`): a read
that finds them there sets no timer (a timer set and cancelled costs a few µs more than
none), and an upstream that sent more than its response's length is not used again
(those bytes would be read as the next request's response).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

__all__ = ["Ends", "Inbox", "Outbox", "arrival_within", "held", "read_within"]


class Inbox:
    """A connection's received bytes, until they are read. One reader at a time (a
    second read waiting at once is a bug: RuntimeError).

    A client's connection gives its bytes to its machine while it is HTTP (lnk_proxy.lane
    `LaneProtocol.serve`): the inbox then holds none, but says what came (`arrival`) and
    when the connection ended (`closed`), and pauses the socket's reading past twice its
    limit held by the machine (`arrived`). The first read takes the machine's bytes back
    (`hand_over`'s `source`): from then on the connection is a relay's, and its bytes
    are here, the machine's first."""

    __slots__ = ("_closed", "_eof", "_error", "_held", "_limit", "_paused", "_source",
                 "_transport", "_waiter")

    def __init__(self, limit: int) -> None:
        self._limit = limit  # past twice this, the socket is no longer read
        self._held = bytearray()
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.Transport | None = None
        self._paused = False  # reading paused by this inbox (not by a splice's)
        # While the bytes are another's (a machine's): what gives them back, once.
        self._source: Callable[[], bytes] | None = None
        self._closed: asyncio.Future[None] | None = None  # `closed`'s, made when asked

    @property
    def held(self) -> int:
        """The bytes received and not read yet."""
        return len(self._held)

    def attach(self, transport: asyncio.Transport) -> None:
        self._transport = transport

    def exception(self) -> BaseException | None:
        """The error the connection ended on, or None."""
        return self._error

    def at_eof(self) -> bool:
        """The connection's end came and every byte before it was read."""
        return self._eof and not self._held

    def feed_data(self, data: bytes) -> None:
        assert not self._eof, "bytes after the connection's end"
        if not data:
            return
        self._held += data
        self.arrived(len(self._held))

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()
        self._ended()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.cancelled():
            waiter.set_exception(error)
        self._ended()

    # -- while the bytes are another's (a client's machine) ------------------------------

    def hand_over(self, source: Callable[[], bytes]) -> bytes:
        """The bytes go elsewhere from now (the protocol gives them), until a read takes
        them back from `source`: what is held here, taken out for the new holder."""
        self._source = source
        held = bytes(self._held)
        self._held.clear()
        return held

    def arrived(self, held: int) -> None:
        """Bytes came (here, or given elsewhere), and `held` are now held: the waiter
        woken, the socket no longer read past twice the limit (until a read or a wait
        brings it back)."""
        self._wake()
        transport = self._transport
        if transport is not None and not self._paused and held > 2 * self._limit:
            try:
                transport.pause_reading()
            except NotImplementedError:  # a transport that cannot pause: all is held
                self._transport = None
            else:
                self._paused = True

    async def arrival(self) -> None:
        """Wait for what comes next (bytes given elsewhere, or the end); returns at once
        at the end, and raises the connection's error."""
        if self._error is not None:
            raise self._error
        if not self._eof:
            await self._wait()

    async def closed(self) -> None:
        """Returns once the connection's end or its error came."""
        if self._eof or self._error is not None:
            return
        if self._closed is None:
            self._closed = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._closed)

    def _ended(self) -> None:
        closed = self._closed
        if closed is not None and not closed.done():
            closed.set_result(None)

    async def read(self, n: int = -1) -> bytes:
        """Up to `n` bytes (at least one, or b"" at the end), waiting for them if none
        are held; with `n` below 0, every byte until the end."""
        if self._source is not None:  # the bytes come back here: the machine's first
            source, self._source = self._source, None
            self._held[:0] = source()
        if self._error is not None:
            raise self._error
        if n == 0:
            return b""
        if n < 0:
            blocks = []
            while block := await self.read(self._limit):
                blocks.append(block)
            return b"".join(blocks)
        if not self._held and not self._eof:
            await self._wait()
        data = bytes(self._held[:n])
        del self._held[:n]
        if self._paused and len(self._held) <= self._limit and not self._eof:
            self._paused = False
            assert self._transport is not None  # paused only with one
            self._transport.resume_reading()
        return data

    async def _wait(self) -> None:
        if self._waiter is not None:
            raise RuntimeError("a second read of one connection while the first waits")
        if self._paused:  # waiting while paused would wait for ever
            self._paused = False
            assert self._transport is not None
            self._transport.resume_reading()
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.cancelled():
            waiter.set_result(None)


class Outbox:
    """A connection's sending side: its transport, and a drain that waits while the
    transport's buffer is full (the protocol says when)."""

    __slots__ = ("_ends", "transport")

    def __init__(self, transport: asyncio.Transport, ends: Ends) -> None:
        self.transport = transport
        self._ends = ends

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    def can_write_eof(self) -> bool:
        return self.transport.can_write_eof()

    def write_eof(self) -> None:
        self.transport.write_eof()

    def close(self) -> None:
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    async def drain(self) -> None:
        """Returns once the transport's buffer is below its high-water mark; raises the
        connection's error, or ConnectionResetError once it is lost."""
        error = self._ends.inbox.exception()
        if error is not None:
            raise error
        if self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost be called
        await self._ends.drained()


class Ends(asyncio.Protocol):
    """One connection's protocol: the bytes in to its `inbox`, flow control for its
    `outbox` (made when the connection is)."""

    def __init__(self, limit: int) -> None:
        self.inbox = Inbox(limit)
        self.outbox: Outbox | None = None
        # Whether the transport's buffer is past its high-water mark (asyncio says so
        # once, when it goes past: a drain, or an exchange begun meanwhile, must know).
        self.writing_paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._lost = False
        self._over_tls = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream's (TCP or TLS)
        self.inbox.attach(transport)
        self._over_tls = transport.get_extra_info("sslcontext") is not None
        self.outbox = Outbox(transport, self)

    def data_received(self, data: bytes) -> None:
        self.inbox.feed_data(data)

    def eof_received(self) -> bool:
        self.inbox.feed_eof()
        return not self._over_tls  # plain: half-closed, the answer still goes

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self.inbox.feed_eof()
        else:
            self.inbox.set_exception(exc)
        self._lost = True
        if self.writing_paused:
            for waiter in self._drain_waiters:
                if not waiter.done():
                    if exc is None:
                        waiter.set_result(None)
                    else:
                        waiter.set_exception(exc)

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def drained(self) -> None:
        if self._lost:
            raise ConnectionResetError("Connection lost")
        if not self.writing_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)


def held(reader: Inbox) -> bool:
    """Whether `reader` holds bytes not read yet."""
    return reader.held > 0


async def read_within(reader: Inbox, size: int, seconds: float) -> bytes:
    """What `reader` has (up to `size` bytes), waiting at most `seconds` for it;
    TimeoutError past that. asyncio.timeout, not wait_for (one timer, no task), and no
    timer at all when the bytes are there already."""
    if reader.held:
        return await reader.read(size)
    async with asyncio.timeout(seconds):
        return await reader.read(size)


async def arrival_within(reader: Inbox, seconds: float) -> None:
    """`reader.arrival()`, waiting at most `seconds`; TimeoutError past that."""
    async with asyncio.timeout(seconds):
        await reader.arrival()
