"""lnk-sandbox tool add / list / remove: tools that run outside, for a person.

A definition's command is never printed back (it may hold a token, e.g. mcp-remote's
header): `list` shows names, what each allows without asking, and its asking mode.
"""

from __future__ import annotations

import sys

from lnk_common.tools import add_tool, list_tools, remove_tool

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["tools"]


def tools(settings: str, arguments: Mapping[str, object]) -> int:
    """One `tool` verb; ToolError is left to the caller (one line, exit 125)."""
    if arguments["list"]:
        found = list_tools(settings)
        if arguments["--json"]:
            import orjson

            sys.stdout.buffer.write(orjson.dumps({"tools": [
                {"name": tool.name, "allow": sorted(tool.allow), "ask": tool.ask}
                for tool in found]}) + b"\n")
        else:
            for tool in found:
                allowed = f"; allowed without asking: {', '.join(sorted(tool.allow))}" \
                    if tool.allow else ""
                print(f"{tool.name}  (asks: {tool.ask}{allowed})")
        return 0
    name = str(arguments["NAME"])
    if arguments["add"]:
        command = arguments["COMMAND"]
        allow = arguments["--allow"]
        ask = arguments["--ask"]
        assert isinstance(command, list) and isinstance(allow, list)
        add_tool(settings, name, [str(word) for word in command],
                 [str(tool) for tool in allow], str(ask) if isinstance(ask, str) else "each")
        print(f"the tool {name} is defined")
        return 0
    if remove_tool(settings, name):
        print(f"the tool {name} is removed")
        return 0
    print(f"lnk-sandbox: no tool named {name}; nothing was done", file=sys.stderr)
    return 125
