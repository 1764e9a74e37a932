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
    connection, idle (told the request only if the response is h11's)."""

    __slots__ = ("bodiless", "passing", "path", "raw", "received", "responded",
                 "upstream")

    def __init__(self, raw: bytes, path: str, upstream: h11.Connection, *,
                 close: bool) -> None:
        self.raw = raw
        self.path = path
        self.upstream = upstream
        self.bodiless = BodilessResponse(close)
        self.passing: ResponsePassing | None = None
        self.received = 0  # of the body, passed on (h11's count, once it reads)
        self.responded = False  # h11 read a response head

    def feed(self, data: bytes) -> bytes:
        """What the program is sent for the upstream's `data` now (b"": nothing yet).
        `data` b"" is the upstream's end: h11's to read once it reads (a response
        framed by its connection's end ends there), else the caller's."""
        passing = self.passing
        if passing is not None:
            return passing.feed(data)
        if not data:
            return b""  # the end before h11 reads: no head, or a body-less body cut short
        sent = self.bodiless.feed(data)
        if sent is not None:
            return sent
        passing = self.passing = self._h11()
        return passing.feed(self.bodiless.received)

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

    @property
    def begun(self) -> bool:
        """A response head was read (the request is not sent again)."""
        return self.bodiless.response is not None or self.responded

    @property
    def done(self) -> bool:
        """The whole response has been passed on."""
        if self.passing is not None:
            return self.passing.ended is not None
        return self.bodiless.done

    @property
    def passed(self) -> int:
        """Bytes of its body passed on."""
        return self.received if self.passing is not None else self.bodiless.passed

    @property
    def reusable(self) -> bool:
        """Its upstream connection may carry the next request: the response ended
        exactly at its end, nothing after it, neither side closes, and the upstream's
        end has not come (a response framed by it ends there)."""
        passing = self.passing
        if passing is None:
            return self.bodiless.reusable
        upstream = self.upstream
        left, ended = upstream.trailing_data  # bytes past its end; its end came
        return (passing.ended == PASSED and upstream.our_state is h11.DONE
                and upstream.their_state is h11.DONE and not left and not ended)

    @property
    def close(self) -> bool:
        """The program's connection ends after it (it asked to, or h11 says its side
        cannot take another request)."""
        passing = self.passing
        if passing is None:
            return self.bodiless.close
        client = passing.client
        return (passing.ended != PASSED or client.our_state is not h11.DONE
                or client.their_state is not h11.DONE)

    def next_cycle(self) -> None:
        """The upstream's h11 state goes round for its next request (a reusable one
        that h11 read)."""
        if self.passing is not None:
            self.upstream.start_next_cycle()
