"""lnk-sandbox guest add / list / remove: guests over SSH, for a person (the files).

The pure part (authorized_keys lines, guests.toml, the words shown) is lnk_wrap.guests;
this module reads and writes the two files, asks, and holds the lock.

`guest add` order: the name → the spec, read as `run` reads it (lnk_common.spec: a
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
           "read_guests"]

GUESTS_FILE = "guests.toml"
# Each guest's own folder (like an agent's, agents/NAME), in Link's settings.
GUESTS_FOLDER = "guests"
_LOCK_FILE = ("sandbox", "guests.lock")
# How long a person has to answer `guest add`'s question (lnk_ask's default).
ASK_SECONDS = 120


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
        data = os.read(fd, limit + 1)
        while len(data) <= limit:
            more = os.read(fd, limit + 1 - len(data))
            if not more:
                break
            data += more
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


def outside_paths(env: Mapping[str, str], program: str
                  ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What runs as the owner, outside, when a guest connects (lnk_wrap.guests.
    written_outside_problem): the points, then the trees of code; each as named and as
    it resolves."""
    from lnk_wrap.helpers import package_root
    from lnk_wrap.launch import LaunchError, find_bwrap

    homes = {os.path.normpath(home) for home in (pwd.getpwuid(os.getuid()).pw_dir,
                                                  env.get("HOME", "")) if os.path.isabs(home)}
    points = [os.path.dirname(authorized_keys_path(env))]
    for home in homes:
        points += [home, *(os.path.join(home, name) for name in core.SHELL_FILES)]
    # lnk-sandbox, its interpreter, its packages (an editable install's are on no sys.path
    # entry), every library folder it imports from, and the bubblewrap it starts.
    trees = [program, os.path.realpath(sys.executable), package_root(),
             *(folder for folder in sys.path if os.path.isabs(folder) and os.path.isdir(folder))]
    with contextlib.suppress(LaunchError):  # no bubblewrap: no session starts anyway
        trees.append(find_bwrap(env))

    def both(paths: list[str]) -> tuple[str, ...]:
        found: list[str] = []
        for path in paths:
            for form in (os.path.normpath(path), os.path.realpath(path)):
                if form not in found and form != "/":
                    found.append(form)
        return tuple(found)

    return both(points), both(trees)


def refuse_written_outside(policy: Policy, env: Mapping[str, str], program: str,
                           where: str) -> None:
    problem = core.written_outside_problem(policy, *outside_paths(env, program))
    if problem:
        raise GuestError(f"{where}: a guest's spec may not write what runs outside: {problem}")


def kept_policy(settings: str, guest: Guest, env: Mapping[str, str]) -> Policy:
    """The guest's kept spec read again by the spec loader, as a run reads a spec: every
    path in it checked first to be still what it was (none became a link since)."""
    from lnk_common.spec import SpecError, parse_document

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


def _ask(settings: str, name: str, key: core.PublicKey, shown: list[str]) -> None:
    from lnk_ask.asker import ask

    question = (f"Let the guest {name} in over SSH with the key {key.kind} "
                f"{key.fingerprint()}{' (' + key.comment + ')' if key.comment else ''}? "
                "Each session runs in a sandbox that: " + "; ".join(shown) + ".")
    print(f"lnk-sandbox: asking you (a dialog, this terminal, or `lnk-sandbox asks` and "
          f"`lnk-sandbox answer ID yes`) within {ASK_SECONDS} s", file=sys.stderr)
    answer = ask(settings, core.wire_name(name), f"Guest over SSH: {name}", question,
                 ASK_SECONDS)
    if not answer.yes:
        why = f"({answer.how}{': ' + answer.reason if answer.reason else ''})"
        raise GuestError(f"guest {name} not added: the answer was no {why}; nothing was kept")


def add(settings: str, name: str, spec_file: str, key_file: str, env: Mapping[str, str],
        argv0: str) -> int:
    from lnk_common.spec import SpecError, load_spec, parse_document

    problem = core.name_problem(name)
    if problem:
        raise GuestError(f"{name!r}: {problem}; nothing was kept")
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
    program = own_program(argv0)
    refuse_written_outside(policy, env, program, f"{policy.spec}: files.write")
    key_path = os.path.abspath(key_file)
    key_data = _read_limited(key_path, core.MAX_KEY_FILE_BYTES, "the key file",
                             missing_ok=False)
    assert key_data is not None
    key = core.parse_public_key(key_data, key_path)
    command = core.forced_command(program, settings, name)
    line = core.forced_line(command, key, name)
    keys_path = authorized_keys_path(env)
    with _locked(settings):
        kept = read_guests(settings)
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
        home = guest_home(settings, name)
        document = core.guest_document(policy)
        guest = Guest(name, key, line, policy.spec, document)
        # The kept form must mean exactly what was read: read it back now.
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
        shown = core.describe(policy, home)
        print(f"guest {name}, key {key.kind} {key.fingerprint()}"
              f"{' (' + key.comment + ')' if key.comment else ''}, from {policy.spec}:")
        for item in shown:
            print(f"  {item}")
        sys.stdout.flush()
        _ask(settings, name, key, shown)
        _private_folder(os.path.join(settings, GUESTS_FOLDER))
        made_home = not os.path.lexists(home)
        _private_folder(home)
        guests_file = guests_path(settings)
        before = _read_limited(guests_file, core.MAX_GUESTS_BYTES, "guests.toml",
                               missing_ok=True)
        write_atomic(guests_file, core.render_guests([*kept.values(), guest]).encode(), 0o600)
        try:
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
    print(f"guest {name} added: {keys_path} lets the key in, into a sandbox only "
          f"(wire {core.wire_name(name)}; own folder {home})")
    return 0


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
    print(f"guest {name} removed: {where}; its folder {guest_home(settings, name)} is kept "
          "(its files)")
    return 0


def guests(settings: str, arguments: Mapping[str, object], env: Mapping[str, str]) -> int:
    """One `guest` verb; GuestError is left to the caller (one line, exit 125)."""
    if arguments["list"]:
        found = read_guests(settings)
        if arguments["--json"]:
            import orjson

            sys.stdout.buffer.write(orjson.dumps({"guests": [
                {"name": guest.name, "key": guest.key.kind,
                 "fingerprint": guest.key.fingerprint(), "comment": guest.key.comment,
                 "spec_file": guest.spec_file, "wire": core.wire_name(guest.name),
                 "folder": guest_home(settings, guest.name)}
                for guest in sorted(found.values(), key=lambda guest: guest.name)]}) + b"\n")
        else:
            for guest in sorted(found.values(), key=lambda guest: guest.name):
                print(f"{guest.name}  {guest.key.kind} {guest.key.fingerprint()}  "
                      f"(from {guest.spec_file})")
        return 0
    name = str(arguments["NAME"])
    if arguments["add"]:
        return add(settings, name, str(arguments["--spec"]), str(arguments["--key"]), env,
                   sys.argv[0])
    return remove(settings, name, env)
