"""What the sandbox's resolver does with one query: answer it here, ask outside, or refuse.

Default deny. A name the sandbox may reach gets an address on the sandbox's own loopback
(the proxy listens there and connects on the sandbox's behalf), never the name's real
address; a name it may not reach does not exist. Only SRV and TXT, which carry no address
and which some clients need (a MongoDB `mongodb+srv://` URL, for one), are looked up in the
real DNS, and only for allowed names. Sans-IO: the policy and the address pool are the
caller's callables, and the result says what to do, not how.
"""

from __future__ import annotations

from collections.abc import Callable

from dnslib import A

from lnk_dns.message import Query, Record

__all__ = ["OWN_TTL_SECONDS", "Local", "Outside", "Refuse", "decide", "service_host"]

# How long a client may keep an address of the sandbox's own: short, so that a name dropped
# from the policy (or an address given back to the pool) stops being used soon after.
OWN_TTL_SECONDS = 60

# The one class of names on the internet; CH, HS and the rest have nothing to give a sandbox.
_CLASS_IN = "IN"
# The query types whose answers come from the real DNS (they hold names and text, no address).
_OUTSIDE_TYPES = frozenset({"SRV", "TXT"})
# mDNS's domain: its names live on a local network, not in the DNS.
_LOCAL_DOMAIN = "local"


class Local:
    """Answered here, without asking anyone: rcode, records, and a note for the log."""

    __slots__ = ("note", "rcode", "records")

    def __init__(self, rcode: str, records: list[Record], note: str) -> None:
        self.rcode = rcode
        self.records = records
        self.note = note

    def __repr__(self) -> str:
        return f"Local({self.rcode!r}, {self.records!r}, note={self.note!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Local):
            return NotImplemented
        return (self.rcode, self.records, self.note) == (other.rcode, other.records, other.note)


class Outside:
    """Ask the real DNS outside for (name, qtype); the caller counts it as one call."""

    __slots__ = ("name", "qtype")

    def __init__(self, name: str, qtype: str) -> None:
        self.name = name
        self.qtype = qtype

    def __repr__(self) -> str:
        return f"Outside({self.name!r}, {self.qtype!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Outside):
            return NotImplemented
        return (self.name, self.qtype) == (other.name, other.qtype)


class Refuse:
    """Not answered: the rcode to send, and the reason for the log."""

    __slots__ = ("rcode", "reason")

    def __init__(self, rcode: str, reason: str) -> None:
        self.rcode = rcode
        self.reason = reason

    def __repr__(self) -> str:
        return f"Refuse({self.rcode!r}, {self.reason!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Refuse):
            return NotImplemented
        return (self.rcode, self.reason) == (other.rcode, other.reason)


def decide(
    query: Query,
    *,
    allowed: Callable[[str], bool],
    give: Callable[[str], str | None],
) -> Local | Outside | Refuse:
    """Decide what to do with `query`.

    `allowed(name)` says whether the sandbox may reach `name` (on any port); `give(name)`
    returns the address on the sandbox's own loopback that `name` gets, or None when no more
    addresses can be given.
    """
    name = query.name
    qtype = query.qtype
    if query.qclass != _CLASS_IN:
        return Refuse("REFUSED", "only class IN is answered")
    host = service_host(name)
    if qtype in _OUTSIDE_TYPES and (_is_local_network(name) or _is_local_network(host)):
        return Refuse(
            "REFUSED",
            "SRV and TXT for a local network's names (.local, one label) are refused: this"
            " machine's resolver would answer them from a network the sandbox never reaches",
        )
    if not host or not allowed(host):
        # NXDOMAIN, not REFUSED: a refused query makes glibc and most resolvers retry and try
        # the next server, while NXDOMAIN ends the lookup at once.
        return Refuse("NXDOMAIN", f"{name} is not a name this sandbox may reach")
    if qtype == "A":
        if host != name:
            return Local("NOERROR", [], note="no address for a service name")
        addr = give(name)
        if addr is None:
            return Refuse(
                "SERVFAIL", "no more addresses of the sandbox's own to give (limit reached)"
            )
        return Local(
            "NOERROR", [Record(name, "A", OWN_TTL_SECONDS, A(addr))], note=f"answer={addr}"
        )
    if qtype == "AAAA":
        # NODATA rather than NXDOMAIN, so that a client that asked both uses the A answer.
        return Local("NOERROR", [], "no IPv6 address: the sandbox's own addresses are IPv4")
    if qtype in _OUTSIDE_TYPES:
        return Outside(name, qtype)
    if qtype == "ANY":
        return Refuse("NOTIMP", "ANY is not answered")
    return Local("NOERROR", [], f"no {qtype} records here")


def service_host(name: str) -> str:
    """`name` without its leading "_" labels (`_mongodb._tcp.db.example.net` -> `db.example.net`).

    The name a service record is about, which is the one the policy speaks of; "" when the
    name is nothing but such labels.
    """
    labels = name.split(".") if name else []
    while labels and labels[0].startswith("_"):
        labels.pop(0)
    return ".".join(labels)


def _is_local_network(name: str) -> bool:
    """A name of a local network: under .local (mDNS), or a single label (a search domain's)."""
    return name == _LOCAL_DOMAIN or name.endswith("." + _LOCAL_DOMAIN) or "." not in name
