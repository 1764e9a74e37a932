"""lnk-sandbox tool add / list / remove: tools that run outside, for a person.

A definition's command is never printed back (it may hold a token, e.g. mcp-remote's
header), nor a secret's value or an --env value: `list` shows names, what each allows
without asking, its asking mode and the names of its secrets.

`tool add NAME --secret VAR…` reads the values from standard input, never argv nor the
environment (as `secret set` does): from a terminal, one prompt a secret, without echo;
otherwise one value a line, in the order of --secret (`printf '%s\\n' "$A" "$B" | lnk-sandbox
tool add …`), exactly as many lines as secrets. Order: the whole definition checked (for
mcp-remote, its URL's rule and its headers) → the values read and checked → the secrets
kept → the definition kept; anything refused before the writes keeps nothing.
"""

from __future__ import annotations

import os
import sys

from lnk_common.secrets import MAX_SECRET_BYTES
from lnk_proxy.tools import (
    MAX_SECRETS,
    ToolError,
    add_tool,
    check_secret_values,
    list_tools,
    owner_home,
    plan_tool,
    remove_tool,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["tools"]


def tools(settings: str, arguments: Mapping[str, object]) -> int:
    """One `tool` command; ToolError is left to the caller (one line, exit 125)."""
    if arguments["list"]:
        found = list_tools(settings)
        if arguments["--json"]:
            import orjson

            sys.stdout.buffer.write(orjson.dumps({"tools": [
                {"name": tool.name, "allow": sorted(tool.allow), "ask": tool.ask,
                 "secrets": list(tool.secrets)}
                for tool in found]}) + b"\n")
        else:
            for tool in found:
                allowed = f"; allowed without asking: {', '.join(sorted(tool.allow))}" \
                    if tool.allow else ""
                kept = f"; secrets: {', '.join(tool.secrets)}" if tool.secrets else ""
                print(f"{tool.name}  (asks: {tool.ask}{allowed}{kept})")
        return 0
    name = str(arguments["NAME"])
    if arguments["add"]:
        return _add(settings, name, arguments)
    if remove_tool(settings, name):
        print(f"the tool {name} is removed")
        return 0
    print(f"lnk-sandbox: no tool named {name}; nothing was done", file=sys.stderr)
    return 125


def _words(arguments: Mapping[str, object], key: str) -> list[str]:
    given = arguments.get(key) or []
    assert isinstance(given, list)
    return [str(word) for word in given]


def _folder(arguments: Mapping[str, object], key: str) -> str | None:
    given = arguments.get(key)
    if not isinstance(given, str):
        return None
    if not os.path.isdir(given):
        raise ToolError(f"{key} {given} is not a folder; nothing was kept")
    return given


def _add(settings: str, name: str, arguments: Mapping[str, object]) -> int:
    ask = arguments["--ask"]
    plan = plan_tool(name, _words(arguments, "COMMAND"), _words(arguments, "--allow"),
                     str(ask) if isinstance(ask, str) else "each",
                     environ=os.environ, owner_home=owner_home(),
                     home=_folder(arguments, "--home"), cwd=_folder(arguments, "--cwd"),
                     assignments=_words(arguments, "--env"),
                     secrets=_words(arguments, "--secret"))
    values = _values_from_stdin(list(plan.asked)) if plan.asked else []
    add_tool(settings, plan, check_secret_values(plan, values))
    print(f"the tool {name} is defined"
          + (f", with its secrets {', '.join(plan.tool.secrets)}" if plan.tool.secrets else ""))
    if plan.moved_headers:
        print(f"the value of the header {', '.join(plan.moved_headers)} is kept as a secret "
              "of the tool, not in its command (a command is readable in /proc by every "
              "process of yours)")
    return 0


def _values_from_stdin(names: list[str]) -> list[bytes]:
    """One value a secret: from a terminal, a prompt each without echo; else one line
    each (the last line end optional), read to one byte past what so many could be."""
    if sys.stdin is None:
        raise ToolError("the tool's secrets come on standard input, and there is none; "
                        "nothing was kept")
    if sys.stdin.isatty():
        import getpass

        return [getpass.getpass(f"the value of {variable} (not shown): ").encode()
                for variable in names]
    from lnk_wrap.secrets_view import read_stdin_up_to

    raw = read_stdin_up_to(MAX_SECRETS * (MAX_SECRET_BYTES + 1) + 1)
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    return raw.split(b"\n") if raw else []
