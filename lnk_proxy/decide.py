"""Whether a call may go: the name against `hosts`, then every address it resolves to.

Sans IO: the name check reads only the policy; the address check reads only the address
and what was found about this machine (lnk_proxy.machine). Order, default deny: the
wire's controls (kill switch, pause, calls a minute: lnk_proxy.controls) → the name,
before any lookup, so a name not listed costs no DNS query and leaks nothing to a
resolver → the lookup (not here) → every address checked → the connection goes to the
very address checked.
"""

from __future__ import annotations

import ipaddress

__all__ = ["METADATA_ADDRESSES", "HostRule", "address_refusal", "name_allowed", "parse_hosts"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# The cloud metadata services (instance credentials are one GET away): AWS (and its
# IPv6), GCP and Azure (the link-local one), AWS ECS, Alibaba, Oracle's legacy one,
# OpenStack (the link-local one again), DigitalOcean (same), Hetzner (same).
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(text) for text in (
    "169.254.169.254", "169.254.170.2", "169.254.169.123", "100.100.100.200",
    "192.0.0.192", "fd00:ec2::254", "fd00:ec2::23",
))
# Never this machine's nor anyone's: these ranges have no host a sandbox may reach.
_REFUSED_RANGES = tuple(ipaddress.ip_network(text) for text in (
    "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
    "255.255.255.255/32", "::/128", "::1/128", "fe80::/10", "ff00::/8",
))


class HostRule:
    """One entry of `hosts`: a name or `*.domain`, and a port (None: 80 and 443)."""

    __slots__ = ("name", "port", "wildcard")

    def __init__(self, name: str, port: int | None, wildcard: bool) -> None:
        self.name = name
        self.port = port
        self.wildcard = wildcard

    def matches(self, host: str, port: int) -> bool:
        if (port not in (80, 443)) if self.port is None else (port != self.port):
            return False
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name


def parse_hosts(entries: tuple[str, ...]) -> tuple[HostRule, ...]:
    """`name`, `name:port`, `*.domain`, `*.domain:port` → rules (names lower-cased,
    trailing dot dropped). The spec loader has already refused what is not one."""
    rules = []
    for entry in entries:
        text, port = entry, None
        if ":" in entry:
            text, _, port_text = entry.rpartition(":")
            port = int(port_text)
        wildcard = text.startswith("*.")
        name = (text[2:] if wildcard else text).lower().rstrip(".")
        rules.append(HostRule(name, port, wildcard))
    return tuple(rules)


def name_allowed(rules: tuple[HostRule, ...], host: str, port: int) -> bool:
    return any(rule.matches(host, port) for rule in rules)


class MachineFacts:
    """What address_refusal needs to know about this machine (lnk_proxy.machine)."""

    def is_local(self, address: Address) -> bool:  # pragma: no cover - an interface
        raise NotImplementedError

    def on_network(self, address: Address) -> bool:  # pragma: no cover - an interface
        raise NotImplementedError


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in ipaddress.ip_network("64:ff9b::/96"):  # NAT64
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return None


def address_refusal(address: Address, machine: MachineFacts) -> str | None:
    """Why `address` may not be reached, in one line, or None."""
    inner = _embedded_ipv4(address)
    if inner is not None:
        why = address_refusal(inner, machine)
        return f"{why} (as {address})" if why else None
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata service"
    if address.is_loopback or address.is_unspecified:
        return f"{address} is this machine (loopback)"
    if address.is_link_local:
        return f"{address} is link-local"
    if any(address in network for network in _REFUSED_RANGES
           if network.version == address.version):
        return f"{address} is in a range no host of a sandbox's is in"
    if machine.is_local(address):
        return f"{address} is this machine"
    if machine.on_network(address):
        return f"{address} is on one of this machine's own networks"
    return None
