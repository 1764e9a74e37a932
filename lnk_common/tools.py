"""Tools that run outside: stdio MCP servers a person defines once and a spec names.

A tool is defined in Link's settings (`lnk-sandbox tool add NAME [--allow TOOL…] [--ask
none] -- COMMAND…`), kept beside the secrets (`sandbox/secrets/NAME.tool`, 0600, read and
written as strictly as a secret: a command can carry a token, e.g. mcp-remote's header). A
sandbox reaches only the tools its spec names (`[verbs] tools = ["github"]`), through the
MCP verb `/_link/s/<URL secret>/mcp/<name>` (lnk_proxy.mcp_verb), which starts the command on
first use, outside the sandbox, as the person.

The definition (JSON): {"command": [ARG…], "allow": [TOOL…], "ask": "each" | "none"}.
`allow`: MCP tool names called without asking; `ask`: "each" (every other tools/call asks
the person) or "none" (none asks: the person said so when adding it).

ToolError is the only exception that leaves this module; its message never repeats a
command's words (one may be a token).
"""

from __future__ import annotations

import orjson

from lnk_common.secrets import (
    SecretError,
    name_problem,
    read_tool_file,
    remove_tool_file,
    tool_names,
    write_tool_file,
)

__all__ = ["ASK_MODES", "MAX_ALLOWED", "MAX_COMMAND_WORDS", "Tool", "ToolError", "add_tool",
           "list_tools", "parse_tool", "read_tool", "remove_tool"]

ASK_MODES = ("each", "none")
# A command is a program and its arguments: a few dozen words at most in any real one.
MAX_COMMAND_WORDS = 256
# MCP tool names allowed without asking: a server offers tens of tools at most.
MAX_ALLOWED = 256
# An MCP tool's name (the spec's: 1-128 of letters, digits, '_', '-', '.').
MAX_TOOL_NAME = 128
_TOOL_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789_-.")


class ToolError(Exception):
    """A tool cannot be named, defined, read or removed; one line."""


class Tool:
    __slots__ = ("allow", "ask", "command", "name")

    def __init__(self, name: str, command: tuple[str, ...], allow: frozenset[str],
                 ask: str) -> None:
        self.name = name
        self.command = command
        self.allow = allow
        self.ask = ask

    def asks_for(self, tool: str) -> bool:
        """Whether a tools/call of `tool` asks the person first."""
        return self.ask == "each" and tool not in self.allow

    def __repr__(self) -> str:  # never the command's words
        return f"Tool({self.name}, ask={self.ask}, allow={sorted(self.allow)})"


def _check(name: str, command: list[str], allow: list[str], ask: str) -> None:
    problem = name_problem(name)
    if problem:
        raise ToolError(problem.replace("secret", "tool"))
    if not command or len(command) > MAX_COMMAND_WORDS:
        raise ToolError(f"a tool's command is 1 to {MAX_COMMAND_WORDS} words")
    if any(not isinstance(word, str) or "\0" in word for word in command) or not command[0]:
        raise ToolError("a tool's command is words without NUL, the first not empty")
    if len(allow) > MAX_ALLOWED:
        raise ToolError(f"at most {MAX_ALLOWED} tools allowed without asking")
    for tool in allow:
        if not (isinstance(tool, str) and 0 < len(tool) <= MAX_TOOL_NAME
                and set(tool) <= _TOOL_NAME_CHARS):
            raise ToolError("--allow takes MCP tool names: 1 to 128 letters, digits, '_', "
                            "'-' and '.'")
    if ask not in ASK_MODES:
        raise ToolError(f"--ask takes {' or '.join(ASK_MODES)}")


def parse_tool(name: str, raw: bytes) -> Tool:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ToolError(f"the tool {name}'s definition is not JSON") from None
    if not isinstance(document, dict) or set(document) != {"command", "allow", "ask"}:
        raise ToolError(f"the tool {name}'s definition is not one of ours "
                        "(command, allow, ask)")
    command, allow, ask = document["command"], document["allow"], document["ask"]
    if not isinstance(command, list) or not isinstance(allow, list) or not isinstance(ask, str):
        raise ToolError(f"the tool {name}'s definition is not one of ours")
    _check(name, command, allow, ask)
    return Tool(name, tuple(command), frozenset(allow), ask)


def add_tool(settings: str, name: str, command: list[str], allow: list[str],
             ask: str) -> None:
    _check(name, command, allow, ask)
    definition = orjson.dumps({"command": command, "allow": sorted(set(allow)), "ask": ask})
    try:
        write_tool_file(settings, name, definition)
    except SecretError as error:
        raise ToolError(str(error)) from None


def read_tool(settings: str, name: str) -> Tool:
    try:
        return parse_tool(name, read_tool_file(settings, name))
    except SecretError as error:
        raise ToolError(str(error)) from None


def list_tools(settings: str) -> list[Tool]:
    try:
        return [read_tool(settings, name) for name in tool_names(settings)]
    except SecretError as error:
        raise ToolError(str(error)) from None


def remove_tool(settings: str, name: str) -> bool:
    try:
        return remove_tool_file(settings, name)
    except SecretError as error:
        raise ToolError(str(error)) from None
