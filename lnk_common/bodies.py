"""An HTTP/1.1 request body read whole within a limit, and a response streamed back as
it comes: what the proxy's verbs and exchanges (lnk_proxy.verb_call, lnk_proxy.exchange)
and the relay's models port (lnk_relay.relay) each did in a copy of their own.

h11 reads both sides; these functions only move its events, and decide nothing of the
call: the caller gives the limit and the refusals' fixed reasons (never h11's message,
which quotes the bytes it refused: the program learns the class, not the byte), a
`take` that counts a body's bytes against the caller's memory bound (and refuses past
it), and a `read` that waits at most the caller's idle time for the next bytes (and
raises TimeoutError past it). Nothing is held past the read that brought it, except a
body asked for whole.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import h11

from lnk_common.wire import ByteWriter, Refused

__all__ = ["PASSED", "SWITCHED", "UPSTREAM_CLOSED", "BodyRead", "BodyShare", "HeldBodies",
           "ResponsePassing", "Streamed", "collect_body", "h11_body", "next_event", "pass_response",
           "read_body"]

Read = Callable[[], Awaitable[bytes]]
# A body's next bytes, None at its end: h11's reading (`h11_body`, the relay's), or the
# proxy's connection machine's body commands (lnk_proxy.exchange.client_body).
BodyRead = Callable[[], Awaitable[bytes | None]]
Fields = list[tuple[bytes, bytes]]

# How a response's passing ended: its end passed (the exchange may be kept), a `101
# Switching Protocols` passed (the caller relays what follows, unread), or the upstream
# closed before its response ended.
PASSED = "passed"
SWITCHED = "switched"
UPSTREAM_CLOSED = "upstream-closed"


class HeldBodies:
    """The request bodies one process holds at once, across its calls, at most `limit`
    bytes: each call holds its body whole (up to its own limit) until it is sent on, and
    a program opening many connections with large bodies would otherwise hold gigabytes
    of this machine's memory, outside the sandbox. Past it, a call is refused (503,
    `full`: the caller's fixed reason), nothing read. The proxy's verbs and the relay's
    models port each have one (their MAX_HELD_BODY_BYTES)."""

    __slots__ = ("full", "held", "limit")

    def __init__(self, limit: int, full: str) -> None:
        self.limit = limit
        self.full = full
        self.held = 0

    def share(self) -> BodyShare:
        """A new call's share, empty."""
        return BodyShare(self)


class BodyShare:
    """One call's share of its process's HeldBodies: its Content-Length taken before a
    byte is read (a chunked body's pieces as they come: `take`, read_body's), given back
    by `release` however the call ends (and again harmlessly)."""

    __slots__ = ("bodies", "taken")

    def __init__(self, bodies: HeldBodies) -> None:
        self.bodies = bodies
        self.taken = 0

    def take(self, count: int) -> None:
        bodies = self.bodies
        if bodies.held + count > bodies.limit:
            raise Refused(503, bodies.full, counts=False)
        bodies.held += count
        self.taken += count

    def release(self) -> None:
        self.bodies.held -= self.taken
        self.taken = 0


class Streamed(Protocol):
    """What a response's passing has moved so far, kept current as it goes (an error in
    the middle leaves the count of what went, and whether a response began)."""

    received: int
    responded: bool


async def next_event(connection: h11.Connection, read: Read) -> object:
    """The next h11 event of `connection`, `read` giving it more bytes as it needs them."""
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        connection.receive_data(await read())


async def read_body(request: h11.Request, client: h11.Connection,
                    writer: ByteWriter, read: Read, *, limit: int,
                    too_large: Refused, take: Callable[[int], None], unreadable: str,
                    stalled: str) -> bytes:
    """`collect_body` of the body h11 reads from `client` (`h11_body`), `read` giving
    it more bytes as it needs them."""
    return await collect_body(request, h11_body(client, writer, read), limit=limit,
                              too_large=too_large, take=take, unreadable=unreadable,
                              stalled=stalled)


def h11_body(client: h11.Connection, writer: ByteWriter, read: Read) -> BodyRead:
    """The request body's pieces as h11 reads them from `client`, `read` giving it more
    bytes as it needs them. A client waiting for a 100 is sent one when the body is
    first asked for: the body is taken here."""
    asked = False

    async def piece() -> bytes | None:
        nonlocal asked
        if not asked:
            asked = True
            if client.they_are_waiting_for_100_continue:
                writer.write(client.send(h11.InformationalResponse(status_code=100,
                                                                   headers=[])) or b"")
        event = await next_event(client, read)
        if isinstance(event, h11.Data):
            return bytes(event.data)
        if isinstance(event, h11.EndOfMessage):
            return None
        raise ConnectionError("the client closed before its body ended")
    return piece


async def collect_body(request: h11.Request, read: BodyRead, *, limit: int,
                       too_large: Refused, take: Callable[[int], None], unreadable: str,
                       stalled: str) -> bytes:
    """The request's whole body, at most `limit` bytes, from `read`'s pieces, or
    Refused: `too_large` (413) from the Content-Length before a byte is read, else as it
    passes; what `take` raises (its share taken from the Content-Length, or a chunked
    body's as it comes); 400 `unreadable` for framing h11 refuses; 408 `stalled` when
    `read` times out; what `read` raises itself."""
    declared: int | None = None
    for name, value in request.headers:
        if name == b"content-length":
            declared = int(value)  # h11 checked it is one number
            if declared > limit:
                raise too_large
            take(declared)
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            piece = await read()
            if piece is None:
                return b"".join(chunks)
            size += len(piece)
            if size > limit:
                raise too_large
            if declared is None:
                take(len(piece))
            chunks.append(piece)
    except h11.RemoteProtocolError:
        raise Refused(400, unreadable) from None
    except TimeoutError:
        raise Refused(408, stalled) from None


class ResponsePassing:
    """One upstream response passed to the client as its bytes come (sans IO): h11 reads
    the upstream's side (`upstream`, told the request), `client` (h11's server side, its
    request read) writes the client's, `fields` makes the client's response fields from
    the upstream's (the hop-by-hop ones taken out), `streamed` counts what passed.
    `passed()` gives the bytes for the client from what h11 holds now, `feed(data)`
    after giving it `data` (b"" is the upstream's end); `ended` is None until PASSED,
    SWITCHED or UPSTREAM_CLOSED. A 1xx other than 101 is not passed (a 100 for a body the
    caller sent whole); h11 admits a 101 only when the request asked to switch. h11's
    RemoteProtocolError escapes (the upstream's bytes are no response). The proxy's
    exchanges, in a task or in callbacks, and the relay's all read a response here."""

    __slots__ = ("client", "ended", "fields", "streamed", "upstream")

    def __init__(self, upstream: h11.Connection, client: h11.Connection, streamed: Streamed,
                 *, fields: Callable[[Fields], Fields]) -> None:
        self.upstream = upstream
        self.client = client
        self.streamed = streamed
        self.fields = fields
        self.ended: str | None = None

    def feed(self, data: bytes) -> bytes:
        """The client's bytes once the upstream's `data` is read (b"": its end)."""
        self.upstream.receive_data(data)
        return self.passed()

    def passed(self) -> bytes:
        """The client's bytes for every event h11 holds, until it needs more or the
        response ends (`ended`)."""
        out: list[bytes] = []
        client, streamed = self.client, self.streamed
        while self.ended is None:
            event = self.upstream.next_event()
            if event is h11.NEED_DATA:
                break
            if isinstance(event, h11.InformationalResponse):
                if event.status_code != 101:
                    continue
                streamed.responded = True
                out.append(client.send(h11.InformationalResponse(
                    status_code=101, headers=event.headers, reason=event.reason)) or b"")
                self.ended = SWITCHED
            elif isinstance(event, h11.Response):
                streamed.responded = True
                out.append(client.send(h11.Response(
                    status_code=event.status_code, headers=self.fields(list(event.headers)),
                    reason=event.reason)) or b"")
            elif isinstance(event, h11.Data):
                streamed.received += len(event.data)
                out.append(client.send(h11.Data(data=event.data)) or b"")
            elif isinstance(event, h11.EndOfMessage):
                out.append(client.send(h11.EndOfMessage()) or b"")
                self.ended = PASSED
            else:
                self.ended = UPSTREAM_CLOSED  # h11's ConnectionClosed: it did not end
        return b"".join(out)


async def pass_response(upstream: h11.Connection, client: h11.Connection,
                        writer: ByteWriter, read: Read, streamed: Streamed, *,
                        fields: Callable[[Fields], Fields]) -> str:
    """The upstream's response, streamed back to the client as it comes
    (ResponsePassing, driven by `read`); PASSED, SWITCHED or UPSTREAM_CLOSED. Every
    event of one read is written at once, with one drain, before the next read: a
    stream's many small events cost one send a read, not one an event (19 µs of CPU an
    event, measured, was most of a stream's cost)."""
    passing = ResponsePassing(upstream, client, streamed, fields=fields)
    out = passing.passed()
    while passing.ended is None:
        if out:
            writer.write(out)
            await writer.drain()
        out = passing.feed(await read())
    if out:
        writer.write(out)
        await writer.drain()
    return passing.ended
