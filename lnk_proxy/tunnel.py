"""Tunnels: a CONNECT, and a connection to an endpoint's address inside the sandbox.

Order, after the connection's machine has admitted the CONNECT's head and its target
(lnk_proxy.connection): the wire's gate and the name before any lookup, the lookup and
every address (Proxy.decide), a connection to the very address checked, the `200`,
then, to port 443, the TLS ClientHello read once and its name held to the tunnel's host
(a CDN routes by that name: another is domain fronting; an IP literal gets no name, and
is closed), and the log's `allowed` line only once the splice is ready (a call on the
log as allowed is one that goes). The bytes are then spliced both ways in the kernel
(lnk_common.wire.Wire.relay), never read here.

A tunnel to port 80 (HTTP_PORT) is not relayed unread: the client speaks first there,
so its bytes are served as HTTP by the connection's machine, each request admitted by
the same head check, its Host held to the tunnel's host, and counted as a call of its
own. The tunnel itself is decided when it is asked for (so one that could never go is
refused then) but is no call and opens no connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from typing import TYPE_CHECKING

from lnk_common.wire import Refused, linger
from lnk_common.wirelog import ended_detail
from lnk_proxy import sni
from lnk_proxy.connection import ClientConnection, OpenTunnel
from lnk_proxy.streams import Inbox, Outbox
from lnk_proxy.target import Target
from lnk_proxy.upstream import Upstream

if TYPE_CHECKING:
    from lnk_proxy.server import Proxy

__all__ = ["HELLO_SECONDS", "HTTP_PORT", "connect", "endpoint"]

# The port whose tunnels are served as HTTP: the client speaks first there, so there is
# every reason to read it (a tunnel relayed unread carried any Host, and any number of
# requests as one call).
HTTP_PORT = 80
# A tunnel to 443 must show its ClientHello within this long.
HELLO_SECONDS = 10.0
_ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


async def connect(proxy: Proxy, command: OpenTunnel, reader: Inbox,
                  writer: Outbox, kept: list[Upstream | None]) -> bool:
    """A CONNECT: decided, answered, then relayed; or, to port 80, True: the tunnel whose
    requests the caller serves next (the connection `kept` from requests before it is
    closed)."""
    target = command.target
    if kept[0] is not None:
        kept[0].close()
        kept[0] = None
    upstream: socket.socket | None = None
    try:
        if target.port == HTTP_PORT:
            await proxy.decide(target, counted=False)
        else:
            upstream = await proxy.open_tunnel(target)
    except Refused as refusal:
        await proxy.refuse(writer, target.authority, refusal)
        await linger(reader, writer)  # the refusal read, not reset away
        return False
    try:
        writer.write(_ESTABLISHED)
        await writer.drain()
    except BaseException:
        if upstream is not None:
            upstream.close()
        raise
    if upstream is None:
        return True
    # What the client sent after the CONNECT's head comes first from the reader (the
    # machine's bytes, taken back by the first read: lnk_proxy.streams.Inbox).
    await _tunnel(proxy, target, reader, writer, upstream, "connect")
    return False


async def endpoint(proxy: Proxy, reader: Inbox,
                   writer: Outbox) -> None:
    """A connection to an endpoint's address inside the sandbox: a CONNECT to the name
    that address was given (or the [lan] address itself) and the port it came to,
    decided and logged as any call. Refused: closed, with the reason in the log."""
    address, port = writer.get_extra_info("sockname")[:2]
    host = proxy.book.name_at(address) if proxy.book is not None else None
    if host is None and any(rule.lan and rule.name == address for rule in proxy.rules):
        host = address
    if host is None:
        _refused_unanswered(proxy, f"{address}:{port}",
                            Refused(403, f"{address} is no address this sandbox was given"))
        return
    target = Target(host, port, ipaddress.ip_address(host) if host == address else None)
    upstream: socket.socket | None = None
    try:
        if port == HTTP_PORT:  # as a CONNECT to port 80: decided, then served as HTTP
            await proxy.decide(target, counted=False)
        else:
            upstream = await proxy.open_tunnel(target)
    except Refused as refusal:
        _refused_unanswered(proxy, target.authority, refusal)
        return
    if upstream is not None:
        await _tunnel(proxy, target, reader, writer, upstream, "endpoint")
        return
    await proxy.serve_connection(reader, writer, ClientConnection(target))


def _refused_unanswered(proxy: Proxy, where: str, refusal: Refused) -> None:
    """A refusal with no one to answer (a tunnel's bytes are not HTTP): the log only."""
    proxy.log.write("refused", where, f"reason={refusal.logged}")
    proxy.count_refusal(where, refusal)


async def _tunnel(proxy: Proxy, target: Target, reader: Inbox,
                  writer: Outbox, upstream: socket.socket, kind: str) -> None:
    """An allowed connection carried both ways: to port 443 only once its ClientHello
    names the very host. `upstream` is closed here (by `relay` once the tunnel is
    spliced), whatever happens."""
    try:
        await _carry(proxy, target, reader, writer, upstream, kind)
    finally:
        upstream.close()  # a no-op once `splice_ends` has taken its descriptor


async def _carry(proxy: Proxy, target: Target, reader: Inbox,
                 writer: Outbox, upstream: socket.socket, kind: str) -> None:
    call = next(proxy.ids)
    first = b""  # the ClientHello, read here to be judged, then sent on first
    if target.port == 443:  # an IP literal gets no name in a ClientHello: closed
        named: str | object | None = None
        try:
            async with asyncio.timeout(HELLO_SECONDS):
                first, named = await _client_hello(reader)
        except TimeoutError:
            named = None
        if named != target.host:
            # Counted as any refusal: a burst of tunnels fronting another name is an
            # anomaly like a burst of refused names.
            _refused_unanswered(proxy, target.authority, Refused(
                403, "the tunnel's TLS ClientHello names "
                     + (f"another host ({named})" if named else "no host")))
            return
    try:
        if first:
            await asyncio.get_running_loop().sock_sendall(upstream, first)
        ends = await proxy.splice_ends(reader, writer, None, upstream)
    except Refused as refusal:  # out of descriptors: the call never went
        proxy.log.write("refused", target.authority, f"reason={refusal.logged}")
        return
    proxy.log.write("allowed", target.authority, f"id={call} kind={kind}")
    started = time.monotonic()
    counted = [0, 0]
    try:
        counted[:] = await proxy.relay(ends, None)
    finally:  # an ended line for every allowed one, even when the proxy is stopping
        proxy.log.write("ended", target.authority,
                        ended_detail(call, counted[0] + len(first), counted[1], started))


async def _client_hello(reader: Inbox) -> tuple[bytes, str | object | None]:
    """The ClientHello's bytes and the name it asks for (read once: a reading is a TLS
    handshake begun, which was a tunnel's dearest step when done twice)."""
    data = b""
    while True:
        chunk = await reader.read(sni.MAX_CLIENT_HELLO_BYTES)
        if not chunk:  # closed before a whole ClientHello: it names no host
            return data, None
        data += chunk
        named = sni.server_name(data)
        if named is not sni.NEED_MORE:
            return data, named
