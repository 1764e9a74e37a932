"""lnk-sandbox log: a wire's log, for a person (or --json, a line of JSON per call).

A wire's log is rotated (lnk_common.boundedlog): `log` becomes `log.1` past its limit
and a new `log` begins. Shown: `log.1`, then `log`. `--follow` keeps reading the file it
holds and, once `log` names another file, reads the rest of the one held (no process
writes to a file after it was renamed: each line is written under the file's lock,
after checking it is still the one at `log`), then the new one from its start: no line
lost, none shown twice. Only if the log was rotated twice between two looks (a whole
file written in FOLLOW_SECONDS) may lines be missing between; that is said on stderr.

What is shown may be cut (`LogFilter`, sans IO): `--since` (lines from a time on: the
log's times are UTC ISO, so one comparison of text), `--refused` (refusals and pauses
only), `-n` (the last N lines of each wire that pass the others, as tail does for each
of its files; with --follow, every new one that passes after them). A bad --since or -n
is a usage mistake: one line, exit 2.
"""

from __future__ import annotations

import os
import sys
import time

from lnk_common.boundedlog import rotated_path
from lnk_common.wirelog import log_path, parse_line

__all__ = ["FOLLOW_SECONDS", "LogFilter", "LogFilterError", "parse_since", "show_log"]

# How often --follow looks for new lines.
FOLLOW_SECONDS = 0.25
# Read at once from a log (a log is at most a few MiB; this keeps each look short).
_READ_BYTES = 1 << 16


EXIT_USAGE = 2
# --since's relative forms: a number and one of these units, ago.
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class LogFilterError(Exception):
    """--since or -n cannot be read; one line, a usage mistake."""


def parse_since(text: str, now: float) -> str:
    """The log time (UTC, as the log writes it) from which lines are shown: `text` is a
    number of s, m, h or d ago (10m), or an ISO date or time (2026-05-01,
    2026-05-01T09:30[:15], with Z or +HH:MM, else this machine's local time)."""
    word = text.strip()
    if word[:-1].isdigit() and word[-1:] in _UNITS:
        moment = now - int(word[:-1]) * _UNITS[word[-1]]
    else:
        import datetime

        try:
            parsed = datetime.datetime.fromisoformat(word.replace("Z", "+00:00"))
        except ValueError:
            raise LogFilterError(f"--since {text!r}: give 10m, 2h, 1d (ago) or an ISO time "
                                 "such as 2026-05-01T09:30") from None
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # a person's time is their machine's
        moment = parsed.timestamp()
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment))
            + f".{int(moment % 1 * 1000):03d}Z")


class LogFilter:
    """Which lines `log` shows (sans IO): each line's event and time against the
    options, and the last N of each wire."""

    __slots__ = ("last", "refused", "since")

    def __init__(self, *, since: str | None = None, last: int | None = None,
                 refused: bool = False) -> None:
        self.since = since
        self.last = last
        self.refused = refused

    @classmethod
    def from_options(cls, since: str | None, last: str | None, refused: bool,
                     now: float) -> LogFilter:
        count = None
        if last is not None:
            if not last.isdigit():
                raise LogFilterError(f"-n {last!r}: give a number of lines")
            count = int(last)
        return cls(since=parse_since(since, now) if since is not None else None,
                   last=count, refused=refused)

    def passes(self, line: str) -> bool:
        fields = line.split("\t", 2)
        if len(fields) < 3:
            return False
        if self.refused and fields[1] not in ("refused", "paused"):
            return False
        return self.since is None or fields[0] >= self.since

    def first(self, lines: list[str]) -> list[str]:
        """What is shown of the lines there at the start."""
        kept = [line for line in lines if self.passes(line)]
        if self.last is not None:
            kept = kept[len(kept) - self.last:] if self.last else []
        return kept

    def more(self, lines: list[str]) -> list[str]:
        """What is shown of lines that came later (--follow)."""
        return [line for line in lines if self.passes(line)]


def _wires(settings: str) -> list[str]:
    folder = os.path.join(settings, "sandbox", "wires")
    try:
        return sorted(name for name in os.listdir(folder)
                      if os.path.isfile(log_path(settings, name)))
    except FileNotFoundError:
        return []


def _render(wire: str, line: str, as_json: bool) -> str | None:
    entry = parse_line(line)
    if entry is None:
        return None
    if as_json:
        import orjson

        return orjson.dumps({"wire": wire, **entry}).decode()
    detail = line.rstrip("\n").split("\t")[3]
    return f"{entry['time']}  {wire}  {entry['event']:7}  {entry['target']}  {detail}"


def _open(path: str) -> tuple[int, tuple[int, int]] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    info = os.fstat(fd)
    return fd, (info.st_dev, info.st_ino)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


class _Reader:
    """A wire's log read a whole line at a time, across its rotations."""

    __slots__ = ("fd", "identity", "partial", "path", "wire")

    def __init__(self, path: str, wire: str) -> None:
        self.path = path
        self.wire = wire
        self.partial = b""
        self.fd: int | None = None
        self.identity: tuple[int, int] | None = None

    def start(self) -> list[str]:
        """What is there now: the older file, then the current one."""
        while True:
            older, current = _open(rotated_path(self.path)), _open(self.path)
            if older is None or _identity(rotated_path(self.path)) == older[1]:
                break  # no rotation between the two opens
            os.close(older[0])
            if current is not None:
                os.close(current[0])
        lines = []
        if older is not None:
            lines = self._whole(older[0])
            os.close(older[0])
        if current is not None:
            self.fd, self.identity = current
            lines += self._read()
        return lines

    def _read(self) -> list[str]:
        """The whole lines added to the file held (a line being written waits)."""
        assert self.fd is not None
        chunks = []
        while chunk := os.read(self.fd, _READ_BYTES):
            chunks.append(chunk)
        data = self.partial + b"".join(chunks)
        *lines, self.partial = data.split(b"\n")
        return [line.decode("utf-8", "replace") + "\n" for line in lines]

    def _whole(self, fd: int) -> list[str]:
        data = b""
        while chunk := os.read(fd, _READ_BYTES):
            data += chunk
        return [line.decode("utf-8", "replace") + "\n" for line in data.split(b"\n") if line]

    def follow(self) -> list[str]:
        """The lines added since the last look, across a rotation."""
        if self.fd is None:
            opened = _open(self.path)
            if opened is None:
                return []
            self.fd, self.identity = opened
        lines = self._read()
        now = _identity(self.path)
        if now is None or now == self.identity:
            return lines
        # Rotated: the file held is final (no writer writes to it once renamed).
        held = self.identity
        lines += self._read()
        if self.partial:
            lines.append(self.partial.decode("utf-8", "replace") + "\n")
        self.partial = b""
        older, opened = _open(rotated_path(self.path)), _open(self.path)
        os.close(self.fd)
        self.fd, self.identity = None, None
        if older is not None:
            if older[1] != held:
                # Rotated again since: the older file came after the one held, and
                # another may have come between and gone.
                print(f"lnk-sandbox: the log of {self.wire} was rotated more than once "
                      f"between two looks; lines between may be missing", file=sys.stderr)
                lines += self._whole(older[0])
            os.close(older[0])
        if opened is not None:
            self.fd, self.identity = opened
            lines += self._read()
        return lines


def show_log(settings: str, wire: str | None, *, follow: bool, as_json: bool,
             since: str | None = None, last: str | None = None, refused: bool = False) -> int:
    try:
        chosen = LogFilter.from_options(since, last, refused, time.time())
    except LogFilterError as error:
        print(f"lnk-sandbox: {error}", file=sys.stderr)
        return EXIT_USAGE
    wires = [wire] if wire else _wires(settings)
    if wire and not os.path.isfile(log_path(settings, wire)):
        print(f"lnk-sandbox: no log for a wire named {wire!r} "
              f"(known: {', '.join(_wires(settings)) or 'none'})", file=sys.stderr)
        return 1
    readers = [_Reader(log_path(settings, name), name) for name in wires]
    try:
        found = [(reader.wire, chosen.first(reader.start())) for reader in readers]
        while True:
            for name, lines in found:
                for line in lines:
                    shown = _render(name, line, as_json)
                    if shown is not None:
                        print(shown, flush=follow)
            if not follow:
                return 0
            time.sleep(FOLLOW_SECONDS)
            found = [(reader.wire, chosen.more(reader.follow())) for reader in readers]
    except KeyboardInterrupt:
        return 0
    finally:
        for reader in readers:
            if reader.fd is not None:
                os.close(reader.fd)
