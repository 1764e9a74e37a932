"""The wire's log: one line per call allowed, ended or refused, in Link's settings.

    sandbox/wires/<wire>/log

Every call on a proxy, as a host and port, never a path, a query or a body: a path can
carry what an agent sends out, and the log is for seeing where it went. A line when a
call is allowed and another when it ends, so a connection held open for hours is in the
log from its start. The line format is stable (docs/decisions/0010-the-wire-filtering-proxy.md):

    TIME<TAB>EVENT<TAB>TARGET<TAB>DETAIL
    2026-11-30T06:40:00.123Z  allowed  example.com:443  id=7 kind=connect
    2026-11-30T06:40:02.456Z  ended    example.com:443  id=7 sent=517 received=6120 seconds=2.333
    2026-11-30T06:40:03.000Z  refused  other.com:443    reason=the name is not in hosts

TIME is UTC; EVENT one of allowed, ended, refused, paused (the wire paused by its proxy,
TARGET "-", the reason in DETAIL), started and exited (a run of the wire began, and its
command exited: written by the launcher, lnk_wrap.runs, TARGET "-", DETAIL `run=ID
pid=PID` and `run=ID status=N seconds=S`: the runs of one wire told apart), changed
(the person changed the wire's additions: `lnk-sandbox allow`, `disallow`; TARGET the
host, or "-" for `--clear`, DETAIL `change=allow|disallow|allow-tcp|disallow-tcp|clear
by=USER uid=N`); TARGET host:port (an IPv6 address in brackets, "-" when the head was
refused before a target was read); DETAIL key=value pairs, the reason last and whole.
Tabs, newlines and other control characters in any field are written as \\xNN; a line
is at most MAX_LINE_BYTES.

The log is bounded (lnk_common.boundedlog): rotated to `log.1` at MAX_LOG_BYTES, and
repeated lines folded. Folded, within FOLD_SECONDS, are refusals of one kind (`fold_key`:
the same EVENT, the same `kind=`/`type=`, the same class of reason: the reason with the
target's name taken out and every number, quoted text and the tail past
REASON_CLASS_CHARS left out; never the exact target, since a flood uses a new name each
time) and repeats of one DNS answer given here (the same name and type). Their count is
one line when the fold's window ends, or when the process ends:

    2026-11-30T06:40:10.001Z  refused  *  kind=dns type=A more=4172 seconds=10
        reason=… and 4172 more like this: <name> is not a name this sandbox may reach
    (one line, here cut in two)

A call the kill switch or a pause closed says so in its ended line, `closed=kill-switch`
or `closed=pause` after its bytes (`WireLog.closing`, set by the process's watch and by
the pause itself before it closes the open calls); one whose host `disallow` took away,
`closed=taken-away` (`WireLog.closed_calls`).

An allowed call and its ended line are never folded (each is a call out, with its
bytes), nor a pause, nor an SRV/TXT asked outside (each is a call).
"""

from __future__ import annotations

import os
import re
import time

from lnk_common.boundedlog import (
    FOLD_SECONDS,
    MAX_LINE_BYTES,
    BoundedLog,
    Folds,
    clip,
    printable,
)

__all__ = ["EVENTS", "REASON_CLASS_CHARS", "WireLog", "ended_detail", "fold_key", "log_path",
           "parse_line", "printable", "reason_class"]

EVENTS = ("allowed", "ended", "refused", "paused", "started", "exited", "changed")


def ended_detail(call: int, sent: int, received: int, started: float,
                 failure: str = "") -> str:
    """An `ended` line's detail, the one shape of every call's (the proxy's and the
    relay's): its id, the bytes each way, its seconds since `started` (time.monotonic),
    and how it failed (" error=…"), if it did."""
    return (f"id={call} sent={sent} received={received} "
            f"seconds={time.monotonic() - started:.3f}{failure}")


def log_path(settings: str, wire: str) -> str:
    return os.path.join(settings, "sandbox", "wires", wire, "log")


# A reason's class is told by this many characters of it (after the target's name, the
# numbers and quoted text are taken out): enough to tell our reasons apart, and what
# follows is where a reason quotes what it was sent.
REASON_CLASS_CHARS = 80
# The keys of DETAIL that say what kind of line it is (the others say which call: its
# id, its answer, its bytes).
_KIND_KEYS = ("kind", "type")
# Quoted text (closed: an apostrophe, as in "sandbox's", is no quote) and parenthesised
# text (to the end when not closed): where a reason quotes what it was sent.
_QUOTED = re.compile(r"'[^'\s]*'|'[^']*'(?=[\s:;,.)]|$)|\"[^\"]*\"|\([^)]*\)?")
_NUMBERS = re.compile(r"[0-9]+")


# The last whole second stamped and its text (one tuple, replaced whole, so that a thread
# never reads one second's text with another's key): strftime and gmtime were most of a
# line's formatting, for a text that changes once a second.
_SECOND: tuple[float, str] = (float("nan"), "")


def _stamp(now: float) -> str:
    global _SECOND
    whole, text = _SECOND
    if now // 1 != whole:  # gmtime takes the floor of `now`, as `//` does
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        _SECOND = (now // 1, text)
    return f"{text}.{int(now % 1 * 1000):03d}Z"


def reason_class(reason: str, target: str) -> str:
    """What refusals "like this" share: the reason without the target's name (nor its
    address or port), numbers, quoted or parenthesised text, cut to REASON_CLASS_CHARS."""
    host = target.rpartition(":")[0] if target.count(":") == 1 or target.startswith("[") \
        else target
    host = host.strip("[]")
    found = reason
    for name in {target, host} - {"", "-", "*"}:
        found = found.replace(name, "<name>")
    found = _QUOTED.sub("…", found)
    return _NUMBERS.sub("#", found)[:REASON_CLASS_CHARS]


def _kinds(detail: str) -> str:
    head = detail.partition("reason=")[0]
    return " ".join(pair for pair in head.split() if pair.partition("=")[0] in _KIND_KEYS)


def fold_key(event: str, target: str, detail: str) -> str | None:
    """The kind of line this is, for folding (None: never folded)."""
    if event == "refused":
        reason = detail.partition("reason=")[2]
        return f"refused\t*\t{_kinds(detail)}\t{reason_class(reason, target)}"
    if event == "allowed" and "kind=dns" in detail and "outside=" not in detail:
        return f"allowed\t{printable(target)}\t{_kinds(detail)}\t"
    return None


class WireLog:
    """Appends lines to a wire's bounded log, folding repeated ones. Each line is one
    write(2) under the log's flock, so lines of processes sharing a wire never
    interleave, and a rotation by one never loses another's."""

    __slots__ = ("closed_calls", "closing", "file", "folds")

    def __init__(self, settings: str, wire: str) -> None:
        self.file = BoundedLog(log_path(settings, wire))
        self.folds = Folds()
        # What is closing the open calls now ("kill-switch", "pause"; "" when nothing):
        # every ended line written meanwhile is a call it closed, and says so.
        self.closing = ""
        # Calls closed one by one (their task: a host `disallow` took away), and why: a
        # call's ended line says so, as a switch's do (`Wire.sever_calls` fills it).
        self.closed_calls: dict[object, str] = {}

    def write(self, event: str, target: str, detail: str) -> None:
        now = time.time()
        self._write_counts(self.folds.due(now), now)
        closing = self.closing
        if event == "ended" and not closing and self.closed_calls:
            closing = self._closed_call()
        if event == "ended" and closing:
            head, reason, rest = detail.partition("reason=")
            detail = f"{head.rstrip()} closed={closing} {reason}{rest}".strip()
        key = fold_key(event, target, detail)
        if key is not None and not self.folds.admit(key, now):
            return
        self._append(now, event, target, detail)

    def _append(self, now: float, event: str, target: str, detail: str) -> None:
        # Each field cut on its own, so a line cut to its limit still has its four.
        head = f"{_stamp(now)}\t{event}\t{clip(printable(target), MAX_LINE_BYTES // 2)}\t"
        line = head + clip(printable(detail), MAX_LINE_BYTES - len(head.encode()))
        self.file.append((line + "\n").encode("utf-8", "surrogateescape"))

    def _write_counts(self, counts: list[tuple[str, int]], now: float) -> None:
        for key, count in counts:
            event, target, kinds, reason = key.split("\t", 3)
            detail = f"{kinds} more={count} seconds={FOLD_SECONDS:g}".lstrip()
            if event == "refused":
                detail += f" reason=… and {count} more like this: {reason}"
            self._append(now, event, target, detail)

    def _closed_call(self) -> str:
        """Why the current call was closed one by one, or ""."""
        import asyncio  # loaded already: only a serving helper closes calls one by one

        try:
            task = asyncio.current_task()
        except RuntimeError:  # no loop runs here
            return ""
        return self.closed_calls.get(task, "")

    def flush_due(self) -> None:
        """Write the counts of folds whose window has ended (called a few times a
        second by the process's watch, so a count is never held much past its window)."""
        now = time.time()
        self._write_counts(self.folds.due(now), now)

    def close(self) -> None:
        """Write every count still held, then close."""
        self._write_counts(self.folds.all(), time.time())
        self.file.close()


def parse_line(line: str) -> dict[str, str] | None:
    """A log line as a mapping (time, event, target, and each detail key), or None."""
    fields = line.rstrip("\n").split("\t")
    if len(fields) != 4 or fields[1] not in EVENTS:
        return None
    found = {"time": fields[0], "event": fields[1], "target": fields[2]}
    detail = fields[3]
    if "reason=" in detail:
        detail, _, reason = detail.partition("reason=")
        found["reason"] = reason
    for pair in detail.split():
        key, _, value = pair.partition("=")
        found[key] = value
    return found
