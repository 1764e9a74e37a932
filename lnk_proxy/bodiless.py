"""The body-less exchange: a request with no body, answered by a response framed by one
Content-Length, passed on without h11 (most of a kept-alive request's cost was h11's:
a state machine, event objects and a validating regex per field, on each side, twice).

Sans IO: a RequestHead (already admitted by lnk_proxy.head) and bytes in; bytes, a
ResponseHead, or "not body-less" out. Both sides are written anew from what was read here:
the host gets a request line and fields built from the admitted head, the program a
status line and fields built from the parsed response and exactly `length` bytes of
body. So what each side reads is exactly what this module read, and a difference
between this reading and another parser's cannot desynchronise either connection (the
response smuggling that a relay of the host's own bytes would allow).

Whatever this module does not take goes to h11 as before, decided before a byte is
sent (the request) or before a byte is passed back (the response): a request with a
body, an Expect or Upgrade field, HTTP/1.0 or HEAD; a response that is 1xx, 204 or
304, HTTP/1.0, chunked, without one Content-Length, with obs-fold, a tab, a control
character, a bare CR or LF, or a head larger than h11's own bound. It never refuses:
"not body-less" is its only verdict against a head, and h11 then reads it and decides as it
always did (tests/test_bodiless.py holds the two readings side by side). The fields
h11's readings send on are made here too (`outgoing`, `response_fields`: the hop-by-hop
ones out), so either reading drops the same fields.
"""

from __future__ import annotations

import re

import h11

from lnk_proxy.head import RequestHead

__all__ = [
    "HOP_FIELDS",
    "MAX_RESPONSE_HEAD_BYTES",
    "NEED_MORE",
    "BodilessResponse",
    "ResponseHead",
    "bodiless_request_bytes",
    "client_closes",
    "is_bodiless",
    "outgoing",
    "response_bytes",
    "response_fields",
    "response_head",
]

# Hop-by-hop fields (RFC 9110 7.6.1), never sent on; `upgrade` and `connection` are
# sent on only for a request that asks to switch protocols (WebSocket: h11's path).
HOP_FIELDS = frozenset({b"connection", b"proxy-connection", b"proxy-authorization",
                        b"keep-alive", b"te", b"trailer", b"upgrade"})
_HOP_NAMES = frozenset(name.decode("ascii") for name in HOP_FIELDS)
# A response head still incomplete past this many bytes goes to h11, which refuses it
# as before (its own bound on an incomplete event, h11.Connection's default).
MAX_RESPONSE_HEAD_BYTES = 16 * 1024
# Fields of a request that make it other than body-less: it has a body, asks for a 100
# first, or may ask to switch protocols.
_NOT_BODILESS_REQUEST = frozenset({"content-length", "transfer-encoding", "expect", "upgrade"})
# Statuses whose framing is not their Content-Length (RFC 9112 6.3): no body at all.
_NO_BODY = frozenset({204, 304})
# Content-Length's digits at most (as lnk_proxy.head takes a request's): past this it
# is no length a host sends.
_MAX_LENGTH_DIGITS = 18

NEED_MORE = object()

_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([0-9]{3})(?: ([\x20-\x7e\x80-\xff]*))?")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Inside a head with its CRLFs taken out: any control character (a tab, a bare CR or LF
# among them) makes it other than body-less.
_CONTROL = re.compile(rb"[\x00-\x1f\x7f]")


def is_bodiless(head: RequestHead) -> bool:
    """Whether `head` is taken here: HTTP/1.1, no body, nothing asked of the exchange
    beyond one response (HEAD's response has a length and no body: h11's)."""
    if head.version != "HTTP/1.1" or head.method == "HEAD":
        return False
    return not any(name in _NOT_BODILESS_REQUEST for name, _ in head.fields)


def client_closes(head: RequestHead) -> bool:
    """Whether the program asked for its connection to close after this response."""
    return any(name == "connection" and "close" in
               (token.strip().lower() for token in value.split(","))
               for name, value in head.fields)


def bodiless_request_bytes(head: RequestHead, path: str) -> bytes:
    """The request as sent to the host: its line with the origin-form `path`, Host
    first (as h11 writes it), then every field but the hop-by-hop ones, in order."""
    lines = [f"{head.method} {path} HTTP/1.1\r\n"]
    lines += [f"{name}: {value}\r\n" for name, value in head.fields if name == "host"]
    lines += [f"{name}: {value}\r\n" for name, value in head.fields
              if name != "host" and name not in _HOP_NAMES]
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


def outgoing(request: h11.Request, path: str, upgrade: bool) -> h11.Request:
    """The request h11 sends on: the hop-by-hop fields and Expect taken out; with
    `upgrade`, the switch asked of the upstream as the client asked it."""
    fields = [(name, value) for name, value in request.headers
              if name.lower() not in HOP_FIELDS and name.lower() != b"expect"]
    if upgrade:
        fields += [(b"connection", b"upgrade")] + [
            (name, value) for name, value in request.headers if name.lower() == b"upgrade"]
    return h11.Request(method=request.method, target=path, headers=fields)


def response_fields(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """A response's fields as the program gets them from h11's reading: every field but
    the hop-by-hop ones."""
    return [(name, value) for name, value in fields if name.lower() not in HOP_FIELDS]


class ResponseHead:
    """A body-less response's head: status, reason, fields (names lower-cased, in order),
    the body's length, and whether the host closes after it."""

    __slots__ = ("close", "fields", "length", "reason", "status")

    def __init__(self, status: int, reason: bytes, fields: list[tuple[bytes, bytes]],
                 length: int, close: bool) -> None:
        self.status = status
        self.reason = reason
        self.fields = fields
        self.length = length
        self.close = close


def response_head(buffer: bytes) -> tuple[ResponseHead, int] | object | None:
    """The response head at the start of `buffer` and where its body begins; NEED_MORE
    when the head has not all come; None when it is not body-less (h11 reads it)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if b"\n\n" in buffer or b"\n\r\n" in buffer:
            return None  # a head ended by a bare LF (h11 reads those)
        return NEED_MORE if len(buffer) <= MAX_RESPONSE_HEAD_BYTES else None
    if end + 4 > MAX_RESPONSE_HEAD_BYTES:
        return None
    head = buffer[:end]
    if _CONTROL.search(head.replace(b"\r\n", b"")):
        return None
    lines = head.split(b"\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        return None
    status = int(status_line[1])
    if status < 200 or status in _NO_BODY:
        return None
    fields: list[tuple[bytes, bytes]] = []
    length: int | None = None
    close = False
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            return None  # obs-fold (a line that starts with a space) among these
        name = name.lower()
        value = value.strip(b" ")
        if name == b"content-length":
            if length is not None or not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
        elif name == b"connection":
            close = close or b"close" in (token.strip().lower() for token in value.split(b","))
        fields.append((name, value))
    if length is None:
        return None
    return ResponseHead(status, status_line[2] or b"", fields, length, close), end + 4


def response_bytes(response: ResponseHead, close: bool) -> bytes:
    """The response's head as the program gets it: the status line, every field but the
    hop-by-hop ones, and `Connection: close` when the program's connection ends after
    it (as h11 adds it)."""
    lines = [b"HTTP/1.1 %d %s\r\n" % (response.status, response.reason)]
    lines += [name + b": " + value + b"\r\n" for name, value in response.fields
              if name not in HOP_FIELDS]
    if close:
        lines.append(b"Connection: close\r\n")
    lines.append(b"\r\n")
    return b"".join(lines)


class BodilessResponse:
    """One body-less request's response, read as its bytes come (sans IO): its head read
    here (`response_head`) and written anew, then exactly its Content-Length of body
    passed on, never a byte past its end (those are counted: the connection is not
    used again). The lane (lnk_proxy.lane, in callbacks) carries out every body-less
    exchange and reads its response through one of these, so it is framed in one place.
    `close`: the program's connection ends after it (`Connection: close` is added)."""

    __slots__ = ("close", "done", "extra", "held", "passed", "received", "remaining",
                 "response", "reusable")

    def __init__(self, close: bool) -> None:
        self.close = close
        # Its verdicts, set as each `feed` ends (plain attributes: the lane reads them
        # in its hot path). `done`: the whole response has been passed on; `reusable`:
        # its upstream connection may carry the next request (the response ended exactly
        # at its length, nothing after it, and the host does not close).
        self.done = False
        self.reusable = False
        self.received = b""  # the response's bytes until its head is whole (h11's, if
        self.response: ResponseHead | None = None  # it is not body-less)
        self.held = b""  # its head written anew, held until the body's first bytes
        self.remaining = 0  # of its body, not come yet
        self.passed = 0  # of its body, passed on
        self.extra = False  # bytes past its end came

    def feed(self, data: bytes) -> bytes | None:
        """What the program is sent for `data` now (b"": nothing yet); None when the
        response is not body-less (h11 reads it, from `received`)."""
        response = self.response
        if response is not None:
            body = data[:self.remaining]
            self.extra = self.extra or len(data) > self.remaining
            sent, self.held = self.held + body, b""
            self.remaining -= len(body)
            self.passed += len(body)
            self.done = not self.remaining
            self.reusable = self.done and not self.extra and not response.close
            return sent
        self.received += data
        found = response_head(self.received)
        if found is NEED_MORE:
            return b""
        if not isinstance(found, tuple):
            return None
        response, start = found
        self.response = response
        body = self.received[start:start + response.length]
        self.extra = len(self.received) > start + response.length
        self.remaining = response.length - len(body)
        self.done = not self.remaining
        self.reusable = self.done and not self.extra and not response.close
        head = response_bytes(response, self.close)
        if self.remaining and not body:
            # A head alone is not sent on: it goes with the body's first bytes, one send
            # and one wake of the program where there were two (a server that writes its
            # head, then its body, as most do).
            self.held = head
            return b""
        self.passed = len(body)
        return head + body
