"""The proxy's I/O shell: asyncio streams around the sans-IO pieces.

Per client connection: read a head (bounded in size and time), admit it
(lnk_proxy.head), find its target (lnk_proxy.target), decide (hooks → name → lookup →
every address: lnk_proxy.decide), connect to the very address checked, then either
tunnel (CONNECT; to port 443 only after the ClientHello names the same host) or forward
absolute-form requests one after another on a client's connection kept alive (h11 on
both sides; each request checked afresh; the upstream connection kept for the next
request to the same host and port). A tunnel to port 80 (a CONNECT, or an endpoint's
address) is not relayed unread: the client speaks first, so its bytes are served as
HTTP by the same loop, each request admitted by the same head check, its Host held to
the tunnel's host, and counted as a call of its own; after a `101 Switching Protocols`
(WebSocket) the bytes are relayed as they are. Everything else is refused with a status
and a one-line reason, in the response and in the wire's log.

`/_link/…` on the proxy's own listener (origin form, or absolute form to the proxy's own
address) is the verbs' namespace (lnk_proxy.verbs): a verb the spec did not turn on
answers 404 naming the key that does. A verb call passes the same gate as any call and
is one `allowed`/`ended` pair on the wire's log, `kind=` the verb, with the host and port
it went to; its upstream is checked address by address as any call's, though no `hosts`
entry names it. The model verb (lnk_proxy.model_verb) reads the body whole, has it
rewritten, adds the real key and speaks TLS to the provider over a kept connection.

The parts of one request: `_forward` dispatches, `_pass` and `_model_call` acquire the
upstream (kept, pooled or new), and `_exchange` is the one exchange both use.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import h11

from lnk_common.controls import Controls, SharedControls
from lnk_common.endpoints import AddressBook
from lnk_common.wire import (
    OUT_OF_DESCRIPTORS,
    Refused,
    Wire,
    is_out_of_descriptors,
    refusal_head,
)
from lnk_common.wirelog import WireLog
from lnk_proxy import sni
from lnk_proxy.connection import (
    CallVerb,
    ClientConnection,
    Closed,
    Forward,
    NeedData,
    OpenTunnel,
    Refuse,
)
from lnk_proxy.decide import (
    METADATA_ADDRESSES,
    Address,
    HostRule,
    MachineFacts,
    address_refusal,
    matching_rule,
)
from lnk_proxy.head import RequestHead
from lnk_proxy.lane import END, Handoff, Lane, LaneProtocol, Retry
from lnk_proxy.mcp_verb import Asker, ToolProcess, tool_environment
from lnk_proxy.model_rules import MAX_BODY_BYTES, PROVIDER_HOSTS
from lnk_proxy.model_verb import ModelVerb
from lnk_proxy.plain import HOP_FIELDS, client_closes, response_bytes, response_head
from lnk_proxy.plain import NEED_MORE as PLAIN_NEED_MORE
from lnk_proxy.plain import request_bytes as plain_request_bytes
from lnk_proxy.resolver import system_resolver
from lnk_proxy.secret_verb import MAX_BODY_BYTES as SECRET_BODY_BYTES
from lnk_proxy.secret_verb import SecretVerb
from lnk_proxy.target import Target
from lnk_proxy.tools import Tool
from lnk_proxy.upstream import CHUNK, Pool, Upstream, open_socket, open_upstream
from lnk_proxy.verbs import (
    MODEL,
    SECRET,
    URL_SECRET,
    VerbError,
    asked_line,
    split_local,
    split_url_secret,
    split_verb,
    verb_refusal_body,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # the open verb's module (shutil, h11's server side) only where it is on
    from lnk_proxy.open_verb import CallbackSockets

__all__ = ["BODY_IDLE_SECONDS", "HEAD_SECONDS", "HTTP_PORT", "IDLE_SECONDS",
           "MAX_HELD_BODY_BYTES", "UPGRADES", "Proxy"]

# A client has this long to send a whole head (slowloris: a head dribbled a byte at a
# time holds a connection and its memory for nothing).
HEAD_SECONDS = 10.0
# A connection with nothing moving either way for this long is closed.
IDLE_SECONDS = 300.0
# A tunnel to 443 must show its ClientHello within this long.
HELLO_SECONDS = 10.0
# A model call's body is read whole (it is parsed, checked and re-serialised): the
# rules' own limit (model_rules.MAX_BODY_BYTES, with its reason), refused (413) from the
# Content-Length before a byte of it is read, else as it passes.
MAX_MODEL_BODY_BYTES = MAX_BODY_BYTES
# One MCP message from the program (lnk_proxy.mcp_verb.MAX_MESSAGE_BYTES, with its reason).
MAX_MCP_BODY_BYTES = 16 * 1024 * 1024
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
# How often a call that waits on its upstream looks whether its client went away.
CLIENT_WATCH_SECONDS = 0.25
# After a verb's refusal, what the program still sends (a body not read) is read and
# dropped for at most this long before the close: a socket closed with unread data
# resets, and the program's side drops the refusal unread (Python's http.client, which
# sends a whole body before it reads, saw a reset, not its 403, for an 8 MiB body to a
# refused local path). The relay's LINGER_SECONDS, for the same reason.
VERB_LINGER_SECONDS = 2.0

Resolver = Callable[[str, int], Awaitable[list[Address]]]

# The reasons of refusals whose cause is a parser's reading of the program's bytes: fixed
# text, never the parser's message (h11's quotes the bytes it refused, so a malformed
# chunk size put text of the program's choice, its URL secret and placeholder included,
# in the refusal and the wire's log). The program learns the class, not the byte.
UNREADABLE_BODY = ("the request body is not HTTP/1.1 as h11 reads it (its chunked framing "
                   "or its length)")
BODY_STALLED = f"the request body stalled (nothing for {BODY_IDLE_SECONDS:g} s)"
HELD_BODIES_FULL = (f"the proxy holds {MAX_HELD_BODY_BYTES // (1024 * 1024)} MiB of verb "
                    "request bodies already (MAX_HELD_BODY_BYTES); try again when a call "
                    "has ended")


async def _read(reader: asyncio.StreamReader, size: int, seconds: float) -> bytes:
    """What `reader` has (up to `size` bytes), waiting at most `seconds` for it; TimeoutError
    past that. asyncio.timeout, not wait_for: Python 3.11's wait_for made a task of each
    read and took two turns of the loop more, some 30 µs of a kept-alive request's three
    reads each; a timeout is one timer, and none is set when the bytes are there."""
    if reader._buffer:  # type: ignore[attr-defined]  # there already: no wait, no timer
        return await reader.read(size)
    async with asyncio.timeout(seconds):
        return await reader.read(size)


async def _next_event(connection: h11.Connection, reader: asyncio.StreamReader,
                      idle: float = IDLE_SECONDS) -> object:
    """The next h11 event of `connection`, reading from `reader` as it needs more (at
    most `idle` seconds a read)."""
    while True:
        event = connection.next_event()
        if event is not h11.NEED_DATA:
            return event
        connection.receive_data(await _read(reader, CHUNK, idle))


# The port whose tunnels are served as HTTP: the client speaks first there, so there is
# every reason to read it (a tunnel relayed unread carried any Host, and any number of
# requests as one call).
HTTP_PORT = 80
_HOP_FIELDS = HOP_FIELDS  # lnk_proxy.plain's, with its reason


# The protocols a request may ask to switch to, default deny. After a 101 the bytes are
# relayed unread, so only a protocol that carries no further requests may be: a WebSocket
# talks to the resource it was opened on. h2c is not (HTTP/2 in clear would carry any
# number of requests, each with an :authority of its own, past every check: the "h2c
# smuggling" of proxies that let it through); an Upgrade field naming anything else is
# not sent on, and the server answers as HTTP/1.1.
UPGRADES = frozenset({b"websocket"})


def _asks_to_upgrade(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """A request with an Upgrade field that its Connection field names (RFC 9110 7.8),
    naming one protocol, of UPGRADES."""
    tokens = {token.strip().lower() for name, value in headers if name.lower() == b"connection"
              for token in value.split(b",")}
    asked = [value.strip().lower() for name, value in headers if name.lower() == b"upgrade"]
    return b"upgrade" in tokens and len(asked) == 1 and asked[0] in UPGRADES



class _Outcome:
    """What one exchange did: bytes each way, whether a response began, how it ended."""

    __slots__ = ("client_gone", "failure", "received", "responded", "reusable", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.responded = False
        self.reusable = False
        self.client_gone = False
        self.failure = ""


def _outgoing(request: h11.Request, path: str, upgrade: bool) -> h11.Request:
    """The request h11 sends on: the hop-by-hop fields and Expect taken out; with
    `upgrade`, the switch asked of the upstream as the client asked it."""
    fields = [(name, value) for name, value in request.headers
              if name.lower() not in _HOP_FIELDS and name.lower() != b"expect"]
    if upgrade:
        fields += [(b"connection", b"upgrade")] + [
            (name, value) for name, value in request.headers if name.lower() == b"upgrade"]
    return h11.Request(method=request.method, target=path, headers=fields)


def _header(request: h11.Request, name: bytes) -> str | None:
    for field, value in request.headers:
        if field == name:
            return value.decode("latin-1")
    return None


async def _respond(client: h11.Connection, writer: asyncio.StreamWriter, status: int,
                   headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[bool, bytes]:
    """A response of ours (a verb's own answer), and whether the connection goes on."""
    headers = [*headers, (b"content-length", str(len(body)).encode("ascii"))]
    data = client.send(h11.Response(status_code=status, headers=headers)) or b""
    if body:
        data += client.send(h11.Data(data=body)) or b""
    data += client.send(h11.EndOfMessage()) or b""
    writer.write(data)
    await writer.drain()
    if client.our_state is not h11.DONE or client.their_state is not h11.DONE:
        return False, b""
    try:
        client.start_next_cycle()
    except h11.LocalProtocolError:
        return False, b""
    return True, client.trailing_data[0]


def _next_cycle(client: h11.Connection, outcome: _Outcome) -> tuple[bool, bytes]:
    """(whether the client's connection takes another request, what it sent of it)."""
    if outcome.failure or client.our_state is not h11.DONE or client.their_state is not h11.DONE:
        return False, b""
    try:
        client.start_next_cycle()
    except h11.LocalProtocolError:
        return False, b""  # the client or the server asked to close
    return True, client.trailing_data[0]


async def _watch_client(reader: asyncio.StreamReader, upstream: Upstream,
                        outcome: _Outcome) -> None:
    """End the upstream call when its client has gone (its connection ended): the
    provider's work and the proxy's socket are not held for nobody."""
    while not reader.at_eof():
        await asyncio.sleep(CLIENT_WATCH_SECONDS)
    outcome.client_gone = True
    outcome.failure = " error=client-gone"
    upstream.close()


class _Held:
    """One verb call's share of MAX_HELD_BODY_BYTES: taken as its body is read (its
    Content-Length at once), given back whole by `release` when the call ends, however it
    ends (`Proxy._verb`'s finally)."""

    __slots__ = ("proxy", "taken")

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.taken = 0

    def take(self, count: int) -> None:
        if self.proxy.held_body_bytes + count > MAX_HELD_BODY_BYTES:
            raise Refused(503, HELD_BODIES_FULL, counts=False)
        self.proxy.held_body_bytes += count
        self.taken += count

    def release(self) -> None:
        self.proxy.held_body_bytes -= self.taken
        self.taken = 0


async def _read_body(request: h11.Request, client: h11.Connection,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     limit: int, held: _Held) -> bytes:
    """A request's whole body, at most `limit` bytes, or Refused: 413 over the limit (from
    the Content-Length before a byte is read, else as it passes), 503 past
    MAX_HELD_BODY_BYTES, 400 for framing h11 refuses, 408 for a body that stalls. The
    reasons are fixed text: nothing of the program's bytes is quoted."""
    size_text = (f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0
                 else f"{limit} bytes")
    too_large = Refused(413, f"the body is over {size_text} (the verb's limit)")
    declared: int | None = None
    for name, value in request.headers:
        if name == b"content-length":
            declared = int(value)  # h11 checked it is one number
            if declared > limit:
                raise too_large
            held.take(declared)
    if client.they_are_waiting_for_100_continue:
        writer.write(client.send(h11.InformationalResponse(status_code=100, headers=[])))
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            event = await _next_event(client, reader, BODY_IDLE_SECONDS)
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > limit:
                    raise too_large
                if declared is None:
                    held.take(len(event.data))
                chunks.append(event.data)
                continue
            if isinstance(event, h11.EndOfMessage):
                return b"".join(chunks)
            raise ConnectionError("the client closed before its body ended")
    except h11.RemoteProtocolError:
        raise Refused(400, UNREADABLE_BODY) from None
    except TimeoutError:
        raise Refused(408, BODY_STALLED) from None


class Proxy(Wire):
    def __init__(self, *, rules: tuple[HostRule, ...], machine: MachineFacts, log: WireLog,
                 resolver: Resolver = system_resolver, settings: str = "", wire: str = "",
                 controls: Controls | SharedControls | None = None,
                 say: Callable[[str], None] | None = None,
                 book: AddressBook | None = None, model: ModelVerb | None = None,
                 secret: SecretVerb | None = None, url_secret: bytes = b"",
                 local_ports: frozenset[int] = frozenset(), server_tools: bool = False,
                 tools: dict[str, Tool] | None = None, ask: Asker | None = None,
                 callbacks: CallbackSockets | None = None,
                 open_ask: Asker | None = None,
                 opener_environ: Mapping[str, str] | None = None) -> None:
        super().__init__(log=log, settings=settings, wire=wire, controls=controls, say=say)
        self.rules = rules
        self.model = model
        self.secret = secret
        # The URL secret (`/_link/s/<secret>/…`) and what follows it that is on: `local`
        # for [localhost] models ports.
        self.url_secret = url_secret
        self.local_ports = local_ports
        self.tools = tools or {}
        self.tool_processes: dict[str, ToolProcess] = {}
        self.ask = ask
        # [verbs] open: pages opened outside, asked each time (open_ask: the question
        # shown whole); login callbacks passed in over `callbacks`, sockets made inside.
        self.callbacks = callbacks
        self.open_ask = open_ask
        self.opener_environ = opener_environ
        self.url_parts = frozenset({part for part, on in (
            ("local", bool(local_ports)), ("mcp", bool(self.tools)),
            ("open", callbacks is not None)) if on})
        self.server_tools = server_tools
        # The verbs this sandbox's spec turned on ([verbs]); every other answers 404.
        self.verbs = frozenset({verb for verb, on in (
            (MODEL, model is not None), (SECRET, secret is not None),
            (URL_SECRET, bool(url_secret and self.url_parts))) if on})
        self.book = book
        self.machine = machine
        self.resolver = resolver
        self.held_body_bytes = 0  # of every verb call's _Held, at most MAX_HELD_BODY_BYTES

    # -- one client connection ----------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.hold(writer, self._serve(reader, writer), asked=False)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Heads one after another on a connection kept alive (each request checked and
        decided afresh, wherever it goes), until a CONNECT, a refusal or a close."""
        await self._connection(reader, writer, ClientConnection())

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          connection: ClientConnection) -> None:
        """One client connection's requests (`connection`, sans IO: lnk_proxy.connection)
        served with its kept upstream and its lane, both let go at its end."""
        kept: list[Upstream | None] = [None]
        lane = self._lane(reader, writer, kept)
        try:
            await self._requests(reader, writer, kept, connection, lane)
        finally:
            _let_go(lane, kept)

    def _lane(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
              kept: list[Upstream | None]) -> Lane | None:
        """The connection's kept-alive lane (lnk_proxy.lane), when it came through a
        listener of the proxy's (`LaneProtocol`: main's servers)."""
        protocol = writer.transport.get_protocol()
        if not isinstance(protocol, LaneProtocol):
            return None
        return Lane(self, protocol, reader, writer, kept)

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        kept: list[Upstream | None], connection: ClientConnection,
                        lane: Lane | None) -> None:
        """The connection's commands carried out one after another until it ends: its
        bytes read as it needs them (a head within HEAD_SECONDS of its first byte;
        between requests, the lane's while it is parked there, IDLE_SECONDS), each
        request's decision and exchange, a CONNECT's tunnel."""
        deadline: float | None = None  # the head's, from its first byte
        while True:
            command = connection.next_command()
            if isinstance(command, NeedData):
                if command.within_head:
                    deadline = deadline or asyncio.get_running_loop().time() + HEAD_SECONDS
                    try:
                        async with asyncio.timeout_at(deadline):
                            connection.receive_data(await reader.read(65536))
                    except TimeoutError:
                        await self._refuse_as(writer, connection.head_timed_out())
                        return
                    continue
                if not await self._between_requests(reader, writer, kept, connection, lane):
                    return
                continue
            deadline = None
            if isinstance(command, Closed):
                return
            self.asked()  # a call from here: the switches close it (the gate first)
            if isinstance(command, Refuse):
                await self._refuse_as(writer, command)
                return
            if isinstance(command, OpenTunnel):
                if not await self._connect(command, reader, writer, kept):
                    return
                connection.tunnel_opened(command.target)
                continue
            if isinstance(command, CallVerb):
                keep, leftover = await self._verb(command.path, command.parsed[1],
                                                  command.parsed[0], reader, writer)
            else:
                keep, leftover = await self._forward(command, reader, writer, kept)
            if not keep:
                return
            connection.request_done(leftover)

    async def _between_requests(self, reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter, kept: list[Upstream | None],
                                connection: ClientConnection, lane: Lane | None) -> bool:
        """Idle between requests: parked in the lane (which serves plain requests to the
        kept upstream itself) until it hands work back, then the client's next bytes
        given to `connection`; False when the connection ends (quiet past IDLE_SECONDS,
        its end, a refusal of the lane's, an exchange that ends it)."""
        if lane is not None:
            note = await lane.idle(connection.tunnel, IDLE_SECONDS)
            if note is END:
                return False
            if isinstance(note, Retry | Handoff):
                if isinstance(note, Retry):  # the kept upstream closed unanswering
                    keep, leftover = await self._forward(note.request, reader, writer, kept)
                else:
                    keep, leftover = await self._handed(note, reader, writer, kept)
                if leftover:
                    connection.receive_data(leftover)
                return keep
        try:  # between requests a client may idle; within a head it may not
            connection.receive_data(await _read(reader, 65536, IDLE_SECONDS))
        except TimeoutError:
            return False
        return True

    async def _refuse_as(self, writer: asyncio.StreamWriter, command: Refuse) -> None:
        await self.refuse(writer, command.where, command.refusal)

    async def refuse(self, writer: asyncio.StreamWriter, target: str, refusal: Refused, *,
                      verb: bool = False) -> None:
        """The refusal's one line to the program and the log (with `verb`, as one line of
        JSON in the error shape the providers' SDKs read, so a harness's SDK shows why)."""
        self.refuse_now(writer, target, refusal, verb=verb)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    def refuse_now(self, writer: asyncio.StreamWriter, target: str, refusal: Refused, *,
                   verb: bool = False) -> None:
        """`_refuse` but for the wait until it is sent (the lane's, in a callback)."""
        self.log.write("refused", target, f"reason={refusal.logged}")
        if verb:
            body = verb_refusal_body(refusal.status, refusal.reason)
            kind = "application/json"
        else:
            body = (refusal.reason + "\n").encode("utf-8", "replace")
            kind = "text/plain"
        writer.write(refusal_head(refusal, kind, len(body)) + body)
        self.count_refusal(target, refusal)

    async def _refuse_verb(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           target: str, refusal: Refused, *,
                           asked: h11.Request | None = None) -> None:
        """A verb's refusal (JSON), then what the program still sends dropped until it
        closes, for at most VERB_LINGER_SECONDS: its refusal is read, not reset away.
        With `asked`, a 404 or 405 tells the program the method and path it sent (the
        log keeps the reason only: no path)."""
        if asked is not None and refusal.status in (404, 405):
            got = asked_line(asked.method, asked.target)
            refusal = Refused(refusal.status, f"{refusal.reason}; got {got}",
                              counts=refusal.counts, logged=refusal.logged,
                              ordinary=refusal.ordinary, final=refusal.final)
        await self.refuse(writer, target, refusal, verb=True)
        with contextlib.suppress(OSError, TimeoutError):
            if writer.can_write_eof():
                writer.write_eof()
            await asyncio.wait_for(_drop_until_closed(reader), VERB_LINGER_SECONDS)

    # -- the decision -------------------------------------------------------------------

    def check_name(self, target: Target, *, counted: bool = True) -> HostRule:
        """The first steps of every call to a host: the wire's controls (the kill switch,
        its pause, calls a minute), then the name (or the address literal) against the
        rules (hosts, endpoints, [lan]), before any lookup; the rule that allows it.
        `counted` False: not a call of its own (a port-80 tunnel, whose requests are)."""
        self.gate(counted=counted)
        if target.address is not None and target.address in METADATA_ADDRESSES:
            raise Refused(403, f"{target.address} is a cloud metadata service", metadata=True)
        rule = matching_rule(self.rules, target.host, target.port)
        if rule is None:
            named = target.authority if target.address else f"{target.host}:{target.port}"
            raise Refused(403, f"{named} is not in this sandbox's hosts", ordinary=True)
        return rule

    async def decide(self, target: Target, *, counted: bool = True) -> Address:
        """The address to connect to, or Refused: controls, name, lookup, every address.
        `counted` False: not a call (a port-80 tunnel, whose requests are decided again)."""
        rule = self.check_name(target, counted=counted)
        return await self.checked_address(target, lan=rule.lan)

    async def checked_address(self, target: Target, *, lan: bool) -> Address:
        """The lookup and every address's check (N3), apart from `hosts`: a verb's
        upstream (a provider) gets them all though no `hosts` entry names it."""
        if target.address is None:
            try:
                addresses = await self.resolver(target.host, target.port)
            except OSError as error:
                if is_out_of_descriptors(error):  # the lookup's own files or thread
                    raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
                raise Refused(502, f"{target.host} could not be looked up ({error})",
                              ordinary=True) from None
            if not addresses:
                raise Refused(502, f"{target.host} does not exist or has no address"
                              " (looked up as an absolute name: no search domain)",
                              ordinary=True)
        else:
            addresses = [target.address]
        for address in addresses:
            why = address_refusal(address, self.machine, lan=lan)
            if why:
                raise Refused(403, why if target.address is not None
                              else f"{target.host} resolves to {why}",
                              metadata=address in METADATA_ADDRESSES)
        return addresses[0]

    async def _open(self, target: Target, *, counted: bool = True) -> Upstream:
        address = await self.decide(target, counted=counted)
        return await open_upstream(address, target.port, target.authority)

    async def _open_tunnel(self, target: Target) -> socket.socket:
        """A tunnel's upstream: decided as any call, a bare socket (its bytes are
        spliced, never read here)."""
        address = await self.decide(target)
        return await open_socket(address, target.port, target.authority)

    # -- CONNECT ------------------------------------------------------------------------

    async def _connect(self, command: OpenTunnel, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, kept: list[Upstream | None]) -> bool:
        """A CONNECT: decided, answered, then relayed; or, to port 80, True: the tunnel
        whose requests the caller serves next (the connection `kept` from requests before
        it is closed)."""
        target = command.target
        if kept[0] is not None:
            kept[0].close()
            kept[0] = None
        try:
            if target.port == HTTP_PORT:
                # Decided now, so a tunnel that could never go is refused as it is asked
                # for; but no call, and no connection: each request in it is a call, and
                # opens (or reuses) its upstream connection as an absolute-form one does,
                # so nothing reaches the host that is not on the log.
                await self.decide(target, counted=False)
            else:
                upstream = await self._open_tunnel(target)
        except Refused as refusal:
            await self.refuse(writer, target.authority, refusal)
            return False
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        except BaseException:
            if target.port != HTTP_PORT:
                upstream.close()
            raise
        if target.port == HTTP_PORT:
            return True
        await self._tunnel(target, command.early, reader, writer, upstream, "connect")
        return False

    async def _tunnel(self, target: Target, early: bytes, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, upstream: socket.socket, kind: str) -> None:
        """An allowed connection carried both ways: to port 443 only once its
        ClientHello names the very host (a CDN routes by that name). `upstream` is
        closed here (by `relay` once the tunnel is spliced), whatever happens."""
        try:
            await self._carry(target, early, reader, writer, upstream, kind)
        finally:
            upstream.close()  # a no-op once `splice_ends` has taken its descriptor

    async def _carry(self, target: Target, early: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, upstream: socket.socket, kind: str) -> None:
        call = next(self.ids)
        first = early
        if target.port == 443:  # an IP literal gets no name in a ClientHello: closed
            named: str | object | None = None
            try:
                async with asyncio.timeout(HELLO_SECONDS):
                    first, named = await self._client_hello(reader, early)
            except TimeoutError:
                named = None
            if named != target.host:
                # Counted as any refusal: a burst of tunnels fronting another name is an
                # anomaly like a burst of refused names.
                refusal = Refused(403, "the tunnel's TLS ClientHello names "
                                  + (f"another host ({named})" if named else "no host"))
                self.log.write("refused", target.authority, f"reason={refusal.logged}")
                self.count_refusal(target.authority, refusal)
                return
        try:
            if first:
                await asyncio.get_running_loop().sock_sendall(upstream, first)
            ends = await self.splice_ends(reader, writer, None, upstream)
        except Refused as refusal:  # out of descriptors: the call never went
            self.log.write("refused", target.authority, f"reason={refusal.logged}")
            return
        self.log.write("allowed", target.authority, f"id={call} kind={kind}")
        started = time.monotonic()
        counted = [0, 0]
        try:
            counted[:] = await self.relay(ends, None)
        finally:  # an ended line for every allowed one, even when the proxy is stopping
            self.log.write("ended", target.authority,
                           f"id={call} sent={counted[0] + len(first)} received={counted[1]} "
                           f"seconds={time.monotonic() - started:.3f}")

    # -- endpoints: a connection to an address of the sandbox's own --------------------

    async def handle_endpoint(self, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter) -> None:
        """A connection to an endpoint's address inside the sandbox: CONNECT to the name
        that address was given (or the [lan] address itself) and the port it came to,
        decided and logged as any call. Refused: closed, with the reason in the log."""
        await self.hold(writer, self._endpoint(reader, writer))

    async def _endpoint(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        address, port = writer.get_extra_info("sockname")[:2]
        host = self.book.name_at(address) if self.book is not None else None
        if host is None and any(rule.lan and rule.name == address for rule in self.rules):
            host = address
        if host is None:
            refusal = Refused(403, f"{address} is no address this sandbox was given")
            self.log.write("refused", f"{address}:{port}", f"reason={refusal.logged}")
            self.count_refusal(f"{address}:{port}", refusal)
            return
        target = Target(host, port, ipaddress.ip_address(host) if host == address else None)
        try:
            if port == HTTP_PORT:  # as a CONNECT to port 80: decided, then served as HTTP
                await self.decide(target, counted=False)
            else:
                upstream = await self._open_tunnel(target)
        except Refused as refusal:
            self.log.write("refused", target.authority, f"reason={refusal.logged}")
            self.count_refusal(target.authority, refusal)
            return
        if port != HTTP_PORT:
            await self._tunnel(target, b"", reader, writer, upstream, "endpoint")
            return
        await self._connection(reader, writer, ClientConnection(target))

    async def _client_hello(self, reader: asyncio.StreamReader, data: bytes
                            ) -> tuple[bytes, str | object | None]:
        """The ClientHello's bytes and the name it asks for (read once: a reading is a
        TLS handshake begun, which was a tunnel's dearest step when done twice)."""
        while True:
            if data:
                named = sni.server_name(data)
                if named is not sni.NEED_MORE:
                    return data, named
            chunk = await reader.read(sni.MAX_CLIENT_HELLO_BYTES)
            if not chunk:  # closed before a whole ClientHello: it names no host
                return data, None
            data += chunk

    # -- requests: dispatch, the upstream, one exchange --------------------------------

    async def _forward(self, request: Forward, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, kept: list[Upstream | None]
                       ) -> tuple[bool, bytes]:
        """A request to a host of the sandbox's own (absolute form to the proxy, or a
        port-80 tunnel's) and its response; (whether the client's connection goes on to
        another request, the bytes it already sent of that one). The upstream connection
        of the last request is used again when this one goes to the same host and port
        (its address was checked when it was opened; the controls and the name are
        checked again here, and the call counted); `kept` holds it between requests."""
        target = request.target
        previous = kept[0]
        kept[0] = None
        try:
            if (previous is not None and previous.authority == target.authority
                    and previous.usable()):
                self.check_name(target)
                upstream = previous
            else:
                if previous is not None:
                    previous.close()
                upstream = await self._open(target)
        except Refused as refusal:
            if previous is not None:
                previous.close()
            await self.refuse(writer, target.authority, refusal)
            return False, b""
        if request.parsed is None:
            outcome, client = await self._plain_exchange(target.authority, request.head,
                                                         request.path, request.raw, reader,
                                                         writer, upstream)
        else:
            client, h11_request = request.parsed
            upgrade = _asks_to_upgrade(h11_request.headers)
            outcome = await self._exchange(target.authority, "http", client, reader, writer,
                                           upstream, _outgoing(h11_request, request.path,
                                                               upgrade), body=None)
        return await self._settle(outcome, client, upstream, upstream is previous, request,
                                  reader, writer, kept)

    async def _settle(self, outcome: _Outcome, client: h11.Connection | None,
                      upstream: Upstream, was_kept: bool, request: Forward,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      kept: list[Upstream | None]) -> tuple[bool, bytes]:
        """After a passed request's exchange: its upstream kept when reusable, the
        request sent again when its kept upstream had closed, and whether the client's
        connection goes on. `client`: h11's reading of the exchange (None: plain
        throughout); a plain request's `rest` is what followed it."""
        if outcome.reusable:
            if client is not None:  # h11 read this exchange: its state goes round
                upstream.conn.start_next_cycle()
            kept[0] = upstream
        if outcome.failure and was_kept and not outcome.responded and outcome.sent == 0:
            # The kept connection was closed by the server meanwhile: a request with no
            # body is sent again, once, on a new connection (checked afresh), which is
            # then kept in `kept` as any other (and closed with the client's).
            return await self._forward(request, reader, writer, kept)
        if client is None:
            return not outcome.failure and not client_closes(request.head), request.rest
        keep, trailing = _next_cycle(client, outcome)
        return keep, (request.rest if request.parsed is None else trailing)

    async def _handed(self, note: Handoff, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, kept: list[Upstream | None]
                      ) -> tuple[bool, bytes]:
        """A lane's request whose response is not plain: h11's from the bytes read."""
        outcome, client = await self._h11_resumed(
            note.authority, note.request.raw, note.request.path, reader, writer,
            note.upstream, (note.call, note.started, note.received))
        return await self._settle(outcome, client, note.upstream, True, note.request, reader,
                                  writer, kept)

    async def _h11_resumed(self, authority: str, raw: bytes, path: str,
                           reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           upstream: Upstream, resumed: tuple[int, float, bytes]
                           ) -> tuple[_Outcome, h11.Connection]:
        """A plain request's exchange whose response is not plain, h11's from the bytes
        read so far (`resumed`: the call's id, its start, those bytes); the request is
        not sent again."""
        client = h11.Connection(h11.SERVER)
        client.receive_data(raw)
        request = client.next_event()  # h11 takes every plain head
        assert isinstance(request, h11.Request)
        return await self._exchange(authority, "http", client, reader, writer, upstream,
                                    _outgoing(request, path, False), body=None,
                                    resumed=resumed), client

    async def _plain_exchange(self, authority: str, head: RequestHead, path: str,
                              raw: bytes, reader: asyncio.StreamReader,
                              writer: asyncio.StreamWriter, upstream: Upstream
                              ) -> tuple[_Outcome, h11.Connection | None]:
        """A plain request (lnk_proxy.plain) and its response, without h11 when the
        response is plain too: its head written anew, then exactly its Content-Length
        of body streamed as it comes. A response that is not plain is h11's from the
        bytes read so far (the request is not sent again), with h11's reading of the
        request (returned, for the connection's next cycle). One `allowed` and one
        `ended` line either way; the upstream is closed here unless it is reusable."""
        call = next(self.ids)
        self.log.write("allowed", authority, f"id={call} kind=http")
        started = time.monotonic()
        outcome = _Outcome()
        up_reader = upstream.reader
        handed = False
        try:
            upstream.writer.write(plain_request_bytes(head, path))
            received = b""
            while True:
                chunk = await _read(up_reader, CHUNK, IDLE_SECONDS)
                if not chunk:
                    raise ConnectionResetError("the host closed before its response")
                received += chunk
                found = response_head(received)
                if found is not PLAIN_NEED_MORE:
                    break
            if not isinstance(found, tuple):  # not plain: h11 reads it, as before
                handed = True  # the ended line is the exchange's now
                return await self._h11_resumed(authority, raw, path, reader, writer,
                                               upstream, (call, started, received))
            response, start = found
            outcome.responded = True
            body = received[start:start + response.length]
            remaining = response.length - len(body)
            if remaining and not body:
                # A head alone is not sent on: it goes with the body's first bytes, one
                # send and one wake of the program where there were two (a server that
                # writes its head, then its body, as most do).
                body = await _read(up_reader, min(CHUNK, remaining), IDLE_SECONDS)
                if not body:
                    raise ConnectionResetError("the host closed inside its body")
                remaining -= len(body)
            writer.write(response_bytes(response, client_closes(head)) + body)
            outcome.received = len(body)
            while remaining:
                await writer.drain()
                chunk = await _read(up_reader, min(CHUNK, remaining), IDLE_SECONDS)
                if not chunk:
                    raise ConnectionResetError("the host closed inside its body")
                writer.write(chunk)
                outcome.received += len(chunk)
                remaining -= len(chunk)
            await writer.drain()
            # More than its length from the host is no response of this request: the
            # connection is not used again.
            outcome.reusable = (not response.close
                                and len(received) <= start + response.length
                                and not up_reader._buffer)  # type: ignore[attr-defined]
        except (h11.ProtocolError, ConnectionError, TimeoutError) as error:
            outcome.failure = f" error={type(error).__name__}"
        finally:
            if not handed:  # an ended line for every allowed one, even when stopping
                if not outcome.reusable:
                    upstream.close()
                self.log.write("ended", authority,
                               f"id={call} sent=0 received={outcome.received} "
                               f"seconds={time.monotonic() - started:.3f}{outcome.failure}")
        return outcome, None

    async def _exchange(self, authority: str, kind: str, client: h11.Connection,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        upstream: Upstream, outgoing: h11.Request, *, body: bytes | None,
                        watch_client: bool = False,
                        resumed: tuple[int, float, bytes] | None = None) -> _Outcome:
        """One allowed call: `outgoing` and its body (`body`, taken whole already, or
        None: the client's, streamed as it comes) to `upstream`, and the response
        streamed back as it arrives, never held whole; after a 101 the two connections
        relayed as they are. An `allowed` and an `ended` line on the wire's log. The
        upstream is closed here unless the exchange left it reusable (both DONE).
        `watch_client`: a client that goes away ends the upstream call (a model's answer
        can take minutes before its first byte). `resumed`: the plain exchange's call
        (its id, its start, and the response's bytes read so far): `outgoing` was sent
        already and its allowed line written."""
        if resumed is None:
            call = next(self.ids)
            self.log.write("allowed", authority, f"id={call} kind={kind}")
            started = time.monotonic()
        else:
            call, started, _ = resumed
        conn = upstream.conn
        up_reader, up_writer = upstream.reader, upstream.writer
        if body is None and client.they_are_waiting_for_100_continue:
            # The proxy takes the body itself and streams it on: no client waits a second
            # for a 100 that would otherwise come only after the upstream's answer.
            writer.write(client.send(h11.InformationalResponse(status_code=100, headers=[])))
        outcome = _Outcome()
        switched = False
        watcher = (asyncio.ensure_future(_watch_client(reader, upstream, outcome))
                   if watch_client else None)
        try:
            if resumed is None:
                up_writer.write(conn.send(outgoing))
            else:  # sent by the plain exchange, byte for byte what h11 would send
                conn.send(outgoing)
                conn.receive_data(resumed[2])
            if body is not None:
                if body:
                    up_writer.write(conn.send(h11.Data(data=body)))
                up_writer.write(conn.send(h11.EndOfMessage()))
                await up_writer.drain()
                outcome.sent = len(body)
            while body is None:  # the client's body, if any, as it comes
                event = await _next_event(client, reader)
                if isinstance(event, h11.Data):
                    outcome.sent += len(event.data)
                    up_writer.write(conn.send(h11.Data(data=event.data)))
                    await up_writer.drain()
                    continue
                up_writer.write(conn.send(h11.EndOfMessage()))
                await up_writer.drain()
                break
            # The response: every event of one read is written at once, with one drain,
            # before the next read (a stream's many small events cost one send each, not
            # one each: 19 µs of CPU an event, measured, was most of a stream's cost).
            out: list[bytes] = []
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    if out:
                        writer.write(b"".join(out))
                        out.clear()
                        await writer.drain()
                    conn.receive_data(await _read(up_reader, CHUNK, IDLE_SECONDS))
                    continue
                if isinstance(event, h11.InformationalResponse):
                    if event.status_code == 101:  # h11 admits it only when asked for
                        outcome.responded = switched = True
                        out.append(client.send(h11.InformationalResponse(
                            status_code=101, headers=event.headers, reason=event.reason)))
                        break
                    continue
                if isinstance(event, h11.Response):
                    outcome.responded = True
                    headers = [(name, value) for name, value in event.headers
                               if name.lower() not in _HOP_FIELDS]
                    out.append(client.send(h11.Response(status_code=event.status_code,
                                                        headers=headers, reason=event.reason)))
                    continue
                if isinstance(event, h11.Data):
                    outcome.received += len(event.data)
                    out.append(client.send(h11.Data(data=event.data)))
                    continue
                if isinstance(event, h11.EndOfMessage):
                    out.append(client.send(h11.EndOfMessage()))
                break
            if out:
                writer.write(b"".join(out))
                await writer.drain()
            if switched:  # what each side sent after the switch goes first, then all else
                early_up, early_down = client.trailing_data[0], conn.trailing_data[0]
                up_writer.write(early_up)
                writer.write(early_down)
                ends = await self.splice_ends(reader, writer, up_reader, up_writer)
                more_sent, more_received = await self.relay(ends, up_writer)
                outcome.sent += len(early_up) + more_sent
                outcome.received += len(early_down) + more_received
        except (h11.ProtocolError, ConnectionError, TimeoutError) as error:
            outcome.failure = outcome.failure or f" error={type(error).__name__}"
        except Refused:  # no descriptor left for the switched connection's relay
            outcome.failure = " error=out-of-descriptors"
        finally:  # an ended line for every allowed one, even when the proxy is stopping
            if watcher is not None:
                watcher.cancel()
            # Bytes past the response's end are no response to anything: a connection
            # that has them is not used again (they would be read as the next
            # request's response).
            outcome.reusable = (not outcome.failure and not switched
                                and conn.our_state is h11.DONE
                                and conn.their_state is h11.DONE
                                and not conn.trailing_data[0]
                                and not up_reader._buffer)  # type: ignore[attr-defined]
            if not outcome.reusable:
                upstream.close()
            self.log.write("ended", authority,
                           f"id={call} sent={outcome.sent} received={outcome.received} "
                           f"seconds={time.monotonic() - started:.3f}{outcome.failure}")
        return outcome

    # -- verbs: /_link/… on the proxy's own listener ------------------------------------

    async def _verb(self, path: str, request: h11.Request, client: h11.Connection,
                    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                    ) -> tuple[bool, bytes]:
        """A call to a verb: 404 for no such verb or one that is off (counted as any
        refusal), else the verb's own."""
        try:
            verb, rest = split_verb(path, self.verbs)
        except VerbError as error:
            await self._refuse_verb(reader, writer, "-",
                                    Refused(error.status, error.reason), asked=request)
            return False, b""
        held = _Held(self)  # its body's share of MAX_HELD_BODY_BYTES, until the call ends
        try:
            if verb == MODEL and self.model is not None:
                return await self._model_call(self.model, rest, request, client, reader,
                                              writer, held)
            if verb == SECRET and self.secret is not None:
                return await self._secret_call(self.secret, rest, request, client, reader,
                                               writer, held)
            assert verb == URL_SECRET  # split_verb answers only the verbs turned on
            return await self._url_secret_call(rest, request, client, reader, writer, held)
        finally:
            held.release()

    async def _model_call(self, model: ModelVerb, rest: str, request: h11.Request,
                          client: h11.Connection, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter, held: _Held) -> tuple[bool, bytes]:
        """`/_link/model/<provider>/…`: the gate (kill switch, pause, calls a minute),
        then the call's own checks, the body read whole and rewritten, the real key
        added, and the provider's upstream (every address checked, TLS verified) from
        the provider's pool of kept connections."""
        authority = "-"
        try:
            self.gate()
            provider, target = model.provider(rest)
            authority = f"{PROVIDER_HOSTS[provider]}:443"  # where a refusal is logged
            admitted = model.admit(provider, request.method, target, list(request.headers))
            raw = await _read_body(request, client, reader, writer, MAX_MODEL_BODY_BYTES,
                                   held)
            outgoing, body = model.request(admitted, raw)
        except Refused as refusal:
            await self._refuse_verb(reader, writer, authority, refusal, asked=request)
            return False, b""
        return await self._service_call(
            "model", admitted.host, model.pools[admitted.provider], model.tls, client, reader,
            writer, outgoing, body)

    async def _secret_call(self, verb: SecretVerb, rest: str, request: h11.Request,
                           client: h11.Connection, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter, held: _Held) -> tuple[bool, bytes]:
        """`/_link/secret/<name>/…`: the gate, the name one this sandbox named, its rule
        read now, the path matched against the rule's shapes without decoding, the body
        checked for a method, the secret put where the rule says, TLS to the rule's one
        host (every address checked) over a kept connection. The log names the rule's
        host and port, never the name's path, the secret or the placeholder."""
        authority = "-"
        try:
            self.gate()
            name, target = verb.secret(rest)
            rule = verb.rule(name)
            authority = f"{rule.host}:{rule.port}"
            admitted = verb.admit(name, rule, request.method, target, list(request.headers))
            raw = await _read_body(request, client, reader, writer, SECRET_BODY_BYTES, held)
            outgoing, body = verb.request(admitted, raw)
        except Refused as refusal:
            await self._refuse_verb(reader, writer, authority, refusal, asked=request)
            return False, b""
        return await self._service_call(
            "secret", rule.host, verb.pool(authority), verb.tls, client, reader, writer,
            outgoing, body, port=rule.port)

    async def _service_call(self, kind: str, host: str, pool: Pool, tls: ssl.SSLContext,
                            client: h11.Connection, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter, outgoing: h11.Request, body: bytes,
                            *, port: int = 443) -> tuple[bool, bytes]:
        """A verb's admitted call to a service over TLS: a kept connection from `pool`,
        or a new one (looked up, every address checked as for any call, though no `hosts`
        entry names it, TLS verified for `host`); the exchange; the connection back to
        the pool when it is clean. A kept connection the service had closed meanwhile
        fails before any answer: the call is sent again, once, on a new one (the body is
        ours, held whole)."""
        authority = f"{host}:{port}"
        upstream = pool.take()
        reused = upstream is not None
        while True:
            if upstream is None:
                try:
                    address = await self.checked_address(Target(host, port, None), lan=False)
                    upstream = await open_upstream(address, port, authority, tls=tls, host=host)
                except Refused as refusal:
                    await self._refuse_verb(reader, writer, authority, refusal)
                    return False, b""
            outcome = await self._exchange(authority, kind, client, reader, writer,
                                           upstream, outgoing, body=body, watch_client=True)
            if outcome.reusable:
                pool.give_back(upstream)
            if not (outcome.failure and reused and not outcome.responded
                    and not outcome.client_gone):
                return _next_cycle(client, outcome)
            reused, upstream = False, None

    async def _url_secret_call(self, rest: str, request: h11.Request, client: h11.Connection,
                               reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                               , held: _Held) -> tuple[bool, bytes]:
        """`/_link/s/<secret>/<part>/…`: the URL secret compared in constant time (one
        refusal for any wrong one, never echoed, never logged), then the part. Built:
        `local/<port>/…`, a [localhost] models port through the inference filter."""
        try:
            self.gate()
            part, after = split_url_secret(rest, self.url_secret, self.url_parts)
        except VerbError as error:
            await self._refuse_verb(reader, writer, "-",
                                    Refused(error.status, error.reason), asked=request)
            return False, b""
        except Refused as refusal:
            await self._refuse_verb(reader, writer, "-", refusal, asked=request)
            return False, b""
        if part == "mcp":
            return await self._mcp_call(after, request, client, reader, writer, held)
        if part == "open":
            return await self._open_call(after, request, client, reader, writer, held)
        assert part == "local"  # split_url_secret answers only the parts turned on
        return await self._local_call(after, request, client, reader, writer, held)

    async def _open_call(self, after: str, request: h11.Request, client: h11.Connection,
                         reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                         , held: _Held) -> tuple[bool, bytes]:
        """`/_link/s/<secret>/open`: one URL (the body) opened in the person's browser,
        outside, when they say yes; asked every time, the URL shown whole in the one form
        that opens (lnk_proxy.open_rules). A login's callback to a loopback port is bound
        only after the yes (nothing is held, nothing of this machine's ports is learnt,
        while the person is asked; a port taken is then refused), what came to it before
        the opener started is closed unread, and the first request after is passed in
        once (lnk_proxy.open_verb). Logged by host only; counted as a call."""
        from lnk_proxy.open_rules import MAX_URL_BYTES, OpenRuleError, callback_target, check_url
        from lnk_proxy.open_verb import Callback, find_opener, run_opener

        assert self.callbacks is not None
        authority = "-"
        callback: Callback | None = None
        try:
            if after != "/":
                raise Refused(404, "the open verb's path is /_link/s/<secret>/open")
            if request.method != b"POST":
                raise Refused(405, "the open verb takes POST with the URL as its body")
            # One URL, and a line end a client may add.
            raw = await _read_body(request, client, reader, writer, MAX_URL_BYTES + 2, held)
            try:
                url = check_url(raw.strip(b"\r\n"))
                target = callback_target(url)
            except OpenRuleError as error:
                raise Refused(error.status, error.reason) from None
            authority = url.host if url.port is None else f"{url.host}:{url.port}"
            environ = os.environ if self.opener_environ is None else self.opener_environ
            opener = find_opener(environ)
            if opener is None:
                raise Refused(503, "no opener on this machine: xdg-open is not on the PATH "
                                   "Link was started with; not opened", counts=False,
                              final=True)
            if self.open_ask is None:
                raise Refused(403, "opening a page is asked of the person, and no way to "
                                   "ask is available here; not opened", counts=False)
            shown = url.opened
            # One line (lnk_ask shows a question's line breaks as \x0a); a dialog cuts it
            # into lines (lnk_ask.ways.dialog_lines), every character kept.
            back = (f"  Its login comes back to port {target[1]} of this machine's loopback "
                    "(http://" + target[0] + f":{target[1]}), and that answer is passed into "
                    "the sandbox, once." if target is not None else "")
            yes, how = await self.open_ask(
                f"{self.wire or 'a sandbox'}: open {url.host}?",
                f"The sandbox {self.wire or '-'} asks to open this page in your browser: "
                f"{shown}{back}",
                f"sandbox {self.wire or '-'} opens a page on {url.host}")
            if not yes:
                raise Refused(403, f"the person did not allow opening the page ({how})",
                              logged=f"the person did not allow opening the page ({how})")
            # The question may have waited two minutes: a kill switch or a pause since
            # then holds over the yes.
            self.gate(counted=False)
            # Bound only now, after the yes: while the question waits nothing listens (a
            # request sent then cannot pass as the browser's), no port is held for a
            # question answered no, and whether a port is taken is learnt by nobody who
            # has not been allowed (taken: 409 now, said to the program and logged).
            if target is not None:
                callback = Callback(target[0], target[1], self.callbacks,
                                    log=self.log.write, next_id=lambda: next(self.ids),
                                    gate=lambda: self.gate(counted=False))
                callback.listen()
        except Refused as refusal:
            if callback is not None:
                callback.cancel()
            await self._refuse_verb(reader, writer, authority, refusal, asked=request)
            return False, b""
        call = next(self.ids)
        self.log.write("allowed", authority, f"id={call} kind=open")
        started = time.monotonic()

        def page_opened() -> None:
            # The opener is started: what connected before it is closed unread, and the
            # first request after is the one passed in.
            if callback is not None:
                callback.close_early()
                callback.start()

        failure = await run_opener(opener, shown, tool_environment(environ),
                                   started=page_opened)
        self.log.write("ended", authority, f"id={call} kind=open seconds="
                                           f"{time.monotonic() - started:.3f}"
                                           + (" error=the opener failed" if failure else ""))
        if failure:
            if callback is not None:
                callback.cancel()
            await self._refuse_verb(reader, writer, authority,
                                    Refused(502, failure + "; not opened", counts=False))
            return False, b""
        import orjson

        return await _respond(client, writer, 200, [(b"content-type", b"application/json")],
                              orjson.dumps({"opened": shown}) + b"\n")

    async def _mcp_call(self, after: str, request: h11.Request, client: h11.Connection,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                        , held: _Held) -> tuple[bool, bytes]:
        """`/_link/s/<secret>/mcp/<name>`: one JSON-RPC message of MCP's Streamable HTTP
        to the tool's process (lnk_proxy.mcp_verb), answered as JSON. Logged `mcp:<name>`,
        never a method's arguments."""
        from lnk_proxy.mcp_verb import McpError, method_refusal, parse_message

        name = after[1:] if after.startswith("/") else ""
        tool = self.tools.get(name)
        if tool is None:
            await self._refuse_verb(reader, writer, "-", Refused(
                404, "not among this sandbox's tools ([verbs] tools names them)"), asked=request)
            return False, b""
        authority = f"mcp:{name}"
        if request.method != b"POST":
            if request.method == b"DELETE":
                self._tool(tool).sessions.discard(_header(request, b"mcp-session-id") or "")
                return await _respond(client, writer, 200, [], b"")
            # Not a refusal: Streamable HTTP's way for a server to say it offers no
            # stream of its own (a client opens one after initialize, and goes on).
            return await _respond(client, writer, 405, [(b"allow", b"POST, DELETE")], b"")
        try:
            self.gate()
            raw = await _read_body(request, client, reader, writer, MAX_MCP_BODY_BYTES, held)
            message = parse_message(raw)
        except McpError as error:
            await self._refuse_verb(reader, writer, authority,
                                    Refused(error.status, error.reason), asked=request)
            return False, b""
        except Refused as refusal:
            await self._refuse_verb(reader, writer, authority, refusal, asked=request)
            return False, b""
        import orjson

        unknown = method_refusal(message)
        if unknown is not None:
            # Not MCP's spelling of a method the verb takes (`Tools/Call`, `tools/call `):
            # never to the tool, which might take it for a call it would have asked about.
            # A JSON-RPC error (with no id, at 400, for a notification: Streamable HTTP's).
            not_relayed = Refused(400, "a method the MCP verb does not relay")
            self.log.write("refused", authority, f"reason={not_relayed.logged}")
            self.count_refusal(authority, not_relayed)
            return await _respond(client, writer, 200 if "id" in message else 400,
                                  [(b"content-type", b"application/json")],
                                  orjson.dumps(unknown))
        call = next(self.ids)
        self.log.write("allowed", authority, f"id={call} kind=mcp")
        started = time.monotonic()
        failure = ""
        try:
            response, session = await self._tool(tool).answer(
                message, _header(request, b"mcp-session-id"), self.ask, self.wire or "-")
        except McpError as error:
            failure = f" error={error.status}"
            await self._refuse_verb(reader, writer, authority, Refused(
                error.status, error.reason, counts=error.status != 502))
            return False, b""
        finally:
            self.log.write("ended", authority, f"id={call} seconds="
                                               f"{time.monotonic() - started:.3f}{failure}")
        if response is None:
            return await _respond(client, writer, 202, [], b"")
        if "error" in response and str(response["error"].get("message", "")).startswith(
                "refused: "):
            self.log.write("refused", authority, "reason=a tools/call the person did not "
                                                 "allow, or could not be asked")
        headers = [(b"content-type", b"application/json")]
        if session is not None:
            headers.append((b"mcp-session-id", session.encode("ascii")))
        return await _respond(client, writer, 200, headers, orjson.dumps(response))

    def _tool(self, tool: Tool) -> ToolProcess:
        """The tool's process for this sandbox (made, not started: started on use)."""
        process = self.tool_processes.get(tool.name)
        if process is None:
            import os

            # One log a tool, shared by the sandboxes that run it (appended; cut to its
            # newest part when a process starts): a run's own would pile up a file a run.
            log = os.path.join(self.settings or "/nonexistent", "sandbox", "tools",
                               f"{tool.name}.log")
            process = self.tool_processes[tool.name] = ToolProcess(
                tool, log, self.settings or "/nonexistent")
        return process

    def close_tools(self) -> None:
        for process in self.tool_processes.values():
            process.close()

    async def _local_call(self, after: str, request: h11.Request, client: h11.Connection,
                          reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                          , held: _Held) -> tuple[bool, bytes]:
        """A local model runtime on this machine's loopback, one of [localhost] models,
        through the same inference filter as the relay's (lnk_proxy.local_models); the
        log keeps `local:<port>`. The one place the proxy reaches this machine: the port
        is named by the spec, as a [localhost] port is."""
        from lnk_proxy import local_models

        authority = "-"
        try:
            port, target = split_local(after, self.local_ports)
            authority = f"local:{port}"
            admitted = local_models.route(request.method, target)
            headers = local_models.check_headers(list(request.headers))
            raw = await _read_body(request, client, reader, writer,
                                   local_models.MAX_BODY_BYTES, held)
            body = local_models.check_body(admitted, raw, server_tools=self.server_tools)
            upstream = await open_upstream(ipaddress.ip_address("127.0.0.1"), port, authority)
        except (VerbError, local_models.LocalModelError) as error:
            await self._refuse_verb(reader, writer, authority,
                                    Refused(error.status, error.reason), asked=request)
            return False, b""
        except Refused as refusal:
            await self._refuse_verb(reader, writer, authority, refusal, asked=request)
            return False, b""
        fields = [(name, value) for name, value in headers
                  if name not in (b"host", b"content-type")]
        fields.insert(0, (b"host", f"localhost:{port}".encode()))
        if admitted.body != "none":
            # The body is the filter's JSON, whatever type the program named.
            fields += [(b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode())]
        fields.append((b"connection", b"close"))  # one request a connection, as the relay's
        outgoing = h11.Request(method=admitted.method, target=admitted.target.encode(),
                               headers=fields)
        outcome = await self._exchange(authority, "local-model", client, reader, writer,
                                       upstream, outgoing, body=body, watch_client=True)
        if outcome.reusable:
            upstream.close()
        return _next_cycle(client, outcome)


def _let_go(lane: Lane | None, kept: list[Upstream | None]) -> None:
    """A connection's end: its lane's call in flight ended (with its line), its kept
    upstream closed (even if the first raised)."""
    try:
        if lane is not None:
            lane.close()
    finally:
        if kept[0] is not None:
            kept[0].close()


async def _drop_until_closed(reader: asyncio.StreamReader) -> None:
    """Read and drop what the program still sends, until it closes."""
    while await reader.read(CHUNK):
        pass
