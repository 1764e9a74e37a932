"""Where a request goes: the CONNECT target and the absolute-form URL, parsed strictly.

Sans IO. h11 does not validate a CONNECT target (`/`, `a:b`, `a:99999`, `user@a:1`, `*`
all pass it: docs/facts/http-tls.md), so this is the proxy's own. A name is kept as the
client wrote it, lower-cased and without a trailing dot; an IP literal is kept as an
address (IPv6 in brackets), and is checked like any resolved address later. Userinfo
is refused: it has no place in a proxy request, and `http://allowed@other/` is a
classic way to make two parsers disagree on the host.

TargetError is the only exception that leaves this module; its reasons are fixed text,
never what was refused (the reason goes to the wire's log, and the target is the
program's text: tests/test_log_bounds.py).
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["MAX_NAME_LENGTH", "Target", "TargetError", "parse_absolute", "parse_connect"]

# DNS's own limit on a name (RFC 1035: 255 octets on the wire, 253 as text).
MAX_NAME_LENGTH = 253
# A name as lower-cased text: labels of 1-63 of a-z 0-9 - _, none beginning or ending
# with a hyphen, joined by dots (matched in C, where a label was judged in Python).
_NAME = re.compile(r"(?:(?!-)[a-z0-9_-]{1,63}(?<!-)\.)*(?!-)[a-z0-9_-]{1,63}(?<!-)")


class TargetError(Exception):
    """A target the proxy refuses, with the reason in one line."""


class Target:
    """host: a lower-cased name without a trailing dot, or an address as text; address:
    the parsed address when the host is a literal; port: 1-65535."""

    __slots__ = ("address", "host", "port")

    def __init__(self, host: str, port: int,
                 address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> None:
        self.host = host
        self.port = port
        self.address = address

    def __repr__(self) -> str:
        return f"Target({self.host!r}, {self.port})"

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _port(text: str) -> int:
    if not text.isdigit() or not text.isascii() or len(text) > 5:
        raise TargetError("the port is not 1 to 5 decimal digits")
    port = int(text)
    if not 1 <= port <= 65535:
        raise TargetError(f"port out of range: {port}")
    return port


def _host(text: str) -> Target:
    """A host without port: [IPv6], IPv4 dotted quad, or a DNS name."""
    if text.startswith("["):
        if not text.endswith("]"):
            raise TargetError("an IPv6 literal without its closing bracket")
        inner = text[1:-1]
        if "%" in inner:
            raise TargetError("an IPv6 literal with a zone")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise TargetError("the bracketed host is not an IPv6 address") from None
        return Target(str(address), 0, address)
    name = text.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > MAX_NAME_LENGTH:
        raise TargetError("an empty or over-long host name")
    if not _NAME.fullmatch(name):
        raise TargetError("the host is not a name of labels of a-z 0-9 - _ joined by dots")
    if not "0" <= name[-1] <= "9":
        # Not a dotted quad (whose last octet ends in a digit), so not an address:
        # the common case, without IPv4Address raising for every name.
        return Target(name, 0, None)
    try:
        literal = ipaddress.IPv4Address(name)
    except ValueError:
        return Target(name, 0, None)
    return Target(str(literal), 0, literal)


def parse_connect(target: str) -> Target:
    """`host:port` of a CONNECT (RFC 9110 authority-form, no userinfo)."""
    if "@" in target or "/" in target:
        raise TargetError("a CONNECT target is host:port, nothing else")
    host, colon, port = target.rpartition(":")
    if not colon or not host:
        raise TargetError("a CONNECT target needs host:port")
    if ":" in host and not host.startswith("["):
        raise TargetError("an IPv6 address must be in brackets")
    found = _host(host)
    found.port = _port(port)
    return found


def parse_absolute(target: str) -> tuple[Target, str]:
    """`http://host[:port]/path?query` → (the target, the origin-form path to send)."""
    if target[:7].lower() != "http://":
        raise TargetError("an absolute-form request must be http:// (https goes by CONNECT)")
    rest = target[7:]
    authority = rest.partition("/")[0].partition("?")[0]  # up to its path or query
    path = rest[len(authority):]
    if "@" in authority:
        raise TargetError("a URL with userinfo (user@host) is refused")
    if "#" in target:
        raise TargetError("a request target with a fragment")
    if authority.startswith("["):
        end = authority.find("]")
        host_text, port_text = authority[:end + 1], authority[end + 1:]
        if port_text and not port_text.startswith(":"):
            raise TargetError("garbage after an IPv6 literal")
        port_text = port_text[1:]
    else:
        host_text, _, port_text = authority.partition(":")
    found = _host(host_text)
    found.port = _port(port_text) if port_text else 80
    if not path:
        path = "/"
    elif path.startswith("?"):
        path = "/" + path
    return found, path
