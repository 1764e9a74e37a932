"""Whether a call may go: the name against `hosts`, then every address it resolves to.

Sans IO: the name check reads only the policy; the address check reads only the address
and what was found about this machine (lnk_proxy.machine). Order, default deny: the
wire's controls (kill switch, pause, calls a minute: lnk_common.controls) → the name,
before any lookup, so a name not listed costs no DNS query and leaks nothing to a
resolver → the lookup (not here) → every address checked → the connection goes to the
very address checked. What is never a host on any machine (metadata services, loopback,
the reserved ranges) is lnk_common.addresses', which the spec loader reads too; here it
is joined by what is this machine's own.
"""

from __future__ import annotations

import contextlib
import ipaddress

from lnk_common.addresses import METADATA_ADDRESSES, Address, embedded_ipv4, never_a_host
from lnk_common.endpoints import split_host_port

__all__ = ["METADATA_ADDRESSES", "Address", "HostRule", "address_refusal", "matching_rule",
           "name_allowed", "parse_hosts"]


class HostRule:
    """One entry of `hosts`, [tcp] endpoints or [lan] hosts: a name, `*.domain` or an
    address, and a port (None: 80 and 443). `lan`: a machine of the local network, which
    may be on this machine's own networks (never this machine)."""

    __slots__ = ("lan", "name", "port", "wildcard")

    def __init__(self, name: str, port: int | None, wildcard: bool, *,
                 lan: bool = False) -> None:
        self.name = name
        self.port = port
        self.wildcard = wildcard
        self.lan = lan

    def matches(self, host: str, port: int) -> bool:
        if (port not in (80, 443)) if self.port is None else (port != self.port):
            return False
        return self.matches_name(host)

    def matches_name(self, host: str) -> bool:
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name


def parse_hosts(entries: tuple[str, ...], *, lan: bool = False) -> tuple[HostRule, ...]:
    """`name`, `name:port`, `*.domain`, `*.domain:port`, `[v6]:port` → rules (names
    lower-cased, trailing dot dropped, addresses in their short form). The spec loader
    has already refused what is not one."""
    rules = []
    for entry in entries:
        text, port_text = split_host_port(entry)
        port = int(port_text) if port_text else None
        wildcard = text.startswith("*.")
        name = (text[2:] if wildcard else text).lower().rstrip(".")
        with contextlib.suppress(ValueError):
            name = str(ipaddress.ip_address(name))
        rules.append(HostRule(name, port, wildcard, lan=lan))
    return tuple(rules)


def name_allowed(rules: tuple[HostRule, ...], host: str, port: int) -> bool:
    return any(rule.matches(host, port) for rule in rules)


def matching_rule(rules: tuple[HostRule, ...], host: str, port: int) -> HostRule | None:
    """The rule that lets `host:port` by, a [lan] one first (it may reach the local
    network), or None."""
    found = [rule for rule in rules if rule.matches(host, port)]
    return next((rule for rule in found if rule.lan), found[0] if found else None)


class MachineFacts:
    """What address_refusal needs to know about this machine (lnk_proxy.machine)."""

    def is_local(self, address: Address) -> bool:  # pragma: no cover - an interface
        raise NotImplementedError

    def on_network(self, address: Address) -> bool:  # pragma: no cover - an interface
        raise NotImplementedError


def address_refusal(address: Address, machine: MachineFacts, *,
                    lan: bool = False) -> str | None:
    """Why `address` may not be reached, in one line, or None. `lan`: for a [lan] host,
    this machine's own networks are allowed (this machine itself never is)."""
    why = never_a_host(address)
    if why:
        return why
    inner = embedded_ipv4(address)
    if inner is not None:  # this machine by another name: judged as the address inside
        why = address_refusal(inner, machine, lan=lan)
        return f"{why} (as {address})" if why else None
    if machine.is_local(address):
        return f"{address} is this machine"
    if machine.on_network(address) and not lan:
        return f"{address} is on one of this machine's own networks"
    return None
