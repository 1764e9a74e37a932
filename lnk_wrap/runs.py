"""A run on its wire's log: a line when it starts and one when its command has exited,
and the run's summary for a script (`run --summary=FILE`).

Job: several runs of one wire (an agent's sessions, a harness started again) write one
log; the launcher marks where each run begins and ends (lnk_common.wirelog: `started`,
TARGET "-", `run=ID pid=PID`; `exited`, `run=ID status=N seconds=S`), so a person
reading `lnk-sandbox log` can tell them apart, and a script can count what one run did.
While it runs, `sandbox/wires/<wire>/runs/<ID>` says which command it runs (its pid, a
newline, then its words each ended by a NUL, at most MAX_COMMAND_BYTES), for
`lnk-sandbox status`; removed when it ends (one a killed launcher left is told by its pid:
lnk_wrap.status, and removed by the wire's next run's end). Never on the log, which is
every call's, not the command's.

Order: `Run.start` once the sandbox's ways out exist, just before the program may start;
`Run.keep_command` once it has its go-ahead (no start waits on it); `Run.end` after the
command has exited and the wire's helpers have ended (their last `ended` lines are on the
log before it). The summary reads the log between the two.

Trust: the log lines are written by our helpers and the launcher only (Link's settings
are hidden in every sandbox); the summary counts them and quotes no target. Light: os,
time and lnk_common.boundedlog (the launcher's start takes no `re`).
"""

from __future__ import annotations

import os
import time

from lnk_common.boundedlog import MAX_LINE_BYTES, BoundedLog, clip, printable, rotated_path

__all__ = ["MAX_COMMAND_BYTES", "RUNS_FOLDER", "RUN_ID_BYTES", "Run", "summary"]

# A run's id: 8 hex digits, enough to tell apart the runs one log holds (a log and its
# older file hold some 14,000 lines).
RUN_ID_BYTES = 4
# A run's command as kept for `status`: a person's command line, or a harness's with its
# prompt; status shows its start, so more than this is cut (whole words kept).
MAX_COMMAND_BYTES = 4096
RUNS_FOLDER = "runs"


def _log_path(settings: str, wire: str) -> str:
    # lnk_common.wirelog.log_path's, without its import (it takes `re` at every start).
    return os.path.join(settings, "sandbox", "wires", wire, "log")


def _stamp(now: float) -> str:
    """The log's TIME (lnk_common.wirelog): UTC, to the millisecond."""
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
            + f".{int(now % 1 * 1000):03d}Z")


class Run:
    """One run of a wire, as its log shows it."""

    __slots__ = ("began", "command", "ident", "settings", "wire")

    def __init__(self, settings: str, wire: str, command: tuple[str, ...] = ()) -> None:
        self.settings = settings
        self.wire = wire
        self.command = command
        self.ident = os.urandom(RUN_ID_BYTES).hex()
        self.began = time.time()

    def _command_path(self) -> str:
        return os.path.join(self.settings, "sandbox", "wires", self.wire, RUNS_FOLDER,
                            self.ident)

    def keep_command(self) -> None:
        """The run's pid and command where `status` reads them (written whole: a new
        file renamed into place), once the program has its go-ahead: no start waits on
        it. Nothing a run needs: a write that fails is left."""
        words = b""
        for word in self.command:
            encoded = word.encode("utf-8", "surrogateescape") + b"\0"
            if len(words) + len(encoded) > MAX_COMMAND_BYTES:
                break
            words += encoded
        path = self._command_path()
        temporary = f"{path}.tmp"
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, f"{os.getpid()}\n".encode() + words)
            finally:
                os.close(fd)
            os.replace(temporary, path)
        except OSError:
            return

    def _write(self, event: str, detail: str) -> None:
        log = BoundedLog(_log_path(self.settings, self.wire))
        try:
            shown = clip(printable(detail), MAX_LINE_BYTES // 2)
            line = f"{_stamp(time.time())}\t{event}\t-\t{shown}"
            log.append((line + "\n").encode("utf-8", "surrogateescape"))
        finally:
            log.close()

    def _forget_command(self) -> None:
        """This run's file removed, and those of the wire's runs whose launcher is gone
        (killed before it could remove its own): at the end, which nothing waits on."""
        folder = os.path.dirname(self._command_path())
        try:
            names = os.listdir(folder)
        except OSError:
            return  # never kept, or its folder gone: status tells a dead run by its pid
        for name in names:
            path = os.path.join(folder, name)
            if name == self.ident or (not name.endswith(".tmp") and _launcher_gone(path)):
                try:
                    os.unlink(path)
                except OSError:
                    continue  # removed meanwhile by another run's end

    def start(self) -> None:
        self.began = time.time()
        self._write("started", f"run={self.ident} pid={os.getpid()}")

    def end(self, status: int) -> None:
        self._forget_command()
        self._write("exited", f"run={self.ident} status={status} "
                              f"seconds={time.time() - self.began:.3f}")


def _launcher_gone(path: str) -> bool:
    """Whether the run file at `path` names a pid no process has (a pid used again by
    another process since reads as alive: left for status, which tells it by start time)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        pid = os.read(fd, 16).partition(b"\n")[0]
    finally:
        os.close(fd)
    return pid.isdigit() and not _alive(pid.decode())


def _lines(path: str) -> list[str]:
    """The log's lines, its older file's first (whole lines only)."""
    from lnk_common.filewrite import read_whole

    found: list[str] = []
    for name in (rotated_path(path), path):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            data = read_whole(fd)
        finally:
            os.close(fd)
        found += [line.decode("utf-8", "replace")
                  for line in data.split(b"\n") if line]
    return found


def _detail(field: str) -> dict[str, str]:
    head = field.partition("reason=")[0]
    return {key: value for key, _, value in (pair.partition("=") for pair in head.split())}


def _alive(pid: str) -> bool:
    """Whether the launcher of another run still runs (a killed one wrote no exited
    line). A pid reused since says yes: `other_runs` errs toward "maybe shared"."""
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def summary(run: Run | None, status: int, *, settings: str = "") -> dict[str, object]:
    """What a run did, for a script: its exit status; its wire and id; the calls allowed
    and refused (a folded count line counts as its `more=`) between its started and
    exited lines; whether the wire was paused (a pause line meanwhile, or paused at the
    end) and why; whether the kill switch is on; and `other_runs`: another run of the
    wire started or exited meanwhile, so its calls are counted too (the log does not
    say which run of a wire made a call; a run that started before this one and has not
    exited, its launcher alive, counts too). A run with no wire (no proxy: no way out and
    no verb) made no call."""
    from lnk_common import wirestate

    found: dict[str, object] = {
        "status": status, "wire": None, "run": None, "calls": 0, "refused": 0,
        "paused": False, "pause_reason": None, "stopped": False, "other_runs": False}
    if run is None:
        if settings:
            found["stopped"] = wirestate.is_stopped(settings)
        return found
    found.update({"wire": run.wire, "run": run.ident,
                  "stopped": wirestate.is_stopped(run.settings)})
    inside = False
    calls = refused = 0
    earlier: dict[str, str] = {}  # runs started before this one and not exited: their pids
    for line in _lines(_log_path(run.settings, run.wire)):
        fields = line.split("\t")
        if len(fields) != 4:
            continue
        event, detail = fields[1], fields[3]
        if event in ("started", "exited"):
            named = _detail(detail)
            ident = named.get("run", "")
            if ident == run.ident:
                inside = event == "started"
                if inside:
                    found["other_runs"] = any(_alive(pid) for pid in earlier.values())
                    continue
                break
            if inside:
                found["other_runs"] = True
            elif event == "started":
                earlier[ident] = named.get("pid", "")
            else:
                earlier.pop(ident, None)
            continue
        if not inside:
            continue
        named = _detail(detail)
        if event == "allowed" and (named.get("kind") != "dns" or "outside" in named):
            calls += 1  # a DNS answer given here is no call out; one asked outside is
        elif event == "refused":
            more = _detail(detail).get("more", "")
            refused += int(more) if more.isdigit() else 1
        elif event == "paused":
            found["paused"] = True
            found["pause_reason"] = detail.partition("reason=")[2] or None
    found["calls"], found["refused"] = calls, refused
    pause = wirestate.paused(run.settings, run.wire)
    if pause is not None:
        found["paused"] = True
        found["pause_reason"] = str(pause.get("reason", "")) or found["pause_reason"]
    return found
