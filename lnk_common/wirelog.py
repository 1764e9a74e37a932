"""The wire's log: one line per call allowed, ended or refused, in Link's settings.

    sandbox/wires/<wire>/log

Every call on a proxy, as a host and port, never a path, a query or a body: a path can
carry what an agent sends out, and the log is for seeing where it went. A line when a
call is allowed and another when it ends, so a connection held open for hours is in the
log from its start. The line format is stable (docs/ARCHITECTURE.md):

    TIME<TAB>EVENT<TAB>TARGET<TAB>DETAIL
    2026-11-30T06:40:00.123Z  allowed  example.com:443  id=7 kind=connect
    2026-11-30T06:40:02.456Z  ended    example.com:443  id=7 sent=517 received=6120 seconds=2.333
    2026-11-30T06:40:03.000Z  refused  other.com:443    reason=the name is not in hosts

TIME is UTC; EVENT one of allowed, ended, refused, paused (the wire paused by its proxy,
TARGET "-", the reason in DETAIL); TARGET host:port (an IPv6 address in
brackets, "-" when the head was refused before a target was read); DETAIL key=value
pairs, the reason last and whole. Tabs, newlines and other control characters in any
field are written as \\xNN.
"""

from __future__ import annotations

import os
import time

__all__ = ["EVENTS", "WireLog", "log_path", "parse_line", "printable"]

EVENTS = ("allowed", "ended", "refused", "paused")


def log_path(settings: str, wire: str) -> str:
    return os.path.join(settings, "sandbox", "wires", wire, "log")


def printable(text: str) -> str:
    """`text` from a sandbox made safe for a terminal and a one-line record: control
    characters (a tab or newline forging a field or a line, an escape driving the
    terminal) shown as \\xNN."""
    return "".join(char if char.isprintable() else f"\\x{ord(char) & 0xFF:02x}"
                   for char in text)


class WireLog:
    """Appends lines; each line one write(2) on an O_APPEND file, so lines of processes
    sharing a wire never interleave."""

    __slots__ = ("fd",)

    def __init__(self, settings: str, wire: str) -> None:
        path = log_path(settings, wire)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                          | os.O_CLOEXEC, 0o600)

    def write(self, event: str, target: str, detail: str) -> None:
        now = time.time()
        stamp = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                 + f".{int(now % 1 * 1000):03d}Z")
        line = f"{stamp}\t{event}\t{printable(target)}\t{printable(detail)}\n"
        os.write(self.fd, line.encode("utf-8", "surrogateescape"))

    def close(self) -> None:
        os.close(self.fd)


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
