"""Addresses that are never a host a sandbox may reach, wherever it runs: one list, read
by the spec loader at load (lnk_wrap.spec: `[lan]` hosts written as addresses) and by
the proxy at every call (lnk_proxy.decide.address_refusal, which adds what it learned
about this machine: its own addresses and networks).

Sans IO: each rule reads the address alone. Order: an address that carries an IPv4
address inside it (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4
`2002:aabb:ccdd::`) is judged by the IPv4 address, since that is where a packet to it
may end up → a cloud's metadata service → this machine's loopback and the unspecified
address → link-local → the ranges no host of a sandbox's is in. The first that holds
says why, in one line.

Imported only when a spec names an address (`ipaddress` costs some 2 ms of a start).
"""

from __future__ import annotations

import ipaddress

__all__ = ["METADATA_ADDRESSES", "REFUSED_RANGES", "Address", "embedded_ipv4", "never_a_host"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# The cloud metadata services (instance credentials are one GET away): AWS (and its
# IPv6), GCP and Azure (the link-local one), AWS ECS, Alibaba, Oracle's legacy one,
# OpenStack (the link-local one again), DigitalOcean (same), Hetzner (same).
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(text) for text in (
    "169.254.169.254", "169.254.170.2", "169.254.169.123", "100.100.100.200",
    "192.0.0.192", "fd00:ec2::254", "fd00:ec2::23",
))
# Never this machine's nor anyone's: these ranges have no host a sandbox may reach
# ("this network" 0/8, loopback, link-local, multicast, the reserved 240/4 and the
# broadcast address; IPv6's unspecified, loopback, link-local and multicast).
REFUSED_RANGES = tuple(ipaddress.ip_network(text) for text in (
    "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
    "255.255.255.255/32", "::/128", "::1/128", "fe80::/10", "ff00::/8",
))
# RFC 6052's well-known prefix: a NAT64 gateway sends `64:ff9b::a.b.c.d` to a.b.c.d.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a packet to `address` may reach instead (IPv4-mapped, NAT64,
    6to4), or None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return None


def never_a_host(address: Address) -> str | None:
    """Why `address` is no host a sandbox may reach on any machine, in one line, or None."""
    inner = embedded_ipv4(address)
    if inner is not None:
        why = never_a_host(inner)
        return f"{why} (as {address})" if why else None
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata service"
    if address.is_loopback or address.is_unspecified:
        return f"{address} is this machine (loopback)"
    if address.is_link_local:
        return f"{address} is link-local"
    if any(address in network for network in REFUSED_RANGES
           if network.version == address.version):
        return f"{address} is in a range no host of a sandbox's is in"
    return None
