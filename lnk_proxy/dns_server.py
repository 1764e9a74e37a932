"""The sandbox's DNS, answered by its proxy on 127.0.0.1:53 (UDP and TCP) inside it.

The sockets were made inside the sandbox's network by the DNS helper (lnk_dns.helper);
the proxy serves them from outside. What each query gets is decided by lnk_dns.answer
(sans IO): a name the sandbox may reach (of [tcp] endpoints or [lan] hosts) gets an
address of the sandbox's own, where the proxy's end listens (lnk_common.endpoints); a
name it may not reach gets NXDOMAIN, and nothing is asked of anyone. SRV and TXT of
allowed names are asked of the real DNS outside, once a lookup, and that counts as one
call toward the wire's calls a minute (an answer given here does not: the connection
after it counts).

Every query is on the wire's log, TARGET being the name asked:
    allowed  db.example.com  kind=dns type=A answer=127.53.0.1
    allowed  _mongodb._tcp.c.example.net  kind=dns type=SRV outside=NOERROR answers=3
    refused  other.com       kind=dns type=A reason=other.com is not a name this sandbox …
A refused name counts toward pausing the wire, on a threshold of its own, looser than a
call's (lnk_proxy.controls.DNS_NAMES_PER_TARGET): resolvers ask for names on their own
(search lists, AAAA beside A, retries), so only distinct names count, and many of them;
a flood of new names (data sent out in them, to whoever runs the domain's DNS, or to
fill the log) pauses. The log folds refusals of one kind (lnk_common.wirelog). The kill
switch and a pause refuse every query (REFUSED).
"""

from __future__ import annotations

import asyncio
import socket

from lnk_dns.answer import Local, Outside, Refuse, decide
from lnk_dns.message import (
    MAX_MESSAGE_BYTES,
    DnsFormatError,
    Query,
    Record,
    error_reply,
    header_id,
    outside_query,
    parse_outside_reply,
    parse_query,
    reply,
    reply_for_size,
    tcp_frame,
    tcp_frames,
)
from lnk_proxy.decide import HostRule
from lnk_proxy.server import Proxy
from lnk_proxy.wire import Refused

__all__ = ["OUTSIDE_SECONDS", "TCP_IDLE_SECONDS", "DnsService", "system_server"]

# The real DNS has this long to answer an SRV or TXT query (then SERVFAIL).
OUTSIDE_SECONDS = 5.0
# A TCP connection to the sandbox's DNS with no query for this long is closed.
TCP_IDLE_SECONDS = 10.0
# Queries asked outside at once; more wait (a program that floods its resolver slows
# itself, not the proxy's other calls).
MAX_PENDING = 64
# Answers given here kept for a repeat of the same query (a resolver asks A and AAAA of
# a name at every connection); past this many, the table starts again.
MAX_KEPT_ANSWERS = 4096


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
        answer = await self.service.answer_outside(pending)
        if self.transport is not None:
            self.transport.sendto(answer, addr)


class _Pending:
    """A query whose answer is asked outside."""

    __slots__ = ("decision", "query", "udp")

    def __init__(self, query: Query, decision: Outside, udp: bool) -> None:
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
        self.answered: dict[tuple[bool, bytes], tuple[str, str, str, bytes]] = {}

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
            self.closers.append(await asyncio.start_server(self._stream, sock=sock))

    def close(self) -> None:
        for closer in self.closers:
            closer.close()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        try:
            while True:
                chunk = await asyncio.wait_for(reader.read(65536), TCP_IDLE_SECONDS)
                if not chunk:
                    return
                frames, buffer = tcp_frames(buffer + chunk)
                for frame in frames:
                    answer = await self.answer(frame, udp=False)
                    if answer is None:
                        return
                    writer.write(tcp_frame(answer))
                    await writer.drain()
        except (ConnectionError, TimeoutError, ValueError):
            pass
        finally:
            writer.close()

    async def answer(self, data: bytes, *, udp: bool) -> bytes | None:
        """The reply to one query (None: nothing to answer, not even an id)."""
        answered = self.answer_here(data, udp=udp)
        if isinstance(answered, _Pending):
            return await self.answer_outside(answered)
        return answered

    def answer_here(self, data: bytes, *, udp: bool) -> bytes | _Pending | None:
        """The reply, when it is given here (or None: not even an id to answer); a
        _Pending when it must be asked outside."""
        cached = self.answered.get((udp, data[2:]))
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
            log.write("refused", name, f"{kind} reason={refusal.reason}")
            return self._reply(query, "REFUSED", [], udp)
        decision = decide(query, allowed=self.allowed, give=self.give)
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
            if len(self.answered) >= MAX_KEPT_ANSWERS:
                self.answered.clear()
            self.answered[(udp, data[2:])] = (event, name, detail, answer)
            return answer
        try:
            self.proxy.gate()  # asking outside is a call: it counts toward calls a minute
        except Refused as refusal:
            log.write("refused", name, f"{kind} reason={refusal.reason}")
            return self._reply(query, "REFUSED", [], udp)
        return _Pending(query, decision, udp)

    @staticmethod
    def _reply(query: Query, rcode: str, records: list[Record], udp: bool) -> bytes:
        if udp:
            return reply_for_size(query, rcode, records, query.udp_size)
        return reply(query, rcode, records)

    async def answer_outside(self, pending: _Pending) -> bytes:
        """Ask the real DNS (at most MAX_PENDING at once) and answer with what it said."""
        query, decision = pending.query, pending.decision
        name, kind = query.name or ".", f"kind=dns type={query.qtype}"
        loop = asyncio.get_running_loop()
        async with self.pending:
            try:
                rcode, records = await asyncio.wait_for(
                    loop.run_in_executor(None, _exchange, self.server, decision.name,
                                         decision.qtype), OUTSIDE_SECONDS * 2)
            except (OSError, TimeoutError, DnsFormatError) as error:
                self.proxy.log.write("refused", name,
                                     f"{kind} reason=the DNS outside did not answer "
                                     f"({type(error).__name__}: {error})")
                return self._reply(query, "SERVFAIL", [], pending.udp)
        self.proxy.log.write("allowed", name, f"{kind} outside={rcode} answers={len(records)}")
        return self._reply(query, rcode if rcode in ("NOERROR", "NXDOMAIN") else "SERVFAIL",
                           records, pending.udp)

