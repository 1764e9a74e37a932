"""The sandbox's DNS, answered by its proxy on 127.0.0.1:53 (UDP and TCP) inside it.

The sockets were made inside the sandbox's network by the DNS helper (lnk_dns.helper);
the proxy serves them from outside. What each query gets is decided by lnk_dns.answer
(sans IO): a name the sandbox may reach (of [tcp] endpoints or [lan] hosts) gets an
address of the sandbox's own, where the proxy's end listens (lnk_common.endpoints); a
name it may not reach gets NXDOMAIN, and nothing is asked of anyone. A name an endpoint
`lnk-sandbox allow --tcp` added since the start names is answered once its socket inside
is made (lnk_proxy.added_endpoints; the additions are looked at for every query, a kept
answer's too, and an answer they gave is never kept: `disallow` takes it away). SRV and
TXT of allowed names are asked of the real DNS outside, once a lookup, and that counts as
one call toward the wire's calls a minute (an answer given here does not: the connection
after it counts).

Every query is on the wire's log, TARGET being the name asked:
    allowed  db.example.com  kind=dns type=A answer=127.53.0.1
    allowed  _mongodb._tcp.c.example.net  kind=dns type=SRV outside=NOERROR answers=3
    refused  other.com       kind=dns type=A reason=other.com is not a name this sandbox …
A refused name counts toward pausing the wire, on a threshold of its own, looser than a
call's (lnk_common.controls.DNS_NAMES_PER_TARGET): resolvers ask for names on their own
(search lists, AAAA beside A, retries), so only distinct names count, and many of them;
a flood of new names (data sent out in them, to whoever runs the domain's DNS, or to
fill the log) pauses. The log folds refusals of one kind (lnk_common.wirelog). The kill
switch and a pause refuse every query (REFUSED).

What a sandbox can make this hold is bounded: a query longer than MAX_QUERY_BYTES gets
FORMERR unread; replies are kept under answer_key (never the query's padding) within
MAX_KEPT_BYTES; a TCP connection reads into one query's buffer, at most
MAX_TCP_CONNECTIONS at once; at most MAX_WAITING queries wait for the DNS outside.
"""

from __future__ import annotations

import asyncio
import socket

from lnk_common.wire import Refused
from lnk_dns.answer import Local, Outside, Refuse, decide, service_host
from lnk_dns.message import (
    MAX_MESSAGE_BYTES,
    MAX_QUERY_BYTES,
    DnsFormatError,
    Query,
    Record,
    answer_key,
    error_reply,
    header_id,
    outside_query,
    parse_outside_reply,
    parse_query,
    reply,
    reply_for_size,
    tcp_frame,
    tcp_frame_length,
    tcp_frames,
)
from lnk_proxy.added_endpoints import AddedEndpoints, PlacingError, made_inside
from lnk_proxy.decide import HostRule
from lnk_proxy.server import Proxy

__all__ = ["MAX_KEPT_BYTES", "MAX_TCP_CONNECTIONS", "OUTSIDE_SECONDS", "TCP_IDLE_SECONDS",
           "DnsOnAddition", "DnsService", "system_server"]

# The real DNS has this long to answer an SRV or TXT query (then SERVFAIL).
OUTSIDE_SECONDS = 5.0
# A TCP connection to the sandbox's DNS with no query for this long is closed.
TCP_IDLE_SECONDS = 10.0
# Queries asked outside at once; more wait (a program that floods its resolver slows
# itself, not the proxy's other calls).
MAX_PENDING = 64
# Queries that may wait for the DNS outside (asked or waiting their turn); more get
# SERVFAIL at once, so that a flood of SRV queries holds no more than these in memory.
MAX_WAITING = 256
# Answers given here kept for a repeat (a resolver asks A and AAAA of a name at every
# connection), counted in bytes, so that what a sandbox can make its proxy hold is
# bounded whatever it asks: each reply is kept under `answer_key` (at most ~270 bytes,
# never the query's padding) with its reply (a few hundred bytes) and its log line. Past
# this, the oldest go. 1 MiB keeps some 1,000-3,000 answers, hundreds of times the names
# a program looks up.
MAX_KEPT_BYTES = 1 << 20
# What one kept answer costs beyond its bytes: the dict's slot and the objects' headers.
KEPT_ENTRY_OVERHEAD_BYTES = 400
# TCP connections to the sandbox's DNS open at once; more are closed at once (a stub
# resolver uses one at a time, for a reply that was truncated over UDP). Each holds at
# most one query (MAX_QUERY_BYTES) and, before it stops reading, a few of its replies.
MAX_TCP_CONNECTIONS = 32
# Replies waiting for a TCP client to read them; past this, the connection is not read.
TCP_WRITE_BUFFER_BYTES = 8192


def system_server() -> tuple[str, int]:
    """The first nameserver of this machine's resolv.conf (the proxy runs outside, in
    this machine's network), else 127.0.0.1, as glibc does."""
    try:
        with open("/etc/resolv.conf", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "nameserver":
                    return parts[1].split("%")[0], 53
    except OSError:
        pass
    return "127.0.0.1", 53


def _exchange(server: tuple[str, int], name: str, qtype: str) -> tuple[str, list[Record]]:
    """Ask the real DNS, over UDP, then TCP when the answer was truncated."""
    family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    query_id, packet = outside_query(name, qtype)
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(OUTSIDE_SECONDS)
        sock.connect(server)
        sock.send(packet)
        while True:
            data = sock.recv(MAX_MESSAGE_BYTES)
            try:
                rcode, records, truncated = parse_outside_reply(data, query_id, name, qtype)
                break
            except DnsFormatError:
                continue  # not the answer to this query (a late one, or forged): wait on
    if not truncated:
        return rcode, records
    query_id, packet = outside_query(name, qtype)
    with socket.create_connection(server, timeout=OUTSIDE_SECONDS) as sock:
        sock.sendall(tcp_frame(packet))
        buffer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("the DNS server closed the connection")
            frames, buffer = tcp_frames(buffer + chunk)
            if frames:
                rcode, records, _ = parse_outside_reply(frames[0], query_id, name, qtype)
                return rcode, records


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, service: DnsService) -> None:
        self.service = service
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a datagram endpoint's

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        # Answered here at once when nothing is asked outside (no task, no wait); only
        # SRV and TXT of allowed names go on in a task of their own.
        answered = self.service.answer_here(data, udp=True)
        if isinstance(answered, _Pending):
            self.service.spawn(self._answer_later(answered, addr))
        elif answered is not None and self.transport is not None:
            self.transport.sendto(answered, addr)

    async def _answer_later(self, pending: _Pending, addr: tuple[str, int]) -> None:
        answer = await self.service.answer_later(pending)
        if self.transport is not None:
            self.transport.sendto(answer, addr)


def _kept_size(key: tuple[bool, bytes], entry: tuple[str, str, str, bytes]) -> int:
    event, name, detail, answer = entry
    return (len(key[1]) + len(event) + len(name) + len(detail) + len(answer)
            + KEPT_ENTRY_OVERHEAD_BYTES)


class _Stream(asyncio.BufferedProtocol):
    """One TCP connection to the sandbox's DNS (RFC 7766 framing: a 2-byte length, then
    the message). Read into one buffer of a query's most (MAX_QUERY_BYTES and its length)
    and never further: a frame that announces more gets FORMERR once its id is in, and
    the connection is closed unread (a 60 KB "query" is never held); while a query is
    asked outside, or the client does not read its replies, nothing more is read. So a
    connection holds a bounded amount, whatever is sent on it."""

    def __init__(self, service: DnsService) -> None:
        self.service = service
        self.buffer = bytearray(2 + MAX_QUERY_BYTES)
        self.filled = 0
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.busy = False  # a query of this connection is being asked outside
        self.blocked = False  # the client does not read its replies

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a stream's, by create_server
        self.transport = transport
        if len(self.service.streams) >= MAX_TCP_CONNECTIONS:
            self.service.proxy.log.write(
                "refused", "-", f"kind=dns reason={MAX_TCP_CONNECTIONS} TCP connections"
                " to the sandbox's DNS are open already")
            transport.close()
            return
        self.service.streams.add(self)
        transport.set_write_buffer_limits(high=TCP_WRITE_BUFFER_BYTES)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.service.streams.discard(self)
        if self.idle is not None:
            self.idle.cancel()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _arm(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        self.idle = asyncio.get_running_loop().call_later(TCP_IDLE_SECONDS, self.close)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buffer)[self.filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes
        self._arm()
        self._take()

    def pause_writing(self) -> None:
        self.blocked = True
        self._reading()

    def resume_writing(self) -> None:
        self.blocked = False
        self._reading()
        self._take()

    def _reading(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        if self.busy or self.blocked:
            self.transport.pause_reading()
        else:
            self.transport.resume_reading()

    def _take(self) -> None:
        """Answer each whole query in the buffer, in order, while not busy or blocked."""
        while (not self.busy and not self.blocked and self.transport is not None
               and not self.transport.is_closing()):
            length = tcp_frame_length(self.buffer[:self.filled])
            if length is None:
                return
            if length > MAX_QUERY_BYTES:
                if self.filled < 4:
                    return  # its id is not in yet
                answer = self.service.refuse_oversized(self.buffer[2:4], length)
                if answer is not None:
                    self.transport.write(tcp_frame(answer))
                self.transport.close()
                return
            if self.filled < 2 + length:
                return
            frame = bytes(self.buffer[2 : 2 + length])
            rest = self.filled - 2 - length
            self.buffer[:rest] = self.buffer[2 + length : self.filled]
            self.filled = rest
            answered = self.service.answer_here(frame, udp=False)
            if answered is None:
                self.transport.close()
                return
            if isinstance(answered, _Pending):
                self.busy = True
                self._reading()
                self.service.spawn(self._answer_later(answered))
                return
            self.transport.write(tcp_frame(answered))

    async def _answer_later(self, pending: _Pending) -> None:
        answer = await self.service.answer_later(pending)
        self.busy = False
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(tcp_frame(answer))
        self._reading()
        self._take()


class _Pending:
    """A query whose answer waits: asked outside (`decision` Outside), or for the sockets
    an added endpoint's name needs inside (`decision` the additions' rules naming it)."""

    __slots__ = ("decision", "query", "udp")

    def __init__(self, query: Query, decision: Outside | tuple[HostRule, ...],
                 udp: bool) -> None:
        self.query = query
        self.decision = decision
        self.udp = udp


class DnsService:
    def __init__(self, proxy: Proxy, *, rules: tuple[HostRule, ...],
                 server: tuple[str, int] | None) -> None:
        self.proxy = proxy
        self.rules = rules  # the names of endpoints and [lan] hosts
        self.server = server or system_server()
        self.closers: list[asyncio.BaseTransport | asyncio.Server] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.pending = asyncio.Semaphore(MAX_PENDING)
        self.waiting = 0  # queries asked outside or waiting their turn
        self.streams: set[_Stream] = set()
        # answer_key (and whether over UDP) -> (event, name, detail, reply); oldest first.
        self.answered: dict[tuple[bool, bytes], tuple[str, str, str, bytes]] = {}
        self.kept_bytes = 0
        # `lnk-sandbox allow --tcp`'s endpoints, taken at the name's next lookup (main
        # sets it once it holds a socket made inside; None: the spec's names only).
        self.added: AddedEndpoints | None = None

    def allowed(self, name: str) -> bool:
        return any(rule.matches_name(name) for rule in self.rules)

    def give(self, name: str) -> str | None:
        return self.proxy.book.give(name) if self.proxy.book is not None else None

    def spawn(self, work: object) -> None:
        task = asyncio.ensure_future(work)  # type: ignore[call-overload]
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def serve(self, sock: socket.socket, *, udp: bool) -> None:
        loop = asyncio.get_running_loop()
        if udp:
            transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self),
                                                               sock=sock)
            self.closers.append(transport)
        else:
            self.closers.append(await loop.create_server(lambda: _Stream(self), sock=sock))

    def close(self) -> None:
        for closer in self.closers:
            closer.close()
        for stream in list(self.streams):
            stream.close()

    async def answer(self, data: bytes, *, udp: bool) -> bytes | None:
        """The reply to one query (None: nothing to answer, not even an id)."""
        answered = self.answer_here(data, udp=udp)
        if isinstance(answered, _Pending):
            return await self.answer_later(answered)
        return answered

    def answer_here(self, data: bytes, *, udp: bool) -> bytes | _Pending | None:
        """The reply, when it is given here (or None: not even an id to answer); a
        _Pending when it must be asked outside, or an added endpoint's sockets made."""
        if len(data) > MAX_QUERY_BYTES:
            return self.refuse_oversized(data, len(data))
        key = answer_key(data)
        cached = self.answered.get((udp, key)) if key is not None else None
        if cached is not None and self._added_names(cached[1]):
            cached = None  # answered before `allow --tcp` named it: decided again
        if cached is not None:
            event, name, detail, answer = cached
            try:
                self.proxy.gate(counted=False)
            except Refused:
                pass  # said below, in full
            else:
                self.proxy.log.write(event, name, detail)
                return data[:2] + answer[2:]
        try:
            query = parse_query(data)
        except DnsFormatError as error:
            self.proxy.log.write("refused", "-", f"kind=dns reason={error}")
            query_id = header_id(data)
            return None if query_id is None else error_reply(query_id, "FORMERR")
        log = self.proxy.log
        name = query.name or "."
        kind = f"kind=dns type={query.qtype}"
        try:
            self.proxy.gate(counted=False)
        except Refused as refusal:
            log.write("refused", name, f"{kind} reason={refusal.logged}")
            return self._reply(query, "REFUSED", [], udp)
        return self._decided(query, key, udp)

    def _added_names(self, name: str) -> tuple[HostRule, ...]:
        """The added endpoints naming `name` (a service name's host): a stat of the
        additions at each query, even of a name the spec lists (an endpoint added on
        another port of it needs its socket too). None without the additions' shell."""
        host = service_host(name)
        if self.added is None or not host:
            return ()
        return self.added.rules_for(host)

    def _decided(self, query: Query, key: bytes | None, udp: bool, *,
                 placed: bool = False) -> bytes | _Pending:
        """The reply to `query` once the gate let it by: answered here (kept for a
        repeat unless an addition gave it, which `disallow` may take away), or pending
        (asked outside; an added endpoint's sockets to make first, unless `placed`)."""
        log = self.proxy.log
        name, kind = query.name or ".", f"kind=dns type={query.qtype}"
        added = self._added_names(name)
        decision: Local | Outside | Refuse
        try:
            if added and self.added is not None and self.added.missing(service_host(name),
                                                                       added):
                if placed:
                    raise PlacingError("its sockets are not there after they were made")
                return self._wait_for(query, added, udp, name, kind)
            decision = decide(query, allowed=lambda host: bool(added) or self.allowed(host),
                              give=self.give)
        except PlacingError as error:
            # A name the spec lists is answered as the spec says (nothing else changed).
            decision = decide(query, allowed=self.allowed, give=self.give) if self.allowed(
                service_host(name)) else Refuse(
                "NXDOMAIN", f"{service_host(name)} is an endpoint `lnk-sandbox allow --tcp` "
                f"added, not placed in the running sandbox: {error}")
        if isinstance(decision, Refuse | Local):
            # The same query gets the same answer for the sandbox's life (an address
            # once given is kept): the reply is kept, and a repeat skips the parsing.
            records: list[Record] = []
            if isinstance(decision, Refuse):
                event, detail = "refused", f"{kind} reason={decision.reason}"
            else:
                event, detail = "allowed", f"{kind} {decision.note}".rstrip()
                records = decision.records
            log.write(event, name, detail)
            if event == "refused":
                self.proxy.count_dns_refusal(name)
            answer = self._reply(query, decision.rcode, records, udp)
            if key is not None and not added:
                self._keep((udp, key), (event, name, detail, answer))
            return answer
        return self._wait_for(query, decision, udp, name, kind)

    def _wait_for(self, query: Query, decision: Outside | tuple[HostRule, ...], udp: bool,
                  name: str, kind: str) -> bytes | _Pending:
        """A query that waits (asked outside, or for an added endpoint's sockets), at
        most MAX_WAITING at once; asking outside counts as a call."""
        log = self.proxy.log
        if self.waiting >= MAX_WAITING:
            log.write("refused", name, f"{kind} reason={self.waiting} queries already wait"
                      " for the DNS outside")
            return self._reply(query, "SERVFAIL", [], udp)
        try:
            if isinstance(decision, Outside):
                self.proxy.gate()  # asking outside is a call: it counts toward calls a minute
        except Refused as refusal:
            log.write("refused", name, f"{kind} reason={refusal.logged}")
            return self._reply(query, "REFUSED", [], udp)
        self.waiting += 1
        return _Pending(query, decision, udp)

    def refuse_oversized(self, data: bytes | bytearray, length: int) -> bytes | None:
        """FORMERR (RFC 1035: "unable to interpret the query") for a query longer than
        MAX_QUERY_BYTES, read no further than its id; logged (and folded) as any refusal."""
        self.proxy.log.write("refused", "-", f"kind=dns reason=a query of {length} bytes"
                             f" (a stub resolver's is at most {MAX_QUERY_BYTES})")
        query_id = header_id(bytes(data[:2]))
        return None if query_id is None else error_reply(query_id, "FORMERR")

    def _keep(self, key: tuple[bool, bytes], entry: tuple[str, str, str, bytes]) -> None:
        """Keep a reply for repeats of its query, the oldest going past MAX_KEPT_BYTES."""
        if key in self.answered:
            return
        self.answered[key] = entry
        self.kept_bytes += _kept_size(key, entry)
        while self.kept_bytes > MAX_KEPT_BYTES:
            oldest = next(iter(self.answered))
            self.kept_bytes -= _kept_size(oldest, self.answered.pop(oldest))

    @staticmethod
    def _reply(query: Query, rcode: str, records: list[Record], udp: bool) -> bytes:
        if udp:
            return reply_for_size(query, rcode, records, query.udp_size)
        return reply(query, rcode, records)

    async def answer_later(self, pending: _Pending) -> bytes:
        """The answer to a query that waited: asked outside, or decided again once an
        added endpoint's sockets were made inside."""
        if isinstance(pending.decision, Outside):
            return await self.answer_outside(pending, pending.decision)
        try:
            if self.added is not None:  # only a service with additions waits so
                await self.added.place(service_host(pending.query.name), pending.decision)
        except PlacingError:
            pass  # kept by `added`: said by `_decided` as the name's refusal
        finally:
            self.waiting -= 1
        answer = self._decided(pending.query, None, pending.udp, placed=True)
        return answer if isinstance(answer, bytes) else self._reply(
            pending.query, "SERVFAIL", [], pending.udp)

    async def answer_outside(self, pending: _Pending, decision: Outside) -> bytes:
        """Ask the real DNS (at most MAX_PENDING at once) and answer with what it said."""
        query = pending.query
        name, kind = query.name or ".", f"kind=dns type={query.qtype}"
        loop = asyncio.get_running_loop()
        try:
            async with self.pending:
                rcode, records = await asyncio.wait_for(
                    loop.run_in_executor(None, _exchange, self.server, decision.name,
                                         decision.qtype), OUTSIDE_SECONDS * 2)
        except (OSError, TimeoutError, DnsFormatError) as error:
            self.proxy.log.write("refused", name,
                                 f"{kind} reason=the DNS outside did not answer "
                                 f"({type(error).__name__}: {error})")
            return self._reply(query, "SERVFAIL", [], pending.udp)
        finally:
            self.waiting -= 1
        self.proxy.log.write("allowed", name, f"{kind} outside={rcode} answers={len(records)}")
        return self._reply(query, rcode if rcode in ("NOERROR", "NXDOMAIN") else "SERVFAIL",
                           records, pending.udp)



class DnsOnAddition:
    """The DNS of a sandbox of the proxy's network that started without one (its spec
    names no endpoint and no [lan] host by name): its resolv.conf names 127.0.0.1
    (lnk_wrap.dns_files), where nothing listens, so a lookup is refused by the kernel at
    once, and nothing is logged or counted. Once the wire's additions have an endpoint
    (`lnk-sandbox allow --tcp`), the helper's second form binds 127.0.0.1:53 (UDP and
    TCP) inside (lnk_dns.places) and this proxy serves the sandbox's DNS there, for the
    rest of the run, as a DNS sandbox's: the added endpoints' names get their sockets
    at their lookup (lnk_proxy.added_endpoints), every other name is refused and logged.
    Asked by the process's watch (`wanted`, from its thread; `open`, on the loop). A
    helper that fails is one `refused` line for each added endpoint, and is not tried
    again until the added endpoints change."""

    def __init__(self, proxy: Proxy, inside: socket.socket, made: set[tuple[str, int]],
                 *, rules: tuple[HostRule, ...], server: tuple[str, int] | None) -> None:
        self.proxy = proxy
        self.inside = inside  # the proxy's own socket, made inside by the launcher's helper
        self.made = made  # the places the launcher's helper made ([lan] addresses')
        self.rules = rules
        self.server = server
        self.service: DnsService | None = None
        self.opening = False  # a helper is at work: the watch asks no other
        self.failed_under: tuple[HostRule, ...] | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def wanted(self) -> bool:
        """Whether the DNS must be made now (from any thread: a stat of the additions)."""
        if self.service is not None or self.opening:
            return False
        rules = self.proxy.added.endpoint_rules()
        return bool(rules) and rules is not self.failed_under

    def open(self) -> None:
        """Make and serve the DNS, once (on the loop)."""
        if self.wanted():
            self.opening = True
            task = asyncio.ensure_future(self._open(self.proxy.added.endpoint_rules()))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _open(self, rules: tuple[HostRule, ...]) -> None:
        service = DnsService(self.proxy, rules=self.rules, server=self.server)
        try:
            udp, tcp = await asyncio.get_running_loop().run_in_executor(
                None, lambda: made_inside(self.inside.fileno(), [], dns=True))
            try:
                await service.serve(udp, udp=True)
                await service.serve(tcp, udp=False)
            except OSError as error:
                service.close()
                udp.close()
                tcp.close()
                raise PlacingError(f"its sockets cannot be served ({error})") from None
        except PlacingError as error:
            self.failed_under, self.opening = rules, False
            for rule in rules:
                self.proxy.log.write(
                    "refused", f"*.{rule.name}" if rule.wildcard else rule.name,
                    "kind=dns reason=an endpoint `lnk-sandbox allow --tcp` added cannot be "
                    f"named in the running sandbox: its DNS cannot be made: {error}")
            return
        service.added = self.proxy.added_endpoints = AddedEndpoints(self.proxy, tcp, self.made)
        self.service, self.opening = service, False

    def close(self) -> None:
        if self.service is not None:
            self.service.close()
