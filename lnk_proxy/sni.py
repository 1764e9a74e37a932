"""The name a TLS ClientHello asks for, read with Python's own TLS (no hand parser).

A server SSLContext with an sni_callback reads the ClientHello from a MemoryBIO; the
callback records the name and the handshake is then abandoned. docs/facts/http-tls.md:
records split in two work; truncated input raises SSLWantReadError (keep buffering); a
NUL in the name is refused by OpenSSL; a non-UTF-8 name never reaches the callback, so
"no name seen" is a refusal. A hand parser returned a name with a NUL in it.

The context is made once, for every tunnel: making one cost 137 µs here (OpenSSL 3's
SSL_CTX_new), most of a ClientHello's reading (160 µs in all), where a new SSLObject
of the same context for each ClientHello costs some 20. Nothing of one tunnel's reading
is kept in the context: the name seen is kept on that tunnel's own SSLObject (the
callback's first argument), so one ClientHello's name is never another's.
"""

from __future__ import annotations

import ssl

__all__ = ["MAX_CLIENT_HELLO_BYTES", "NEED_MORE", "server_name"]

# A ClientHello is one TLS record, at most 16 KiB plus its header (a post-quantum key
# share makes it large, still under that); past this it is not one.
MAX_CLIENT_HELLO_BYTES = 16 * 1024 + 5
NEED_MORE = object()


class _Reading(ssl.SSLObject):
    """One ClientHello's reading: the name the callback saw, on the object itself."""

    seen: str | None = None


def _note_name(tls: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> int:
    if name and isinstance(tls, _Reading):
        tls.seen = name
    return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE  # stop here: the name is all we need


_CONTEXT: ssl.SSLContext | None = None


def _context() -> ssl.SSLContext:
    """The one server context every reading uses (made at the first ClientHello)."""
    global _CONTEXT  # made once, on first use (ssl is heavy to set up)
    if _CONTEXT is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.sslobject_class = _Reading
        context.sni_callback = _note_name
        _CONTEXT = context
    return _CONTEXT


def server_name(data: bytes) -> str | object | None:
    """The SNI of the ClientHello in `data`: the name (lower-case), None when it names
    none (or is not TLS), or NEED_MORE when `data` is not all of it yet."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = _context().wrap_bio(incoming, outgoing, server_side=True)
    assert isinstance(tls, _Reading)
    incoming.write(data)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        if len(data) >= MAX_CLIENT_HELLO_BYTES:
            return None
        return NEED_MORE
    except ssl.SSLError:
        pass
    return tls.seen.lower().rstrip(".") if tls.seen else None
