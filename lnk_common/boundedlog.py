"""Logs in Link's settings that no sandbox can grow without bound.

What a sandbox does decides what its helpers write (a refused call, a refused program,
a DNS query), so every log has a size limit and repeated lines are folded:

- `BoundedLog`: an append-only file of at most MAX_LOG_BYTES, then renamed to `PATH.1`
  (replacing the one before) and begun again; so a log and its one older file hold at
  most twice the limit. Several processes write the same log (every run of a wire, its
  proxy and its relay): each line is one write(2) made under an flock of the file it
  goes to, after checking that file is still the one at PATH (another process may have
  rotated it meanwhile; then it opens the new one and tries again): one stat of PATH
  under the lock, which also gives the size (BoundedLog says why no less will do). So
  no line goes to a file already renamed, and a reader that finds PATH replaced has only
  to read the rest of the file it holds (lnk_wrap.wirelog_view, `log --follow`).
- `Folds` (sans IO): the first line of a kind opens a window of FOLD_SECONDS; the first
  FOLD_AFTER lines of it in the window are written whole (ordinary work, a few refused
  names, is seen name by name), the rest like them are counted, not written, and the
  count is written as one line ("… and N more like this") when the window ends, or when
  the process ends. What "like this" means is the caller's key (an event, a reason's
  class, a kind: never the exact target, since a flood uses a new name every time).
  Nothing is dropped silently: a line is written or counted in a line that is.

Each process folds its own lines (a fold shared through a file would cost a lock and a
read per line); two processes of a wire each write their first line and their count.
Order of a write: fold → flock the open file → reopen if PATH is another file → rotate
if the line would pass the limit → write → unlock.

Kept light (the exec watch starts with every sandbox that lists [commands]): os and
fcntl only.
"""

from __future__ import annotations

import fcntl
import os

__all__ = ["FOLD_AFTER", "FOLD_SECONDS", "MAX_FOLDS", "MAX_LINE_BYTES", "MAX_LOG_BYTES",
           "BoundedLog", "Folds", "clip", "printable", "rotated_path"]

# A log's size before it is rotated: a log and its older file hold at most twice this.
# 1 MiB keeps some 7,000 calls of ordinary work (two lines of ~75 bytes each) in each
# file, and what a sandbox can make Link's settings grow by, whatever it does, at a few
# MiB in all (a wire's log and programs.log; bench/logflood measures it).
MAX_LOG_BYTES = 1 << 20
# How long a fold is open: a flood costs two lines of each kind in this time (the first
# and the count), and a person following the log sees the count this long after.
FOLD_SECONDS = 10.0
# Lines of a kind written whole in a fold's window before the rest are counted.
FOLD_AFTER = 10
# Kinds folded at once; past this a line of a new kind is written whole (never dropped).
MAX_FOLDS = 256
# A line longer than this is cut (saying how much was cut): a path may be 4,096 bytes,
# each shown as \xNN, and one line must never be a large part of the limit.
MAX_LINE_BYTES = 2048


def printable(text: str) -> str:
    """`text` from a sandbox made safe for a terminal and a one-line record: control
    characters (a tab or newline forging a field or a line, an escape driving the
    terminal) shown as \\xNN."""
    if text.isprintable():  # the common case: one pass in C, not a generator a character
        return text
    return "".join(char if char.isprintable() else f"\\x{ord(char) & 0xFF:02x}"
                   for char in text)


def rotated_path(path: str) -> str:
    return path + ".1"


def clip(line: str, limit: int = MAX_LINE_BYTES) -> str:
    """`line` (no newline) cut to `limit` bytes of UTF-8, saying how much was cut."""
    data = line.encode("utf-8", "surrogateescape")
    if len(data) <= limit:
        return line
    kept = data[:max(0, limit - 40)].decode("utf-8", "ignore")
    return f"{kept}… ({len(data) - len(kept.encode())} bytes cut)"


class BoundedLog:
    """An append-only log at `path`, rotated to `path`.1 past `limit` bytes, written
    safely by several processes at once. Lines are given whole, ending in a newline.

    A line costs four system calls: flock, stat of PATH, write, unlock. The file held
    is known by its device and inode, taken once when it is opened (what a descriptor
    refers to never changes); the stat of PATH under the lock says whether PATH is still
    that file and, when it is, that file's size (no other writer appends while the lock
    is held), so no fstat is needed. The stat of PATH itself cannot be left out: a
    descriptor cannot tell by which name, if any, its file is reached, and only a
    lookup of PATH sees a rename that no writer of this module made (a person's `mv`,
    an older version's rotation). A mark the rotating writer puts on the old file (its
    mode, a counter in a shared page) would be seen only by writers that look for it,
    and a line written after any other rename would go to a file already renamed, the
    very thing this class promises never to do; so the stat stays, on every line.
    """

    __slots__ = ("fd", "held", "limit", "path")

    def __init__(self, path: str, limit: int = MAX_LOG_BYTES) -> None:
        self.path = path
        self.limit = limit
        self.fd, self.held = self._open()

    def _open(self) -> tuple[int, tuple[int, int]]:
        """The file at `path` (made when there is none), and its device and inode."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            fd = os.open(self.path, flags, 0o600)
        try:
            status = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd, (status.st_dev, status.st_ino)

    def _lock_current(self) -> int:
        """Lock the file now at `path` (reopening until the one held is it); its size."""
        while True:
            if self.fd < 0:  # the last reopening failed (no descriptor left): again
                self.fd, self.held = self._open()
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                now = os.stat(self.path, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            except BaseException:
                fcntl.flock(self.fd, fcntl.LOCK_UN)  # never left held: others wait on it
                raise
            if now is not None and (now.st_dev, now.st_ino) == self.held:
                return now.st_size
            # Another process rotated it. Closing drops the lock; the number is let go
            # at once, so a failed reopening never leaves it to be locked or closed again
            # after another file took it.
            os.close(self.fd)
            self.fd = -1
            self.fd, self.held = self._open()

    def append(self, data: bytes) -> None:
        size = self._lock_current()
        try:
            if size and size + len(data) > self.limit:
                self._rotate()
            os.write(self.fd, data)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _rotate(self) -> None:
        """Under the old file's lock: rename it to PATH.1, open (and lock) a new PATH.
        A writer waiting for the old file's lock then finds PATH is another file."""
        os.replace(self.path, rotated_path(self.path))
        old = self.fd
        self.fd, self.held = self._open()
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.close(old)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Folds:
    """Which lines are written and which counted, per kind (`key`) and window. Sans IO:
    the clock is passed in; what to write for a count is the caller's."""

    __slots__ = ("next_due", "open", "seconds")

    def __init__(self, seconds: float = FOLD_SECONDS) -> None:
        self.seconds = seconds
        # key -> [when its window ends, lines written in it, lines counted in it]
        self.open: dict[str, list[float]] = {}
        self.next_due = float("inf")

    def admit(self, key: str, now: float) -> bool:
        """Whether the line of `key` is written now (True) or counted (False). Call
        `due(now)` first, so that an ended window's count comes before a new line."""
        entry = self.open.get(key)
        if entry is not None and now < entry[0]:
            if entry[1] < FOLD_AFTER:
                entry[1] += 1
                return True
            entry[2] += 1
            return False
        if entry is None and len(self.open) >= MAX_FOLDS:
            return True
        self.open[key] = [now + self.seconds, 1.0, 0.0]
        self.next_due = min(self.next_due, now + self.seconds)
        return True

    def due(self, now: float) -> list[tuple[str, int]]:
        """The kinds whose window has ended with lines counted, and their counts; their
        windows are closed (the next line of such a kind is written and opens another)."""
        if now < self.next_due:
            return []
        ended = [key for key, (ends, _, _) in self.open.items() if ends <= now]
        found = [(key, int(self.open.pop(key)[2])) for key in ended]
        self.next_due = min((ends for ends, _, _ in self.open.values()),
                            default=float("inf"))
        return [(key, count) for key, count in found if count]

    def all(self) -> list[tuple[str, int]]:
        """Every count not yet written (at exit), and every window closed."""
        found = [(key, int(count)) for key, (_, _, count) in self.open.items() if count]
        self.open.clear()
        self.next_due = float("inf")
        return found
