"""The I/O shell: lines of JSON-RPC on stdin, each relayed as its own POST to the remote
server; every message the answer carries (JSON, or SSE with the server's notifications
and requests first) written to stdout as one line, as it comes.

Trust: the remote server is the person's choice but its bytes are not trusted: each
message is parsed, bounded (MAX_MESSAGE_BYTES) and written out re-serialised, so a line
on stdout is always one JSON object. stdout carries nothing but MCP; diagnostics go to
stderr and never hold a header's value. A redirect is never followed (http.client does
not follow, and a 3xx is an error): a token must not be carried to a place the person
did not name.

Order: `initialize`, notifications and answers to the server's requests are sent one at
a time from the reading thread (the session must be known before what follows it); any
other request gets a thread and a connection of its own (MAX_IN_FLIGHT at once), so a
long tool call does not hold up a `ping` or a cancellation. At the end of stdin (or on
SIGTERM) the requests in flight get END_GRACE_SECONDS, then the 2025-11-25 session is
ended with DELETE.

The GET stream of 2025-11-25 (server notifications outside any request) is not opened:
it is optional for both sides, the 2026-07-28 revision drops it, and what a tool call
says while it runs comes on that call's own SSE answer.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, BinaryIO

from lnk_mcpremote._arguments import Arguments
from lnk_mcpremote._protocol import (
    MAX_MESSAGE_BYTES,
    Message,
    MessageError,
    SessionState,
    SseError,
    SseReader,
    error_line,
    load_json,
    parse_message,
    routing_headers,
)

__all__ = [
    "CONNECT_TIMEOUT_SECONDS",
    "DELETE_TIMEOUT_SECONDS",
    "END_GRACE_SECONDS",
    "ERROR_REMOTE",
    "IDLE_TIMEOUT_SECONDS",
    "MAX_ERROR_BODY_BYTES",
    "MAX_IN_FLIGHT",
    "Relay",
]

# A remote that does not take the connection in 30 s is down, not slow.
CONNECT_TIMEOUT_SECONDS = 30.0
# Silence on an open answer: a tool may think for minutes, but not forever (the SDK's own
# client waits 300 s on an SSE read).
IDLE_TIMEOUT_SECONDS = 300.0
# The SDK's stdio client waits 2 s for a server to exit once stdin is closed, then kills
# it: the requests in flight and the DELETE share what is left under that.
END_GRACE_SECONDS = 1.0
DELETE_TIMEOUT_SECONDS = 0.8
# Requests in flight at once, each on its own connection: a client that floods is told no.
MAX_IN_FLIGHT = 32
# An error's body is read for a JSON-RPC error only: a page of HTML is not kept.
MAX_ERROR_BODY_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024
# JSON-RPC's range for implementation-defined server errors: the remote could not be reached
# or answered outside the protocol; the message says which.
ERROR_REMOTE = -32000
_PROGRAM = "lnk-sandbox-mcp-remote"


def _printable(text: str, limit: int = 120) -> str:
    """A remote's words (a content type, a reason) for one line of stderr."""
    return "".join(c if " " <= c <= "~" else "?" for c in text[:limit])


class Relay:
    def __init__(self, arguments: Arguments, stdout: BinaryIO, stderr: Callable[[str], None],
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._target = arguments.target
        self._headers = arguments.headers
        self._stdout = stdout
        self._say = stderr
        self._ssl = ssl_context
        if self._target.tls and self._ssl is None:
            # Python's default: the system's CAs (SSL_CERT_FILE and SSL_CERT_DIR honoured
            # by OpenSSL), hostname checked, TLS 1.2 at least.
            self._ssl = ssl.create_default_context()
        self._state = SessionState()
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        # Requests in flight: id -> (their socket, sent under 2026-07-28?). The socket, not
        # the connection: http.client hands it to the response and forgets it when the
        # answer is read to the connection's close (an SSE answer without a length).
        self._in_flight: dict[Any, tuple[socket.socket, bool]] = {}
        self._cancelled: set[Any] = set()
        self._threads: list[threading.Thread] = []
        self._last_modern = False

    # -- output ---------------------------------------------------------------------

    def _emit(self, line: bytes) -> None:
        with self._write_lock:
            self._stdout.write(line)
            self._stdout.flush()

    def _emit_message(self, body: Any) -> None:
        # ASCII out: a lone surrogate the remote escaped (`"\ud800"`) stays escaped, and
        # no byte of a line can be taken for its end.
        self._emit(json.dumps(body, separators=(",", ":")).encode() + b"\n")

    def _fail(self, message: Message, text: str) -> None:
        """A request gets a JSON-RPC error; anything else a line on stderr. A request the
        client cancelled (2026-07-28: its connection closed here) gets nothing: the
        client has stopped waiting, and what failed is only the closing."""
        if message.kind == "request":
            with self._state_lock:
                if message.id in self._cancelled:
                    return
        self._say(f"{_PROGRAM}: {text}")
        if message.kind == "request":
            self._emit(error_line(message.id, ERROR_REMOTE, f"{_PROGRAM}: {text}"))

    # -- HTTP -----------------------------------------------------------------------

    def _connect(self) -> http.client.HTTPConnection:
        target = self._target
        connection: http.client.HTTPConnection
        if target.tls:
            connection = http.client.HTTPSConnection(
                target.connect_host, target.port, timeout=CONNECT_TIMEOUT_SECONDS,
                context=self._ssl)
        else:
            connection = http.client.HTTPConnection(
                target.connect_host, target.port, timeout=CONNECT_TIMEOUT_SECONDS)
        connection.connect()
        if connection.sock is not None:
            connection.sock.settimeout(IDLE_TIMEOUT_SECONDS)
            with contextlib.suppress(OSError):
                connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def _send(self, connection: http.client.HTTPConnection, method: str,
              extra: list[tuple[str, str]], body: bytes | None) -> http.client.HTTPResponse:
        connection.putrequest(method, self._target.path, skip_host=True,
                              skip_accept_encoding=True)
        connection.putheader("Host", self._target.host_header)
        if body is not None:
            connection.putheader("Accept", "application/json, text/event-stream")
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Content-Length", str(len(body)))
        for name, value in (*extra, *self._headers):
            connection.putheader(name, value)
        connection.endheaders(body)
        return connection.getresponse()

    # -- one message ----------------------------------------------------------------

    def _post(self, message: Message, headers: list[tuple[str, str]], modern: bool) -> None:
        try:
            connection = self._connect()
        except (OSError, ssl.SSLError) as error:
            self._fail(message, f"cannot reach {self._target.host_header}: "
                                f"{_printable(str(error) or type(error).__name__)}")
            return
        raw_socket = connection.sock
        if message.kind == "request" and raw_socket is not None:
            with self._state_lock:
                self._in_flight[message.id] = (raw_socket, modern)
        sent_session = next((value for name, value in headers if name == "MCP-Session-Id"), None)
        try:
            response = self._send(connection, "POST", headers, message.raw)
            self._answer(message, response, sent_session)
        except (OSError, http.client.HTTPException, ssl.SSLError) as error:
            self._fail(message, f"the connection to {self._target.host_header} failed: "
                                f"{_printable(str(error) or type(error).__name__)}")
        finally:
            with self._state_lock:
                if message.kind == "request" and self._in_flight.get(message.id, (None,))[0] \
                        is raw_socket:
                    del self._in_flight[message.id]
                    self._cancelled.discard(message.id)
            connection.close()

    def _answer(self, message: Message, response: http.client.HTTPResponse,
                sent_session: str | None) -> None:
        status = response.status
        if status == 202 or (message.kind != "request" and 200 <= status < 300):
            if message.kind == "request":
                self._fail(message, "the remote answered a request with 202 (no answer)")
            return
        if 300 <= status < 400:
            self._fail(message, f"the remote answered HTTP {status} (a redirect, not followed)")
            return
        if status == 404 and sent_session is not None:
            with self._state_lock:
                self._state.forget_session(sent_session)
            self._fail(message, "the remote session expired (HTTP 404): initialize again")
            return
        if status >= 400:
            self._error_answer(message, response)
            return
        content_type = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if content_type == "application/json":
            body = response.read(MAX_MESSAGE_BYTES + 1)
            if len(body) > MAX_MESSAGE_BYTES:
                self._fail(message, f"the remote's answer is over {MAX_MESSAGE_BYTES} bytes")
                return
            try:
                answer = load_json(body)
            except (ValueError, RecursionError):
                self._fail(message, "the remote's answer is not JSON")
                return
            if not isinstance(answer, dict):
                self._fail(message, "the remote's answer is not one JSON-RPC object")
                return
            self._on_answer(message, response, answer)
            self._emit_message(answer)
        elif content_type == "text/event-stream":
            self._stream(message, response)
        else:
            self._fail(message, f"the remote answered with {_printable(content_type)!r}, "
                                "neither JSON nor an event stream")

    def _on_answer(self, message: Message, response: http.client.HTTPResponse,
                   answer: dict[str, Any]) -> None:
        if message.method == "tools/list" and message.modern_version is not None:
            with self._state_lock:
                self._state.learn_tools(answer)
        if message.method == "initialize" and message.modern_version is None \
                and answer.get("id") == message.id and "result" in answer:
            with self._state_lock:
                problem = self._state.on_initialize_answer(
                    response.getheader("MCP-Session-Id"), answer)
            if problem:
                self._say(f"{_PROGRAM}: {problem}")

    def _stream(self, message: Message, response: http.client.HTTPResponse) -> None:
        reader = SseReader()
        while True:
            chunk = response.read1(_READ_CHUNK)
            if not chunk:
                self._fail(message, "the remote's event stream ended without an answer")
                return
            try:
                events = reader.feed(chunk)
            except SseError as error:
                self._fail(message, f"the remote's event stream: {error}")
                return
            for event in events:
                if event.event != "message" or not event.data:
                    continue  # a priming event (an id for resuming), or a kind MCP has not
                try:
                    relayed = load_json(event.data.encode())
                except (ValueError, RecursionError):
                    self._say(f"{_PROGRAM}: an event that is not JSON, dropped")
                    continue
                if not isinstance(relayed, dict):
                    self._say(f"{_PROGRAM}: an event that is not one JSON-RPC object, dropped")
                    continue
                is_answer = relayed.get("id") == message.id and (
                    "result" in relayed or "error" in relayed) and "method" not in relayed
                if is_answer:
                    self._on_answer(message, response, relayed)
                self._emit_message(relayed)
                if is_answer:
                    return

    def _error_answer(self, message: Message, response: http.client.HTTPResponse) -> None:
        """A 4xx or 5xx: the JSON-RPC error in its body if there is one, else the status."""
        status = response.status
        content_type = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        if message.kind == "request" and content_type == "application/json":
            body = response.read(MAX_ERROR_BODY_BYTES + 1)
            try:
                parsed = load_json(body) if len(body) <= MAX_ERROR_BODY_BYTES else None
            except (ValueError, RecursionError):
                parsed = None
            error = parsed.get("error") if isinstance(parsed, dict) else None
            if isinstance(error, dict) and isinstance(error.get("code"), int) \
                    and isinstance(error.get("message"), str):
                # The server may answer `id: null` before it read the id: ours is put back.
                self._say(f"{_PROGRAM}: the remote refused with HTTP {status}, "
                          f"JSON-RPC error {error['code']}")
                self._emit_message({"jsonrpc": "2.0", "id": message.id, "error": error})
                return
        if status in (401, 403):
            self._fail(message, f"the remote refused the credentials (HTTP {status})")
        else:
            self._fail(message, f"the remote answered HTTP {status}")

    # -- the loop -------------------------------------------------------------------

    def handle_line(self, raw: bytes) -> None:
        try:
            message = parse_message(raw)
        except MessageError as error:
            self._say(f"{_PROGRAM}: a line from the client refused: {error}")
            # id null, as JSON-RPC says when the id cannot be read.
            self._emit(error_line(None, error.code, f"{_PROGRAM}: {error}"))
            return
        modern = message.modern_version is not None
        if message.kind == "notification" and message.method == "notifications/cancelled" \
                and self._cancel_modern(message):
            return
        with self._state_lock:
            if modern:
                self._last_modern = True
            try:
                headers = routing_headers(message, self._state)
            except MessageError as error:
                headers = None
                problem = str(error)
        if headers is None:
            self._fail(message, problem)
            return
        if message.kind != "request" or message.method == "initialize":
            self._guarded_post(message, headers, modern)
            return
        if not self._slots.acquire(blocking=False):
            self._fail(message, f"more than {MAX_IN_FLIGHT} requests in flight")
            return

        def run() -> None:
            try:
                self._guarded_post(message, headers, modern)
            except BrokenPipeError:
                pass  # the client is gone; the reading thread sees its end of stdin
            finally:
                self._slots.release()

        thread = threading.Thread(target=run, daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def _guarded_post(self, message: Message, headers: list[tuple[str, str]],
                      modern: bool) -> None:
        try:
            self._post(message, headers, modern)
        except BrokenPipeError:
            raise  # the client is gone: the reading thread ends on it
        except Exception as error:  # a bug: this message is refused, the others go on
            self._fail(message, f"internal error ({type(error).__name__})")

    def _cancel_modern(self, message: Message) -> bool:
        """2026-07-28 over HTTP has no client notifications: closing a request's answer is
        its cancellation. True when the notification was taken that way (not POSTed)."""
        params = message.body.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        with self._state_lock:
            entry = self._in_flight.get(request_id) if request_id is not None else None
            if entry is None:
                return self._last_modern and message.modern_version is not None
            raw_socket, modern = entry
            if not modern:
                return False
            self._cancelled.add(request_id)
        with contextlib.suppress(OSError):
            raw_socket.shutdown(socket.SHUT_RDWR)
        return True

    def end(self) -> None:
        """The client is gone: a short wait for the answers in flight, then the session's
        DELETE (2025-11-25; a 405 means the server keeps no such thing)."""
        deadline = time.monotonic() + END_GRACE_SECONDS
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._state_lock:
            session_id = self._state.session_id
            version = self._state.protocol_version
            self._state.forget_session()
            for raw_socket, _ in self._in_flight.values():
                with contextlib.suppress(OSError):
                    raw_socket.shutdown(socket.SHUT_RDWR)
        if session_id is None:
            return
        headers = [("MCP-Session-Id", session_id)]
        if version is not None:
            headers.append(("MCP-Protocol-Version", version))
        try:
            connection = self._connect()
            if connection.sock is not None:
                connection.sock.settimeout(DELETE_TIMEOUT_SECONDS)
            response = self._send(connection, "DELETE", headers, None)
            response.read(MAX_ERROR_BODY_BYTES)
            connection.close()
            if response.status not in (200, 202, 204, 404, 405):
                self._say(f"{_PROGRAM}: ending the session: HTTP {response.status}")
        except (OSError, http.client.HTTPException, ssl.SSLError) as error:
            self._say(f"{_PROGRAM}: ending the session failed: "
                      f"{_printable(str(error) or type(error).__name__)}")

    def run(self, stdin: BinaryIO) -> None:
        """Until stdin ends (or SIGTERM): each line relayed; then `end`."""
        def stop(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(0)

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, stop)
        try:
            while True:
                line = stdin.readline(MAX_MESSAGE_BYTES + 2)
                if not line:
                    break
                if not line.endswith(b"\n") and len(line) > MAX_MESSAGE_BYTES:
                    self._say(f"{_PROGRAM}: a line over {MAX_MESSAGE_BYTES} bytes: the client is"
                              " cut off")
                    break
                line = line.rstrip(b"\r\n")
                if line.strip():
                    self.handle_line(line)
        except BrokenPipeError:
            pass
        finally:
            with contextlib.suppress(BrokenPipeError):
                self.end()


def serve(arguments: Arguments) -> None:
    def say(line: str) -> None:
        with contextlib.suppress(OSError):
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    Relay(arguments, sys.stdout.buffer, say).run(sys.stdin.buffer)
