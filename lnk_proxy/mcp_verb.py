"""The MCP verb: `/_link/s/<URL secret>/mcp/<name>`, a tool that runs outside (a stdio MCP
server the person defined: lnk_proxy.tools), reached from inside over MCP's Streamable
HTTP.

The proxy is the tool process's one client: it starts the command on first use (outside,
as the person, one process per sandbox and tool, its stderr to a bounded log in Link's
settings: lnk_common.boundedlog) with exactly the environment, HOME and cwd its
definition names and its own secrets (lnk_proxy.tools), never the proxy's or the
session's (a guest's HOME and cwd are a folder the guest writes), initializes it itself
(protocol 2025-11-25), and relays
each JSON-RPC request of the program to it under ids of its own, answering with the tool's
response under the program's id, as `application/json` (Streamable HTTP lets a server
answer a POST with JSON instead of a stream). The program's `initialize` is answered from
the tool's own InitializeResult (with the version the program asked for, when it is one we
relay), with an `Mcp-Session-Id`; a request carrying a session id that is not ours is 404
(the client initializes again); one carrying none is taken (the stateless 2026-07-28
revision sends none). Notifications from the program are taken (202) and not relayed;
requests from the tool to the program (sampling, elicitation, roots) are answered with an
error: nothing in the sandbox is asked to act for a tool.

The program's methods are an allow-list (PROGRAM_REQUESTS, PROGRAM_NOTIFICATIONS: those of
the revisions relayed, spelt exactly as MCP spells them); any other (`Tools/Call`,
`tools/call `, `tasks/get`, …) is refused with a JSON-RPC error and never reaches the tool,
whose server might take a spelling the verb does not know as a call it would have asked of
the person.

Every `tools/call` asks the person first (lnk_ask), unless the tool's definition allows the
MCP tool by name (`--allow`) or says `--ask none`; a refusal, an error or silence is a
JSON-RPC error saying so, and the call never reaches the tool. `tools/list` passes as the
tool gives it. Each call is a line on the wire's log (`mcp:<name>`, never its arguments)
and counts toward calls a minute.

McpError is the one error of the parsing here (an HTTP status and one line).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from lnk_ask.text import bounded
from lnk_proxy.refusal import StatusError
from lnk_proxy.tools import Tool

TYPE_CHECKING = False
if TYPE_CHECKING:  # the verb's I/O (asyncio streams, h11) only where the proxy serves
    from lnk_proxy.verb_call import Keep, VerbCall

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PROGRAM_NOTIFICATIONS",
    "PROGRAM_REQUESTS",
    "RELAYED_VERSIONS",
    "McpError",
    "McpVerb",
    "ToolProcess",
    "method_refusal",
    "parse_message",
    "plain",
    "tool_environment",
]

# One JSON-RPC message from the program, or one line from the tool: a tool's result with
# a screenshot or a file is a few MiB; more is refused (the program) or ends the tool
# (a line the proxy will not hold).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
# How long the tool has to start and answer `initialize`.
START_SECONDS = 30.0
# How long one request may wait for the tool's answer (a tool may work for minutes).
CALL_SECONDS = 600.0
# The MCP revisions whose requests are the same JSON-RPC for what is relayed here
# (tools, resources, prompts): the program's `initialize` gets the version it asked for
# when it is one of these, else the tool's own.
RELAYED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
OUR_VERSION = "2025-11-25"
# A question shown to the person: bounded (lnk_ask escapes and bounds it again).
MAX_SHOWN_ARGUMENTS = 2000


# The program's requests the verb takes, by MCP's exact spelling (methods are
# case-sensitive strings), and what it does with each: those of the client's requests of
# 2024-11-05 to 2025-11-25 (the revisions relayed: the mcp SDK's CLIENT_REQUESTS), and
# 2026-07-28's probe. Not here, so refused: tasks/* (2025-11-25's experimental tasks, which
# the SDK leaves out too), subscriptions/listen (2026-07-28's; the tool speaks
# 2025-11-25), and every other spelling.
PROGRAM_REQUESTS: dict[str, str] = {
    "initialize": "answered",        # from the tool's own InitializeResult
    "ping": "answered",
    "server/discover": "answered",   # "no such method": the client then initializes
    "tools/call": "asked",           # of the person, unless allowed (lnk_proxy.tools)
    "tools/list": "relayed",
    "resources/list": "relayed",
    "resources/read": "relayed",
    "resources/templates/list": "relayed",
    "resources/subscribe": "relayed",
    "resources/unsubscribe": "relayed",
    "prompts/list": "relayed",
    "prompts/get": "relayed",
    "completion/complete": "relayed",
    "logging/setLevel": "relayed",
}
# The program's notifications the verb takes (202) and does not relay: the client's
# notifications of the revisions relayed.
PROGRAM_NOTIFICATIONS = frozenset({"notifications/initialized", "notifications/cancelled",
                                   "notifications/progress", "notifications/roots/list_changed"})
METHOD_NOT_RELAYED = -32601


class McpError(StatusError):
    """A request the MCP verb refuses before the tool sees it."""


def parse_message(raw: bytes) -> dict[str, Any]:
    """One JSON-RPC 2.0 message (a request or a notification), or McpError."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise McpError(413, f"a message is at most {MAX_MESSAGE_BYTES // (1024 * 1024)} MiB")
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise McpError(400, "the body is not JSON") from None
    if isinstance(message, list):
        raise McpError(400, "a batch of messages is refused (MCP dropped batching in "
                            "2025-06-18): send one message a POST")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise McpError(400, "the body is not a JSON-RPC 2.0 message")
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise McpError(400, "a message to a tool is a request or a notification (a "
                            "method); responses to the tool are not taken")
    if "id" in message and not isinstance(message["id"], (str, int)):
        raise McpError(400, "a request's id is a string or a number")
    return message


def method_refusal(message: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON-RPC error for a message whose method the verb does not take (a request
    not in PROGRAM_REQUESTS, a notification not in PROGRAM_NOTIFICATIONS), or None. The
    method is not repeated: it is the program's text."""
    method = message["method"]
    known = method in PROGRAM_REQUESTS if "id" in message else method in PROGRAM_NOTIFICATIONS
    if known:
        return None
    return _error(message.get("id"), METHOD_NOT_RELAYED,
                  "refused: not a method the MCP verb relays (MCP's "
                  + ("requests" if "id" in message else "notifications")
                  + " of 2024-11-05 to 2025-11-25, spelt exactly); not sent to the tool")


def plain(value: Any, limit: int = MAX_SHOWN_ARGUMENTS) -> str:
    """`value` as its JSON text, cut at `limit` saying so in ASCII (lnk_ask.text.bounded),
    for a question: lnk_ask escapes it, once. (Escaped here too, a `…` of the program's
    read `\\\\u2026`, and a `…` cut of ours `\\u2026`, like the program's own.)"""
    return bounded(orjson.dumps(value).decode("utf-8"), limit)


# What the proxy was given for the sandbox (its placeholders, its URL secret): an opener
# is the person's program, not the sandbox's proxy, and is given none of it.
_PROXY_ONLY = ("LNK_PLACEHOLDER", "LNK_SECRET_PLACEHOLDERS", "LNK_URL_SECRET")


def tool_environment(environ: Any) -> dict[str, str]:
    """An opener's environment (the open verb's): the proxy's own, without what the
    proxy holds for the sandbox. Never a tool's: a tool's is its definition's alone
    (lnk_proxy.tools.Tool.process_environment)."""
    return {name: value for name, value in environ.items() if name not in _PROXY_ONLY}


def _error(message_id: Any, code: int, text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": text}}


# (title, question, what a yes allows in Link's words) -> (yes, how it was answered).
Asker = Callable[[str, str, str], Awaitable[tuple[bool, str]]]


class ToolProcess:
    """One tool's process for this sandbox, and the proxy's client session with it."""

    def __init__(self, tool: Tool, log_path: str, settings: str) -> None:
        self.tool = tool
        self.log_path = log_path
        self.settings = settings
        self.process: asyncio.subprocess.Process | None = None
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.init_result: dict[str, Any] | None = None
        self.sessions: set[str] = set()
        self.starting: asyncio.Lock = asyncio.Lock()
        self.writing: asyncio.Lock = asyncio.Lock()
        self.reader: asyncio.Task[None] | None = None
        self.errors: asyncio.Task[None] | None = None
        # Each listed tool's annotations, as the server gave them in tools/list (shown
        # to the person when asking; never trusted).
        self.annotations: dict[str, Any] = {}

    # -- the process ----------------------------------------------------------------------

    async def ensure(self) -> None:
        """Started and initialized, or McpError (502) saying why."""
        async with self.starting:
            if self.process is not None and self.process.returncode is None \
                    and self.init_result is not None:
                return
            await self._start()

    async def _start(self) -> None:
        from lnk_proxy.tools import ToolError, read_tool_secrets

        self.close()
        # The definition's environment, HOME and cwd, and its secrets read now: nothing of
        # the proxy's environment, which is the session's (a guest's, in a guest's session).
        try:
            environment = self.tool.process_environment(
                read_tool_secrets(self.settings, self.tool))
        except ToolError as error:
            raise McpError(502, f"the tool {self.tool.name} is not started: {error}") from None
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.tool.command, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                limit=MAX_MESSAGE_BYTES, cwd=self.tool.cwd,
                start_new_session=True, env=environment)
        except OSError as error:
            raise McpError(502, f"the tool {self.tool.name} could not be started "
                                f"({error.strerror})") from None
        self.reader = asyncio.ensure_future(self._read())
        self.errors = asyncio.ensure_future(self._log_stderr())
        try:
            result = await asyncio.wait_for(self.request("initialize", {
                "protocolVersion": OUR_VERSION, "capabilities": {},
                "clientInfo": {"name": "lnk-sandbox", "version": "1"}}), START_SECONDS)
        except TimeoutError:
            self.close()
            raise McpError(502, f"the tool {self.tool.name} did not answer initialize in "
                                f"{START_SECONDS:g} s") from None
        if "result" not in result or not isinstance(result["result"], dict):
            self.close()
            raise McpError(502, f"the tool {self.tool.name} refused initialize")
        self.init_result = result["result"]
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def _read(self) -> None:
        """The tool's stdout, a message a line: responses resolve their request; the
        tool's own requests get an error; notifications are dropped."""
        assert self.process is not None and self.process.stdout is not None
        stdout = self.process.stdout
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # a line over the limit: the tool is not one to hold
                    break
                if not line:
                    break
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # not MCP: a tool that prints to stdout; nothing to relay
                if not isinstance(message, dict):
                    continue
                if "method" in message and "id" in message:
                    await self._send(_error(message["id"], -32601,
                                            "lnk-sandbox relays no request to the sandbox"))
                    continue
                answered = message.get("id")
                waiting = (self.pending.pop(answered, None) if isinstance(answered, int)
                           else None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(message)
        finally:
            for waiting in self.pending.values():
                if not waiting.done():
                    waiting.set_exception(McpError(502, f"the tool {self.tool.name} ended"))
            self.pending.clear()

    async def _send(self, message: dict[str, Any]) -> None:
        assert self.process is not None and self.process.stdin is not None
        async with self.writing:
            self.process.stdin.write(orjson.dumps(message) + b"\n")
            try:
                await self.process.stdin.drain()
            except ConnectionError:
                raise McpError(502, f"the tool {self.tool.name} ended") from None

    async def request(self, method: str, params: Any) -> dict[str, Any]:
        """The tool's response to one request of ours (its `result` or `error`)."""
        self.next_id += 1
        ours = self.next_id
        waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[ours] = waiting
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ours, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self._send(message)
            return await waiting
        finally:
            self.pending.pop(ours, None)

    async def _log_stderr(self) -> None:
        """The tool's stderr, line by line, into its bounded log in Link's settings
        (rotated at lnk_common.boundedlog's limit, each line clipped and made printable):
        a chatty tool cannot fill the person's disk."""
        from lnk_common.boundedlog import BoundedLog, clip, printable

        assert self.process is not None and self.process.stderr is not None
        stderr = self.process.stderr
        try:
            os.makedirs(os.path.dirname(self.log_path), mode=0o700, exist_ok=True)
            log = BoundedLog(self.log_path)
        except OSError:
            log = None  # nowhere to keep it: read and dropped, so the tool never blocks
        try:
            while True:
                try:
                    line = await stderr.readline()
                except ValueError:  # a line over the reader's limit: dropped
                    continue
                if not line:
                    return
                if log is not None:
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    text = clip(printable(line.decode("utf-8", "replace").rstrip("\n")))
                    with contextlib.suppress(OSError):
                        log.append(f"{stamp}\t{text}\n".encode("utf-8", "replace"))
        finally:
            if log is not None:
                log.close()

    def close(self) -> None:
        for task in (self.reader, self.errors):
            if task is not None:
                task.cancel()
        self.errors = None
        if self.reader is not None:
            self.reader = None
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
        self.process = None
        self.init_result = None

    # -- the program's messages --------------------------------------------------------------

    def hints(self, name: str) -> str:
        """What the tool's server said of `name` in tools/list, if it was listed: shown to
        the person as the server's claim, never used to skip asking."""
        annotations = self.annotations.get(name)
        return (f" The server describes it as {plain(annotations, 300)} (its own words, "
                "not checked).") if annotations else ""

    async def answer(self, message: dict[str, Any], session: str | None, ask: Asker | None,
                     wire: str) -> tuple[dict[str, Any] | None, str | None]:
        """(the response to the program, or None for a notification; the session id to
        send back, for an initialize)."""
        method = message["method"]
        if "id" not in message:
            return None, None  # a notification: taken, not relayed
        message_id = message["id"]
        if session is not None and session not in self.sessions:
            raise McpError(404, "no such session (it ended with the tool, or is not this "
                                "sandbox's): initialize again")
        await self.ensure()
        if method == "initialize":
            assert self.init_result is not None
            result = dict(self.init_result)
            asked = (message.get("params") or {}).get("protocolVersion")
            if asked in RELAYED_VERSIONS:
                result["protocolVersion"] = asked
            new_session = secrets.token_hex(16)
            self.sessions.add(new_session)
            return {"jsonrpc": "2.0", "id": message_id, "result": result}, new_session
        if method == "server/discover":
            # 2026-07-28's probe. The relay speaks the initialize handshake to the tool
            # (the one every stdio server takes), so it says "no such method": a client
            # in auto mode (the SDK's default) then initializes, as the revision says.
            return _error(message_id, -32601, "server/discover: this relay speaks the "
                                              "initialize handshake (2025-11-25)"), None
        if method == "ping":
            return {"jsonrpc": "2.0", "id": message_id, "result": {}}, None
        if method == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if not isinstance(name, str):
                return _error(message_id, -32602, "tools/call needs a tool's name"), None
            if self.tool.asks_for(name):
                if ask is None:
                    return _error(message_id, -32001, f"refused: {name} must be asked of "
                                  "the person, and no way to ask is available here"), None
                arguments = params.get("arguments") if isinstance(params, dict) else None
                # The title short (a dialog's); the question says who asks what, the
                # arguments as their JSON text, escaped once, by lnk_ask (which keeps
                # it whole for `asks --show` and cuts it for each way, saying so); the
                # server's hints shown as what they are: its own words, not trusted.
                # What a yes allows: Link's names first, the program's last.
                yes, how = await ask(
                    f"{self.tool.name}: run {name}?",
                    f"The sandbox {wire} asks to run the tool {name} of {self.tool.name} "
                    f"with the arguments {orjson.dumps(arguments).decode('utf-8')}."
                    + self.hints(name),
                    f"sandbox {wire}, server {self.tool.name}, tool {name}")
                if not yes:
                    return _error(message_id, -32001, f"refused: the person did not allow "
                                  f"{name} ({how})"), None
        try:
            response = await asyncio.wait_for(
                self.request(method, message.get("params")), CALL_SECONDS)
        except TimeoutError:
            return _error(message_id, -32001, f"the tool did not answer in "
                                              f"{CALL_SECONDS:g} s"), None
        response = dict(response)
        response["id"] = message_id
        if method == "tools/list":
            self._remember_annotations(response)
        return response, None

    def _remember_annotations(self, response: dict[str, Any]) -> None:
        result = response.get("result")
        listed = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(listed, list):
            return
        for tool in listed[:1024]:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str) and isinstance(
                    tool.get("annotations"), dict):
                self.annotations[tool["name"]] = tool["annotations"]


class McpVerb:
    """`/_link/s/<secret>/mcp/<name>` (a part of lnk_proxy.url_secret_verb): one
    JSON-RPC message of MCP's Streamable HTTP to the tool's process, answered as JSON.
    Logged `mcp:<name>`, never a method's arguments. `tools`: the tools the policy names;
    `ask`: how the person is asked about a tools/call; `settings`, `wire`: where each
    tool's log is kept and the sandbox named in a question."""

    __slots__ = ("ask", "processes", "settings", "tools", "wire")

    def __init__(self, tools: dict[str, Tool], *, ask: Asker | None, settings: str,
                 wire: str) -> None:
        self.tools = tools
        self.ask = ask
        self.settings = settings
        self.wire = wire
        self.processes: dict[str, ToolProcess] = {}

    async def call(self, call: VerbCall, rest: str) -> Keep:
        from lnk_common.wire import Refused

        name = rest[1:] if rest.startswith("/") else ""
        tool = self.tools.get(name)
        if tool is None:
            return await call.refuse("-", Refused(
                404, "not among this sandbox's tools ([verbs] tools names them)"))
        authority = f"mcp:{name}"
        method = call.request.method
        if method != b"POST":
            if method == b"DELETE":
                self._process(tool).sessions.discard(call.header(b"mcp-session-id") or "")
                return await call.respond(200, [], b"")
            # Not a refusal: Streamable HTTP's way for a server to say it offers no
            # stream of its own (a client opens one after initialize, and goes on).
            return await call.respond(405, [(b"allow", b"POST, DELETE")], b"")
        try:
            call.proxy.gate()
            message = parse_message(await call.body(MAX_MESSAGE_BYTES))
        except McpError as error:
            return await call.refuse(authority, Refused(error.status, error.reason))
        except Refused as refusal:
            return await call.refuse(authority, refusal)
        unknown = method_refusal(message)
        if unknown is not None:
            # Not MCP's spelling of a method the verb takes (`Tools/Call`, `tools/call `):
            # never to the tool, which might take it for a call it would have asked about.
            # A JSON-RPC error (with no id, at 400, for a notification: Streamable HTTP's).
            not_relayed = Refused(400, "a method the MCP verb does not relay")
            call.proxy.log.write("refused", authority, f"reason={not_relayed.logged}")
            call.proxy.count_refusal(authority, not_relayed)
            return await call.respond(200 if "id" in message else 400,
                                      [(b"content-type", b"application/json")],
                                      orjson.dumps(unknown))
        return await self._relay(call, tool, authority, message)

    async def _relay(self, call: VerbCall, tool: Tool, authority: str,
                     message: dict[str, Any]) -> Keep:
        """The message to the tool's process and its answer back: one allowed and one
        ended line."""
        from lnk_common.wire import Refused

        log = call.proxy.log
        number = next(call.proxy.ids)
        log.write("allowed", authority, f"id={number} kind=mcp")
        started = time.monotonic()
        failure = ""
        try:
            response, session = await self._process(tool).answer(
                message, call.header(b"mcp-session-id"), self.ask, self.wire or "-")
        except McpError as error:
            failure = f" error={error.status}"
            return await call.refuse(authority, Refused(
                error.status, error.reason, counts=error.status != 502), echo=False)
        finally:
            log.write("ended", authority,
                      f"id={number} seconds={time.monotonic() - started:.3f}{failure}")
        if response is None:
            return await call.respond(202, [], b"")
        if "error" in response and str(response["error"].get("message", "")).startswith(
                "refused: "):
            log.write("refused", authority, "reason=a tools/call the person did not allow, "
                                            "or could not be asked")
        headers = [(b"content-type", b"application/json")]
        if session is not None:
            headers.append((b"mcp-session-id", session.encode("ascii")))
        return await call.respond(200, headers, orjson.dumps(response))

    def _process(self, tool: Tool) -> ToolProcess:
        """The tool's process for this sandbox (made, not started: started on use)."""
        process = self.processes.get(tool.name)
        if process is None:
            # One log a tool, shared by the sandboxes that run it (appended; cut to its
            # newest part when a process starts): a run's own would pile up a file a run.
            settings = self.settings or "/nonexistent"
            log = os.path.join(settings, "sandbox", "tools", f"{tool.name}.log")
            process = self.processes[tool.name] = ToolProcess(tool, log, settings)
        return process

    def close(self) -> None:
        for process in self.processes.values():
            process.close()
