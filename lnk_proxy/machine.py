"""This machine, as the proxy must refuse it: its addresses and its networks.

An address is this machine's when a socket can be bound to it, whatever its range: a
server's public address on its interface is the machine too, and no list of private
ranges would say so. Its networks are the on-link routes of its interfaces (IPv4 from
/proc/net/route, IPv6 from /proc/net/ipv6_route): a route with no gateway is a network
the machine sits on, where its neighbours (a router's admin page, a printer) live.
Found once at the proxy's start; bind answers are remembered per address.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from lnk_proxy.decide import Address, MachineFacts

__all__ = ["Machine"]


class Machine(MachineFacts):
    __slots__ = ("known", "networks")

    def __init__(self, networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> None:
        self.networks = networks
        self.known: dict[Address, bool] = {}

    @classmethod
    def gather(cls) -> Machine:
        return cls(_ipv4_networks() + _ipv6_networks())

    def is_local(self, address: Address) -> bool:
        if address not in self.known:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((str(address), 0))
                    self.known[address] = True
                except OSError as error:
                    self.known[address] = error.errno == errno.EADDRINUSE
        return self.known[address]

    def on_network(self, address: Address) -> bool:
        return any(address in network for network in self.networks
                   if network.version == address.version)


def _ipv4_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    try:
        with open("/proc/net/route") as handle:
            rows = handle.read().splitlines()[1:]
    except OSError:
        return found
    for row in rows:
        fields = row.split()
        if len(fields) < 8 or fields[2] != "00000000":
            continue  # a route through a gateway: not a network of the machine's own
        destination = ipaddress.IPv4Address(bytes.fromhex(fields[1])[::-1])
        mask = ipaddress.IPv4Address(bytes.fromhex(fields[7])[::-1])
        if int(mask) == 0:
            continue
        found.append(ipaddress.IPv4Network(f"{destination}/{mask}", strict=False))
    return found


def _ipv6_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    try:
        with open("/proc/net/ipv6_route") as handle:
            rows = handle.read().splitlines()
    except OSError:
        return found
    for row in rows:
        fields = row.split()
        if len(fields) < 10 or int(fields[1], 16) == 0 or fields[9] == "lo":
            continue
        if fields[4] != "0" * 32:
            continue
        network = ipaddress.IPv6Network((int(fields[0], 16), int(fields[1], 16)), strict=False)
        if not network.is_multicast:
            found.append(network)
    return found
