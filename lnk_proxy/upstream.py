"""Upstream connections: opened to the very address that was checked, plain or TLS, and
kept for the next request (per client connection for forwarded requests, per provider
across client connections for a verb's upstream).

TLS is Python's `ssl` with the system's trust store (`ssl.create_default_context`, which
honours SSL_CERT_FILE and SSL_CERT_DIR in the proxy's own environment: a test CA is
trusted that way, never inside the sandbox), the hostname checked against the name the
call was decided on, never the address it connects to.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

import h11

from lnk_common.wire import OUT_OF_DESCRIPTORS, Refused, is_out_of_descriptors, no_delay
from lnk_proxy.decide import Address
from lnk_proxy.lane import UpstreamProtocol
from lnk_proxy.streams import Inbox, Outbox, held

__all__ = ["CHUNK", "CONNECT_SECONDS", "MAX_IDLE_PER_POOL", "Pool", "Upstream", "open_socket",
           "open_upstream", "tls_context"]

# Connecting to an upstream address (and, for TLS, its handshake) gives up after this long.
CONNECT_SECONDS = 15.0
# Bytes read at a time when relaying.
CHUNK = 256 * 1024
# Idle connections kept per provider: a harness runs a few calls at once (a main loop and
# some sub-agents); more idle ones would only hold the provider's sockets for nothing.
MAX_IDLE_PER_POOL = 8


class Upstream:
    """One upstream connection and its h11 state (reused while both sides are DONE)."""

    __slots__ = ("authority", "conn", "reader", "writer")

    def __init__(self, authority: str, reader: Inbox, writer: Outbox) -> None:
        self.authority = authority
        self.reader = reader
        self.writer = writer
        self.conn = h11.Connection(h11.CLIENT)

    def usable(self) -> bool:
        """Still open as far as can be seen without a read (a server that closed an idle
        connection has fed it its end)."""
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


def held_bytes(upstream: Upstream) -> bool:
    """Whether the upstream sent bytes not read yet (after a response's end: bytes that
    answer nothing, and the connection is not used again)."""
    return held(upstream.reader)


def tls_context() -> ssl.SSLContext:
    """The client context for every TLS upstream: system trust, hostname checked,
    TLS 1.2 at least, HTTP/1.1 only (the exchange speaks h11)."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


async def open_upstream(address: Address, port: int, authority: str, *,
                        tls: ssl.SSLContext | None = None, host: str = "") -> Upstream:
    """A connection to `address` (already checked), or Refused (502; 503 when out of
    descriptors). With `tls`, the handshake verifies the certificate for `host`."""
    loop = asyncio.get_running_loop()
    protocol = UpstreamProtocol(CHUNK)  # lnk_proxy.streams's, which a lane may borrow
    try:
        await asyncio.wait_for(
            loop.create_connection(lambda: protocol, str(address), port, ssl=tls,
                                   server_hostname=host if tls is not None else None,
                                   ssl_handshake_timeout=CONNECT_SECONDS if tls else None),
            CONNECT_SECONDS)
    except ssl.SSLCertVerificationError as error:
        raise Refused(502, f"{authority}'s certificate is not trusted "
                           f"({error.verify_message})", ordinary=True) from None
    except ssl.SSLError as error:
        raise Refused(502, f"{authority}: TLS failed ({error.reason or error})",
                      ordinary=True) from None
    except OSError as error:
        if is_out_of_descriptors(error):
            raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
        raise Refused(502, f"{authority} could not be reached ({error})",
                      ordinary=True) from None
    except TimeoutError:
        raise Refused(502, f"{authority} could not be reached (no answer in "
                           f"{CONNECT_SECONDS:g} s)", ordinary=True) from None
    assert protocol.outbox is not None  # made with the connection
    no_delay(protocol.outbox)
    return Upstream(authority, protocol.inbox, protocol.outbox)


async def open_socket(address: Address, port: int, authority: str) -> socket.socket:
    """A connected, non-blocking socket to `address` (already checked), TCP_NODELAY, for
    a tunnel (its bytes are spliced, never read here); or Refused, as open_upstream.
    No asyncio stream around it: a tunnel's upstream made a transport, a protocol and a
    reader only to pause them, copy its descriptor and close them again (some 100 µs of
    a tunnel's 1 ms in the proxy)."""
    try:
        sock = socket.socket(socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                             socket.SOCK_STREAM)
    except OSError as error:
        if is_out_of_descriptors(error):
            raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
        raise Refused(502, f"{authority} could not be reached ({error})",
                      ordinary=True) from None
    try:
        sock.setblocking(False)
        async with asyncio.timeout(CONNECT_SECONDS):
            await asyncio.get_running_loop().sock_connect(sock, (str(address), port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except TimeoutError:
        sock.close()
        raise Refused(502, f"{authority} could not be reached (no answer in "
                           f"{CONNECT_SECONDS:g} s)", ordinary=True) from None
    except OSError as error:
        sock.close()
        if is_out_of_descriptors(error):
            raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
        raise Refused(502, f"{authority} could not be reached ({error})",
                      ordinary=True) from None
    except BaseException:
        sock.close()
        raise
    return sock


class Pool:
    """Idle upstream connections of one upstream (a provider), kept between calls."""

    __slots__ = ("idle",)

    def __init__(self) -> None:
        self.idle: list[Upstream] = []

    def take(self) -> Upstream | None:
        """The newest idle connection still open, or None."""
        while self.idle:
            upstream = self.idle.pop()
            if upstream.usable():
                return upstream
            upstream.close()
        return None

    def give_back(self, upstream: Upstream) -> None:
        """Keep `upstream` for the next call, if its exchange ended cleanly."""
        conn = upstream.conn
        if (conn.our_state is h11.DONE and conn.their_state is h11.DONE
                and len(self.idle) < MAX_IDLE_PER_POOL and upstream.usable()):
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                upstream.close()
                return
            self.idle.append(upstream)
            return
        upstream.close()

    def close(self) -> None:
        for upstream in self.idle:
            upstream.close()
        self.idle.clear()
