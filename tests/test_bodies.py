"""The body read and the response stream the proxy and the relay share (lnk_common.bodies),
over real loopback connections: each limit at its edge, each refusal with the caller's
reason, a 100 for a client that waits for one, and a response passed as it comes with
its counts kept current when it breaks off."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import h11
import pytest

from lnk_common.bodies import (
    PASSED,
    HeldBodies,
    collect_body,
    next_event,
    pass_response,
    read_body,
)
from lnk_common.wire import Refused

Pair = tuple[asyncio.StreamReader, asyncio.StreamWriter, asyncio.StreamReader,
             asyncio.StreamWriter]
LIMIT = 1000
TOO_LARGE = Refused(413, "the body is over 1000 bytes (the test's limit)")


async def _pair() -> Pair:
    """(the proxy's reader and writer, the program's reader and writer), on loopback."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future())

    async def take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(take, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    program_reader, program_writer = await asyncio.open_connection("127.0.0.1", port)
    reader, writer = await asyncio.wait_for(accepted, 10)
    server.close()
    return reader, writer, program_reader, program_writer


def _reads(reader: asyncio.StreamReader, seconds: float = 10.0
           ) -> Callable[[], Awaitable[bytes]]:
    return lambda: asyncio.wait_for(reader.read(65536), seconds)


async def _read_body(sent: bytes, *, take: Callable[[int], None] | None = None,
                     seconds: float = 10.0, close: bool = False) -> tuple[bytes, bytes]:
    """The body `read_body` takes from a request the program sent (`sent`: head and
    body, as bytes), and what the program was sent back meanwhile."""
    reader, writer, program_reader, program_writer = await _pair()
    taken: list[int] = []
    try:
        program_writer.write(sent)
        if close:
            program_writer.write_eof()
        client = h11.Connection(h11.SERVER)
        request = await next_event(client, _reads(reader))
        assert isinstance(request, h11.Request)
        body = await read_body(request, client, writer, _reads(reader, seconds), limit=LIMIT,
                               too_large=TOO_LARGE, take=take or taken.append,
                               unreadable="unreadable (the test's reason)",
                               stalled="stalled (the test's reason)")
        await writer.drain()
        writer.close()
        return body, await asyncio.wait_for(program_reader.read(), 10)
    finally:
        writer.close()
        program_writer.close()


def _post(*fields: str) -> bytes:
    return ("POST /v HTTP/1.1\r\nHost: a\r\n" + "".join(f"{field}\r\n" for field in fields)
            + "\r\n").encode()


def test_a_body_at_the_limit_is_read_whole_and_its_share_taken_from_its_length() -> None:
    taken: list[int] = []
    body, back = asyncio.run(_read_body(_post(f"Content-Length: {LIMIT}") + b"x" * LIMIT,
                                        take=taken.append))
    assert body == b"x" * LIMIT
    assert taken == [LIMIT]  # once, from the Content-Length, before a byte was read
    assert back == b""


def test_a_body_over_the_limit_is_refused_from_its_length_before_a_byte_is_read() -> None:
    taken: list[int] = []
    with pytest.raises(Refused) as refused:
        asyncio.run(_read_body(_post(f"Content-Length: {LIMIT + 1}"), take=taken.append))
    assert refused.value is TOO_LARGE
    assert taken == []


def test_a_chunked_body_is_taken_as_it_comes_and_refused_as_it_passes_the_limit() -> None:
    taken: list[int] = []
    chunk = b"%x\r\n%s\r\n" % (600, b"y" * 600)
    body, _ = asyncio.run(_read_body(_post("Transfer-Encoding: chunked") + chunk + b"0\r\n\r\n",
                                     take=taken.append))
    assert body == b"y" * 600 and sum(taken) == 600
    with pytest.raises(Refused) as refused:
        asyncio.run(_read_body(_post("Transfer-Encoding: chunked") + chunk + chunk
                               + b"0\r\n\r\n"))
    assert refused.value is TOO_LARGE


def test_the_bodies_held_at_once_are_bounded_across_calls_and_given_back() -> None:
    bodies = HeldBodies(10, "the test holds 10 bytes of bodies already")
    first, second = bodies.share(), bodies.share()
    first.take(6)
    second.take(4)  # at the limit: taken
    with pytest.raises(Refused) as refused:
        second.take(1)  # past it: refused, nothing taken
    assert (refused.value.status, refused.value.reason, refused.value.counts) == (
        503, "the test holds 10 bytes of bodies already", False)  # no pause's count
    assert bodies.held == 10
    first.release()
    first.release()  # however the call ends, and again: given back once
    assert bodies.held == 4
    second.take(6)
    second.release()
    assert bodies.held == 0


def test_the_callers_bound_refuses_with_its_own_refusal() -> None:
    def full(count: int) -> None:
        raise Refused(503, "the test's bound is full", counts=False)

    with pytest.raises(Refused) as refused:
        asyncio.run(_read_body(_post("Content-Length: 3") + b"abc", take=full))
    assert (refused.value.status, refused.value.reason) == (503, "the test's bound is full")


def test_framing_h11_refuses_and_a_stall_are_refused_with_the_callers_fixed_reasons() -> None:
    with pytest.raises(Refused) as refused:
        asyncio.run(_read_body(_post("Transfer-Encoding: chunked") + b"zz\r\nsecret\r\n"))
    assert (refused.value.status, refused.value.reason) == (
        400, "unreadable (the test's reason)")  # never h11's message, which quotes bytes
    with pytest.raises(Refused) as refused:
        asyncio.run(_read_body(_post("Content-Length: 5") + b"ab", seconds=0.3))
    assert (refused.value.status, refused.value.reason) == (408, "stalled (the test's reason)")


def test_a_client_gone_inside_its_body_is_refused_as_unreadable() -> None:
    with pytest.raises(Refused) as refused:  # h11 reads an end inside a framed body as
        asyncio.run(_read_body(_post("Content-Length: 5") + b"ab", close=True))  # bad framing
    assert (refused.value.status, refused.value.reason) == (
        400, "unreadable (the test's reason)")


def test_a_client_waiting_for_100_is_sent_one() -> None:
    body, back = asyncio.run(_read_body(_post("Content-Length: 2", "Expect: 100-continue")
                                        + b"ok"))
    assert body == b"ok"
    assert back.startswith(b"HTTP/1.1 100 ")


class _Streamed:
    def __init__(self) -> None:
        self.received = 0
        self.responded = False


async def _pass(answer: bytes) -> tuple[str | BaseException, _Streamed, bytes]:
    """A response `answer` (bytes from a host on loopback, which then closes) passed to
    a program on loopback: how it ended, the counts, what the program got."""
    host_reader, host_writer, up_reader, up_writer = await _pair()
    reader, writer, program_reader, program_writer = await _pair()
    upstream = h11.Connection(h11.CLIENT)
    upstream.send(h11.Request(method="GET", target="/", headers=[("host", "a")]))
    upstream.send(h11.EndOfMessage())
    client = h11.Connection(h11.SERVER)
    client.receive_data(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
    assert isinstance(client.next_event(), h11.Request)
    host_writer.write(answer)
    host_writer.close()
    streamed = _Streamed()
    ended: str | BaseException
    try:
        ended = await pass_response(
            upstream, client, writer, _reads(up_reader), streamed,
            fields=lambda fields: [(name, value) for name, value in fields
                                   if name != b"keep-alive"])
    except h11.RemoteProtocolError as error:
        ended = error
    writer.close()
    got = await asyncio.wait_for(program_reader.read(), 10)
    for other in (up_writer, program_writer):
        other.close()
    del host_reader, reader
    return ended, streamed, got


def test_a_response_is_passed_as_it_comes_its_fields_as_the_caller_makes_them() -> None:
    ended, streamed, got = asyncio.run(_pass(
        b"HTTP/1.1 200 OK\r\nKeep-Alive: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"))
    assert ended == PASSED
    assert (streamed.received, streamed.responded) == (5, True)
    assert got.startswith(b"HTTP/1.1 200 OK\r\n")
    assert got.lower().count(b"transfer-encoding: chunked") == 1  # h11 frames it itself
    assert b"keep-alive" not in got.lower()
    assert got.endswith(b"\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")


def test_a_response_broken_off_keeps_what_went_counted() -> None:
    ended, streamed, got = asyncio.run(_pass(
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabcd"))
    assert isinstance(ended, h11.RemoteProtocolError)  # the host closed inside the body
    assert (streamed.received, streamed.responded) == (4, True)  # the ended line says so
    assert got.endswith(b"\r\n\r\nabcd")  # what came went on, as it came


def test_a_body_from_pieces_of_the_callers_own_is_held_within_the_same_limits() -> None:
    """collect_body over the pieces the proxy's machine gives (lnk_proxy.exchange's
    client_body): the same limit and shares as h11's, and the caller's own refusal
    passed on as it is, never said as another."""
    request = h11.Request(method="POST", target="/v",
                          headers=[("Host", "a"), ("Transfer-Encoding", "chunked")])

    def pieces(*given: bytes | Refused | None) -> Callable[[], Awaitable[bytes | None]]:
        left = list(given)

        async def read() -> bytes | None:
            piece = left.pop(0)
            if isinstance(piece, Refused):
                raise piece
            return piece
        return read

    def collect(read: Callable[[], Awaitable[bytes | None]], taken: list[int]) -> bytes:
        return asyncio.run(collect_body(request, read, limit=LIMIT, too_large=TOO_LARGE,
                                        take=taken.append, unreadable="unreadable",
                                        stalled="stalled"))

    taken: list[int] = []
    assert collect(pieces(b"ab", b"c" * 998, None), taken) == b"ab" + b"c" * 998
    assert taken == [2, 998]
    with pytest.raises(Refused) as over:
        collect(pieces(b"a" * LIMIT, b"b", None), [])
    assert over.value is TOO_LARGE
    own = Refused(400, "the machine's own reason")
    with pytest.raises(Refused) as refused:
        collect(pieces(b"ab", own), [])
    assert refused.value is own
