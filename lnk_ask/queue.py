"""The queue of questions in Link's settings: `sandbox/asks/<id>.json`, `<id>.answer`.

Job: make a question answerable where there is no screen and no terminal (a box, an
agent in the background), by `lnk-sandbox answer ID yes|no` from any shell of the person,
and be the one place where a question is decided, whichever way the answer came.

Trust: Link's settings folder is hidden in every sandbox, so nothing inside can list,
read or write a question or an answer. Below the settings root nothing is trusted:
`sandbox/` and `asks/` are opened one name at a time with O_NOFOLLOW|O_DIRECTORY (a link
planted there is refused, never followed), `asks/` must be ours and 0700; every file is
made 0600 with O_CREAT|O_EXCL|O_NOFOLLOW and read with O_NOFOLLOW|O_NONBLOCK, regular
and ours only (as lnk_common/secrets.py does for the store).

One decision per question, made once: the answer file `<id>.answer` is put in place by
link(2) from a temp file written whole, which fails with EEXIST when an answer is there
already. Whoever links first decides: `lnk-sandbox answer`, or the asker itself for an
answer from the dialog or the terminal, or for the timeout (then the asker reads the
answer that beat it and takes that one). So the first answer wins, an answer is never
half read, and `answer` can tell the person exactly whether their answer was the one
taken. The asker removes `<id>.json` when the question ends and leaves `<id>.answer`
(a late `answer` then finds it and says who decided); both are swept later (below).

Order of an ask: sweep what dead askers left → count this wire's waiting questions
(MAX_WAITING_PER_WIRE) → `<id>.json` linked into place (a new id on EEXIST) → wait →
decide (link `<id>.answer`) → remove `<id>.json`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import time

from lnk_ask.text import MAX_KEPT_QUESTION_CHARS, MAX_WHOLE_QUESTION_CHARS
from lnk_common.filewrite import write_synced

__all__ = [
    "ANSWER_KEEP_SECONDS",
    "ASKS_FOLDER",
    "DEAD_GRACE_SECONDS",
    "MAX_RECORD_BYTES",
    "MAX_WAITING_PER_WIRE",
    "TERMINAL_LOCK_PREFIX",
    "AskQueue",
    "QueueError",
    "id_problem",
    "new_id",
]

# Under the settings root, as docs/decisions/0015-settings-folder.md lays out.
ASKS_FOLDER = ("sandbox", "asks")
# A question's id: 12 hex digits (48 random bits): short to type in `answer ID yes`,
# never the same as another waiting one (made with O_EXCL, a new one on a clash).
ID_HEX_DIGITS = 12
# Questions of one wire waiting at once. A sandbox decides how many calls it makes; each
# not allowed in advance asks. Past this the next is no at once: a flood of calls must
# not become a flood of dialogs on the person's screen, nor a queue nobody can read.
MAX_WAITING_PER_WIRE = 8
# A question record holds the question as the ways show it (cut at
# lnk_ask.text.MAX_QUESTION_CHARS, or a page's whole URL, MAX_WHOLE_QUESTION_CHARS) and
# kept whole for `asks --show` (MAX_KEPT_QUESTION_CHARS), printable ASCII that JSON may write
# twice as long (a backslash, a quote), and a few short fields; a larger file is not ours
# and is refused unread.
MAX_RECORD_BYTES = 2 * (MAX_KEPT_QUESTION_CHARS + MAX_WHOLE_QUESTION_CHARS) + 16 * 1024
# The lock that keeps one question at a time on a terminal: a file per terminal in the
# asks folder (hidden in every sandbox), named by the terminal's device number. Never a
# lock on the terminal itself: /dev/tty is one inode for the whole machine, in every
# sandbox, and a program there that locked it would hold every question off every
# terminal.
TERMINAL_LOCK_PREFIX = "terminal-"
# A question whose asker died (SIGKILL) stays in the folder; past its deadline and this
# grace it is not listed, refused by `answer`, and removed by the next ask.
DEAD_GRACE_SECONDS = 30.0
# An answer file outlives its question this long, so a late `answer` is told who
# decided instead of "no such question"; then the next ask removes it.
ANSWER_KEEP_SECONDS = 600.0

_FOLDER_MODE = 0o700
_FILE_MODE = 0o600
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_PREFIX = ".tmp-"
_HEX = frozenset("0123456789abcdef")
ANSWERS = ("yes", "no")


class QueueError(Exception):
    """The queue cannot be used, or an answer cannot be given; one line."""


def id_problem(text: str) -> str | None:
    """Why `text` is not a question's id, or None (sans IO; no path is made of a bad one)."""
    if len(text) != ID_HEX_DIGITS or not set(text) <= _HEX:
        return f"a question's id is {ID_HEX_DIGITS} hex digits (see lnk-sandbox asks)"
    return None


def new_id() -> str:
    return secrets.token_hex(ID_HEX_DIGITS // 2)


class AskQueue:
    """The asks folder of one settings root. Every access goes by the folder's
    descriptor, opened at each call (never by a path followed again)."""

    __slots__ = ("root",)

    def __init__(self, settings_root: str) -> None:
        self.root = settings_root

    # -- the folder ---------------------------------------------------------------------

    def _folder(self, *, make: bool) -> int | None:
        if make:
            try:
                os.makedirs(self.root, mode=_FOLDER_MODE, exist_ok=True)
            except OSError as error:
                raise QueueError(f"cannot make Link's settings folder {self.root}: "
                                 f"{error.strerror}") from None
        try:
            folder = os.open(self.root, _OPEN_FOLDER)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise QueueError(f"Link's settings folder {self.root} cannot be opened: "
                             f"{error.strerror}") from None
        shown = self.root
        for part in ASKS_FOLDER:
            shown = os.path.join(shown, part)
            if make:
                try:
                    os.mkdir(part, _FOLDER_MODE, dir_fd=folder)
                except FileExistsError:
                    pass
                except OSError as error:
                    os.close(folder)
                    raise QueueError(f"cannot make {shown}: {error.strerror}") from None
            try:
                opened = os.open(part, _OPEN_FOLDER, dir_fd=folder)
            except FileNotFoundError:
                os.close(folder)
                return None
            except OSError as error:
                os.close(folder)
                raise QueueError(f"{shown} is not a folder (a link or a file is there); "
                                 f"refused, nothing followed: {error.strerror}") from None
            os.close(folder)
            folder = opened
        info = os.fstat(folder)
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
            os.close(folder)
            raise QueueError(f"{shown} must be yours and 0700 (it is "
                             f"{stat.S_IMODE(info.st_mode):04o}, owner {info.st_uid}); refused")
        return folder

    @staticmethod
    def _place(folder: int, name: str, data: bytes) -> bool:
        """Put `data` at `name`, whole, only if nothing is there (link(2) of a temp file
        written and synced first); False when something is."""
        temporary = f"{_TEMP_PREFIX}{name}-{secrets.token_hex(8)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, _FILE_MODE, dir_fd=folder)
        try:
            write_synced(fd, data, _FILE_MODE)
            try:
                os.link(temporary, name, src_dir_fd=folder, dst_dir_fd=folder,
                        follow_symlinks=False)
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)

    @staticmethod
    def _read(folder: int, name: str) -> dict[str, object] | None:
        """The JSON object at `name`: None when there is none; QueueError when what is
        there is not a regular file of ours, 0600, of a sane size, holding an object."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=folder)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise QueueError(f"{name} cannot be opened (a link is refused): "
                             f"{error.strerror}") from None
        try:
            info = os.fstat(fd)
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                    or stat.S_IMODE(info.st_mode) != _FILE_MODE
                    or info.st_size > MAX_RECORD_BYTES):
                raise QueueError(f"{name} is not a record of ours (a regular file, yours, "
                                 "0600, small); refused")
            data = os.read(fd, MAX_RECORD_BYTES + 1)
        finally:
            os.close(fd)
        try:
            found = json.loads(data)
        except ValueError:
            raise QueueError(f"{name} does not hold JSON; refused") from None
        if not isinstance(found, dict):
            raise QueueError(f"{name} does not hold a JSON object; refused")
        return found

    # -- the asker's side ------------------------------------------------------------------

    def open_question(self, wire: str, title: str, question: str, deadline: float, *,
                      allows: str = "", whole: str = "") -> str:
        """Put a question in the queue (texts already printable: the question as shown, what
        a yes allows, the question kept whole, `question` when not given); its id.
        `deadline` is wall time (seconds since the epoch), for `asks` and `answer` in
        other processes."""
        folder = self._folder(make=True)
        if folder is None:
            raise QueueError("the asks folder vanished while it was made")
        try:
            now = time.time()
            waiting = 0
            for name, record in self._records(folder, now, sweep=True):
                del name
                if record.get("wire") == wire:
                    waiting += 1
            if waiting >= MAX_WAITING_PER_WIRE:
                raise QueueError(f"{waiting} questions of the wire {wire} wait already "
                                 f"(at most {MAX_WAITING_PER_WIRE}); this one is no")
            for _ in range(8):
                ident = new_id()
                record = {"id": ident, "wire": wire, "title": title, "question": question,
                          "allows": allows, "whole": whole or question,
                          "since": round(now, 3), "deadline": round(deadline, 3),
                          "pid": os.getpid()}
                if self._place(folder, f"{ident}.json",
                               json.dumps(record).encode() + b"\n"):
                    return ident
            raise QueueError("no free id for a question (eight clashes)")
        except OSError as error:
            raise QueueError(f"the question cannot be queued: {error.strerror}") from None
        finally:
            os.close(folder)

    def decide(self, ident: str, answer: str, how: str) -> tuple[str, str]:
        """Decide the question `ident` with `answer` (how it came), unless an answer is
        there already: the answer that stands, and how it came."""
        folder = self._folder(make=False)
        if folder is None:
            raise QueueError("the asks folder is gone")
        try:
            record = json.dumps({"answer": answer, "how": how}).encode() + b"\n"
            if self._place(folder, f"{ident}.answer", record):
                return answer, how
            return self._answer_in(folder, ident)
        except OSError as error:
            raise QueueError(f"the answer cannot be kept: {error.strerror}") from None
        finally:
            os.close(folder)

    def answered(self, ident: str) -> tuple[str, str] | None:
        """The answer already given to `ident`, or None."""
        folder = self._folder(make=False)
        if folder is None:
            raise QueueError("the asks folder is gone")
        try:
            if self._read(folder, f"{ident}.answer") is None:
                return None
            return self._answer_in(folder, ident)
        finally:
            os.close(folder)

    def _answer_in(self, folder: int, ident: str) -> tuple[str, str]:
        found = self._read(folder, f"{ident}.answer")
        if found is None:
            raise QueueError(f"the answer to {ident} vanished")
        answer, how = found.get("answer"), found.get("how")
        if answer not in ANSWERS or not isinstance(how, str):
            raise QueueError(f"the answer to {ident} is not yes or no; refused")
        return str(answer), how

    def terminal_lock(self, device: int) -> int:
        """The lock file of the terminal `device` (st_rdev), opened (made 0600 when
        missing): a descriptor to flock. QueueError when it cannot be, or is not a regular
        file of ours."""
        folder = self._folder(make=True)
        if folder is None:
            raise QueueError("the asks folder vanished while it was made")
        name = f"{TERMINAL_LOCK_PREFIX}{os.major(device)}-{os.minor(device)}.lock"
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, _FILE_MODE, dir_fd=folder)
        except OSError as error:
            raise QueueError(f"the terminal's lock {name} cannot be opened (a link is "
                             f"refused): {error.strerror}") from None
        finally:
            os.close(folder)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            os.close(fd)
            raise QueueError(f"the terminal's lock {name} is not a regular file of yours; "
                             "refused")
        return fd

    def close_question(self, ident: str) -> None:
        folder = self._folder(make=False)
        if folder is None:
            return
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{ident}.json", dir_fd=folder)
        finally:
            os.close(folder)

    # -- the person's side -----------------------------------------------------------------

    def waiting(self) -> list[dict[str, object]]:
        """The questions that wait now, oldest first (what `asks` lists)."""
        folder = self._folder(make=False)
        if folder is None:
            return []
        try:
            found = [record for _, record in self._records(folder, time.time(), sweep=False)]
        finally:
            os.close(folder)
        return sorted(found, key=lambda record: (float(str(record.get("since", 0))),
                                                 str(record.get("id"))))

    def question(self, ident: str) -> dict[str, object]:
        """The waiting question `ident`'s record (`asks --show`); QueueError (one line)
        for a bad id or a question that does not wait."""
        problem = id_problem(ident)
        if problem:
            raise QueueError(problem)
        folder = self._folder(make=False)
        if folder is None:
            raise QueueError(f"no question {ident} waits (see lnk-sandbox asks)")
        try:
            for name, record in self._records(folder, time.time(), sweep=False):
                if name == f"{ident}.json":
                    return record
        finally:
            os.close(folder)
        raise QueueError(f"no question {ident} waits (see lnk-sandbox asks)")

    def answer(self, ident: str, answer: str) -> None:
        """`lnk-sandbox answer ID yes|no`: QueueError (one line) for an unknown or ended
        question, or one answered already (saying how)."""
        problem = id_problem(ident)
        if problem:
            raise QueueError(problem)
        if answer not in ANSWERS:
            raise QueueError("the answer is yes or no")
        folder = self._folder(make=False)
        if folder is None:
            raise QueueError(f"no question {ident} waits (see lnk-sandbox asks)")
        try:
            record = self._read(folder, f"{ident}.json")
            if record is None:
                given = self._read(folder, f"{ident}.answer")
                if given is not None:
                    raise QueueError(f"the question {ident} has ended: answered "
                                     f"{given.get('answer')} ({given.get('how')})")
                raise QueueError(f"no question {ident} waits (see lnk-sandbox asks)")
            if not _alive(record, time.time()):
                raise QueueError(f"the question {ident} has ended (its time ran out); "
                                 "nothing was answered")
            data = json.dumps({"answer": answer, "how": "queue"}).encode() + b"\n"
            if not self._place(folder, f"{ident}.answer", data):
                standing, how = self._answer_in(folder, ident)
                raise QueueError(f"the question {ident} was answered already: {standing} "
                                 f"({how}); your answer was not taken")
        except OSError as error:
            raise QueueError(f"the answer cannot be kept: {error.strerror}") from None
        finally:
            os.close(folder)

    # -- both ----------------------------------------------------------------------------

    def _records(self, folder: int, now: float, *,
                 sweep: bool) -> list[tuple[str, dict[str, object]]]:
        """The questions waiting (not ended, not answered); with `sweep`, remove what dead
        askers and old answers left."""
        names = os.listdir(folder)
        present = set(names)
        found = []
        for name in names:
            ident, dot, kind = name.partition(".")
            if not dot or id_problem(ident) is not None:
                continue
            if kind == "answer":
                if sweep and f"{ident}.json" not in present:
                    _remove_if_older(folder, name, now - ANSWER_KEEP_SECONDS)
                continue
            if kind != "json":
                continue
            try:
                record = self._read(folder, name)
            except QueueError:
                continue  # not a record of ours: never listed, never answered
            if record is None or record.get("id") != ident:
                continue
            if not _alive(record, now):
                if sweep and not _alive(record, now - DEAD_GRACE_SECONDS):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=folder)
                continue
            if f"{ident}.answer" in present:
                continue
            found.append((name, record))
        return found


def _alive(record: dict[str, object], now: float) -> bool:
    deadline = record.get("deadline")
    return isinstance(deadline, (int, float)) and now < deadline


def _remove_if_older(folder: int, name: str, before: float) -> None:
    with contextlib.suppress(FileNotFoundError):
        if os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime < before:
            os.unlink(name, dir_fd=folder)
