"""The name a TLS ClientHello asks for, read with Python's own TLS (no hand parser).

A server SSLContext with an sni_callback reads the ClientHello from a MemoryBIO; the
callback records the name and the handshake is then abandoned. VERIFIED-FACTS.md:
records split in two work; truncated input raises SSLWantReadError (keep buffering); a
NUL in the name is refused by OpenSSL; a non-UTF-8 name never reaches the callback, so
"no name seen" is a refusal. A hand parser returned a name with a NUL in it.
"""

from __future__ import annotations

import ssl

__all__ = ["MAX_CLIENT_HELLO_BYTES", "NEED_MORE", "server_name"]

# A ClientHello is one TLS record, at most 16 KiB plus its header (a post-quantum key
# share makes it large, still under that); past this it is not one.
MAX_CLIENT_HELLO_BYTES = 16 * 1024 + 5
NEED_MORE = object()


def _context() -> ssl.SSLContext:
    return ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)


def server_name(data: bytes) -> str | object | None:
    """The SNI of the ClientHello in `data`: the name (lower-case), None when it names
    none (or is not TLS), or NEED_MORE when `data` is not all of it yet."""
    seen: list[str] = []
    context = _context()

    def callback(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> int:
        if name:
            seen.append(name)
        return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE  # stop here: the name is all we need

    context.sni_callback = callback
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(data)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        if len(data) >= MAX_CLIENT_HELLO_BYTES:
            return None
        return NEED_MORE
    except ssl.SSLError:
        pass
    return seen[0].lower().rstrip(".") if seen else None
