"""Fake hosted-model providers over TLS, for the model verb's tests and bench/verbs.

    python tests/fakeproviders.py STATE-FOLDER ADDRESS [PORT]

Serves, on ADDRESS:PORT (443 by default; tests/testnet.py runs it as root on the origin's
second address), HTTPS with STATE/providers/cert.pem for the four providers' real names,
signed by the test CA STATE/providers/ca.pem (made by `make_certificates`). The provider is
told apart by the path (as each SDK sends it), then the Host field:

    Anthropic   POST /v1/messages (JSON, or SSE with "stream": true), POST
                /v1/messages/count_tokens, GET /v1/models
    OpenAI      POST /v1/chat/completions (JSON, or SSE `data:` chunks ending `data: [DONE]`),
                POST /v1/responses (JSON or SSE), POST /v1/embeddings, GET /v1/models
    Gemini      POST /v1beta/models/M:generateContent, :streamGenerateContent?alt=sse,
                :countTokens, :embedContent, :batchEmbedContents, GET /v1beta/models (and
                the same under /v1/, which google-genai 3.x calls by default)
    OpenRouter  the OpenAI forms under /api/v1/ (Host openrouter.ai)
    Telegram    the Bot API (Host api.telegram.org): /bot<token>/<method> by GET or POST,
                parameters in the query, urlencoded, JSON or multipart; methods folded
                to lower case as Telegram does (getMe, sendMessage, getUpdates, getFile,
                sendPhoto, sendDocument, and every other name answers `true`, so a
                method the verb should have refused and did not shows here as reached);
                GET /file/bot<token>/<path> answers the bytes FILE_PREFIX + path. The
                token is never echoed in an answer.

Any other path answers 404 (so a path the verb should have refused and did not shows as a
404 from here, never as a 200). Every request is appended, before it is answered, to
STATE/providers/requests.jsonl (world-writable: the ordinary-user test run reads and
truncates it) as one JSON object: time, host, method, path, query, headers (lower-case
names; repeated fields joined by ", "), body (text). Tests find their own requests by the
real key they set (unique per test) or a marker in the body. The TLS server name the client
sent is kept as `sni`. When the client goes away while an answer is being written (a
stream), one more line says so: {"gone": true, host, path, key (the credential headers
of the call), deltas_sent}.

A stream's pacing comes from the model's name: `…-5x200ms` sends 5 text deltas 200 ms
apart; `…-2000x0ms-512b` sends 2000 deltas of 512 bytes each, at once (throughput).
Without it: 3 deltas at once. Each delta's text starts with `tN@SENT ` (SENT: the server's
time.time() when it wrote that delta), so a test can tell a relayed stream (the first
delta arrives before the last was sent) from a buffered one, with no timed threshold.
A gated stream (`…-5x200ms-gate-TOKEN`, TOKEN letters and digits) sends its first delta
and then waits, at most GATE_SECONDS, for a call whose model names `release-TOKEN` (any
provider's path), before the rest; each later delta's text then says `released` or
`unreleased` after its time: a program that releases the gate on receiving the first
delta shows that it had it while the provider still held the rest, whatever the machine's
speed. (A server older than gates reads the same name as its pacing alone and notes
nothing.)

A harness's turn: a request whose conversation (never its tools or system prompt) holds
`lnk-write-file PATH TEXT` and no tool result yet is answered with a call of the write-file
tool the request offers (WRITE_TOOLS: Claude Code's Write, opencode's write, Codex's
apply_patch, Gemini CLI's write_file), in that API's shape and as a stream when asked,
writing TEXT to PATH; once the conversation holds the tool's result, the ordinary text
answer (its deltas) ends the turn. `lnk-write-listing PATH TEXT` is answered with a file
listing in text (PATH, then TEXT in a fence), which is how aider writes a file. A Gemini
call asking for JSON of a schema (`responseMimeType: application/json`) is answered with
the schema's smallest instance.

HTTP/1.1 keep-alive, TCP_NODELAY, one thread a connection; the TLS handshake runs in the
connection's thread, not the accepting one.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import secrets
import ssl
import struct
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

# The names the certificate holds (model_rules.PROVIDER_HOSTS) and the DNS zone answers.
PROVIDER_NAMES = ("api.anthropic.com", "api.openai.com", "generativelanguage.googleapis.com",
                  "openrouter.ai")
PROVIDERS_ADDRESS = "10.212.0.3"
PROVIDERS_PORT = 443
# The Bot API's fake: its name, in the certificate and the DNS's fixed names beside the others.
TELEGRAM_HOST = "api.telegram.org"
SERVED_NAMES = (*PROVIDER_NAMES, TELEGRAM_HOST)
# What a file download under /file/bot<token>/<path> answers: this, then the path.
FILE_PREFIX = b"fake-telegram-file:"
# The file_path getFile answers.
TELEGRAM_FILE_PATH = "photos/file_7.jpg"
_BOT_PATH = re.compile(r"/bot([^/]*)/(.*)", re.DOTALL)
_FILE_PATH = re.compile(r"/file/bot([^/]*)/(.*)", re.DOTALL)
# A request body larger than this is not read (the verb's own limit is 32 MiB).
MAX_BODY_BYTES = 64 * 1024 * 1024
# Pacing a model name may ask for: at most this many deltas, this far apart, this large.
MAX_DELTAS = 100_000
MAX_DELAY_MS = 5_000
MAX_DELTA_BYTES = 65_536
_PACE = re.compile(r"(\d+)x(\d+)ms(?:-(\d+)b)?")
# A gated stream's token in its model's name, and the call that releases it.
_GATE = re.compile(r"-gate-([A-Za-z0-9]+)")
_RELEASE = re.compile(r"release-([A-Za-z0-9]+)")
# The longest a gated stream waits for its release after its first delta: far past the
# worst delay of a program on this busy machine seen so far (2.4 s), and within the
# tests' 30 s for a whole sandbox run, so a stream held back fails the test, not the run.
GATE_SECONDS = 20.0
# Gates waited on or released, by token: at most this many kept (oldest dropped).
MAX_GATES = 10_000
# google-genai 3.x calls /v1/ by default (GOOGLE_GENAI_API_VERSION=beta for /v1beta/).
# A harness's request to write a file, in its conversation: the path, then the text.
WRITE_MARK = re.compile(r"lnk-write-file (\S+) ([A-Za-z0-9_.-]+)")
LISTING_MARK = re.compile(r"lnk-write-listing (\S+) ([A-Za-z0-9_.-]+)")
# A harness's request to call one of its tools by the end of its name (an MCP tool's name
# is the harness's: Claude Code's `mcp__demo__ping`, Gemini CLI's `ping`), with no
# arguments.
CALL_MARK = re.compile(r"lnk-call-tool ([A-Za-z0-9_]+)")
# The write-file tools known by name, and the arguments each takes (path, text) → object.
WRITE_TOOLS: dict[str, Any] = {
    "Write": lambda path, text: {"file_path": path, "content": text},  # Claude Code
    "write": lambda path, text: {"filePath": path, "content": text},  # opencode
    "write_file": lambda path, text: {"file_path": path, "content": text},  # Gemini CLI
    "apply_patch": lambda path, text: {  # Codex (the freeform tool takes "input" whole)
        "input": f"*** Begin Patch\n*** Add File: {path}\n+{text}\n*** End Patch\n"},
}
_GEMINI = re.compile(r"/v1(?:beta)?/models/([^/:]+):(generateContent|streamGenerateContent|"
                     r"countTokens|embedContent|batchEmbedContents)")


def folder(state: Path) -> Path:
    return state / "providers"


def ca_file(state: Path) -> Path:
    """The test CA's certificate (PEM), for SSL_CERT_FILE."""
    return folder(state) / "ca.pem"


def log_file(state: Path) -> Path:
    return folder(state) / "requests.jsonl"


def make_certificates(state: Path) -> None:
    """The test CA and the providers' certificate (trustme), the request log (empty), all
    readable by everyone (the key only by its owner: the server runs as root)."""
    import trustme

    where = folder(state)
    where.mkdir(parents=True, exist_ok=True)
    os.chmod(where, 0o755)  # noqa: S103
    ca = trustme.CA(organization_name="lnk-sandbox test providers")
    issued = ca.issue_cert(*SERVED_NAMES)
    ca.cert_pem.write_to_path(str(ca_file(state)))
    issued.cert_chain_pems[0].write_to_path(str(where / "cert.pem"))
    for extra in issued.cert_chain_pems[1:]:
        extra.write_to_path(str(where / "cert.pem"), append=True)
    issued.private_key_pem.write_to_path(str(where / "key.pem"))
    os.chmod(where / "key.pem", 0o600)
    for name in ("ca.pem", "cert.pem"):
        os.chmod(where / name, 0o644)
    log_file(state).write_text("")
    os.chmod(log_file(state), 0o666)  # noqa: S103


# A harness's turn (sans IO: the request's JSON in, what to answer out).

def conversation(request: dict[str, Any]) -> list[Any]:
    """The turns of a request in any of the four shapes, without tools or system prompt."""
    for field in ("messages", "input", "contents"):
        value = request.get(field)
        if isinstance(value, list):
            return value
        if isinstance(value, str):
            return [value]
    return []


def holds_tool_result(turns: list[Any]) -> bool:
    """Whether a tool's result is in the conversation (each API's own form)."""
    text = json.dumps(turns)
    return any(mark in text for mark in (
        '"tool_result"', '"function_call_output"', '"custom_tool_call_output"',
        '"functionResponse"', '"role": "tool"'))


def offered_tools(request: dict[str, Any]) -> dict[str, str]:
    """The tools a request offers: name → "custom" (a freeform tool) or "function"."""
    found: dict[str, str] = {}
    for tool in request.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("function"), dict):  # Chat Completions
            found[str(tool["function"].get("name"))] = "function"
        elif isinstance(tool.get("functionDeclarations"), list):  # Gemini
            for declaration in tool["functionDeclarations"]:
                if isinstance(declaration, dict):
                    found[str(declaration.get("name"))] = "function"
        elif "name" in tool:
            found[str(tool["name"])] = "custom" if tool.get("type") == "custom" else "function"
    return found


def write_call(request: dict[str, Any]) -> tuple[str, str, dict[str, Any]] | None:
    """(tool name, "custom" or "function", arguments) when the request is a harness's turn
    asking to write a file with a write tool it offers (or, by CALL_MARK, to call a tool
    it offers by the end of its name) and no tool result is in yet."""
    turns = conversation(request)
    offered = offered_tools(request)
    asked = CALL_MARK.search(json.dumps(turns))
    if asked is not None:
        return _asked_call(request, turns, offered, asked.group(1))
    if holds_tool_result(turns):
        return None
    found = WRITE_MARK.search(json.dumps(turns))
    if found is None:
        return None
    for name, arguments in WRITE_TOOLS.items():
        if name in offered:
            return name, offered[name], arguments(found.group(1), found.group(2))
    return None


def called_tools(turns: Any) -> set[str]:
    """The names of the tools the model has called in a conversation, in each API's form
    (Anthropic tool_use, Responses function_call and custom_tool_call, Chat Completions
    tool_calls, Gemini functionCall)."""
    names: set[str] = set()
    if isinstance(turns, dict):
        if turns.get("type") in ("tool_use", "function_call", "custom_tool_call"):
            names.add(str(turns.get("name")))
        for key in ("functionCall", "function"):
            if isinstance(turns.get(key), dict) and "name" in turns[key]:
                names.add(str(turns[key]["name"]))
        for value in turns.values():
            names |= called_tools(value)
    elif isinstance(turns, list):
        for value in turns:
            names |= called_tools(value)
    return names


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, as it reads (not JSON-escaped)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []


def _asked_call(request: dict[str, Any], turns: list[Any], offered: dict[str, str],
                suffix: str) -> tuple[str, str, dict[str, Any]] | None:
    """CALL_MARK's turn: the tool whose name ends with `_suffix` once; where the harness
    defers it (Claude Code names its MCP tools and offers ToolSearch), ToolSearch for it
    first, as a model does; then text."""
    called = called_tools(turns)
    target = next((name for name in offered
                   if name == suffix or name.endswith("_" + suffix)), None)
    if target is not None:
        return None if target in called else (target, offered[target], {})
    # The deferred tools' names are listed in the harness's own text (its system prompt).
    text = " ".join(_strings(request))
    deferred = re.search(r"\b(\w+_" + re.escape(suffix) + r")\b", text)
    if "ToolSearch" in offered and "ToolSearch" not in called and deferred is not None:
        return "ToolSearch", offered["ToolSearch"], {"query": f"select:{deferred.group(1)}"}
    return None


def schema_instance(schema: Any) -> Any:
    """The smallest value of a JSON schema (Gemini's upper-case types or JSON Schema's),
    for a call that asks for JSON of that shape (Gemini CLI's model router does)."""
    if not isinstance(schema, dict):
        return "fake"
    kind = str(schema.get("type", "string")).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: schema_instance(value) for name, value in properties.items()
                if isinstance(properties, dict)}
    if kind == "array":
        return []
    return {"integer": 1, "number": 1, "boolean": False}.get(kind, "fake")


def listing(request: dict[str, Any]) -> str | None:
    """A file listing in text, for a conversation asking for one (aider's whole-file form)."""
    found = LISTING_MARK.search(json.dumps(conversation(request)))
    if found is None:
        return None
    return f"{found.group(1)}\n```\n{found.group(2)}\n```\n"


# Helpers for tests (the ordinary user's run too).

def log_offset(state: Path) -> int:
    """Where the request log ends now: pass it to `requests_seen` to see only what follows."""
    try:
        return log_file(state).stat().st_size
    except FileNotFoundError:
        return 0


def requests_seen(state: Path, after: int = 0) -> list[dict[str, Any]]:
    """The requests the fake providers received, oldest first, from byte `after` on."""
    with open(log_file(state), "rb") as handle:
        handle.seek(after)
        text = handle.read().decode()
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [record for record in records if not record.get("gone")]


def calls_abandoned(state: Path, after: int = 0) -> list[dict[str, Any]]:
    """The answers the fake providers could not finish: the client went away."""
    with open(log_file(state), "rb") as handle:
        handle.seek(after)
        text = handle.read().decode()
    return [record for line in text.splitlines() if line.strip()
            and (record := json.loads(line)).get("gone")]


# The server.

def pace(model: str) -> tuple[int, float, int]:
    """(deltas, seconds between them, bytes a delta) asked for by a model's name."""
    found = _PACE.search(model or "")
    if not found:
        return 3, 0.0, 0
    count = min(int(found.group(1)), MAX_DELTAS)
    delay = min(int(found.group(2)), MAX_DELAY_MS) / 1000
    size = min(int(found.group(3) or 0), MAX_DELTA_BYTES)
    return max(count, 1), delay, size


_gates: dict[str, threading.Event] = {}
_gates_lock = threading.Lock()


def _gate(token: str) -> threading.Event:
    """The gate of `token`, made by whichever comes first: the stream or its release."""
    with _gates_lock:
        if token not in _gates:
            if len(_gates) >= MAX_GATES:
                del _gates[next(iter(_gates))]
            _gates[token] = threading.Event()
        return _gates[token]


def release_gate(model: str) -> None:
    """Open the gate a model's name asks to release (`release-TOKEN`), if it does."""
    found = _RELEASE.search(model or "")
    if found:
        _gate(found.group(1)).set()


def _delta_text(index: int, size: int, note: str = "") -> str:
    text = f"t{index}@{time.time():.6f} " + (f"{note} " if note else "")
    return text + "x" * max(0, size - len(text))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    disable_nagle_algorithm = True
    server: _Server
    recorded: dict[str, Any] | None = None
    request_json: dict[str, Any] = {}  # noqa: RUF012 (set per request, never shared)
    deltas_sent = 0

    def setup(self) -> None:
        # The handshake here, in the connection's own thread.
        self.request = self.server.context.wrap_socket(self.request, server_side=True)
        self.sni = getattr(self.request, "lnk_sni", None)
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline(64).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024).strip():
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(8)
            return b"".join(parts)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            raise ValueError("body too large")
        return self.rfile.read(length) if length else b""

    def _record(self, body: bytes) -> None:
        split = urlsplit(self.path)
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        record: dict[str, Any] = {
            "time": time.time(), "host": self.headers.get("Host", ""), "sni": self.sni,
            "method": self.command, "path": split.path, "query": split.query,
            "headers": headers, "body": body.decode("utf-8", "replace")}
        self.recorded = record
        self._append(record)

    def _append(self, record: dict[str, Any]) -> None:
        descriptor = os.open(self.server.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(descriptor, (json.dumps(record) + "\n").encode())
        finally:
            os.close(descriptor)

    def handle_one_request(self) -> None:
        self.recorded = None  # set while a request is being answered
        try:
            super().handle_one_request()
            self.recorded = None
        except OSError:
            # The client (the proxy) went away mid-answer: said in the log, so a test sees
            # that a program which left ended the call upstream too.
            self.close_connection = True
            recorded = self.recorded
            if recorded is not None:
                self._append({"time": time.time(), "gone": True,
                              "host": recorded["host"], "path": recorded["path"],
                              "key": {name: recorded["headers"].get(name) for name in (
                                  "x-api-key", "authorization", "x-goog-api-key")},
                              "deltas_sent": self.deltas_sent})

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except ValueError:
            self._json(413, {"error": "too large"})
            self.close_connection = True
            return
        self._record(body)
        try:
            request = json.loads(body) if body else {}
        except ValueError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        split = urlsplit(self.path)
        path, query = split.path, split.query
        host = self.headers.get("Host", "").split(":")[0].lower()
        if host == TELEGRAM_HOST:
            self._telegram(path, query, body)
            return
        if path.startswith("/api/v1/") and host in ("openrouter.ai", ""):
            path = path[len("/api"):]
        model = str(request.get("model") or "")
        release_gate(model)
        self.request_json = request
        if self.command == "GET" and (path == "/v1beta/models" or (
                path == "/v1/models" and host == "generativelanguage.googleapis.com")):
            self._json(200, {"models": [{"name": "models/gemini-fake",
                                         "displayName": "Gemini Fake",
                                         "supportedGenerationMethods": ["generateContent"]}]})
        elif self.command == "GET" and path == "/v1/models":
            if host == "api.anthropic.com":
                self._json(200, {"data": [{"type": "model", "id": "claude-fake",
                                           "display_name": "Claude Fake",
                                           "created_at": "2025-01-01T00:00:00Z"}],
                                 "has_more": False, "first_id": "claude-fake",
                                 "last_id": "claude-fake"})
            else:
                self._json(200, {"object": "list", "data": [
                    {"id": "gpt-fake", "object": "model", "created": 0, "owned_by": "fake"}]})
        elif self.command == "POST" and path == "/v1/messages" and host != "api.openai.com":
            self._anthropic(model, bool(request.get("stream")))
        elif self.command == "POST" and path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": len(body) // 4 or 1})
        elif self.command == "POST" and path == "/v1/chat/completions":
            self._chat(model, bool(request.get("stream")))
        elif self.command == "POST" and path == "/v1/responses":
            self._responses(model, bool(request.get("stream")))
        elif self.command == "POST" and path == "/v1/embeddings":
            self._embeddings(model, request.get("encoding_format") == "base64")
        elif self.command == "POST" and (found := _GEMINI.fullmatch(path)):
            self._gemini(found.group(1), found.group(2), "alt=sse" in query)
        else:
            self._json(404, {"error": {"type": "not_found_error",
                                       "message": f"fake provider: no {self.command} {path}"}})

    # Plain answers and streams.

    def _json(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _event(self, data: Any, event: str | None = None) -> None:
        text = (f"event: {event}\n" if event else "") + "data: " + (
            data if isinstance(data, str) else json.dumps(data)) + "\n\n"
        raw = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _deltas(self, model: str) -> Any:
        count, delay, size = pace(model)
        gated = _GATE.search(model or "")
        note = ""
        self.deltas_sent = 0
        for index in range(count):
            if index == 1 and gated:  # the first delta is written and flushed by now
                released = _gate(gated.group(1)).wait(GATE_SECONDS)
                note = "released" if released else "unreleased"
            if index and delay:
                time.sleep(delay)
            yield _delta_text(index, size, note)
            self.deltas_sent = index + 1

    # Anthropic

    def _anthropic(self, model: str, stream: bool) -> None:
        message: dict[str, Any] = {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 0}}
        call = write_call(self.request_json)
        if call is not None:
            self._anthropic_tool(message, call[0], call[2], stream)
            return
        if not stream:
            message.update(content=[{"type": "text", "text": "hello from the fake anthropic"}],
                           stop_reason="end_turn",
                           usage={"input_tokens": 1, "output_tokens": 6})
            self._json(200, message)
            return
        self._start_stream()
        self._event({"type": "message_start", "message": message}, "message_start")
        self._event({"type": "content_block_start", "index": 0,
                     "content_block": {"type": "text", "text": ""}}, "content_block_start")
        self._event({"type": "ping"}, "ping")
        count = 0
        for text in self._deltas(model):
            count += 1
            self._event({"type": "content_block_delta", "index": 0,
                         "delta": {"type": "text_delta", "text": text}}, "content_block_delta")
        self._event({"type": "content_block_stop", "index": 0}, "content_block_stop")
        self._event({"type": "message_delta",
                     "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                     "usage": {"output_tokens": count}}, "message_delta")
        self._event({"type": "message_stop"}, "message_stop")
        self._end_stream()

    def _anthropic_tool(self, message: dict[str, Any], name: str, arguments: dict[str, Any],
                        stream: bool) -> None:
        # A new id each call: a conversation may hold two (ToolSearch, then the tool).
        use = {"type": "tool_use", "id": "toolu_fake" + secrets.token_hex(6), "name": name,
               "input": arguments}
        if not stream:
            message.update(content=[use], stop_reason="tool_use",
                           usage={"input_tokens": 1, "output_tokens": 9})
            self._json(200, message)
            return
        self._start_stream()
        self._event({"type": "message_start", "message": message}, "message_start")
        self._event({"type": "content_block_start", "index": 0,
                     "content_block": {**use, "input": {}}}, "content_block_start")
        whole = json.dumps(arguments)
        for part in (whole[:len(whole) // 2], whole[len(whole) // 2:]):
            self._event({"type": "content_block_delta", "index": 0,
                         "delta": {"type": "input_json_delta", "partial_json": part}},
                        "content_block_delta")
        self._event({"type": "content_block_stop", "index": 0}, "content_block_stop")
        self._event({"type": "message_delta",
                     "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                     "usage": {"output_tokens": 9}}, "message_delta")
        self._event({"type": "message_stop"}, "message_stop")
        self._end_stream()

    # OpenAI (and OpenRouter)

    def _chat(self, model: str, stream: bool) -> None:
        created = int(time.time())
        text = listing(self.request_json)
        if text is not None:
            self._chat_text(model, created, text, stream)
            return
        if not stream:
            self._json(200, {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": created,
                "model": model, "choices": [{
                    "index": 0, "finish_reason": "stop", "logprobs": None,
                    "message": {"role": "assistant", "content": "hello from the fake openai"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}})
            return
        self._start_stream()

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                    "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                 "logprobs": None}]}

        self._event(chunk({"role": "assistant", "content": ""}, None))
        for text in self._deltas(model):
            self._event(chunk({"content": text}, None))
        self._event(chunk({}, "stop"))
        self._event("[DONE]")
        self._end_stream()

    def _chat_text(self, model: str, created: int, text: str, stream: bool) -> None:
        """`text` whole, or streamed line by line."""
        if not stream:
            self._json(200, {
                "id": "chatcmpl-fake", "object": "chat.completion", "created": created,
                "model": model, "choices": [{
                    "index": 0, "finish_reason": "stop", "logprobs": None,
                    "message": {"role": "assistant", "content": text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}})
            return
        self._start_stream()
        for index, line in enumerate(text.splitlines(keepends=True)):
            delta = {"role": "assistant", "content": line} if index == 0 else {"content": line}
            self._event({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                         "created": created, "model": model,
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None,
                                      "logprobs": None}]})
        self._event({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                     "created": created, "model": model,
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop",
                                  "logprobs": None}]})
        self._event("[DONE]")
        self._end_stream()

    def _response(self, model: str, status: str, text: str,
                  output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        if output is None:
            output = [{"type": "message", "id": "msg_fake", "status": "completed",
                       "role": "assistant",
                       "content": [{"type": "output_text", "text": text,
                                    "annotations": []}]}] if text else []
        return {"id": "resp_fake", "object": "response", "created_at": int(time.time()),
                "status": status, "model": model, "output": output,
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
                "error": None, "incomplete_details": None, "instructions": None,
                "metadata": {}, "temperature": None, "top_p": None,
                "usage": {"input_tokens": 1, "output_tokens": 5, "total_tokens": 6,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}

    def _responses(self, model: str, stream: bool) -> None:
        call = write_call(self.request_json)
        if call is not None:
            self._responses_tool(model, *call, stream)
            return
        if not stream:
            self._json(200, self._response(model, "completed",
                                           "hello from the fake responses"))
            return
        send = self._responses_stream()

        send("response.created", response=self._response(model, "in_progress", ""))
        send("response.output_item.added", output_index=0, item={
            "type": "message", "id": "msg_fake", "status": "in_progress", "role": "assistant",
            "content": []})
        send("response.content_part.added", item_id="msg_fake", output_index=0,
             content_index=0, part={"type": "output_text", "text": "", "annotations": []})
        whole = ""
        for text in self._deltas(model):
            whole += text
            send("response.output_text.delta", item_id="msg_fake", output_index=0,
                 content_index=0, delta=text, logprobs=[])
        send("response.output_text.done", item_id="msg_fake", output_index=0,
             content_index=0, text=whole, logprobs=[])
        finished = self._response(model, "completed", whole)
        send("response.output_item.done", output_index=0, item=finished["output"][0])
        send("response.completed", response=finished)
        self._end_stream()

    def _responses_stream(self) -> Callable[..., None]:
        """The Responses API's stream started; the sender of its events, each numbered."""
        self._start_stream()
        numbers = itertools.count()

        def send(kind: str, **fields: Any) -> None:
            self._event({"type": kind, "sequence_number": next(numbers), **fields}, kind)

        return send

    def _responses_tool(self, model: str, name: str, kind: str, arguments: dict[str, Any],
                        stream: bool) -> None:
        """A call of `name`: a freeform tool takes its input as text, a function JSON."""
        if kind == "custom":
            done: dict[str, Any] = {"type": "custom_tool_call", "id": "ctc_fake",
                                    "call_id": "call_fake" + secrets.token_hex(6),
                                    "name": name,
                                    "input": arguments["input"], "status": "completed"}
            started = {**done, "input": "", "status": "in_progress"}
            deltas = ("response.custom_tool_call_input.delta", "input", done["input"])
            finished = ("response.custom_tool_call_input.done", "input")
        else:
            done = {"type": "function_call", "id": "fc_fake",
                    "call_id": "call_fake" + secrets.token_hex(6),
                    "name": name, "arguments": json.dumps(arguments), "status": "completed"}
            started = {**done, "arguments": "", "status": "in_progress"}
            deltas = ("response.function_call_arguments.delta", "delta", done["arguments"])
            finished = ("response.function_call_arguments.done", "arguments")
        if not stream:
            self._json(200, self._response(model, "completed", "", [done]))
            return
        send = self._responses_stream()

        send("response.created", response=self._response(model, "in_progress", ""))
        send("response.output_item.added", output_index=0, item=started)
        whole = deltas[2]
        for part in (whole[:len(whole) // 2], whole[len(whole) // 2:]):
            send(deltas[0], item_id=done["id"], output_index=0, delta=part)
        send(finished[0], item_id=done["id"], output_index=0, **{finished[1]: whole})
        send("response.output_item.done", output_index=0, item=done)
        send("response.completed", response=self._response(model, "completed", "", [done]))
        self._end_stream()

    def _embeddings(self, model: str, as_base64: bool) -> None:
        values = [0.25, -0.5, 1.0]
        vector: Any = (base64.b64encode(struct.pack("<3f", *values)).decode()
                       if as_base64 else values)
        self._json(200, {"object": "list", "model": model,
                         "data": [{"object": "embedding", "index": 0, "embedding": vector}],
                         "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    # Telegram's Bot API

    def _telegram(self, path: str, query: str, body: bytes) -> None:
        if self.command == "GET" and (found := _FILE_PATH.fullmatch(path)):
            data = FILE_PREFIX + found.group(2).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        found = _BOT_PATH.fullmatch(path)
        if found is None or self.command not in ("GET", "POST"):
            self._json(404, {"ok": False, "error_code": 404, "description": "Not Found"})
            return
        token, method = found.groups()
        bot_id = int(token.partition(":")[0]) if token.partition(":")[0].isdigit() else 1
        parameters = _parameters(self.headers.get("Content-Type", ""), query, body)
        chat = {"id": 4242, "type": "private", "first_name": "Someone"}
        message: dict[str, Any] = {"message_id": 7, "date": int(time.time()), "chat": chat,
                                   "from": {"id": bot_id, "is_bot": True,
                                            "first_name": "Fake"}}
        result: Any
        lowered = method.lower()
        if lowered == "getme":
            result = {"id": bot_id, "is_bot": True, "first_name": "Fake",
                      "username": "fake_bot", "can_join_groups": True,
                      "can_read_all_group_messages": False, "supports_inline_queries": False}
        elif lowered == "sendmessage":
            result = {**message, "text": parameters.get("text", "")}
        elif lowered == "getupdates":
            result = [{"update_id": 1000, "message": {
                **message, "from": {"id": 4242, "is_bot": False, "first_name": "Someone"},
                "text": "hello bot"}}]
        elif lowered == "getfile":
            result = {"file_id": parameters.get("file_id", "f"), "file_unique_id": "u7",
                      "file_size": len(FILE_PREFIX) + len(TELEGRAM_FILE_PATH),
                      "file_path": TELEGRAM_FILE_PATH}
        elif lowered in ("sendphoto", "senddocument"):
            result = {**message, "caption": parameters.get("caption", ""), "photo": [
                {"file_id": "photo-7", "file_unique_id": "u7", "width": 1, "height": 1,
                 "file_size": len(body)}]}
        elif not method or not method.isalnum():
            self._json(404, {"ok": False, "error_code": 404, "description": "Not Found"})
            return
        else:
            result = True  # setWebhook, logOut …: reached, which the log shows
        self._json(200, {"ok": True, "result": result})

    # Gemini

    def _gemini(self, model: str, method: str, sse: bool) -> None:
        def answer(text: str, finish: str | None) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]},
                                         "index": 0}
            if finish:
                candidate["finishReason"] = finish
            return {"candidates": [candidate], "modelVersion": model,
                    "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
                                      "totalTokenCount": 2}}

        call = (write_call(self.request_json)
                if method in ("generateContent", "streamGenerateContent") else None)
        if call is not None:
            turn = {"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": call[0], "args": call[2]}}]},
                "finishReason": "STOP", "index": 0}], "modelVersion": model,
                "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1,
                                  "totalTokenCount": 2}}
            if method == "generateContent":
                self._json(200, turn)
            else:
                self._start_stream()
                self._event(turn)
                self._end_stream()
            return
        if method == "countTokens":
            self._json(200, {"totalTokens": 7})
        elif method == "embedContent":
            self._json(200, {"embedding": {"values": [0.25, -0.5, 1.0]}})
        elif method == "batchEmbedContents":
            self._json(200, {"embeddings": [{"values": [0.25, -0.5, 1.0]}]})
        elif method == "generateContent" and isinstance(
                config := self.request_json.get("generationConfig"), dict) and config.get(
                "responseMimeType") == "application/json":
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
            self._json(200, answer(json.dumps(schema_instance(schema)), "STOP"))
        elif method == "generateContent":
            self._json(200, answer("hello from the fake gemini", "STOP"))
        elif not sse:
            self._json(400, {"error": {"code": 400, "message": "fake provider: alt=sse only",
                                       "status": "INVALID_ARGUMENT"}})
        else:
            self._start_stream()
            last = pace(model)[0] - 1
            for index, text in enumerate(self._deltas(model)):
                self._event(answer(text, "STOP" if index == last else None))
            self._end_stream()


def _parameters(content_type: str, query: str, body: bytes) -> dict[str, str]:
    """A Bot API call's parameters, from the query and a JSON, urlencoded or multipart body
    (text fields only; a file part's bytes are left out)."""
    from email.message import EmailMessage
    from email.parser import BytesParser
    from email.policy import default
    from urllib.parse import parse_qsl

    found = dict(parse_qsl(query, keep_blank_values=True))
    kind = content_type.split(";")[0].strip().lower()
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        if kind == "application/json":
            loaded = json.loads(body or b"{}")
            if isinstance(loaded, dict):
                found.update({key: str(value) for key, value in loaded.items()})
        elif kind == "application/x-www-form-urlencoded":
            found.update(parse_qsl(body.decode(), keep_blank_values=True))
        elif kind == "multipart/form-data":
            message = BytesParser(policy=default).parsebytes(
                b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
            assert isinstance(message, EmailMessage)
            for part in message.iter_parts() if message.is_multipart() else ():
                name = part.get_param("name", header="content-disposition")
                if isinstance(name, str) and part.get_filename() is None:
                    payload = part.get_payload(decode=True)
                    if isinstance(payload, bytes):
                        found[name] = payload.decode("utf-8", "replace")
    return found


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
    context: ssl.SSLContext
    log: str


def serve(state: Path, address: str, port: int = PROVIDERS_PORT) -> None:
    where = folder(state)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(where / "cert.pem"), str(where / "key.pem"))

    def keep_sni(sock: Any, name: str | None, _: ssl.SSLContext) -> None:
        sock.lnk_sni = name  # the name the client asked for (the proxy must send the host's)

    context.sni_callback = keep_sni
    server = _Server((address, port), _Handler)
    server.context = context
    server.log = str(log_file(state))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 443)
