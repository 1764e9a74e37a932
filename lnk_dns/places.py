"""The DNS helper's second form, a running sandbox's proxy's: the sockets of endpoints
`lnk-sandbox allow --tcp` added since the start (lnk_proxy.added_endpoints).

    lnk-sandbox-dns-helper --namespace-fd N --proxy-fd N [--dns 127.0.0.1:53]
                           (--place ADDRESS:PORT)…

Trust: its argv and two descriptors, from the proxy that started it: a descriptor of the
sandbox's network (which the proxy took from a socket made inside) and one end of a
socket pair. Order: the argv checked whole (only an endpoint's own addresses: 127.53.x.y,
or 0.0.0.0 for a `*.` endpoint's port; at most MAX_PLACES; `--dns` only as 127.0.0.1:53)
→ join the user namespace that owns that network, then the network, as its owner, and
check it is the one named (lnk_dns.helper.join_network) → with `--dns`, bind the
sandbox's DNS, 127.0.0.1:53 UDP and TCP, and send them labelled "dns udp" and "dns tcp"
(a sandbox that started without DNS of its own, whose resolv.conf names 127.0.0.1 where
nothing listened: lnk_wrap.dns_files) → bind and listen on each place → send each,
labelled "endpoint tcp" → exit 0. Anything that cannot be done is one line on stderr and exit 1;
the proxy then closes what was sent (all or none). Kept apart from lnk_dns.helper, which
the launcher imports at every start with a wire: a start pays nothing for it.
"""

from __future__ import annotations

import os
import sys

from lnk_common.endpoints import DNS_PORT
from lnk_dns.helper import BACKLOG, join_network

__all__ = ["DNS_PLACE", "MAX_PLACES", "main", "place_more"]

# Places one `--namespace-fd` start makes at most: a start is for one name's ports (an
# endpoint names one port; a name under several additions has several).
MAX_PLACES = 64
# The one place `--dns` takes: where the sandbox's resolv.conf sends its lookups.
DNS_PLACE = f"127.0.0.1:{DNS_PORT}"


def place_more(network_fd: int, places: list[tuple[str, int]], channel: int, *,
               dns: bool = False) -> None:
    """A running sandbox's new endpoints (`lnk-sandbox allow --tcp`), in a fresh process
    its proxy started (single-threaded, as setns into a user namespace needs): join the
    network `network_fd` names (the proxy took it from a socket made inside,
    SIOCGSKNS: never a pid, which can be used again) and send a socket listening on each
    of `places` over `channel`, labelled "endpoint tcp"; with `dns`, first the sandbox's
    DNS sockets on 127.0.0.1:53 (UDP, then TCP). OSError naming the first that cannot be
    made (the proxy then closes those sent before it: all or none)."""
    import _socket

    from lnk_common.fdpass import send_fd

    join_network(network_fd, os.fstat(network_fd).st_ino)
    for kind in ("udp", "tcp") if dns else ():
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM if kind == "udp"
                              else _socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", DNS_PORT))
        except OSError as error:
            raise OSError(f"cannot listen on 127.0.0.1 port {DNS_PORT} ({kind}) inside the "
                          f"sandbox: {error.strerror}") from None
        if kind == "tcp":
            sock.listen(BACKLOG)
        send_fd(channel, sock.fileno(), f"dns {kind}".encode())
        sock.close()
    for address, port in places:
        sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        try:
            sock.bind((address, port))
        except OSError as error:
            raise OSError(f"cannot listen on {address} port {port} inside the sandbox: "
                          f"{error.strerror}") from None
        sock.listen(BACKLOG)
        send_fd(channel, sock.fileno(), b"endpoint tcp")
        sock.close()


def _places(argv: list[str]) -> tuple[int, int, list[tuple[str, int]], bool]:
    """`--namespace-fd N --proxy-fd N [--dns 127.0.0.1:53] (--place ADDRESS:PORT)…`, each
    place an address an endpoint is given (lnk_common.endpoints: 127.53.x.y, or 0.0.0.0
    for a `*.` one's port), and whether `--dns` came, or ValueError."""
    from lnk_common.endpoints import own_index

    if len(argv) < 6 or len(argv) % 2 or argv[:4:2] != ["--namespace-fd", "--proxy-fd"]:
        raise ValueError("--namespace-fd N --proxy-fd N (--place ADDRESS:PORT)… are required")
    if not (argv[1].isdigit() and argv[3].isdigit()):
        raise ValueError("--namespace-fd and --proxy-fd take a descriptor's number")
    places: list[tuple[str, int]] = []
    dns = False
    for option, value in zip(argv[4::2], argv[5::2], strict=True):
        if option == "--dns" and not dns and not places:
            if value != DNS_PLACE:
                raise ValueError(f"--dns {value}: the sandbox's DNS is {DNS_PLACE}")
            dns = True
            continue
        address, _, port = value.partition(":")
        if option != "--place" or not (port.isdigit() and 1 <= int(port) <= 65535) or (
                address != "0.0.0.0" and own_index(address) is None):  # noqa: S104
            raise ValueError(f"{option} {value}: not --place ADDRESS:PORT at an endpoint's "
                             "address (127.53.x.y, or 0.0.0.0)")
        places.append((address, int(port)))
    if len(places) > MAX_PLACES:
        raise ValueError(f"more than {MAX_PLACES} places at once")
    return int(argv[1]), int(argv[3]), places, dns


def main(argv: list[str]) -> None:
    try:
        network_fd, channel, places, dns = _places(argv)
        place_more(network_fd, places, channel, dns=dns)
    except (ValueError, OSError) as error:
        print(f"lnk-sandbox-dns-helper: {error}", file=sys.stderr)
        sys.exit(1)
