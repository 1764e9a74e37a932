"""The request head check: what the proxy admits before h11 (or anyone) reads a head.

Sans IO: bytes in, a RequestHead or a HeadError out. The grammar is RFC 9112's, taken
strictly, because a head two parsers read differently is how requests are smuggled: a
bare CR or LF (Go's and Node's servers end a line at a bare LF), any other control
character, obs-fold, Content-Length with Transfer-Encoding, a second Content-Length,
a Transfer-Encoding that is not exactly `chunked`, whitespace before a colon. Each is
refused, not cleaned: real clients end lines with CRLF, and cleaning would be one more
parser to get right. h11 alone accepts several of these (docs/facts/http-tls.md), so it only
ever sees heads this module admitted.

HeadError is the only exception that leaves this module.
"""

from __future__ import annotations

import re

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "HeadError", "RequestHead", "check_head",
           "head_end"]

# A request head larger than this is not a client's: browsers and curl stay under
# 16 KiB with cookies; nginx refuses past 4 x 8 KiB. Bounds the memory one slow
# connection holds.
MAX_HEAD_BYTES = 32 * 1024
# More fields than this is an attack on the parser, not a request.
MAX_HEADERS = 100

_TCHAR = (b"!#$%&'*+-.^_`|~0123456789"
          b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_VERSIONS = (b"HTTP/1.1", b"HTTP/1.0")
# Every byte a head may hold outside its CRLFs: a tab, and all but the control
# characters (0x00-0x1F, 0x7F). What `translate` leaves of a line after deleting these
# is what it must not hold.
_ADMITTED_BYTES = bytes([0x09, *range(0x20, 0x7F), *range(0x80, 0x100)])
# A request target's bytes: visible ASCII.
_VISIBLE_ASCII = bytes(range(0x21, 0x7F))
# The first byte of a head the proxy refuses, in one scan (in C): a control character
# (not a tab, CR or LF), an LF not after a CR, a CR not before an LF.
_STRAY_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|(?<!\r)\n|\r(?!\n)")


class HeadError(Exception):
    """A head the proxy refuses, with the reason in one line (for the 400 and the log)."""


class RequestHead:
    """An admitted head: method, target and version as sent, and its fields with names
    lower-cased, in order."""

    __slots__ = ("fields", "method", "target", "version")

    def __init__(self, method: str, target: str, version: str,
                 fields: list[tuple[str, str]]) -> None:
        self.method = method
        self.target = target
        self.version = version
        self.fields = fields

    def get(self, name: str) -> list[str]:
        return [value for field, value in self.fields if field == name]


def head_end(buffer: bytes | bytearray) -> int:
    """Where the head ends (the index after CRLF CRLF), -1 if not yet, or HeadError when
    a bare LF ends it first or it is too long already."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if b"\n\n" in buffer or b"\n\r\n" in buffer.replace(b"\r\n\r\n", b""):
            raise HeadError("a line of the request head ends in a bare LF")
        if len(buffer) > MAX_HEAD_BYTES:
            raise HeadError(f"the request head is larger than {MAX_HEAD_BYTES} bytes")
        return -1
    if end + 4 > MAX_HEAD_BYTES:
        raise HeadError(f"the request head is larger than {MAX_HEAD_BYTES} bytes")
    return end + 4


def _is_token(value: bytes) -> bool:
    return bool(value) and not value.translate(None, _TCHAR)


def _stray_byte_refusal(body: bytes) -> HeadError:
    """The refusal of a head body that holds a bare LF, a bare CR or another control
    character: of the first such byte (the one a scan byte by byte, in that order,
    meets first)."""
    found = _STRAY_BYTE.search(body)
    # None cannot be (`check_head` calls this when the translate left such a byte);
    # were it so, the head is refused all the same.
    byte = body[found.start()] if found is not None else 0x00
    if byte == 0x0A:
        return HeadError("the request head has a bare LF")
    if byte == 0x0D:
        return HeadError("the request head has a bare CR")
    return HeadError(f"the request head has a control character (0x{byte:02x})")


def check_head(head: bytes) -> RequestHead:
    """Admit `head` (everything up to and including the blank line) or raise HeadError."""
    if len(head) > MAX_HEAD_BYTES:
        raise HeadError(f"the request head is larger than {MAX_HEAD_BYTES} bytes")
    if not head.endswith(b"\r\n\r\n"):
        raise HeadError("the request head does not end with a blank line (CRLF CRLF)")
    body = head[:-4]
    lines = body.split(b"\r\n")
    # CRLFs never overlap, so what is left between them holds a CR or an LF only where
    # the head has a bare one: with no such byte nor control character (the common
    # case, found by one join and one translate in C) there is nothing to look for.
    if b"".join(lines).translate(None, _ADMITTED_BYTES):
        raise _stray_byte_refusal(body)
    method, target, version = _request_line(lines[0])
    if len(lines) - 1 > MAX_HEADERS:
        raise HeadError(f"more than {MAX_HEADERS} header fields")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        # Each rule of `_field_refusal` at once (an empty or folded line has no token
        # before its colon); a head with a line refused is judged again there, line by
        # line and rule by rule, for the reason.
        name, colon, value = line.partition(b":")
        value = value.strip(b" \t")
        if not colon or not name or name.translate(None, _TCHAR) or b"\t" in value:
            raise _field_refusal(lines[1:])
        fields.append((name.lower().decode("ascii"), value.decode("latin-1")))
    _check_framing(fields, version)
    return RequestHead(method, target, version, fields)


def _field_refusal(lines: list[bytes]) -> HeadError:
    """The refusal of the first field line refused, by the first rule it breaks."""
    for line in lines:
        if not line:
            return HeadError("an empty line inside the request head")
        if line[0] in b" \t":
            return HeadError("a header line is folded (obs-fold)")
        name, colon, value = line.partition(b":")
        if not colon:
            return HeadError("a header line has no colon")
        if not _is_token(name):
            return HeadError("a header name is not a token (or has space before the colon)")
        if b"\t" in value.strip(b" \t"):
            return HeadError("a header value has a tab inside it")
    # Not reached (a line `check_head` refused breaks one of the rules above); were it,
    # the head is refused all the same.
    return HeadError("a header line is refused")


def _request_line(line: bytes) -> tuple[str, str, str]:
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HeadError("the request line is not METHOD SP TARGET SP VERSION")
    method, target, version = parts
    if not _is_token(method):
        raise HeadError("the method is not a token")
    if not target or target.translate(None, _VISIBLE_ASCII):
        raise HeadError("the request target has a character outside visible ASCII")
    if version not in _VERSIONS:
        raise HeadError("the version is not HTTP/1.1 or HTTP/1.0")
    return method.decode("ascii"), target.decode("ascii"), version.decode("ascii")


def _check_framing(fields: list[tuple[str, str]], version: str) -> None:
    lengths = [value for name, value in fields if name == "content-length"]
    encodings = [value for name, value in fields if name == "transfer-encoding"]
    hosts = [value for name, value in fields if name == "host"]
    if len(lengths) > 1:
        raise HeadError("more than one Content-Length")
    if lengths and encodings:
        raise HeadError("both Content-Length and Transfer-Encoding")
    if lengths and not (lengths[0].isdigit() and lengths[0].isascii()
                        and len(lengths[0]) <= 18):
        raise HeadError("Content-Length is not a number")
    if len(encodings) > 1 or (encodings and encodings[0].lower() != "chunked"):
        raise HeadError("Transfer-Encoding other than one `chunked`")
    if encodings and version != "HTTP/1.1":
        raise HeadError("Transfer-Encoding in an HTTP/1.0 request")
    if len(hosts) > 1:
        raise HeadError("more than one Host")
    if version == "HTTP/1.1" and not hosts:
        raise HeadError("an HTTP/1.1 request without Host")
