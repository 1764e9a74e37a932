"""lnk-sandbox status: every wire at a glance, from Link's settings folder only.

Job: for each wire, its sandbox's name (the wire's) and command, calls and refusals in
the last minute, the calls open now, paused or not and why, and questions waiting; and
the kill switch. `--json` is what `lnk agent status` reads (its keys are stable:
docs/components/lnk_wrap.md); `--watch` refreshes the text in place in a terminal.

Reads, never writes (docs/decisions/0043-explain-and-status.md):
    sandbox/stop                        the kill switch (lnk_common.wirestate)
    sandbox/wires/<wire>/log, log.1     the last minute's lines (lnk_common.wirelog)
    sandbox/wires/<wire>/paused         the wire's pause (lnk_common.wirestate)
    sandbox/wires/<wire>/runs/<id>      a running command: pid, words (lnk_wrap.runs)
    sandbox/wires/<wire>/open/<pid>     a helper's open calls (lnk_common.serving)
    sandbox/asks/                       the questions waiting (lnk_ask.queue)
A run or a helper killed before it could remove its file is told by its pid: one that is
gone, a zombie, or that started after the file was written (its pid used again) counts
for nothing. Trust: only Link and the person write Link's settings (hidden in every
sandbox); a command's words are a person's or a guest's, shown as plain ASCII.

Sans IO: `count_recent` (log lines in, counts out) and `render` (the document in, text
out); the shell: `snapshot` and `main`.
"""

from __future__ import annotations

import os
import sys
import time

from lnk_common.boundedlog import rotated_path
from lnk_common.wirelog import log_path

__all__ = ["WATCH_SECONDS", "count_recent", "main", "render", "snapshot"]

# The window the counts are of: "in the last minute", as calls_per_minute counts.
RECENT_SECONDS = 60
# How often --watch looks again: a person reads it at a glance; a look is a few stats
# and a read of each log's tail.
WATCH_SECONDS = 1.0
# A log is read from its end in pieces of this size, until a line older than the window.
_READ_BYTES = 1 << 16
# A run's command shown on its row past this many characters is cut (--json has it whole,
# as kept: lnk_wrap.runs.MAX_COMMAND_BYTES).
MAX_COMMAND_SHOWN = 100
# A pause's or the kill switch's reason shown past this many characters is cut (--json
# has it whole): ours are one line of some 150.
MAX_REASON_SHOWN = 300
# A character escaped for the terminal is at most this many (\U0001f600).
_ESCAPED_CHARS = 10
# The calls a helper may hold open: far past any real wire (a helper's descriptors run
# out first); a larger number in an open-calls file is not ours, and counts for nothing.
MAX_OPEN_CALLS = 1_000_000
EXIT_USAGE = 2


def _stamp(moment: float) -> str:
    """The log's TIME for `moment` (UTC, to the millisecond: lnk_common.wirelog)."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(moment))
            + f".{int(moment % 1 * 1000):03d}Z")


def count_recent(lines: list[str], since: str) -> tuple[int, int]:
    """(calls, refusals) among log `lines` stamped at `since` or later: an allowed call
    (a DNS answer given here is no call; one asked outside is), a refusal (a folded
    count line counts its `more=`). The log's times are UTC ISO: compared as text."""
    calls = refused = 0
    for line in lines:
        fields = line.split("\t")
        if len(fields) != 4 or fields[0] < since:
            continue
        event, detail = fields[1], fields[3].partition("reason=")[0]
        named = {key: value for key, _, value in (pair.partition("=")
                                                   for pair in detail.split())}
        if event == "allowed" and (named.get("kind") != "dns" or "outside" in named):
            calls += 1
        elif event == "refused":
            more = named.get("more", "")
            refused += int(more) if more.isascii() and more.isdigit() else 1
    return calls, refused


# -- the shell: what the settings folder holds now -------------------------------------------


def _tail(path: str, since: str) -> tuple[list[str], bool]:
    """The whole lines of `path` from its end back to the first stamped before `since`;
    and whether the file's start was reached (an older file may hold more)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return [], True
    try:
        end = os.fstat(fd).st_size
        held = b""
        while end > 0:
            start = max(0, end - _READ_BYTES)
            held = os.pread(fd, end - start, start) + held
            end = start
            cut = held.find(b"\n")  # what comes before it may be a line's end only
            first = held[cut + 1:].split(b"\t", 1)[0] if end and cut >= 0 else b""
            if first and first.decode("ascii", "replace") < since:
                break
        lines = held.decode("utf-8", "replace").split("\n")
        if end:
            lines = lines[1:]  # cut where the read began: not a whole line
        return [line for line in lines if line], end == 0
    finally:
        os.close(fd)


def _recent(settings: str, wire: str, since: str, cutoff: float) -> tuple[int, int]:
    """The last minute's (calls, refusals) of `wire`: none when its log was last written
    before `cutoff` (a stat, not a read: a machine keeps a log for every wire ever run)."""
    path = log_path(settings, wire)
    try:
        if os.stat(path).st_mtime < cutoff:
            return 0, 0
    except OSError:
        return 0, 0
    lines, whole = _tail(path, since)
    if whole:  # rotated within the window: its older file holds the rest
        older, _ = _tail(rotated_path(path), since)
        lines = older + lines
    return count_recent(lines, since)


def _boot_time() -> float:
    try:
        with open("/proc/stat", "rb") as handle:
            for line in handle:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return 0.0


def _alive_since(pid: int, written: float, boot: float) -> bool:
    """Whether process `pid` runs and was there when its file was written (not a pid
    used again since): its start (/proc/PID/stat, in clock ticks since boot) is not
    after the file's time (a second's leeway: boot time is in whole seconds)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
    except OSError:
        return False
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return False
    started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return started <= written + 1.0


def _files(folder: str) -> list[tuple[str, bytes, float]]:
    """(name, bytes, modification time) of each regular file in `folder` (not a link,
    not a temporary file), each read up to a limit."""
    found: list[tuple[str, bytes, float]] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        if entry.name.endswith(".tmp") or not entry.is_file(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            found.append((entry.name, os.read(fd, 8192), os.fstat(fd).st_mtime))
        finally:
            os.close(fd)
    return sorted(found)


def _runs(folder: str, boot: float) -> list[dict[str, object]]:
    """The wire's running commands (lnk_wrap.runs), oldest first."""
    found: list[tuple[float, dict[str, object]]] = []
    for name, data, written in _files(os.path.join(folder, "runs")):
        pid_text, _, words = data.partition(b"\n")
        if not pid_text.isdigit() or not _alive_since(int(pid_text), written, boot):
            continue
        command = [word.decode("utf-8", "surrogateescape")
                   for word in words.split(b"\0")[:-1]]
        found.append((written, {"run": name, "pid": int(pid_text), "command": command}))
    return [run for _, run in sorted(found, key=lambda item: item[0])]


def _open_calls(folder: str, boot: float) -> int:
    """The calls the wire's live helpers hold open (lnk_common.serving writes each)."""
    total = 0
    for name, data, written in _files(os.path.join(folder, "open")):
        text = data.strip()
        if (name.isascii() and name.isdigit() and text.isdigit()
                and int(text) <= MAX_OPEN_CALLS
                and _alive_since(int(name), written, boot)):
            total += int(text)
    return total


def _wire(settings: str, wire: str, now: float, boot: float,
          asks: dict[str, int]) -> dict[str, object]:
    from lnk_common import wirestate

    folder = os.path.join(settings, "sandbox", "wires", wire)
    cutoff = now - RECENT_SECONDS
    calls, refused = _recent(settings, wire, _stamp(cutoff), cutoff)
    pause = wirestate.paused(settings, wire)
    runs = _runs(folder, boot)
    added, added_error = _additions(settings, wire)
    return {"wire": wire, "running": bool(runs), "runs": runs,
            "added_hosts": added, "added_error": added_error,
            "calls_last_minute": calls, "refused_last_minute": refused,
            "open_calls": _open_calls(folder, boot), "paused": pause is not None,
            "pause_since": None if pause is None else pause.get("since", "unknown"),
            "pause_reason": None if pause is None else pause.get(
                "reason", "the pause file cannot be read; paused all the same"),
            "asks_waiting": asks.get(wire, 0)}


def _additions(settings: str, wire: str) -> tuple[list[str], str | None]:
    """The hosts and endpoints the person added to the running wire (`lnk-sandbox
    allow`), apart from its spec's, endpoints marked `tcp:`; or why they cannot be read."""
    from lnk_common.additions import AdditionsError, read_entries

    try:
        return [("tcp:" if entry.tcp else "") + entry.host
                for entry in read_entries(settings, wire)], None
    except AdditionsError as error:
        return [], str(error)


def _asks(settings: str) -> tuple[dict[str, int], str | None]:
    """Questions waiting, by wire; or why the queue cannot be read."""
    from lnk_ask.queue import AskQueue, QueueError

    try:
        waiting = AskQueue(settings).waiting()
    except QueueError as error:
        return {}, str(error)
    found: dict[str, int] = {}
    for record in waiting:
        wire = str(record.get("wire", "-"))
        found[wire] = found.get(wire, 0) + 1
    return found, None


def snapshot(settings: str, now: float) -> dict[str, object]:
    """What `status --json` prints: the kill switch, then each wire that runs, holds
    calls open, is paused, made or was refused calls within the last minute, has
    questions waiting or hosts the person added; the other wires by name only
    (`idle_wires`)."""
    from lnk_common import wirestate

    boot = _boot_time()
    asks, asks_error = _asks(settings)
    names: list[str] = []
    wires_error = None
    try:
        names = sorted(entry.name for entry in os.scandir(
            os.path.join(settings, "sandbox", "wires")) if entry.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        pass  # no wire has run here yet
    except OSError as error:  # said, never shown as "no wire"
        wires_error = f"{error.filename}: {error.strerror}"
    wires: list[dict[str, object]] = []
    idle: list[str] = []
    for name in sorted({*names, *asks}):
        found = _wire(settings, name, now, boot, asks)
        if any(found[key] for key in ("running", "paused", "open_calls", "calls_last_minute",
                                      "refused_last_minute", "asks_waiting",
                                      "added_hosts", "added_error")):
            wires.append(found)
        else:
            idle.append(name)
    stop = wirestate.stopped(settings)
    return {"time": _stamp(now), "settings": settings, "stopped": stop is not None,
            "stop_since": None if stop is None else stop.get("since", "unknown"),
            "stop_reason": None if stop is None else stop.get(
                "reason", "the kill switch's file cannot be read; on all the same"),
            "wires": wires, "idle_wires": idle, "wires_error": wires_error,
            "asks_waiting": sum(asks.values()), "asks_error": asks_error}


# -- the text ------------------------------------------------------------------------------

_COLUMNS = ("wire", "state", "calls", "refused", "open", "asks", "command")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _plain(line: str) -> str:
    """A line as the terminal is given it: printable ASCII as it is, anything else
    escaped, never cut (each part was cut before: `_cut`)."""
    if all(" " <= character <= "~" for character in line):
        return line
    from lnk_ask.text import printable

    return printable(line, _ESCAPED_CHARS * len(line))


def _row(wire: dict[str, object], stopped: bool) -> list[str]:
    import shlex

    runs = wire["runs"]
    assert isinstance(runs, list)
    state = ("PAUSED" if wire["paused"] else "STOPPED" if stopped and runs
             else "running" if runs else "idle")
    command = "-"
    if runs:
        words = runs[0]["command"]
        command = _cut(shlex.join(words) if words else "?", MAX_COMMAND_SHOWN)
        if len(runs) > 1:
            command += f" (+{len(runs) - 1} more run{'s' if len(runs) > 2 else ''})"
    return [str(wire["wire"]), state, str(wire["calls_last_minute"]),
            str(wire["refused_last_minute"]), str(wire["open_calls"]),
            str(wire["asks_waiting"]), command]


def render(document: dict[str, object]) -> str:
    """status's text: the kill switch, a row a wire (calls and refusals of the last
    minute), each pause's reason, and what is not shown."""
    lines = [f"lnk-sandbox status at {document['time']}"]
    if document["stopped"]:
        lines.append(f"kill switch: ON since {document['stop_since']}: "
                     f"{_cut(str(document['stop_reason']), MAX_REASON_SHOWN)} (lnk-sandbox stop "
                     "--clear lifts it)")
    else:
        lines.append("kill switch: off")
    wires = document["wires"]
    assert isinstance(wires, list)
    rows = [list(_COLUMNS)] + [_row(wire, bool(document["stopped"])) for wire in wires]
    widths = [max(len(row[index]) for row in rows) for index in range(len(_COLUMNS))]
    for row in rows if wires else []:
        cells = [cell.ljust(width) if index < 2 else cell.rjust(width)
                 for index, (cell, width) in enumerate(zip(row[:-1], widths[:-1], strict=True))]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    for wire in wires:
        added = wire.get("added_hosts")
        if added:
            assert isinstance(added, list)
            lines.append(f"  {wire['wire']} added by you, apart from its spec (lnk-sandbox "
                         f"allowed {wire['wire']}): "
                         f"{_cut(', '.join(map(str, added)), MAX_REASON_SHOWN)}")
        if wire.get("added_error"):
            lines.append(f"  {wire['wire']} additions cannot be read (none is taken): "
                         f"{_cut(str(wire['added_error']), MAX_REASON_SHOWN)}")
        if wire["paused"]:
            lines.append(f"  {wire['wire']} paused since {wire['pause_since']}: "
                         f"{_cut(str(wire['pause_reason']), MAX_REASON_SHOWN)} (lnk-sandbox resume "
                         f"{wire['wire']})")
    if not wires:
        lines.append("no wire runs, holds a call open, is paused or was used in the last "
                     "minute")
    lines += _footer(document)
    return "\n".join(_plain(line) for line in lines) + "\n"


def _footer(document: dict[str, object]) -> list[str]:
    idle = document["idle_wires"]
    assert isinstance(idle, list)
    said = ["calls and refused: in the last minute; open: calls open now"]
    if idle:
        said.append(f"{len(idle)} other wire{'s' if len(idle) != 1 else ''} idle "
                    "(lnk-sandbox log WIRE)")
    if document["wires_error"]:
        said.append("the wires cannot be listed: "
                    + _cut(str(document["wires_error"]), MAX_REASON_SHOWN))
    if document["asks_error"]:
        said.append("questions: cannot be read: "
                    + _cut(str(document["asks_error"]), MAX_REASON_SHOWN))
    elif document["asks_waiting"]:
        said.append(f"{document['asks_waiting']} question(s) waiting: lnk-sandbox asks")
    return said


# -- the verb ------------------------------------------------------------------------------


def _watch(settings: str) -> int:
    """The text, redrawn in place every WATCH_SECONDS on the terminal's other screen,
    each line cut to the terminal's width (a wrapped line would push the rest down);
    the screen is given back at Ctrl-C or SIGTERM."""
    import signal

    def interrupted(_signal: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    out = sys.stdout
    out.write("\x1b[?1049h\x1b[?25l")  # the other screen; no cursor
    try:
        while True:
            width = os.get_terminal_size(out.fileno()).columns
            shown = render(snapshot(settings, time.time())).splitlines()
            shown.insert(1, f"(every {WATCH_SECONDS:g} s; Ctrl-C ends)")
            out.write("\x1b[H" + "".join(line[:width] + "\x1b[K\r\n" for line in shown)
                      + "\x1b[J")
            out.flush()
            time.sleep(WATCH_SECONDS)
    except KeyboardInterrupt:
        return 0
    finally:
        out.write("\x1b[?25h\x1b[?1049l")
        out.flush()


def main(settings: str, *, as_json: bool, watch: bool) -> int:
    """`lnk-sandbox status [--json | --watch]`."""
    if watch:
        if not sys.stdout.isatty():
            print("lnk-sandbox: status --watch redraws a terminal, and this output is "
                  "none; --json is for a script", file=sys.stderr)
            return EXIT_USAGE
        return _watch(settings)
    document = snapshot(settings, time.time())
    if as_json:
        import json

        print(json.dumps(document, ensure_ascii=True, indent=2))
    else:
        sys.stdout.write(render(document))
    return 0
