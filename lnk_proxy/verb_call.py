"""The verbs' one interface, and one verb call's I/O: what a verb's own code talks through.

A verb is an object with `call(call, rest)` and `close()` (`Verb`), registered with the
Proxy under its path segment (`/_link/<name>/…`: lnk_proxy.verbs names them) only when
the policy turns it on; every other name answers 404 naming the key that turns it on.
The proxy has checked the request's head and route (lnk_proxy.connection) before a verb
is called; the verb's own checks come next, in the verb's module, and the call's I/O is
a `VerbCall`'s: the wire's gate, the body read whole within a limit and within the
proxy's MAX_HELD_BODY_BYTES, a refusal in the JSON shape the providers' SDKs read (then
what the program still sends dropped for LINGER_SECONDS, so the refusal is read,
not reset away), an answer of the verb's own, or an exchange with an upstream.

The model and secret verbs are one path (`service_call`, a `ServiceVerb`): the gate,
where the call goes (a provider, a secret's rule), the call admitted before its body,
the body read and rewritten, the upstream from the verb's pool of kept connections or
new (looked up, every address checked as for any call, though no `hosts` entry names
it, TLS verified), the exchange, and one retry on a new connection when a kept one had
closed before any answer (the body is ours, held whole).
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Protocol, TypeVar

import h11

from lnk_common.bodies import collect_body
from lnk_common.wire import Refused, linger
from lnk_proxy.connection import UNREADABLE_BODY, ClientConnection, body_too_large
from lnk_proxy.exchange import BodyRefused, Outcome, client_body, exchange, next_cycle
from lnk_proxy.streams import Inbox, Outbox
from lnk_proxy.target import Target
from lnk_proxy.upstream import Pool, Upstream, open_upstream
from lnk_proxy.verbs import asked_line

if TYPE_CHECKING:
    from lnk_proxy.server import Proxy

__all__ = [
    "BODY_IDLE_SECONDS",
    "BODY_STALLED",
    "HELD_BODIES_FULL",
    "MAX_HELD_BODY_BYTES",
    "UNREADABLE_BODY",
    "Keep",
    "ServiceVerb",
    "Verb",
    "VerbCall",
    "service_call",
]

# A verb's body is held whole until its call ends (read, checked, rewritten, and kept
# for the one retry on a new connection): each call up to its limit, 16 to 50 MiB. These
# are the bytes the proxy holds at once across every verb call of the sandbox; a program
# opening many connections with large bodies would otherwise hold gigabytes of this
# machine's memory, outside the sandbox (ten held calls grew the proxy by 318 MiB). The
# relay's MAX_HELD_BODY_BYTES, for the same reason: four bodies at the model limit. A
# call's share is taken from its Content-Length before a byte is read (a chunked body's
# as it comes) and given back when the call ends; past it, 503, nothing read.
MAX_HELD_BODY_BYTES = 128 * 1024 * 1024
# A verb's body may pause this long between reads (an SDK sends it at once; a large
# base64 image over a slow link still moves every minute): a body dribbled to hold its
# share of MAX_HELD_BODY_BYTES is let go (408) within this. The relay's BODY_IDLE_SECONDS.
BODY_IDLE_SECONDS = 60.0

# UNREADABLE_BODY, a body h11 refuses, is the connection's machine's (it decides it).
BODY_STALLED = f"the request body stalled (nothing for {BODY_IDLE_SECONDS:g} s)"
HELD_BODIES_FULL = (f"the proxy holds {MAX_HELD_BODY_BYTES // (1024 * 1024)} MiB of verb "
                    "request bodies already (MAX_HELD_BODY_BYTES); try again when a call "
                    "has ended")

# What a call leaves of its client connection: whether it takes another request, and
# what the client sent of that one already.
Keep = tuple[bool, bytes]
_ENDS: Keep = (False, b"")


class Verb(Protocol):
    """A verb: its call (`rest`: the target after `/_link/<name>`), and its end (kept
    connections, tools' processes)."""

    async def call(self, call: VerbCall, rest: str) -> Keep: ...

    def close(self) -> None: ...


class VerbCall:
    """One verb call's I/O (see the module's text): the request as h11 read it, the
    client's connection and its machine (`connection`, whose body commands give the
    body), and the call's share of MAX_HELD_BODY_BYTES (given back by `release`, however
    the call ends)."""

    __slots__ = ("client", "connection", "proxy", "reader", "request", "share", "writer")

    def __init__(self, proxy: Proxy, request: h11.Request, client: h11.Connection,
                 connection: ClientConnection, reader: Inbox,
                 writer: Outbox) -> None:
        self.proxy = proxy
        self.request = request
        self.client = client
        self.connection = connection
        self.reader = reader
        self.writer = writer
        self.share = proxy.held_bodies.share()

    def header(self, name: bytes) -> str | None:
        for field, value in self.request.headers:
            if field == name:
                return value.decode("latin-1")
        return None

    # -- the body -----------------------------------------------------------------------

    def release(self) -> None:
        self.share.release()

    async def body(self, limit: int) -> bytes:
        """The request's whole body, at most `limit` bytes, or Refused: 413 over the limit
        (from the Content-Length before a byte is read, else as it passes), 503 past
        MAX_HELD_BODY_BYTES, 400 for framing h11 refuses, 408 for a body that stalls.
        The reasons are fixed text: nothing of the program's bytes is quoted. The 413
        and the 400 are the connection's machine's (lnk_proxy.connection), its bytes
        the machine's body commands."""
        refused = self.connection.limit_body(limit)  # the Content-Length, before a byte
        if refused is not None:
            raise refused.refusal
        pieces = client_body(self.connection, self.reader, self.writer, BODY_IDLE_SECONDS)

        async def read() -> bytes | None:
            try:
                return await pieces()
            except BodyRefused as error:
                raise error.refusal from None

        return await collect_body(self.request, read, limit=limit,
                                  too_large=body_too_large(limit), take=self.share.take,
                                  unreadable=UNREADABLE_BODY, stalled=BODY_STALLED)

    # -- answers ------------------------------------------------------------------------

    async def refuse(self, where: str, refusal: Refused, *, echo: bool = True) -> Keep:
        """A verb's refusal (JSON), then what the program still sends dropped until it
        closes, for at most LINGER_SECONDS (lnk_common.wire.linger); the connection
        ends. With `echo`, a 404 or 405 tells the program the method and path it sent
        (the log keeps the reason only: no path)."""
        if echo and refusal.status in (404, 405):
            got = asked_line(self.request.method, self.request.target)
            refusal = Refused(refusal.status, f"{refusal.reason}; got {got}",
                              counts=refusal.counts, logged=refusal.logged,
                              ordinary=refusal.ordinary, final=refusal.final)
        await self.proxy.refuse(self.writer, where, refusal, verb=True)
        await linger(self.reader, self.writer)
        return _ENDS

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]],
                      body: bytes) -> Keep:
        """An answer of the verb's own, and whether the connection goes on."""
        client = self.client
        headers = [*headers, (b"content-length", str(len(body)).encode("ascii"))]
        data = client.send(h11.Response(status_code=status, headers=headers)) or b""
        if body:
            data += client.send(h11.Data(data=body)) or b""
        data += client.send(h11.EndOfMessage()) or b""
        self.writer.write(data)
        await self.writer.drain()
        if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
            return _ENDS
        try:
            client.start_next_cycle()
        except h11.LocalProtocolError:
            return _ENDS
        return True, client.trailing_data[0]

    async def exchange(self, authority: str, kind: str, upstream: Upstream,
                       request: h11.Request, body: bytes) -> Outcome:
        """The admitted call to its upstream (lnk_proxy.exchange), a client that goes
        away ending it."""
        return await exchange(self.proxy, authority, kind, self.client, self.reader,
                              self.writer, upstream, request, body=body, watch_client=True)

    def next_cycle(self, outcome: Outcome) -> Keep:
        return next_cycle(self.client, outcome)


# -- the model and secret verbs' one path ----------------------------------------------

PlaceT = TypeVar("PlaceT")
AdmittedT = TypeVar("AdmittedT")


class ServiceVerb(Protocol[PlaceT, AdmittedT]):
    """A verb that calls a service over TLS with a key of Link's (model, secret). Each
    step raises Refused with its one line."""

    kind: str  # the log's kind=
    max_body_bytes: int
    tls: ssl.SSLContext

    def place(self, rest: str) -> PlaceT:
        """Where the call goes (a provider named, a secret's rule read now)."""
        ...

    def where(self, place: PlaceT) -> tuple[str, int]:
        """The service's host and port."""
        ...

    def admit_at(self, place: PlaceT, method: bytes,
                 headers: list[tuple[bytes, bytes]]) -> AdmittedT:
        """The call admitted before its body."""
        ...

    def request(self, admitted: AdmittedT, raw: bytes) -> tuple[h11.Request, bytes]:
        """The upstream request and its body, the key put in."""
        ...

    def pool_at(self, place: PlaceT) -> Pool:
        """The kept connections to the place's service."""
        ...


async def service_call(call: VerbCall, verb: ServiceVerb[PlaceT, AdmittedT],
                       rest: str) -> Keep:
    """A model or secret call (see the module's text). The log names the service's host
    and port, never a path, a key or a placeholder."""
    authority = "-"
    try:
        call.proxy.gate()
        place = verb.place(rest)
        host, port = verb.where(place)
        authority = f"{host}:{port}"  # where a refusal is logged
        admitted = verb.admit_at(place, call.request.method, list(call.request.headers))
        raw = await call.body(verb.max_body_bytes)
        request, body = verb.request(admitted, raw)
    except Refused as refusal:
        return await call.refuse(authority, refusal)
    pool = verb.pool_at(place)
    upstream = pool.take()
    reused = upstream is not None
    while True:
        if upstream is None:
            try:
                address = await call.proxy.checked_address(Target(host, port, None), lan=False)
                upstream = await open_upstream(address, port, authority, tls=verb.tls,
                                               host=host)
            except Refused as refusal:
                return await call.refuse(authority, refusal, echo=False)
        outcome = await call.exchange(authority, verb.kind, upstream, request, body)
        if outcome.reusable:
            pool.give_back(upstream)
        if not (outcome.failure and reused and not outcome.responded
                and not outcome.client_gone):
            return call.next_cycle(outcome)
        reused, upstream = False, None
