"""The proxy's I/O shell: one client connection's requests, over asyncio's protocols
(lnk_proxy.streams: each connection's bytes held by its own protocol, no asyncio stream).

Each piece it drives is sans IO or small and single-purpose, and the order of a call's
checks is written once:
1. the connection's machine (lnk_proxy.connection): the head's size and time, the head
   guard (lnk_proxy.head), a CONNECT's target, h11's reading of a head that is not
   body-less, and the route (a verb's path on the proxy's own address, an absolute-form
   target, a port-80 tunnel's host; the Host the very host);
2. a verb (`/_link/…`): the registry here, each verb off unless the policy turned it
   on (404 naming the key that does), each in its own module behind one interface
   (lnk_proxy.verb_call);
3. any other call: the wire's gate (kill switch, pause, calls a minute) and the name
   against the rules before any lookup (`check_name`), the lookup and every address
   (`checked_address`, lnk_proxy.decide), a connection to the very address checked;
4. then a tunnel (lnk_proxy.tunnel: to 443 only once the ClientHello names the same
   host) or forwarding (lnk_proxy.forward, lnk_proxy.exchange: h11 on both sides, or
   the lane's exchange, lnk_proxy.response's reading, for a body-less request),
   each call one `allowed` and one `ended` line on the wire's log.
Every refusal is a status and one line, in the response and in the wire's log.

Every body-less request's exchange is carried out in the protocols' callbacks by the
connection's lane (lnk_proxy.lane) while this task is parked. A kept-alive one to the
host of the last one the lane takes itself: it takes the head's command from the same
machine (which the client's protocol gives every byte) and carries out only its body-less
request to the kept upstream's host, by the rule and after the checks the task's
`forward` uses too (`lane.take_kept`: `check_name`); any other command it gives back to
the machine (`give_again`), and this task takes it as the machine's next, as it takes
every command. Any other body-less
request is decided here and handed to the lane with its upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Mapping

from lnk_common.bodies import HeldBodies
from lnk_common.controls import Controls, SharedControls
from lnk_common.endpoints import AddressBook
from lnk_common.wire import (
    OUT_OF_DESCRIPTORS,
    Refused,
    Wire,
    is_out_of_descriptors,
    linger,
    refusal_head,
)
from lnk_common.wirelog import WireLog
from lnk_proxy import forward as forwarding
from lnk_proxy import tunnel
from lnk_proxy.added import AddedHosts
from lnk_proxy.connection import (
    UNREADABLE_HEAD,
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
from lnk_proxy.exchange import IDLE_SECONDS, UPGRADES
from lnk_proxy.lane import END, Lane, LaneProtocol
from lnk_proxy.resolver import system_resolver
from lnk_proxy.streams import Inbox, Outbox
from lnk_proxy.target import Target
from lnk_proxy.tunnel import HTTP_PORT
from lnk_proxy.upstream import Upstream, open_socket, open_upstream
from lnk_proxy.verb_call import (
    BODY_IDLE_SECONDS,
    HELD_BODIES_FULL,
    MAX_HELD_BODY_BYTES,
    UNREADABLE_BODY,
    Keep,
    Verb,
    VerbCall,
)
from lnk_proxy.verbs import VerbError, split_verb, verb_refusal_body

TYPE_CHECKING = False
if TYPE_CHECKING:
    from lnk_proxy.added_endpoints import AddedEndpoints
    from lnk_proxy.dns_server import DnsOnAddition

__all__ = ["BODY_IDLE_SECONDS", "HEAD_SECONDS", "HELD_BODIES_FULL", "HTTP_PORT",
           "IDLE_SECONDS", "MAX_HELD_BODY_BYTES", "UNREADABLE_BODY", "UNREADABLE_HEAD",
           "UPGRADES", "Proxy"]

# A client has this long to send a whole head (slowloris: a head dribbled a byte at a
# time holds a connection and its memory for nothing).
HEAD_SECONDS = 10.0

Resolver = Callable[[str, int], Awaitable[list[Address]]]


class Proxy(Wire):
    """The proxy of one sandbox. `rules`: the hosts, endpoints and [lan] hosts it may
    reach; `machine`: this machine's addresses and networks, which it may not;
    `verbs`: the verbs the policy turned on, by their path segment (lnk_proxy.verbs
    names them); `book`: the endpoints' addresses inside the sandbox. The rest is the
    wire's (lnk_common.wire.Wire)."""

    def __init__(self, *, rules: tuple[HostRule, ...], machine: MachineFacts, log: WireLog,
                 resolver: Resolver = system_resolver, settings: str = "", wire: str = "",
                 controls: Controls | SharedControls | None = None,
                 say: Callable[[str], None] | None = None, book: AddressBook | None = None,
                 verbs: Mapping[str, Verb] | None = None) -> None:
        super().__init__(log=log, settings=settings, wire=wire, controls=controls, say=say)
        self.rules = rules
        self.machine = machine
        self.added = AddedHosts(settings, wire, machine)  # `lnk-sandbox allow`'s hosts
        # The sockets made inside for `allow --tcp`'s endpoints (with the sandbox's DNS).
        self.added_endpoints: AddedEndpoints | None = None
        # A sandbox that started without DNS: its DNS, made once an endpoint is added.
        self.dns_on_addition: DnsOnAddition | None = None
        self.resolver = resolver
        self.book = book
        self.verbs: dict[str, Verb] = dict(verbs or {})
        self.enabled = frozenset(self.verbs)  # every other verb answers 404
        # Every verb call's body, at most MAX_HELD_BODY_BYTES (lnk_common.bodies).
        self.held_bodies = HeldBodies(MAX_HELD_BODY_BYTES, HELD_BODIES_FULL)

    def close_verbs(self) -> None:
        """The verbs' kept connections and tools' processes ended (the proxy stops)."""
        for verb in self.verbs.values():
            verb.close()

    # -- one client connection ----------------------------------------------------------

    async def handle(self, reader: Inbox, writer: Outbox) -> None:
        """A connection to the proxy's listener: heads one after another on a connection
        kept alive (each request checked and decided afresh, wherever it goes), until a
        CONNECT, a refusal or a close."""
        await self.hold(writer, self.serve_connection(reader, writer, ClientConnection()),
                        asked=False)

    async def handle_endpoint(self, reader: Inbox,
                              writer: Outbox) -> None:
        """A connection to an endpoint's address inside the sandbox (lnk_proxy.tunnel)."""
        await self.hold(writer, tunnel.endpoint(self, reader, writer))

    async def serve_connection(self, reader: Inbox, writer: Outbox,
                               connection: ClientConnection) -> None:
        """One client connection's requests (`connection`, sans IO) served with its lane
        and its kept upstream, both let go at its end."""
        kept: list[Upstream | None] = [None]
        lane = self._lane(reader, writer, kept, connection)
        try:
            await self._requests(reader, writer, lane, connection)
        finally:
            _let_go(lane, kept)

    def _lane(self, reader: Inbox, writer: Outbox, kept: list[Upstream | None],
              connection: ClientConnection) -> Lane:
        """The connection's lane (lnk_proxy.lane), its bytes given to `connection` from
        now: every listener of the proxy's makes its connections' protocol a
        `LaneProtocol` (lane_server); any other is a bug."""
        protocol = writer.transport.get_protocol()
        if not isinstance(protocol, LaneProtocol):
            raise RuntimeError("a client connection that no lane_server made")
        lane = Lane(self, protocol, reader, writer, kept)
        protocol.serve(connection)
        return lane

    async def _requests(self, reader: Inbox, writer: Outbox, lane: Lane,
                        connection: ClientConnection) -> None:
        """The connection's commands carried out one after another until it ends: its
        bytes waited for as it needs them (they go to `connection` as they come: a head
        within HEAD_SECONDS of its first byte; between requests, parked in the lane,
        IDLE_SECONDS), each request's decision and exchange (a body-less one carried out
        by the lane while the task is parked), a CONNECT's tunnel."""
        deadline: float | None = None  # the head's, from its first byte
        while True:
            command = connection.next_command()
            if isinstance(command, NeedData) and command.within_head:
                deadline = deadline or asyncio.get_running_loop().time() + HEAD_SECONDS
                try:
                    async with asyncio.timeout_at(deadline):
                        await reader.arrival()
                except TimeoutError:
                    await self._refuse_as(reader, writer, connection.head_timed_out())
                    return
                continue
            deadline = None
            if isinstance(command, Closed):
                return
            if not isinstance(command, NeedData):
                self.asked()  # a call from here: the switches close it (the gate first)
                if isinstance(command, Refuse):
                    await self._refuse_as(reader, writer, command)
                    return
                if isinstance(command, OpenTunnel):
                    if not await tunnel.connect(self, command, reader, writer, lane.kept):
                        return
                    connection.tunnel_opened(command.target)
                    continue
                went: Keep | None
                if isinstance(command, CallVerb):
                    went = await self._verb(command, reader, writer, connection)
                else:
                    went = await self.forward(command, reader, writer, lane, connection)
                if went is not None:
                    if not went[0]:
                        return
                    connection.request_done(went[1])
                    continue
            if not await self._parked(reader, lane, connection):
                return

    async def _parked(self, reader: Inbox, lane: Lane, connection: ClientConnection
                      ) -> bool:
        """Between requests, or while the lane carries one out: parked in the lane (which
        takes whole heads from the connection's machine and carries out body-less
        requests) until it has work for the task. True: go on to the machine's next
        command (it holds the client's bytes or end, a request behind the last, or a
        command the lane gave back); False: the connection ends (quiet past
        IDLE_SECONDS, a refusal of the lane's, an exchange that ends it). The error the
        client's connection ended on is raised, as a read of it would."""
        note = await lane.idle(connection, IDLE_SECONDS)
        if note is END:
            return False
        if (error := reader.exception()) is not None:
            raise error
        return True

    async def forward(self, request: Forward, reader: Inbox, writer: Outbox, lane: Lane,
                      connection: ClientConnection) -> Keep | None:
        """A request the task passes on (lnk_proxy.forward): every one that is not the
        lane's, and a lane's sent again on a new connection. None: the lane carries it
        out (a body-less request), and the task parks until it ends."""
        return await forwarding.forward(self, request, reader, writer, lane, connection)

    async def _verb(self, command: CallVerb, reader: Inbox,
                    writer: Outbox, connection: ClientConnection) -> Keep:
        """A call to a verb: 404 for no such verb or one that is off (counted as any
        refusal), else the verb's own (its body read through `connection`, the
        machine); its body's share of MAX_HELD_BODY_BYTES given back when it ends."""
        client, request = command.parsed
        call = VerbCall(self, request, client, connection, reader, writer)
        try:
            name, rest = split_verb(command.path, self.enabled)
        except VerbError as error:
            return await call.refuse("-", Refused(error.status, error.reason))
        try:
            return await self.verbs[name].call(call, rest)
        finally:
            call.release()

    # -- refusals -----------------------------------------------------------------------

    async def _refuse_as(self, reader: Inbox, writer: Outbox,
                         command: Refuse) -> None:
        """The machine's refusal, which ends the connection, read by the program rather
        than reset away (lnk_common.wire.linger)."""
        await self.refuse(writer, command.where, command.refusal)
        await linger(reader, writer)

    async def refuse(self, writer: Outbox, target: str, refusal: Refused, *,
                     verb: bool = False) -> None:
        """The refusal's one line to the program and the log (with `verb`, as one line of
        JSON in the error shape the providers' SDKs read, so a harness's SDK shows why)."""
        self.refuse_now(writer, target, refusal, verb=verb)
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    def refuse_now(self, writer: Outbox, target: str, refusal: Refused, *,
                   verb: bool = False) -> None:
        """`refuse` but for the wait until it is sent (the lane's, in a callback)."""
        self.log.write("refused", target, f"reason={refusal.logged}")
        if verb:
            body = verb_refusal_body(refusal.status, refusal.reason)
            kind = "application/json"
        else:
            body = (refusal.reason + "\n").encode("utf-8", "replace")
            kind = "text/plain"
        writer.write(refusal_head(refusal, kind, len(body)) + body)
        self.count_refusal(target, refusal)

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
        if rule is None:  # the additions (lnk_proxy.added), read now, else refused
            named = target.authority if target.address else f"{target.host}:{target.port}"
            return self.added.admit(target, Refused(
                403, f"{named} is not in this sandbox's hosts", ordinary=True))
        return rule

    def taken_away(self) -> list[asyncio.Task[None]]:
        """The open calls an addition let through whose host was taken away since."""
        return self.added.taken_away()

    def made_listeners(self) -> bool:
        return self.added_endpoints is not None and self.added_endpoints.any_made()

    def close_taken_away_listeners(self) -> None:
        if self.added_endpoints is not None:
            self.added_endpoints.close_taken_away()

    def dns_wanted(self) -> bool:
        return self.dns_on_addition is not None and self.dns_on_addition.wanted()

    def open_dns(self) -> None:
        if self.dns_on_addition is not None:
            self.dns_on_addition.open()

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

    async def connect_upstream(self, target: Target, *, counted: bool = True) -> Upstream:
        """A forwarded call's upstream: decided (`decide`), then connected to the very
        address checked."""
        address = await self.decide(target, counted=counted)
        return await open_upstream(address, target.port, target.authority)

    async def open_tunnel(self, target: Target) -> socket.socket:
        """A tunnel's upstream: decided as any call, a bare socket (its bytes are
        spliced, never read here)."""
        address = await self.decide(target)
        return await open_socket(address, target.port, target.authority)


def _let_go(lane: Lane, kept: list[Upstream | None]) -> None:
    """A connection's end: its lane's call in flight ended (with its line), its kept
    upstream closed (even if the first raised)."""
    try:
        lane.close()
    finally:
        if kept[0] is not None:
            kept[0].close()
