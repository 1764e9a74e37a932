"""One allowed call's exchange with its upstream: the request sent on, the response
streamed back, one `allowed` and one `ended` line on the wire's log.

Called only once every check of the request path has passed (lnk_proxy.connection,
then Proxy.check_name and the address check): nothing here decides. A body-less request
is the lane's, whatever its response (lnk_proxy.lane, in callbacks, read by
lnk_proxy.response); here, every other:
- `exchange`: h11 on both sides; the request's body streamed as it comes (from the
  connection's machine, `client_body`: lnk_proxy.connection reads it) or a verb's, held
  whole; the response streamed back as it arrives, never held whole; after a
  `101 Switching Protocols` (a WebSocket asked for, UPGRADES) the two connections
  relayed as they are.
An upstream is left reusable only when its response ended exactly at its end (both
sides DONE, nothing more read): bytes past a response are no response to anything.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

import h11

from lnk_common.bodies import SWITCHED, BodyRead, pass_response
from lnk_common.wire import Refused, Wire
from lnk_common.wirelog import ended_detail
from lnk_proxy.bodiless import outgoing, response_fields
from lnk_proxy.connection import BodyData, BodyEnd, ClientConnection, Continue, NeedBody
from lnk_proxy.streams import Inbox, Outbox, arrival_within, read_within
from lnk_proxy.upstream import CHUNK, Upstream, held_bytes

__all__ = [
    "IDLE_SECONDS",
    "UPGRADES",
    "BodyRefused",
    "Outcome",
    "asks_to_upgrade",
    "client_body",
    "exchange",
    "next_cycle",
    "outgoing",
    "reader_of",
]

# A connection with nothing moving either way for this long is closed.
IDLE_SECONDS = 300.0

# The protocols a request may ask to switch to, default deny. After a 101 the bytes are
# relayed unread, so only a protocol that carries no further requests may be: a WebSocket
# talks to the resource it was opened on. h2c is not (HTTP/2 in clear would carry any
# number of requests, each with an :authority of its own, past every check: the "h2c
# smuggling" of proxies that let it through); an Upgrade field naming anything else is
# not sent on, and the server answers as HTTP/1.1.
UPGRADES = frozenset({b"websocket"})


def asks_to_upgrade(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """A request with an Upgrade field that its Connection field names (RFC 9110 7.8),
    naming one protocol, of UPGRADES."""
    tokens = {token.strip().lower() for name, value in headers if name.lower() == b"connection"
              for token in value.split(b",")}
    asked = [value.strip().lower() for name, value in headers if name.lower() == b"upgrade"]
    return b"upgrade" in tokens and len(asked) == 1 and asked[0] in UPGRADES


class Outcome:
    """What one exchange did: bytes each way, whether a response began, how it ended."""

    __slots__ = ("client_gone", "failure", "received", "responded", "reusable", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.responded = False
        self.reusable = False
        self.client_gone = False
        self.failure = ""


def next_cycle(client: h11.Connection, outcome: Outcome) -> tuple[bool, bytes]:
    """(whether the client's connection takes another request, what it sent of it)."""
    if outcome.failure or client.our_state is not h11.DONE or client.their_state is not h11.DONE:
        return False, b""
    try:
        client.start_next_cycle()
    except h11.LocalProtocolError:
        return False, b""  # the client or the server asked to close
    return True, client.trailing_data[0]


async def _watch_client(reader: Inbox, upstream: Upstream,
                        outcome: Outcome) -> None:
    """End the upstream call when its client has gone (its connection ended): the
    provider's work and the proxy's socket are not held for nobody."""
    await reader.closed()
    outcome.client_gone = True
    outcome.failure = " error=client-gone"
    upstream.close()


# -- the client's body, from the connection's machine --------------------------------

class BodyRefused(Exception):
    """The connection's machine refused the request's body (`refusal`: 400 for framing
    h11 refuses, 413 past a verb's limit); the connection ends."""

    def __init__(self, refusal: Refused) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


def client_body(connection: ClientConnection, reader: Inbox,
                writer: Outbox, idle: float) -> BodyRead:
    """What reads the request's body for lnk_common.bodies and the exchange: the
    machine's body commands carried out (the client's next bytes waited for as it needs
    them, at most `idle` seconds: they come to the machine; a 100 written for a client
    that waits for one) until its next bytes (BodyData) or None at its end; BodyRefused
    for its refusal."""
    async def read() -> bytes | None:
        while True:
            command = connection.next_body()
            if isinstance(command, NeedBody):
                await arrival_within(reader, idle)
            elif isinstance(command, Continue):
                writer.write(command.data)
            elif isinstance(command, BodyData):
                return command.data
            elif isinstance(command, BodyEnd):
                return None
            else:
                raise BodyRefused(command.refusal)
    return read


# -- h11's exchange ----------------------------------------------------------------------

async def exchange(wire: Wire, authority: str, kind: str, client: h11.Connection,
                   reader: Inbox, writer: Outbox,
                   upstream: Upstream, request: h11.Request, *, body: bytes | BodyRead,
                   watch_client: bool = False) -> Outcome:
    """One allowed call: `request` and its body (`body`, taken whole already, or what
    reads the client's, streamed as it comes: `client_body`) to `upstream`, and the
    response streamed back as it arrives, never held whole; after a 101 the two
    connections relayed as they are. An `allowed` and an `ended` line on the wire's
    log. The upstream is closed here unless the exchange left it reusable (both DONE).
    `watch_client`: a client that goes away ends the upstream call (a model's answer
    can take minutes before its first byte)."""
    call = next(wire.ids)
    wire.log.write("allowed", authority, f"id={call} kind={kind}")
    started = time.monotonic()
    conn = upstream.conn
    outcome = Outcome()
    switched = False
    watcher = (asyncio.ensure_future(_watch_client(reader, upstream, outcome))
               if watch_client else None)
    try:
        await _send_request(upstream, request, body, outcome)
        switched = await _pass_response(client, writer, upstream, outcome)
        if switched:
            await _relay_switched(wire, client, reader, writer, upstream, outcome)
    except (h11.ProtocolError, ConnectionError, TimeoutError) as error:
        outcome.failure = outcome.failure or f" error={type(error).__name__}"
    except BodyRefused:  # a forwarded body has no limit: h11 refused its framing, which
        # the log says by h11's error's name, as it always did
        outcome.failure = outcome.failure or " error=RemoteProtocolError"
    except Refused:  # no descriptor left for the switched connection's relay
        outcome.failure = " error=out-of-descriptors"
    finally:  # an ended line for every allowed one, even when the proxy is stopping
        if watcher is not None:
            watcher.cancel()
        # Bytes past the response's end are no response to anything: a connection that
        # has them is not used again (they would be read as the next request's response).
        outcome.reusable = (not outcome.failure and not switched
                            and conn.our_state is h11.DONE and conn.their_state is h11.DONE
                            and not conn.trailing_data[0] and not held_bytes(upstream))
        if not outcome.reusable:
            upstream.close()
        wire.log.write("ended", authority,
                       ended_detail(call, outcome.sent, outcome.received, started,
                                    outcome.failure))
    return outcome


async def _send_request(upstream: Upstream, request: h11.Request, body: bytes | BodyRead,
                        outcome: Outcome) -> None:
    """The request's head and its body to the upstream."""
    conn, up_writer = upstream.conn, upstream.writer
    up_writer.write(conn.send(request))
    if isinstance(body, bytes):
        if body:
            up_writer.write(conn.send(h11.Data(data=body)))
        up_writer.write(conn.send(h11.EndOfMessage()))
        await up_writer.drain()
        outcome.sent = len(body)
        return
    while True:  # the client's body, if any, as the machine gives it
        piece = await body()
        if piece is None:
            up_writer.write(conn.send(h11.EndOfMessage()))
            await up_writer.drain()
            return
        outcome.sent += len(piece)
        up_writer.write(conn.send(h11.Data(data=piece)))
        await up_writer.drain()


async def _pass_response(client: h11.Connection, writer: Outbox,
                         upstream: Upstream, outcome: Outcome) -> bool:
    """The response, streamed back as it comes (lnk_common.bodies), its hop-by-hop fields
    taken out; whether it was a 101 (switched)."""
    ended = await pass_response(upstream.conn, client, writer,
                                reader_of(upstream.reader, IDLE_SECONDS), outcome,
                                fields=response_fields)
    return ended == SWITCHED


def reader_of(reader: Inbox, idle: float) -> Callable[[], Awaitable[bytes]]:
    """What reads `reader` for lnk_common.bodies: a read of up to CHUNK bytes, waiting
    at most `idle` seconds (lnk_proxy.streams.read_within)."""
    return lambda: read_within(reader, CHUNK, idle)


async def _relay_switched(wire: Wire, client: h11.Connection, reader: Inbox,
                          writer: Outbox, upstream: Upstream,
                          outcome: Outcome) -> None:
    """After a 101: what each side sent after the switch goes first, then all else,
    relayed unread (lnk_common.wire's splice)."""
    early_up, early_down = client.trailing_data[0], upstream.conn.trailing_data[0]
    upstream.writer.write(early_up)
    writer.write(early_down)
    ends = await wire.splice_ends(reader, writer, upstream.reader, upstream.writer)
    more_sent, more_received = await wire.relay(ends, upstream.writer)
    outcome.sent += len(early_up) + more_sent
    outcome.received += len(early_down) + more_received
