"""The resolved policy: what one sandbox may touch, with every path absolute and canonical.

A spec file is read once (lnk_wrap.spec) into a Policy. The Policy, not the file, is
what the emitted command line carries: `wrap` writes it as options of the launcher
(`to_argv`) and the launcher reads it back (`from_argv`), so a line kept by a harness
runs what the spec said when it was wrapped, not what the file says later.

Every field is one row of FIELDS: its name, its kind of value, the spec key it comes
from, its check, and the helpers that take it. The Policy's slots, its checks, its argv
both ways and each helper's options (`helper_argv`, `parse_helper_argv`) are made from
that table, so a field is added in one row (and one annotation, for mypy; a test holds
the two equal). One spelling: a field's option is its name with `-` for `_`, and a
field of several values, given once per value, drops its final `s` (`hosts` → `--host`,
`commands` → `--command`, `open_pages` → `--open-pages`): `option_of`, held by a test.

The argv form is strict: every option is known, every path absolute, nothing repeated
that must not be, and anything else is a PolicyArgvError. It is written by our own wrap
step, but a person may type it too, so it is checked like any input.

A table of slotted rows, not dataclasses or an enum: the launcher imports this at
every sandbox start, and `dataclasses` alone cost 11-21 ms to import here
(docs/decisions/0003-start-up-cost.md).
"""

from __future__ import annotations

import posixpath

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["DEFAULT_PAUSE", "FIELDS", "HELPERS", "MAX_NAME_CHARACTERS", "MODEL_PROVIDERS",
           "NEEDS_A_WIRE", "NETWORK_MODES", "Field", "Policy", "PolicyArgvError",
           "helper_argv", "is_name", "is_secret_name", "option_of", "parse_helper_argv",
           "parse_pause", "split_argv"]


class PolicyArgvError(Exception):
    """The launcher's options do not describe a policy."""


NETWORK_MODES = ("none", "proxy", "host")
# The seed's loose thresholds for pausing a wire (docs/SPEC.md [pause]): refusals and
# distinct refused targets within a window of seconds. Patterns no normal work makes.
DEFAULT_PAUSE = (30, 20, 60)
# The hosted models `[verbs] model` may name: each is `/_link/model/<provider>/` on the
# proxy, its key the secret of the same name (lnk_common.secrets). The proxy's rules
# (lnk_proxy.model_rules.PROVIDER_HOSTS) know exactly these; a test holds them equal.
MODEL_PROVIDERS = ("anthropic", "openai", "gemini", "openrouter")
# A count (calls a minute, a pause's thresholds) is at most 9 digits on a line: past
# that it is no limit at all (the spec's own bound is lower).
MAX_COUNT_DIGITS = 9


# Names become file names in Link's settings (wires, agents): letters, digits, . _ -,
# never "." or "..", never a slash. (The regular expression [A-Za-z0-9_][A-Za-z0-9._-]{0,63},
# written out: `re` costs 6 ms of every start, and the rest of a spec needs it rarely.)
MAX_NAME_CHARACTERS = 64
_NAME_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NAME_REST = _NAME_FIRST | frozenset(".-")


def is_name(text: str) -> bool:
    """Whether `text` may name a wire or an agent (a file name in Link's settings)."""
    return (0 < len(text) <= MAX_NAME_CHARACTERS and text[0] in _NAME_FIRST
            and all(character in _NAME_REST for character in text))



# The kinds of value a field holds: each has its default, its one reading from the words
# of a line and its one writing back, and its check (_check_kind).
PATH = "path"  # one absolute, normalised path; "" for none
PATHS = "paths"  # absolute, normalised paths, in order
WORD = "word"  # one word (a name, a mode); "" for none
WORDS = "words"  # words (hosts, providers, names), in order
PORTS = "ports"  # TCP ports, 1 to 65535, in order
COUNT = "count"  # a whole number; 0 for none
FLAG = "flag"  # on when given, written without a value
PAUSE = "pause"  # (refusals, targets, window seconds), `R,T,W` on a line
_SEVERAL = (PATHS, WORDS, PORTS)
_DEFAULTS: dict[str, object] = {PATH: "", PATHS: (), WORD: "", WORDS: (), PORTS: (), COUNT: 0,
                                FLAG: False, PAUSE: DEFAULT_PAUSE}
# The helpers that take fields of the policy as options (the launcher takes them all:
# its line is the whole policy). Each parses exactly its fields' options, by this table.
HELPERS = ("proxy", "relay", "watch", "dns")
MAX_PORT = 65535


def option_of(name: str, kind: str) -> str:
    """The one spelling: the field's name with `-` for `_`, and a field of
    several values, whose option is given once per value, without its final `s`."""
    return "--" + (name.removesuffix("s") if kind in _SEVERAL else name).replace("_", "-")


class Field:
    """One row of the policy's table. `spec_key`: the spec's key it comes from ("" for
    what the wrap step finds, not the spec). `check`: what the value must be beyond its
    kind (a PolicyArgvError in one line). `helpers`: which of HELPERS take it.
    `written`: when it is on a line ("" when not its default; "wire" when the policy has
    a wire)."""

    __slots__ = ("check", "default", "helpers", "kind", "name", "option", "spec_key",
                 "written")

    def __init__(self, name: str, kind: str, spec_key: str, helpers: tuple[str, ...] = (),
                 check: Callable[[Field, object], None] | None = None, *,
                 default: object = None, written: str = "") -> None:
        self.name = name
        self.kind = kind
        self.spec_key = spec_key
        self.helpers = helpers
        self.check = check
        self.default = _DEFAULTS[kind] if default is None else default
        self.option = option_of(name, kind)
        self.written = written

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.kind!r}, {self.spec_key!r})"


# -- the fields' own checks (each sees its value, already of its kind) ------------------


def _not_an_option(field: Field, value: object) -> None:
    """A word that could not split back from the command after `--` on the line."""
    assert isinstance(value, str)
    if value.startswith("-"):
        raise PolicyArgvError(f"a name or spec may not start with '-': {value!r}")


def _agent_name(field: Field, value: object) -> None:
    _not_an_option(field, value)
    assert isinstance(value, str)
    if value and not is_name(value):
        raise PolicyArgvError(f"{field.option} {value!r}: use letters, digits, '.', '_' and '-'")


def _network_mode(field: Field, value: object) -> None:
    if value not in NETWORK_MODES:
        raise PolicyArgvError(f"{field.option} {value!r}: one of {', '.join(NETWORK_MODES)}")


def _host_words(field: Field, value: object) -> None:
    """A host, endpoint or [lan] entry: a word the proxy's rules read (lnk_proxy.decide);
    the spec loader has checked its shape and its addresses already."""
    assert isinstance(value, tuple)
    for host in value:
        if not host or host.startswith("-") or any(c.isspace() for c in host):
            raise PolicyArgvError(f"not a host: {host!r}")


def _each_once(noun: str) -> Callable[[Field, object], None]:
    def check(field: Field, value: object) -> None:
        assert isinstance(value, tuple)
        if len(set(value)) != len(value):
            raise PolicyArgvError(f"{field.option} names a {noun} twice")
    return check


def _store_names(noun: str) -> Callable[[Field, object], None]:
    """`[verbs] secrets` and `tools`: names of files of Link's store, each once."""
    twice = _each_once(noun)

    def check(field: Field, value: object) -> None:
        assert isinstance(value, tuple)
        for name in value:
            if not is_secret_name(name):
                raise PolicyArgvError(f"{field.option} {name!r}: a {noun}'s name is ASCII "
                                      "letters, digits, '-' and '_'")
        twice(field, value)
    return check


def _providers(field: Field, value: object) -> None:
    assert isinstance(value, tuple)
    for provider in value:
        if provider not in MODEL_PROVIDERS:
            raise PolicyArgvError(
                f"{field.option} {provider!r}: one of {', '.join(MODEL_PROVIDERS)}")
    _each_once("provider")(field, value)


def _required(field: Field, value: object) -> None:
    """Link's settings folder, hidden in every sandbox: never none."""
    if not value:
        raise PolicyArgvError(f"not an absolute path: {value!r}")


# The table. Its order is the order of a line's options.
FIELDS = (
    Field("settings", PATH, "", ("proxy", "relay", "watch"), _required),
    Field("settings_via", PATH, ""),
    Field("name", WORD, "name", check=_not_an_option),
    Field("agent", WORD, "agent.name", check=_agent_name),
    Field("spec", WORD, "", ("watch",), _not_an_option),
    Field("learn", PATH, "", ("watch",)),
    Field("home", PATH, "files.home"),
    Field("network", WORD, "network.mode", ("watch", "dns"), _network_mode, default="none"),
    Field("hosts", WORDS, "network.hosts", ("proxy",), _host_words),
    Field("endpoints", WORDS, "tcp.endpoints", ("proxy", "dns"), _host_words),
    Field("lan", WORDS, "lan.hosts", ("proxy", "dns"), _host_words),
    Field("localhost_ports", PORTS, "localhost.ports", ("dns",)),
    Field("models", WORDS, "verbs.model", ("proxy",), _providers),
    Field("secrets", WORDS, "verbs.secrets", ("proxy",), _store_names("secret")),
    Field("local_models", PORTS, "localhost.models", ("proxy", "relay"), _each_once("port")),
    Field("tools", WORDS, "verbs.tools", ("proxy",), _store_names("tool")),
    Field("site_packages", PATH, ""),
    Field("calls_per_minute", COUNT, "network.calls_per_minute", ("proxy", "relay")),
    Field("pause", PAUSE, "pause", ("proxy", "relay"), written="wire"),
    Field("server_tools", FLAG, "network.server_tools", ("proxy", "relay")),
    Field("open_pages", FLAG, "verbs.open", ("proxy",)),
    Field("keep_session", FLAG, ""),
    Field("read", PATHS, "files.read"),
    Field("write", PATHS, "files.write", ("watch",)),
    Field("hide", PATHS, "files.hide"),
    Field("reopen", PATHS, "files.reopen"),
    Field("write_dot_files", PATHS, "files.write_dot_files"),
    Field("commands", PATHS, "commands.run", ("watch",)),
)
_BY_NAME = {field.name: field for field in FIELDS}
_BY_OPTION = {field.option: field for field in FIELDS}


def _check_kind(field: Field, value: object) -> object:
    """`value` as the field holds it (a list becomes a tuple), or PolicyArgvError; a
    value of another type is a bug of the caller's (TypeError), never a policy."""
    kind = field.kind
    if kind in _SEVERAL:
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"Policy.{field.name} is a tuple, not {type(value).__name__}")
        items = tuple(value)
        for item in items:
            _check_one(field, kind, item)
        return items
    if kind == FLAG:
        if not isinstance(value, bool):
            raise TypeError(f"Policy.{field.name} is a bool, not {type(value).__name__}")
        return value
    if kind == PAUSE:
        if not (isinstance(value, tuple) and len(value) == 3
                and all(type(part) is int for part in value)):
            raise TypeError(f"Policy.{field.name} is three whole numbers, not {value!r}")
        if min(value) < 1:
            raise PolicyArgvError("calls a minute and a pause's thresholds are positive")
        return value
    _check_one(field, kind, value)
    return value


def _check_one(field: Field, kind: str, value: object) -> None:
    if kind in (PORTS, COUNT):
        if type(value) is not int:
            raise TypeError(f"Policy.{field.name} holds whole numbers, not {value!r}")
        if kind == PORTS and not 1 <= value <= MAX_PORT:
            raise PolicyArgvError(f"{field.option} {value}: 1 to {MAX_PORT}")
        if kind == COUNT and value < 0:
            raise PolicyArgvError("calls a minute and a pause's thresholds are positive")
        return
    if not isinstance(value, str):
        raise TypeError(f"Policy.{field.name} holds text, not {type(value).__name__}")
    if kind == PATHS or (kind == PATH and value):  # a PATH of "" is none, as its default
        if not value.startswith("/") or value.startswith("//") or "\0" in value:
            raise PolicyArgvError(f"not an absolute path: {value!r}")
        if _normalised(value) != value:
            raise PolicyArgvError(f"not a normalised path: {value!r}")


def _checked(field: Field, value: object) -> object:
    value = _check_kind(field, value)
    if field.check is not None:
        field.check(field, value)
    return value


# -- the relations between fields (each a reason in one line, or "") ---------------------


def _dot_files_written(policy: Policy) -> str:
    outside = [path for path in policy.write_dot_files if path not in policy.write]
    return (f"--write-dot-file {outside[0]} is not a written folder (--write)"
            if outside else "")


def _home_written(policy: Policy) -> str:
    home = policy.home
    if home and (home not in policy.write or home not in policy.write_dot_files):
        return (f"--home {home} is not a written folder with its dot files "
                "(--write, --write-dot-file)")
    return ""


def _hosts_need_the_proxy(policy: Policy) -> str:
    return "--host needs --network proxy" if policy.hosts and policy.network != "proxy" else ""


# The fields that need the sandbox's own network and its wire: refused with network
# "host" (here, and by the spec loader at their spec keys, in this order).
NEEDS_A_WIRE = ("models", "secrets", "tools", "open_pages", "endpoints", "lan",
                "localhost_ports", "local_models", "calls_per_minute")


def _host_network_has_no_wire(policy: Policy) -> str:
    if policy.network == "host" and any(getattr(policy, name) for name in NEEDS_A_WIRE):
        return ("--network host has no wire: no verb, endpoint, [lan], [localhost] port or "
                "calls a minute")
    return ""


def _model_ports_apart(policy: Policy) -> str:
    if set(policy.local_models) & set(policy.localhost_ports):
        return "--local-model names a port twice, or one of --localhost-port"
    return ""


def _server_tools_need_a_model(policy: Policy) -> str:
    if policy.server_tools and not policy.models:
        return "--server-tools needs --model: it keeps a hosted model's server-side tools"
    return ""


_RELATIONS = (_dot_files_written, _home_written, _hosts_need_the_proxy,
              _host_network_has_no_wire, _model_ports_apart, _server_tools_need_a_model)


class Policy:
    """Everything the launcher needs to build one sandbox.

    read/write: trees granted (write implies read). hide: closed whatever else is open.
    reopen: paths inside a hidden folder given back the access their grant gives.
    write_dot_files: folders of `write` whose top-level dot files (.git, .envrc, hooks …)
    stay writable; every other written folder has them held read only (lnk_wrap.dotfiles).
    commands: the files and folders of [commands] run; when any, only those (and the
    loader) may start, and the exec watch names what is refused. Empty: any readable
    program may start.
    network: "none" (no network at all), "proxy" (the filtering proxy is the one way
    out) or "host" (this machine's network as it is: no wire, so no verb; every other
    protection in force, unix sockets by name refused; `stop` ends such a sandbox,
    lnk_wrap.launch); hosts: the names (`name`, `*.domain`, with `:port` or not) the
    proxy lets by.
    endpoints: [tcp] endpoints (`name:port`, `*.domain:port`): TCP through the
    proxy, reached by name through the sandbox's own DNS (lnk_common.endpoints).
    lan: [lan] hosts (`address:port`, `name:port`, or either alone for 80 and 443):
    machines of the local network, through the proxy. localhost_ports: this machine's
    loopback ports relayed in (lnk-sandbox-relay).
    calls_per_minute: the wire's limit of calls in any minute (0: none).
    pause: (refusals, distinct refused targets, window seconds) that pause the wire.
    site_packages: where the proxy's libraries (h11) are installed, found by the wrap
    step (the helpers run isolated, with only our own packages on their path).
    learn: `lnk-sandbox learn` only: where the exec watch records every program run
    (a file in Link's settings), with every program open.
    settings: Link's settings folder (its real path), hidden in every sandbox.
    settings_via: the path the commands name it by (LNK_HOME, XDG_CONFIG_HOME or HOME), set
    only when links lie on it: the launcher refuses a run that could replace one (F6).
    home: the program's HOME, a folder of `write` and `write_dot_files` ([agent]'s own
    folder, or [files] home); "" lets the launcher choose (lnk_wrap.home): the caller's
    when the sandbox writes it, else one made for the wire in Link's settings, or, for
    a run of no named wire, one in the sandbox's private /tmp that ends with it.
    spec: the file it came from, for messages only. keep_session: a guest's terminal (no
    --new-session).
    models: the hosted models of `[verbs] model` (MODEL_PROVIDERS, each once): the proxy
    runs for them even with network "none", and the program's environment points each
    provider's SDK at `/_link/model/<provider>` with a placeholder for its key.
    server_tools: `[network] server_tools`: a hosted model's server-side tools are kept
    (only with models). agent: the [agent]'s name ("" for any other spec): its model
    placeholder is kept across runs (lnk_wrap.model_env).
    secrets: `[verbs] secrets`: the secrets of Link's store the program reaches through
    `/_link/secret/<name>/` (each with its rule), holding a placeholder for each.
    tools: `[verbs] tools`: tools that run outside (lnk_proxy.tools), reached through
    `/_link/s/<secret>/mcp/<name>`.
    open_pages: `[verbs] open`: the program may ask to open a page in the person's browser
    (`/_link/s/<secret>/open`, asked every time; `$BROWSER` and `xdg-open` inside lead
    there), and a login's callback to a loopback port comes back in.
    local_models: `[localhost] models`: this machine's loopback ports of local model
    runtimes, relayed in through the inference filter (and reached as
    `/_link/s/<secret>/local/<port>` too).

    Made from FIELDS: __slots__, the constructor's checks, equality, `replace` and the
    argv form all go over the table, so a field added there cannot be dropped by a copy
    (tests/test_policy.py holds that every row survives spec → Policy → argv → Policy).
    The annotations below are the fields' types for mypy, held equal to the table.
    """

    __slots__ = tuple(field.name for field in FIELDS)
    settings: str
    settings_via: str
    name: str
    agent: str
    spec: str
    learn: str
    home: str
    network: str
    hosts: tuple[str, ...]
    endpoints: tuple[str, ...]
    lan: tuple[str, ...]
    localhost_ports: tuple[int, ...]
    models: tuple[str, ...]
    secrets: tuple[str, ...]
    local_models: tuple[int, ...]
    tools: tuple[str, ...]
    site_packages: str
    calls_per_minute: int
    pause: tuple[int, int, int]
    server_tools: bool
    open_pages: bool
    keep_session: bool
    read: tuple[str, ...]
    write: tuple[str, ...]
    hide: tuple[str, ...]
    reopen: tuple[str, ...]
    write_dot_files: tuple[str, ...]
    commands: tuple[str, ...]

    def __init__(self, **values: object) -> None:
        """Every field by name (`settings` is required, every other has its default),
        each checked by its row, then the relations between them."""
        unknown = values.keys() - _BY_NAME.keys()
        if unknown:
            raise TypeError(f"Policy has no field {', '.join(sorted(unknown))}")
        if "settings" not in values:
            raise TypeError("Policy needs settings: Link's settings folder")
        for field in FIELDS:
            setattr(self, field.name, _checked(field, values.get(field.name, field.default)))
        for relation in _RELATIONS:
            problem = relation(self)
            if problem:
                raise PolicyArgvError(problem)

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, field) for field in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "Policy(" + ", ".join(f"{field}={getattr(self, field)!r}"
                                     for field in self.__slots__) + ")"

    def replace(self, **changes: object) -> Policy:
        """A copy with `changes`, checked as any new Policy is; every other field kept."""
        fields: dict[str, object] = {field: getattr(self, field) for field in self.__slots__}
        fields.update(changes)
        return Policy(**fields)

    def with_name(self, name: str) -> Policy:
        return self.replace(name=name)

    def has_wire(self) -> bool:
        """Whether anything goes out: the proxy, endpoints, [lan] or [localhost] ports
        (each call on the wire's log, under its controls)."""
        return self.needs_proxy() or bool(self.localhost_ports)

    def needs_proxy(self) -> bool:
        """Whether lnk-sandbox-proxy runs: for its port, endpoints or [lan]."""
        return self.has_proxy_port() or bool(self.endpoints or self.lan)

    def has_proxy_port(self) -> bool:
        """Whether the proxy's port is made inside: for the proxy variables, and for the
        verbs, which it serves even with network "none"."""
        return self.network == "proxy" or bool(self.models or self.secrets
                                               or self.has_url_secret())

    def has_url_secret(self) -> bool:
        """Whether the program gets a URL secret (`/_link/s/<secret>/…`): for [localhost]
        models, [verbs] tools and [verbs] open."""
        return bool(self.local_models or self.tools or self.open_pages)

    def with_site_packages(self, folder: str) -> Policy:
        return self.replace(site_packages=folder)

    def to_argv(self) -> list[str]:
        """The launcher's options: every field not at its default, in the table's order."""
        return _written(self, FIELDS)

    @classmethod
    def from_argv(cls, argv: list[str]) -> Policy:
        words = _words(argv, FIELDS)
        if not words["--settings"]:
            raise PolicyArgvError(
                "--settings is required: Link's settings folder is hidden in every sandbox")
        return cls(**{field.name: _typed(field, words[field.option]) for field in FIELDS})


# -- the argv form, both ways, for the launcher and for each helper ----------------------


def _written(policy: Policy, fields: tuple[Field, ...]) -> list[str]:
    argv: list[str] = []
    for field in fields:
        value = getattr(policy, field.name)
        if not (policy.has_wire() if field.written == "wire" else value != field.default):
            continue
        if field.kind == FLAG:
            argv.append(field.option)
        elif field.kind in _SEVERAL:
            for item in value:
                argv += [field.option, str(item)]
        elif field.kind == PAUSE:
            argv += [field.option, ",".join(str(part) for part in value)]
        else:
            argv += [field.option, str(value)]
    return argv


def _words(argv: list[str], fields: tuple[Field, ...], own: tuple[str, ...] = ()
           ) -> dict[str, list[str]]:
    """Each option's words, in order (a flag given is ["yes"]): an unknown option, a
    missing value, a flag or single value given twice is a PolicyArgvError."""
    by_option = {field.option: field for field in fields}
    found: dict[str, list[str]] = {option: [] for option in (*by_option, *own)}
    index = 0
    while index < len(argv):
        option = argv[index]
        if option not in found:
            raise PolicyArgvError(f"unknown option {option!r}")
        field = by_option.get(option)
        single = field is not None and field.kind not in _SEVERAL
        if single and found[option]:
            raise PolicyArgvError(f"{option} given twice")
        if field is not None and field.kind == FLAG:
            found[option].append("yes")
            index += 1
            continue
        if index + 1 >= len(argv):
            raise PolicyArgvError(f"{option} needs a value")
        found[option].append(argv[index + 1])
        index += 2
    return found


def _typed(field: Field, words: list[str]) -> object:
    """A field's value from its words on a line (none: its default)."""
    if not words:
        return field.default
    kind = field.kind
    if kind == FLAG:
        return True
    if kind == PORTS:
        return tuple(_port(word, field.option) for word in words)
    if kind in _SEVERAL:
        return tuple(words)
    if kind == COUNT:
        return _number(words[0])
    if kind == PAUSE:
        return parse_pause(words[0])
    return words[0]


def helper_argv(policy: Policy, helper: str) -> list[str]:
    """The options of `helper` (one of HELPERS) that carry its fields of `policy`."""
    return _written(policy, tuple(field for field in FIELDS if helper in field.helpers))


def parse_helper_argv(helper: str, argv: list[str], own: tuple[str, ...] = ()
                      ) -> dict[str, list[str]]:
    """A helper's options: exactly its fields' (each read and checked by its row) and
    its `own` (each takes a value and may repeat; the helper checks them), by option;
    anything else is a PolicyArgvError."""
    fields = tuple(field for field in FIELDS if helper in field.helpers)
    words = _words(argv, fields, own)
    for field in fields:
        if words[field.option]:
            _checked(field, _typed(field, words[field.option]))
    return words


def _number(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > MAX_COUNT_DIGITS:
        raise PolicyArgvError(f"not a count: {text!r}")
    return int(text)


def _port(text: str, option: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_PORT:
        raise PolicyArgvError(f"{option} {text!r}: a port, 1 to {MAX_PORT}")
    return int(text)


# A secret's name as Link's store takes it (lnk_common.secrets: letters, digits, '-' and
# '_', starting with a letter or digit, at most SECRET_NAME_CHARACTERS), written out
# here: the store's module imports `re`, which this start-path module does not.
SECRET_NAME_CHARACTERS = 32
_SECRET_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_SECRET_REST = _SECRET_FIRST | frozenset("-_")


def is_secret_name(text: str) -> bool:
    return (0 < len(text) <= SECRET_NAME_CHARACTERS and text[0] in _SECRET_FIRST
            and all(character in _SECRET_REST for character in text))


def parse_pause(text: str) -> tuple[int, int, int]:
    """`REFUSALS,TARGETS,WINDOW-SECONDS`, as the launcher and the proxy take it."""
    parts = text.split(",")
    if len(parts) != 3:
        raise PolicyArgvError(f"--pause REFUSALS,TARGETS,WINDOW-SECONDS, not {text!r}")
    refusals, targets, window = (_number(part) for part in parts)
    return refusals, targets, window


def _normalised(path: str) -> str:
    return "/" if path == "/" else posixpath.normpath(path)


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `OPTIONS -- COMMAND…` at the first `--`; the command must not be empty."""
    try:
        cut = argv.index("--")
    except ValueError:
        raise PolicyArgvError("expected OPTIONS -- COMMAND [ARG…]") from None
    command = argv[cut + 1 :]
    if not command:
        raise PolicyArgvError("no command after --")
    return argv[:cut], command
