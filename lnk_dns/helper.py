"""lnk-sandbox-dns-helper: the one fork that makes every listening socket inside a
sandbox (the DNS listener among them), from outside, and hands them to the proxy and the
relay.

    lnk-sandbox-dns-helper --pid PID --net-namespace INODE --proxy-fd N [--relay-fd N]
                           [--network proxy] [--endpoint E]… [--lan L]… [--localhost-port P]…
    lnk-sandbox-dns-helper --namespace-fd N --proxy-fd N [--dns 127.0.0.1:53]
                           (--place ADDRESS:PORT)…

Resolvers ask port 53, which only a privileged process may listen on, and bubblewrap
keeps every privilege from the sandbox. The sandbox's user namespace is the user's own,
so a process of the user's, outside the sandbox, may join it and its network as their
owner, with the capabilities an owner has there: it binds 127.0.0.1:53 (UDP and TCP),
the endpoints' addresses of the sandbox's own, the [lan] addresses (which it adds to the
sandbox's loopback first) and the [localhost] ports, and sends each socket, labelled, to
the proxy or the relay over a unix socket it inherited. A socket keeps the network it
was made in: the proxy serves it from outside, and nothing of ours runs inside. Then it
exits, and only then does the launcher give the init inside its go-ahead (the init's
--go-fd: lnk_wrap.init says why not bubblewrap's --block-fd).

Its name says DNS because port 53 is why it exists: a listener any process inside could
make itself needs no help, but 53 needs a privilege the sandbox never has. Once a fork
had to join the sandbox's network for that one, it makes every listening socket there
(the proxy's port, 127.0.0.1:53, the endpoints, [lan], [localhost]), so that there is
one place where a socket is made inside and nothing else of ours ever enters. The name
stays as the design card gave it (the package lnk_dns, the console script
lnk-sandbox-dns-helper): docs/glossary.md, "DNS helper"; docs/decisions/0040.

The launcher does not run this program: it calls `make_sockets` in a fork of its own,
which saves starting a Python (some 20 ms) at every sandbox start. The console script is
the same code for an administrator or a test, given a sandbox's pid. Its second form is
a running sandbox's proxy's, for an endpoint `lnk-sandbox allow --tcp` added since the
start (lnk_proxy.added_endpoints): given a descriptor of the sandbox's network (never a
pid) and the places to listen on (with `--dns`, 127.0.0.1:53 first, for a sandbox that
started without DNS of its own), it joins as the first form does and sends a socket for
each back, all or none (lnk_dns.places, imported only then: the launcher imports this
module at every start with a wire); the proxy has threads, so it starts this program
rather than fork. Its options that carry the policy are its fields', spelt and checked
as the launcher's are (lnk_common.policy.FIELDS).

setns into a user namespace needs a single-threaded process: `make_sockets` forks first.
The network joined must be the one bubblewrap named (`net-namespace` of its --info-fd),
checked before and after joining: bubblewrap writes its info before the sandbox's first
process has unshared its network, and joining then would join this machine's.
"""

from __future__ import annotations

import os
import sys

from lnk_common.endpoints import Listener

__all__ = ["HelperError", "add_addresses", "join_network", "main", "make_sockets"]

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_NS_GET_USERNS = 0xB701  # ioctl on a namespace: a descriptor of its owning user namespace
# bubblewrap reports the sandbox's pid before that process has made its own network
# namespace (seen as an ordinary user: a race); the helper waits this long for it.
NAMESPACE_WAIT_SECONDS = 5.0
# ...and reports it before the sandbox's process has brought its loopback up (seen under
# load: a bind on 127.53.0.1 failed "Cannot assign requested address"); the helper, in
# that network, waits this long for the loopback to be up before it binds anything.
LOOPBACK_WAIT_SECONDS = 5.0
_SIOCGIFFLAGS = 0x8913
_IFF_UP = 0x1
# A listening socket's queue: a program that opens many connections at once (a pool of
# database connections) is not refused while the proxy accepts.
BACKLOG = 1024


class HelperError(Exception):
    """The sandbox's sockets could not be made; the program must not start."""


def _wait_for_network(sandbox_pid: int, network: int) -> None:
    import time

    deadline = time.monotonic() + NAMESPACE_WAIT_SECONDS
    while True:
        try:
            if os.stat(f"/proc/{sandbox_pid}/ns/net").st_ino == network:
                return
        except OSError:
            raise HelperError("the sandbox ended before its network was made") from None
        if not network or time.monotonic() > deadline:
            raise HelperError("the sandbox's network namespace did not appear")
        time.sleep(0.0005)


def make_sockets(sandbox_pid: int, network: int, plan: list[Listener],
                 lan_addresses: list[str], channels: dict[str, int]) -> None:
    """Make every socket of `plan` inside the sandbox's network and send each to
    `channels[role]` ("proxy" takes the proxy's, DNS and endpoint sockets; "relay" the
    relay's). Raises HelperError when anything could not be made."""
    _wait_for_network(sandbox_pid, network)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        code = 1
        try:
            os.close(read_end)
            _in_child(sandbox_pid, network, plan, lan_addresses, channels)
            code = 0
        except BaseException as error:
            os.write(write_end, str(error).encode("utf-8", "replace")[:1000])
        os._exit(code)
    os.close(write_end)
    reason = b""
    while chunk := os.read(read_end, 1024):
        reason += chunk
    os.close(read_end)
    _, status = os.waitpid(child, 0)
    if status != 0:
        raise HelperError("the sandbox's sockets could not be made inside it: "
                          + (reason.decode("utf-8", "replace") or f"status {status}"))


def join_network(network_fd: int, network: int) -> None:
    """Join the network namespace `network_fd` names (closed here) as its owner, and
    check that it is the one numbered `network`: OSError if anything is otherwise. This
    process must be single-threaded (setns into a user namespace)."""
    import ctypes
    import fcntl

    from lnk_common.syscalls import libc

    # The user namespace that owns the network, which is not the program's own when
    # bubblewrap nests one (it does with --dev, to mount devpts): joining the program's
    # would give no capability over the network.
    owner_fd = fcntl.ioctl(network_fd, _NS_GET_USERNS)
    for kind, fd, flag in (("user", owner_fd, _CLONE_NEWUSER),
                           ("net", network_fd, _CLONE_NEWNET)):
        if libc.setns(fd, flag) != 0:
            raise OSError(f"setns({kind}) failed: {os.strerror(ctypes.get_errno())}")
        os.close(fd)
    if os.stat("/proc/self/ns/net").st_ino != network:
        raise OSError("joined another network than the sandbox's")


def _in_child(sandbox_pid: int, network: int, plan: list[Listener],
              lan_addresses: list[str], channels: dict[str, int]) -> None:
    import _socket

    from lnk_common.fdpass import send_fd

    join_network(os.open(f"/proc/{sandbox_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC), network)
    wait_for_loopback()
    if lan_addresses:
        add_addresses(lan_addresses)
    for listener in plan:
        v6 = ":" in listener.address
        sock = _socket.socket(_socket.AF_INET6 if v6 else _socket.AF_INET,
                              _socket.SOCK_DGRAM if listener.udp else _socket.SOCK_STREAM)
        if v6:
            sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 1)
        if listener.role == "callback":
            # Made here to be connected later, by the proxy, to a port the program
            # listens on: neither bound nor listening (lnk_common.endpoints).
            send_fd(channels["proxy"], sock.fileno(), b"callback tcp")
            sock.close()
            continue
        try:
            sock.bind((listener.address, listener.port))
        except OSError as error:
            sock.close()
            if v6 and listener.role == "relay" and listener.address == "::1":
                continue  # no IPv6 in this sandbox's network: 127.0.0.1 serves alone
            raise OSError(f"cannot listen on {listener.address} port {listener.port} "
                          f"inside the sandbox: {error.strerror}") from None
        if not listener.udp:
            sock.listen(BACKLOG)
        target = "relay" if listener.role == "relay" else "proxy"
        label = f"{listener.role} {'udp' if listener.udp else 'tcp'}".encode()
        send_fd(channels[target], sock.fileno(), label)
        sock.close()


def wait_for_loopback(seconds: float = LOOPBACK_WAIT_SECONDS) -> None:
    """Return once this network namespace's loopback is up (bubblewrap brings it up in
    the sandbox's process, after it has said the process's pid); OSError past `seconds`.
    It is not brought up here: bubblewrap's own setup would then fail on an address that
    is there already."""
    import _socket
    import fcntl
    import struct
    import time

    deadline = time.monotonic() + seconds
    probe = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        while True:
            answer = fcntl.ioctl(probe.fileno(), _SIOCGIFFLAGS, struct.pack("16sH14x", b"lo", 0))
            if struct.unpack("16sH14x", answer)[1] & _IFF_UP:
                return
            if time.monotonic() > deadline:
                raise OSError(f"the sandbox's loopback was not up within {seconds:g} s")
            time.sleep(0.0005)
    finally:
        probe.close()


# rtnetlink, for the one message needed: add an address to the loopback (index 1 in a
# network namespace of its own), scope host, as `ip addr add A/32 dev lo` does.
_NETLINK_ROUTE = 0
_RTM_NEWADDR = 20
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
_NLMSG_ERROR = 2
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_RT_SCOPE_HOST = 254
_IFA_F_NODAD = 0x02
_LOOPBACK_INDEX = 1


def add_addresses(addresses: list[str]) -> None:
    """Add each address to this network namespace's loopback (needs CAP_NET_ADMIN in
    the namespace's owner: the helper has it there, the program never does)."""
    import _socket
    import struct

    sock = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_RAW, _NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        for sequence, text in enumerate(addresses, 1):
            v6 = ":" in text
            family = _socket.AF_INET6 if v6 else _socket.AF_INET
            packed = _socket.inet_pton(family, text)
            attribute = b"".join(struct.pack("=HH", 4 + len(packed), kind) + packed
                                 for kind in (_IFA_LOCAL, _IFA_ADDRESS))
            # No duplicate address detection: the address is on a loopback of the
            # sandbox's own (while tentative, it could not be bound).
            body = struct.pack("=BBBBI", family, 128 if v6 else 32,
                               _IFA_F_NODAD if v6 else 0, _RT_SCOPE_HOST,
                               _LOOPBACK_INDEX) + attribute
            header = struct.pack("=IHHII", 16 + len(body), _RTM_NEWADDR,
                                 _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL,
                                 sequence, 0)
            sock.send(header + body)
            reply = sock.recv(65536)
            kind = struct.unpack_from("=H", reply, 4)[0]
            error = -struct.unpack_from("=i", reply, 16)[0] if kind == _NLMSG_ERROR else 0
            if error:
                raise OSError(error, f"cannot add {text} to the sandbox's loopback: "
                                     f"{os.strerror(error)}")
    finally:
        sock.close()


def _options(argv: list[str]) -> dict[str, list[str]]:
    """Its fields of the policy (--network, --endpoint, --lan, --localhost-port), read
    and checked by the policy's table, and its own descriptors and pid."""
    from lnk_common.policy import PolicyArgvError, parse_helper_argv

    try:
        options = parse_helper_argv("dns", argv, (
            "--pid", "--net-namespace", "--proxy-fd", "--relay-fd"))
    except PolicyArgvError as error:
        raise ValueError(str(error)) from None
    for single in ("--pid", "--net-namespace", "--proxy-fd"):
        if len(options[single]) != 1 or not options[single][0].isdigit():
            raise ValueError(f"{single} N is required, once")
    return options


def main(argv: list[str] | None = None) -> None:
    from lnk_common import endpoints

    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--namespace-fd"]:  # a running sandbox's proxy's (lnk_dns.places)
        from lnk_dns.places import main as places_main

        places_main(arguments)
        return
    try:
        options = _options(arguments)
        lan = tuple(options["--lan"])
        plan = endpoints.listeners(
            proxy=options["--network"] == ["proxy"], endpoints=tuple(options["--endpoint"]),
            lan=lan, localhost_ports=tuple(int(port) for port in options["--localhost-port"]))
        channels = {"proxy": int(options["--proxy-fd"][0])}
        if options["--relay-fd"]:
            channels["relay"] = int(options["--relay-fd"][0])
        elif any(listener.role == "relay" for listener in plan):
            raise ValueError("--localhost-port needs --relay-fd")
        make_sockets(int(options["--pid"][0]), int(options["--net-namespace"][0]), plan,
                     endpoints.lan_addresses(endpoints.entries((), lan)), channels)
    except (ValueError, endpoints.EndpointError, HelperError, OSError) as error:
        print(f"lnk-sandbox-dns-helper: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
