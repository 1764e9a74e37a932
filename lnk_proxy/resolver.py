"""The proxy's lookups of listed names: always of the name itself, never of another.

A listed name is looked up as an absolute name. The system's resolver (glibc's
getaddrinfo) otherwise tries a name that does not exist again under each domain of
resolv.conf's `search` line (or LOCALDOMAIN), so `missing.example` listed could reach
`missing.example.corp.internal`, a host of this machine's network the policy never named.
With a trailing dot a name is absolute to glibc and no search domain is added; but glibc's
/etc/hosts lookup then matches no entry (it compares names as written), so /etc/hosts is
read here first, as nsswitch's usual `files dns` does, by the name without its dot.

`LNK_SANDBOX_DNS=IP:PORT` in the proxy's environment makes it ask that server for A
and AAAA records, over UDP, and nothing else (no /etc/hosts, no search list: a name on
the wire is absolute): for an administrator whose sandboxes must use one resolver, and
for the tests, which count the queries a refused name causes (none). Any answer that does
not parse, or answers another question, is one error type (OSError), never a crash.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from collections.abc import Awaitable, Callable

__all__ = ["HOSTS_FILE", "QUERY_SECONDS", "absolute", "dns_resolver", "hosts_file_addresses",
           "system_resolver"]

# A resolver that has not answered in this long will not.
QUERY_SECONDS = 5.0
# This machine's names, read before the DNS (nsswitch's `files`).
HOSTS_FILE = "/etc/hosts"
# /etc/hosts is read at most this much (a hosts file of blocked ad domains may be a few MiB).
MAX_HOSTS_FILE_BYTES = 16 << 20

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def absolute(name: str) -> str:
    """`name` as an absolute name (one trailing dot), so no search domain is added to it;
    an IPv4 address in any spelling getaddrinfo takes as one (`127.1`, `0x7f000001`)
    stays as it is (it is never looked up, and a dot would make it a name), so that it is
    checked, and refused, as the address it is."""
    try:
        socket.inet_aton(name)
    except OSError:
        return name.rstrip(".") + "."
    return name


def hosts_file_addresses(text: str, name: str) -> list[Address]:
    """The addresses /etc/hosts (`text`) gives `name` (letter case and a trailing dot
    aside), in the file's order: lines `ADDRESS NAME [ALIAS]...`, `#` to the line's end."""
    wanted = name.rstrip(".").lower()
    found: list[Address] = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) < 2 or wanted not in (field.rstrip(".").lower() for field in fields[1:]):
            continue
        try:
            address = ipaddress.ip_address(fields[0].split("%", 1)[0])
        except ValueError:
            continue  # not an address: glibc skips the line too
        if address not in found:
            found.append(address)
    return found


async def system_resolver(host: str, port: int) -> list[Address]:
    """/etc/hosts, then the system's resolver for `host` as an absolute name."""
    try:
        with open(HOSTS_FILE, encoding="utf-8", errors="replace") as handle:
            found = hosts_file_addresses(handle.read(MAX_HOSTS_FILE_BYTES), host)
    except OSError:
        found = []
    if found:
        return found
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(absolute(host), port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        if error.errno in (socket.EAI_NONAME, socket.EAI_NODATA):
            return []  # the name does not exist, or has no address
        raise
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(sockaddr[0])
        if address not in found:
            found.append(address)
    return found


def _ask(server: tuple[str, int], host: str, kind: str) -> list[str]:
    """`host`'s records of `kind` (A or AAAA) from `server`; the name on the wire is
    absolute, as every name in a DNS message is (no search list is ever applied)."""
    from lnk_dns.message import DnsFormatError, outside_query, parse_outside_reply

    try:
        query_id, packet = outside_query(host, kind)
    except ValueError as error:
        raise OSError(f"not a name to look up: {error}") from None
    family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.settimeout(QUERY_SECONDS)
        sock.connect(server)
        sock.send(packet)
        data = sock.recv(65535)
    try:
        _rcode, records, _truncated = parse_outside_reply(data, query_id, host, kind)
    except DnsFormatError as error:
        raise OSError(f"an answer that is not to this question: {error}") from None
    return [str(record.rdata) for record in records if record.rtype == kind]


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
