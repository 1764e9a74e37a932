"""This machine, as the proxy must refuse it: its addresses and its networks.

An address is this machine's when a socket can be bound to it, whatever its range: a
server's public address on its interface is the machine too, and no list of private
ranges would say so. Its networks are the on-link routes of its interfaces (IPv4 from
/proc/net/route, IPv6 from /proc/net/ipv6_route): a route with no gateway is a network
the machine sits on, where its neighbours (a router's admin page, a printer) live.

A proxy runs as long as its sandbox, and the machine changes meanwhile (a new interface,
a DHCP lease, a VPN): the facts are found again whenever they may have changed. An
rtnetlink socket subscribed to address and route changes (RTMGRP_IPV4_IFADDR and
_IPV6_IFADDR, _IPV4_ROUTE and _IPV6_ROUTE; any process may listen) is opened before the
facts are first read, so no change between the two is missed; every decision first reads
it without waiting (one recv(2) that finds nothing, in the common case), and any message,
or one lost (ENOBUFS), means the networks are read again and every remembered bind answer
forgotten. Where no such socket can be had, the facts are read again every
REREAD_SECONDS instead.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import time

from lnk_proxy.decide import Address, MachineFacts

__all__ = ["REREAD_SECONDS", "Machine", "watch_changes"]

# rtnetlink's multicast groups (linux/rtnetlink.h): an address or a route added or
# removed, IPv4 and IPv6.
_RTMGRP_IPV4_IFADDR = 0x10
_RTMGRP_IPV4_ROUTE = 0x40
_RTMGRP_IPV6_IFADDR = 0x100
_RTMGRP_IPV6_ROUTE = 0x400
_GROUPS = _RTMGRP_IPV4_IFADDR | _RTMGRP_IPV4_ROUTE | _RTMGRP_IPV6_IFADDR | _RTMGRP_IPV6_ROUTE
# Without a netlink socket, the facts are this old at most (the issue asks every few
# seconds at least; reading both route tables costs some 100 µs here).
REREAD_SECONDS = 2.0
# Messages read at most per decision: a flood of changes (an address flapping) costs a
# decision this many recv(2) calls, and the rest waits for the next one (the facts are
# read again all the same).
_MAX_DRAINED = 64
_NETLINK_BYTES = 65536

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def watch_changes() -> socket.socket | None:
    """A non-blocking rtnetlink socket told of every address and route change in this
    process's network namespace, or None where one cannot be had."""
    try:
        changes = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_NONBLOCK
                                | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    except OSError:
        return None
    try:
        changes.bind((0, _GROUPS))
    except OSError:
        changes.close()
        return None
    return changes


class Machine(MachineFacts):
    __slots__ = ("changes", "known", "networks", "read_at")

    def __init__(self, networks: list[Network], *, changes: socket.socket | None = None
                 ) -> None:
        self.networks = networks
        self.known: dict[Address, bool] = {}
        self.changes = changes
        self.read_at = time.monotonic()

    @classmethod
    def gather(cls) -> Machine:
        changes = watch_changes()  # first: a change while the tables are read is seen
        return cls(_networks(), changes=changes)

    def refresh(self) -> bool:
        """Read the facts again if they may have changed since; whether they were."""
        if self.changes is None:
            if time.monotonic() - self.read_at < REREAD_SECONDS:
                return False
        elif not self._changed():
            return False
        self.networks = _networks()
        self.known.clear()
        self.read_at = time.monotonic()
        return True

    def _changed(self) -> bool:
        assert self.changes is not None
        changed = False
        for _ in range(_MAX_DRAINED):
            try:
                if not self.changes.recv(_NETLINK_BYTES):
                    break
            except BlockingIOError:
                break
            except OSError:  # ENOBUFS: changes came faster than read, and were lost
                return True
            changed = True
        return changed

    def is_local(self, address: Address) -> bool:
        self.refresh()
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
        self.refresh()
        return any(address in network for network in self.networks
                   if network.version == address.version)


def _networks() -> list[Network]:
    return _ipv4_networks() + _ipv6_networks()


def _ipv4_networks() -> list[Network]:
    found: list[Network] = []
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


def _ipv6_networks() -> list[Network]:
    found: list[Network] = []
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
