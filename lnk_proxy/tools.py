"""Tools that run outside: stdio MCP servers a person defines once and a spec names.

A tool is defined in Link's settings (`lnk-sandbox tool add NAME [--allow TOOL…] [--ask
none] [--secret VAR…] [--env NAME=VALUE…] [--home DIR] [--cwd DIR] -- COMMAND…`), kept
beside the secrets (`sandbox/secrets/NAME.tool`, 0600, read and written as strictly as a
secret), its own secrets in a file beside it (`NAME.tool-secrets`). A sandbox reaches only
the tools its spec names (`[verbs] tools = ["github"]`), through the MCP verb
`/_link/s/<URL secret>/mcp/<name>` (lnk_proxy.mcp_verb), which starts the command on first
use, outside the sandbox, as the person.

Trust: the tool runs as the person, outside, so nothing it starts with may come from what a
sandbox or a guest can write: its environment, cwd and HOME are the definition's, fixed at
`tool add` (PATH and the locale as they were then, HOME from the passwd entry unless --home
names one, --env for more, --cwd, else HOME), never the session's of the sandbox it serves
(a guest's session has the guest's folder for HOME and cwd, where a `.pth`, a
`sitecustomize.py` or a `node_modules` would run the guest's code as the person). Its
secrets reach it in its environment only, never in argv; `${VAR}` in its command may name
only one of them (mcp-remote fills those from its environment). Every variable a
definition names for a token (its secrets, each `${VAR}`) is taken out of every sandbox's
environment (tool_variables, used by lnk_wrap.verb_env).

The definition (JSON): {"command": [ARG…], "allow": [TOOL…], "ask": "each" | "none",
"cwd": DIR, "home": DIR, "environment": {NAME: VALUE}, "secrets": [VAR…]}. `allow`: MCP
tool names called without asking; `ask`: "each" (every other tools/call asks the person) or
"none" (none asks: the person said so when adding it). A definition written before cwd,
home, environment and secrets were kept ({"command", "allow", "ask"}) is read with safe
defaults: the passwd entry's home for HOME and cwd, FALLBACK_PATH, C.UTF-8, no secrets.

For lnk-sandbox-mcp-remote's command (its program's name), `tool add` runs mcp-remote's own
check of the URL and headers (https, or http to this machine's loopback) before anything is
kept, and moves each literal header value into the tool's secrets (`--header
"Authorization: Bearer abc"` is kept as `Authorization: ${LNK_TOOL_HEADER_1}` and the value
as that secret): a command is argv, readable in /proc by every process of the person's.

ToolError is the only exception that leaves this module; its message never repeats a
command's words, a secret's value or an --env value (any may be a token).
"""

from __future__ import annotations

import json
import os
import re

from lnk_common.secrets import (
    MAX_SECRET_BYTES,
    SecretError,
    name_problem,
    read_tool_file,
    read_tool_secrets_file,
    remove_tool_file,
    tool_file_identity,
    tool_names,
    write_tool_file,
    write_tool_secrets_file,
    write_tools_index,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ASK_MODES", "FALLBACK_PATH", "MAX_ALLOWED", "MAX_COMMAND_WORDS", "MAX_ENVIRONMENT",
           "MAX_SECRETS", "MCP_REMOTE", "Tool", "ToolError", "ToolPlan", "add_tool",
           "check_secret_values", "list_tools", "owner_home", "parse_tool", "plan_tool",
           "read_tool", "read_tool_secrets", "remove_tool", "tool_variables"]

ASK_MODES = ("each", "none")
# A command is a program and its arguments: a few dozen words at most in any real one.
MAX_COMMAND_WORDS = 256
# MCP tool names allowed without asking: a server offers tens of tools at most.
MAX_ALLOWED = 256
# An MCP tool's name (the spec's: 1-128 of letters, digits, '_', '-', '.').
MAX_TOOL_NAME = 128
_TOOL_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                             "0123456789_-.")
# A tool holds a token or two; mcp-remote at most MAX_HEADERS (32) headers, each of which
# may be moved into a secret: 48 covers both with room.
MAX_SECRETS = 48
# PATH, the locale's dozen LC_* and a few --env: a real environment is tens of names.
MAX_ENVIRONMENT = 64
# An environment variable's name as a shell writes one; longer is a mistake.
MAX_VARIABLE_NAME = 64
# An --env value, a PATH, a folder: far under a page; a whole file pasted is refused.
MAX_ENVIRONMENT_VALUE_BYTES = 8192
# The PATH of a definition kept before PATH was (and of a PATH with no absolute folder):
# the system's folders, no folder of a person's that a session could have put first.
FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin"
FALLBACK_LOCALE = "C.UTF-8"
# The program whose argv tool add checks as mcp-remote's own (and moves literal headers of).
MCP_REMOTE = "lnk-sandbox-mcp-remote"
# The secret a literal header value of mcp-remote's is moved to: `{prefix}{its position}`.
# LNK_ names are never the person's (refused for --secret and --env), so it meets none.
MOVED_HEADER_PREFIX = "LNK_TOOL_HEADER_"

_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# `${VAR}` in a command's word, as mcp-remote (ours and npm's) fills it.
_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Names neither --env nor --secret may give: fixed at tool add (PATH, the locale), from the
# home (HOME), or Link's (LNK_*).
_FIXED_NAMES = frozenset({"PATH", "HOME", "LANG", "LANGUAGE"})
_FIXED_PREFIXES = ("LC_", "LNK_")
# And no secret may be a name every program and sandbox needs: a secret's name is taken out
# of every sandbox's environment.
_NEEDED_NAMES = frozenset({"PWD", "OLDPWD", "TERM", "USER", "LOGNAME", "SHELL", "TMPDIR",
                           "DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR"})
_DEFINITION_KEYS = frozenset({"command", "allow", "ask", "cwd", "home", "environment",
                              "secrets"})
_OLD_DEFINITION_KEYS = frozenset({"command", "allow", "ask"})


class ToolError(Exception):
    """A tool cannot be named, defined, read or removed; one line."""


def _dumps(document: object) -> bytes:
    """JSON in ASCII. The standard library's, not orjson: a sandbox's start without a wire
    has no site-packages on its path, and reads definitions when the tools' index does not
    describe them (lnk_wrap.verb_env)."""
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def _is_locale(name: str) -> bool:
    return name in ("LANG", "LANGUAGE") or name.startswith("LC_")


class Tool:
    __slots__ = ("allow", "ask", "command", "cwd", "environment", "home", "name", "secrets")

    def __init__(self, name: str, command: tuple[str, ...], allow: frozenset[str], ask: str,
                 *, cwd: str, home: str, environment: Mapping[str, str],
                 secrets: tuple[str, ...]) -> None:
        self.name = name
        self.command = command
        self.allow = allow
        self.ask = ask
        self.cwd = cwd
        self.home = home
        self.environment = dict(environment)
        self.secrets = secrets

    def asks_for(self, tool: str) -> bool:
        """Whether a tools/call of `tool` asks the person first."""
        return self.ask == "each" and tool not in self.allow

    def variables(self) -> frozenset[str]:
        """Every variable the definition names for a token: its secrets and each `${VAR}`
        of its command (an old definition's token came that way). Not its --env names: an
        --env value is no secret (it is in the definition and in tool add's argv), and a
        tool's DISPLAY or SSL_CERT_FILE must not leave every sandbox's environment."""
        referenced = {match for word in self.command for match in _REFERENCE.findall(word)}
        return frozenset({*self.secrets, *referenced})

    def process_environment(self, values: Mapping[str, str]) -> dict[str, str]:
        """The tool process's whole environment: the definition's, HOME, and its secrets
        (`values`, by name, as read_tool_secrets gives them); ToolError when a secret it
        names has no value, or its command names a `${VAR}` that is not one of its
        secrets (a definition kept before secrets were, which relied on the session's
        environment: never filled from it)."""
        from lnk_mcpremote import TOOL_SECRETS_VARIABLE

        for word in self.command:
            for variable in _REFERENCE.findall(word):
                if variable not in self.secrets:
                    raise ToolError(
                        f"the tool {self.name}'s command names ${{{variable}}}, which is not "
                        f"one of its secrets: add it again with --secret {variable} (its "
                        "value on standard input)")
        missing = [variable for variable in self.secrets if variable not in values]
        if missing:
            raise ToolError(f"the tool {self.name}'s secret {missing[0]} is not stored: add "
                            "the tool again")
        environment = dict(self.environment)
        environment["HOME"] = self.home
        for variable in self.secrets:
            environment[variable] = values[variable]
        if self.secrets:
            environment[TOOL_SECRETS_VARIABLE] = ",".join(self.secrets)
        return environment

    def __repr__(self) -> str:  # never the command's words, nor an --env value
        return f"Tool({self.name}, ask={self.ask}, allow={sorted(self.allow)})"


# -- the checks (sans IO) -------------------------------------------------------------------


def _variable_problem(name: object, option: str) -> str | None:
    """Why `name` cannot be a variable a tool names with `option`, or None."""
    if not isinstance(name, str) or len(name) > MAX_VARIABLE_NAME \
            or _VARIABLE_NAME.match(name) is None:
        return (f"{option} takes a variable's name: 1 to {MAX_VARIABLE_NAME} letters, digits "
                "and '_', not starting with a digit (what was given is not repeated here)")
    if name in _FIXED_NAMES or name.startswith(_FIXED_PREFIXES):
        return (f"{option} {name} is refused: PATH, HOME and the locale are fixed at tool add "
                "(PATH and the locale as they are then; --home), and LNK_ names are Link's")
    if option == "--secret" and name in _NEEDED_NAMES:
        return (f"--secret {name} is refused: a secret's name is taken out of every "
                f"sandbox's environment, and every program needs {name}")
    return None


def _check_folder(path: object, option: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path \
            or len(path.encode("utf-8", "surrogateescape")) > MAX_ENVIRONMENT_VALUE_BYTES:
        raise ToolError(f"{option} takes an absolute path")
    return os.path.normpath(path)


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


def _check_environment(environment: object) -> dict[str, str]:
    if not isinstance(environment, dict) or len(environment) > MAX_ENVIRONMENT:
        raise ToolError(f"a tool's environment is at most {MAX_ENVIRONMENT} variables")
    for variable, value in environment.items():
        fixed = variable == "PATH" or (isinstance(variable, str) and _is_locale(variable))
        problem = None if fixed else _variable_problem(variable, "--env")
        if problem:
            raise ToolError(problem)
        if not isinstance(value, str) or "\0" in value \
                or len(value.encode("utf-8", "surrogateescape")) > MAX_ENVIRONMENT_VALUE_BYTES:
            raise ToolError(f"--env {variable}: a value is at most "
                            f"{MAX_ENVIRONMENT_VALUE_BYTES} bytes, without NUL")
    return environment


def _check_secrets(secrets: object, environment: Mapping[str, str], *, moved: bool
                   ) -> tuple[str, ...]:
    """`secrets` as a tuple, or ToolError; `moved`: a moved header's name may be among
    them (never one the person gives)."""
    if not isinstance(secrets, list) or len(secrets) > MAX_SECRETS:
        raise ToolError(f"a tool has at most {MAX_SECRETS} secrets")
    for variable in secrets:
        is_moved = moved and isinstance(variable, str) \
            and variable.startswith(MOVED_HEADER_PREFIX) \
            and variable.removeprefix(MOVED_HEADER_PREFIX).isdigit()
        problem = None if is_moved else _variable_problem(variable, "--secret")
        if problem:
            raise ToolError(problem)
    if len(set(secrets)) != len(secrets):
        raise ToolError("a secret is named twice (--secret)")
    both = [variable for variable in secrets if variable in environment]
    if both:
        raise ToolError(f"{both[0]} is named by both --secret and --env")
    return tuple(secrets)


def _check_references(command: list[str], secrets: tuple[str, ...]) -> None:
    for word in command:
        for variable in _REFERENCE.findall(word):
            if variable not in secrets:
                raise ToolError(f"the command names ${{{variable}}}, which is not one of the "
                                f"tool's secrets: add --secret {variable} (its value on "
                                "standard input); nothing else fills it")


def parse_tool(name: str, raw: bytes, *, owner_home: str) -> Tool:
    """A definition as kept; an old one ({"command", "allow", "ask"}) gets `owner_home`
    (the passwd entry's) for HOME and cwd, FALLBACK_PATH and C.UTF-8, and no secrets."""
    try:
        document = json.loads(raw)
    except ValueError:  # JSONDecodeError, and bytes that are not UTF-8
        raise ToolError(f"the tool {name}'s definition is not JSON") from None
    if not isinstance(document, dict) or set(document) not in (_DEFINITION_KEYS,
                                                               _OLD_DEFINITION_KEYS):
        raise ToolError(f"the tool {name}'s definition is not one of ours "
                        "(command, allow, ask, cwd, home, environment, secrets)")
    command, allow, ask = document["command"], document["allow"], document["ask"]
    if not isinstance(command, list) or not isinstance(allow, list) or not isinstance(ask, str):
        raise ToolError(f"the tool {name}'s definition is not one of ours")
    _check(name, command, allow, ask)
    if set(document) == _OLD_DEFINITION_KEYS:
        return Tool(name, tuple(command), frozenset(allow), ask, cwd=owner_home,
                    home=owner_home, environment={"PATH": FALLBACK_PATH,
                                                  "LANG": FALLBACK_LOCALE}, secrets=())
    environment = _check_environment(document["environment"])
    secrets = _check_secrets(document["secrets"], environment, moved=True)
    # A definition of ours names no ${VAR} outside its secrets (tool add refuses it).
    _check_references(command, secrets)
    return Tool(name, tuple(command), frozenset(allow), ask,
                cwd=_check_folder(document["cwd"], "cwd"),
                home=_check_folder(document["home"], "home"),
                environment=environment, secrets=secrets)


class ToolPlan:
    """A definition checked whole before anything is read or kept: its JSON, the secrets
    whose values come on standard input (in --secret's order), and the header values
    taken out of its command (by the secret that now holds each)."""

    __slots__ = ("asked", "definition", "moved", "moved_headers", "name", "tool")

    def __init__(self, name: str, tool: Tool, asked: tuple[str, ...], moved: dict[str, str],
                 moved_headers: list[str]) -> None:
        self.name = name
        self.tool = tool
        self.asked = asked
        self.moved = moved
        self.moved_headers = moved_headers
        self.definition = _dumps({
            "command": list(tool.command), "allow": sorted(tool.allow), "ask": tool.ask,
            "cwd": tool.cwd, "home": tool.home, "environment": tool.environment,
            "secrets": list(tool.secrets)})


def _fixed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """PATH (its absolute folders only: an empty or relative one is the cwd's) and the
    locale, as `environ` (the person's at tool add) has them."""
    folders = [folder for folder in environ.get("PATH", "").split(":")
               if folder.startswith("/")]
    fixed = {"PATH": ":".join(folders) if folders else FALLBACK_PATH}
    fixed.update((name, value) for name, value in environ.items()
                 if _is_locale(name) and _VARIABLE_NAME.match(name))
    return fixed


def _mcp_remote_words(command: list[str]) -> int:
    """How many of the command's first words name mcp-remote (`lnk-sandbox-mcp-remote`,
    or `lnk-sandbox mcp-remote`, the verb); 0 when it is another program."""
    if os.path.basename(command[0]) == MCP_REMOTE:
        return 1
    if os.path.basename(command[0]) == "lnk-sandbox" and command[1:2] == ["mcp-remote"]:
        return 2
    return 0


def _is_mcp_remote(command: list[str]) -> bool:
    return _mcp_remote_words(command) > 0


def _mcp_remote_checked(command: list[str], secrets: Mapping[str, str]) -> None:
    """mcp-remote's own check of its argv (the URL's rule, the headers), with `secrets`
    as the values its `${VAR}`s will be filled with; ToolError with its one line."""
    from lnk_mcpremote import TOOL_SECRETS_VARIABLE, ArgumentError, parse_arguments

    environment = {**secrets, TOOL_SECRETS_VARIABLE: ",".join(secrets)}
    try:
        parse_arguments(command[_mcp_remote_words(command):], environment)
    except ArgumentError as error:
        raise ToolError(f"mcp-remote's command is refused: {error}") from None


def plan_tool(name: str, command: list[str], allow: list[str], ask: str, *,
              environ: Mapping[str, str], owner_home: str, home: str | None,
              cwd: str | None, assignments: list[str], secrets: list[str]) -> ToolPlan:
    """The definition `tool add` keeps, checked whole (sans IO): `environ` is the
    person's at tool add (PATH and the locale are taken from it, nothing else),
    `assignments` the --env NAME=VALUE words, `secrets` the --secret names."""
    _check(name, command, allow, ask)
    environment = _fixed_environment(environ)
    for assignment in assignments:
        variable, equals, value = assignment.partition("=")
        problem = _variable_problem(variable, "--env") if equals else \
            "--env takes NAME=VALUE (what was given is not repeated here)"
        if problem:
            raise ToolError(problem)
        if variable in environment:
            raise ToolError(f"--env {variable} is given twice")
        environment[variable] = value
    environment = _check_environment(environment)
    asked = _check_secrets(list(secrets), environment, moved=False)
    words = list(command)
    moved: dict[str, str] = {}
    moved_headers: list[str] = []
    if _is_mcp_remote(words):
        # Its rule at once, with placeholders for the values not read yet (a plain http URL
        # off this machine is refused before a value is asked for).
        _mcp_remote_checked(words, dict.fromkeys(asked, "x"))
        from lnk_mcpremote import keep_literal_values_out

        program = _mcp_remote_words(words)
        rest, moved, moved_headers = keep_literal_values_out(
            words[program:], lambda position: f"{MOVED_HEADER_PREFIX}{position}")
        words = [*words[:program], *rest]
    all_secrets = _check_secrets([*asked, *moved], environment, moved=True)
    _check_references(words, all_secrets)
    home_folder = _check_folder(home if home is not None else owner_home, "--home")
    tool = Tool(name, tuple(words), frozenset(allow), ask, home=home_folder,
                cwd=_check_folder(cwd, "--cwd") if cwd is not None else home_folder,
                environment=environment, secrets=all_secrets)
    return ToolPlan(name, tool, asked, moved, moved_headers)


def check_secret_values(plan: ToolPlan, values: list[bytes]) -> dict[str, str]:
    """The tool's secrets by name (the values read, in --secret's order, and the moved
    headers'), each one line of UTF-8 without NUL; for mcp-remote, its check again with
    the real values (a CR in a header's value is refused). Never repeats a value."""
    if len(values) != len(plan.asked):
        raise ToolError("standard input holds one value a line for each --secret, in their "
                        f"order ({len(plan.asked)} wanted, {len(values)} given); nothing was "
                        "kept")
    found: dict[str, str] = {}
    for variable, value in zip(plan.asked, values, strict=True):
        if not value or len(value) > MAX_SECRET_BYTES or any(c in value for c in b"\0\r\n"):
            raise ToolError(f"the value of {variable} is empty, longer than "
                            f"{MAX_SECRET_BYTES} bytes, or holds a NUL or a line end; "
                            "nothing was kept")
        try:
            found[variable] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"the value of {variable} is not UTF-8; nothing was kept") from None
    found.update(plan.moved)
    if _is_mcp_remote(list(plan.tool.command)):
        _mcp_remote_checked(list(plan.tool.command), found)
    return found


# -- the store ------------------------------------------------------------------------------


def owner_home() -> str:
    """The person's home from the passwd entry: never $HOME, which is the session's (a
    guest's is the guest's own folder)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_dir or "/"
    except KeyError:
        return "/"


def add_tool(settings: str, plan: ToolPlan, secrets: Mapping[str, str]) -> None:
    """Keep the tool's secrets, then its definition: a definition is never read with
    secrets older than it (a secret it names that is missing refuses its start)."""
    try:
        write_tool_secrets_file(settings, plan.name,
                                _dumps(dict(secrets)) if secrets else None)
        write_tool_file(settings, plan.name, plan.definition)
    except SecretError as error:
        raise ToolError(str(error)) from None
    _write_index(settings)


def _write_index(settings: str) -> None:
    """The tools' index (secrets.TOOLS_INDEX) of every definition kept now, each line
    with its file's identity so a start can tell the index still describes it (else it
    reads the definitions). A definition that cannot be read leaves no index: a start
    then reads them all and refuses, naming it."""
    try:
        lines = []
        for tool in list_tools(settings):
            identity = tool_file_identity(settings, tool.name)
            if identity is None:
                raise ToolError(f"the tool {tool.name} went while the index was written")
            lines.append("\t".join([tool.name, *map(str, identity),
                                    ",".join(sorted(tool.variables()))]) + "\n")
        write_tools_index(settings, "".join(lines).encode("ascii") if lines else None)
    except ToolError:
        try:
            write_tools_index(settings, None)
        except SecretError as error:
            raise ToolError(f"the tools' index cannot be removed: {error}") from None
    except SecretError as error:
        raise ToolError(str(error)) from None


def read_tool(settings: str, name: str) -> Tool:
    try:
        return parse_tool(name, read_tool_file(settings, name), owner_home=owner_home())
    except SecretError as error:
        raise ToolError(str(error)) from None


def read_tool_secrets(settings: str, tool: Tool) -> dict[str, str]:
    """The values of the secrets `tool` names, read now (a tool added again with a new
    token takes it at its next start); {} for a tool with none."""
    if not tool.secrets:
        return {}
    try:
        raw = read_tool_secrets_file(settings, tool.name)
    except SecretError as error:
        raise ToolError(str(error)) from None
    try:
        stored = json.loads(raw) if raw is not None else {}
    except ValueError:
        raise ToolError(f"the secrets of the tool {tool.name} are not JSON: add the tool "
                        "again") from None
    if not isinstance(stored, dict):
        raise ToolError(f"the secrets of the tool {tool.name} are not ours: add the tool again")
    return {variable: value for variable, value in stored.items()
            if variable in tool.secrets and isinstance(value, str) and "\0" not in value}


def list_tools(settings: str) -> list[Tool]:
    try:
        return [read_tool(settings, name) for name in tool_names(settings)]
    except SecretError as error:
        raise ToolError(str(error)) from None


def tool_variables(settings: str) -> frozenset[str]:
    """Every variable any tool's definition names (Tool.variables), read from the
    definitions themselves; ToolError when one cannot be read (its variables would be
    unknown: the caller refuses rather than guess). A sandbox's start reads the index
    instead when it describes every definition there (lnk_wrap.verb_env)."""
    found: set[str] = set()
    for tool in list_tools(settings):
        found |= tool.variables()
    return frozenset(found)


def remove_tool(settings: str, name: str) -> bool:
    try:
        removed = remove_tool_file(settings, name)
    except SecretError as error:
        raise ToolError(str(error)) from None
    if removed:
        _write_index(settings)
    return removed
