"""A login's callback (lnk_proxy.open_verb.Callback), in process with real sockets on this
machine's loopback: the wait bounded (the five minutes, shortened here), the sockets kept
for the next login when no callback came, one request only, what connected before the
page was opened closed unread, a taken port refused with the reason, no socket left
refused, and the callback's target parsed from the URL.
The same code runs in the proxy; tests/test_open_verb.py drives it through real sandboxes.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from lnk_common.wire import Refused
from lnk_proxy.open_rules import callback_target, check_url
from lnk_proxy.open_verb import CALLBACK_SECONDS, Callback, CallbackSockets, run_opener


def _sockets(count: int = 1) -> CallbackSockets:
    made = []
    for _ in range(count):
        made += [socket.socket(socket.AF_INET), socket.socket(socket.AF_INET6)]
    return CallbackSockets(made)


def _callback(port: int, sockets: CallbackSockets, lines: list[tuple[str, str, str]], *,
              host: str = "localhost", seconds: float = CALLBACK_SECONDS) -> Callback:
    return Callback(host, port, sockets, log=lambda *line: lines.append(line),
                    next_id=lambda: 1, gate=lambda: None, seconds=seconds)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _refused(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_the_wait_is_five_minutes() -> None:
    assert CALLBACK_SECONDS == 300


def test_no_callback_within_the_wait_closes_the_port_and_keeps_the_sockets() -> None:
    sockets, lines = _sockets(), list[tuple[str, str, str]]()

    async def main() -> None:
        callback = _callback(_free_port(), sockets, lines, seconds=0.3)
        callback.listen()
        assert sockets.left() == 0
        assert callback.listeners[0].getsockname()[1] == callback.port  # listening, untouched
        callback.start()
        assert callback.task is not None
        await callback.task
        assert _refused(callback.port)

    asyncio.run(main())
    assert sockets.left() == 1
    assert lines[-1][0] == "ended" and "no callback came within 0.3 s" in lines[-1][2]


def test_one_request_is_passed_in_and_a_second_finds_the_port_closed() -> None:
    sockets, lines = _sockets(), list[tuple[str, str, str]]()
    program = socket.create_server(("127.0.0.1", 0))
    program_port = program.getsockname()[1]

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        callback = _callback(program_port + 0, sockets, lines)
        # The callback port here and the program's are one number: the program listens
        # on this machine's loopback in this test, so the callback listens on another
        # free port and passes in to `program` by a Callback whose port is the program's.
        callback.port = _free_port()
        callback.listen()
        callback.port = program_port
        listening = callback.listeners[0].getsockname()[1]
        callback.start()

        def program_answers() -> bytes:
            connection, _ = program.accept()
            with connection:
                request = connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
                                   b"Set-Cookie: s=1; Domain=localhost\r\n"
                                   b"Location: https://evil.example/?data=x\r\n\r\nok")
                return request

        answered = loop.run_in_executor(None, program_answers)
        reader, writer = await asyncio.open_connection("127.0.0.1", listening)
        writer.write(b"GET /cb?code=C HTTP/1.1\r\nHost: localhost\r\n"
                     b"Cookie: notebook-login=PERSONS\r\nAuthorization: Basic eDp5\r\n"
                     b"Accept: text/html\r\n\r\n")
        reply = await reader.read()
        writer.close()
        request = await answered
        assert callback.task is not None
        await callback.task
        assert _refused(listening)
        assert request.startswith(b"GET /cb?code=C HTTP/1.1\r\n")
        assert b"connection: close" in request.lower()
        assert b"accept: text/html" in request.lower()
        assert b"PERSONS" not in request and b"eDp5" not in request  # the person's own
        return reply

    reply = asyncio.run(main())
    program.close()
    # The person's browser gets one line of ours: none of the program's bytes (its page,
    # its redirect, its cookie) reach it.
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert reply.endswith(b"lnk-sandbox: the sign-in's answer was passed into the sandbox "
                          b"(its program answered 200); you can close this tab\n")
    assert b"evil" not in reply and b"set-cookie" not in reply.lower()
    assert [line[0] for line in lines] == ["allowed", "ended"]
    assert all("code=C" not in part for line in lines for part in line)
    assert sockets.left() == 0  # used: a socket inside is connected once


def test_attack_what_connected_before_the_page_was_opened_never_reaches_the_program() -> None:
    """A process on this machine connects between the bind (after the yes) and the
    opener's start and sends a forged code: `close_early` closes it unread, and the
    request after (the browser's) is the one passed in."""
    sockets, lines = _sockets(), list[tuple[str, str, str]]()
    program = socket.create_server(("127.0.0.1", 0))
    program_port = program.getsockname()[1]

    async def main() -> tuple[bytes, bytes, bytes]:
        loop = asyncio.get_running_loop()
        callback = _callback(_free_port(), sockets, lines, host="127.0.0.1")
        callback.listen()
        listening = callback.listeners[0].getsockname()[1]
        callback.port = program_port  # passed in to `program` (see the test above)
        forger = socket.create_connection(("127.0.0.1", listening), timeout=5)
        forger.sendall(b"GET /cb?code=FORGED HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert callback.close_early() == 1  # the opener has just been started
        callback.start()

        def program_answers() -> bytes:
            connection, _ = program.accept()
            with connection:
                request = connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                return request

        answered = loop.run_in_executor(None, program_answers)
        reader, writer = await asyncio.open_connection("127.0.0.1", listening)
        writer.write(b"GET /cb?code=REAL HTTP/1.1\r\nHost: localhost\r\n\r\n")
        reply = await reader.read()
        writer.close()
        request = await answered
        assert callback.task is not None
        await callback.task
        with forger:
            forger.settimeout(5)
            try:
                forged_reply = forger.recv(65536)
            except ConnectionResetError:
                forged_reply = b""
        return request, reply, forged_reply

    request, reply, forged_reply = asyncio.run(main())
    program.close()
    assert request.startswith(b"GET /cb?code=REAL HTTP/1.1\r\n")
    assert reply.startswith(b"HTTP/1.1 200 ")
    assert forged_reply == b""  # closed unread, never answered
    assert lines[0] == ("refused", f"localhost:{program_port}",
                        "kind=callback reason=1 connection(s) came before the page was "
                        "opened; closed unread")


def test_a_taken_port_is_refused_and_nothing_is_used() -> None:
    sockets, lines = _sockets(), list[tuple[str, str, str]]()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        callback = _callback(port, sockets, lines)
        with pytest.raises(Refused) as caught:
            callback.listen()
    assert (caught.value.status, caught.value.reason) == (
        409, f"port {port} of this machine's loopback is taken by another program: the "
             "login's answer (its code) would go to it; not opened")
    assert sockets.left() == 1 and callback.listeners == []


def test_a_port_taken_on_ipv6_loopback_only_is_refused_for_localhost() -> None:
    """A browser may reach `localhost` by ::1: a program holding [::1]:port there would
    get the code, so a `localhost` callback needs both free."""
    sockets, lines = _sockets(), list[tuple[str, str, str]]()
    with socket.socket(socket.AF_INET6) as taken:
        taken.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(Refused, match="taken by another program"):
            _callback(port, sockets, lines).listen()
        _callback(port, sockets, lines, host="127.0.0.1").listen()  # 127.0.0.1 only: free


def test_no_socket_left_is_refused_saying_so() -> None:
    with pytest.raises(Refused) as caught:
        _callback(_free_port(), CallbackSockets([]), []).listen()
    assert caught.value.status == 503
    assert caught.value.reason.startswith("no login callback is left in this sandbox")


def test_a_cancelled_open_gives_its_socket_back() -> None:
    sockets = _sockets()
    callback = _callback(_free_port(), sockets, [])
    callback.listen()
    callback.cancel()
    assert sockets.left() == 1 and _refused(callback.port)


@pytest.mark.parametrize(("url", "target"), [
    ("https://a.example/?redirect_uri=http%3A%2F%2Flocalhost%3A8080%2Fcb", ("localhost", 8080)),
    ("https://a.example/?redirect_url=http://127.0.0.1:9/x", ("127.0.0.1", 9)),
    ("https://a.example/?redirect_uri=http://localhost.:8080/", None),
    ("https://a.example/?redirect_uri=http://[::1]:8080/", None),
    ("https://a.example/?redirect_uri=https://localhost:8080/", None),
    ("https://a.example/?redirect_uri=http://evil.example:8080/", None),
    ("https://a.example/?state=s", None),
])
def test_the_callback_target(url: str, target: tuple[str, int] | None) -> None:
    assert callback_target(check_url(url.encode())) == target


def test_the_opener_outside_status_and_a_slow_one(tmp_path: object) -> None:
    async def main() -> tuple[str, str, str]:
        return (await run_opener("/bin/true", "https://x.example/", {}),
                await run_opener("/bin/false", "https://x.example/", {}),
                await run_opener("/nonexistent/opener", "https://x.example/", {}))

    ok, failed, missing = asyncio.run(main())
    assert ok == ""
    assert failed == "the person's opener (false) failed with status 1"
    assert missing.startswith("the opener /nonexistent/opener could not be started")


def test_the_page_is_marked_opening_before_the_opener_runs(tmp_path: Path) -> None:
    """`starting` comes before the opener can do anything: an opener that comes back to
    the callback at once (a browser already signed in, an opener that follows by itself)
    is never taken for a connection that came before the page was opened."""
    mark = tmp_path / "ran"
    opener = tmp_path / "opener"
    opener.write_text(f"#!/bin/sh\n: > {mark}\n")
    opener.chmod(0o755)
    seen: list[bool] = []

    async def main() -> str:
        return await run_opener(str(opener), "https://x.example/", {},
                                starting=lambda: seen.append(mark.exists()))

    assert asyncio.run(main()) == ""
    assert seen == [False] and mark.exists()
