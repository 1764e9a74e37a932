"""One client connection's requests, sans IO: the client's bytes in, what to do out.

The proxy's request path, its checks in one place and in one order. Events come in
(`receive_data`, with b"" for the client's end; `head_timed_out`; `limit_body` when a
verb gives its body's limit; `request_done` when the shell has finished an exchange;
`tunnel_opened` when a CONNECT to port 80 was answered; `give_again` when the shell
leaves a request's command for later or sends it once more; `take_held` when the
connection's bytes become a relay's), commands go out
(`next_command` for heads, `next_body` for a request's body), as h11's Connection and
mitmproxy's layers do; nothing here reads a socket, sleeps or logs. The order of a
request's checks:

1. the head's size (MAX_HEAD_BYTES) as it arrives, and its time (the shell's timer,
   from the first byte of a head: `NeedData.within_head`);
2. the head guard (lnk_proxy.head.check_head): what any parser here reads;
3. a CONNECT: its target (lnk_proxy.target.parse_connect), never inside a tunnel;
4. h11's reading of a head that is not body-less (lnk_proxy.bodiless): refused if h11
   refuses what the guard admitted, before anything is sent on;
5. where it goes (`_route`): the verbs' namespace on the proxy's own address, an
   absolute-form target, or a port-80 tunnel's own host; its Host the very host.

The client's bytes wait here (`buffer`) from the moment they come, in every state: the
client's protocol gives them as they arrive (lnk_proxy.lane.LaneProtocol), and the
socket is not read while more than twice CLIENT_BUFFER_BYTES wait. A request that h11
read (step 4, and every verb call) has a body, empty or not: the machine is then in its
body state until the body's end. `next_body` gives the body as h11 reads it from the
client's bytes (given to h11 as it needs them: no byte past a Content-Length, a chunked
body BODY_PIECE_BYTES at a time) (`BodyData`, `BodyEnd`; `NeedBody` for more; a
`Continue` once, for a client that waits for a 100 before it sends), refusing a body
h11 refuses (400, UNREADABLE_BODY) or one past its verb's limit (413, from the
Content-Length before a byte is read, else as it passes). The shell sends the body on
(lnk_proxy.exchange) or holds it for a verb (lnk_proxy.verb_call) from those commands
only; `request_done` has no row before `BodyEnd`. The response is written through the
same h11 connection (`parsed`), which must see both sides of the exchange.

The shell (lnk_proxy.server) goes on from the command, in this order: the wire's gate
(kill switch, pause, calls a minute) and the name against the rules before any lookup
(Proxy.check_name), the lookup and every address (Proxy.checked_address), a connection
to the very address checked, the TLS ClientHello's name for a tunnel to 443, the log.
The kept-alive lane (lnk_proxy.lane) has no checks of its own: it gives a whole head to
this same machine and carries out only a body-less request to its kept upstream's host,
after the same gate and name. A command it does not carry out (one that needs an await:
a lookup, a connection, a verb) it gives back (`give_again`), and the task takes it as
the machine's next command; so too a body-less request whose kept upstream closed
before answering, which the task sends once more on a new connection.

Every refusal is a `Refuse` with its one line; a command the machine has no row for is
a bug (ConnectionStateError), never a request let through.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import h11

from lnk_common.endpoints import PROXY_ADDRESS, PROXY_PORT
from lnk_common.wire import Refused
from lnk_proxy.bodiless import is_bodiless
from lnk_proxy.head import HeadError, RequestHead, check_head, head_end
from lnk_proxy.target import Target, TargetError, parse_absolute, parse_connect
from lnk_proxy.verbs import is_verb_target

__all__ = [
    "BODY_PIECE_BYTES",
    "OWN_AUTHORITIES",
    "UNREADABLE_BODY",
    "UNREADABLE_HEAD",
    "BodyCommand",
    "BodyData",
    "BodyEnd",
    "CallVerb",
    "ClientConnection",
    "Closed",
    "Command",
    "ConnectionStateError",
    "Continue",
    "Forward",
    "NeedBody",
    "NeedData",
    "OpenTunnel",
    "Refuse",
    "body_too_large",
]

# The proxy's own address inside a sandbox: a request to it (as a base URL, or through
# the proxy variables) is for the verbs' namespace, never forwarded.
OWN_AUTHORITIES = (f"{PROXY_ADDRESS}:{PROXY_PORT}", f"localhost:{PROXY_PORT}")

# The reason of a refusal whose cause is h11's reading of the program's bytes: fixed
# text, never h11's message (h11's quotes the bytes it refused, so a malformed head put
# text of the program's choice, its URL secret and placeholder included, in the refusal
# and the wire's log). The program learns the class, not the byte.
UNREADABLE_HEAD = "the request is not HTTP/1.1 as h11 reads it"
# The same for a body h11 refuses (its chunked framing, its length, its end before its
# length).
UNREADABLE_BODY = ("the request body is not HTTP/1.1 as h11 reads it (its chunked framing "
                   "or its length)")
HEAD_TOO_SLOW = "the request head took too long"
# A chunked body's bytes are given to h11 this many at a time: what h11 holds past the
# body's end (the next request, given back to the machine after the exchange) is never
# more, however much the client sent at once.
BODY_PIECE_BYTES = 64 * 1024
CONNECT_IN_TUNNEL = "a CONNECT inside a tunnel"
NOT_FOR_THE_PROXY = ("the proxy takes absolute-form requests (http://host/…), CONNECT, "
                     "and its verbs' paths (/_link/…)")


class ConnectionStateError(Exception):
    """An event the connection's state has no row for: a bug in the shell."""


# -- commands: what the shell is to do next --------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class NeedData:
    """Read more of the client's bytes. `within_head`: a head has begun, and must be
    whole within the head's time (else `head_timed_out`); otherwise the connection is
    idle between requests, and may stay so for the idle time."""

    within_head: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Closed:
    """The client ended the connection between requests, or inside a head: nothing to
    answer, nothing logged."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Refuse:
    """Refuse with `refusal`'s status and one line, logged under `where`; the connection
    ends."""

    where: str
    refusal: Refused


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenTunnel:
    """A CONNECT to `target`: decide it and answer it. To port 80 (HTTP_PORT), its
    requests follow on this connection (`tunnel_opened`); else the connection's bytes are
    the tunnel's, what the client sent after the CONNECT's head first (`take_held`)."""

    target: Target


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """A request to pass on to `target`, with `path` as its target upstream. `raw` is
    its admitted head (what the client sent after it stays in the machine: its body,
    `next_body`, or the next request); `parsed`: h11's reading (its server side fed the
    head, and the Request), None for a body-less request, which nothing else reads."""

    head: RequestHead
    raw: bytes
    target: Target
    path: str
    parsed: tuple[h11.Connection, h11.Request] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CallVerb:
    """A request in the verbs' namespace (`path`: /_link/…), h11's reading of it in
    `parsed` (its body is read from there)."""

    path: str
    parsed: tuple[h11.Connection, h11.Request]


Command = NeedData | Closed | Refuse | OpenTunnel | Forward | CallVerb


# -- body commands: what the shell is to do next with a request's body ----------------

@dataclass(frozen=True, slots=True, kw_only=True)
class NeedBody:
    """Read more of the client's bytes for the body (within the shell's idle time for a
    body: IDLE_SECONDS forwarded, BODY_IDLE_SECONDS for a verb)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Continue:
    """Write `data` (a 100 Continue) to the client, which waits for it before it sends
    its body: given once, when the body is first asked for (no client waits a second for
    a 100 that would come only after the upstream's answer)."""

    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyData:
    """The body's next bytes, as h11 read them."""

    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyEnd:
    """The body ended (what followed it is h11's, for the connection's next cycle)."""


BodyCommand = NeedBody | Continue | BodyData | BodyEnd | Refuse


class _State(enum.Enum):
    IDLE = "idle"  # between requests: a head may begin
    BODY = "body"  # a request h11 read: its body is read through `next_body`
    BUSY = "busy"  # a command is the shell's; `request_done` or `tunnel_opened` next
    DONE = "done"  # refused or closed: nothing more


def body_too_large(limit: int) -> Refused:
    """The 413 of a verb's body over `limit`, its limit said in MiB when it is whole
    MiB."""
    size_text = (f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0
                 else f"{limit} bytes")
    return Refused(413, f"the body is over {size_text} (the verb's limit)")


# -- the steps, each a pure function ----------------------------------------------------

def _own_path(target: str) -> str | None:
    lowered = target.lower()
    for authority in OWN_AUTHORITIES:
        prefix = f"http://{authority}"
        if lowered == prefix or lowered.startswith(prefix + "/"):
            return target[len(prefix):] or "/"
    return None


def _host_matches(hosts: list[str], target: Target) -> bool:
    try:
        named = parse_connect(hosts[0] if ":" in hosts[0].rsplit("]", 1)[-1]
                              else f"{hosts[0]}:{target.port}")
    except TargetError:
        return False
    return (named.host, named.port) == (target.host, target.port)


def _route(head: RequestHead, tunnel: Target | None) -> tuple[Target, str] | str | Refuse:
    """Step 5: where a request goes and the path to send, a verb's path, or why it goes
    nowhere: absolute-form to the proxy, origin-form (or absolute-form to the same
    host) in a tunnel; its Host must name that very host (a CDN routes by Host: another
    one is domain fronting)."""
    if tunnel is None:
        path_here = head.target if head.target.startswith("/") else _own_path(head.target)
        if path_here is not None:
            if is_verb_target(path_here):
                return path_here
            return Refuse(where="-", refusal=Refused(400, NOT_FOR_THE_PROXY))
    where = tunnel.authority if tunnel is not None else "-"
    if tunnel is not None and head.target.startswith("/"):
        target, path = tunnel, head.target
    else:
        try:
            target, path = parse_absolute(head.target)
        except TargetError as error:
            return Refuse(where=where, refusal=Refused(400, str(error)))
        if tunnel is not None and target.authority != tunnel.authority:
            return Refuse(where=tunnel.authority, refusal=Refused(
                400, f"a request in the tunnel to {tunnel.authority} names another host "
                     f"({target.authority})"))
    hosts = head.get("host")
    if not hosts:
        # h11 sends on HTTP/1.1, which needs a Host; and there is nothing to check.
        return Refuse(where=target.authority,
                      refusal=Refused(400, f"an {head.version} request without Host"))
    if not _host_matches(hosts, target):
        return Refuse(where=target.authority, refusal=Refused(
            400, "the Host header names another host than the request's URL"
            if tunnel is None else
            f"the Host header names another host than the tunnel's ({tunnel.authority})"))
    return target, path


def _h11_reading(data: bytes) -> tuple[h11.Connection, h11.Request] | None:
    """Step 4: h11's server side fed `data` (a whole admitted head) and its Request, or
    None when h11 refuses what the head guard admitted."""
    client = h11.Connection(h11.SERVER)
    client.receive_data(data)
    try:
        request = client.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(request, h11.Request):  # a whole admitted head is one Request
        return None
    return client, request


# -- the machine -----------------------------------------------------------------------

class ClientConnection:
    """One client connection's requests (see the module's text). `tunnel`: the port-80
    tunnel its requests travel in from the start (an endpoint's address on port 80)."""

    __slots__ = ("again", "body_ended", "body_size", "buffer", "continued", "declared",
                 "end_given", "ended", "fed", "given", "limit", "reading", "state",
                 "tunnel")

    def __init__(self, tunnel: Target | None = None) -> None:
        self.tunnel = tunnel
        # The client's bytes that no command has taken yet: the one place they wait
        # while the connection is HTTP (the client's protocol gives them here as they
        # come, lnk_proxy.lane.LaneProtocol; its size is the connection's flow control).
        # One read's bytes are held as they came (no copy: most reads are one head, or
        # one piece of a body), a bytearray once more come behind them (`_cut`).
        self.buffer: bytes | bytearray = b""
        self.ended = False  # the client's end came
        self.end_given = False  # ... and was given to the request's h11 reading
        self.state = _State.IDLE
        # The request h11 read (its server side): its body comes from here.
        self.reading: h11.Connection | None = None
        self.declared: int | None = None  # the body's Content-Length, if it has one
        self.limit: int | None = None  # a verb's, once it gives it; else none
        self.body_size = 0
        self.fed = 0  # the body's bytes given to h11 (`_piece`)
        self.body_ended = False
        self.continued = False  # the 100 for a client that waits for one is given
        # The command of the request in hand (a whole head's), until its exchange is
        # done; `again`: it is to be given once more by next_command (give_again).
        self.given: Command | None = None
        self.again: Command | None = None

    @property
    def where(self) -> str:
        """What a refusal before a target is known is logged under."""
        return self.tunnel.authority if self.tunnel is not None else "-"

    # -- events in --------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """The client's bytes, in any state (a body's are given to h11 as it needs them,
        `next_body`; what comes during an exchange waits for the next head); b"" for its
        end."""
        if self.state is _State.DONE or self.ended:
            return
        if not data:
            self.ended = True
        elif not self.buffer:
            self.buffer = data
        else:
            if not isinstance(self.buffer, bytearray):
                self.buffer = bytearray(self.buffer)
            self.buffer += data

    @property
    def held(self) -> int:
        """The client's bytes held here that no command has taken yet."""
        return len(self.buffer)

    def take_held(self) -> bytes:
        """The connection's bytes are no longer HTTP's (a tunnel's relay, a WebSocket's
        after its 101, the drain after a refusal): what is held, taken out, and nothing
        more here."""
        held = bytes(self.buffer)
        self.buffer = b""
        self.state = _State.DONE
        return held

    def limit_body(self, limit: int) -> Refuse | None:
        """A verb's limit for the body: past it, 413 (body_too_large). Refused now when
        the Content-Length is over it, before a byte of the body is read."""
        self._expect(_State.BODY)
        self.limit = limit
        if self.declared is not None and self.declared > limit:
            return self._refuse(self.where, body_too_large(limit))
        return None

    def head_timed_out(self) -> Refuse:
        """The head's time ran out before it was whole: 408, and the end."""
        self._expect(_State.IDLE)
        self.state = _State.DONE
        return Refuse(where=self.where, refusal=Refused(408, HEAD_TOO_SLOW))

    def request_done(self, leftover: bytes) -> None:
        """The shell's exchange ended and the connection goes on; `leftover`: what of the
        client's bytes the machine gave with the request and were not the request's
        (h11's trailing data: what it was given past the body's end), put back before
        what came since. No row before a body's end."""
        self._expect(_State.BUSY)
        if leftover:  # before what came during the exchange
            buffer = bytearray(leftover)
            buffer += self.buffer
            self.buffer = buffer
        self.reading = None
        self.given = self.again = None
        self.state = _State.IDLE

    def tunnel_opened(self, target: Target) -> None:
        """A CONNECT to port 80 was answered: its requests follow, each to `target`."""
        self._expect(_State.BUSY)
        self.tunnel = target
        self.given = self.again = None
        self.state = _State.IDLE

    def give_again(self) -> None:
        """The request's command, as the machine gave it, is given once more by the next
        `next_command`: the shell did not carry it out (the lane leaves one that needs an
        await to the task), or sends it once more (a body-less request whose kept
        upstream closed before answering). No row without a request's command in hand,
        or with one to give already; its state (a body begun, a refusal's end) is kept."""
        if self.given is None or self.again is not None:
            raise ConnectionStateError("a command given again, with none in hand to give")
        self.again = self.given

    # -- commands out -----------------------------------------------------------------

    def next_command(self) -> Command:
        """What the shell is to do next (default deny: a state with no row raises): the
        command given again (`give_again`), else the next head's."""
        again = self.again
        if again is not None:
            self.again = None
            return again
        self._expect(_State.IDLE)
        try:
            end = head_end(self.buffer)
        except HeadError as error:  # a head's refusal before its end: in hand as any
            self.given = self._refuse(self.where, Refused(400, str(error)))
            return self.given
        if end < 0:
            if self.ended:
                self.state = _State.DONE
                return Closed()
            return NeedData(within_head=bool(self.buffer))
        # The head out, what follows kept (no copy of it: a client that sends many
        # requests at once costs a head's bytes a request, not all it sent).
        raw = self._cut(end)
        self.state = _State.BUSY
        self.given = self._request(raw)
        return self.given

    def _request(self, raw: bytes) -> Command:
        try:
            head = check_head(raw)  # step 2
        except HeadError as error:
            return self._refuse(self.where, Refused(400, str(error)))
        if head.method == "CONNECT":
            if self.tunnel is not None:
                return self._refuse(self.tunnel.authority, Refused(400, CONNECT_IN_TUNNEL))
            try:
                target = parse_connect(head.target)
            except TargetError as error:
                return self._refuse("-", Refused(400, str(error)))
            return OpenTunnel(target=target)  # held: a port-80 tunnel's requests, or its bytes
        parsed = None
        if not is_bodiless(head):
            parsed = _h11_reading(raw)
            if parsed is None:
                return self._refuse(self.where, Refused(400, UNREADABLE_HEAD))
        found = _route(head, self.tunnel)  # step 5
        if isinstance(found, Refuse):
            self.state = _State.DONE
            return found
        if isinstance(found, str):
            if parsed is None:  # h11 takes every body-less head (tests/test_bodiless.py)
                parsed = _h11_reading(raw)
                if parsed is None:
                    return self._refuse(self.where, Refused(400, UNREADABLE_HEAD))
            self._begin_body(parsed)
            return CallVerb(path=found, parsed=parsed)
        target, path = found
        if parsed is not None:
            self._begin_body(parsed)
        return Forward(head=head, raw=raw, target=target, path=path,
                       parsed=parsed)

    def _begin_body(self, parsed: tuple[h11.Connection, h11.Request]) -> None:
        self.reading = parsed[0]
        self.end_given = False
        self.declared = next((int(value) for name, value in parsed[1].headers
                              if name == b"content-length"), None)  # h11 checked it
        self.limit = None
        self.body_size = self.fed = 0
        self.body_ended = self.continued = False
        self.state = _State.BODY

    def next_body(self) -> BodyCommand:
        """What the shell is to do next with the request's body (default deny: a state
        with no row raises). After the body's end, until `request_done`, BodyEnd again
        (a request sent once more on a new connection sends its end once more)."""
        if self.state is _State.BUSY and self.body_ended:
            return BodyEnd()
        self._expect(_State.BODY)
        reading = self.reading
        assert reading is not None  # the body state has its reading
        if not self.continued:
            self.continued = True
            if reading.they_are_waiting_for_100_continue:
                return Continue(data=reading.send(
                    h11.InformationalResponse(status_code=100, headers=[])) or b"")
        try:
            event = reading.next_event()
            # h11 is given the bytes held when it needs them (and the client's end after
            # them), a piece at a time (`_piece`): never a byte past a Content-Length.
            while event is h11.NEED_DATA and (self.buffer or (self.ended
                                              and not self.end_given)):
                if self.buffer:
                    reading.receive_data(self._piece())
                else:
                    self.end_given = True
                    reading.receive_data(b"")
                event = reading.next_event()
        except h11.RemoteProtocolError:
            return self._refuse(self.where, Refused(400, UNREADABLE_BODY))
        if event is h11.NEED_DATA:
            return NeedBody()
        if isinstance(event, h11.Data):
            self.body_size += len(event.data)
            if self.limit is not None and self.body_size > self.limit:
                return self._refuse(self.where, body_too_large(self.limit))
            return BodyData(data=bytes(event.data))
        if isinstance(event, h11.EndOfMessage):
            self.body_ended = True
            self.state = _State.BUSY
            return BodyEnd()
        # In SEND_BODY h11 gives nothing else (an end before the body's raises): a bug,
        # refused rather than let through.
        return self._refuse(self.where, Refused(400, UNREADABLE_BODY))

    def _piece(self) -> bytes:
        """The next of the body's bytes held, for h11: at most what the Content-Length
        still needs (nothing past the body given), else BODY_PIECE_BYTES of a chunked
        one (h11's trailing data, given back after the request, at most that)."""
        wanted = BODY_PIECE_BYTES
        if self.declared is not None and self.declared > self.fed:
            wanted = self.declared - self.fed
        piece = self._cut(wanted)
        self.fed += len(piece)
        return piece

    def _cut(self, size: int) -> bytes:
        """The first `size` bytes held (all, if fewer), taken out; the rest is not
        copied (a bytearray's front is cut in place)."""
        buffer = self.buffer
        if size >= len(buffer):
            self.buffer = b""
            return bytes(buffer)  # held as one read came: no copy
        if not isinstance(buffer, bytearray):
            buffer = self.buffer = bytearray(buffer)
        taken = bytes(buffer[:size])
        del buffer[:size]
        return taken

    def _refuse(self, where: str, refusal: Refused) -> Refuse:
        self.state = _State.DONE
        return Refuse(where=where, refusal=refusal)

    def _expect(self, state: _State) -> None:
        if self.state is not state:
            raise ConnectionStateError(f"an event for a connection {state.value}, "
                                       f"while it is {self.state.value}")
