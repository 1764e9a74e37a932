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
import time
from collections.abc import Awaitable, Callable

__all__ = ["HOSTS_FILE", "MAX_HOSTS_FILE_BYTES", "QUERY_SECONDS", "absolute", "dns_resolver",
           "hosts_file_addresses", "system_resolver"]

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


# /etc/hosts as last read: what it was then (stat: device, inode, size, change and
# modification times) and its addresses by name. A tunnel's lookup stats the file and
# reads it again only when it changed: a lookup read and parsed the whole file each time
# (some 13 µs for a three-line file, tens of ms for a blocklist of many thousand lines).
# A file changed less than HOSTS_SETTLE_NS before it was read is not kept (read again at
# every lookup until it is older): a change within the clock's tick, at the same size,
# leaves the times and the size as they were, so only a file that had settled when it
# was read is known to be the file the same stat describes later (git's "racy" rule).
HOSTS_SETTLE_NS = 2_000_000_000
# Names kept of one version of the file: a lookup of a name not among them parses the
# text again (what a wildcard in hosts may ask for is unbounded).
MAX_HOSTS_NAMES = 1024


class _HostsFile:
    __slots__ = ("found", "identity", "text")

    def __init__(self) -> None:
        self.identity: tuple[int, ...] = ()
        self.text = ""
        self.found: dict[str, list[Address]] = {}

    def addresses(self, host: str) -> list[Address]:
        """The addresses HOSTS_FILE gives `host` now ([] when it cannot be read)."""
        try:
            status = os.stat(HOSTS_FILE)
        except OSError:
            return []
        identity = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
                    status.st_ctime_ns)
        if identity != self.identity:
            try:
                with open(HOSTS_FILE, encoding="utf-8", errors="replace") as handle:
                    text = handle.read(MAX_HOSTS_FILE_BYTES)
            except OSError:
                return []
            settled = time.time_ns() - max(status.st_mtime_ns, status.st_ctime_ns)
            self.identity = identity if settled > HOSTS_SETTLE_NS else ()
            self.text, self.found = text, {}
        found = self.found.get(host)
        if found is None:
            found = hosts_file_addresses(self.text, host)
            if len(self.found) >= MAX_HOSTS_NAMES:
                self.found.clear()
            self.found[host] = found
        return list(found)


_HOSTS = _HostsFile()


async def system_resolver(host: str, port: int) -> list[Address]:
    """/etc/hosts, then the system's resolver for `host` as an absolute name."""
    found = _HOSTS.addresses(host)
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
