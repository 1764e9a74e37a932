"""The client connection's machine (lnk_proxy.connection), sans IO: playbooks of events
in (`>>`) and the commands that must come out (`<<`), as mitmproxy's layers are tested,
its heads' and its bodies', and Hypothesis properties: any bytes, cut anywhere, give
commands and never an exception; a body cut anywhere is the same body."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common.wire import Refused
from lnk_proxy.connection import (
    BODY_PIECE_BYTES,
    CONNECT_IN_TUNNEL,
    HEAD_TOO_SLOW,
    NOT_FOR_THE_PROXY,
    UNREADABLE_BODY,
    BodyCommand,
    BodyData,
    BodyEnd,
    CallVerb,
    ClientConnection,
    Closed,
    Command,
    ConnectionStateError,
    Continue,
    Forward,
    NeedBody,
    NeedData,
    OpenTunnel,
    Refuse,
)
from lnk_proxy.head import MAX_HEAD_BYTES
from lnk_proxy.target import Target, parse_connect
from tests.conftest import fuzz

# -- the playbook ----------------------------------------------------------------------


@dataclass(frozen=True)
class Data:
    data: bytes


@dataclass(frozen=True)
class End:
    pass


@dataclass(frozen=True)
class HeadTimeout:
    pass


@dataclass(frozen=True)
class Done:
    leftover: bytes = b""


@dataclass(frozen=True)
class TunnelOpened:
    target: Target


@dataclass(frozen=True)
class Limit:
    """A verb gives its body's limit (`limit_body`)."""

    limit: int


@dataclass(frozen=True)
class FromBody:
    """The expected command is the machine's next for the body (`next_body`)."""

    expected: object


Event = Data | End | HeadTimeout | Done | TunnelOpened | Limit


class Playbook:
    """`playbook >> event << expected`: each event given to the machine, each expected
    command the machine's next (a command compared whole, or a check: a callable);
    `FromBody(expected)` for the body's next."""

    def __init__(self, tunnel: Target | None = None) -> None:
        self.connection = ClientConnection(tunnel)
        self.pending: Command | None = None  # the head timeout's command

    def __rshift__(self, event: Event) -> Playbook:
        if isinstance(event, Data):
            self.connection.receive_data(event.data)
        elif isinstance(event, End):
            self.connection.receive_data(b"")
        elif isinstance(event, HeadTimeout):
            self.pending = self.connection.head_timed_out()
        elif isinstance(event, Done):
            self.connection.request_done(event.leftover)
        elif isinstance(event, Limit):
            self.pending = self.connection.limit_body(event.limit)
        else:
            self.connection.tunnel_opened(event.target)
        return self

    def __lshift__(self, expected: object) -> Playbook:
        command: Command | BodyCommand
        if self.pending is not None:
            command, self.pending = self.pending, None
        elif isinstance(expected, FromBody):
            command = self.connection.next_body()
        else:
            command = self.connection.next_command()
        if isinstance(expected, FromBody):
            expected = expected.expected
        if callable(expected) and not isinstance(expected, type):
            assert expected(command), command
        elif isinstance(expected, Refuse):
            assert isinstance(command, Refuse), command
            assert (command.where, command.refusal.status, command.refusal.reason) == (
                expected.where, expected.refusal.status, expected.refusal.reason)
        else:
            assert command == expected, command
        return self


def refused(where: str, status: int, reason: str | None = None) -> object:
    def check(command: Command | BodyCommand) -> bool:
        return (isinstance(command, Refuse) and command.where == where
                and command.refusal.status == status
                and (reason is None or command.refusal.reason == reason))
    return check


def forward(authority: str, path: str, *, plain: bool = True) -> object:
    def check(command: Command) -> bool:
        return (isinstance(command, Forward) and command.target.authority == authority
                and command.path == path and (command.parsed is None) == plain)
    return check


def verb(path: str) -> object:
    def check(command: Command) -> bool:
        return isinstance(command, CallVerb) and command.path == path
    return check


def tunnel(authority: str) -> object:
    def check(command: Command) -> bool:
        return isinstance(command, OpenTunnel) and command.target.authority == authority
    return check


GET = b"GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n"

# -- playbooks -------------------------------------------------------------------------


def test_an_absolute_form_request_is_forwarded_plain_and_the_next_one_follows() -> None:
    (Playbook()
     << NeedData(within_head=False)
     >> Data(GET) << forward("a.test:80", "/x")
     >> Done(GET[:10]) << NeedData(within_head=True)
     >> Data(GET[10:]) << forward("a.test:80", "/x")
     >> Done() << NeedData(within_head=False)
     >> End() << Closed())


def test_bytes_that_come_during_an_exchange_wait_behind_what_it_gives_back() -> None:
    (Playbook()
     >> Data(GET + GET[:5]) << forward("a.test:80", "/x")
     >> Data(GET[5:9]) >> Data(GET[9:])  # during the exchange: held, in order
     >> Done() << forward("a.test:80", "/x"))
    (Playbook()
     >> Data(POST + b"Content-Length: 4\r\n\r\nda")
     << forward("a.test:80", "/up", plain=False)
     >> Data(b"ta") >> Data(GET)  # held until h11 needs them: then what it needs at once
     << FromBody(BodyData(data=b"data")) << FromBody(BodyEnd())
     >> Done() << forward("a.test:80", "/x"))


def test_h11_is_given_no_byte_past_a_content_length_and_a_piece_of_a_chunked_body() -> None:
    playbook = Playbook() >> Data(POST + b"Content-Length: 2\r\n\r\n") >> Data(b"ok" + GET)
    command = playbook.connection.next_command()
    assert isinstance(command, Forward) and command.parsed is not None
    playbook << FromBody(BodyData(data=b"ok")) << FromBody(BodyEnd())
    assert command.parsed[0].trailing_data[0] == b"" and playbook.connection.held == len(GET)
    chunked = (Playbook() >> Data(CHUNKED + b"%x\r\n" % (3 * BODY_PIECE_BYTES)
                                  + b"x" * (3 * BODY_PIECE_BYTES) + b"\r\n0\r\n\r\n" + GET))
    command = chunked.connection.next_command()
    assert isinstance(command, Forward) and command.parsed is not None
    pieces = []
    while isinstance(body := chunked.connection.next_body(), BodyData):
        pieces.append(body.data)
    assert isinstance(body, BodyEnd) and b"".join(pieces) == b"x" * (3 * BODY_PIECE_BYTES)
    assert max(map(len, pieces)) <= BODY_PIECE_BYTES
    assert len(command.parsed[0].trailing_data[0]) <= BODY_PIECE_BYTES
    chunked >> Done(command.parsed[0].trailing_data[0]) << forward("a.test:80", "/x")


def test_a_head_byte_by_byte_is_one_request_when_whole() -> None:
    playbook = Playbook()
    for index, byte in enumerate(GET[:-1]):
        playbook = playbook >> Data(bytes([byte])) << NeedData(within_head=True)
        assert index < len(GET)
    playbook >> Data(GET[-1:]) << forward("a.test:80", "/x")


POST = b"POST http://a.test/up HTTP/1.1\r\nHost: a.test\r\n"
CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"


def _verb_post(fields: bytes) -> bytes:
    return b"POST /_link/model/x HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n"


def test_a_request_with_a_body_is_read_by_h11_and_its_body_comes_as_the_machines() -> None:
    (Playbook()
     >> Data(POST + b"Content-Length: 4\r\n\r\nda")
     << forward("a.test:80", "/up", plain=False)
     << FromBody(BodyData(data=b"da")) << FromBody(NeedBody())
     >> Data(b"ta" + GET[:5]) << FromBody(BodyData(data=b"ta")) << FromBody(BodyEnd())
     << FromBody(BodyEnd())  # again, until request_done: a retry sends its end again
     >> Done() << NeedData(within_head=True)
     >> Data(GET[5:]) << forward("a.test:80", "/x"))


def test_a_chunked_body_comes_piece_by_piece_and_ends_at_its_last_chunk() -> None:
    (Playbook()
     >> Data(CHUNKED) << forward("a.test:80", "/up", plain=False)
     << FromBody(NeedBody())
     >> Data(b"3\r\nabc\r\n") << FromBody(BodyData(data=b"abc")) << FromBody(NeedBody())
     >> Data(b"0\r\n\r\n") << FromBody(BodyEnd()))


def test_a_request_is_not_done_before_its_body_ends() -> None:
    connection = ClientConnection()
    connection.receive_data(POST + b"Content-Length: 4\r\n\r\n")
    assert isinstance(connection.next_command(), Forward)
    for out_of_turn in (lambda: connection.request_done(b""), connection.next_command,
                        lambda: connection.tunnel_opened(parse_connect("a.test:80"))):
        with pytest.raises(ConnectionStateError):
            out_of_turn()
    body_less = ClientConnection()
    body_less.receive_data(GET)
    assert isinstance(body_less.next_command(), Forward)
    with pytest.raises(ConnectionStateError):
        body_less.next_body()  # a body-less request has no body to read
    with pytest.raises(ConnectionStateError):
        body_less.limit_body(1)


def test_a_command_given_back_is_the_next_command_once_as_it_was_given() -> None:
    """What the lane does not carry out (a refusal, a verb, a request with a body) and a
    request to send once more: `give_again`, then the next command is the same one,
    once; its state kept (a body begun, a refusal's end). No row with none in hand, or
    with one to give already."""
    for head, kind in ((GET, Forward), (POST + b"Content-Length: 2\r\n\r\nhi", Forward),
                       (b"GET /_link/model/x HTTP/1.1\r\nHost: x\r\n\r\n", CallVerb),
                       (b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", Refuse)):
        connection = ClientConnection()
        connection.receive_data(head)
        given = connection.next_command()
        assert isinstance(given, kind), given
        connection.give_again()
        with pytest.raises(ConnectionStateError):
            connection.give_again()  # one to give already
        assert connection.next_command() is given
        if kind is Refuse:
            with pytest.raises(ConnectionStateError):
                connection.next_command()  # the refusal ended the connection
            continue
        if isinstance(given, Forward) and given.parsed is None:
            connection.give_again()  # sent once more: given again after it was taken
            assert connection.next_command() is given
        else:
            assert isinstance(connection.next_body(), BodyData | BodyEnd)
        with pytest.raises(ConnectionStateError):
            connection.next_command()  # once, not twice
    idle = ClientConnection()
    with pytest.raises(ConnectionStateError):
        idle.give_again()  # none in hand
    done = ClientConnection()
    done.receive_data(GET)
    done.next_command()
    done.request_done(b"")
    with pytest.raises(ConnectionStateError):
        done.give_again()  # its exchange is done: none in hand


def test_a_verb_call_has_a_body_even_an_empty_one() -> None:
    (Playbook() >> Data(b"GET /_link/model/x HTTP/1.1\r\nHost: x\r\n\r\n")
     << verb("/_link/model/x") << FromBody(BodyEnd()) >> Done() << NeedData(within_head=False))


def test_a_body_over_the_verbs_limit_is_413_from_its_length_or_as_it_passes() -> None:
    (Playbook() >> Data(_verb_post(b"Content-Length: 6\r\n") + b"abc")
     << verb("/_link/model/x") >> Limit(5)
     << refused("-", 413, "the body is over 5 bytes (the verb's limit)"))
    (Playbook() >> Data(_verb_post(b"Content-Length: 5\r\n") + b"abcde")
     << verb("/_link/model/x") >> Limit(5)
     << FromBody(BodyData(data=b"abcde")) << FromBody(BodyEnd()))
    (playbook_413 := Playbook()
     >> Data(_verb_post(b"Transfer-Encoding: chunked\r\n") + b"4\r\nabcd\r\n")
     << verb("/_link/model/x") >> Limit(2 * 1024 * 1024)
     << FromBody(BodyData(data=b"abcd"))
     >> Data(b"200000\r\n" + b"x" * (2 * 1024 * 1024)))
    given = 4
    while isinstance(command := playbook_413.connection.next_body(), BodyData):
        given += len(command.data)  # given in pieces, never past the limit
        assert given <= 2 * 1024 * 1024
    assert isinstance(command, Refuse) and (command.refusal.status, command.refusal.reason) == (
        413, "the body is over 2 MiB (the verb's limit)")


def test_a_body_h11_refuses_is_400_with_a_fixed_reason() -> None:
    (Playbook() >> Data(CHUNKED + b"zz\r\nsecret\r\n")
     << forward("a.test:80", "/up", plain=False)
     << FromBody(refused("-", 400, UNREADABLE_BODY)))
    (Playbook() >> Data(POST + b"Content-Length: 4\r\n\r\nab") >> End()
     << forward("a.test:80", "/up", plain=False)
     << FromBody(BodyData(data=b"ab")) << FromBody(refused("-", 400, UNREADABLE_BODY)))
    into = parse_connect("a.test:80")
    (Playbook(into) >> Data(b"POST /up HTTP/1.1\r\nHost: a.test\r\n"
                            b"Transfer-Encoding: chunked\r\n\r\n-1\r\n")
     << forward("a.test:80", "/up", plain=False)
     << FromBody(refused("a.test:80", 400, UNREADABLE_BODY)))


def test_a_client_waiting_for_a_100_is_sent_one_when_its_body_is_first_asked_for() -> None:
    def is_100(command: BodyCommand) -> bool:
        return isinstance(command, Continue) and command.data.startswith(b"HTTP/1.1 100 ")

    (Playbook() >> Data(POST + b"Content-Length: 2\r\nExpect: 100-continue\r\n\r\n")
     << forward("a.test:80", "/up", plain=False)
     << FromBody(is_100) << FromBody(NeedBody())
     >> Data(b"ok") << FromBody(BodyData(data=b"ok")) << FromBody(BodyEnd()))
    (Playbook() >> Data(_verb_post(b"Content-Length: 9\r\nExpect: 100-continue\r\n"))
     << verb("/_link/model/x") >> Limit(5)  # refused from its length: no 100 first
     << refused("-", 413))


def test_the_verbs_namespace_by_origin_form_or_the_proxys_own_address() -> None:
    Playbook() >> Data(b"GET /_link/model/x HTTP/1.1\r\nHost: x\r\n\r\n") << verb(
        "/_link/model/x")
    Playbook() >> Data(b"GET http://127.0.0.1:3128/_link/s/k/open HTTP/1.1\r\n"
                       b"Host: 127.0.0.1:3128\r\n\r\n") << verb("/_link/s/k/open")
    Playbook() >> Data(b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n") << Refuse(
        where="-", refusal=Refused(400, NOT_FOR_THE_PROXY))


def test_a_connect_is_a_tunnel_with_what_followed_its_head() -> None:
    playbook = (Playbook()
                >> Data(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n\x16\x03")
                << tunnel("a.test:443") >> Data(b"\x01"))
    # What followed the head, and what came since, are the tunnel's, taken out whole.
    assert playbook.connection.take_held() == b"\x16\x03\x01"
    playbook >> Data(b"more")
    assert playbook.connection.held == 0  # no longer HTTP's: nothing more held here
    Playbook() >> Data(b"CONNECT a.test HTTP/1.1\r\n\r\n") << refused("-", 400)


def test_a_port_80_tunnels_requests_go_to_its_host_only_and_no_connect_inside() -> None:
    into = parse_connect("a.test:80")
    (Playbook()
     >> Data(b"CONNECT a.test:80 HTTP/1.1\r\nHost: a.test:80\r\n\r\n"
             b"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n")
     << tunnel("a.test:80")
     >> TunnelOpened(into) << forward("a.test:80", "/p")
     >> Done(b"GET /q HTTP/1.1\r\nHost: b.test\r\n\r\n") << refused(
         "a.test:80", 400, "the Host header names another host than the tunnel's (a.test:80)"))
    (Playbook(into)
     >> Data(b"GET http://b.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n")
     << refused("a.test:80", 400))
    (Playbook(into)
     >> Data(b"CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n")
     << refused("a.test:80", 400, CONNECT_IN_TUNNEL))


def test_the_host_must_name_the_urls_host() -> None:
    (Playbook() >> Data(b"GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n")
     << refused("a.test:80", 400, "the Host header names another host than the request's URL"))
    (Playbook() >> Data(b"GET http://a.test/ HTTP/1.0\r\n\r\n")
     << refused("a.test:80", 400, "an HTTP/1.0 request without Host"))


def test_a_head_refused_by_the_guard_by_its_size_or_its_time() -> None:
    Playbook() >> Data(b"GET http://a.test/ HTTP/1.1\nHost: a\n\n") << refused("-", 400)
    (Playbook() >> Data(b"GET http://a.test/" + b"a" * MAX_HEAD_BYTES)
     << refused("-", 400, f"the request head is larger than {MAX_HEAD_BYTES} bytes"))
    (Playbook() >> Data(b"GET http://a.test/ HT") << NeedData(within_head=True)
     >> HeadTimeout() << refused("-", 408, HEAD_TOO_SLOW))
    Playbook() >> Data(b"GET http://a.test/ HT") >> End() << Closed()


def test_events_out_of_turn_are_the_machines_error_never_a_request() -> None:
    connection = ClientConnection()
    connection.receive_data(GET)
    assert isinstance(connection.next_command(), Forward)
    with pytest.raises(ConnectionStateError):
        connection.next_command()  # the exchange is the shell's until request_done
    connection.request_done(b"")
    with pytest.raises(ConnectionStateError):
        connection.request_done(b"")
    refused_one = ClientConnection()
    refused_one.receive_data(b"\x00\r\n\r\n")
    assert isinstance(refused_one.next_command(), Refuse)
    with pytest.raises(ConnectionStateError):
        refused_one.next_command()


# -- any bytes -------------------------------------------------------------------------

_PIECES = [GET, b"CONNECT a.test:80 HTTP/1.1\r\nHost: a.test:80\r\n\r\n",
           b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
           b"GET /_link/model/x HTTP/1.1\r\nHost: x\r\n\r\n", b"\r\n", b"\n",
           b"POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\n\r\nab",
           CHUNKED, b"3\r\nabc\r\n", b"0\r\n\r\n", b"Expect: 100-continue\r\n",
           _verb_post(b"Content-Length: 3\r\n") + b"abc",
           _verb_post(b"Transfer-Encoding: chunked\r\n"),
           b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", b"Host: b\r\n", b"\x00", b" "]


@fuzz(3)
@given(chunks=st.lists(st.one_of(st.binary(max_size=64), st.sampled_from(_PIECES)),
                       max_size=12),
       ended=st.booleans(), limit=st.one_of(st.none(), st.integers(0, 8)),
       given_back=st.booleans())
def test_any_bytes_cut_anywhere_give_commands_and_no_exception(
        chunks: list[bytes], ended: bool, limit: int | None, given_back: bool) -> None:
    """Driven as the shell drives it, heads and bodies, the machine answers every input
    with a command: never an exception, never a request that was not a whole admitted
    head, never a refusal of more than one line, never a verb's body past its limit
    (`limit`), never a request done before its body's end. With `given_back`, every
    head's command is given back first (`give_again`, as the lane gives back what it
    does not carry out) and comes again, the same, once."""
    connection = ClientConnection()
    remaining = [chunk for chunk in chunks if chunk]
    for _ in range(200):
        command = connection.next_command()
        if given_back and not isinstance(command, NeedData | Closed):
            connection.give_again()
            assert connection.next_command() is command
        if isinstance(command, NeedData):
            if remaining:
                connection.receive_data(remaining.pop(0))
                continue
            if ended:
                connection.receive_data(b"")
                continue
            return
        if isinstance(command, Closed):
            return
        if isinstance(command, Refuse):
            assert "\n" not in command.refusal.reason and command.refusal.status in (400, 408)
            return
        if isinstance(command, OpenTunnel):
            if command.target.port != 80:
                return
            connection.tunnel_opened(command.target)
            continue
        assert isinstance(command, Forward | CallVerb), command
        if isinstance(command, Forward):
            assert command.raw.endswith(b"\r\n\r\n")
            if command.parsed is None:
                connection.request_done(b"")
                continue
        elif limit is not None:
            limited = connection.limit_body(limit)
            if limited is not None:
                assert limited.refusal.status == 413
                return
        if not _body_to_its_end(connection, remaining, ended,
                                limit if isinstance(command, CallVerb) else None):
            return
        assert command.parsed is not None
        connection.request_done(command.parsed[0].trailing_data[0])


def _body_to_its_end(connection: ClientConnection, remaining: list[bytes], ended: bool,
                     limit: int | None) -> bool:
    """A request's body driven as the shell drives it: whether it ended (else refused
    with one line, 400 or 413 within its limit, or the input ran out); never more of it
    than its limit."""
    size = 0
    continued = 0
    for _ in range(200):
        command = connection.next_body()
        if isinstance(command, NeedBody):
            if remaining:
                connection.receive_data(remaining.pop(0))
            elif ended:
                connection.receive_data(b"")
            else:
                return False
        elif isinstance(command, Continue):
            continued += 1
            assert continued == 1 and size == 0
        elif isinstance(command, BodyData):
            size += len(command.data)
            assert command.data and (limit is None or size <= limit)
        elif isinstance(command, BodyEnd):
            return True
        else:
            assert isinstance(command, Refuse), command
            assert "\n" not in command.refusal.reason
            assert command.refusal.status == 400 or (
                command.refusal.status == 413 and limit is not None)
            return False
    return False


@fuzz(3)
@given(body=st.binary(max_size=300), chunked=st.booleans(),
       pieces=st.lists(st.integers(1, 40), max_size=30), data=st.data())
def test_a_body_cut_anywhere_is_the_same_body_and_what_follows_is_the_next_request(
        body: bytes, chunked: bool, pieces: list[int], data: st.DataObject) -> None:
    """A request's body, Content-Length or chunked (in chunks of any sizes), its bytes
    cut anywhere: the machine gives exactly the body, then its end, and the bytes after
    it are the next request's."""
    if chunked:
        framed, at = b"", 0
        for size in pieces:
            if at >= len(body):
                break
            piece = body[at:at + size]
            framed += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
            at += size
        if at < len(body):
            framed += f"{len(body) - at:x}\r\n".encode() + body[at:] + b"\r\n"
        sent = CHUNKED + framed + b"0\r\n\r\n"
    else:
        sent = POST + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    sent += GET
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(sent) - 1), max_size=12))))
    remaining = [sent[start:end] for start, end in zip([0, *cuts], [*cuts, len(sent)],
                                                       strict=True)]
    connection = ClientConnection()
    command: Command | BodyCommand = connection.next_command()
    while isinstance(command, NeedData):
        connection.receive_data(remaining.pop(0))
        command = connection.next_command()
    assert isinstance(command, Forward) and command.parsed is not None
    reading = command.parsed[0]
    got = b""
    while not isinstance(command := connection.next_body(), BodyEnd):
        if isinstance(command, NeedBody):
            connection.receive_data(remaining.pop(0))
        else:
            assert isinstance(command, BodyData), command
            got += command.data
    assert got == body
    connection.request_done(reading.trailing_data[0])
    for piece in remaining:  # not come yet: they come after what the machine holds
        connection.receive_data(piece)
    assert isinstance(connection.next_command(), Forward)
