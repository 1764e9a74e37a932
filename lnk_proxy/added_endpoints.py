"""A running sandbox's endpoint additions (`lnk-sandbox allow --tcp`), taken at the next
call: the sockets inside made when the name is looked up, and closed when taken away.

An endpoint is a name given an address of the sandbox's own and a socket listening there
on its port (lnk_common.endpoints), which a fork of the launcher made before the program
started (lnk_dns.helper). A running sandbox has none for an endpoint added since, and
nothing of ours runs inside to make one. So, when the sandbox's DNS (lnk_proxy.dns_server)
is asked a name none of the spec's rules lets by and an added endpoint does, the proxy:

1. works out the places the name needs (`missing_places`, sans IO): for each added
   endpoint naming it, its address (`AddressBook.give`: one no other name has, kept for
   the run) and port, or 0.0.0.0 and the port for a `*.domain` one; none where a socket
   is there already (the spec's, or one made before);
2. starts a fresh lnk-sandbox-dns-helper (single-threaded, as setns into a user namespace
   needs; the proxy has threads) given a descriptor of the sandbox's network, which the
   proxy takes from a socket it holds that was made inside (SIOCGSKNS: never a pid,
   which can be used again) and nothing else; the helper joins that network as its
   owner, binds each place and sends each socket back (lnk_dns.places), all
   or none, within HELPER_SECONDS;
3. serves them as the spec's endpoints are served, then answers the name. Each
   connection to them is then decided as any call: the name against the spec and the
   additions, read again (lnk_proxy.added), every address, the ClientHello on 443.

What cannot be placed (a port the program listens on, a `*.` port with an endpoint's
socket on it, the helper failing) is refused with its reason in one line, on the wire's
log, nothing else changed, and not tried again until the additions change (a program
looking the name up in a loop starts no process each time). A place whose addition was
taken away is closed by the process's watch (`close_taken_away`); its open calls are
ended as a taken-away host's are. A program inside can neither read nor write the
additions (Link's settings folder is hidden), nor reach the helper: it runs outside.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from lnk_common.additions import MAX_ADDITIONS
from lnk_proxy.decide import HostRule

TYPE_CHECKING = False
if TYPE_CHECKING:
    from lnk_proxy.server import Proxy

__all__ = ["HELPER_SECONDS", "MAX_ADDED_PLACES", "AddedEndpoints", "PlacingError",
           "made_inside", "missing_places"]

# The helper's whole run (a Python start, two setns, a bind a place): some 50 ms; past
# this it is killed and the name refused. Within a resolver's 5 s for its first try.
HELPER_SECONDS = 4.0
# Sockets a running sandbox's proxy makes inside for additions, at most: as many as
# the additions a wire keeps (each endpoint names one port).
MAX_ADDED_PLACES = MAX_ADDITIONS
# ioctl on a socket: a descriptor of the network namespace it was made in (Linux 4.9+;
# needs CAP_NET_ADMIN over that namespace, which its owner outside has).
_SIOCGSKNS = 0x894C
_EVERY_ADDRESS = "0.0.0.0"  # noqa: S104  (the sandbox's own loopback only: nothing else)

Place = tuple[str, int]


class PlacingError(Exception):
    """An added endpoint's socket cannot be made inside the running sandbox: one line."""


def missing_places(name: str, rules: tuple[HostRule, ...], made: set[Place],
                   give: Callable[[str], str | None]) -> list[Place]:
    """The places `name` needs under the added endpoints `rules` (each naming it) that
    are not in `made`: a `*.` rule's port on every address, else the name's own
    address (`give`) on each port; PlacingError when no address is left."""
    every = {rule.port for rule in rules if rule.wildcard and rule.port is not None}
    missing = [(_EVERY_ADDRESS, port) for port in sorted(every)
               if (_EVERY_ADDRESS, port) not in made]
    for rule in rules:
        port = rule.port
        if rule.wildcard or port is None or port in every or (_EVERY_ADDRESS, port) in made:
            continue  # served by the socket on every address of that port
        address = give(name)
        if address is None:
            raise PlacingError("the sandbox has given every address it may give")
        if (address, port) not in made and (address, port) not in missing:
            missing.append((address, port))
    return missing


class AddedEndpoints:
    """The sockets one proxy made inside for added endpoints, by place. `inside`: a
    socket of the proxy's that was made inside the sandbox (its DNS's), whose network
    the helper joins; `made`: the places the launcher made at start."""

    def __init__(self, proxy: Proxy, inside: socket.socket, made: set[Place]) -> None:
        self.proxy = proxy
        self.inside = inside
        self.made = set(made)
        self.servers: dict[Place, asyncio.Server] = {}
        self.lock = asyncio.Lock()  # one helper at a time: a burst of lookups waits
        # Why a name could not be placed, kept while the added endpoints are as they were.
        self.failed: dict[str, str] = {}
        self.failed_under: tuple[HostRule, ...] = ()

    def rules_for(self, name: str) -> tuple[HostRule, ...]:
        """The added endpoints that name `name` (a stat of the additions, as a call's)."""
        return tuple(rule for rule in self.proxy.added.endpoint_rules()
                     if rule.matches_name(name))

    def missing(self, name: str, rules: tuple[HostRule, ...]) -> list[Place]:
        """What `name` still needs; PlacingError when it failed before and the additions
        are as they were, or when it would take more than MAX_ADDED_PLACES."""
        self._forget_failures()
        if name in self.failed:
            raise PlacingError(self.failed[name])
        missing = missing_places(name, rules, self.made, self.proxy.book.give
                                 if self.proxy.book is not None else lambda _name: None)
        if missing and len(self.servers) + len(missing) > MAX_ADDED_PLACES:
            raise PlacingError(f"the running sandbox has {MAX_ADDED_PLACES} sockets made "
                               "for additions already")
        return missing

    def _forget_failures(self) -> None:
        rules = self.proxy.added.endpoint_rules()
        if rules is not self.failed_under:
            self.failed, self.failed_under = {}, rules

    async def place(self, name: str, rules: tuple[HostRule, ...]) -> None:
        """Make and serve what `name` needs (one helper at a time), or PlacingError,
        kept for the name until the additions change."""
        from lnk_proxy.lane import lane_server

        async with self.lock:
            missing = self.missing(name, rules)
            if not missing:
                return
            try:
                sockets = await asyncio.get_running_loop().run_in_executor(
                    None, made_inside, self.inside.fileno(), missing)
            except PlacingError as error:
                self.failed[name] = str(error)
                raise
            for place, sock in zip(missing, sockets, strict=True):
                self.servers[place] = await lane_server(self.proxy.handle_endpoint, sock)
                self.made.add(place)

    def any_made(self) -> bool:
        return bool(self.servers)

    def close_taken_away(self) -> None:
        """Close the sockets no added endpoint needs now (on the loop; the watch asks).
        A file that cannot be taken has no endpoints: every one is closed."""
        rules = self.proxy.added.endpoint_rules()
        book = self.proxy.book
        for place in list(self.servers):
            address, port = place
            named = book.name_at(address) if book is not None else None
            if not any(rule.port == port and (address == _EVERY_ADDRESS
                                              or (named and rule.matches_name(named)))
                       for rule in rules):
                self.servers.pop(place).close()
                self.made.discard(place)


def made_inside(inside_fd: int, places: list[Place], *, dns: bool = False
                ) -> list[socket.socket]:
    """The helper's run (in a thread of the loop's executor): the sandbox's network
    taken from `inside_fd`, a socket on each of `places` back (with `dns`, first the
    sandbox's DNS sockets on 127.0.0.1:53, UDP then TCP), or PlacingError."""
    import fcntl
    import os
    import subprocess

    from lnk_common.chain import helper_argv
    from lnk_common.fdpass import receive_labelled
    from lnk_dns.places import DNS_PLACE

    try:
        network_fd = fcntl.ioctl(inside_fd, _SIOCGSKNS)
    except OSError as error:
        raise PlacingError(f"the sandbox's network cannot be named ({error.strerror})") from None
    try:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError as error:
        os.close(network_fd)
        raise PlacingError(f"no channel to the helper ({error.strerror})") from None
    received: list[socket.socket] = []
    said_labels: list[bytes] = []
    try:
        argv = [*helper_argv("dns-helper"), "--namespace-fd", str(network_fd),
                "--proxy-fd", str(theirs.fileno())]
        labels = [b"dns udp", b"dns tcp"] if dns else []
        if dns:
            argv += ["--dns", DNS_PLACE]
        labels += [b"endpoint tcp"] * len(places)
        for address, port in places:
            argv += ["--place", f"{address}:{port}"]
        try:
            # An empty environment: the proxy's holds the run's placeholders and URL
            # secret, which a process that binds sockets has no use for.
            done = subprocess.run(argv, pass_fds=(network_fd, theirs.fileno()), env={},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=HELPER_SECONDS, check=False)
        except subprocess.TimeoutExpired:
            raise PlacingError(f"the helper did not end within {HELPER_SECONDS:g} s") from None
        except OSError as error:  # out of descriptors or processes: said, nothing made
            raise PlacingError(f"the helper could not start ({error.strerror})") from None
        theirs.close()
        try:
            while (item := receive_labelled(ours.fileno())) is not None:
                received.append(socket.socket(fileno=item[0]))
                said_labels.append(item[1])
        except OSError as error:
            raise PlacingError(f"the helper's sockets could not be taken ({error.strerror})"
                               ) from None
        if done.returncode != 0 or said_labels != labels:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise PlacingError((said[-1] if said else f"status {done.returncode}")
                               .removeprefix("lnk-sandbox-dns-helper: "))
        for sock in received:
            sock.setblocking(False)
        return received
    except BaseException:
        for sock in received:
            sock.close()
        raise
    finally:
        os.close(network_fd)
        ours.close()
        theirs.close()
