"""Servers the test net's origin runs (tests/testnet.py starts them as root in the origin
namespace), and helpers for tests to steer and read them.

    python tests/testservers.py dns STATE-FOLDER ADDRESS    (UDP and TCP on ADDRESS:53)
    python tests/testservers.py bulk ADDRESS                 (TCP on ADDRESS:9)

dns: answers from STATE/dns/zone.json, read again at every query, so a test can change
the answers between two queries (DNS rebinding). The zone maps lower-case names without
the trailing dot to their records:

    {"NAME": {"A": ["1.2.3.4"], "AAAA": ["::1"], "SRV": [[priority, weight, port, "target"]],
              "TXT": ["text"]}}

STATE/dns/fixed.json (written by `up`, not writable by the tests) holds names answered
whatever zone.json says (zone.json's entry wins where both have a name): the fake model
providers' real names and api.telegram.org (tests/fakeproviders.SERVED_NAMES), so that a
test which rewrites the zone from its own copy of INITIAL_ZONE never takes them away from a
test running beside it.

A name absent is NXDOMAIN; a name present without the type asked is NOERROR with no
answer; TTL 5. Every query received is appended to STATE/dns/queries.log as one line
`QNAME QTYPE` (lower-case name, no trailing dot), so a test can count what went out.
That log and zone are one for every test on the network (every xdist worker, every run
sharing it): a test that asserts what was asked, or rewrites the zone, runs a server of its
own instead (`own_dns_server`: the same answers, on loopback, from a folder of the test's).

bulk: on connect, reads one line holding a byte count N (ASCII digits), sends N zero
bytes (at most 2 GiB) and closes: a source for throughput measurements.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DNS_SERVER = "10.212.0.2:53"
# The router's address on this machine's own network (10.211.0.0/30): a machine of the
# local network, which only [lan] may reach; it echoes lines on LAN_ECHO_PORT.
LAN_ADDRESS = "10.211.0.2"
LAN_ECHO_PORT = 7
# The same machine by IPv6, on this machine's own network fd00:211::/64.
LAN_ADDRESS6 = "fd00:211::2"
PG_HOST_ADDRESS = "10.212.0.2"
PG_PORT = 5432
BULK_PORT = 9
# The origin's port that answers each request with bytes of its own making (serve_raw):
# responses no ordinary server sends, for the proxy's reading of them.
RAW_PORT = 8081
# serve_raw's answers by path (/raw/<name>), and whether it closes after each. "fine" is
# the ordinary one; the others are each a framing the proxy must read exactly.
RAW_RESPONSES: dict[str, tuple[bytes, bool]] = {
    "fine": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfine\n", False),
    "chunked": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nchunk\r\n3\r\ned!\r\n0\r\n\r\n", False),
    # A body longer than its Content-Length: what follows is no response to anything.
    "extra": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
              b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nforged\n", False),
    "chunked-extra": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                      b"5\r\nfirst\r\n0\r\n\r\n"
                      b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nforged\n", False),
    "short": (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", True),
    "close": (b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nclose\n",
              True),
    "no-length": (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close\n",
                  True),
    "http10": (b"HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\nold\n", True),
    "hop": (b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nX-Kept: yes\r\n"
            b"Proxy-Connection: keep-alive\r\nContent-Length: 4\r\n\r\nhop\n", False),
    "no-content": (b"HTTP/1.1 204 No Content\r\n\r\n", False),
    "folded": (b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 3\r\n\r\nok\n",
               False),
    "two-lengths": (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"
                    b"ok\n!", True),
    "bare-lf": (b"HTTP/1.1 200 OK\nContent-Length: 3\n\nok\n", True),
    "big": (b"HTTP/1.1 200 OK\r\nContent-Length: 3000000\r\n\r\n" + b"b" * 3_000_000,
            False),
}
BULK_LIMIT = 2 * 1024 * 1024 * 1024
TTL = 5

INITIAL_ZONE: dict[str, dict[str, list[Any]]] = {
    "db.lnkt": {"A": ["10.212.0.2"]},
    "allowed.lnkt": {"A": ["10.212.0.2"]},
    "_mongodb._tcp.cluster0.lnkt": {"SRV": [[0, 0, 27017, "shard-00.cluster0.lnkt"],
                                            [0, 0, 27017, "shard-01.cluster0.lnkt"]]},
    "cluster0.lnkt": {"TXT": ["authSource=admin&replicaSet=rs0"]},
    "shard-00.cluster0.lnkt": {"A": ["10.212.0.2"]},
    "shard-01.cluster0.lnkt": {"A": ["10.212.0.2"]},
    "rebind.lnkt": {"A": ["10.212.0.2"]},
    "printer.local": {"SRV": [[0, 0, 631, "printer.local"]], "TXT": ["txtvers=1"]},
    "single": {"TXT": ["one-label"]},
}


# Helpers for tests (they run as the ordinary user too: the files are world-writable).

def _zone_file(state: Path) -> Path:
    return state / "dns" / "zone.json"


def _fixed_file(state: Path) -> Path:
    return state / "dns" / "fixed.json"


def _log_file(state: Path) -> Path:
    return state / "dns" / "queries.log"


def dns_queries(state: Path) -> list[tuple[str, str]]:
    """The queries the test DNS server received since the last clear, oldest first."""
    try:
        text = _log_file(state).read_text()
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        name, _, kind = line.partition(" ")
        found.append((name, kind))
    return found


def zone(state: Path) -> dict[str, dict[str, list[Any]]]:
    """The zone the test DNS server answers from now."""
    loaded: dict[str, dict[str, list[Any]]] = json.loads(_zone_file(state).read_text())
    return loaded


def set_zone(state: Path, records: dict[str, dict[str, list[Any]]]) -> None:
    """Make the test DNS server answer from `records` from its next query on. Written
    whole and renamed into place, so the server never reads half a zone."""
    target = _zone_file(state)
    temporary = target.with_name(f".zone.{os.getpid()}.{threading.get_ident()}.json")
    temporary.write_text(json.dumps(records, indent=1) + "\n")
    os.chmod(temporary, 0o666)  # noqa: S103 (root's and the ordinary user's runs share it)
    os.replace(temporary, target)


def write_initial_zone(state: Path) -> None:
    """The dns folder with the initial zone and an empty log, writable by everyone (the
    ordinary-user test run rewrites the zone and truncates the log)."""
    folder = state / "dns"
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o777)  # noqa: S103
    _zone_file(state).write_text(json.dumps(INITIAL_ZONE, indent=1) + "\n")
    _log_file(state).write_text("")
    for path in (_zone_file(state), _log_file(state)):
        os.chmod(path, 0o666)  # noqa: S103


def write_fixed_zone(state: Path, records: dict[str, dict[str, list[Any]]]) -> None:
    """Names the DNS server answers whatever zone.json holds (readable by all, written by
    root only)."""
    _fixed_file(state).write_text(json.dumps(records, indent=1) + "\n")
    os.chmod(_fixed_file(state), 0o644)


# The servers (run as root in the origin namespace).

def _log_query(state: Path, name: str, kind: str) -> None:
    descriptor = os.open(_log_file(state), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(descriptor, 0o666)
        os.write(descriptor, f"{name} {kind}\n".encode())
    finally:
        os.close(descriptor)


def _answer(state: Path, query: bytes) -> bytes | None:
    """The reply to one DNS message, or None for one not worth answering."""
    from dnslib import AAAA, QTYPE, RCODE, RR, SRV, TXT, A, DNSRecord

    try:
        request = DNSRecord.parse(query)
    except Exception:
        return None
    if request.header.qr or not request.questions:
        return None
    reply = request.reply()
    reply.header.ra = 0
    reply.header.ad = 0
    try:
        records = zone(state)
        if _fixed_file(state).exists():
            records = {**json.loads(_fixed_file(state).read_text()), **records}
    except (OSError, ValueError):
        reply.header.rcode = RCODE.SERVFAIL
        return bytes(reply.pack())
    for question in request.questions:
        name = str(question.qname).rstrip(".").lower()
        kind = QTYPE.get(question.qtype, str(question.qtype))
        _log_query(state, name, kind)
        if name not in records:
            reply.header.rcode = RCODE.NXDOMAIN
            continue
        entry = records[name]
        kinds = list(entry) if kind == "ANY" else [kind]
        for each in kinds:
            for value in entry.get(each, []):
                if each == "A":
                    data: Any = A(value)
                elif each == "AAAA":
                    data = AAAA(value)
                elif each == "SRV":
                    priority, weight, port, target = value
                    data = SRV(priority=priority, weight=weight, port=port, target=target)
                elif each == "TXT":
                    data = TXT(value)
                else:
                    continue
                reply.add_answer(RR(question.qname, getattr(QTYPE, each), rdata=data, ttl=TTL))
    return bytes(reply.pack())


class _DnsUdp(socketserver.BaseRequestHandler):
    server: _DnsUdpServer

    def handle(self) -> None:
        data, sock = self.request
        reply = _answer(self.server.state, data)
        if reply is not None:
            sock.sendto(reply, self.client_address)


class _DnsTcp(socketserver.StreamRequestHandler):
    server: _DnsTcpServer

    def handle(self) -> None:
        while len(head := self.rfile.read(2)) == 2:
            data = self.rfile.read(int.from_bytes(head, "big"))
            reply = _answer(self.server.state, data)
            if reply is None:
                return
            self.wfile.write(len(reply).to_bytes(2, "big") + reply)
            self.wfile.flush()


class _DnsUdpServer(socketserver.ThreadingUDPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: Path


class _DnsTcpServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    state: Path


def _dns_servers(state: Path, address: str, port: int) -> tuple[_DnsUdpServer, _DnsTcpServer]:
    """The UDP and TCP servers answering from `state`, bound to ADDRESS:PORT (PORT 0: a
    free port, the same for both)."""
    udp = _DnsUdpServer((address, port), _DnsUdp)
    try:
        tcp = _DnsTcpServer((address, udp.server_address[1]), _DnsTcp)
    except OSError:
        udp.server_close()
        raise
    udp.state = tcp.state = state
    return udp, tcp


def serve_dns(state: Path, address: str) -> None:
    udp, tcp = _dns_servers(state, address, 53)
    threading.Thread(target=udp.serve_forever, daemon=True).start()
    tcp.serve_forever()


# A free UDP port on loopback may be taken for TCP by another program: a few tries.
OWN_DNS_BIND_TRIES = 20


def _dns_servers_on_loopback(state: Path) -> tuple[_DnsUdpServer, _DnsTcpServer]:
    for _ in range(OWN_DNS_BIND_TRIES - 1):
        with contextlib.suppress(OSError):
            return _dns_servers(state, "127.0.0.1", 0)
    return _dns_servers(state, "127.0.0.1", 0)


@contextlib.contextmanager
def own_dns_server(state: Path, port: int = 0) -> Iterator[str]:
    """A DNS server of a test's own on loopback, answering as the test net's does (the
    same `_answer`) from STATE/dns/zone.json (INITIAL_ZONE, unless the folder holds a zone
    already) and logging into STATE/dns/queries.log: a zone and a query log that no other
    test (another xdist worker, another run on the shared test net) can change, clear or
    add to. On a free port, or on PORT (53 in a network namespace of the test's own, for
    resolv.conf, which names no port). Yields its `IP:PORT` for LNK_SANDBOX_DNS; stopped
    on leaving."""
    if not _zone_file(state).exists():
        write_initial_zone(state)
    udp, tcp = (_dns_servers(state, "127.0.0.1", port) if port
                else _dns_servers_on_loopback(state))
    threads = [threading.Thread(target=server.serve_forever, daemon=True)
               for server in (udp, tcp)]
    for thread in threads:
        thread.start()
    try:
        yield f"127.0.0.1:{udp.server_address[1]}"
    finally:
        for server in (udp, tcp):
            server.shutdown()
            server.server_close()


def serve_bulk(address: str) -> None:
    zeros = bytes(1024 * 1024)

    class Bulk(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline(32).strip()
            if not line.isdigit():
                return
            left = min(int(line), BULK_LIMIT)
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                while left > 0:
                    chunk = zeros if left >= len(zeros) else zeros[:left]
                    self.connection.sendall(chunk)
                    left -= len(chunk)

    class BulkServer(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 128

    BulkServer((address, BULK_PORT), Bulk).serve_forever()


def serve_raw(address: str) -> None:
    """Each request's answer is RAW_RESPONSES[name] for its path /raw/<name>, sent in two
    writes a moment apart (the head cut in the middle: a reader must wait for the rest);
    the connection closes after it where that says so, else takes the next request."""

    class Raw(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                while True:
                    line = self.rfile.readline(65536)
                    if not line:
                        return
                    while self.rfile.readline(65536) not in (b"\r\n", b"\n", b""):
                        pass
                    path = line.split(b" ")[1].decode("ascii", "replace")
                    answer, closes = RAW_RESPONSES.get(path.rsplit("/", 1)[-1],
                                                       RAW_RESPONSES["fine"])
                    self.connection.sendall(answer[:20])
                    time.sleep(0.01)
                    self.connection.sendall(answer[20:])
                    if closes:
                        return

    class RawServer(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    RawServer((address, RAW_PORT), Raw).serve_forever()


def serve_echo(address: str, port: int) -> None:
    """Each line sent comes back (a machine of the local network, for [lan] tests)."""

    class Echo(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            with contextlib.suppress(OSError):
                while line := self.rfile.readline(65536):
                    self.wfile.write(line)
                    self.wfile.flush()

    class EchoServer(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True
        address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

    EchoServer((address, port), Echo).serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "echo":
        serve_echo(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "dns":
        serve_dns(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1] == "bulk":
        serve_bulk(sys.argv[2])
    elif sys.argv[1] == "raw":
        serve_raw(sys.argv[2])
    else:
        raise SystemExit(__doc__)
