"""Stand-ins: what stands in for a missing dot file during a run, and who holds it.

A write grant lets a program make a .git that was not there, and a mount covers only
what exists. So the launcher puts an empty folder (or, for a settings file git reads,
an empty file) there for the run, and the mount plan binds it read only. Removing one
that another live sandbox on the same folder has mounted over would undo that mount in
its namespace (the kernel detaches mounts on a removed folder), so each stand-in is
listed here with the runs holding it, and is removed only when no live run holds it,
and only while it is still the empty one that was made (same device and inode, still
empty). Nothing is ever removed that cannot be shown to be ours.

Layout, in Link's settings folder (hidden in every sandbox):
  sandbox/runs/<id>           one per live run; its launcher holds an flock on it for its
                              whole life, so the lock is the liveness (a killed run's lock
                              is gone, a reused pid has no lock, a reboot clears all); the
                              text (pid, start, boot) is for people.
  sandbox/placeholders/lock   taken (flock) around every read-change-write of the index.
  sandbox/placeholders/index  one line per stand-in: `KIND DEV INO RUNS PATH`, RUNS a
                              comma list of run ids ("-" for none), PATH last with `\\`
                              and newline escaped. A line whose DEV is "-" was being made
                              when its run stopped (the intent is written first, so a
                              power loss between the two leaves a line, not an orphan).

Stale entries (runs killed by SIGKILL or a power loss) are swept by the next run that
takes the lock. The index is written to a temporary file and renamed over; the intent
is synced to disk before any stand-in is made.

The person sees these called "placeholders": the folder `sandbox/placeholders/` (runs in
flight read its index), `lnk-sandbox check`'s list and `--json` key, and the notes and
refusals below. Those words are user-visible and keep their spelling; in the code a
placeholder is only a stand-in key or secret (docs/glossary.md).

StandInError is the only exception that leaves this module for a refusal.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["FILE", "FOLDER", "Run", "StandInError", "hold", "index_entries", "index_exists",
           "release"]

FOLDER = "folder"
FILE = "file"
_KINDS = (FOLDER, FILE)
_NO_RUNS = "-"
_RUN_ID_LENGTH = 16  # hex digits of 8 random bytes
# The index's folder in Link's settings keeps its first name: runs in flight read it,
# and `check` shows it.
_INDEX_FOLDER = "placeholders"


class StandInError(Exception):
    """A stand-in cannot be put in place; nothing runs."""


def _sandbox_folder(settings: str, *parts: str) -> str:
    return os.path.join(settings, "sandbox", *parts)


def _ensure_folder(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    if os.path.islink(path) or not os.path.isdir(path):
        raise StandInError(f"{path} is not a folder")


class Run:
    """This launcher's run: a random id whose file it keeps locked until it ends."""

    __slots__ = ("fd", "id", "path")

    def __init__(self, settings: str) -> None:
        folder = _sandbox_folder(settings, "runs")
        _ensure_folder(folder)
        self.id = os.urandom(_RUN_ID_LENGTH // 2).hex()
        self.path = os.path.join(folder, self.id)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.write(self.fd, f"pid {os.getpid()}\nstarted {time.time():.3f}\nboot {_boot_id()}\n"
                 .encode())

    def end(self) -> None:
        try:  # noqa: SIM105 (contextlib is one more import at every start)
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self.fd)


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return "unknown"


def _alive(settings: str, run_id: str) -> bool:
    """A run is alive while its launcher holds the lock on its file."""
    if len(run_id) != _RUN_ID_LENGTH or not all(c in "0123456789abcdef" for c in run_id):
        return False
    path = _sandbox_folder(settings, "runs", run_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    try:  # noqa: SIM105
        os.unlink(path)  # a run that ended without a word (SIGKILL, power loss)
    except FileNotFoundError:
        pass
    return False


# -- the index ------------------------------------------------------------------------


class _Entry:
    __slots__ = ("dev", "ino", "kind", "runs")

    def __init__(self, kind: str, dev: int | None, ino: int | None, runs: list[str]) -> None:
        self.kind = kind
        self.dev = dev
        self.ino = ino
        self.runs = runs


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace("\n", "\\n")


def _unescape(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append("\n" if text[index + 1] == "n" else text[index + 1])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _parse_index(data: str) -> tuple[dict[str, _Entry], list[str]]:
    """The entries, and a note for each line that is not one (kept out: never removed)."""
    entries: dict[str, _Entry] = {}
    notes: list[str] = []
    for number, line in enumerate(data.split("\n"), 1):
        if not line:
            continue
        fields = line.split(" ", 4)
        if len(fields) != 5 or fields[0] not in _KINDS or not fields[4].startswith("/"):
            notes.append(f"line {number} of the placeholder index is malformed; ignored")
            continue
        kind, dev, ino, runs, path = fields
        try:
            device = None if dev == "-" else int(dev)
            inode = None if ino == "-" else int(ino)
        except ValueError:
            notes.append(f"line {number} of the placeholder index is malformed; ignored")
            continue
        entries[_unescape(path)] = _Entry(
            kind, device, inode, [] if runs == _NO_RUNS else runs.split(",")
        )
    return entries, notes


def _format_index(entries: dict[str, _Entry]) -> str:
    lines = []
    for path, entry in entries.items():
        dev = "-" if entry.dev is None else str(entry.dev)
        ino = "-" if entry.ino is None else str(entry.ino)
        runs = ",".join(entry.runs) or _NO_RUNS
        lines.append(f"{entry.kind} {dev} {ino} {runs} {_escape(path)}\n")
    return "".join(lines)


class _Index:
    """The index under its lock: `with _Index(settings) as index: … index.save()`."""

    __slots__ = ("entries", "folder", "lock_fd", "notes", "settings")

    def __init__(self, settings: str) -> None:
        self.settings = settings
        self.folder = _sandbox_folder(settings, _INDEX_FOLDER)
        self.lock_fd = -1
        self.entries: dict[str, _Entry] = {}
        self.notes: list[str] = []

    def __enter__(self) -> _Index:
        _ensure_folder(self.folder)
        self.lock_fd = os.open(os.path.join(self.folder, "lock"),
                               os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            with open(os.path.join(self.folder, "index"), encoding="utf-8",
                      errors="surrogateescape") as handle:
                self.entries, self.notes = _parse_index(handle.read())
        except FileNotFoundError:
            pass
        return self

    def __exit__(self, *_exc: object) -> None:
        os.close(self.lock_fd)

    def save(self, *, durable: bool = False) -> None:
        """Write the index whole and rename it over the old one. `durable` syncs it
        first: only the intent written before stand-ins are made needs to survive a
        power loss (a lost later write leaves lines the next run sweeps, never an
        orphan), and each sync costs a journal commit (2-4 ms here)."""
        final = os.path.join(self.folder, "index")
        temporary = f"{final}.{os.getpid()}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, _format_index(self.entries).encode("utf-8", "surrogateescape"))
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, final)
        if durable:
            folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(folder)
            finally:
                os.close(folder)

    def sweep(self, leaving: str = "") -> list[str]:
        """Drop dead runs (and `leaving`) from every entry; remove each stand-in no
        live run holds, if it is still ours. Returns a note for each one left in place."""
        notes: list[str] = []
        alive: dict[str, bool] = {}
        for path in list(self.entries):
            entry = self.entries[path]
            entry.runs = [
                run for run in entry.runs
                if run != leaving and alive.setdefault(run, _alive(self.settings, run))
            ]
            if entry.runs:
                continue
            note = _remove_if_ours(path, entry)
            if note:
                notes.append(note)
            del self.entries[path]
        return notes


def _remove_if_ours(path: str, entry: _Entry) -> str:
    """Remove the stand-in at `path` if it is still the empty one made; else a note."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as error:
        return f"placeholder {path} cannot be checked ({error.strerror}); left in place"
    if entry.dev is not None and (info.st_dev, info.st_ino) != (entry.dev, entry.ino):
        return f"{path} is no longer the placeholder made for the run; left as it is"
    try:
        if entry.kind == FOLDER and stat.S_ISDIR(info.st_mode):
            os.rmdir(path)
        elif entry.kind == FILE and stat.S_ISREG(info.st_mode) and info.st_size == 0:
            os.unlink(path)
        else:
            return f"{path} is no longer the empty placeholder made for the run; left as it is"
    except OSError as error:
        return f"placeholder {path} was changed during the run ({error.strerror}); left as it is"
    return ""


def _make(path: str, kind: str) -> os.stat_result | None:
    """Make the empty stand-in; None when nothing may be made there (so the program,
    which has fewer rights than this launcher, cannot make it either)."""
    parent, name = os.path.split(path)
    try:
        parent_fd = os.open(parent, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if kind == FOLDER:
            os.mkdir(name, 0o755, dir_fd=parent_fd)
        else:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644, dir_fd=parent_fd))
        return os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError:
        return None
    finally:
        os.close(parent_fd)


def index_exists(settings: str) -> bool:
    return os.path.exists(_sandbox_folder(settings, _INDEX_FOLDER, "index"))


def hold(settings: str, run: Run | None, wanted: dict[str, str],
         present: dict[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """Put each wanted stand-in in place (or join the live runs already holding it),
    and join every stand-in another run made that is among the `present` paths (held
    as found): removing it at that run's end would undo this run's mount. With nothing
    wanted and no run, only sweep what killed runs left.

    Returns (path → kind of every wanted path now in place, to bind read only; notes to
    say). Something found where a stand-in goes (made meanwhile) is returned too and
    bound read only as found, but is not ours; a link there is refused.
    """
    in_place: dict[str, str] = {}
    if not wanted and not index_exists(settings):
        return in_place, []
    with _Index(settings) as index:
        before = len(index.entries)
        notes = index.notes + index.sweep()
        if run is None:
            if wanted:
                raise StandInError("placeholders are wanted but the run has no identity")
            if len(index.entries) != before:
                index.save()
            return in_place, notes
        joined = False
        for path in present or {}:
            entry = index.entries.get(path)
            if entry is not None and entry.dev is not None and _same(path, entry):
                entry.runs.append(run.id)
                joined = True
        making: list[str] = []
        for path, kind in wanted.items():
            entry = index.entries.get(path)
            try:
                info: os.stat_result | None = os.lstat(path)
            except FileNotFoundError:
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise StandInError(
                    f"{path} is a link where a placeholder goes; the program could point it "
                    "elsewhere; refusing"
                )
            if entry is not None and info is not None and entry.dev is not None and (
                (info.st_dev, info.st_ino) == (entry.dev, entry.ino)
            ):
                entry.runs.append(run.id)
                joined = True
                in_place[path] = kind
            elif info is not None:
                index.entries.pop(path, None)  # not ours (any more): bound as it is
                in_place[path] = kind
            else:
                index.entries[path] = _Entry(kind, None, None, [run.id])
                making.append(path)
        if making:
            # The intent first, synced: a power loss now leaves a line, not an orphan.
            index.save(durable=True)
        for path in making:
            entry = index.entries[path]
            try:
                made = _make(path, entry.kind)
            except FileExistsError:
                del index.entries[path]
                if os.path.islink(path):
                    index.save()
                    raise StandInError(
                        f"{path} became a link where a placeholder goes; refusing"
                    ) from None
                in_place[path] = entry.kind
                continue
            if made is None:
                del index.entries[path]
                continue
            entry.dev, entry.ino = made.st_dev, made.st_ino
            in_place[path] = entry.kind
        if making or joined or len(index.entries) != before:
            index.save()
    return in_place, notes


def _same(path: str, entry: _Entry) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (entry.dev, entry.ino)


def release(settings: str, run: Run) -> list[str]:
    """Let go of this run's stand-ins; remove those no live run holds any more."""
    with _Index(settings) as index:
        notes = index.sweep(leaving=run.id)
        index.save()
    return notes


def index_entries(settings: str) -> Iterator[tuple[str, str, list[str]]]:
    """(path, kind, runs) of every listed stand-in, for `check` and the tests."""
    try:
        with open(_sandbox_folder(settings, _INDEX_FOLDER, "index"), encoding="utf-8",
                  errors="surrogateescape") as handle:
            entries, _ = _parse_index(handle.read())
    except FileNotFoundError:
        return
    for path, entry in entries.items():
        yield path, entry.kind, list(entry.runs)
