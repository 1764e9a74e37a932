"""A refusal that ends a connection is read by the program, not reset away.

A socket closed while bytes it was sent are still unread is reset by the kernel (RST, not
FIN), and the reset can reach the client before it reads the refusal: it then sees
ECONNRESET and never the reason. CI saw it once (test_local_models_sandbox: a head over
the limit, on a busy machine). So every refusal that ends a connection closes the
proxy's side for writing and drops what the client still sends, for at most
LINGER_SECONDS (lnk_common.wire.linger, the relay's too).

These run the real proxy on a loopback listener, with real sockets; each case is tried
several times, since the reset is a race that a quiet machine often wins.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from lnk_common.wirelog import WireLog
from lnk_proxy import server as proxy_server
from lnk_proxy.decide import parse_hosts
from lnk_proxy.head import MAX_HEAD_BYTES
from lnk_proxy.lane import lane_server
from lnk_proxy.machine import Machine

WIRE = "linger"
TRIES = 8


async def _proxy(tmp_path: Path) -> tuple[asyncio.Server, int]:
    settings = tmp_path / "settings"
    settings.mkdir(exist_ok=True)
    proxy = proxy_server.Proxy(rules=parse_hosts(("allowed.example",)),
                               machine=Machine.gather(), log=WireLog(str(settings), WIRE),
                               settings=str(settings), wire=WIRE, say=lambda _line: None)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.setblocking(False)
    return await lane_server(proxy.handle, sock), sock.getsockname()[1]


def _answer(port: int, sent: bytes) -> bytes:
    """All of `sent` written (as a client that sends first and reads after does), then
    everything the proxy answers until it closes; a reset fails the test."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(sent)  # the proxy reads what follows a refusal, for a while
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


def _each(tmp_path: Path, sent: bytes) -> list[bytes]:
    async def run() -> list[bytes]:
        server, port = await _proxy(tmp_path)
        try:
            return [await asyncio.to_thread(_answer, port, sent) for _ in range(TRIES)]
        finally:
            server.close()

    return asyncio.run(asyncio.wait_for(run(), 120))


def test_a_head_over_the_limit_gets_its_400_not_a_reset(tmp_path: Path) -> None:
    sent = (b"GET http://allowed.example/" + b"a" * (2 * MAX_HEAD_BYTES)
            + b" HTTP/1.1\r\nHost: allowed.example\r\n\r\n")
    for answer in _each(tmp_path, sent):
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
        assert f"larger than {MAX_HEAD_BYTES} bytes".encode() in answer


def test_a_body_to_a_host_not_listed_gets_its_403_not_a_reset(tmp_path: Path) -> None:
    body = b"x" * (1024 * 1024)
    sent = (b"POST http://elsewhere.example/upload HTTP/1.1\r\nHost: elsewhere.example\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    for answer in _each(tmp_path, sent):
        assert answer.startswith(b"HTTP/1.1 403 "), answer[:200]
        assert b"elsewhere.example:80 is not in this sandbox's hosts" in answer
