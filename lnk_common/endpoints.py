"""Where a sandbox's ways out listen inside it: one plan, computed alike by the launcher
(whose DNS helper binds the sockets) and by the proxy and the relay (which serve them).

Sans IO and cheap to import (the launcher reads it at every start that has a wire).

A sandbox has a network of its own with loopback only. What it may reach is given an
address there, where a socket made by the DNS helper waits and is served outside:

- the proxy's port, 127.0.0.1:3128, with [network] mode = "proxy";
- DNS, 127.0.0.1:53 (UDP and TCP), when it names endpoints: [tcp] endpoints, or a
  name of [lan] hosts;
- an endpoint's name: an address of the sandbox's own in 127.53.0.0/16, one per name,
  in the order the policy lists them, a socket on each of its ports. A `*.domain`
  endpoint's names are not known until looked up: its ports are bound on 0.0.0.0 (only
  loopback exists, so every loopback address), and a connection to an address not
  given out is refused by the proxy;
- a [lan] address: that very address, added to the sandbox's loopback, so a program
  that was told `192.168.1.20:8123` connects there as it would at home;
- a [localhost] port: 127.0.0.1:N and [::1]:N, served by the relay.
"""

from __future__ import annotations

__all__ = [
    "DNS_PORT",
    "MAX_GIVEN_NAMES",
    "MAX_KEPT_NAMES",
    "PROXY_ADDRESS",
    "PROXY_PORT",
    "AddressBook",
    "EndpointError",
    "Entry",
    "Listener",
    "fixed_names",
    "has_dns",
    "is_address",
    "lan_addresses",
    "listeners",
    "own_address",
    "parse_entry",
    "split_host_port",
]

# Where a sandbox with the proxy finds it (the proxy variables name it).
PROXY_ADDRESS = "127.0.0.1"
PROXY_PORT = 3128
DNS_PORT = 53
# An endpoint's name gets an address of 127.53.0.0/16 ("53" for DNS): 127.53.0.1 to
# 127.53.255.254. A program that looks up endless names under a `*.` endpoint gets
# SERVFAIL past this many, rather than growing the proxy's table without end.
MAX_GIVEN_NAMES = 65534
# Names given addresses in one sandbox, at most: each is kept for the sandbox's life (a
# connection to its address must still find it), some 360 bytes of the proxy's memory a
# name. 8,192 (~3 MiB) is far more hosts of one domain than a program reaches; a flood of
# new names under a `*.` endpoint gets SERVFAIL there, rather than making the proxy hold
# ~24 MiB for the whole address range (measured by bench/dnsmemory).
MAX_KEPT_NAMES = 8192
_OWN_PREFIX = "127.53."


class EndpointError(Exception):
    """An endpoint, a [lan] host or a port that cannot be given its place inside."""


def own_address(index: int) -> str:
    """The `index`-th address given to a name (0-based)."""
    number = index + 1
    if not 0 < number <= MAX_GIVEN_NAMES:
        raise EndpointError(f"more than {MAX_GIVEN_NAMES} names given addresses")
    return f"{_OWN_PREFIX}{number >> 8}.{number & 0xFF}"


def own_index(address: str) -> int | None:
    """The index `own_address` gave `address`, or None for any other address."""
    if not address.startswith(_OWN_PREFIX):
        return None
    high, _, low = address[len(_OWN_PREFIX):].partition(".")
    if not (high.isdigit() and low.isdigit() and len(high) <= 3 and len(low) <= 3):
        return None
    number = int(high) * 256 + int(low)
    if int(high) > 255 or int(low) > 255 or not 0 < number <= MAX_GIVEN_NAMES:
        return None
    return number - 1


class Entry:
    """One entry of [tcp] endpoints or [lan] hosts, as the policy carries it:
    `name:port`, `*.domain:port`, `address:port` (`[v6]:port`), or any of those without
    a port (then 80 and 443; endpoints always name theirs)."""

    __slots__ = ("lan", "literal", "name", "ports", "wildcard")

    def __init__(self, name: str, ports: tuple[int, ...], *, wildcard: bool, literal: bool,
                 lan: bool) -> None:
        self.name = name
        self.ports = ports
        self.wildcard = wildcard
        self.literal = literal
        self.lan = lan

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.ports!r}, lan={self.lan})"


def is_address(text: str) -> bool:
    """Whether `text` is an IPv4 or IPv6 address (not a name)."""
    import _socket

    for family in (_socket.AF_INET, _socket.AF_INET6):
        try:
            _socket.inet_pton(family, text)
        except OSError:
            continue
        return True
    return False


def split_host_port(text: str) -> tuple[str, str]:
    """`host:port`, `[v6]:port`, `host` or `[v6]` → (host, the port's text or ""), as
    the spec loader, the plan and the proxy's rules all read an entry."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise EndpointError(f"{text!r}: an IPv6 address in brackets, then :port")
        return host, rest[1:]
    if text.count(":") > 1:
        raise EndpointError(f"{text!r}: write an IPv6 address in brackets, [addr]:port")
    host, _, port_text = text.partition(":")
    return host, port_text


def parse_entry(text: str, *, lan: bool) -> Entry:
    """An entry as the spec loader normalised it (lower case, no trailing dot)."""
    host, port_text = split_host_port(text)
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise EndpointError(f"{text!r}: the port must be 1 to 65535")
        ports: tuple[int, ...] = (int(port_text),)
    elif lan:
        ports = (80, 443)
    else:
        raise EndpointError(f"{text!r}: an endpoint names its port (name:port)")
    wildcard = host.startswith("*.")
    literal = is_address(host)
    if not host or (wildcard and lan):
        raise EndpointError(f"{text!r}: not a host" if not host else
                            f"{text!r}: a [lan] host is a machine, not `*.domain`")
    return Entry(host[2:] if wildcard else host, ports, wildcard=wildcard, literal=literal,
                 lan=lan)


def entries(endpoints: tuple[str, ...], lan: tuple[str, ...]) -> list[Entry]:
    return ([parse_entry(text, lan=False) for text in endpoints]
            + [parse_entry(text, lan=True) for text in lan])


def fixed_names(all_entries: list[Entry]) -> list[str]:
    """Names given addresses before the program starts, in order (index = address)."""
    return list(dict.fromkeys(entry.name for entry in all_entries
                              if not entry.wildcard and not entry.literal))


def has_dns(all_entries: list[Entry]) -> bool:
    """DNS comes with names to look up: any endpoint, or a [lan] host by name."""
    return any(not entry.lan or not entry.literal for entry in all_entries)


def lan_addresses(all_entries: list[Entry]) -> list[str]:
    """[lan] addresses added to the sandbox's loopback."""
    return list(dict.fromkeys(entry.name for entry in all_entries if entry.literal))


class Listener:
    """A socket the DNS helper makes inside: for whom (proxy, dns, endpoint, relay), and
    where. `udp` only for DNS."""

    __slots__ = ("address", "port", "role", "udp")

    def __init__(self, role: str, address: str, port: int, *, udp: bool = False) -> None:
        self.role = role
        self.address = address
        self.port = port
        self.udp = udp

    def __repr__(self) -> str:
        return f"Listener({self.role}, {self.address}, {self.port}{', udp' if self.udp else ''})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Listener) and (
            (self.role, self.address, self.port, self.udp)
            == (other.role, other.address, other.port, other.udp))

    def __hash__(self) -> int:
        return hash((self.role, self.address, self.port, self.udp))


# [verbs] open: sockets made inside the sandbox's network, neither bound nor listening,
# one used each time a login's callback is passed in (the proxy connects it to the port
# the program listens on; a socket keeps the network it was made in, and the proxy, in
# this machine's, can make none there itself). A login a callback: eight logins in one
# run is more than any CLI's sign-in makes; the ninth is refused saying so. For each,
# 127.0.0.1 and ::1 (a program that listens on `localhost` may have either).
CALLBACK_SOCKETS = 8


def listeners(*, proxy: bool, endpoints: tuple[str, ...], lan: tuple[str, ...],
              localhost_ports: tuple[int, ...], callbacks: bool = False) -> list[Listener]:
    """Every socket to make inside, or EndpointError naming what collides. `callbacks`:
    the login callbacks' sockets (role "callback", port 0: not bound, not listening)."""
    all_entries = entries(endpoints, lan)
    dns = has_dns(all_entries)
    plan: list[Listener] = []
    taken: dict[int, str] = {}  # a port on 127.0.0.1, and who has it
    if proxy:
        plan.append(Listener("proxy", PROXY_ADDRESS, PROXY_PORT))
        taken[PROXY_PORT] = "the proxy's own port"
    if dns:
        plan += [Listener("dns", "127.0.0.1", DNS_PORT, udp=True),
                 Listener("dns", "127.0.0.1", DNS_PORT)]
        taken[DNS_PORT] = "the sandbox's DNS"
    for port in localhost_ports:
        if port in taken:
            raise EndpointError(f"[localhost] port {port} is {taken[port]} inside the sandbox")
        taken[port] = "a [localhost] port"
        plan += [Listener("relay", "127.0.0.1", port), Listener("relay", "::1", port)]
    wild_ports: list[int] = []
    for entry in all_entries:
        if entry.wildcard:
            for port in entry.ports:
                if port in taken:
                    raise EndpointError(
                        f"*.{entry.name}:{port}: port {port} is {taken[port]}, and a `*.` "
                        "endpoint's port is taken on every loopback address; use another "
                        "port or name the hosts")
                if port not in wild_ports:
                    wild_ports.append(port)
    # Every address of the sandbox's own loopback: a `*.` name's is given at lookup time.
    plan += [Listener("endpoint", "0.0.0.0", port)  # noqa: S104
             for port in wild_ports]
    names = fixed_names(all_entries)
    for entry in all_entries:
        if entry.wildcard:
            continue
        address = entry.name if entry.literal else own_address(names.index(entry.name))
        for port in entry.ports:
            if port in wild_ports and ":" not in address:
                continue  # served by the `*.` socket of that port
            listener = Listener("endpoint", address, port)
            if listener not in plan:
                plan.append(listener)
    if callbacks:
        plan += [Listener("callback", address, 0)
                 for _ in range(CALLBACK_SOCKETS) for address in ("127.0.0.1", "::1")]
    return plan


class AddressBook:
    """Which name has which address of the sandbox's own: the fixed names in the
    policy's order (as `listeners` bound them), then each name under a `*.` endpoint as
    it is first looked up, kept for the sandbox's life."""

    __slots__ = ("_addresses", "_names")

    def __init__(self, fixed: list[str]) -> None:
        self._names: list[str] = []
        self._addresses: dict[str, str] = {}
        for name in fixed:
            self.give(name)

    def give(self, name: str) -> str | None:
        """`name`'s address, given now if it has none; None when none is left."""
        found = self._addresses.get(name)
        if found is None:
            if len(self._names) >= MAX_KEPT_NAMES:
                return None
            found = own_address(len(self._names))
            self._names.append(name)
            self._addresses[name] = found
        return found

    def name_at(self, address: str) -> str | None:
        index = own_index(address)
        return self._names[index] if index is not None and index < len(self._names) else None
