"""lnk-sandbox guest add / list / remove: guests over SSH, for a person (the files).

The pure part (authorized_keys lines, guests.toml, the words shown) is lnk_wrap.guests;
this module reads and writes the two files, asks, and holds the lock.

`guest add` order: the name → the spec, read as `run` reads it (lnk_wrap.spec: a
refusal names file, key and reason) → the key file → the forced command (every path on it
writable without quoting) → under the lock: guests.toml read, the name free, the owner's
authorized_keys read and no line in it already letting the key in → the kept spec read
back and checked to mean what was read → what it opens shown, and asked (lnk_ask: a
dialog, the terminal, the queue; silence is no) → the guest's folder made → guests.toml
written → authorized_keys written (if that fails, guests.toml is put back). Anything
refused before the writes leaves both files as they were. Each file is written whole to a
temporary file beside it and renamed over it (0600 when new; an existing authorized_keys
keeps its mode); every existing line of authorized_keys is kept byte for byte.

`guest remove` takes the guest's line out of authorized_keys first (the door shut), then
its entry out of guests.toml. The guest's folder is kept: it holds the guest's files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import stat
import sys

from lnk_common.filewrite import write_synced
from lnk_wrap import guests as core
from lnk_wrap.guests import Guest, GuestError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from lnk_common.policy import Policy

__all__ = ["GUESTS_FILE", "authorized_keys_path", "guest_home", "guests", "guests_path",
           "json_shown", "outside_places", "read_guests", "refuse_written_outside", "shown"]

GUESTS_FILE = "guests.toml"
# Each guest's own folder (like an agent's, agents/NAME), in Link's settings.
GUESTS_FOLDER = "guests"
_LOCK_FILE = ("sandbox", "guests.lock")
# How long a person has to answer `guest add`'s question (lnk_ask's default).
ASK_SECONDS = 120
# A key's comment is the guest's own words (a key file may be 16 kB): this much is shown,
# after what the guest may read and write, so it can neither push that out of the
# question's cut nor off the screen; the rest is said to be there, not shown.
MAX_SHOWN_COMMENT_CHARS = 100
# A refusal is one line; one naming a long path or two is some hundreds of characters.
MAX_SHOWN_REFUSAL_CHARS = 4000
# A line of what a session opens: a spec's list of paths or hosts may be long, and each
# line is shown whole (cut by lnk_ask.text.printable past this, saying so).
MAX_SHOWN_LINE_CHARS = 16 * 1024


def shown(text: str, limit: int = MAX_SHOWN_LINE_CHARS) -> str:
    """`text` as the person's terminal is given it: printable ASCII as it is, anything else
    escaped (lnk_ask.text.printable, as every question shows a sandbox's text). A guest's key
    comment, name and paths come from files the guest gave: an escape sequence there
    would rewrite what `guest add` shows (a forged "may write: nothing", the real lines
    erased, OSC 52 written to the clipboard), a bidi mark reverse it, a Cyrillic letter
    pass for a Latin one."""
    if len(text) <= limit and all(" " <= character <= "~" and character != "\\"
                                  for character in text):
        return text  # the common case, without importing hashlib at each session
    from lnk_ask.text import printable

    return printable(text, limit)


def comment_words(key: core.PublicKey) -> str:
    """The key's comment as it goes into what is shown and asked (not yet escaped: every
    place it goes escapes it once), cut to MAX_SHOWN_COMMENT_CHARS."""
    comment = key.comment
    if len(comment) <= MAX_SHOWN_COMMENT_CHARS:
        return comment
    return (comment[:MAX_SHOWN_COMMENT_CHARS]
            + f" [... {len(comment) - MAX_SHOWN_COMMENT_CHARS} more characters not shown]")


def guests_path(settings: str) -> str:
    return os.path.join(settings, GUESTS_FILE)


def guest_home(settings: str, name: str) -> str:
    return os.path.join(settings, GUESTS_FOLDER, name)


def authorized_keys_path(env: Mapping[str, str]) -> str:
    """The owner's authorized_keys: under HOME as the caller has it (sshd's default
    AuthorizedKeysFile, .ssh/authorized_keys, is relative to the home folder), else the
    account's home."""
    home = env.get("HOME", "")
    if not home or not os.path.isabs(home):
        home = pwd.getpwuid(os.getuid()).pw_dir
    return os.path.join(os.path.normpath(home), ".ssh", "authorized_keys")


def _read_up_to(fd: int, most: int) -> bytes:
    """At most `most` bytes of `fd` (one past a limit tells a file over it)."""
    data = b""
    while len(data) < most:
        more = os.read(fd, most - len(data))
        if not more:
            break
        data += more
    return data


def _read_limited(path: str, limit: int, what: str, *, missing_ok: bool) -> bytes | None:
    """A regular file's bytes, read without following a link at its name."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise GuestError(f"{path}: no such file") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise GuestError(f"{path}: {what} is a link; refusing to rewrite through it (make "
                             "it a plain file)") from None
        raise GuestError(f"{path}: cannot be read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise GuestError(f"{path}: {what} is not a regular file")
        data = _read_up_to(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise GuestError(f"{path}: larger than {limit} bytes; refusing")
    return data


def write_atomic(path: str, data: bytes, mode: int) -> None:
    """Write `path` whole or not at all: a temporary file beside it (O_EXCL, O_NOFOLLOW,
    `mode`), written, synced, renamed over it, the folder synced."""
    folder = os.path.dirname(path)
    temporary = os.path.join(folder, f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    try:
        write_synced(fd, data, mode)
        os.rename(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(folder_fd)
    finally:
        os.close(folder_fd)


def _private_folder(path: str) -> None:
    """Make `path` (0700) if missing; refuse a link or a file there."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise GuestError(f"{path} is not a folder (a link or a file); refusing")


@contextlib.contextmanager
def _locked(settings: str) -> Iterator[None]:
    """One guest add or remove at a time (each reads, then rewrites, two files)."""
    os.makedirs(settings, mode=0o700, exist_ok=True)
    _private_folder(os.path.join(settings, _LOCK_FILE[0]))
    path = os.path.join(settings, *_LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GuestError("another guest add or remove is under way (it may be waiting "
                             "for your answer); try again when it is done") from None
        yield
    finally:
        os.close(fd)


def read_guests(settings: str) -> dict[str, Guest]:
    path = guests_path(settings)
    data = _read_limited(path, core.MAX_GUESTS_BYTES, "guests.toml", missing_ok=True)
    return {} if data is None else core.parse_guests(data, path)


def own_program(argv0: str) -> str:
    """lnk-sandbox's absolute path, as this process was started (the entry script, pip's
    console script, or bin/lnk-sandbox's target): sshd runs it by that path."""
    path = os.path.abspath(argv0)
    if os.path.basename(path) != "lnk-sandbox" or not os.access(path, os.X_OK):
        raise GuestError(f"cannot tell lnk-sandbox's own path (started as {argv0!r}): run "
                         "guest add through the lnk-sandbox command")
    return path


# The system's folders: every login reads code and settings there (/etc/profile,
# /etc/bash.bashrc, /etc/gitconfig, /etc/xdg/autostart, /etc/systemd/user, /usr …), and
# cron and at run, as you, what /var/spool holds.
SYSTEM_FOLDERS = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                  "/boot", "/opt", "/var/spool")
# Folders of the home that are not dot folders and hold code that runs as you: ~/bin
# (Debian's ~/.profile puts it on PATH when it exists), node's ~/node_modules (read by
# every node program under the home that has none closer).
HOME_CODE_FOLDERS = ("bin", "node_modules")
# What the environment names for programs to read code or settings from: each a list of
# folders or files (':' between them). The XDG ones with their defaults (the XDG Base
# Directory spec) when unset; the others mean nothing when unset.
LOCATION_VARIABLES: dict[str, str] = {
    "PATH": "", "XDG_CONFIG_HOME": "~/.config", "XDG_DATA_HOME": "~/.local/share",
    "XDG_STATE_HOME": "~/.local/state", "XDG_CACHE_HOME": "~/.cache",
    "XDG_CONFIG_DIRS": "/etc/xdg", "XDG_DATA_DIRS": "/usr/local/share:/usr/share",
    "XDG_RUNTIME_DIR": "", "ZDOTDIR": "", "BASH_ENV": "", "ENV": "", "INPUTRC": "",
    "GIT_CONFIG_GLOBAL": "", "GIT_CONFIG_SYSTEM": "", "GIT_TEMPLATE_DIR": "",
    "GIT_EXEC_PATH": "", "GNUPGHOME": "", "SSH_AUTH_SOCK": "", "MYVIMRC": "",
    "PYTHONPATH": "", "PYTHONSTARTUP": "", "PYTHONUSERBASE": "", "PYTHONHOME": "",
    "VIRTUAL_ENV": "", "CONDA_PREFIX": "", "NODE_PATH": "", "NVM_DIR": "",
    "PERL5LIB": "", "PERLLIB": "", "RUBYLIB": "", "GEM_HOME": "", "GEM_PATH": "",
    "GOPATH": "", "GOBIN": "", "CARGO_HOME": "", "RUSTUP_HOME": "", "LD_LIBRARY_PATH": "",
    "LD_PRELOAD": "",
}
# What the environment names as a program to run (a command line: its absolute words).
COMMAND_VARIABLES = ("SHELL", "EDITOR", "VISUAL", "PAGER", "MANPAGER", "BROWSER",
                     "TERMINAL", "PROMPT_COMMAND", "LESSOPEN", "LESSCLOSE", "GIT_EDITOR",
                     "GIT_PAGER", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS",
                     "GIT_EXTERNAL_DIFF", "SSH_ASKPASS", "SUDO_ASKPASS")
# A folder whose every entry is read as code or settings: where each link in it leads is
# protected too (a script of a project linked into ~/bin, a dotfiles checkout linked into
# ~/.config). A folder of more entries than this is not one a person keeps; refused
# rather than half looked at.
MAX_ENTRIES_LOOKED_AT = 100_000
# git follows includes at most 10 deep (config.c's MAX_INCLUDE_DEPTH).
MAX_GIT_INCLUDE_DEPTH = 10


class _Places:
    """Places made from paths, the file system's answers kept for the one check."""

    def __init__(self) -> None:
        self.stats: dict[str, tuple[int, int] | None] = {}

    def _identity(self, path: str) -> tuple[int, int] | None:
        if path not in self.stats:
            try:
                info = os.stat(path)
                self.stats[path] = (info.st_dev, info.st_ino)
            except (OSError, ValueError):
                self.stats[path] = None
        return self.stats[path]

    @staticmethod
    def resolve(path: str) -> str:
        """realpath, in three system calls where the kernel says (a folder of a thousand
        links is resolved at every session): the path opened (O_PATH, links followed) and
        its name read back; realpath where it does not exist or /proc is not there."""
        try:
            fd = os.open(path, getattr(os, "O_PATH", os.O_RDONLY) | os.O_CLOEXEC)
        except (OSError, ValueError):
            return os.path.realpath(path)
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        finally:
            os.close(fd)
        return name if name.startswith("/") and not name.endswith(" (deleted)") \
            else os.path.realpath(path)

    def place(self, path: str, *, resolved: str | None = None) -> core.Place:
        named = os.path.normpath(path)
        resolved = resolved or self.resolve(named)
        chain: list[core.Link] = []
        folder = "/"
        exists = True
        for name in ["/", *(part for part in resolved.split("/") if part)]:
            folder = os.path.join(folder, name)
            identity = self._identity(folder)
            if identity is None:
                exists = False
                break
            chain.append((name, *identity))
        return core.Place(named, resolved, tuple(chain), exists)


def _words(command: str) -> list[str]:
    """The absolute paths among a command line's words (or `~/…`), quotes and shell
    punctuation stripped."""
    found: list[str] = []
    for word in command.split():
        word = word.strip("\"'`;&|(){}<>")
        if word.startswith(("/", "~")):
            found.append(word)
    return found


def _expand(path: str, home: str) -> str | None:
    if path.startswith("~/") or path == "~":
        return os.path.join(home, path[2:]) if home else None
    if path.startswith("~"):
        user, _, rest = path[1:].partition("/")
        try:
            return os.path.join(pwd.getpwnam(user).pw_dir, rest)
        except KeyError:
            return None
    return path if os.path.isabs(path) else None


def _git_settings(env: Mapping[str, str], home: str) -> list[str]:
    """The settings files git reads for every repository of the owner (git-config(1))."""
    files: list[str] = []
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        xdg = env.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
        files += [os.path.join(xdg, "git", "config"), os.path.join(home, ".gitconfig")]
    return [path for path in files if os.path.isabs(path)]


def _git_named(path: str, home: str, depth: int = 0) -> list[tuple[str, str]]:
    """(the place, what names it) for a git settings file: the file itself, and every
    absolute path a value in it names (core.hooksPath, an include, an editor, a
    helper, an alias's program …), includes followed."""
    from lnk_wrap.gitconfig import MAX_CONFIG_BYTES, GitConfigError, parse

    found = [(path, "a settings file your git reads")]
    try:  # never waiting on a FIFO; a device (GIT_CONFIG_GLOBAL=/dev/null) or a folder
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # holds no settings
    except (FileNotFoundError, NotADirectoryError):
        return found
    except OSError as error:
        raise GuestError(f"{path}: your git settings cannot be read ({error.strerror}); "
                         "refusing, since what they name could not be checked") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return found
        data = _read_up_to(fd, MAX_CONFIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise GuestError(f"{path}: your git settings are larger than {MAX_CONFIG_BYTES} "
                         "bytes; refusing, since what they name could not be checked")
    try:
        entries = parse(data)
    except GitConfigError as error:
        raise GuestError(f"{path}: your git settings cannot be read as git reads them "
                         f"({error}); refusing, since what they name could not be "
                         "checked") from None
    for entry in entries:
        if not entry.value:
            continue
        if entry.key == "path" and (entry.base == "include"
                                    or entry.base.startswith("includeif.")):
            included = _expand(entry.value, home) if entry.value.startswith("~") else \
                os.path.join(os.path.dirname(path), entry.value)
            if included and depth < MAX_GIT_INCLUDE_DEPTH:
                found += _git_named(included, home, depth + 1)
        for word in _words(entry.value):
            expanded = _expand(word, home)
            if expanded:
                found.append((expanded, f"named by your git settings ({entry.name} in "
                                        f"{path})"))
    return found


def _link_text(path: str) -> str:
    """What a link holds; "/" for one that cannot be read now (resolved, then, in doubt)."""
    try:
        return os.readlink(path)
    except OSError:
        return "/"


def _links_in(folder: str, rule: str) -> list[tuple[str, str]]:
    """Where each link directly in `folder` leads, with the rule saying so."""
    found: list[tuple[str, str]] = []
    try:
        with os.scandir(folder) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_ENTRIES_LOOKED_AT:
                    raise GuestError(
                        f"{folder} holds more than {MAX_ENTRIES_LOOKED_AT} entries, too many "
                        "to check where each link in it leads; refusing")
                # A link to a bare name leads to another entry of this same folder,
                # looked at in its own turn: only the others need resolving.
                if entry.is_symlink() and "/" in _link_text(entry.path):
                    found.append((entry.path, f"a link in {folder}, {rule}"))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []  # none there, or one you cannot list: no link in it is one you made
    return found


def outside_places(env: Mapping[str, str], program: str
                   ) -> tuple[tuple[core.Place, ...], tuple[core.Protected, ...]]:
    """What runs as the owner, outside any sandbox, read from this machine and `env` (see
    lnk_wrap.guests.written_outside_problem): the owner's homes, then every protected
    place with its rule, in the order the refusal names the first."""
    from lnk_common.chain import package_root
    from lnk_wrap.launch import LaunchError, find_bwrap

    account = pwd.getpwuid(os.getuid())
    homes = list(dict.fromkeys(os.path.normpath(home) for home in (account.pw_dir,
                                                                    env.get("HOME", ""))
                               if os.path.isabs(home) and os.path.normpath(home) != "/"))
    home = homes[-1] if homes else ""
    named: list[tuple[str, str]] = [
        (os.path.dirname(authorized_keys_path(env)), "sshd's folder of your keys")]
    linked: list[tuple[str, str]] = []
    for folder in homes:
        named += [(os.path.join(folder, name), "a folder of your home whose code runs as you")
                  for name in HOME_CODE_FOLDERS]
        linked += [(os.path.join(folder, "bin"), "a folder of your home whose code runs as "
                    "you"), (os.path.join(folder, ".local", "bin"), "a folder on your PATH")]
        # Every dot entry as it resolves: a ~/.bashrc or ~/.config linked into a
        # dotfiles checkout makes that checkout what runs.
        try:
            with os.scandir(folder) as entries:
                named += [(entry.path, "a dot entry of your home") for entry in entries
                          if entry.name.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            pass  # no home there: nothing in it runs
        except OSError as error:
            raise GuestError(f"your home folder {folder} cannot be listed ({error.strerror}), "
                             "so where its dot entries lead cannot be checked; refusing") \
                from None
    for variable, default in LOCATION_VARIABLES.items():
        value = env.get(variable) or default
        for item in value.split(":"):
            path = _expand(item, home)
            if path and path != "/":
                rule = ("a folder on your PATH" if variable == "PATH"
                        else f"named by your environment (${variable})")
                named.append((path, rule))
                if variable in ("PATH", "XDG_CONFIG_HOME"):
                    linked.append((path, rule))
    for variable in COMMAND_VARIABLES:
        for word in _words(env.get(variable, "")):
            path = _expand(word, home)
            if path:
                named.append((path, f"a program your environment names (${variable})"))
    named.append((account.pw_shell, "your login shell, which sshd runs"))
    for settings in _git_settings(env, home):
        named += _git_named(settings, home)
    named += [(folder, "a folder of the system every login reads") for folder in
              SYSTEM_FOLDERS]
    # lnk-sandbox, its interpreter, its packages (an editable install's are on no sys.path
    # entry), every library folder it imports from, and the bubblewrap it starts.
    code = "code a guest's session runs as you (lnk-sandbox, its interpreter, its packages)"
    named += [(path, code) for path in (program, os.path.realpath(sys.executable),
                                        package_root(), *sys.path) if os.path.isabs(path)]
    with contextlib.suppress(LaunchError):  # no bubblewrap: no session starts anyway
        named.append((find_bwrap(env), "the bubblewrap a guest's session starts"))
    for folder, rule in dict.fromkeys(linked):
        named += _links_in(folder, rule)
    places = _Places()
    system = [places.resolve(folder) for folder in SYSTEM_FOLDERS]
    seen: set[str] = set()
    protected: list[core.Protected] = []
    for path, rule in named:
        if not os.path.isabs(path) or path in seen:
            continue
        seen.add(path)
        resolved = places.resolve(path)
        if resolved == "/" or (rule.startswith("a link in ") and any(
                core.lies_in(resolved, folder) for folder in system)):
            continue  # a link into the system's folders: held by their rule already
        protected.append(core.Protected(places.place(path, resolved=resolved), rule))
    return tuple(places.place(folder) for folder in homes), tuple(protected)


def refuse_written_outside(policy: Policy, env: Mapping[str, str], program: str,
                           where: str) -> None:
    """Refuse a guest's policy that writes what runs as the owner outside any sandbox;
    `where`: the file and the table its keys are in ("spec.toml: ", "guests.toml:
    guests.ann.spec.")."""
    places = _Places()
    written = (*(("files.write", places.place(path)) for path in policy.write),
               *(("files.write_dot_files", places.place(path))
                 for path in policy.write_dot_files))
    problem = core.written_outside_problem(written, *outside_places(env, program))
    if problem:
        raise GuestError(f"{where}{problem} (a guest's spec may not write what runs "
                         "outside)")


def kept_policy(settings: str, guest: Guest, env: Mapping[str, str]) -> Policy:
    """The guest's kept spec read again by the spec loader, as a run reads a spec: every
    path in it checked first to be still what it was (none became a link since)."""
    from lnk_wrap.spec import SpecError, parse_document

    file = guests_path(settings)
    where = f"guests.{guest.name}.spec"
    for section, keys in (("files", ("read", "write", "hide", "reopen", "write_dot_files")),
                          ("commands", ("run",))):
        table = guest.spec.get(section, {})
        if not isinstance(table, dict):
            continue
        for key in keys:
            paths = table.get(key, [])
            for path in paths if isinstance(paths, list) else []:
                if not isinstance(path, str) or not os.path.isabs(path):
                    raise GuestError(f"{file}: {where}.{section}.{key}: {path!r} is not an "
                                     "absolute path")
                real = os.path.realpath(path)
                if real != path:
                    raise GuestError(
                        f"{file}: {where}.{section}.{key}: {path} became a link to {real} "
                        f"since guest add; refusing the session (guest remove {guest.name} "
                        "and guest add again if this is meant)")
    # The kept spec names absolute paths only; Link's settings is the one given.
    spec_env = {**env, "LNK_HOME": settings}
    try:
        return parse_document(dict(guest.spec), file=file, env=spec_env)
    except SpecError as error:
        key = f"{where}.{error.key}" if error.key else where
        raise GuestError(f"{file}: {key}: {error.reason}; refusing the session") from None


def _ask(settings: str, name: str, key: core.PublicKey, opens: list[str]) -> None:
    from lnk_ask.asker import ask

    # lnk_ask escapes the title and the question (lnk_ask.text.printable) on every way of
    # asking; the guest's comment comes last, cut, so it cannot hide what comes before.
    question = (f"Let the guest {name} in over SSH with the key {key.kind} "
                f"{key.fingerprint()}? Each session runs in a sandbox that: "
                + "; ".join(opens) + "."
                + (f" The key's comment (the guest's own words): {comment_words(key)}"
                   if key.comment else ""))
    print(f"lnk-sandbox: asking you (a dialog, this terminal, or `lnk-sandbox asks` and "
          f"`lnk-sandbox answer ID yes`) within {ASK_SECONDS} s", file=sys.stderr)
    answer = ask(settings, core.wire_name(name), f"Guest over SSH: {name}", question,
                 ASK_SECONDS, allows=f"the guest {name} in over SSH with the key "
                                     f"{key.fingerprint()}")
    if not answer.yes:
        why = f"({answer.how}{': ' + answer.reason if answer.reason else ''})"
        raise GuestError(f"guest {name} not added: the answer was no {why}; nothing was kept")


def add(settings: str, name: str, spec_file: str, key_file: str, env: Mapping[str, str],
        argv0: str) -> int:
    """`guest add`, in the order the module's docstring gives: nothing is written before
    the person's yes, and nothing is kept when a write fails."""
    problem = core.name_problem(name)
    if problem:
        raise GuestError(f"{name!r}: {problem}; nothing was kept")
    policy = _guest_policy(spec_file, env)
    program = own_program(argv0)
    refuse_written_outside(policy, env, program, f"{policy.spec}: ")
    key = _read_key(key_file)
    line = core.forced_line(core.forced_command(program, settings, name), key, name)
    keys_path = authorized_keys_path(env)
    home = guest_home(settings, name)
    from lnk_wrap import explain  # `guest add` only: every guest session imports this module

    with _locked(settings):
        kept = read_guests(settings)
        current = _refuse_taken(kept, name, key, keys_path)
        guest = _guest_kept(settings, name, key, line, policy, env)
        opens = explain.opens(policy, explain.gather(policy, guest_home=home))
        _show_opens(name, key, policy, opens)
        _ask(settings, name, key, opens)
        _write_guest(settings, [*kept.values(), guest], home, keys_path, current, line)
    print(f"guest {name} added: {shown(keys_path)} lets the key in, into a sandbox only "
          f"(wire {core.wire_name(name)}; own folder {shown(home)})")
    return 0


def _guest_policy(spec_file: str, env: Mapping[str, str]) -> Policy:
    """The guest's spec, read as `run` reads it; refused when it has an [agent] or opens
    pages (in the owner's browser)."""
    from lnk_wrap.spec import SpecError, load_spec

    try:
        policy = load_spec(spec_file, env)
    except SpecError as error:
        raise GuestError(f"{error}; nothing was kept") from None
    if policy.agent:
        raise GuestError(f"{policy.spec}: agent: a guest's spec has no [agent]: a guest "
                         "has its own folder in Link's settings; nothing was kept")
    if policy.open_pages:
        raise GuestError(f"{policy.spec}: verbs.open: a guest's pages would open in your "
                         "browser, logged in as you, and a login's callback would hand what "
                         "your accounts give into the guest's sandbox; nothing was kept")
    return policy


def _read_key(key_file: str) -> core.PublicKey:
    key_path = os.path.abspath(key_file)
    key_data = _read_limited(key_path, core.MAX_KEY_FILE_BYTES, "the key file",
                             missing_ok=False)
    assert key_data is not None
    return core.parse_public_key(key_data, key_path)


def _refuse_taken(kept: dict[str, Guest], name: str, key: core.PublicKey,
                  keys_path: str) -> bytes | None:
    """Refuse a name or a key kept already, or a key a line of authorized_keys already
    lets in; else authorized_keys as it is now (None: there is none)."""
    if name in kept:
        raise GuestError(f"a guest named {name} is kept already (lnk-sandbox guest remove "
                         f"{name} first); nothing was kept")
    for other in kept.values():
        if other.key == key:
            raise GuestError(f"this key is guest {other.name}'s already; nothing was kept")
    current = _read_limited(keys_path, core.MAX_AUTHORIZED_KEYS_BYTES,
                            "authorized_keys", missing_ok=True)
    number = core.lets_in(current or b"", key)
    if number is not None:
        raise GuestError(
            f"{keys_path}: line {number} already lets this key in ({key.fingerprint()}), "
            "and sshd uses the first line that matches, so a guest's line after it would "
            "never apply; remove that line or give the guest another key; nothing was "
            "kept")
    return current


def _guest_kept(settings: str, name: str, key: core.PublicKey, line: str, policy: Policy,
                env: Mapping[str, str]) -> Guest:
    """The guest as guests.toml will keep it, its spec read back now: the kept form must
    mean exactly what was read."""
    from lnk_wrap.spec import SpecError, parse_document

    document = core.guest_document(policy)
    guest = Guest(name, key, line, policy.spec, document)
    try:
        again = parse_document(document, file=guests_path(settings),
                               env={**env, "LNK_HOME": settings})
    except SpecError as error:
        raise GuestError(f"the spec kept for {name} does not read back ({error}); "
                         "nothing was kept") from None
    if again.replace(spec="", name="") != policy.replace(spec="", name="",
                                                          site_packages=""):
        raise GuestError(f"the spec kept for {name} would not mean what {policy.spec} "
                         "says; nothing was kept")
    return guest


def _show_opens(name: str, key: core.PublicKey, policy: Policy, opens: list[str]) -> None:
    """What the guest's sessions open, on the terminal, before the question."""
    print(f"guest {name}, key {key.kind} {key.fingerprint()}, from {shown(policy.spec)}:")
    for item in opens:
        print(f"  {shown(item)}")
    if key.comment:
        print(f"  the key's comment (the guest's own words): {shown(comment_words(key))}")
    sys.stdout.flush()


def _write_guest(settings: str, everyone: list[Guest], home: str, keys_path: str,
                 current: bytes | None, line: str) -> None:
    """The guest's folder, guests.toml, then authorized_keys; if the last cannot be
    written, the first two are put back as they were."""
    _private_folder(os.path.join(settings, GUESTS_FOLDER))
    made_home = not os.path.lexists(home)
    _private_folder(home)
    guests_file = guests_path(settings)
    before = _read_limited(guests_file, core.MAX_GUESTS_BYTES, "guests.toml",
                           missing_ok=True)
    write_atomic(guests_file, core.render_guests(everyone).encode(), 0o600)
    try:
        _write_authorized_keys(keys_path, current, line)
    except BaseException as error:
        if made_home:
            with contextlib.suppress(OSError):
                os.rmdir(home)  # only if still empty
        if before is None:
            with contextlib.suppress(OSError):
                os.unlink(guests_file)
        else:
            write_atomic(guests_file, before, 0o600)
        if isinstance(error, OSError):
            raise GuestError(f"{keys_path}: cannot be written ({error.strerror}); "
                             "nothing was kept") from None
        raise


def _write_authorized_keys(keys_path: str, current: bytes | None, line: str) -> None:
    """The guest's line added to authorized_keys, unless the file changed while the
    person was asked (an existing file keeps its mode)."""
    ssh_folder = os.path.dirname(keys_path)
    if not os.path.lexists(ssh_folder):
        os.mkdir(ssh_folder, 0o700)
    mode = 0o600
    if current is not None:
        mode = stat.S_IMODE(os.lstat(keys_path).st_mode)
        again_bytes = _read_limited(keys_path, core.MAX_AUTHORIZED_KEYS_BYTES,
                                    "authorized_keys", missing_ok=True)
        if again_bytes != current:
            raise GuestError(f"{keys_path} changed while you were asked; nothing "
                             "was kept (run guest add again)")
    write_atomic(keys_path, core.add_line(current or b"", line), mode)


def remove(settings: str, name: str, env: Mapping[str, str]) -> int:
    keys_path = authorized_keys_path(env)
    with _locked(settings):
        kept = read_guests(settings)
        guest = kept.get(name)
        if guest is None:
            raise GuestError(f"no guest named {name}; nothing was done")
        command = core.parse_line(guest.line.encode("latin-1"), 1).option("command") or ""
        current = _read_limited(keys_path, core.MAX_AUTHORIZED_KEYS_BYTES, "authorized_keys",
                                missing_ok=True)
        removed = 0
        if current is not None:
            changed, removed = core.remove_lines(current, guest.key, command)
            if removed:
                mode = stat.S_IMODE(os.lstat(keys_path).st_mode)
                write_atomic(keys_path, changed, mode)
        remaining = [other for other in kept.values() if other.name != name]
        write_atomic(guests_path(settings), core.render_guests(remaining).encode(), 0o600)
    where = (f"its line removed from {keys_path}" if removed else
             f"no line of {keys_path} let it in any more")
    print(shown(f"guest {name} removed: {where}; its folder {guest_home(settings, name)} is "
                "kept (its files)"))
    return 0


def guests(settings: str, arguments: Mapping[str, object], env: Mapping[str, str]) -> int:
    """One `guest` command; GuestError is left to the caller (one line, exit 125), its text
    escaped (`shown`): a refusal may name a path or a key's word from the guest's files."""
    try:
        return _command(settings, arguments, env)
    except GuestError as error:
        raise GuestError(shown(str(error), MAX_SHOWN_REFUSAL_CHARS)) from None
    except OSError as error:
        raise GuestError(shown(f"{error.filename or 'a guest file'}: {error.strerror}",
                               MAX_SHOWN_REFUSAL_CHARS)) from None


def json_shown(document: object) -> bytes:
    """JSON with every character past printable ASCII written as a `\\u` escape (DEL too):
    the same document to a program, nothing a terminal acts on to a person."""
    import json

    text = json.dumps(document, ensure_ascii=True, separators=(",", ":"))
    return text.replace("\x7f", "\\u007f").encode("ascii") + b"\n"


def _command(settings: str, arguments: Mapping[str, object], env: Mapping[str, str]) -> int:
    if arguments["list"]:
        found = read_guests(settings)
        if arguments["--json"]:
            sys.stdout.buffer.write(json_shown({"guests": [
                {"name": guest.name, "key": guest.key.kind,
                 "fingerprint": guest.key.fingerprint(), "comment": guest.key.comment,
                 "spec_file": guest.spec_file, "wire": core.wire_name(guest.name),
                 "folder": guest_home(settings, guest.name)}
                for guest in sorted(found.values(), key=lambda guest: guest.name)]}))
        else:
            for guest in sorted(found.values(), key=lambda guest: guest.name):
                print(shown(f"{guest.name}  {guest.key.kind} {guest.key.fingerprint()}  "
                            f"(from {guest.spec_file})"))
        return 0
    name = str(arguments["NAME"])
    if arguments["add"]:
        return add(settings, name, str(arguments["--spec"]), str(arguments["--key"]), env,
                   sys.argv[0])
    return remove(settings, name, env)
