"""The client connection's machine (lnk_proxy.connection), sans IO: playbooks of events
in (`>>`) and the commands that must come out (`<<`), as mitmproxy's layers are tested,
and a Hypothesis property that any bytes, cut anywhere, give commands and never an
exception."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common.wire import Refused
from lnk_proxy.connection import (
    CONNECT_IN_TUNNEL,
    HEAD_TOO_SLOW,
    NOT_FOR_THE_PROXY,
    CallVerb,
    ClientConnection,
    Closed,
    Command,
    ConnectionStateError,
    Forward,
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


Event = Data | End | HeadTimeout | Done | TunnelOpened


class Playbook:
    """`playbook >> event << expected`: each event given to the machine, each expected
    command the machine's next (a command compared whole, or a check: a callable)."""

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
        else:
            self.connection.tunnel_opened(event.target)
        return self

    def __lshift__(self, expected: object) -> Playbook:
        if self.pending is not None:
            command, self.pending = self.pending, None
        else:
            command = self.connection.next_command()
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
    def check(command: Command) -> bool:
        return (isinstance(command, Refuse) and command.where == where
                and command.refusal.status == status
                and (reason is None or command.refusal.reason == reason))
    return check


def forward(authority: str, path: str, *, plain: bool = True, rest: bytes = b"") -> object:
    def check(command: Command) -> bool:
        return (isinstance(command, Forward) and command.target.authority == authority
                and command.path == path and (command.parsed is None) == plain
                and command.rest == rest)
    return check


def verb(path: str) -> object:
    def check(command: Command) -> bool:
        return isinstance(command, CallVerb) and command.path == path
    return check


def tunnel(authority: str, early: bytes = b"") -> object:
    def check(command: Command) -> bool:
        return (isinstance(command, OpenTunnel) and command.target.authority == authority
                and command.early == early)
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


def test_a_head_byte_by_byte_is_one_request_when_whole() -> None:
    playbook = Playbook()
    for index, byte in enumerate(GET[:-1]):
        playbook = playbook >> Data(bytes([byte])) << NeedData(within_head=True)
        assert index < len(GET)
    playbook >> Data(GET[-1:]) << forward("a.test:80", "/x")


def test_a_request_with_a_body_is_read_by_h11_too_and_its_body_is_the_shells() -> None:
    head = b"POST http://a.test/up HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\n\r\n"
    Playbook() >> Data(head + b"da") << forward("a.test:80", "/up", plain=False, rest=b"da")


def test_the_verbs_namespace_by_origin_form_or_the_proxys_own_address() -> None:
    Playbook() >> Data(b"GET /_link/model/x HTTP/1.1\r\nHost: x\r\n\r\n") << verb(
        "/_link/model/x")
    Playbook() >> Data(b"GET http://127.0.0.1:3128/_link/s/k/open HTTP/1.1\r\n"
                       b"Host: 127.0.0.1:3128\r\n\r\n") << verb("/_link/s/k/open")
    Playbook() >> Data(b"GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n") << Refuse(
        where="-", refusal=Refused(400, NOT_FOR_THE_PROXY))


def test_a_connect_is_a_tunnel_with_what_followed_its_head() -> None:
    (Playbook()
     >> Data(b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n\x16\x03\x01")
     << tunnel("a.test:443", b"\x16\x03\x01"))
    Playbook() >> Data(b"CONNECT a.test HTTP/1.1\r\n\r\n") << refused("-", 400)


def test_a_port_80_tunnels_requests_go_to_its_host_only_and_no_connect_inside() -> None:
    into = parse_connect("a.test:80")
    (Playbook()
     >> Data(b"CONNECT a.test:80 HTTP/1.1\r\nHost: a.test:80\r\n\r\n"
             b"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n")
     << tunnel("a.test:80", b"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n")
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
           b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", b"Host: b\r\n", b"\x00", b" "]


@fuzz(3)
@given(chunks=st.lists(st.one_of(st.binary(max_size=64), st.sampled_from(_PIECES)),
                       max_size=12),
       ended=st.booleans())
def test_any_bytes_cut_anywhere_give_commands_and_no_exception(
        chunks: list[bytes], ended: bool) -> None:
    """Driven as the shell drives it, the machine answers every input with a command:
    never an exception, never a request that was not a whole admitted head, never a
    refusal of more than one line."""
    connection = ClientConnection()
    remaining = [chunk for chunk in chunks if chunk]
    for _ in range(200):
        command = connection.next_command()
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
        if isinstance(command, Forward):
            assert command.raw.endswith(b"\r\n\r\n")
            connection.request_done(command.rest if command.parsed is None
                                    else command.parsed[0].trailing_data[0])
            continue
        assert isinstance(command, CallVerb), command
        connection.request_done(b"")
