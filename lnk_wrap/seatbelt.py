"""sans IO: the macOS Seatbelt profile of a Policy, and the `sandbox-exec` line that runs it.

Job: the same resolved Policy the Linux backend reads (lnk_common.policy) in, the profile
text and its parameters out (`profile()`), then `sandbox_exec_argv()`:
`/usr/bin/sandbox-exec -p PROFILE -DNAME=value… -- COMMAND…`. No file is looked at and no
environment variable read here, so the whole profile is golden-tested (tests/test_macos.py).
Nothing here has run on a Mac: what is proven here is in docs/decisions/0042-macos-seatbelt.md.

Trust: every path of the policy enters the profile only as `(param "NAME")`, its value
given with `-DNAME=value`, so a path holding a quote or a parenthesis cannot change the
profile; the profile's own text is made only from this module's constants, checked
integers (ports) and parameter names. A path is written as the Mac resolves it (`/tmp`
is `/private/tmp`, also `/var` and `/etc`: mac_path), and one longer than the Mac's
PATH_MAX is refused. What has no Mac equivalent (`[tcp] endpoints`) is refused with the
reason, as a MacosError; nothing is dropped silently.

Order of the profile, and why (Seatbelt: the last rule that matches decides; nothing
matching is the default, denied):
1. `(deny default)`, then what any program needs to start (the base: sysctls, a few mach
   services, terminals, /dev/null), each named from a peer's public profile (the docs
   cite them); the programs [commands] lists (or every one, reported, for `learn`).
2. The policy's tree, shallow before deep, as the Linux backend's deepest entry decides
   (lnk_wrap.bwrap.access_at): the system folders and grants, a hide after the grants
   above it ("the deny follows read-home"), what is inside a hide (a reopen, the agent's
   own folder) after it; at the top of each written folder whose dot files are not
   opened, the dot files of lnk_wrap.dotfiles.TOP_NAMES read only, there or missing;
   then the machine's secrets (MAC_SYSTEM_SECRETS), closed whatever the spec grants.
3. The folders above every grant may be looked at (stat, not listed), as on Linux, where
   the mounts make them; the folders between a written folder and what is narrowed in
   it may not be renamed (the bwrap plan pins them for the same reason).
4. The network: none; the proxy's one port on the Mac's loopback; `[localhost] ports`.
5. Last, so that no rule above can open them: the Keychain's mach services denied.
"""

from __future__ import annotations

import posixpath
import re

from lnk_common.policy import Policy
from lnk_wrap.dotfiles import TOP_NAMES

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["KEYCHAIN_SERVICES", "MAC_SYSTEM_FOLDERS", "MAC_SYSTEM_SECRETS", "MAX_LITERAL_BYTES",
           "MAX_MAC_PATH_BYTES", "SANDBOX_EXEC", "Command", "MacosError", "Parameter", "Profile",
           "ProfileText", "mac_path", "profile", "sandbox_exec_argv"]

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
# The profile compiler refuses a string literal over 1,025 bytes ("Error reading string",
# reported by Anthropic's sandbox-runtime, src/sandbox/macos-sandbox-utils.ts); ours are
# short constants, held under this by a test.
MAX_LITERAL_BYTES = 1024
# A string literal of the profile (`"…"` or `#"…"`): no quote or backslash is in ours.
_LITERAL = re.compile(r'"([^"]*)"')
# macOS's PATH_MAX (sys/syslimits.h): a longer path cannot be opened there, so a
# parameter holding one is refused rather than passed.
MAX_MAC_PATH_BYTES = 1024
# Where macOS keeps what Linux keeps at /tmp, /var and /etc: links to /private/…, which
# the kernel resolves before Seatbelt sees the path.
_PRIVATE_LINKS = ("/tmp", "/var", "/etc")  # noqa: S108  (names of links, not a temp file)
# Read (and run) in every sandbox, as lnk_wrap.system.SYSTEM_FOLDERS on Linux: the
# programs, libraries and settings a program needs to start. /opt/homebrew: Homebrew's
# programs on Apple silicon (on Intel they are in /usr/local, under /usr).
MAC_SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/System", "/Library/Apple",
                      "/Library/Developer/CommandLineTools", "/private/etc",
                      "/private/var/db/timezone", "/opt/homebrew")
# Closed in every sandbox, after the tree, whatever the spec grants (as
# lnk_wrap.system.SYSTEM_SECRETS on Linux): a sandbox run by root reads a file root owns.
# The password hashes, sudo's rules, Kerberos' keys, the system's keychains.
MAC_SYSTEM_SECRETS = ("/private/etc/master.passwd", "/private/etc/sudoers",
                      "/private/etc/sudoers.d", "/private/etc/krb5.keytab",
                      "/private/var/db/dslocal", "/private/var/db/sudo",
                      "/Library/Keychains")
# By fixed patterns: the SSH host keys, and every person's keychain files (encrypted, but
# nothing a program needs; the Keychain's services are denied at the end as well).
_SECRET_PATTERNS = (r'(regex #"^/private/etc/ssh/ssh_host_[^/]*_key$")',
                    r'(regex #"^/Users/[^/]+/Library/Keychains(/|$)")')
# The mach services that hand out the Keychain's stored items: securityd (its old
# SecurityServer name and its XPC name), the keychain daemons, the security agent. Denied
# last, so a stored password is read as nothing (the seed: the keychain permission went).
KEYCHAIN_SERVICES = ("com.apple.SecurityServer", "com.apple.securityd",
                     "com.apple.securityd.xpc", "com.apple.security.keychaind",
                     "com.apple.security.keychain-circle-notification", "com.apple.secd",
                     "com.apple.security.agent", "com.apple.security.agent.login",
                     "com.apple.security.authhost")
# Looked up by any program that starts: user and group names (getpwuid), power
# assertions (Codex's base policy); the system log (Anthropic's sandbox-runtime);
# certificate trust for TLS through the proxy's tunnels (sandbox-runtime: Go's TLS).
_BASE_SERVICES = ("com.apple.system.opendirectoryd.libinfo",
                  "com.apple.PowerManagement.control", "com.apple.system.logger",
                  "com.apple.trustd.agent")
# The sysctls a runtime reads at start (CPU count, page size, OS version): Codex's base
# policy's, fewer (none that writes).
_BASE_SYSCTLS = ("hw.activecpu", "hw.byteorder", "hw.cachelinesize_compat", "hw.cpufamily",
                 "hw.cputype", "hw.logicalcpu", "hw.logicalcpu_max", "hw.machine", "hw.memsize",
                 "hw.ncpu", "hw.pagesize", "hw.pagesize_compat", "hw.physicalcpu",
                 "hw.physicalcpu_max", "kern.argmax", "kern.hostname", "kern.maxfilesperproc",
                 "kern.osproductversion", "kern.osrelease", "kern.ostype", "kern.osversion",
                 "kern.version", "sysctl.proc_cputype", "vm.loadavg")
_BASE = (
    "(version 1)",
    "(deny default)",
    "(allow process-fork)",
    "(allow signal (target same-sandbox))",
    "(allow process-info* (target same-sandbox))",
    "(allow user-preference-read)",
    "(allow ipc-posix-sem)",
    "(allow sysctl-read " + " ".join(f'(sysctl-name "{name}")' for name in _BASE_SYSCTLS) + ")",
    "(allow mach-lookup " + " ".join(f'(global-name "{name}")' for name in _BASE_SERVICES) + ")",
    "(allow pseudo-tty)",
    '(allow file-read* file-write* file-ioctl (literal "/dev/ptmx") (literal "/dev/tty")'
    ' (regex #"^/dev/ttys[0-9]+$"))',
    '(allow file-read* file-write-data (literal "/dev/null"))',
    '(allow file-read* (literal "/dev/random") (literal "/dev/urandom") (literal "/dev/zero"))',
)

# What a path of the tree gives (as lnk_wrap.bwrap.Access, on Linux).
_READ = "read"
_WRITE = "write"
_HIDE = "hide"
_DOT_FILE = "dot file"  # a top-level dot file of a written folder: read only


class MacosError(Exception):
    """The policy cannot be written as a macOS profile; one line, nothing is printed."""


class Profile:
    """A profile's text and its parameters (name, value), in the order they are named."""

    __slots__ = ("parameters", "text")

    def __init__(self, text: str, parameters: tuple[tuple[str, str], ...]) -> None:
        self.text = text
        self.parameters = parameters


def mac_path(path: str) -> str:
    """`path` as the Mac's kernel resolves it: /tmp, /var and /etc are /private/…."""
    for link in _PRIVATE_LINKS:
        if path == link or path.startswith(link + "/"):
            return "/private" + path
    return path


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


class _Paths:
    """The policy's paths as the Mac resolves them (mac_path), every rule's input."""

    __slots__ = ("commands", "hide", "learn", "read", "reopen", "settings", "write",
                 "write_dot_files")

    def __init__(self, policy: Policy) -> None:
        self.read = tuple(mac_path(path) for path in policy.read)
        self.write = tuple(mac_path(path) for path in policy.write)
        self.hide = tuple(mac_path(path) for path in policy.hide)
        self.reopen = tuple(mac_path(path) for path in policy.reopen)
        self.write_dot_files = tuple(mac_path(path) for path in policy.write_dot_files)
        self.commands = tuple(mac_path(path) for path in policy.commands)
        self.settings = mac_path(policy.settings)
        self.learn = bool(policy.learn)


class _Parameters:
    """The profile's parameters: one name per path, in the order first named."""

    __slots__ = ("counts", "names", "values")

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: list[tuple[str, str]] = []
        self.counts: dict[str, int] = {}

    def of(self, kind: str, path: str) -> str:
        """`(param "NAME")` for `path`, a new NAME (KIND_N) the first time."""
        value = path
        if len(value.encode()) > MAX_MAC_PATH_BYTES:
            raise MacosError(f"{path[:60]}…: longer than macOS's {MAX_MAC_PATH_BYTES} bytes "
                             "(PATH_MAX)")
        if value not in self.names:
            index = self.counts.get(kind, 0)
            self.counts[kind] = index + 1
            self.names[value] = f"{kind}_{index}"
            self.values.append((self.names[value], value))
        return f'(param "{self.names[value]}")'


def _tree(policy: _Paths, system: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    """(path, parameter kind, what it gives, suffix) of the policy's tree, shallow before
    deep; at one depth the grants, then the hides, then what a reopen gives back inside a
    hide, then the dot files held. `suffix`: a dot file's name under its written folder
    ("" for every other entry)."""
    ranked: list[tuple[int, int, tuple[str, str, str, str]]] = []

    def add(path: str, kind: str, gives: str, suffix: str = "", rank: int = 0) -> None:
        ranked.append((_depth(path) + (1 if suffix else 0), rank, (path, kind, gives, suffix)))

    for path in system:
        add(path, "SYSTEM", _READ)
    for path in policy.read:
        add(path, "READ", _READ)
    for path in policy.write:
        add(path, "WRITE", _WRITE)
    for path in policy.hide:
        add(path, "HIDE", _HIDE, rank=1)
    add(policy.settings, "SETTINGS", _HIDE, rank=1)
    for path in policy.reopen:
        granted = _granted(policy, system, path)
        if granted is not None:
            add(path, "REOPEN", granted, rank=2)
    for folder in policy.write:
        if folder not in policy.write_dot_files:
            for name, _, _, _ in TOP_NAMES:
                add(folder, "WRITE", _DOT_FILE, name, rank=3)
    ranked.sort(key=lambda item: (item[0], item[1]))
    return [entry for _, _, entry in ranked]


def _granted(policy: _Paths, system: tuple[str, ...], path: str) -> str | None:
    """What the grants alone give at `path` (what a reopen gives back), as on Linux."""
    best: tuple[str, str] | None = None
    grants = [(folder, _READ) for folder in (*system, *policy.read)]
    grants += [(folder, _WRITE) for folder in policy.write]
    for folder, gives in grants:
        if _inside(path, folder) and (best is None or _depth(folder) > _depth(best[0])):
            best = (folder, gives)
    return best[1] if best else None


def _file_rules(policy: _Paths, parameters: _Parameters, system: tuple[str, ...]) -> list[str]:
    """The policy's tree as rules (step 2 of the module's order). Without [commands], a
    program may run where it may read (as on Linux); with it, only what it lists."""
    run = "" if policy.commands or policy.learn else " process-exec*"
    rules: list[str] = []
    for path, kind, gives, suffix in _tree(policy, system):
        named = parameters.of(kind, path)
        if suffix:
            rules.append(f'(deny file-write* (subpath (string-append {named} "/{suffix}")))')
        elif gives == _HIDE:
            rules.append(f"(deny file-read* file-write* process-exec* (subpath {named}))")
        elif gives == _READ:
            rules.append(f"(allow file-read*{run} (subpath {named}))")
            rules.append(f"(deny file-write* (subpath {named}))")
        else:
            rules.append(f"(allow file-read* file-write*{run} (subpath {named}))")
    return rules


def _secret_rules(parameters: _Parameters, secrets: tuple[str, ...]) -> list[str]:
    """The machine's secrets, closed after the tree (step 2's end)."""
    closed = "(deny file-read* file-write* process-exec*"
    rules = [f"{closed} (subpath {parameters.of('SECRET', path)}))" for path in secrets]
    return [*rules, *(f"{closed} {pattern})" for pattern in _SECRET_PATTERNS)]


def _exec_rules(policy: _Paths, parameters: _Parameters) -> list[str]:
    """Before the tree, so that a hide closes a program too. [commands]: the listed
    files and folders may run (read through the grants, as on Linux, where a program
    outside every grant is not there); `learn`: every program may run, each reported
    (Seatbelt logs it)."""
    if policy.learn:
        return ["(allow process-exec* (with report))"]
    return [f"(allow process-exec* (subpath {parameters.of('COMMAND', path)}))"
            for path in policy.commands]


def _ancestors(paths: Iterable[str]) -> list[str]:
    found: dict[str, None] = {"/": None}
    for path in paths:
        folder = posixpath.dirname(path)
        while folder != "/":
            found[folder] = None
            folder = posixpath.dirname(folder)
    return sorted(found, key=lambda folder: (_depth(folder), folder))


def _pins(policy: _Paths) -> list[str]:
    """The folders between a written folder and what is narrowed in it (hidden,
    reopened, read only, a held dot file), from the outermost written folder: a folder
    renamed would take what is narrowed inside out from under its rule (the bwrap plan's
    _folders_to_pin, for the same reason)."""
    narrowed = [*policy.hide, policy.settings, *policy.reopen, *policy.read,
                *(f"{folder}/{name}" for folder in policy.write
                  if folder not in policy.write_dot_files for name, _, _, _ in TOP_NAMES)]
    pinned: set[str] = set()
    for path in narrowed:
        above = [folder for folder in policy.write if _inside(path, folder) and path != folder]
        if not above:
            continue
        top = min(above, key=_depth)
        folder = posixpath.dirname(path)
        while folder != top and _inside(folder, top):
            pinned.add(folder)
            folder = posixpath.dirname(folder)
    return sorted(pinned, key=lambda folder: (_depth(folder), folder))


def _shape_rules(policy: _Paths, parameters: _Parameters, system: tuple[str, ...]) -> list[str]:
    """Step 3: the folders above the grants looked at, and the pinned ones kept."""
    grants = (*system, *policy.read, *policy.write, *policy.reopen, *policy.commands)
    rules = ['(allow file-read-metadata (literal "/"))']
    rules += [f"(allow file-read-metadata (literal {parameters.of('ANCESTOR', folder)}))"
              for folder in _ancestors(grants) if folder != "/"]
    rules += [f"(deny file-write-unlink (literal {parameters.of('PIN', folder)}))"
              for folder in _pins(policy)]
    return rules


def _network_rules(policy: Policy, proxy_port: int | None) -> list[str]:
    """Step 4. With "host", the network as it is (its DNS service too); else only the
    proxy's port (its verbs, its hosts) and the [localhost] ports, each whole: Seatbelt
    takes `localhost` or `*` as the host and a port or `*` (the peers' profiles)."""
    if policy.endpoints:
        raise MacosError(
            "[tcp] endpoints have no macOS equivalent: a plain TCP client does not use the "
            "proxy, and the Mac's DNS is the machine's, so the name cannot lead to the proxy; "
            "reach the service through [localhost] ports or over HTTP with [network] hosts")
    if policy.network == "host":
        return ["(allow network*)", '(allow mach-lookup (global-name "com.apple.dnssd.service"))']
    rules: list[str] = []
    if policy.needs_proxy():
        if proxy_port is None:
            raise MacosError("the proxy's port is needed: the policy has a wire")
        rules.append(f'(allow network-outbound (remote ip "localhost:{proxy_port}"))')
    rules += [f'(allow network-outbound (remote ip "localhost:{port}"))'
              for port in policy.localhost_ports]
    if policy.open_pages:
        # A login's callback: the program listens on the Mac's loopback and the browser's
        # answer arrives as it is (the seed). Never on an agent's proxy port.
        rules.append('(allow network-bind network-inbound (local ip "localhost:*"))')
    return rules


def profile(policy: Policy, *, proxy_port: int | None,
            agent_ports: tuple[int, ...] = (),
            system: tuple[str, ...] = MAC_SYSTEM_FOLDERS,
            secrets: tuple[str, ...] = MAC_SYSTEM_SECRETS) -> Profile:
    """The profile of `policy` (the module's order). `proxy_port`: the agent's proxy on
    the Mac's loopback (lnk_wrap.seatbelt_ports), needed when the policy has a wire.
    `agent_ports`: every agent's proxy port known, which a program that may listen (for
    a login's callback) may not take. `system`: the folders read in every sandbox;
    `secrets`: the files closed in every one."""
    parameters = _Parameters()
    paths = _Paths(policy)
    rules = [*_BASE, *_exec_rules(paths, parameters), *_file_rules(paths, parameters, system),
             *_secret_rules(parameters, secrets),
             *_shape_rules(paths, parameters, system), *_network_rules(policy, proxy_port)]
    if policy.open_pages:
        rules += [f'(deny network-bind (local ip "*:{port}"))'
                  for port in sorted({*agent_ports, *((proxy_port,) if proxy_port else ())})]
    rules.append("(deny mach-lookup "
                 + " ".join(f'(global-name "{name}")' for name in KEYCHAIN_SERVICES) + ")")
    text = "\n".join(rules) + "\n"
    longest = max(len(literal.encode()) for literal in _LITERAL.findall(text))
    if longest > MAX_LITERAL_BYTES:  # ours are short constants: a bug, never a spec's
        raise MacosError(f"a literal of {longest} bytes: the profile compiler's limit is "
                         f"{MAX_LITERAL_BYTES + 1}")
    return Profile(text, tuple(parameters.values))


# -- sandbox-exec's argv, from typed options (as lnk_wrap.bwrap's) ----------------------


class ProfileText:
    """`-p PROFILE`: the profile's text itself (no file a later run could change)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def to_args(self) -> list[str]:
        return ["-p", self.text]


class Parameter:
    """`-DNAME=value`: one parameter the profile reads as `(param "NAME")`. A name is
    ours (capitals, digits, `_`); a value with a NUL cannot be an argument."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str) -> None:
        if not name or not all(character in _PARAMETER_NAME for character in name):
            raise MacosError(f"not a parameter's name: {name!r}")
        if "\0" in value:
            raise MacosError(f"{name}: a parameter's value holds a NUL")
        self.name = name
        self.value = value

    def to_args(self) -> list[str]:
        return [f"-D{self.name}={self.value}"]


class Command:
    """`-- COMMAND ARG…`: what runs in the sandbox, after every option."""

    __slots__ = ("words",)

    def __init__(self, words: list[str]) -> None:
        if not words:
            raise MacosError("no command to run")
        self.words = tuple(words)

    def to_args(self) -> list[str]:
        return ["--", *self.words]


_PARAMETER_NAME = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def sandbox_exec_argv(made: Profile, command: list[str]) -> list[str]:
    """`/usr/bin/sandbox-exec -p PROFILE -DNAME=value… -- COMMAND…` (Codex's form: each
    parameter one `-D` word, the command after `--`)."""
    options: list[ProfileText | Parameter | Command] = [ProfileText(made.text)]
    options += [Parameter(name, value) for name, value in made.parameters]
    options.append(Command(command))
    argv = [SANDBOX_EXEC]
    for option in options:
        argv += option.to_args()
    return argv
