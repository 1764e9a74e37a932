"""The spec loader: one TOML file in, one resolved Policy out, or one SpecError.

Order of operations: read the bytes (missing, unreadable, not UTF-8 are errors) → parse
TOML → check every key against the schema table below (an unknown key, a wrong type or a
key whose feature is not built yet is an error: never ignored, never a default that
opens more) → expand and canonicalise every path once → check the relations between
paths (a reopen lies in a hidden folder, nothing is granted inside Link's settings …).

Every error names the file, the key and the reason, in one line. SpecError is the only
exception that leaves this module; anything else is a bug.

Inputs are explicit: the environment (HOME, LNK_HOME, XDG_CONFIG_HOME) is passed in, and
so may be the person's home folder `read_home` grants (else the password database's).
"""

from __future__ import annotations

import os
import pwd

from lnk_common import endpoints as endpoint_plan
from lnk_common.hostentry import (
    MAX_ENDPOINT_NAME_CHARACTERS,
    MAX_ENTRY_CHARACTERS,
    HostEntryError,
    normal_endpoint_entry,
    normal_host_entry,
)
from lnk_common.hostentry import (
    is_host_entry as _shaped_entry,
)
from lnk_common.policy import (
    DEFAULT_PAUSE,
    FIELDS,
    MAX_NAME_CHARACTERS,
    MODEL_PROVIDERS,
    NEEDS_A_WIRE,
    SECRET_NAME_CHARACTERS,
    Policy,
    is_name,
    is_secret_name,
)
from lnk_common.settings import SettingsError, settings_folder
from lnk_wrap.vendor import tomllib as toml

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = ["MAX_NAME_CHARACTERS", "SpecError", "commands_as_written", "is_host_entry", "is_name",
           "load_spec", "parse_document", "parse_spec"]

# A spec is a small hand-written file; anything larger is a mistake or an attack on the
# parser, and refusing it costs no real user anything.
MAX_SPEC_BYTES = 256 * 1024
# Each path is one mount and one Landlock rule in every sandbox start: a few hundred is
# far past any real policy and keeps start-up cost bounded.
MAX_PATHS_PER_KEY = 256
# A count (calls a minute, a pause's thresholds) past this is no limit at all.
MAX_COUNT = 1_000_000
# A pause's window: long enough for a burst, short enough that yesterday's refusals
# do not add up with today's.
MAX_WINDOW_SECONDS = 3600

class SpecError(Exception):
    """A spec that cannot run: `file: key: reason`."""

    def __init__(self, file: str, key: str, reason: str) -> None:
        self.file = file
        self.key = key
        self.reason = reason
        super().__init__(f"{file}: {key}: {reason}" if key else f"{file}: {reason}")


# The schema, default deny. Each section maps its keys to the kind of value they take;
# a section or key here with a string value instead is recognised but not built yet,
# and the string says where it will come from.
_PATH_LIST = "path list"
_STRING = "string"
_PATH = "path"
_STRING_LIST = "string list"
_COUNT = "count"
_PORT_LIST = "port list"
_BOOLEAN = "boolean"
_PROVIDERS = "providers"
_SECRET_NAMES = "secret names"  # noqa: S105  (a kind of value, not a secret)
_KINDS = (_PATH_LIST, _STRING, _PATH, _STRING_LIST, _COUNT, _PORT_LIST, _BOOLEAN, _PROVIDERS,
          _SECRET_NAMES)
# Secrets a spec names: each is a proxy verb with its own placeholder and rule; a handful
# is every real harness's (a bot, a tracker, a forge), and each costs the start a read.
MAX_SECRETS = 32

_SCHEMA: dict[str, dict[str, str] | str] = {
    "files": {
        "read": _PATH_LIST,
        "write": _PATH_LIST,
        "hide": _PATH_LIST,
        "reopen": _PATH_LIST,
        "write_dot_files": _PATH_LIST,
        "home": _PATH,
        "read_home": _BOOLEAN,
    },
    "agent": {"name": _STRING, "home": _PATH, "files": _PATH},
    "commands": {"run": _PATH_LIST},
    "network": {
        "mode": _STRING,
        "hosts": _STRING_LIST,
        "calls_per_minute": _COUNT,
        "server_tools": _BOOLEAN,
    },
    "tcp": {"endpoints": _STRING_LIST},
    "lan": {"hosts": _STRING_LIST},
    "localhost": {
        "ports": _PORT_LIST,
        "models": _PORT_LIST,
    },
    "verbs": {
        "model": _PROVIDERS,
        "open": _BOOLEAN,
        "tools": _SECRET_NAMES,
        "secrets": _SECRET_NAMES,
    },
    "pause": {"refusals": _COUNT, "targets": _COUNT, "window": _STRING},
}
_TOP_LEVEL: dict[str, str] = {"name": _STRING}


class _Context:
    """Where a spec came from: its file (for messages), folder (for relative paths), and
    the environment its `~` expands with."""

    __slots__ = ("env", "file", "folder", "person_home")

    def __init__(self, *, file: str, folder: str, env: Mapping[str, str],
                 person_home: str | None = None) -> None:
        self.file = file
        self.folder = folder
        self.env = env
        # `[files] read_home`'s folder; None: the running user's, from the password database.
        self.person_home = person_home


def load_spec(path: str | os.PathLike[str], env: Mapping[str, str], *,
              person_home: str | None = None) -> Policy:
    """Read the spec at `path` and resolve it, or raise SpecError. `person_home` is the
    folder `[files] read_home` grants; None (always, but in tests): the running user's
    home folder from the password database."""
    file = os.path.abspath(os.fspath(path))
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(file, "", "no such file") from None
    except IsADirectoryError:
        raise SpecError(file, "", "is a folder, not a spec file") from None
    except PermissionError:
        raise SpecError(file, "", "cannot be read (permission denied)") from None
    except OSError as error:
        raise SpecError(file, "", f"cannot be read ({error.strerror})") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(file, "", f"larger than {MAX_SPEC_BYTES} bytes; a spec is a short file")
    return parse_spec(data, file=file, env=env, person_home=person_home)


def commands_as_written(path: str, env: Mapping[str, str]) -> dict[str, str]:
    """`[commands] run` of the spec at `path` as its author wrote each entry, by the path
    it resolves to (the policy holds resolved paths: a listed /usr/bin/sh is
    /usr/bin/dash there), for `learn` to print the list back in the spec's own words.
    An entry that no longer resolves is left out; nothing here refuses the spec."""
    file = os.path.abspath(path)
    try:
        with open(file, "rb") as handle:
            document = toml.loads(handle.read(MAX_SPEC_BYTES + 1).decode("utf-8"))
    except (OSError, UnicodeDecodeError, toml.TOMLDecodeError, RecursionError):
        return {}
    section = document.get("commands")
    entries = section.get("run") if isinstance(section, dict) else None
    if not isinstance(entries, list):
        return {}
    context = _Context(file=file, folder=os.path.dirname(file), env=env)
    found: dict[str, str] = {}
    for raw in entries:
        if isinstance(raw, str):
            try:
                found.setdefault(_canonical(context, "commands.run", raw, must_exist=False), raw)
            except SpecError:
                continue
    return found


def parse_spec(data: bytes, *, file: str, env: Mapping[str, str],
               person_home: str | None = None) -> Policy:
    """Resolve spec bytes read from `file` (used for messages and relative paths)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(file, "", f"not UTF-8 (byte {error.start})") from None
    try:
        document = toml.loads(text)
    except toml.TOMLDecodeError as error:
        raise SpecError(file, "", f"not valid TOML: {error}") from None
    except RecursionError:
        raise SpecError(file, "", "not valid TOML: nested too deeply") from None
    context = _Context(file=file, folder=os.path.dirname(file), env=env, person_home=person_home)
    _check_schema(context, document)
    return _resolve(context, document)


def parse_document(document: dict[str, Any], *, file: str, env: Mapping[str, str]) -> Policy:
    """Resolve a spec already read as TOML: a guest's, kept in guests.toml with every
    path absolute (lnk_wrap.guests), checked and resolved as a spec file is."""
    context = _Context(file=file, folder=os.path.dirname(file), env=env)
    _check_schema(context, document)
    return _resolve(context, document)


def _check_schema(context: _Context, document: dict[str, Any]) -> None:
    for key, value in document.items():
        if key in _TOP_LEVEL:
            _check_type(context, key, value, _TOP_LEVEL[key])
            continue
        section = _SCHEMA.get(key)
        if section is None:
            known = ", ".join([*_TOP_LEVEL, *(f"[{name}]" for name in _SCHEMA)])
            raise SpecError(context.file, key, f"unknown key (known: {known})")
        if isinstance(section, str):
            raise SpecError(context.file, f"[{key}]", section)
        if not isinstance(value, dict):
            raise SpecError(context.file, key, f"must be a table ([{key}]), not {_kind(value)}")
        for inner, inner_value in value.items():
            dotted = f"{key}.{inner}"
            kind = section.get(inner)
            if kind is None:
                raise SpecError(
                    context.file, dotted, f"unknown key (known in [{key}]: {', '.join(section)})"
                )
            if kind not in _KINDS:
                raise SpecError(context.file, dotted, kind)
            _check_type(context, dotted, inner_value, kind)


def _check_type(context: _Context, key: str, value: object, kind: str) -> None:
    if kind == _BOOLEAN:
        if not isinstance(value, bool):
            raise SpecError(context.file, key, f"must be true or false, not {_kind(value)}")
        return
    if kind == _PROVIDERS:
        _check_providers(context, key, value)
        return
    if kind == _SECRET_NAMES:
        _check_secret_names(context, key, value)
        return
    if kind == _COUNT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(context.file, key, f"must be a whole number, not {_kind(value)}")
        if not 1 <= value <= MAX_COUNT:
            raise SpecError(context.file, key, f"must be between 1 and {MAX_COUNT}")
        return
    if kind in (_STRING, _PATH):
        if not isinstance(value, str):
            raise SpecError(context.file, key, f"must be a string, not {_kind(value)}")
        return
    if kind == _PORT_LIST:
        _check_ports(context, key, value)
        return
    if not isinstance(value, list):
        noun = "strings" if kind == _STRING_LIST else "paths"
        raise SpecError(context.file, key, f"must be a list of {noun}, not {_kind(value)}")
    if len(value) > MAX_PATHS_PER_KEY:
        raise SpecError(context.file, key, f"more than {MAX_PATHS_PER_KEY} paths")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise SpecError(
                context.file, f"{key}[{index}]", f"must be a path string, not {_kind(item)}"
            )


def _check_secret_names(context: _Context, key: str, value: object) -> None:
    """`[verbs] secrets` and `[verbs] tools`: names of Link's secrets or tools, each
    once (the same name rule: both are files of the store)."""
    noun, lister = (("tool", "lnk-sandbox tool list") if key.endswith("tools")
                    else ("secret", "lnk-sandbox secret list"))
    if not isinstance(value, list):
        raise SpecError(context.file, key,
                        f"must be a list of {noun}s' names, not {_kind(value)}")
    if not value:
        raise SpecError(context.file, key, f"an empty list turns nothing on; name {noun}s "
                                           f"({lister}), or drop the key")
    if len(value) > MAX_SECRETS:
        raise SpecError(context.file, key, f"more than {MAX_SECRETS} {noun}s")
    seen: set[str] = set()
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if not isinstance(item, str):
            raise SpecError(context.file, where, f"must be a {noun}'s name, not {_kind(item)}")
        if not is_secret_name(item):
            # The name is not repeated: a value pasted where a name belongs must not be.
            raise SpecError(context.file, where,
                            f"a {noun}'s name is 1 to {SECRET_NAME_CHARACTERS} ASCII letters, "
                            "digits, '-' or '_', starting with a letter or digit")
        if item in seen:
            raise SpecError(context.file, where, f"{item!r} is named twice")
        seen.add(item)


def _check_ports(context: _Context, key: str, value: object) -> None:
    if not isinstance(value, list):
        raise SpecError(context.file, key, f"must be a list of ports, not {_kind(value)}")
    if len(value) > MAX_PATHS_PER_KEY:
        raise SpecError(context.file, key, f"more than {MAX_PATHS_PER_KEY} ports")
    for index, item in enumerate(value):
        if item == "*":
            raise SpecError(
                context.file, f"{key}[{index}]",
                "\"*\" is refused: on this machine's loopback listen other sandboxes' "
                "proxies, each another agent's way out with its own hosts, keys and exit; "
                "every port would include them, so name the ports")
        if isinstance(item, bool) or not isinstance(item, int):
            raise SpecError(context.file, f"{key}[{index}]",
                            f"must be a port number, not {_kind(item)}")
        if not 1 <= item <= 65535:
            raise SpecError(context.file, f"{key}[{index}]", f"port {item}: 1 to 65535")


def _check_providers(context: _Context, key: str, value: object) -> None:
    """`[verbs] model`: one provider, or a list of them, each known and named once."""
    known = ", ".join(f'"{provider}"' for provider in MODEL_PROVIDERS)
    if isinstance(value, str):
        value = [value]
        where = [key]
    elif isinstance(value, list):
        if not value:
            raise SpecError(context.file, key,
                            f"an empty list turns nothing on; name providers ({known}), or "
                            "drop the key")
        where = [f"{key}[{index}]" for index in range(len(value))]
    else:
        raise SpecError(context.file, key,
                        f"must be a provider or a list of them, not {_kind(value)}")
    seen: set[str] = set()
    for item, item_key in zip(value, where, strict=True):
        if not isinstance(item, str):
            raise SpecError(context.file, item_key,
                            f"must be a provider's name, not {_kind(item)}")
        if item not in MODEL_PROVIDERS:
            raise SpecError(context.file, item_key,
                            f"{item!r} is not a provider the model verb knows ({known})")
        if item in seen:
            raise SpecError(context.file, item_key, f"{item!r} is named twice")
        seen.add(item)


def _kind(value: object) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def _expand(context: _Context, key: str, raw: str) -> str:
    """`~`, `~user`, relative-to-the-spec's-folder; absolute and normalised, not yet resolved."""
    if not raw:
        raise SpecError(context.file, key, "empty path")
    if "\0" in raw:
        raise SpecError(context.file, key, "path contains a NUL byte")
    if raw.startswith("~"):
        user, _, rest = raw[1:].partition("/")
        if user:
            try:
                base = pwd.getpwnam(user).pw_dir
            except KeyError:
                raise SpecError(context.file, key, f"{raw!r}: no user named {user!r}") from None
        else:
            base = context.env.get("HOME", "")
            if not base or not os.path.isabs(base):
                raise SpecError(context.file, key, f"{raw!r}: HOME is not set to an absolute path")
        return os.path.normpath(os.path.join(base, rest))
    if os.path.isabs(raw):
        return os.path.normpath(raw)
    joined = os.path.normpath(os.path.join(context.folder, raw))
    if not _inside(joined, context.folder):
        raise SpecError(
            context.file, key, f"{raw!r} leaves the spec's folder; write it as an absolute path"
        )
    return joined


def _canonical(context: _Context, key: str, raw: str, *, must_exist: bool) -> str:
    expanded = _expand(context, key, raw)
    try:
        resolved = os.path.realpath(expanded, strict=must_exist)
    except FileNotFoundError:
        raise SpecError(context.file, key, f"{raw!r} does not exist") from None
    except NotADirectoryError:
        raise SpecError(context.file, key, f"{raw!r}: a part of it is not a folder") from None
    except PermissionError:
        raise SpecError(
            context.file, key, f"{raw!r} cannot be reached (permission denied)"
        ) from None
    except OSError as error:
        raise SpecError(context.file, key, f"{raw!r}: {error.strerror}") from None
    if resolved == "/":
        raise SpecError(
            context.file, key, "the whole file system cannot be named; name the folders needed"
        )
    return resolved


def _own_home(context: _Context, key: str, raw: str, settings_root: str) -> str:
    """`[files] home`: a folder that is the program's HOME, written with its dot files
    (it is the sandbox's own: nothing of yours runs there), so never your own HOME nor a
    folder that holds it (grant that with `write`: then HOME stays yours)."""
    home = _canonical(context, key, raw, must_exist=True)
    if not os.path.isdir(home):
        raise SpecError(context.file, key, f"{raw!r} is not a folder")
    _refuse_settings(context, key, home, settings_root)
    yours = context.env.get("HOME", "")
    if yours and os.path.isabs(yours) and _inside(os.path.realpath(yours), home):
        raise SpecError(context.file, key,
                        f"{home} is, or holds, your own HOME, whose dot files run as you: "
                        "name a folder of the sandbox's own, or grant yours in files.write "
                        "(then HOME stays yours, its dot files held)")
    return home


def _read_home(context: _Context, settings_root: str) -> str:
    """`[files] read_home`: the person's home folder, read only, as if listed in `read`.
    The real one of the user running lnk-sandbox, from the password database: not HOME,
    which a harness may set to its own folder, nor `[files] home`, the sandbox's. What is
    closed inside it stays closed on both platforms (hides, Link's settings, the agents'
    folders, the machine's secrets), and what the policy gives inside it is given again:
    each is deeper, so mounted after it (Linux) or written after it (macOS)."""
    key = "files.read_home"
    home = context.person_home
    if home is None:
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            raise SpecError(context.file, key, f"user {os.getuid()} is not in the password "
                            "database, so has no home folder to read") from None
    if not os.path.isabs(home):
        raise SpecError(context.file, key,
                        f"the home folder {home!r} (password database) is not an absolute path")
    folder = _canonical(context, key, home, must_exist=True)
    if not os.path.isdir(folder):
        raise SpecError(context.file, key, f"the home folder {home!r} is not a folder")
    _refuse_settings(context, key, folder, settings_root)
    return folder


def _inside(path: str, folder: str) -> bool:
    """True when `path` is `folder` or lies below it (both canonical)."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _paths(context: _Context, section: dict[str, Any], section_name: str, key: str, *,
           must_exist: bool = True) -> list[str]:
    raw_list = section.get(key, [])
    found: list[str] = []
    for index, raw in enumerate(raw_list):
        path = _canonical(context, f"{section_name}.{key}[{index}]", raw, must_exist=must_exist)
        if path not in found:
            found.append(path)
    return found


def _refuse_settings(context: _Context, key: str, path: str, settings_root: str) -> None:
    if _inside(path, settings_root):
        raise SpecError(
            context.file, key,
            f"{path} lies in Link's settings folder, which no sandbox reads or writes",
        )


def _resolve(context: _Context, document: dict[str, Any]) -> Policy:
    """The spec's keys as one Policy: the files, then the programs, then the ways out,
    each part checked against the ones before it, then the ways out planned together."""
    try:
        settings = settings_folder(context.env)
    except SettingsError as error:
        raise SpecError(context.file, "", str(error)) from None
    name = document.get("name", "")
    if name and not is_name(name):
        raise SpecError(context.file, "name", f"{name!r}: use letters, digits, '.', '_' and '-'")
    agent: dict[str, Any] | None = document.get("agent")
    files = _files(context, document.get("files", {}), agent, settings.root)
    write = files["write"]
    assert isinstance(write, tuple)
    commands = _commands(context, document.get("commands"), write, settings.root)
    ways_out = _ways_out(context, document)
    agent_name = agent["name"] if agent is not None else ""
    policy = Policy(
        settings=settings.root,
        # The path the commands name it by, when links lie on it: the launcher judges each.
        settings_via=settings.named if settings.links else "",
        name=name or agent_name, spec=context.file, agent=agent_name, commands=commands,
        **files, **ways_out)
    _check_wire(context, policy)
    return policy


def _files(context: _Context, files: dict[str, Any], agent: dict[str, Any] | None,
           settings_root: str) -> dict[str, object]:
    """[files] and [agent]: the Policy's read (with the person's home folder when
    `read_home`), write, hide, reopen, write_dot_files and home, every path canonical and
    the relations between them checked."""
    read = _paths(context, files, "files", "read")
    write = _paths(context, files, "files", "write")
    hide = _paths(context, files, "files", "hide", must_exist=False)
    reopen = _paths(context, files, "files", "reopen")
    write_dot_files = _paths(context, files, "files", "write_dot_files")
    # Checked before the agent's own folder joins the grants: only that one folder,
    # exactly agents/NAME, may lie in Link's settings.
    for key, paths in (("files.read", read), ("files.write", write), ("files.reopen", reopen)):
        for path in paths:
            _refuse_settings(context, key, path, settings_root)
    if files.get("read_home", False):
        person_home = _read_home(context, settings_root)
        if person_home not in read:
            read.append(person_home)
    home = ""
    if "home" in files:
        home = _own_home(context, "files.home", files["home"], settings_root)
        write.append(home)
        if home not in write_dot_files:
            write_dot_files.append(home)
    if agent is not None and home:
        raise SpecError(context.file, "files.home",
                        "an [agent]'s HOME is its own folder ([agent] home): name it there")
    if agent is not None:
        home = _agent_folders(context, agent, settings_root, hide=hide, write=write,
                              write_dot_files=write_dot_files)
    read = [path for path in read if path not in write]
    for path in write_dot_files:
        if path not in write:
            raise SpecError(
                context.file, "files.write_dot_files",
                f"{path} is not a folder of files.write; name the written folder whose dot "
                "files the sandbox may write",
            )
    grants = read + write
    for path in reopen:
        if not any(_inside(path, hidden) and path != hidden for hidden in hide):
            raise SpecError(context.file, "files.reopen", f"{path} lies in no hidden folder")
        if not any(_inside(path, granted) for granted in grants):
            raise SpecError(
                context.file, "files.reopen",
                f"{path}: no read or write grant covers it, so reopening gives nothing back",
            )
    return {"read": tuple(read), "write": tuple(dict.fromkeys(write)),
            "hide": tuple(dict.fromkeys(hide)), "reopen": tuple(reopen),
            "write_dot_files": tuple(write_dot_files), "home": home}


def _agent_folders(context: _Context, agent: dict[str, Any], settings_root: str, *,
                   hide: list[str], write: list[str], write_dot_files: list[str]) -> str:
    """[agent]: every agent's folder hidden, its own written with its dot files (and its
    files folder written, its dot files held); returns its HOME, its own folder."""
    agent_name = agent.get("name", "")
    if not agent_name:
        raise SpecError(context.file, "agent.name", "an [agent] needs a name")
    if not is_name(agent_name):
        raise SpecError(
            context.file, "agent.name", f"{agent_name!r}: use letters, digits, '.', '_' and '-'"
        )
    # Every agent's folder is hidden, so an agent made later is hidden too; the
    # agent's own folder is reopened, writable (nothing of the person's runs there).
    agents = os.path.join(settings_root, "agents")
    hide.append(agents)
    if "home" in agent:
        agent_home = _canonical(context, "agent.home", agent["home"], must_exist=True)
        _refuse_settings(context, "agent.home", agent_home, settings_root)
    else:
        agent_home = _agent_own_folder(context, os.path.join(agents, agent_name))
    write.append(agent_home)
    # Its own folder holds only what its harness keeps, and a harness may commit a
    # workspace there: nothing of the person's runs from it, so its dot files are open.
    if agent_home not in write_dot_files:
        write_dot_files.append(agent_home)
    if "files" in agent:
        files_folder = _canonical(context, "agent.files", agent["files"], must_exist=True)
        _refuse_settings(context, "agent.files", files_folder, settings_root)
        # The files folder is the person's: they open it and may run git in it, so an
        # agent commits in a repository it makes inside, never at its top.
        if files_folder in write_dot_files:
            raise SpecError(
                context.file, "files.write_dot_files",
                f"{files_folder} is the agent's files folder, which is yours: its dot "
                "files stay read only (an agent commits in a repository it makes in a "
                "folder inside it)",
            )
        write.append(files_folder)
    return agent_home


def _agent_own_folder(context: _Context, folder: str) -> str:
    """agents/NAME in Link's settings: there, a folder, and not a link."""
    if not os.path.lexists(folder):
        raise SpecError(context.file, "agent.name", f"the agent's folder {folder} does not exist")
    if os.path.islink(folder) or os.path.realpath(folder) != folder:
        raise SpecError(context.file, "agent.name",
                        f"the agent's folder {folder} is a link; refusing")
    if not os.path.isdir(folder):
        raise SpecError(context.file, "agent.name",
                        f"the agent's folder {folder} is not a folder")
    return folder


def _commands(context: _Context, section: dict[str, Any] | None, write: tuple[str, ...],
              settings_root: str) -> tuple[str, ...]:
    """[commands] run: the programs that may start, none in a written folder."""
    if section is None:
        return ()
    if "run" not in section or not section["run"]:
        raise SpecError(
            context.file, "commands.run",
            "an empty list lets nothing start, not even the command; name the programs "
            "(files or folders), or drop [commands] to let any readable program start",
        )
    commands = _paths(context, section, "commands", "run")
    for path in commands:
        _refuse_settings(context, "commands.run", path, settings_root)
        holder = next((folder for folder in write if _inside(path, folder)), None)
        if holder is not None:
            raise SpecError(
                context.file, "commands.run",
                f"{path} lies in {holder}, which the sandbox writes: it could replace "
                "the program, so listing it would let anything run; list a copy "
                "outside the written folders",
            )
    return tuple(commands)


# Fields whose value is the spec's key as written (its type checked by the schema): each
# read at its row's spec key (lnk_common.policy.FIELDS).
_AS_WRITTEN = ("secrets", "tools", "open_pages", "calls_per_minute", "server_tools")


def _spec_key(name: str) -> str:
    """The spec key of the Policy's field `name` (its row of lnk_common.policy.FIELDS)."""
    return next(field.spec_key for field in FIELDS if field.name == name)


def _as_written(document: dict[str, Any], name: str) -> object:
    """The field `name` as the spec wrote it at its key, or the field's default."""
    section, _, key = _spec_key(name).partition(".")
    default = next(field.default for field in FIELDS if field.name == name)
    return (document.get(section) or {}).get(key, default)


def _ways_out(context: _Context, document: dict[str, Any]) -> dict[str, object]:
    """[network], [tcp], [lan], [localhost], [verbs] and [pause]: the Policy's network,
    its hosts, endpoints and ports, its verbs and the wire's controls."""
    network, hosts = _network(context, document.get("network"))
    model = (document.get("verbs") or {}).get("model", [])
    models = (model,) if isinstance(model, str) else tuple(model)
    endpoints = _entries(context, "tcp.endpoints",
                         (document.get("tcp") or {}).get("endpoints", []), lan=False)
    lan = _entries(context, "lan.hosts", (document.get("lan") or {}).get("hosts", []),
                   lan=True)
    localhost = document.get("localhost") or {}
    localhost_ports = tuple(dict.fromkeys(localhost.get("ports", [])))
    local_models = tuple(dict.fromkeys(localhost.get("models", [])))
    for index, port in enumerate(localhost.get("models", [])):
        if port in localhost_ports:
            raise SpecError(context.file, f"localhost.models[{index}]",
                            f"port {port} is in [localhost] ports too: a models port is "
                            "relayed through the inference filter, a plain port is not; "
                            "name it once")
    values = {name: _as_written(document, name) for name in _AS_WRITTEN}
    pause = _pause(context, document.get("pause"))
    if values["server_tools"] and not models:
        raise SpecError(context.file, "network.server_tools",
                        "keeps a hosted model's server-side tools, and no model verb is on: "
                        "name one in [verbs] model, or drop the key")
    if network == "host":
        _check_host(context, document)
    return {"network": network, "hosts": hosts, "endpoints": endpoints, "lan": lan,
            "localhost_ports": localhost_ports, "local_models": local_models,
            "models": models, "pause": pause, **values}


def _check_host(context: _Context, document: dict[str, Any]) -> None:
    """`mode = "host"` is this machine's network as it is, with no wire: whatever needs
    the sandbox's own network and its proxy is refused, naming the key, rather than
    quietly doing nothing."""
    needs_wire = [(_spec_key(name), _as_written(document, name)) for name in NEEDS_A_WIRE]
    needs_wire.append(("pause", document.get("pause")))
    for key, value in needs_wire:
        if value:
            raise SpecError(context.file, key,
                            "needs the sandbox's own network and its wire, and mode = "
                            "\"host\" has neither (the program reaches the network as it "
                            "is, unlogged): use mode = \"proxy\" or \"none\"")


def _check_wire(context: _Context, policy: Policy) -> None:
    """The ways out planned together: no two on one port inside, and calls a minute
    only where something goes out."""
    try:
        endpoint_plan.listeners(proxy=policy.has_proxy_port(), endpoints=policy.endpoints,
                                lan=policy.lan,
                                localhost_ports=(*policy.localhost_ports, *policy.local_models))
    except endpoint_plan.EndpointError as error:
        raise SpecError(context.file, "localhost.ports" if str(error).startswith("[localhost]")
                        else "tcp.endpoints", str(error)) from None
    if policy.calls_per_minute and not policy.has_wire():
        raise SpecError(context.file, "network.calls_per_minute",
                        "counts the calls that go out, and nothing goes out: set mode = "
                        "\"proxy\", or name [tcp] endpoints, [lan] hosts, [localhost] ports "
                        "or [verbs] model")


def _pause(context: _Context, section: dict[str, Any] | None) -> tuple[int, int, int]:
    """(refusals, distinct refused targets, window in seconds) that pause a wire."""
    if section is None:
        return DEFAULT_PAUSE
    refusals = section.get("refusals", DEFAULT_PAUSE[0])
    targets = section.get("targets", DEFAULT_PAUSE[1])
    window = DEFAULT_PAUSE[2]
    if "window" in section:
        import re

        match = re.fullmatch(r"([0-9]{1,6})(s|m)", section["window"])
        if match is None:
            raise SpecError(context.file, "pause.window",
                            f"{section['window']!r}: seconds or minutes, as \"60s\" or \"5m\"")
        window = int(match.group(1)) * (60 if match.group(2) == "m" else 1)
        if not 1 <= window <= MAX_WINDOW_SECONDS:
            raise SpecError(context.file, "pause.window",
                            f"must be between 1s and {MAX_WINDOW_SECONDS}s")
    return refusals, targets, window


def is_host_entry(text: str) -> bool:
    """Whether `text` is an entry `[network] hosts` takes as written (`learn` offers
    only such entries): the one rule, lnk_common.hostentry's."""
    return len(text) <= MAX_ENTRY_CHARACTERS and _shaped_entry(text)


def _network(context: _Context, section: dict[str, Any] | None) -> tuple[str, tuple[str, ...]]:
    if section is None:
        return "none", ()
    mode = section.get("mode", "none")
    if mode not in ("none", "proxy", "host"):
        raise SpecError(context.file, "network.mode",
                        f"{mode!r}: \"none\" (no network), \"proxy\" (the filtering proxy) "
                        "or \"host\" (this machine's network as it is)")
    hosts: list[str] = []
    for index, entry in enumerate(section.get("hosts", [])):
        key = f"network.hosts[{index}]"
        if mode != "proxy":
            raise SpecError(context.file, "network.hosts",
                            "hosts are reached through the proxy: set mode = \"proxy\"")
        try:  # the one rule, which `lnk-sandbox allow` reads too
            normalised = normal_host_entry(entry)
        except HostEntryError as error:
            raise SpecError(context.file, key, str(error)) from None
        if normalised not in hosts:
            hosts.append(normalised)
    if len(hosts) > MAX_PATHS_PER_KEY:
        raise SpecError(context.file, "network.hosts", f"more than {MAX_PATHS_PER_KEY} hosts")
    return mode, tuple(hosts)


def _entries(context: _Context, key: str, raw: object, *, lan: bool) -> tuple[str, ...]:
    """[tcp] endpoints (`name:port`, `*.domain:port`) or [lan] hosts (`address[:port]`,
    `[v6][:port]`, `name[:port]`), normalised; `*` refused, as in [network] hosts."""
    if not raw:
        return ()  # and no import of ipaddress (with lnk_proxy.decide, 2 ms) at every start
    import ipaddress

    from lnk_common.addresses import never_a_host

    assert isinstance(raw, list)
    found: list[str] = []
    for index, entry in enumerate(raw):
        where = f"{key}[{index}]"
        if not lan:
            try:  # the one rule, which `lnk-sandbox allow --tcp` reads too
                normal = normal_endpoint_entry(entry)
            except HostEntryError as error:
                raise SpecError(context.file, where, str(error)) from None
            if normal not in found:
                found.append(normal)
            continue
        text = entry.lower()
        if text in ("*", "*.") or text.startswith("*:"):
            raise SpecError(context.file, where,
                            "\"*\" is every host: the network itself, not a list; name "
                            "the hosts")
        try:
            host, port = endpoint_plan.split_host_port(text)
        except endpoint_plan.EndpointError as error:
            raise SpecError(context.file, where, str(error)) from None
        if port and (not port.isdigit() or not 1 <= int(port) <= 65535):
            raise SpecError(context.file, where, f"{entry!r}: the port must be 1 to 65535")
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = None
        if address is not None:
            # The proxy's own rule (lnk_proxy.decide.address_refusal refuses it at the
            # call too): refused here, at load, with the key.
            why = never_a_host(address)
            if why:
                raise SpecError(context.file, where,
                                f"{why}, not a machine of the local network")
            host = str(address)
            normal = (f"[{host}]" if address.version == 6 else host) + (f":{int(port)}"
                                                                         if port else "")
        else:
            if host.startswith("*."):
                raise SpecError(context.file, where,
                                f"{entry!r}: a [lan] host is one machine, not `*.domain`")
            if len(host) > MAX_ENDPOINT_NAME_CHARACTERS or not _shaped_entry(host) \
                    or host in ("localhost",):
                raise SpecError(context.file, where, f"{entry!r} is not a host name with :port")
            host = host.rstrip(".")
            normal = f"{host}:{int(port)}" if port else host
        if normal not in found:
            found.append(normal)
    return tuple(found)
