"""The bubblewrap command line, built from typed options, and the mount plan behind it.

`plan()` is pure: a Policy and the HostFacts gathered by the launcher go in, the bwrap
options and the Landlock rules that mirror them come out. No file is looked at and no
environment variable read here, so the whole argv is golden-tested (tests/test_bwrap.py).

Order of mounts, and why:
1. System folders read-only (the table in lnk_wrap.system), then /dev, /proc, and
   private /tmp and /var/tmp. /proc/sys is bound read-only over /proc: run by root,
   a sandbox without capabilities could otherwise still write the host's sysctls, since
   the files are owned by the machine's root (seen here: hostname, vm.swappiness).
2. Then every grant, hide, reopen and held dot file (lnk_wrap.dotfiles), parents
   before children (sorted by depth), and
   every folder between a written folder and something narrowed inside it bound onto
   itself, so that it cannot be renamed and made again (_folders_to_pin says why): the
   folders holding a hidden one are mounted before it is hidden, and what is reopened
   inside it after. A hidden folder becomes an empty tmpfs of mode 0111 (listing it is
   refused; what is reopened inside is reached through it), a hidden file /dev/null on a
   nodev mount (opening it is refused); the tmpfs is made read-only only at the very end,
   after what is reopened inside has its mount points.
3. A hide that nothing made visible is skipped: there is nothing to close.

Landlock (applied by the init) mirrors the grants: rights are a union along a path, so
the mounts are what narrow (a read-only folder inside a written one, a hidden folder);
Landlock closes what the mounts leave visible but the program was not given, such as
the interpreter and package that the init itself runs from.
"""

from __future__ import annotations

from lnk_common.policy import Policy

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "Access",
    "HostFacts",
    "InitRule",
    "Plan",
    "plan",
]


class Access:
    """What a mounted path gives the program. The init maps each name to Landlock rights
    (lnk_wrap.landlock.ACCESS_RIGHTS). Plain strings: an Enum costs an import at every
    start."""

    READ = "read"
    WRITE = "write"
    # The private temp folders: what WRITE gives, and FIFOs and device files.
    TEMP = "temp"
    DEVICES = "devices"
    PROC = "proc"
    # With [commands]: grants without the right to run, and what may run.
    READ_NO_EXEC = "read-no-exec"
    WRITE_NO_EXEC = "write-no-exec"
    TEMP_NO_EXEC = "temp-no-exec"
    RUN = "run"


# -- typed bwrap options ------------------------------------------------------------------


class Flag:
    """An option without a value (`--unshare-user`, `--die-with-parent`, …)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def to_args(self) -> list[str]:
        return [f"--{self.name}"]


class Value:
    """An option with one value (`--cap-drop ALL`, `--chdir DIR`, `--tmpfs DEST`, …)."""

    __slots__ = ("name", "value")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.value = value

    def to_args(self) -> list[str]:
        return [f"--{self.name}", self.value]


class Pair:
    """An option with a source and a destination (`--ro-bind SRC DEST`, `--symlink T D`)."""

    __slots__ = ("dest", "name", "source")

    def __init__(self, name: str, source: str, dest: str) -> None:
        self.name = name
        self.source = source
        self.dest = dest

    def to_args(self) -> list[str]:
        return [f"--{self.name}", self.source, self.dest]


Option = Flag | Value | Pair


def render(options: Iterable[Option]) -> list[str]:
    argv: list[str] = []
    for option in options:
        argv += option.to_args()
    return argv


# -- inputs -------------------------------------------------------------------------------


class HostFacts:
    """What the launcher found on this machine at run time; every field explicit.

    system_dirs: system folders that are real folders, bound read-only.
    system_links: system folders that are links (merged /usr), made as links.
    system_hidden: files that hold the machine's secrets (shadow, host keys), found
        under the system folders, hidden whatever the spec says.
    hide_kinds: for each hide, the settings folder and each system secret: "dir",
        "file", "link" or "missing".
    runtime: folders the init's interpreter needs, bound read-only where not already
        visible; Landlock closes them to the program.
    packages: the folder holding lnk_common and lnk_wrap, bound at PACKAGES_INSIDE.
    held: dot files of written folders, and stand-ins made for missing ones, each
        bound read only where the program could otherwise write it (lnk_wrap.dotfiles).
    loaders: the machine's program loaders (ld-linux…), runnable where [commands] lists
        programs: every dynamically linked program needs its loader run for it.
    watch_fd: the init's end of the socket to the sandbox's watch (every sandbox has
        one: it judges unix sockets; with [commands], programs too).
    block_fd: where the init waits for the launcher's go-ahead before running the
        program (while the DNS helper makes the sandbox's listening sockets in its
        network, for a policy with a wire; and so that a stop signal before the start
        means no start, for every policy): the init's --go-fd.
    data_files: (fd, path) pairs: a file made from what the fd holds, read only, at path
        (a sandbox with DNS: its own resolv.conf and hosts, lnk_wrap.dns_files).
    static_files: (source, path) pairs: a file outside bound read only at path (a
        sandbox of the proxy's network without DNS: the package's resolv.conf naming
        127.0.0.1, lnk_wrap.launch._later_files).
    cwd: the working directory to keep.
    temporary_home: the program's HOME when it is made inside, in the private /tmp
        (lnk_wrap.home: a run of no named wire); "" otherwise.
    info_fd: where bwrap reports the sandbox's pid (for passing signals on).
    """

    __slots__ = ("block_fd", "cwd", "data_files", "held", "hide_kinds", "info_fd", "loaders",
                 "packages", "runtime", "static_files", "system_dirs", "system_hidden",
                 "system_links", "temporary_home", "watch_fd")

    def __init__(
        self,
        *,
        system_dirs: tuple[str, ...],
        system_links: tuple[tuple[str, str], ...],
        system_hidden: tuple[str, ...],
        hide_kinds: dict[str, str] | None = None,
        runtime: tuple[str, ...] = (),
        packages: str = "",
        held: tuple[str, ...] = (),
        loaders: tuple[str, ...] = (),
        cwd: str = "/",
        info_fd: int | None = None,
        watch_fd: int | None = None,
        block_fd: int | None = None,
        data_files: tuple[tuple[int, str], ...] = (),
        static_files: tuple[tuple[str, str], ...] = (),
        temporary_home: str = "",
    ) -> None:
        self.system_dirs = system_dirs
        self.system_links = system_links
        self.system_hidden = system_hidden
        self.hide_kinds = dict(hide_kinds or {})
        self.runtime = runtime
        self.packages = packages
        self.held = held
        self.loaders = loaders
        self.cwd = cwd
        self.info_fd = info_fd
        self.watch_fd = watch_fd
        self.block_fd = block_fd
        self.data_files = data_files
        self.static_files = static_files
        self.temporary_home = temporary_home

    def _replace(self, **changes: object) -> HostFacts:
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return HostFacts(**fields)

    def with_cwd(self, cwd: str) -> HostFacts:
        return self._replace(cwd=cwd)

    def with_held(self, held: tuple[str, ...]) -> HostFacts:
        return self._replace(held=held)

    def with_watch(self, watch_fd: int | None) -> HostFacts:
        return self._replace(watch_fd=watch_fd)

    def with_block(self, block_fd: int | None) -> HostFacts:
        return self._replace(block_fd=block_fd)

    def with_data_files(self, data_files: tuple[tuple[int, str], ...]) -> HostFacts:
        return self._replace(data_files=data_files)

    def with_static_files(self, static_files: tuple[tuple[str, str], ...]) -> HostFacts:
        return self._replace(static_files=static_files)

    def with_temporary_home(self, path: str) -> HostFacts:
        return self._replace(temporary_home=path)


class InitRule:
    """One Landlock rule, as the init takes it on its command line: `--rule ACCESS:PATH`."""

    __slots__ = ("access", "path")

    def __init__(self, access: str, path: str) -> None:
        self.access = access
        self.path = path

    def to_args(self) -> list[str]:
        return ["--rule", f"{self.access}:{self.path}"]


class Plan:
    """The bwrap options and the init's Landlock rules of one sandbox."""

    __slots__ = ("filter_args", "go_args", "options", "rules")

    def __init__(self, *, options: tuple[Option, ...], rules: tuple[InitRule, ...],
                 filter_args: tuple[str, ...] = (), go_args: tuple[str, ...] = ()) -> None:
        self.options = options
        self.rules = rules
        self.filter_args = filter_args
        self.go_args = go_args

    def bwrap_argv(self, bwrap: str) -> list[str]:
        return [bwrap, *render(self.options)]

    def init_args(self) -> list[str]:
        argv = [*self.filter_args, *self.go_args]
        for rule in self.rules:
            argv += rule.to_args()
        return argv


# -- the plan -----------------------------------------------------------------------------

_PRIVATE_TMP = ("/tmp", "/var/tmp")
# A hidden folder is an empty tmpfs, read-only, that no one may list (an `ls` of it is
# refused, not shown empty) but that may be passed through to what is reopened inside.
HIDDEN_FOLDER_MODE = "0111"
# Where the init's own packages are bound inside (see plan()).
PACKAGES_INSIDE = "/.lnk-sandbox"
# The sandbox's browser ([verbs] open): lnk_wrap/browser/lnk-open (a static binary, built
# by bin/setup; its source says why C) and the links to it named as the openers programs
# look for on PATH. The only part of our packages the program may run (Landlock's `run`,
# whatever [commands] lists): nothing else of the folder's is a program.
BROWSER_FOLDER_INSIDE = f"{PACKAGES_INSIDE}/lnk_wrap/browser"
BROWSER_INSIDE = f"{BROWSER_FOLDER_INSIDE}/lnk-open"
# What common clients read to find a proxy (curl, wget, git, pip, Python, Node's
# undici with its env, Go): both cases, since some read only one.
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                   "all_proxy")
# Node's own fetch (undici) ignores the proxy variables unless this is set (Node 22.21+,
# 24): without it a harness's fetch fails where curl works.
NODE_PROXY_SWITCH = ("NODE_USE_ENV_PROXY", "1")
# The sandbox's own loopback is never the proxy's to reach: a [localhost] port (a local
# model's included: the program keeps `http://localhost:11434`) is relayed there, and the
# proxy's own address is there. Without this every HTTP client sent `localhost:PORT` to
# the proxy, which refused it as a host not listed (the `ollama` client and the `openai`
# SDK did). The caller's own NO_PROXY is replaced (its names would skip the proxy).
NO_PROXY_LOOPBACK = "localhost,127.0.0.1,::1"


def inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


# One path of the policy's tree and what it gives (None: hidden); the deepest entry
# over a path decides.
_Entry = tuple[str, "str | None"]


def _entries(policy: Policy, facts: HostFacts) -> list[_Entry]:
    # The private /tmp and /var/tmp are not here: they show nothing of the machine's.
    entries: list[_Entry] = [(path, Access.READ) for path in facts.system_dirs]
    entries += [(path, Access.READ) for path in policy.read]
    entries += [(path, Access.WRITE) for path in policy.write]
    entries += [(path, None) for path in (*policy.hide, policy.settings, *facts.system_hidden)]
    return entries


def access_at(policy: Policy, facts: HostFacts, path: str) -> str | None:
    """What the program gets at `path`: the deepest grant or hide over it decides, a
    hide beating a grant of the same path; a reopen gives back what the grants give."""
    best: _Entry | None = None
    for entry in _entries(policy, facts):
        entry_path, access = entry
        if not inside(path, entry_path):
            continue
        if best is None or _depth(entry_path) > _depth(best[0]) or (
            entry_path == best[0] and access is None
        ):
            best = entry
    if best is None:
        return None
    if best[1] is None and any(inside(path, reopened) for reopened in policy.reopen):
        return _granted(policy, facts, path)
    return best[1]


def _granted(policy: Policy, facts: HostFacts, path: str) -> str | None:
    """What the grants alone give at `path`, hides ignored (what a reopen gives back)."""
    best: _Entry | None = None
    for entry in _entries(policy, facts):
        if entry[1] is not None and inside(path, entry[0]) and (
            best is None or _depth(entry[0]) > _depth(best[0])
        ):
            best = entry
    return best[1] if best else None


def _written_above(policy: Policy, path: str) -> bool:
    return any(inside(path, written) and path != written for written in policy.write)


def _folders_to_pin(policy: Policy, narrowed: list[str]) -> list[str]:
    """The folders between a written folder and a path narrowed inside it (hidden,
    reopened, or read-only), each bound onto itself. A mount point cannot be renamed
    (EBUSY); without this, a program could rename a parent of the narrowed path, make
    a decoy in its place, and the next sandbox of the same spec would narrow the decoy
    and give the real one the written folder's access. They keep their access.

    From the outermost written folder, not the nearest: a folder that holds a mount
    point can itself be renamed (the mounts below move with it), so with a written
    folder inside another, the folders between the two must be pinned as well (or
    Link's settings folder in the inner one could be moved away and a decoy made)."""
    pinned: list[str] = []
    for path in narrowed:
        above = [written for written in policy.write if inside(path, written) and path != written]
        if not above:
            continue
        top = min(above, key=_depth)
        folder = path.rsplit("/", 1)[0]
        while folder != top and inside(folder, top):
            pinned.append(folder)
            folder = folder.rsplit("/", 1)[0]
    return sorted(set(pinned), key=lambda folder: (_depth(folder), folder))


def _visible(policy: Policy, facts: HostFacts, path: str) -> bool:
    return access_at(policy, facts, path) is not None


def plan(policy: Policy, facts: HostFacts) -> Plan:
    """The sandbox of `policy` on this machine, in the order the module's docstring
    gives: the namespaces and the environment, the system, the policy's tree (parents
    first), the read-only remounts; with the init's Landlock rules and its filter's."""
    mounts: list[Option] = []
    staged, read_only_at_end = _staged_mounts(policy, facts)
    for _, _, _, options in sorted(staged, key=lambda item: (item[0], item[1], item[2])):
        mounts += options
    tail: list[Option] = [Value("remount-ro", path) for path in read_only_at_end]
    tail += [Value("remount-ro", "/"), Value("chdir", facts.cwd)]
    go_args = ("--go-fd", str(facts.block_fd)) if facts.block_fd is not None else ()
    return Plan(options=(*_head(policy, facts), *_system(facts), *mounts, *tail),
                rules=tuple(_rules(policy, facts)), filter_args=_filter_args(policy, facts),
                go_args=go_args)


def _head(policy: Policy, facts: HostFacts) -> list[Option]:
    """The namespaces, the capabilities, the session, and the proxy's variables."""
    head: list[Option] = [
        Flag("unshare-user"),
        Flag("unshare-pid"),
        # mode "host": this machine's network namespace, as it is (and so its abstract
        # unix sockets, which Landlock's scope closes: lnk_wrap.launch needs ABI 6).
        *(() if policy.network == "host" else (Flag("unshare-net"),)),
        Flag("unshare-uts"),
        Flag("unshare-ipc"),
        Flag("unshare-cgroup-try"),
        Flag("die-with-parent"),
        Value("cap-drop", "ALL"),
    ]
    if not policy.keep_session:
        head.append(Flag("new-session"))
    if facts.info_fd is not None:
        head.append(Value("info-fd", str(facts.info_fd)))
    if policy.network == "proxy":
        # Where a sandbox with the proxy finds it: a fixed address and port on its own
        # loopback (lnk_common.endpoints, the one definition; the socket is made there by
        # the launcher's DNS helper and served by the proxy outside). Imported here, not
        # at the top: a sandbox without a wire need not pay for the module.
        from lnk_common.endpoints import PROXY_ADDRESS, PROXY_PORT

        proxy_url = f"http://{PROXY_ADDRESS}:{PROXY_PORT}"
        head += [Pair("setenv", name, proxy_url) for name in PROXY_VARIABLES]
        head.append(Pair("setenv", *NODE_PROXY_SWITCH))
        head += [Pair("setenv", name, NO_PROXY_LOOPBACK) for name in ("NO_PROXY", "no_proxy")]
    return head


def _system(facts: HostFacts) -> list[Option]:
    """Step 1: the system folders read-only, /dev, /proc, the private temp folders, the
    files made from the launcher's data, and a HOME made inside."""
    system: list[Option] = [Pair("ro-bind", path, path) for path in facts.system_dirs]
    system += [Pair("symlink", target, path) for path, target in facts.system_links]
    system += [
        Value("dev", "/dev"),
        Value("proc", "/proc"),
        Pair("ro-bind", "/proc/sys", "/proc/sys"),
        Pair("ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger"),
        *(Value("tmpfs", path) for path in _PRIVATE_TMP),
        *(Pair("ro-bind-data", str(fd), path) for fd, path in facts.data_files),
        *(Pair("ro-bind", source, path) for source, path in facts.static_files),
    ]
    if facts.temporary_home:  # lnk_wrap.home: in the private /tmp, the program's own
        system += [Value("perms", "0700"), Value("dir", facts.temporary_home)]
    return system


# One mount of the policy's tree: (depth, order within a depth, path, options). Sorted
# so that parents come first and, at one path, a grant (0) comes before the hide (1)
# that closes it, the reopen (2) after, then a held dot file (3), then what the init
# needs (4).
_Staged = tuple[int, int, str, list[Option]]


def _staged_mounts(policy: Policy, facts: HostFacts) -> tuple[list[_Staged], list[str]]:
    """Step 2: every mount of the policy's tree, unsorted, and the hidden folders to
    make read-only at the very end."""
    staged: list[_Staged] = [(_depth(path), 0, path, [Pair("ro-bind", path, path)])
                             for path in policy.read]
    staged += [(_depth(path), 0, path, [Pair("bind", path, path)]) for path in policy.write]
    hides, read_only_at_end = _hide_mounts(policy, facts)
    staged += hides
    staged += _reopen_mounts(policy, facts)
    staged += _held_mounts(policy, facts)
    staged += _init_mounts(policy, facts)
    staged += _pin_mounts(policy, facts, staged)
    return staged, read_only_at_end


def _hide_mounts(policy: Policy, facts: HostFacts) -> tuple[list[_Staged], list[str]]:
    """Each hide over something visible: a folder an empty tmpfs no one may list (made
    read-only at the end), a file /dev/null. Step 3: a hide of nothing is skipped."""
    staged: list[_Staged] = []
    read_only_at_end: list[str] = []
    hidden = [*policy.hide, policy.settings, *facts.system_hidden]
    for path in dict.fromkeys(hidden):
        kind = facts.hide_kinds.get(path, "file" if path in facts.system_hidden else "missing")
        if kind in ("missing", "link") or _granted(policy, facts, path) is None:
            continue
        if kind == "dir":
            staged.append((_depth(path), 1, path, [Value("perms", HIDDEN_FOLDER_MODE),
                                                   Value("tmpfs", path)]))
            read_only_at_end.append(path)
        else:
            staged.append((_depth(path), 1, path, [Pair("ro-bind", "/dev/null", path)]))
    return staged, read_only_at_end


def _reopen_mounts(policy: Policy, facts: HostFacts) -> list[_Staged]:
    """Each reopen, with what the grants give there (none: nothing to reopen)."""
    staged: list[_Staged] = []
    for path in policy.reopen:
        access = _granted(policy, facts, path)
        if access is None:
            continue
        bind = "bind" if access == Access.WRITE else "ro-bind"
        staged.append((_depth(path), 2, path, [Pair(bind, path, path)]))
    return staged


def _held_mounts(policy: Policy, facts: HostFacts) -> list[_Staged]:
    """Read only over what the program could write; a dot file it cannot write (read
    only, or hidden) needs no mount. After the reopen of the same path, if any."""
    return [(_depth(path), 3, path, [Pair("ro-bind", path, path)]) for path in facts.held
            if access_at(policy, facts, path) == Access.WRITE]


def _init_mounts(policy: Policy, facts: HostFacts) -> list[_Staged]:
    """What the init's interpreter needs and the program is not given (Landlock closes
    it to the program), and our packages."""
    staged: list[_Staged] = [(_depth(path), 4, path, [Pair("ro-bind", path, path)])
                             for path in facts.runtime if not _visible(policy, facts, path)]
    if facts.packages:
        # Our packages at a fixed place on the sandbox's root, which no rule grants: were
        # they bound where they live, a checkout under /tmp would sit beneath the private
        # /tmp's Landlock rule and be readable by the program.
        for package in ("lnk_common", "lnk_wrap"):
            dest = f"{PACKAGES_INSIDE}/{package}"
            staged.append((_depth(dest), 4, dest,
                           [Pair("ro-bind", f"{facts.packages}/{package}", dest)]))
    return staged


def _pin_mounts(policy: Policy, facts: HostFacts, staged: list[_Staged]) -> list[_Staged]:
    """The folders between a written folder and what is narrowed inside it, each bound
    onto itself with the access it has (_folders_to_pin says why); none mounted twice."""
    narrowed = [path for _, order, path, _ in staged if order in (1, 2, 3)]
    narrowed += [path for path in policy.read if _written_above(policy, path)]
    mounted = {path for _, _, path, _ in staged}
    pins: list[_Staged] = []
    for folder in _folders_to_pin(policy, narrowed):
        if folder in mounted:
            continue
        access = access_at(policy, facts, folder)
        if access is None:
            continue
        mounted.add(folder)
        bind = "bind" if access == Access.WRITE else "ro-bind"
        pins.append((_depth(folder), 0, folder, [Pair(bind, folder, folder)]))
    return pins


def _rules(policy: Policy, facts: HostFacts) -> list[InitRule]:
    """The init's Landlock rules: the system's, the grants' and the reopens' (what the
    grants give there); with [commands], no grant runs what it holds, and only the
    listed programs and the loaders run; with [verbs] open, the sandbox's browser."""
    rules = [InitRule(Access.READ, path) for path in facts.system_dirs]
    rules += [
        InitRule(Access.DEVICES, "/dev"),
        InitRule(_temp_access(policy, "/dev/shm"), "/dev/shm"),
        InitRule(Access.PROC, "/proc"),
        *(InitRule(_temp_access(policy, path), path) for path in _PRIVATE_TMP),
        *(InitRule(Access.READ, path) for _, path in facts.data_files),
        *(InitRule(Access.READ, path) for _, path in facts.static_files),
    ]
    rules += [InitRule(Access.READ, path) for path in policy.read]
    rules += [InitRule(Access.WRITE, path) for path in policy.write]
    for path in policy.reopen:
        access = _granted(policy, facts, path)
        if access is not None:
            rules.append(InitRule(access, path))
    if policy.commands:
        rules = [_without_execute(rule) for rule in rules]
        rules += [InitRule(Access.RUN, path) for path in (*policy.commands, *facts.loaders)]
    if policy.open_pages and facts.packages:
        rules.append(InitRule(Access.RUN, BROWSER_FOLDER_INSIDE))
    return rules


def _filter_args(policy: Policy, facts: HostFacts) -> tuple[str, ...]:
    """The init's seccomp filter (with [commands] or learn, the one that watches
    programs) and its end of the watch's socket."""
    variant = "programs" if policy.commands or policy.learn else "sockets"
    filter_args: tuple[str, ...] = ("--filter", variant)
    if facts.watch_fd is not None:
        filter_args += ("--watch-fd", str(facts.watch_fd))
    return filter_args


def _temp_access(policy: Policy, temp: str) -> str:
    """A private temp folder's rule: TEMP (FIFOs and device files may be made), but
    WRITE where a written folder lies beneath it. Landlock's rights along a path are a
    union, and its walk goes up across mount points: a written folder bound at
    /tmp/x/W inside gets whatever the rule on the private /tmp gives, so a FIFO could
    be made in it there. The refusal is kept for the written folder; the private temp
    folder above it loses FIFOs in that sandbox (docs/decisions/0004-files-policy-linux.md,
    the residue)."""
    if any(inside(written, temp) for written in policy.write):
        return Access.WRITE
    return Access.TEMP


def _without_execute(rule: InitRule) -> InitRule:
    """Where [commands] lists programs, no grant runs what it holds."""
    access = {Access.READ: Access.READ_NO_EXEC, Access.WRITE: Access.WRITE_NO_EXEC,
              Access.TEMP: Access.TEMP_NO_EXEC}
    return InitRule(access.get(rule.access, rule.access), rule.path)
