"""lnk-sandbox-mcp-remote, run for real: the installed console script between a real `mcp`
SDK stdio client and a real `mcp` SDK Streamable HTTP server (MCPServer, the SDK 2.x name
of FastMCP) on 127.0.0.1 that wants a bearer token; small hand-written HTTP servers for
what the SDK will not do on purpose (a redirect, an expired session, SSE cut in odd
places, a header recorded byte for byte); and the sans-IO parts fed whole, byte by byte
and by Hypothesis.

The installed SDK (mcp 2.3.0) speaks both revisions: its client in mode "auto" probes
`server/discover` (2026-07-28) and its server answers it, so both are tested end to end.
"""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
import trustme
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from lnk_mcpremote import (
    MAX_HEADERS,
    ArgumentError,
    SseReader,
    parse_arguments,
    parse_target,
)
from lnk_mcpremote._protocol import (
    MAX_MESSAGE_BYTES,
    MessageError,
    SessionState,
    SseError,
    SseEvent,
    parse_message,
    routing_headers,
)
from tests.conftest import fuzz

# The `note` tool logs through the SDK's Context, which 2026-07-28 deprecates (SEP-2577)
# while 2025-11-25 clients, the ones this test's logging is for, still read it.
pytestmark = pytest.mark.filterwarnings("ignore:The logging capability is deprecated")

_BESIDE = Path(sys.executable).parent / "lnk-sandbox-mcp-remote"
MCP_REMOTE = str(_BESIDE)
TOKEN = "tok-9f8e7d6c5b4a-secret"  # noqa: S105 - a test token, sent only to loopback
# A step of a test (a reply, a process's end) that takes longer than this is hung.
STEP_TIMEOUT_SECONDS = 30


# -- a real SDK server, guarded by a bearer token ------------------------------------


@dataclass
class Seen:
    """What the server was sent: method, path and headers (lower-case names)."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)


def _sdk_server() -> MCPServer:
    server = MCPServer("far")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def fetch(repo: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Repo"})]) -> str:
        """Names an argument the 2026-07-28 client mirrors as `Mcp-Param-Repo`."""
        return f"fetched {repo}"

    @server.tool()
    async def note(text: str, ctx: Context) -> str:
        """Says it is working (a notification on the SSE answer), then answers."""
        await ctx.info(f"working on {text}")
        return f"noted {text}"

    return server


@pytest.fixture
def sdk_server() -> Iterator[tuple[str, Seen]]:
    """The SDK's Streamable HTTP app under uvicorn on 127.0.0.1, behind a guard that
    records each request and answers 401 to one without the token."""
    seen = Seen()
    app = _sdk_server().streamable_http_app(host="127.0.0.1")

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            seen.requests.append((scope["method"], headers))
            if headers.get("authorization") != f"Bearer {TOKEN}":
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-length", b"0")]})
                await send({"type": "http.response.body", "body": b""})
                return
        await app(scope, receive, send)

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(guarded, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
    while not server.started:
        assert time.monotonic() < deadline, "the SDK server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/mcp", seen
    server.should_exit = True
    thread.join(STEP_TIMEOUT_SECONDS)


def _params(url: str, *headers: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    args = [url]
    for header in headers:
        args += ["--header", header]
    return StdioServerParameters(command=MCP_REMOTE, args=args, env=env or {})


def test_the_sdk_client_reaches_the_sdk_server_by_session_revision(
        sdk_server: tuple[str, Seen], tmp_path: Path) -> None:
    """2025-11-25: initialize, tools/list, tools/call (JSON and SSE with a notification
    first); the token (from ${FAR_TOKEN}) reaches the server and never stderr; the
    session is sent after initialize and ended with DELETE."""
    url, seen = sdk_server
    logs: list[str] = []
    errlog = tmp_path / "stderr"

    async def on_log(params: Any) -> None:
        logs.append(params.data)

    async def session() -> tuple[Any, list[str], Any, Any]:
        params = _params(url, "Authorization: Bearer ${FAR_TOKEN}",
                         env={"FAR_TOKEN": TOKEN, "LNK_TOOL_SECRETS": "FAR_TOKEN"})
        with errlog.open("w") as err, anyio.fail_after(STEP_TIMEOUT_SECONDS):
            async with stdio_client(params, errlog=err) as (read, write), \
                    ClientSession(read, write, logging_callback=on_log) as client:
                initialized = await client.initialize()
                tools = [tool.name for tool in (await client.list_tools()).tools]
                added = await client.call_tool("add", {"a": 2, "b": 40})
                noted = await client.call_tool("note", {"text": "far"})
                return initialized, tools, added, noted

    initialized, tools, added, noted = anyio.run(session)
    assert initialized.protocol_version == "2025-11-25"
    assert tools == ["add", "fetch", "note"]
    assert added.structured_content == {"result": 42}
    assert noted.structured_content == {"result": "noted far"}
    assert logs == ["working on far"]  # the notification came first, on the call's SSE
    assert all(h.get("authorization") == f"Bearer {TOKEN}" for _, h in seen.requests)
    assert TOKEN not in errlog.read_text()
    first, *later = seen.requests
    assert first[0] == "POST" and "mcp-session-id" not in first[1]
    assert "mcp-protocol-version" not in first[1]
    session_id = later[0][1]["mcp-session-id"]
    assert all(h.get("mcp-session-id") == session_id for _, h in later)
    assert all(h.get("mcp-protocol-version") == "2025-11-25" for _, h in later)
    assert all(h["accept"] == "application/json, text/event-stream"
               for method, h in seen.requests if method == "POST")
    # The session ended: the last request is its DELETE (stdio_client closes stdin and
    # waits; the relay ends the session before it exits).
    assert seen.requests[-1][0] == "DELETE"
    assert seen.requests[-1][1]["mcp-session-id"] == session_id


def test_the_sdk_client_reaches_the_sdk_server_by_stateless_revision(
        sdk_server: tuple[str, Seen]) -> None:
    """2026-07-28 (the SDK client's "auto" probes server/discover): no session, and on
    every POST the version, Mcp-Method, (tools/call) Mcp-Name and a tool's Mcp-Param-*
    mirrored from its arguments, which the SDK server checks against the body."""
    url, seen = sdk_server

    async def session() -> tuple[list[str], Any, Any]:
        params = _params(url, f"Authorization: Bearer {TOKEN}")
        with anyio.fail_after(STEP_TIMEOUT_SECONDS):
            async with Client(params, mode="auto") as client:
                tools = [tool.name for tool in (await client.list_tools()).tools]
                added = await client.call_tool("add", {"a": 1, "b": 2})
                return tools, added, await client.call_tool("fetch", {"repo": "caf\u00e9/x"})

    tools, added, fetched = anyio.run(session)
    assert tools == ["add", "fetch", "note"]
    assert added.structured_content == {"result": 3}
    assert fetched.structured_content == {"result": "fetched caf\u00e9/x"}, fetched
    methods = [(h.get("mcp-method"), h.get("mcp-name")) for _, h in seen.requests]
    assert methods == [("server/discover", None), ("tools/list", None), ("tools/call", "add"),
                       ("tools/call", "fetch")]
    encoded = base64.b64encode("caf\u00e9/x".encode()).decode()
    assert seen.requests[-1][1]["mcp-param-repo"] == f"=?base64?{encoded}?="
    assert all(h.get("mcp-protocol-version") == "2026-07-28" for _, h in seen.requests)
    assert all("mcp-session-id" not in h for _, h in seen.requests)
    assert [method for method, _ in seen.requests] == ["POST"] * 4  # no session, no DELETE


# -- the console script alone, JSON lines in and out --------------------------------

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}}


def _modern(request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    return {"jsonrpc": "2.0", "id": request_id, "method": method,
            "params": {**params, "_meta": meta}}


def relay(args: list[str], messages: list[dict[str, Any]],
          env: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str, int]:
    """Run the script, write `messages` as lines, close stdin: its stdout's messages, its
    stderr, its exit status."""
    done = subprocess.run(
        [MCP_REMOTE, *args], input="".join(json.dumps(m) + "\n" for m in messages),
        capture_output=True, text=True, timeout=STEP_TIMEOUT_SECONDS,
        env={"PATH": os.environ["PATH"], **(env or {})}, check=False)
    return [json.loads(line) for line in done.stdout.splitlines()], done.stderr, done.returncode


def test_without_the_token_the_server_says_401_and_the_client_is_told(
        sdk_server: tuple[str, Seen]) -> None:
    url, seen = sdk_server
    out, _, code = relay([url], [INITIALIZE])
    assert code == 0
    assert out[0]["id"] == 1 and "credentials (HTTP 401)" in out[0]["error"]["message"]
    assert "authorization" not in seen.requests[0][1]


Handler = Callable[[http.server.BaseHTTPRequestHandler, bytes], None]


@dataclass
class Recorder:
    """A hand-written HTTP/1.1 server on an address of this machine: each request's
    method, headers and body kept; `answer` decides the reply."""

    answer: Handler
    address: str = "127.0.0.1"
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    def url(self, path: str = "/mcp") -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def recorder() -> Iterator[Callable[..., Recorder]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(answer: Handler, address: str = "127.0.0.1",
              tls: ssl.SSLContext | None = None) -> Recorder:
        record = Recorder(answer, address)

        class Handle(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                record.connections += 1
                super().setup()

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                record.requests.append((self.command, {k.lower(): v for k, v in
                                                        self.headers.items()}, body))
                record.answer(self, body)

            do_POST = do_GET = do_DELETE = _any

        class Server(http.server.ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

        server = Server((address, 0), Handle)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        record.port = server.server_address[1]
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return record

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def reply(handler: http.server.BaseHTTPRequestHandler, status: int, body: bytes = b"",
          content_type: str = "application/json", headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    if body:
        handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def answer_result(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
    message = json.loads(body)
    if "id" not in message:
        reply(handler, 202)
        return
    result = {"protocolVersion": "2025-11-25", "capabilities": {}} \
        if message["method"] == "initialize" else {"ok": message["method"]}
    reply(handler, 200, json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                    "result": result}).encode())


def _this_machines_addresses() -> list[str]:
    done = subprocess.run(["ip", "-o", "addr", "show", "scope", "global"],
                          capture_output=True, text=True, check=True)
    return [line.split()[3].split("/")[0] for line in done.stdout.splitlines()]


def test_plain_http_off_loopback_is_refused_before_any_connection(
        recorder: Callable[..., Recorder]) -> None:
    """Every http:// URL that does not name loopback as such is refused, exit 2, with no
    connection: to this machine's own addresses (a listener there counts connections) and
    to spellings that would land on loopback only once resolved or connected (127.1,
    0.0.0.0, an IPv4-mapped IPv6, `localhost.`)."""
    for address in _this_machines_addresses():
        listener = recorder(answer_result, address)
        url = listener.url()
        _, err, code = relay([url, "--header", f"Authorization: Bearer {TOKEN}"], [INITIALIZE])
        assert code == 2 and "plain http:// is refused" in err and TOKEN not in err
        assert err.count("\n") == 1
        assert listener.connections == 0
    # A listener on every address of this machine (a machine with no global address
    # still has this one): each spelling below would reach it if it were dialled.
    loopback = recorder(answer_result, "0.0.0.0")  # noqa: S104 - to see 0.0.0.0 not dialled
    for host in ("127.1", "0.0.0.0", "[::ffff:127.0.0.1]", "localhost.", "2130706433",  # noqa: S104
                 "127.0.0.1.nip.io", "192.0.2.1", "10.0.0.1"):
        _, err, code = relay([f"http://{host}:{loopback.port}/mcp"], [INITIALIZE])
        assert code == 2, host
        assert err.startswith("lnk-sandbox-mcp-remote: ") and err.count("\n") == 1
    assert loopback.connections == 0


def test_loopback_by_every_name_is_taken(recorder: Callable[..., Recorder]) -> None:
    for address, host in (("127.0.0.1", "127.0.0.1"), ("127.0.0.1", "localhost"),
                          ("::1", "[::1]")):
        server = recorder(answer_result, address)
        out, err, code = relay([f"http://{host}:{server.port}/mcp"], [INITIALIZE])
        assert code == 0 and out[0]["result"]["protocolVersion"] == "2025-11-25", err
        expected_host = f"{host}:{server.port}"
        assert server.requests[0][1]["host"] == expected_host


def test_https_is_verified_against_the_cas_ssl_cert_file_names(
        recorder: Callable[..., Recorder], tmp_path: Path) -> None:
    """TLS with Python's default context: a certificate from a CA in SSL_CERT_FILE is
    taken, for the name in the URL; an unknown CA, or a certificate for another name, is
    no (and no token is sent)."""
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("localhost").configure_cert(context)
    server = recorder(answer_result, tls=context)
    url = f"https://localhost:{server.port}/mcp"
    header = ["--header", f"Authorization: Bearer {TOKEN}"]
    trusted = {"SSL_CERT_FILE": str(tmp_path / "ca.pem")}
    out, err, _ = relay([url, *header], [INITIALIZE], env=trusted)
    assert out[0]["result"]["protocolVersion"] == "2025-11-25", err
    assert server.requests[0][1]["authorization"] == f"Bearer {TOKEN}"
    out, err, _ = relay([url, *header], [INITIALIZE])
    assert "CERTIFICATE_VERIFY_FAILED" in out[0]["error"]["message"] and TOKEN not in err
    out, _, _ = relay([f"https://127.0.0.1:{server.port}/mcp", *header], [INITIALIZE],
                      env=trusted)
    assert "CERTIFICATE_VERIFY_FAILED" in out[0]["error"]["message"]  # named for localhost only
    assert len(server.requests) == 1


def test_a_redirect_is_not_followed(recorder: Callable[..., Recorder]) -> None:
    elsewhere = recorder(answer_result)
    redirecting = recorder(lambda handler, body: reply(
        handler, 307, headers={"Location": elsewhere.url()}))
    out, err, _ = relay([redirecting.url(), "--header", f"Authorization: Bearer {TOKEN}"],
                        [INITIALIZE])
    assert "HTTP 307 (a redirect, not followed)" in out[0]["error"]["message"]
    assert elsewhere.connections == 0
    assert TOKEN not in err


@pytest.mark.parametrize(("header", "says"), [
    ("Bad Name: x", "letters, digits"),
    ("Authorization: Bearer a\r\nX-Evil: 1", "CR, LF or NUL"),
    ("Authorization: Bearer a\nb", "CR, LF or NUL"),
    ("Bearer tok-9f8e7d6c5b4a-secret", "no colon"),
    ("Mcp-Session-Id: forged", "set by lnk-sandbox-mcp-remote itself"),
    ("Host: elsewhere", "set by lnk-sandbox-mcp-remote itself"),
    ("Mcp-Param-Repo: x", "set by lnk-sandbox-mcp-remote itself"),
    ("Authorization: Bearer ${NOT_SET}", "${NOT_SET} is not one of the tool's secrets"),
    ("Authorization: Bearer ${LISTED}", "${LISTED} is not in the environment"),
    ("Authorization: Bearer caf\u00e9", "non-ASCII"),
])
def test_a_bad_header_is_refused_and_its_value_never_said(
        recorder: Callable[..., Recorder], header: str, says: str) -> None:
    server = recorder(answer_result)
    _, err, code = relay([server.url(), "--header", header], [INITIALIZE],
                         env={"LNK_TOOL_SECRETS": "LISTED"})
    assert code == 2 and says in err and err.count("\n") == 1
    assert "Bearer" not in err and "forged" not in err and "tok-" not in err
    assert server.connections == 0


def test_a_filled_value_with_a_line_break_is_refused(recorder: Callable[..., Recorder]) -> None:
    server = recorder(answer_result)
    _, err, code = relay([server.url(), "--header", "Authorization: Bearer ${T}"],
                         [INITIALIZE], env={"T": "abc\r\nX-Evil: 1", "LNK_TOOL_SECRETS": "T"})
    assert code == 2 and "CR, LF or NUL" in err and "abc" not in err
    assert server.connections == 0


def test_a_variable_that_is_not_one_of_the_tools_secrets_is_never_filled(
        recorder: Callable[..., Recorder]) -> None:
    """`${VAR}` is filled only for a VAR that LNK_TOOL_SECRETS lists (the tool's own
    secrets, given by the proxy): a variable the environment holds for another reason
    (HOME, a session's token) is refused, and nothing is sent."""
    server = recorder(answer_result)
    _, err, code = relay([server.url(), "--header", "Authorization: Bearer ${OTHER}"],
                         [INITIALIZE], env={"OTHER": "tok-9f8e7d6c5b4a", "T": "x",
                                            "LNK_TOOL_SECRETS": "T"})
    assert code == 2 and "${OTHER} is not one of the tool's secrets" in err, err
    assert "tok-" not in err and server.connections == 0


def test_headers_at_the_limit_are_taken_and_one_more_is_not() -> None:
    at_limit = [f"--header=X-H{n}: v" for n in range(MAX_HEADERS)]
    assert len(parse_arguments(["https://far.example/mcp", *at_limit], {}).headers) == MAX_HEADERS
    with pytest.raises(ArgumentError, match="more than"):
        parse_arguments(["https://far.example/mcp", *at_limit, "--header=X-Last: v"], {})


def test_sse_notifications_and_requests_come_first_then_the_answer(
        recorder: Callable[..., Recorder]) -> None:
    """An SSE answer cut at odd places (CRLF split, a priming event, a comment, a
    multi-line data): each message is relayed as it comes, the answer last; what follows
    the answer on that stream is not read."""
    def answer(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        message = json.loads(body)
        if message["method"] != "tools/call":
            answer_result(handler, body)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        notification = {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": 1, "progress": 0.5}}
        ask = {"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {}}
        result = {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}
        stream = (b"id: 0\r\ndata:\r\n\r\n: a comment\r\n"
                  + b"data: " + json.dumps(notification).encode() + b"\r\n\r\n"
                  + b"event: message\ndata: " + json.dumps(ask).encode() + b"\n\n"
                  + b"data: {\"jsonrpc\": \"2.0\",\ndata: " + json.dumps(result).encode()[19:]
                  + b"\r\n\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"after\"}\n\n")
        for index in range(0, len(stream), 7):
            handler.wfile.write(stream[index:index + 7])
            handler.wfile.flush()

    server = recorder(answer)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "x"}}
    out, err, _ = relay([server.url()], [INITIALIZE, call])
    assert [m.get("method", m.get("id")) for m in out] == [
        1, "notifications/progress", "sampling/createMessage", 2]
    assert out[-1]["result"] == {"content": []}, err


def test_stateless_headers_come_from_the_body(recorder: Callable[..., Recorder]) -> None:
    """A body whose _meta names 2026-07-28 gets that version, Mcp-Method and Mcp-Name
    (base64 when not plain ASCII) whatever came before; no session is sent."""
    def answer(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        message = json.loads(body)
        reply(handler, 200, json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                        "result": {"resultType": "complete"}}).encode())

    server = recorder(answer)
    out, err, _ = relay([server.url()], [
        _modern(1, "server/discover", {}),
        _modern(2, "tools/call", {"name": "caf\u00e9", "arguments": {}}),
        _modern(3, "resources/read", {"uri": "file:///a b"}),
        _modern(4, "prompts/get", {"name": "p"}),
    ])
    assert sorted(m["id"] for m in out) == [1, 2, 3, 4], err  # requests run side by side
    seen = {json.loads(body)["id"]: headers for _, headers, body in server.requests}
    assert seen[1]["mcp-method"] == "server/discover" and "mcp-name" not in seen[1]
    encoded = base64.b64encode("caf\u00e9".encode()).decode()
    assert seen[2]["mcp-name"] == f"=?base64?{encoded}?="
    assert seen[3]["mcp-name"] == "file:///a b" and seen[3]["mcp-method"] == "resources/read"
    assert seen[4]["mcp-name"] == "p"
    assert all(h["mcp-protocol-version"] == "2026-07-28" and "mcp-session-id" not in h
               for h in seen.values())


def test_param_headers_follow_the_tools_list_the_relay_carried() -> None:
    """`x-mcp-header` on a properties chain (string, integer, boolean) is mirrored; on an
    object, past the chain, or not a token, it is not; a tool listed again is replaced."""
    state = SessionState()
    schema = {"type": "object", "properties": {
        "repo": {"type": "string", "x-mcp-header": "Repo"},
        "opts": {"type": "object", "properties": {
            "dry": {"type": "boolean", "x-mcp-header": "Dry"},
            "n": {"type": "integer", "x-mcp-header": "N"}}},
        "blob": {"type": "object", "x-mcp-header": "Blob"},
        "bad": {"type": "string", "x-mcp-header": "no spaces"},
        "deep": {"anyOf": [{"type": "string", "x-mcp-header": "Off"}]}}}
    state.learn_tools({"result": {"tools": [{"name": "t", "inputSchema": schema}]}})
    call = parse_message(json.dumps(_modern(5, "tools/call", {"name": "t", "arguments": {
        "repo": "r", "opts": {"dry": True, "n": 7}, "blob": {}, "bad": "x"}})).encode())
    headers = dict(routing_headers(call, state))
    assert {k: v for k, v in headers.items() if k.startswith("Mcp-Param-")} == {
        "Mcp-Param-Repo": "r", "Mcp-Param-Dry": "true", "Mcp-Param-N": "7"}
    state.learn_tools({"result": {"tools": [{"name": "t", "inputSchema": {}}]}})
    assert not [k for k, _ in routing_headers(call, state) if k.startswith("Mcp-Param-")]
    legacy = parse_message(json.dumps({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                                       "params": {"name": "t"}}).encode())
    assert routing_headers(legacy, state) == []


def test_a_stateless_cancellation_closes_the_requests_answer_and_is_not_posted(
        recorder: Callable[..., Recorder]) -> None:
    """2026-07-28 over HTTP has no client notifications: closing the answer is the
    cancellation. The relay closes the call's connection, POSTs nothing for it, and
    answers nothing for the cancelled request; a later request still goes."""
    closed = threading.Event()

    def answer(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        message = json.loads(body)
        if message["method"] != "tools/call":
            reply(handler, 200, json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                            "result": {"resultType": "complete"}}).encode())
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        handler.wfile.flush()
        handler.connection.settimeout(STEP_TIMEOUT_SECONDS)
        if handler.rfile.read(1) == b"":  # the relay closed the call's connection
            closed.set()

    server = recorder(answer)
    process = subprocess.Popen([MCP_REMOTE, server.url()], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled",
              "params": {"requestId": 2, "reason": "no longer needed"}}
    try:
        process.stdin.write(json.dumps(_modern(2, "tools/call", {"name": "slow"})).encode()
                            + b"\n")
        process.stdin.flush()
        deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
        while not server.requests:
            assert time.monotonic() < deadline, "the call never reached the server"
            time.sleep(0.02)
        process.stdin.write(json.dumps(cancel).encode() + b"\n")
        process.stdin.write(json.dumps(_modern(3, "tools/list", {})).encode() + b"\n")
        process.stdin.flush()
        assert closed.wait(STEP_TIMEOUT_SECONDS)
        later = json.loads(process.stdout.readline())
        assert later["id"] == 3 and "result" in later
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(STEP_TIMEOUT_SECONDS) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert rest == b""  # no answer, not even an error, for the cancelled request
    assert [json.loads(body)["id"] for _, _, body in server.requests] == [2, 3]


def test_a_404_on_a_session_says_it_expired_and_the_next_initialize_starts_clean(
        recorder: Callable[..., Recorder]) -> None:
    sessions = iter(range(1, 100))

    def answer(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        message = json.loads(body) if body else {}
        if message.get("method") == "initialize":
            reply(handler, 200, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-11-25"}}).encode(),
                headers={"Mcp-Session-Id": f"s-{next(sessions)}"})
        else:
            reply(handler, 404)

    server = recorder(answer)
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    out, _, _ = relay([server.url()], [INITIALIZE, listed, {**INITIALIZE, "id": 3}])
    by_id = {m["id"]: m for m in out}  # tools/list runs beside the second initialize
    assert "session expired" in by_id[2]["error"]["message"]
    assert "result" in by_id[3]
    sent = {(json.loads(body)["id"] if body else "end"): h for _, h, body in server.requests}
    assert sent[2]["mcp-session-id"] == "s-1"
    assert "mcp-session-id" not in sent[3]  # the re-initialize carries no stale session
    # The new session is the one ended (a late 404 of the old one did not drop it).
    assert server.requests[-1][0] == "DELETE" and sent["end"]["mcp-session-id"] == "s-2"


def test_sigterm_ends_the_session_too(recorder: Callable[..., Recorder]) -> None:
    """Ended by a signal rather than by the end of stdin (the proxy ending a sandbox's
    tools), the relay still DELETEs its session, and exits 0."""
    def answer(handler: http.server.BaseHTTPRequestHandler, body: bytes) -> None:
        if handler.command == "DELETE":
            reply(handler, 204)
            return
        message = json.loads(body)
        reply(handler, 200, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
            "protocolVersion": "2025-11-25"}}).encode(), headers={"Mcp-Session-Id": "s-9"})

    server = recorder(answer)
    process = subprocess.Popen([MCP_REMOTE, server.url()], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        process.stdin.flush()
        assert json.loads(process.stdout.readline())["id"] == 1
        process.terminate()
        assert process.wait(STEP_TIMEOUT_SECONDS) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert [(method, headers.get("mcp-session-id")) for method, headers, _ in
            server.requests] == [("POST", None), ("DELETE", "s-9")]


def test_a_message_at_the_limit_is_taken_and_one_byte_more_is_not() -> None:
    def message(size: int) -> bytes:
        frame = b'{"jsonrpc":"2.0","method":"m","params":{"pad":""}}'
        padding = b"x" * (size - len(frame))
        return frame.replace(b'""', b'"' + padding + b'"')

    assert len(message(MAX_MESSAGE_BYTES)) == MAX_MESSAGE_BYTES
    assert parse_message(message(MAX_MESSAGE_BYTES)).kind == "notification"
    with pytest.raises(MessageError, match="over"):
        parse_message(message(MAX_MESSAGE_BYTES + 1))


@fuzz(3)
@given(st.one_of(st.binary(max_size=300), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "_meta"]),
        inner, max_size=5), max_leaves=20).map(lambda value: json.dumps(value).encode())))
def test_a_line_parses_or_raises_its_own_error(raw: bytes) -> None:
    with contextlib.suppress(MessageError):
        routing_headers(parse_message(raw), SessionState())


def test_a_jsonrpc_error_at_an_http_error_is_relayed_with_the_requests_id(
        recorder: Callable[..., Recorder]) -> None:
    server = recorder(lambda handler, body: reply(handler, 400, json.dumps({
        "jsonrpc": "2.0", "id": None, "error": {"code": -32020, "message": "mismatch"}}).encode()))
    out, _, _ = relay([server.url()], [INITIALIZE])
    assert out == [{"jsonrpc": "2.0", "id": 1, "error": {"code": -32020, "message": "mismatch"}}]


def test_a_line_that_is_not_jsonrpc_gets_an_error_and_the_relay_goes_on(
        recorder: Callable[..., Recorder]) -> None:
    server = recorder(answer_result)
    done = subprocess.run([MCP_REMOTE, server.url()], capture_output=True, timeout=30,
                          input=b"{not json\n[1,2]\n" + json.dumps(INITIALIZE).encode() + b"\n",
                          check=False)
    out = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["error"]["code"] for m in out[:2]] == [-32700, -32600]
    assert out[2]["id"] == 1 and "result" in out[2]


def test_nothing_listening_is_an_error_for_the_request(recorder: Callable[..., Recorder]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    out, _, code = relay([f"http://127.0.0.1:{port}/mcp"], [INITIALIZE])
    assert code == 0 and "cannot reach 127.0.0.1" in out[0]["error"]["message"]


# -- the sans-IO parts ---------------------------------------------------------------


@pytest.mark.parametrize(("url", "host", "connect", "header"), [
    ("https://far.example/mcp", "far.example", "far.example", "far.example"),
    ("https://far.example:8443/a?b=c", "far.example", "far.example", "far.example:8443"),
    ("http://localhost:9/mcp", "localhost", "127.0.0.1", "localhost:9"),
    ("http://127.0.0.9/", "127.0.0.9", "127.0.0.9", "127.0.0.9"),
    ("http://[::1]:9/", "::1", "::1", "[::1]:9"),
    ("https://[2001:db8::1]/", "2001:db8::1", "2001:db8::1", "[2001:db8::1]"),
])
def test_a_target_is_taken(url: str, host: str, connect: str, header: str) -> None:
    target = parse_target(url)
    assert (target.host, target.connect_host, target.host_header) == (host, connect, header)


@pytest.mark.parametrize("url", [
    "ftp://far.example/", "far.example/mcp", "https://user:pw@far.example/",
    "https://far.example/#frag", "https://far example/", "https://far.example:0/",
    "https://far.example:99999/", "https://caf\u00e9.example/", "https://far_x.example/",
    "http://10.0.0.1/", "http://192.0.2.2/", "http://[fd00::2]/", "http://127.1/",
    "http://0.0.0.0/", "http://[::ffff:127.0.0.1]/", "http://localhost./",
    "http://localhost.example/", "https://" + "a" * 5000,
])
def test_a_target_is_refused(url: str) -> None:
    with pytest.raises(ArgumentError):
        parse_target(url)


def _events(chunks: list[bytes]) -> list[SseEvent]:
    reader = SseReader()
    return [event for chunk in chunks for event in reader.feed(chunk)]


def test_sse_whole_byte_by_byte_and_with_trailing_data() -> None:
    stream = b"id: 7\r\nevent: message\r\ndata: a\r\ndata: b\r\n\r\n:c\rdata: z\r\rdata: tail"
    whole = _events([stream])
    assert whole == [SseEvent("message", "a\nb", "7"), SseEvent("message", "z", "7")]
    assert _events([stream[i:i + 1] for i in range(len(stream))]) == whole


def test_an_sse_event_over_the_limit_is_cut() -> None:
    reader = SseReader(max_event_bytes=100)
    assert reader.feed(b"data: " + b"x" * 90 + b"\n") == []
    with pytest.raises(SseError):
        reader.feed(b"data: " + b"x" * 20 + b"\n")
    with pytest.raises(SseError):
        SseReader(max_event_bytes=100).feed(b"data: " + b"x" * 200)  # no line end yet


@fuzz(3)
@given(st.binary(max_size=600), st.integers(min_value=1, max_value=64))
def test_sse_parses_or_raises_its_own_error(data: bytes, cut: int) -> None:
    reader = SseReader(max_event_bytes=256)
    try:
        for index in range(0, len(data), cut):
            reader.feed(data[index:index + cut])
    except SseError:
        pass


@fuzz(3)
@given(st.text(max_size=200), st.lists(st.text(max_size=40), max_size=3))
def test_arguments_parse_or_raise_their_own_error(url: str, headers: list[str]) -> None:
    argv = [url]
    for header in headers:
        argv += ["--header", header]
    try:
        parse_arguments(argv, {"T": "v"})
    except ArgumentError as error:
        for header in headers:
            value = header.partition(":")[2].strip()
            if len(value) > 3:
                assert value not in str(error)


def test_the_installed_script_starts_python_isolated(tmp_path: Path) -> None:
    """bin/setup writes it as lnk-sandbox's (lnk_wrap/entry.py): `-IS`, so a PYTHONPATH
    of its caller's cannot put another lnk_mcpremote in its place."""
    first = Path(MCP_REMOTE).read_text().split("\n", 1)[0]
    assert first == f"#!{os.path.realpath(Path(MCP_REMOTE).with_name('python'))} -IS"
    fake = tmp_path / "lnk_mcpremote"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "main.py").write_text("def main():\n    print('swapped')\n")
    done = subprocess.run([MCP_REMOTE, "http://10.0.0.1/"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path)}, timeout=30, check=False)
    assert done.returncode == 2 and "swapped" not in done.stdout


def test_what_the_remote_escapes_stays_escaped_on_one_ascii_line(
        recorder: Callable[..., Recorder]) -> None:
    """A lone surrogate, a U+2028 and a newline inside a string, from the remote: one
    line, ASCII, the same JSON value."""
    tricky = "a\ud800b\u2028c\nd"
    server = recorder(lambda handler, body: reply(handler, 200, json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"text": tricky}}, indent=2).encode()))
    done = subprocess.run([MCP_REMOTE, server.url()], capture_output=True, timeout=30,
                          input=json.dumps(INITIALIZE).encode() + b"\n", check=False)
    assert done.stdout.isascii() and done.stdout.count(b"\n") == 1
    assert json.loads(done.stdout)["result"]["text"] == tricky


def test_an_entry_script_is_written_only_for_our_console_scripts() -> None:
    from lnk_wrap.entry import EntryError, script

    text = script("/usr/bin/python3.11", "/r", ["/s"], "lnk_mcpremote.main")
    assert text.startswith("#!/usr/bin/python3.11 -IS\n")
    assert "from lnk_mcpremote.main import main\n" in text
    with pytest.raises(EntryError, match="not a module"):
        script("/usr/bin/python3.11", "/r", ["/s"], "os; import evil")


def test_literal_header_values_are_moved_out_of_argv_and_references_kept() -> None:
    """What `tool add` keeps of mcp-remote's command: each literal value (either form of
    --header) replaced by a `${V}` of the tool's secrets, a value that names a `${VAR}`
    left as the person wrote it; the result parses with the moved values filled."""
    from lnk_mcpremote import keep_literal_values_out

    argv = ["https://far.example/mcp", "--header", "Authorization: Bearer tok-1",
            "--header=X-Key:  tok-2 ", "--header", "X-Ref: Bearer ${FAR_TOKEN}",
            "--header", "X-Empty:"]
    words, moved, names = keep_literal_values_out(argv, lambda position: f"V{position}")
    assert words == ["https://far.example/mcp", "--header", "Authorization: ${V1}",
                     "--header=X-Key: ${V2}", "--header", "X-Ref: Bearer ${FAR_TOKEN}",
                     "--header", "X-Empty:"]
    assert moved == {"V1": "Bearer tok-1", "V2": "tok-2"} and names == ["Authorization", "X-Key"]
    parsed = parse_arguments(words, {**moved, "FAR_TOKEN": "tok-3",
                                     "LNK_TOOL_SECRETS": "V1,V2,FAR_TOKEN"})
    assert parsed.headers == (("Authorization", "Bearer tok-1"), ("X-Key", "tok-2"),
                              ("X-Ref", "Bearer tok-3"), ("X-Empty", ""))
