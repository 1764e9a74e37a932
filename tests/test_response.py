"""A body-less request's response, read one way (lnk_proxy.response): the body-less
reading first, else h11's (lnk_common.bodies.ResponsePassing) from every byte read.
Playbooks (bytes in, the program's bytes and the reading's verdicts out) and Hypothesis
properties: a response cut anywhere gives the same bytes and verdicts as read whole, or
the same refusal (h11's RemoteProtocolError), never another exception; and over both
sides' bytes, the client's through the connection's machine (lnk_proxy.connection) and
each upstream's through a Response, as the lane carries them out."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_proxy.bodiless import client_closes
from lnk_proxy.connection import ClientConnection, Forward, NeedData, Refuse
from lnk_proxy.response import Response
from tests.conftest import fuzz

REQUEST = b"GET /x HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\n\r\n"
CLOSING = b"GET /x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n"


def _reading(raw: bytes = REQUEST) -> Response:
    return Response(raw, "/x", h11.Connection(h11.CLIENT), close=b"close" in raw.lower())


def _fed(reading: Response, *parts: bytes) -> bytes:
    return b"".join(reading.feed(part) for part in parts)


# -- playbooks --------------------------------------------------------------------------------


def test_a_bodiless_response_is_written_anew_and_its_upstream_kept() -> None:
    reading = _reading()
    assert _fed(reading, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Seen: yes\r\n\r\n",
                b"hello") == (b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-seen: yes\r\n\r\n"
                              b"hello")
    assert reading.done and reading.reusable and not reading.close and not reading.h11_reads
    assert reading.passed == 5 and reading.begun


def test_a_chunked_response_is_h11s_from_every_byte_read() -> None:
    reading = _reading()
    assert reading.feed(b"HTTP/1.1 200 OK\r\nTransfer-Enc") == b""
    assert not reading.h11_reads and not reading.begun
    assert reading.feed(b"oding: chunked\r\nConnection: keep-alive\r\n\r\n5\r\nfi") == (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"  # no hop-by-hop field
        b"2\r\nfi\r\n")  # passed as it comes
    assert reading.feed(b"rst\r\n0\r\n\r\n") == b"3\r\nrst\r\n0\r\n\r\n"
    assert reading.h11_reads and reading.done and reading.reusable and not reading.close
    assert reading.passed == 5 and reading.begun
    reading.next_cycle()
    assert reading.upstream.our_state is h11.IDLE  # it takes the next request


def test_a_response_framed_by_its_connections_end_ends_there_and_is_not_kept() -> None:
    reading = _reading()
    assert reading.feed(b"HTTP/1.1 200 OK\r\nX: y\r\n\r\nabc") == (
        b"HTTP/1.1 200 OK\r\nx: y\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
    assert not reading.done
    assert reading.feed(b"") == b"0\r\n\r\n"
    assert reading.done and not reading.reusable and not reading.close


def test_the_program_that_asked_for_the_close_is_told_so_by_h11_too() -> None:
    reading = _reading(CLOSING)
    sent = reading.feed(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert sent == b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n"
    assert reading.done and reading.close and reading.reusable


def test_bytes_past_an_h11_response_keep_its_upstream_from_the_next_request() -> None:
    reading = _reading()
    assert reading.feed(b"HTTP/1.1 304 Not Modified\r\n\r\nHTTP/1.1 200 OK\r\n") == (
        b"HTTP/1.1 304 Not Modified\r\n\r\n")
    assert reading.done and not reading.reusable and not reading.close


def test_a_100_before_the_response_is_not_passed() -> None:
    reading = _reading()
    assert reading.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"
                        b"Content-Length: 2\r\n\r\nok") == (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
    assert reading.done and reading.reusable


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 abc\r\n\r\n",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
])
def test_bytes_h11_refuses_are_its_refusal_before_a_head(answer: bytes) -> None:
    """No 101 for a request that did not ask to switch: h11 refuses it, as the task's
    exchange did; no response head was read (a kept upstream is asked again)."""
    reading = _reading()
    with pytest.raises(h11.RemoteProtocolError):
        reading.feed(answer)
    assert not reading.begun


def test_the_end_before_h11_reads_is_the_callers() -> None:
    for before in (b"", b"HTTP/1.1 200 OK\r\nContent-Le", b"HTTP/1.1 200 OK\r\n"
                   b"Content-Length: 9\r\n\r\nabc"):
        reading = _reading()
        reading.feed(before)
        assert reading.feed(b"") == b""
        assert not reading.done and not reading.reusable and not reading.h11_reads


def test_a_body_cut_short_by_the_end_is_h11s_refusal() -> None:
    reading = _reading()
    reading.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
    with pytest.raises(h11.RemoteProtocolError):
        reading.feed(b"")
    assert reading.begun  # a head was read: not asked again


# -- the property --------------------------------------------------------------------------

_RESPONSES = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nX: y\r\n\r\nread to the end",
    b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n!",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcEXTRA",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n folded\r\n\r\nabc",
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
    b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
]


def _as_read(sent: bytes) -> tuple[object, ...]:
    """The program's bytes as the program reads them (h11's client side): the head, the
    body whole, and whether the response ended (a chunked body's pieces may fall
    otherwise when its bytes come otherwise: the program reads the same)."""
    program = h11.Connection(h11.CLIENT)
    program.send(h11.Request(method="GET", target="/x", headers=[("host", "a.example")]))
    program.send(h11.EndOfMessage())
    program.receive_data(sent)
    head: object = None
    body = b""
    while True:
        event = program.next_event()
        if isinstance(event, h11.Response):
            head = (event.status_code, list(event.headers))
        elif isinstance(event, h11.Data):
            body += event.data
        else:
            return head, body, isinstance(event, h11.EndOfMessage)


def _whole(reading: Response, pieces: list[bytes], end: bool) -> tuple[object, ...]:
    """What the reading gives for `pieces` (then the upstream's end, with `end`): the
    program's bytes as it reads them and the reading's verdicts, or h11's refusal."""
    sent = b""
    try:
        for piece in [*pieces, *([b""] if end else [])]:
            sent += reading.feed(piece)
    except h11.RemoteProtocolError:
        return ("refused", reading.begun)
    return (_as_read(sent), reading.done, reading.done and reading.reusable,
            reading.done and reading.close, reading.passed, reading.begun)


@fuzz(4)
@given(response=st.sampled_from(_RESPONSES), cuts=st.lists(st.integers(0, 200), max_size=6),
       end=st.booleans(), closing=st.booleans(), noise=st.binary(max_size=40))
def test_a_response_cut_anywhere_reads_as_the_whole(
        response: bytes, cuts: list[int], end: bool, closing: bool, noise: bytes) -> None:
    for data in (response, noise + response, response + noise):
        pieces = _cut(data, cuts)
        raw = CLOSING if closing else REQUEST
        assert _whole(_reading(raw), pieces, end) == _whole(_reading(raw), [data], end)


# -- both sides' bytes: the connection's machine and the response's reading ------------

_HEADS = [
    b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n",
    b"GET http://a.example/last HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
    b"POST http://a.example/body HTTP/1.1\r\nHost: a.example\r\nContent-Length: 2\r\n\r\nhi",
    b"GET http://a.example/other HTTP/1.1\r\nHost: b.example\r\n\r\n",
    b"GET http://a.example/te HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: gzip\r\n\r\n",
    b"GET /origin-form HTTP/1.1\r\nHost: a.example\r\n\r\n",
]


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    return [data[start:stop] for start, stop in
            zip([0, *points], [*points, len(data)], strict=True) if stop > start]


def _conversation(client: list[bytes], answers: list[list[bytes]], end: bool
                  ) -> list[object]:
    """A client connection's bytes (`client`, in pieces, then its end) through the
    connection's machine, each body-less request answered by the next of `answers` (in
    pieces, then the upstream's end with `end`) through one Response, as the lane
    carries them out: what the program gets, request by request, until the connection
    ends or a request is another's (h11's exchange, a refusal)."""
    connection = ClientConnection()
    pending, replies = list(client), list(answers)
    upstream = h11.Connection(h11.CLIENT)
    seen: list[object] = []
    while True:
        command = connection.next_command()
        if isinstance(command, NeedData):
            connection.receive_data(pending.pop(0) if pending else b"")
            continue
        if isinstance(command, Refuse):
            return [*seen, (command.refusal.status, command.refusal.reason)]
        if not isinstance(command, Forward) or command.parsed is not None or not replies:
            return [*seen, type(command).__name__]  # Closed, h11's exchange, unanswered
        reading = Response(command.raw, command.path, upstream,
                           close=client_closes(command.head))
        verdict = _whole(reading, replies.pop(0), end)
        seen.append((command.path, verdict))
        if verdict[0] == "refused" or not reading.done or reading.close:
            return seen
        if reading.reusable:
            reading.next_cycle()
        else:
            upstream = h11.Connection(h11.CLIENT)
        connection.request_done(b"")


@fuzz(4)
@given(heads=st.lists(st.sampled_from(_HEADS), min_size=1, max_size=5),
       responses=st.lists(st.sampled_from(_RESPONSES), max_size=5),
       client_cuts=st.lists(st.integers(0, 400), max_size=8),
       upstream_cuts=st.lists(st.integers(0, 200), max_size=4), end=st.booleans())
def test_both_sides_cut_anywhere_give_the_program_what_they_give_whole(
        heads: list[bytes], responses: list[bytes], client_cuts: list[int],
        upstream_cuts: list[int], end: bool) -> None:
    """Any conversation, the client's bytes and each upstream's response cut anywhere:
    the machine's requests and refusals and the program's responses (as it reads them)
    are the ones the bytes give read whole; nothing raises but h11's refusal of an
    upstream's bytes, which ends the call."""
    client = b"".join(heads)
    whole = _conversation([client], [[response] for response in responses], end)
    cut = _conversation(_cut(client, client_cuts),
                        [_cut(response, upstream_cuts) for response in responses], end)
    assert cut == whole
