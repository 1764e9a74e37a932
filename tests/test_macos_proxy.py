"""The agent's proxy as a Mac runs it: on a TCP port of the machine's loopback, where any
program and any user can connect, so every verb without a key takes the URL secret and
the key verbs only the placeholder (the seed). Run here for real, from the argv
`lnk_wrap.seatbelt_wrap.proxy_argv` builds: the proxy's code is the same on both.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import h11
import pytest

from lnk_common.policy import Policy
from lnk_wrap.seatbelt_wrap import proxy_argv
from lnk_wrap.verb_env import new_url_secret

PLACEHOLDER = "lnk-placeholder-for-the-mac-test"


class _Runtime(http.server.BaseHTTPRequestHandler):
    """A local model runtime's one answer: its models."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Runtime.seen.append(self.path)
        body = b'{"models":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def runtime() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Runtime)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Runtime.seen = []
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _ask(port: int, head: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    return int(status.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_V2_the_agents_proxy_on_loopback_takes_only_the_url_secret_and_the_placeholder(
        tmp_path: Path, runtime: int) -> None:
    settings = tmp_path / "lnk"
    settings.mkdir()
    policy = Policy(settings=str(settings), agent="main", name="main", network="none",
                    local_models=(runtime,), models=("anthropic",),
                    site_packages=str(Path(h11.__file__).resolve().parent.parent))
    port = _free_port()
    secret = new_url_secret()
    argv = proxy_argv(policy, port, "main")
    assert argv[-2:] == ["--listen", f"127.0.0.1:{port}"]
    env = {**os.environ, "LNK_URL_SECRET": secret, "LNK_PLACEHOLDER": PLACEHOLDER}
    proxy = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proxy.poll() is None, "no proxy"
                time.sleep(0.05)
        host = f"Host: 127.0.0.1:{port}\nConnection: close\n"
        # The URL secret's verb: the right secret reaches the runtime, through its filter.
        status, body = _ask(port, f"GET /_link/s/{secret}/local/{runtime}/api/tags HTTP/1.1\n"
                                  f"{host}")
        assert (status, body) == (200, b'{"models":[]}')
        assert _Runtime.seen == ["/api/tags"]
        # A wrong secret, or none: refused, the runtime never reached, nothing echoed.
        wrong = new_url_secret()
        status, body = _ask(port, f"GET /_link/s/{wrong}/local/{runtime}/api/tags HTTP/1.1\n"
                                  f"{host}")
        assert status == 403 and wrong.encode() not in body and secret.encode() not in body
        status, _ = _ask(port, f"GET /_link/local/{runtime}/api/tags HTTP/1.1\n{host}")
        assert status == 404
        status, body = _ask(port, f"GET /_link/s/{secret}/mcp/github HTTP/1.1\n{host}")
        assert status == 404 and b"off in this sandbox" in body
        assert _Runtime.seen == ["/api/tags"]
        # The model verb: only with the placeholder (here no key is stored, so the right
        # placeholder gets the next refusal: the key, never a call out).
        request = ("POST /_link/model/anthropic/v1/messages HTTP/1.1\n{host}x-api-key: {key}\n"
                   "content-type: application/json\ncontent-length: 2\n\n{{}}")
        wrong_key, _ = _ask(port, request.format(host=host, key="sk-ant-guessed"))
        right_key, said = _ask(port, request.format(host=host, key=PLACEHOLDER))
        assert wrong_key in (401, 403) and right_key != wrong_key, said
        log = (settings / "sandbox" / "wires" / "main" / "log").read_text()
        assert secret not in log and wrong not in log and PLACEHOLDER not in log
    finally:
        proxy.terminate()
        proxy.wait(timeout=20)
