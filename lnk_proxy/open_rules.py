"""The open verb's rules: which URL a program may ask to open, and how it is shown (sans IO).

Job: a program inside asks the proxy to open one URL in the person's browser. This module
(1) checks the URL (`check_url`): http or https, a host, no userinfo, bounded, no control
byte, no backslash; (2) makes the one form that is both shown and opened (`display`,
`OpenUrl.opened`): plain printable ASCII, the host in punycode, every other non-ASCII
character (bidi controls, zero-width and invisible characters, C1 controls, homoglyphs)
%-escaped as its UTF-8 bytes, a space as %20, nothing cut; (3) finds a login's callback
port (`callback_port`): a `redirect_uri`/`redirect_url` to `http://localhost:<port>` or
`http://127.0.0.1:<port>`.

Trust: the URL is the sandboxed program's and is hostile; the person reads the shown form
and decides. So the opener is given exactly the shown form, never the raw one: what the
person read is what opens. Where a browser (the WHATWG URL standard) would read a URL
differently from how it looks, the URL is refused, not cleaned: a backslash (read as '/'),
an '@' anywhere in the authority (userinfo: `https://good.example@evil.example`), a '%'
in the host (decoded by browsers), a host that is a number but not a dotted IPv4 address
(`2130706433` and `0x7f.1` are 127.0.0.1 to a browser), `https:evil.example` (no '//',
which browsers accept), a control byte (tab and newline are silently dropped by browsers,
so `java<TAB>script:` would pass as something else).

Order: check_url(raw bytes) → OpenUrl (refused: OpenRuleError) → display(url) shown in
the question → on yes, url.opened given to the opener; callback_port(url) on the same
checked URL.

IDNA: Python's standard `encodings.idna` (IDNA 2003, nameprep); the `idna` package is not
installed. Its limits: IDNA 2003 maps some names browsers keep (UTS 46 non-transitional:
'ß' is `xn--zca` to a browser, "ss" to nameprep) and silently drops zero-width
characters. So a host that nameprep would rewrite (anything but lowercasing) is refused,
never shown rewritten: a host shown is always the punycode of exactly the name given.

OpenRuleError is the only exception that leaves this module. Its reason is one line that
never quotes the URL (a URL can carry the data a program means to send out).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import unquote_plus

from lnk_proxy.refusal import StatusError

__all__ = [
    "MAX_URL_BYTES",
    "OpenRuleError",
    "OpenUrl",
    "callback_port",
    "callback_target",
    "check_url",
    "display",
]

# An 8 KiB URL (the test) is shown whole, never cut: a cut URL hides its end, and
# the end (a query) is where data leaves. Real authorization URLs (scopes, PKCE, state)
# are a few KiB; 16 KiB leaves room and still bounds the question the person reads and
# the argument given to the opener. Applied to the raw URL and to the shown form (which
# %-escaping makes up to three times longer), so neither grows past it.
MAX_URL_BYTES = 16 * 1024

_SCHEMES = ("http", "https")
# RFC 3986: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
# What a host may hold once in ASCII (after IDNA): letters, digits, '-', '.', '_'.
# Anything else (WHATWG's forbidden host code points and more) is refused.
_HOST_ASCII = re.compile(r"[a-z0-9._-]+")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
# WHATWG: a host whose last label is a number (decimal, 0x hex, or octal-looking) is
# parsed as IPv4, so it must then be a plain dotted quad.
_NUMERIC_LABEL = re.compile(r"(?:0[xX][0-9A-Fa-f]*|[0-9]+)")
_REDIRECT_NAMES = ("redirect_uri", "redirect_url")
# A loopback callback: exactly this form, lowercase, an explicit port without leading
# zeros, then nothing or a path, query or fragment.
_CALLBACK = re.compile(r"http://(localhost|127\.0\.0\.1):([1-9][0-9]{0,4})(?:[/?#].*)?",
                       re.DOTALL)


class OpenRuleError(StatusError):
    """A URL refused: an HTTP status and one line that never quotes the URL."""


def _refuse(reason: str) -> OpenRuleError:
    return OpenRuleError(400, reason)


def _printable_ascii(text: str) -> bool:
    return all(0x21 <= ord(character) <= 0x7E for character in text)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenUrl:
    """A checked URL. `opened` is the one form shown and opened: printable ASCII, the host
    in punycode, everything else non-ASCII %-escaped. `host` is that ASCII host (IPv6 in
    brackets), the only part the wire's log keeps."""

    scheme: str
    host: str
    port: int | None
    opened: str

    def __post_init__(self) -> None:
        if self.scheme not in _SCHEMES:
            raise ValueError("an OpenUrl's scheme is http or https")
        if not self.opened or not _printable_ascii(self.opened):
            raise ValueError("an OpenUrl is printable ASCII")
        if len(self.opened) > MAX_URL_BYTES:
            raise ValueError("an OpenUrl is bounded")


def _escape(text: str) -> str:
    """Printable ASCII kept; a space and every non-ASCII character %-escaped as its UTF-8
    bytes (uppercase hex, as RFC 3986 recommends). A '%' already there is kept: it is
    printable and opens as it is shown."""
    out = []
    for character in text:
        if 0x21 <= ord(character) <= 0x7E:
            out.append(character)
        else:
            out.append("".join(f"%{byte:02X}" for byte in character.encode("utf-8")))
    return "".join(out)


def _ascii_host(host: str) -> str:
    """The host as shown and opened: an IP literal as it is (checked), a name in IDNA
    ASCII, lowercased. Refused when a browser would read it as another host."""
    if "%" in host:
        raise _refuse("a '%' in the host is refused (a browser decodes it)")
    if host.startswith("["):
        if not host.endswith("]"):
            raise _refuse("an IPv6 host must be in brackets")
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise _refuse("the IPv6 host is not an IPv6 address") from None
        return host.lower()
    if "[" in host or "]" in host:
        raise _refuse("a bracket in the host is refused")
    labels = host.rstrip(".").split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        try:
            address = ipaddress.IPv4Address(host)
        except ValueError:
            raise _refuse("a numeric host must be a dotted IPv4 address (a.b.c.d)") from None
        return str(address)
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
        round_trip = ascii_host.encode("ascii").decode("idna")
    except UnicodeError:
        raise _refuse("a host IDNA cannot encode or decode is refused") from None
    # A name given in punycode already (`xn--…`) is shown as given; a name given in
    # Unicode must come back from its punycode as itself, lowercased (nameprep dropping
    # a zero-width character or mapping 'ß' to "ss" would open a name not given).
    if not host.isascii() and round_trip.lower() != host.lower():
        raise _refuse("a host IDNA would rewrite is refused (it would open another name)")
    if not _HOST_ASCII.fullmatch(ascii_host):
        raise _refuse("a host may hold only letters, digits, '-', '.' and '_'")
    return ascii_host


def check_url(raw: bytes) -> OpenUrl:
    """The URL a program asks to open, checked, in the one form shown and opened."""
    if not raw:
        raise _refuse("an empty URL is refused")
    if len(raw) > MAX_URL_BYTES:
        raise _refuse(f"a URL longer than {MAX_URL_BYTES} bytes is refused")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse("a URL that is not UTF-8 is refused") from None
    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in text):
        raise _refuse("a control character in the URL is refused")
    if "\\" in text:
        raise _refuse("a backslash in the URL is refused (a browser reads it as '/')")
    if text.startswith("//"):
        raise _refuse("a scheme-relative URL ('//host') is refused: http:// or https:// only")
    scheme, colon, rest = text.partition(":")
    if not colon or not _SCHEME.fullmatch(scheme):
        raise _refuse("a relative URL is refused: http:// or https:// only")
    scheme = scheme.lower()
    if scheme not in _SCHEMES:
        raise _refuse("only http and https URLs are opened")
    if not rest.startswith("//"):
        raise _refuse("after the scheme must come '//' and the host")
    after = rest[2:]
    end = len(after)
    for delimiter in "/?#":
        at = after.find(delimiter)
        if at != -1:
            end = min(end, at)
    authority, tail = after[:end], after[end:]
    if "@" in authority:
        raise _refuse("a URL with userinfo ('@' before the host) is refused")
    host, port = authority, None
    if not authority.endswith("]") and ":" in authority:
        host, _, port_text = authority.rpartition(":")
        if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
            raise _refuse("a port must be 1 to 65535 in decimal digits")
        port = int(port_text)
    if not host or host.startswith(".") or ".." in host:
        raise _refuse("a URL without a host is refused")
    ascii_host = _ascii_host(host)
    shown = f"{scheme}://{ascii_host}{'' if port is None else f':{port}'}{_escape(tail)}"
    if len(shown) > MAX_URL_BYTES:
        raise _refuse(f"a URL longer than {MAX_URL_BYTES} bytes once escaped is refused")
    return OpenUrl(scheme=scheme, host=ascii_host, port=port, opened=shown)


def display(url: OpenUrl) -> str:
    """The URL as the person reads it: exactly what opens (`url.opened`), whole."""
    return url.opened


def callback_port(url: OpenUrl) -> int | None:
    """The port of `callback_target`, or None."""
    target = callback_target(url)
    return None if target is None else target[1]


def callback_target(url: OpenUrl) -> tuple[str, int] | None:
    """Where a login's callback comes back to ("localhost" or "127.0.0.1", and the
    port), or None: the query's `redirect_uri` or
    `redirect_url` (names and values %-decoded once, '+' as a space, as a server reads a
    query) when it is `http://localhost:<port>` or `http://127.0.0.1:<port>` exactly,
    lowercase, with an explicit port 1-65535 and nothing else before the path. Anything
    else (https, another host, `localhost.`, `127.1`, `[::1]`, `0.0.0.0`, userinfo, no
    port) is None: nothing is listened for. Redirect parameters that disagree are
    refused: which one the site uses is unknown."""
    query = url.opened.partition("#")[0].partition("?")[2]
    redirects = set()
    for parameter in query.split("&") if query else ():
        name, _, value = parameter.partition("=")
        if unquote_plus(name) in _REDIRECT_NAMES:
            redirects.add(unquote_plus(value))
    if len(redirects) > 1:
        raise _refuse("the URL names more than one redirect")
    if not redirects:
        return None
    redirect = redirects.pop()
    match = _CALLBACK.fullmatch(redirect)
    if match is None:
        return None
    port = int(match.group(2))
    return (match.group(1), port) if port <= 65535 else None
