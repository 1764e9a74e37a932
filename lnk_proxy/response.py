"""A body-less request's response, read one way (sans IO): its bytes in, as the upstream
sends them; the program's bytes out.

The body-less reading (lnk_proxy.bodiless.BodilessResponse) reads it first. When that
says "not body-less" (chunked, no Content-Length, 1xx, 204, 304, HTTP/1.0, a field it
does not take), h11 reads it from every byte read so far, as lnk_common.bodies's
ResponsePassing reads every other response of the proxy and the relay: h11's client
side of the upstream is told the request that was sent (it was written anew from the
admitted head, byte for byte what h11 writes), and h11's server side of the program's
connection is given the request's raw head, so each side frames the response as the
task's exchange does. The lane (lnk_proxy.lane) carries every body-less exchange out in
callbacks with one of these, whatever its response: the task is never handed a response.

Trust: the upstream's bytes are untrusted. Each reading writes the response anew from
what it read; neither relays a byte it did not frame. h11's RemoteProtocolError escapes
`feed` (its bytes are no response); anything else is a bug.
"""

from __future__ import annotations

import h11

from lnk_common.bodies import PASSED, ResponsePassing
from lnk_proxy.bodiless import BodilessResponse, outgoing, response_fields

__all__ = ["Response"]


class Response:
    """One body-less request's response. `raw`: the request's admitted head as the
    client sent it; `path`: its target upstream; `close`: the program asked for its
    connection to close after it; `upstream`: h11's client side of the upstream
    connection, idle (told the request only if the response is h11's).

    Its verdicts (`done`, `reusable`, `close`, `passed`) are plain attributes, set from
    the reading that reads it as each `feed` ends: the lane reads them in its hot path, a
    kept-alive request's, where a property each, asking the readings' own properties,
    cost six calls a request (docs/decisions/0036-one-request-path.md)."""

    __slots__ = ("bodiless", "close", "done", "passed", "passing", "path", "raw",
                 "received", "responded", "reusable", "upstream")

    def __init__(self, raw: bytes, path: str, upstream: h11.Connection, *,
                 close: bool) -> None:
        self.raw = raw
        self.path = path
        self.upstream = upstream
        self.bodiless = BodilessResponse(close)
        self.passing: ResponsePassing | None = None
        self.received = 0  # of the body, passed on (h11's count, once it reads)
        self.responded = False  # h11 read a response head
        self.done = False  # the whole response has been passed on
        self.passed = 0  # bytes of its body passed on
        # Its upstream connection may carry the next request: the response ended exactly
        # at its end, nothing after it, neither side closes, and (h11's) the upstream's
        # end has not come (a response framed by it ends there).
        self.reusable = False
        # The program's connection ends after it: it asked to, or (h11's) h11 says its
        # side cannot take another request.
        self.close = close

    def feed(self, data: bytes) -> bytes:
        """What the program is sent for the upstream's `data` now (b"": nothing yet).
        `data` b"" is the upstream's end: h11's to read once it reads (a response
        framed by its connection's end ends there), else the caller's."""
        passing = self.passing
        if passing is None:
            if not data:
                return b""  # the end before h11 reads: no head, or a body-less body cut short
            bodiless = self.bodiless
            sent = bodiless.feed(data)
            if sent is not None:
                self.done, self.reusable = bodiless.done, bodiless.reusable
                self.passed = bodiless.passed
                return sent
            passing = self.passing = self._h11()
            data = bodiless.received
        try:
            return passing.feed(data)
        finally:  # as they stand, h11's refusal too (what it passed before is counted)
            self._h11_verdicts(passing)

    @property
    def h11_reads(self) -> bool:
        """h11 reads the response (it was not body-less): the upstream's end is its."""
        return self.passing is not None

    def _h11(self) -> ResponsePassing:
        """h11's reading from here on: the program's side given the request's head (its
        body is none), the upstream's told the request that was sent."""
        client = h11.Connection(h11.SERVER)
        client.receive_data(self.raw)
        request = client.next_event()  # h11 takes every body-less head
        assert isinstance(request, h11.Request)
        end = client.next_event()  # and reads its body as none
        assert isinstance(end, h11.EndOfMessage)
        self.upstream.send(outgoing(request, self.path, False))
        self.upstream.send(h11.EndOfMessage())
        return ResponsePassing(self.upstream, client, self, fields=response_fields)

    def _h11_verdicts(self, passing: ResponsePassing) -> None:
        """The verdicts as h11's two sides say them now."""
        upstream, client = self.upstream, passing.client
        left, ended = upstream.trailing_data  # bytes past its end; its end came
        whole = passing.ended == PASSED
        self.done = passing.ended is not None
        self.passed = self.received
        self.reusable = (whole and upstream.our_state is h11.DONE
                         and upstream.their_state is h11.DONE and not left and not ended)
        self.close = (not whole or client.our_state is not h11.DONE
                      or client.their_state is not h11.DONE)

    @property
    def begun(self) -> bool:
        """A response head was read (the request is not sent again)."""
        return self.bodiless.response is not None or self.responded

    def next_cycle(self) -> None:
        """The upstream's h11 state goes round for its next request (a reusable one
        that h11 read)."""
        if self.passing is not None:
            self.upstream.start_next_cycle()
