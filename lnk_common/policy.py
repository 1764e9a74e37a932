"""The resolved policy: what one sandbox may touch, with every path absolute and canonical.

A spec file is read once (lnk_wrap.spec) into a Policy. The Policy, not the file, is
what the emitted command line carries: `wrap` writes it as options of the launcher
(`to_argv`) and the launcher reads it back (`from_argv`), so a line kept by a harness
runs what the spec said when it was wrapped, not what the file says later.

The argv form is strict: every option is known, every path absolute, nothing repeated
that must not be, and anything else is a PolicyArgvError. It is written by our own wrap
step, but a person may type it too, so it is checked like any input.
"""

from __future__ import annotations

import posixpath

__all__ = ["DEFAULT_PAUSE", "MAX_NAME_CHARACTERS", "MODEL_PROVIDERS", "Policy",
           "PolicyArgvError", "is_name", "parse_pause", "split_argv"]


class PolicyArgvError(Exception):
    """The launcher's options do not describe a policy."""


_PATH_OPTIONS = ("--read", "--write", "--hide", "--reopen", "--write-dot-files", "--run")
_VALUE_OPTIONS = ("--settings", "--settings-via", "--name", "--agent", "--spec", "--learn",
                  "--home",
                  "--network", "--site-packages", "--calls-per-minute", "--pause")
_TEXT_LIST_OPTIONS = ("--host", "--endpoint", "--lan", "--localhost-port", "--model",
                      "--secret", "--local-model", "--tool")
NETWORK_MODES = ("none", "proxy", "host")
# The seed's loose thresholds for pausing a wire (docs/SPEC.md [pause]): refusals and
# distinct refused targets within a window of seconds. Patterns no normal work makes.
DEFAULT_PAUSE = (30, 20, 60)
_FLAG_OPTIONS = ("--keep-session", "--server-tools", "--open-pages")
# The hosted models `[verbs] model` may name: each is `/_link/model/<provider>/` on the
# proxy, its key the secret of the same name (lnk_common.secrets). The proxy's rules
# (lnk_proxy.model_rules.PROVIDER_HOSTS) know exactly these; a test holds them equal.
MODEL_PROVIDERS = ("anthropic", "openai", "gemini", "openrouter")


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
    endpoints: [tcp] endpoints (`name:port`, `*.domain:port`): plain TCP through the
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
    settings_via: the path the verbs name it by (LNK_HOME, XDG_CONFIG_HOME or HOME), set
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

    A plain slotted class rather than a dataclass: the launcher imports this at every
    sandbox start, and `dataclasses` alone cost 11-21 ms to import here. Its fields are
    __slots__, and every copy (`replace`, `with_name`, equality) goes over __slots__, so
    a field added there cannot be dropped by a copy (tests/test_policy.py holds that
    __init__ takes exactly the slots and that every one survives the argv form).
    """

    __slots__ = ("agent", "calls_per_minute", "commands", "endpoints", "hide", "home", "hosts",
                 "keep_session", "lan", "learn", "local_models", "localhost_ports", "models",
                 "name", "network", "open_pages", "pause", "read", "reopen", "secrets",
                 "server_tools",
                 "settings", "settings_via", "site_packages", "spec", "tools", "write",
                 "write_dot_files")

    def __init__(
        self,
        *,
        settings: str,
        settings_via: str = "",
        read: tuple[str, ...] = (),
        write: tuple[str, ...] = (),
        hide: tuple[str, ...] = (),
        reopen: tuple[str, ...] = (),
        write_dot_files: tuple[str, ...] = (),
        commands: tuple[str, ...] = (),
        learn: str = "",
        network: str = "none",
        hosts: tuple[str, ...] = (),
        endpoints: tuple[str, ...] = (),
        lan: tuple[str, ...] = (),
        localhost_ports: tuple[int, ...] = (),
        site_packages: str = "",
        calls_per_minute: int = 0,
        pause: tuple[int, int, int] = DEFAULT_PAUSE,
        name: str = "",
        spec: str = "",
        keep_session: bool = False,
        models: tuple[str, ...] = (),
        server_tools: bool = False,
        agent: str = "",
        secrets: tuple[str, ...] = (),
        local_models: tuple[int, ...] = (),
        tools: tuple[str, ...] = (),
        open_pages: bool = False,
        home: str = "",
    ) -> None:
        for path in (settings, *((settings_via,) if settings_via else ()), *read, *write,
                     *hide, *reopen, *write_dot_files, *commands,
                     *((learn,) if learn else ()), *((site_packages,) if site_packages else ()),
                     *((home,) if home else ())):
            if not path.startswith("/") or path.startswith("//") or "\0" in path:
                raise PolicyArgvError(f"not an absolute path: {path!r}")
            if _normalised(path) != path:
                raise PolicyArgvError(f"not a normalised path: {path!r}")
        for path in write_dot_files:
            if path not in write:
                raise PolicyArgvError(
                    f"--write-dot-files {path} is not a written folder (--write)"
                )
        if home and (home not in write or home not in write_dot_files):
            raise PolicyArgvError(f"--home {home} is not a written folder with its dot files "
                                  "(--write, --write-dot-files)")
        if network not in NETWORK_MODES:
            raise PolicyArgvError(f"--network {network!r}: one of {', '.join(NETWORK_MODES)}")
        if hosts and network != "proxy":
            raise PolicyArgvError("--host needs --network proxy")
        if network == "host" and (endpoints or lan or localhost_ports or models or secrets
                                  or local_models or tools or open_pages or calls_per_minute):
            raise PolicyArgvError("--network host has no wire: no verb, endpoint, [lan], "
                                  "[localhost] port or calls a minute")
        for host in (*hosts, *endpoints, *lan):
            if not host or host.startswith("-") or any(c.isspace() for c in host):
                raise PolicyArgvError(f"not a host: {host!r}")
        for port in localhost_ports:
            if not 1 <= port <= 65535:
                raise PolicyArgvError(f"--localhost-port {port}: 1 to 65535")
        for port in local_models:
            if not 1 <= port <= 65535:
                raise PolicyArgvError(f"--local-model {port}: 1 to 65535")
        if len(set(local_models)) != len(local_models) or set(local_models) & set(
                localhost_ports):
            raise PolicyArgvError("--local-model names a port twice, or one of "
                                  "--localhost-port")
        for secret in secrets:
            if not is_secret_name(secret):
                raise PolicyArgvError(f"--secret {secret!r}: a secret's name is ASCII "
                                      "letters, digits, '-' and '_'")
        if len(set(secrets)) != len(secrets):
            raise PolicyArgvError("--secret names a secret twice")
        for tool in tools:
            if not is_secret_name(tool):
                raise PolicyArgvError(f"--tool {tool!r}: a tool's name is ASCII letters, "
                                      "digits, '-' and '_'")
        if len(set(tools)) != len(tools):
            raise PolicyArgvError("--tool names a tool twice")
        for provider in models:
            if provider not in MODEL_PROVIDERS:
                raise PolicyArgvError(
                    f"--model {provider!r}: one of {', '.join(MODEL_PROVIDERS)}")
        if len(set(models)) != len(models):
            raise PolicyArgvError("--model names a provider twice")
        if server_tools and not models:
            raise PolicyArgvError("--server-tools needs --model: it keeps a hosted model's "
                                  "server-side tools")
        if name.startswith("-") or spec.startswith("-") or agent.startswith("-"):
            raise PolicyArgvError(
                f"a name or spec may not start with '-': {name or spec or agent!r}")
        if agent and not is_name(agent):
            raise PolicyArgvError(f"--agent {agent!r}: use letters, digits, '.', '_' and '-'")
        self.settings = settings
        self.settings_via = settings_via
        self.read = tuple(read)
        self.write = tuple(write)
        self.hide = tuple(hide)
        self.reopen = tuple(reopen)
        self.write_dot_files = tuple(write_dot_files)
        self.commands = tuple(commands)
        self.learn = learn
        self.network = network
        self.hosts = tuple(hosts)
        self.endpoints = tuple(endpoints)
        self.lan = tuple(lan)
        self.localhost_ports = tuple(localhost_ports)
        self.site_packages = site_packages
        if calls_per_minute < 0 or min(pause) < 1 or len(pause) != 3:
            raise PolicyArgvError("calls a minute and a pause's thresholds are positive")
        self.calls_per_minute = calls_per_minute
        self.pause = pause
        self.name = name
        self.spec = spec
        self.keep_session = keep_session
        self.models = tuple(models)
        self.server_tools = server_tools
        self.agent = agent
        self.secrets = tuple(secrets)
        self.local_models = tuple(local_models)
        self.tools = tuple(tools)
        self.open_pages = bool(open_pages)
        self.home = home

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
        unknown = changes.keys() - set(self.__slots__)
        if unknown:
            raise TypeError(f"Policy has no field {', '.join(sorted(unknown))}")
        fields: dict[str, object] = {field: getattr(self, field) for field in self.__slots__}
        fields.update(changes)
        return Policy(**fields)  # type: ignore[arg-type]

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
        argv = ["--settings", self.settings]
        if self.settings_via:
            argv += ["--settings-via", self.settings_via]
        if self.name:
            argv += ["--name", self.name]
        if self.agent:
            argv += ["--agent", self.agent]
        if self.spec:
            argv += ["--spec", self.spec]
        if self.learn:
            argv += ["--learn", self.learn]
        if self.home:
            argv += ["--home", self.home]
        if self.network != "none":
            argv += ["--network", self.network]
        for option, texts in (("--host", self.hosts), ("--endpoint", self.endpoints),
                              ("--lan", self.lan),
                              ("--localhost-port", tuple(map(str, self.localhost_ports))),
                              ("--model", self.models), ("--secret", self.secrets),
                              ("--local-model", tuple(map(str, self.local_models))),
                              ("--tool", self.tools)):
            for text in texts:
                argv += [option, text]
        if self.site_packages:
            argv += ["--site-packages", self.site_packages]
        if self.calls_per_minute:
            argv += ["--calls-per-minute", str(self.calls_per_minute)]
        if self.has_wire():
            argv += ["--pause", ",".join(str(value) for value in self.pause)]
        if self.server_tools:
            argv.append("--server-tools")
        if self.open_pages:
            argv.append("--open-pages")
        if self.keep_session:
            argv.append("--keep-session")
        for option, paths in (
            ("--read", self.read),
            ("--write", self.write),
            ("--hide", self.hide),
            ("--reopen", self.reopen),
            ("--write-dot-files", self.write_dot_files),
            ("--run", self.commands),
        ):
            for path in paths:
                argv += [option, path]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str]) -> Policy:
        lists: dict[str, list[str]] = {option: [] for option in
                                       (*_PATH_OPTIONS, *_TEXT_LIST_OPTIONS)}
        values: dict[str, str] = {}
        flags: set[str] = set()
        index = 0
        while index < len(argv):
            option = argv[index]
            if option in _FLAG_OPTIONS:
                if option in flags:
                    raise PolicyArgvError(f"{option} given twice")
                flags.add(option)
                index += 1
                continue
            if option not in (*_PATH_OPTIONS, *_VALUE_OPTIONS, *_TEXT_LIST_OPTIONS):
                raise PolicyArgvError(f"unknown option {option!r}")
            if index + 1 >= len(argv):
                raise PolicyArgvError(f"{option} needs a value")
            value = argv[index + 1]
            if option in lists:
                lists[option].append(value)
            elif option in values:
                raise PolicyArgvError(f"{option} given twice")
            else:
                values[option] = value
            index += 2
        if "--settings" not in values:
            raise PolicyArgvError(
                "--settings is required: Link's settings folder is hidden in every sandbox"
            )
        return cls(
            settings=values["--settings"],
            settings_via=values.get("--settings-via", ""),
            name=values.get("--name", ""),
            spec=values.get("--spec", ""),
            keep_session="--keep-session" in flags,
            agent=values.get("--agent", ""),
            models=tuple(lists["--model"]),
            secrets=tuple(lists["--secret"]),
            tools=tuple(lists["--tool"]),
            local_models=tuple(_port(text, "--local-model") for text in lists["--local-model"]),
            server_tools="--server-tools" in flags,
            open_pages="--open-pages" in flags,
            read=tuple(lists["--read"]),
            write=tuple(lists["--write"]),
            hide=tuple(lists["--hide"]),
            reopen=tuple(lists["--reopen"]),
            write_dot_files=tuple(lists["--write-dot-files"]),
            commands=tuple(lists["--run"]),
            learn=values.get("--learn", ""),
            home=values.get("--home", ""),
            network=values.get("--network", "none"),
            hosts=tuple(lists["--host"]),
            endpoints=tuple(lists["--endpoint"]),
            lan=tuple(lists["--lan"]),
            localhost_ports=tuple(_port(text, "--localhost-port")
                                  for text in lists["--localhost-port"]),
            site_packages=values.get("--site-packages", ""),
            calls_per_minute=_number(values.get("--calls-per-minute", "0")),
            pause=parse_pause(values["--pause"]) if "--pause" in values else DEFAULT_PAUSE,
        )


def _number(text: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise PolicyArgvError(f"not a count: {text!r}")
    return int(text)


def _port(text: str, option: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 65535:
        raise PolicyArgvError(f"{option} {text!r}: a port, 1 to 65535")
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
