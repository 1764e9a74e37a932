"""The secret verb's and the URL secret's side of a sandbox's start: the placeholders,
the URL secret, and what the program finds in its environment.

Job: a program reaches a secret's service through `/_link/secret/<name>/` and holds a
placeholder of the shape the secret's rule gives (Telegram's: the bot's id and a random
part), never the secret; it reaches a [localhost] models port by the relay, or through
`/_link/s/<URL secret>/local/<port>/` (the form every platform takes). So for each named
secret the program gets `LNK_SECRET_<NAME>_URL` (the verb's base) and `LNK_SECRET_<NAME>`
(its placeholder), and `LNK_SANDBOX_URL` (`…/_link/s/<URL secret>`) when a part of it is
on; the proxy gets the placeholders and the URL secret in its own environment
(LNK_SECRET_PLACEHOLDERS, LNK_URL_SECRET), never an argument.

Trust: a secret's value is read here, outside, only to shape its placeholder (the bot's
id); it goes nowhere. A secret named by the spec that is not in the store, or has no rule,
refuses the run (nothing would work, and nothing fails open). A URL secret is made per
run, or once per agent and kept beside the agent's model placeholder (lnk_wrap.model_env:
`sandbox/agents/<name>/url-secret`, a folder no sandbox sees), so a harness's configuration
and its proxy agree across starts. Every variable of ours the caller's environment held is
replaced or removed: the program's values are the ones made here.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from lnk_common.policy import Policy
    from lnk_proxy.tools import Tool

__all__ = ["TOOL_VARIABLE_NOTE", "URL_SECRET_FILE", "VerbEnvError", "check_tools",
           "is_url_secret", "sandbox_environment", "secret_placeholders", "tool_folders_problem",
           "url_secret_for",
           "without_tool_variables"]

URL_SECRET_FILE = "url-secret"  # noqa: S105  (a file's name)
# 32 random bytes, hex: no guessing, and nothing a URL or a shell reads specially.
URL_SECRET_BYTES = 32
_HEX = frozenset("0123456789abcdef")
# Variables of ours the program must hold only as made here (a harness's own are dropped),
# and those it must never hold (the proxy's).
_PREFIX = "LNK_SECRET_"
_OURS = ("LNK_SANDBOX_URL",)
_PROXYS = ("LNK_SECRET_PLACEHOLDERS", "LNK_URL_SECRET")


class VerbEnvError(Exception):
    """A secret or URL secret a run needs cannot be had; one line, the fix in it."""


def new_url_secret() -> str:
    return os.urandom(URL_SECRET_BYTES).hex()


def is_url_secret(text: str) -> bool:
    return len(text) == 2 * URL_SECRET_BYTES and set(text) <= _HEX


def url_secret_for(policy: Policy) -> str:
    """The run's URL secret: the agent's own, kept across runs, or a new one."""
    if not policy.agent:
        return new_url_secret()
    from lnk_wrap.model_env import ModelEnvError, agent_value

    try:
        return agent_value(policy.settings, policy.agent, URL_SECRET_FILE, new_url_secret,
                           is_url_secret, f"a URL secret ({2 * URL_SECRET_BYTES} lowercase "
                                          "hex characters)")
    except ModelEnvError as error:
        raise VerbEnvError(str(error)) from None


def secret_placeholders(policy: Policy) -> dict[str, str]:
    """A new placeholder for each secret the policy names, of its rule's shape, or
    VerbEnvError naming the secret and the fix."""
    if not policy.secrets:
        return {}  # before the imports: lnk_common.secrets (and `re`) cost a start 10 ms
    from lnk_common.secrets import (
        SecretError,
        list_secrets,
        read_rule,
        read_secret,
        rule_names,
    )
    from lnk_proxy.secret_rules import SecretRuleError, make_placeholder, parse_rule

    try:
        stored, ruled = set(list_secrets(policy.settings)), set(rule_names(policy.settings))
    except SecretError as error:
        raise VerbEnvError(f"[verbs] secrets: {error}") from None
    found: dict[str, str] = {}
    for name in policy.secrets:
        # The fix said once, with the rule the secret verb needs (the store's own "not
        # set" names `secret set NAME` alone, the model verb's fix).
        fix = f"lnk-sandbox secret set {name} --rule FILE"
        if name not in stored:
            raise VerbEnvError(f"[verbs] secrets names {name}, which is not set (set it, "
                               f"its value on standard input: {fix})")
        if name not in ruled:
            raise VerbEnvError(f"[verbs] secrets names {name}, which has no rule kept with "
                               f"it (set it again with its plugin's rule: {fix})")
        try:
            rule = parse_rule(read_rule(policy.settings, name))
            found[name] = make_placeholder(rule, read_secret(policy.settings, name)).decode(
                "ascii")
        except SecretError as error:
            raise VerbEnvError(f"[verbs] secrets names {name}: {error}") from None
        except SecretRuleError as error:
            raise VerbEnvError(f"[verbs] secrets names {name}: {error.reason}") from None
    return found


def check_tools(policy: Policy, writable: Callable[[str], bool] | None = None) -> None:
    """VerbEnvError naming the first tool the policy names that is not defined (or whose
    definition is not ours): nothing could reach it, and nothing fails open. With
    `writable` (whether this sandbox could write a path: the mount plan's judgement), also
    the first tool that would read, outside and as the person, what this sandbox can
    write (tool_folders_problem)."""
    if not policy.tools:
        return
    from lnk_proxy.tools import ToolError, read_tool

    for name in policy.tools:
        try:
            tool = read_tool(policy.settings, name)
        except ToolError as error:
            raise VerbEnvError(f"[verbs] tools names {name}: {error}") from None
        if writable is not None:
            problem = tool_folders_problem(tool, policy.write, writable, os.path.realpath)
            if problem:
                raise VerbEnvError(f"[verbs] tools names {name}: {problem}")


def tool_folders_problem(tool: Tool, written: tuple[str, ...], writable: Callable[[str], bool],
                         resolve: Callable[[str], str]) -> str:
    """Why the tool, which runs outside as the person, would read what a sandbox writing
    `written` (its [files] write; `writable` the mount plan's own test of a path) could
    put there, or "": its HOME, its working folder, a folder of its PATH or its program
    (found on that PATH, as the proxy starts it) in a written folder, each as named and as
    resolved; or a written dot folder of its HOME (`~/.local`, `~/.config`, `~/.npmrc`'s
    home: where runtimes read code and settings from, a `.pth` under the user site among
    them). A written folder below HOME that is no dot folder (a project) is fine."""
    import posixpath

    path_folders = [folder for folder in tool.environment.get("PATH", "").split(":")
                    if folder.startswith("/")]
    places = [("HOME", tool.home), ("working folder", tool.cwd),
              *(("PATH folder", folder) for folder in path_folders)]
    program = tool.command[0]
    if "/" in program:
        places.append(("program", program))
    else:
        for folder in path_folders:
            candidate = posixpath.join(folder, program)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                places.append(("program", candidate))
                break
    for what, place in places:
        for form in dict.fromkeys((place, resolve(place))):
            if writable(form):
                return (f"its {what} {place} is in a folder this sandbox writes: the tool "
                        "runs outside, as you, and would read what the sandbox put there; "
                        "add the tool again with another --home, --cwd or PATH, or do not "
                        "write it")
    homes = dict.fromkeys((tool.home.rstrip("/") or "/", resolve(tool.home)))
    for folder in written:
        for form in dict.fromkeys((folder, resolve(folder))):
            for home in homes:
                if form != home and form.startswith(home.rstrip("/") + "/") and \
                        form[len(home.rstrip("/")) + 1:].startswith("."):
                    return (f"this sandbox writes {folder}, a dot folder of the tool's HOME "
                            f"{tool.home}, where the runtimes a tool runs read code and "
                            "settings from (a .pth in the user site, an .npmrc): add the "
                            "tool again with another --home, or do not write it")
    return ""


TOOL_VARIABLE_NOTE = ("{names} named by a tool's definition (lnk-sandbox tool list): taken "
                      "out of the sandbox's environment; the tool gets its own from Link's "
                      "settings (tool add --secret)")


def without_tool_variables(env: Mapping[str, str], settings: str
                           ) -> tuple[dict[str, str], list[str]]:
    """`env` without every variable any tool's definition names for a token
    (lnk_proxy.tools: its secrets, the `${VAR}`s of its command), for every sandbox,
    whether its spec names a tool or not (a harness exported FAR_TOKEN for one tool: no
    sandbox holds it); and the line to say when the caller's environment held one (its
    names, never a value). VerbEnvError
    when a definition cannot be read: its variables would be unknown."""
    named = _indexed_tool_variables(settings)
    if named is None:
        # The index does not describe the definitions there (one kept by an older
        # lnk-sandbox, a write that did not finish): read them all, strictly (orjson, re:
        # ~16 ms a start, paid until `tool add` or `tool remove` writes the index again).
        from lnk_proxy.tools import ToolError, tool_variables

        try:
            named = tool_variables(settings)
        except ToolError as error:
            raise VerbEnvError(f"{error}: the variables it names cannot be kept out of the "
                               "sandbox; remove the tool or add it again") from None
    held = sorted(name for name in env if name in named)
    result = {name: value for name, value in env.items() if name not in named}
    return result, [TOOL_VARIABLE_NOTE.format(names=", ".join(held))] if held else []


# The tools' index is a line a tool; a machine has tens of tools at most.
MAX_TOOLS_INDEX_BYTES = 256 * 1024
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REGULAR = 0o100000
_FILE_TYPE = 0o170000


def _indexed_tool_variables(settings: str) -> frozenset[str] | None:
    """The variables the tools' index (lnk_common.secrets.TOOLS_INDEX) lists, when it
    describes exactly the definitions in the secrets folder (each `*.tool` a regular file
    of the inode, mtime and size the index wrote); frozenset() with none; None when it
    cannot say (the caller reads the definitions). With `os` alone: the start path takes
    neither `re` nor orjson (docs/decisions/0003-start-up-cost.md)."""
    try:
        folder = os.open(os.path.join(settings, "sandbox", "secrets"), _OPEN_FOLDER)
    except FileNotFoundError:
        return frozenset()
    except OSError:
        return None
    try:
        found: dict[str, tuple[int, int, int]] = {}
        for entry in os.listdir(folder):
            if entry.endswith(".tool"):
                info = os.stat(entry, dir_fd=folder, follow_symlinks=False)
                if info.st_mode & _FILE_TYPE != _REGULAR:
                    return None
                found[entry[:-len(".tool")]] = (info.st_ino, info.st_mtime_ns, info.st_size)
        if not found:
            return frozenset()
        fd = os.open("tools.index", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder)
        try:
            info = os.fstat(fd)
            if info.st_mode & _FILE_TYPE != _REGULAR or info.st_uid != os.geteuid() \
                    or info.st_mode & 0o7777 != 0o600:
                return None
            data = os.read(fd, MAX_TOOLS_INDEX_BYTES + 1)
        finally:
            os.close(fd)
    except OSError:
        return None
    finally:
        os.close(folder)
    if len(data) > MAX_TOOLS_INDEX_BYTES:
        return None
    named: set[str] = set()
    listed: dict[str, tuple[int, int, int]] = {}
    for line in data.decode("ascii", "replace").splitlines():
        fields = line.split("\t")
        if len(fields) != 5 or not all(field.isdigit() for field in fields[1:4]):
            return None
        listed[fields[0]] = (int(fields[1]), int(fields[2]), int(fields[3]))
        named.update(name for name in fields[4].split(",") if name)
    return frozenset(named) if listed == found else None


def sandbox_environment(env: Mapping[str, str], *, placeholders: Mapping[str, str],
                        url_secret: str, proxy_address: str, proxy_port: int
                        ) -> dict[str, str]:
    """The program's environment: ours replaced, the proxy's never there."""
    result = {name: value for name, value in env.items()
              if not name.startswith(_PREFIX) and name not in (*_OURS, *_PROXYS)}
    base = f"http://{proxy_address}:{proxy_port}/_link"
    if placeholders:
        from lnk_proxy.secret_rules import SecretRuleError, environment_variables

        try:
            variables = environment_variables(placeholders)
        except SecretRuleError as error:
            raise VerbEnvError(f"[verbs] secrets: {error.reason}") from None
        for name, (url_variable, placeholder_variable) in variables.items():
            result[url_variable] = f"{base}/secret/{name}"
            result[placeholder_variable] = placeholders[name]
    if url_secret:
        result["LNK_SANDBOX_URL"] = f"{base}/s/{url_secret}"
    return result


def proxy_environment(placeholders: Mapping[str, str], url_secret: str) -> dict[str, str]:
    """What the proxy is given beside the caller's environment."""
    given: dict[str, str] = {}
    if placeholders:
        given["LNK_SECRET_PLACEHOLDERS"] = "".join(
            f"{name}={value}\n" for name, value in placeholders.items())
    if url_secret:
        given["LNK_URL_SECRET"] = url_secret
    return given
