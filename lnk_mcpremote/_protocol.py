"""MCP over Streamable HTTP, the decisions without the I/O (sans-IO): what one line from
the client is, which headers its POST carries under which revision, and the SSE reader.

Two revisions (docs/facts/providers.md §6.1, §6.2), chosen by the client inside, never by us:
- 2025-11-25: `initialize` first; the `MCP-Session-Id` of its answer is sent on every
  later message, with `MCP-Protocol-Version` set to the version the InitializeResult
  names; a 404 on a message that carried the session means it expired.
- 2026-07-28: no session; each request's `params._meta` names the revision, and its POST
  carries `MCP-Protocol-Version`, `Mcp-Method` and, for `tools/call`, `prompts/get` and
  `resources/read`, `Mcp-Name`, all taken from the body (a server checks they agree).
A body whose `_meta` names a revision is sent under it; any other is the handshake's.
Under 2026-07-28 a tool may also ask for `Mcp-Param-{Name}` headers mirrored from its
arguments (`x-mcp-header` on a property of its inputSchema): the client inside speaks
stdio, where there are no headers, so they are made here from the tools/list answers
this relay has carried (`SessionState.learn_tools`), as the SDK's own client does.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_PARAM_HEADERS_PER_TOOL",
    "MAX_SCHEMA_DEPTH",
    "MAX_TOOLS_KNOWN",
    "NAME_BEARING_METHODS",
    "PROTOCOL_VERSION_META_KEY",
    "Message",
    "MessageError",
    "SessionState",
    "SseError",
    "SseEvent",
    "SseReader",
    "encode_header_value",
    "error_line",
    "param_header_map",
    "param_headers",
    "parse_message",
    "routing_headers",
]

# One JSON-RPC message, either way (a line on stdin, a JSON body, one SSE event): a tool
# result with an image or two in base64 fits; a runaway server or client is cut off.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
# Method -> the params key mirrored into `Mcp-Name` (2026-07-28, basic/transports).
NAME_BEARING_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
# Tools whose `x-mcp-header` map is kept, and headers a tool may ask for: a tools/list
# is the server's to make as long as it likes; what is kept of it here is bounded.
MAX_TOOLS_KNOWN = 4096
MAX_PARAM_HEADERS_PER_TOOL = 16
# How deep a chain of `properties` is followed for an `x-mcp-header`.
MAX_SCHEMA_DEPTH = 16
_X_MCP_HEADER = "x-mcp-header"
# RFC 9110's token: what an `x-mcp-header` may name (the SDK's rule).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,64}")
_MIRRORED_TYPES = frozenset({"string", "integer", "boolean"})
# A protocol version or a session id is visible ASCII (the spec's rule for the id).
_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]{1,256}")
_HEADER_SAFE = re.compile(r"[\x20-\x7e]*")
_BASE64_SENTINEL = re.compile(r"=\?base64\?.*\?=")

Kind = Literal["request", "notification", "response"]


class MessageError(Exception):
    """A line is not one JSON-RPC message we relay; `code` is JSON-RPC's for it."""

    def __init__(self, text: str, code: int = -32600) -> None:
        super().__init__(text)
        self.code = code


class SseError(Exception):
    """An event stream is cut (an event over the limit)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    kind: Kind
    body: dict[str, Any]
    raw: bytes

    @property
    def method(self) -> str | None:
        method = self.body.get("method")
        return method if isinstance(method, str) else None

    @property
    def id(self) -> Any:
        return self.body.get("id")

    @property
    def modern_version(self) -> str | None:
        """The revision `params._meta` names (2026-07-28 and after), or None."""
        params = self.body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
        return version if isinstance(version, str) else None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_json(data: bytes) -> Any:
    """JSON as RFC 8259 has it (no NaN or Infinity), or ValueError."""
    return json.loads(data, parse_constant=_refuse_constant)


def parse_message(raw: bytes) -> Message:
    """One message: an object with a method (a request if it has an id), or an answer
    (id with result or error). Batches are gone since 2025-06-18: refused."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise MessageError(f"a message over {MAX_MESSAGE_BYTES} bytes")
    try:
        body = load_json(raw)
    except (ValueError, RecursionError) as error:
        raise MessageError(f"not JSON ({type(error).__name__})", code=-32700) from None
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        raise MessageError("not a JSON-RPC 2.0 object")
    has_id = "id" in body
    if has_id and not ((isinstance(body["id"], str | int) and not isinstance(body["id"], bool))
                       or body["id"] is None):
        raise MessageError("an id that is neither a string nor an integer")
    if isinstance(body.get("method"), str):
        return Message(kind="request" if has_id else "notification", body=body, raw=raw)
    if has_id and ("result" in body or "error" in body):
        return Message(kind="response", body=body, raw=raw)
    raise MessageError("neither a request, a notification nor a response")


def encode_header_value(value: str) -> str:
    """As 2026-07-28 has it: printable ASCII without edge spaces goes as is, anything
    else as `=?base64?…?=` of its UTF-8."""
    if (_HEADER_SAFE.fullmatch(value) and value == value.strip()
            and not _BASE64_SENTINEL.fullmatch(value)):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8')).decode('ascii')}?="


def param_header_map(input_schema: Any) -> dict[tuple[str, ...], str]:
    """`x-mcp-header` annotations reachable from a tool's inputSchema through a chain of
    `properties` only, on string, integer or boolean properties: path -> header token.
    Anything else is not mirrored (a server validates nothing for such a schema)."""
    found: dict[tuple[str, ...], str] = {}
    stack: list[tuple[tuple[str, ...], Any]] = [((), input_schema)]
    while stack and len(found) < MAX_PARAM_HEADERS_PER_TOOL:
        path, schema = stack.pop()
        if not isinstance(schema, dict):
            continue
        token = schema.get(_X_MCP_HEADER)
        if path and isinstance(token, str) and _TOKEN.fullmatch(token) \
                and schema.get("type") in _MIRRORED_TYPES:
            found[path] = token
        properties = schema.get("properties")
        if isinstance(properties, dict) and len(path) < MAX_SCHEMA_DEPTH:
            stack.extend(((*path, name), sub) for name, sub in properties.items()
                         if isinstance(name, str))
    return found


def param_headers(header_map: dict[tuple[str, ...], str], arguments: Any) -> list[tuple[str, str]]:
    """The `Mcp-Param-*` headers of one tools/call: each annotated argument present and a
    scalar, `true`/`false` for a boolean, encoded as any MCP header value."""
    headers = []
    for path, token in header_map.items():
        value = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, bool):
            rendered = "true" if value else "false"
        elif isinstance(value, str | int | float):
            try:
                rendered = str(value)
            except ValueError:  # an int past CPython's digits limit has no rendering
                continue
        else:
            continue
        headers.append((f"Mcp-Param-{token}", encode_header_value(rendered)))
    return headers


@dataclass(slots=True)
class SessionState:
    """What the remote has told: 2025-11-25's session and the version it settled on, and
    the `x-mcp-header` maps of the tools its 2026-07-28 tools/list answers named."""

    session_id: str | None = None
    protocol_version: str | None = None
    tool_param_headers: dict[str, dict[tuple[str, ...], str]] = field(default_factory=dict)

    def learn_tools(self, answer: Any) -> None:
        """From a tools/list answer: each tool's `x-mcp-header` map (a page adds to what
        earlier pages gave; a tool named again is replaced)."""
        result = answer.get("result") if isinstance(answer, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                continue
            header_map = param_header_map(tool.get("inputSchema"))
            if header_map:
                if name not in self.tool_param_headers \
                        and len(self.tool_param_headers) >= MAX_TOOLS_KNOWN:
                    continue
                self.tool_param_headers[name] = header_map
            else:
                self.tool_param_headers.pop(name, None)

    def on_initialize_answer(self, session_id: str | None, answer: Any) -> str | None:
        """After `initialize` answered: keep its session and version. Returns a problem
        to say on stderr (a session id that is not visible ASCII is not kept)."""
        self.session_id = None
        problem = None
        if session_id is not None:
            if _VISIBLE_ASCII.fullmatch(session_id):
                self.session_id = session_id
            else:
                problem = "the remote's MCP-Session-Id is not visible ASCII: not kept"
        result = answer.get("result") if isinstance(answer, dict) else None
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        self.protocol_version = (
            version if isinstance(version, str) and _VISIBLE_ASCII.fullmatch(version) else None)
        return problem

    def forget_session(self, expired: str | None = None) -> None:
        """Forget the session (all of it, or only if it is still `expired`: a request
        that learnt of an expiry late must not drop the session a new handshake made)."""
        if expired is None or self.session_id == expired:
            self.session_id = None


def routing_headers(message: Message, state: SessionState) -> list[tuple[str, str]]:
    """The MCP headers of the POST that carries `message`; MessageError if the body's
    revision cannot go in a header."""
    version = message.modern_version
    if version is not None:
        if not _VISIBLE_ASCII.fullmatch(version):
            raise MessageError("the protocol version in _meta is not visible ASCII")
        headers = [("MCP-Protocol-Version", version)]
        if message.method is not None:
            headers.append(("Mcp-Method", encode_header_value(message.method)))
            key = NAME_BEARING_METHODS.get(message.method)
            params = message.body.get("params")
            name = params.get(key) if key is not None and isinstance(params, dict) else None
            if isinstance(name, str):
                headers.append(("Mcp-Name", encode_header_value(name)))
            header_map = state.tool_param_headers.get(name) \
                if message.method == "tools/call" and isinstance(name, str) else None
            if header_map and isinstance(params, dict):
                headers.extend(param_headers(header_map, params.get("arguments")))
        return headers
    if message.method == "initialize":
        # A new handshake: no session and no version yet (an old one must not leak onto it).
        return []
    headers = []
    if state.protocol_version is not None:
        headers.append(("MCP-Protocol-Version", state.protocol_version))
    if state.session_id is not None:
        headers.append(("MCP-Session-Id", state.session_id))
    return headers


def error_line(request_id: Any, code: int, text: str) -> bytes:
    """A JSON-RPC error, one line, for the client."""
    return json.dumps({"jsonrpc": "2.0", "id": request_id,
                       "error": {"code": code, "message": text}},
                      separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str
    data: str
    id: str | None


class SseReader:
    """Server-sent events (WHATWG HTML §9.2.6), fed bytes as they come: lines end in
    CRLF, LF or CR; `data:` lines join with LF; a blank line ends an event."""

    def __init__(self, max_event_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._max = max_event_bytes
        self._pending = b""
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""
        self._id: str | None = None
        self._after_cr = False

    def feed(self, chunk: bytes) -> list[SseEvent]:
        events: list[SseEvent] = []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split across two chunks
        self._after_cr = False
        buffer = self._pending + chunk
        start = 0
        for match in re.finditer(rb"\r\n|\r|\n", buffer):
            if match.group() == b"\r" and match.end() == len(buffer):
                self._after_cr = True
            event = self._line(buffer[start:match.start()])
            if event is not None:
                events.append(event)
            start = match.end()
        self._pending = buffer[start:]
        if len(self._pending) + self._data_bytes > self._max:
            raise SseError(f"an event over {self._max} bytes")
        return events

    def _line(self, raw: bytes) -> SseEvent | None:
        line = raw.decode("utf-8", "replace")
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SseEvent(self._event or "message", "\n".join(self._data), self._id)
            self._data, self._data_bytes, self._event = [], 0, ""
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
            self._data_bytes += len(raw) + 1
            if self._data_bytes > self._max:
                raise SseError(f"an event over {self._max} bytes")
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None
