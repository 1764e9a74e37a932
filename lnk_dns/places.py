"""The DNS helper's second form, a running sandbox's proxy's: the sockets of endpoints
`lnk-sandbox allow --tcp` added since the start (lnk_proxy.added_endpoints).

    lnk-sandbox-dns-helper --namespace-fd N --proxy-fd N (--place ADDRESS:PORT)…

Trust: its argv and two descriptors, from the proxy that started it: a descriptor of the
sandbox's network (which the proxy took from a socket made inside) and one end of a
socket pair. Order: the argv checked whole (only an endpoint's own addresses: 127.53.x.y,
or 0.0.0.0 for a `*.` endpoint's port; at most MAX_PLACES) → join the user namespace that
owns that network, then the network, as its owner, and check it is the one named
(lnk_dns.helper.join_network) → bind and listen on each place → send each, labelled
"endpoint tcp" → exit 0. Anything that cannot be done is one line on stderr and exit 1;
the proxy then closes what was sent (all or none). Kept apart from lnk_dns.helper, which
the launcher imports at every start with a wire: a start pays nothing for it.
"""

from __future__ import annotations

import os
import sys

from lnk_dns.helper import BACKLOG, join_network

__all__ = ["MAX_PLACES", "main", "place_more"]

# Places one `--namespace-fd` start makes at most: a start is for one name's ports (an
# endpoint names one port; a name under several additions has several).
MAX_PLACES = 64


def place_more(network_fd: int, places: list[tuple[str, int]], channel: int) -> None:
    """A running sandbox's new endpoints (`lnk-sandbox allow --tcp`), in a fresh process
    its proxy started (single-threaded, as setns into a user namespace needs): join the
    network `network_fd` names (the proxy took it from a socket made inside,
    SIOCGSKNS: never a pid, which can be used again) and send a socket listening on each
    of `places` over `channel`, labelled "endpoint tcp". OSError naming the first that
    cannot be made (the proxy then closes those sent before it: all or none)."""
    import _socket

    from lnk_common.fdpass import send_fd

    join_network(network_fd, os.fstat(network_fd).st_ino)
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


def _places(argv: list[str]) -> tuple[int, int, list[tuple[str, int]]]:
    """`--namespace-fd N --proxy-fd N (--place ADDRESS:PORT)…`, each place an address an
    endpoint is given (lnk_common.endpoints: 127.53.x.y, or 0.0.0.0 for a `*.` one's
    port), or ValueError."""
    from lnk_common.endpoints import own_index

    if len(argv) < 6 or len(argv) % 2 or argv[:4:2] != ["--namespace-fd", "--proxy-fd"]:
        raise ValueError("--namespace-fd N --proxy-fd N (--place ADDRESS:PORT)… are required")
    if not (argv[1].isdigit() and argv[3].isdigit()):
        raise ValueError("--namespace-fd and --proxy-fd take a descriptor's number")
    places = []
    for option, value in zip(argv[4::2], argv[5::2], strict=True):
        address, _, port = value.partition(":")
        if option != "--place" or not (port.isdigit() and 1 <= int(port) <= 65535) or (
                address != "0.0.0.0" and own_index(address) is None):  # noqa: S104
            raise ValueError(f"{option} {value}: not --place ADDRESS:PORT at an endpoint's "
                             "address (127.53.x.y, or 0.0.0.0)")
        places.append((address, int(port)))
    if len(places) > MAX_PLACES:
        raise ValueError(f"more than {MAX_PLACES} places at once")
    return int(argv[1]), int(argv[3]), places


def main(argv: list[str]) -> None:
    try:
        network_fd, channel, places = _places(argv)
        place_more(network_fd, places, channel)
    except (ValueError, OSError) as error:
        print(f"lnk-sandbox-dns-helper: {error}", file=sys.stderr)
        sys.exit(1)
