"""Asking a given DNS server instead of the system's resolver (dnslib for the wire format).

`LNK_SANDBOX_DNS=IP:PORT` in the proxy's environment makes it ask that server for A
and AAAA records, over UDP, and nothing else: for an administrator whose sandboxes must
use one resolver, and for the tests, which count the queries a refused name causes
(none). Any answer that does not parse is one error type (OSError), never a crash.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Awaitable, Callable

__all__ = ["QUERY_SECONDS", "dns_resolver"]

# A resolver that has not answered in this long will not.
QUERY_SECONDS = 5.0


def _ask(server: tuple[str, int], host: str, kind: str) -> list[str]:
    from dnslib import DNSError, DNSRecord

    query = DNSRecord.question(host, kind)
    family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(QUERY_SECONDS)
        sock.sendto(query.pack(), server)
        data, _ = sock.recvfrom(65535)
    try:
        answer = DNSRecord.parse(data)
    except (DNSError, ValueError, IndexError) as error:
        raise OSError(f"an answer that does not parse: {error}") from None
    if answer.header.id != query.header.id:
        raise OSError("an answer to another question")
    return [str(record.rdata) for record in answer.rr
            if record.rtype == (1 if kind == "A" else 28)]


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def dns_resolver(server: tuple[str, int]) -> Callable[[str, int], Awaitable[list[Address]]]:
    async def resolve(host: str, _port: int) -> list[Address]:
        loop = asyncio.get_running_loop()
        found: list[Address] = []
        for kind in ("A", "AAAA"):
            for text in await loop.run_in_executor(None, _ask, server, host, kind):
                address = ipaddress.ip_address(text)
                if address not in found:
                    found.append(address)
        return found

    return resolve


def from_environment() -> tuple[str, int] | None:
    value = os.environ.get("LNK_SANDBOX_DNS", "")
    if not value:
        return None
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)
