"""macOS: which programs Seatbelt refused, named from its own reports (`log stream`).

Seatbelt writes a line to the system log for each program it refuses (`Sandbox:
NAME(PID) deny(1) process-exec* PATH`), and nothing else on a Mac sees an exec without
privileges a person's lnk does not have. So the parent outside reads them with `log
stream` while the program runs and says which file the list refused, as the exec watch
does on Linux. Naming is advice, never a decision: Seatbelt alone decides what runs.

A report names a process, not a sandbox. A line of a process still there and not of
this run (not the run's first process or below it) is left out; one whose process is
gone cannot be told apart and is named, so another sandbox's refusal at the same moment
may be named too (a stated gap: lnk_wrap.check_macos).

The core (`parse_report`, `Naming`) is sans IO; `LogReader` runs `log` (found on the
PATH given: /usr/bin/log on a Mac) and `parent_of` asks `ps`, which a Mac and Linux both
have. Anything `log` prints that is not a report (its "Filtering the log data" line
first) is passed over.

`learn --platform macos` reads the other verdict: its profile allows every program with
report (lnk_wrap.seatbelt, `(allow process-exec* (with report))`), and the reader names
the allowed ones, each once. The seed says Seatbelt logs each such program as it runs;
the exact words of an allowed report are not seen here (no Mac), so the pattern takes
`allow` with or without the `(N)` a refusal's line has: a line of another shape is passed
over, and the run then offers no program, which `learn` says (never a wrong one).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["LEARN_PREDICATE", "LOG", "MAX_REPORT_BYTES", "PREDICATE", "LogReader", "Naming",
           "Report", "log_stream_argv", "parent_of", "parse_report"]

LOG = "log"
# Seatbelt's own reports of refused programs, nothing else (the sender is the sandbox's
# kernel extension; the message names the operation).
PREDICATE = 'sender == "Sandbox" AND eventMessage CONTAINS "deny(1) process-exec"'
# A learning run's: every program's report, allowed or refused.
LEARN_PREDICATE = 'sender == "Sandbox" AND eventMessage CONTAINS "process-exec"'
# A report is a line of a hundred bytes and a path (macOS's PATH_MAX is 1,024): a longer
# line is no report, and is passed over rather than kept.
MAX_REPORT_BYTES = 4096
# How far up the process tree a report's process is followed to the run's first one:
# deeper than any real run's tree, short of a loop.
MAX_PROCESS_DEPTH = 256
# `ps` answers at once; a machine that does not is not waited on.
PS_SECONDS = 5
_REPORT = re.compile(r"Sandbox: (?P<name>.{1,64}?)\((?P<pid>[0-9]{1,10})\) "
                     r"(?P<verdict>deny\([0-9]+\)|allow(?:\([0-9]+\))?) "
                     r"process-exec\*? (?P<path>/.*)\Z")


def log_stream_argv(program: str, *, learning: bool = False) -> list[str]:
    """`log stream` with the sandbox's predicate, one line a report (sandbox-runtime's
    style, `compact`)."""
    return [program, "stream", "--style", "compact", "--predicate",
            LEARN_PREDICATE if learning else PREDICATE]


class Report:
    """One program reported: the process that tried, its pid, the file, and whether
    Seatbelt allowed it (a learning run's) or refused it."""

    __slots__ = ("allowed", "name", "path", "pid")

    def __init__(self, name: str, pid: int, path: str, *, allowed: bool = False) -> None:
        self.name = name
        self.pid = pid
        self.path = path
        self.allowed = allowed


def parse_report(line: str) -> Report | None:
    """The report a line of `log stream` holds, or None (any other line)."""
    if len(line.encode("utf-8", "surrogateescape")) > MAX_REPORT_BYTES:
        return None
    found = _REPORT.search(line.rstrip("\r\n"))
    if found is None:
        return None
    return Report(found["name"], int(found["pid"]), found["path"],
                  allowed=found["verdict"].startswith("allow"))


class Naming:
    """The refused programs of one run (a learning run's: the allowed ones), each named
    once, from lines fed in order. `parent_of(pid)`: the process's parent, or None when
    it is gone."""

    __slots__ = ("allowed", "named", "parent_of", "root")

    def __init__(self, root: int, parent_of: Callable[[int], int | None], *,
                 allowed: bool = False) -> None:
        self.root = root
        self.parent_of = parent_of
        self.allowed = allowed
        self.named: list[str] = []

    def of_this_run(self, pid: int) -> bool:
        """Whether a report of `pid` is named: the run's first process or below it, or a
        process gone (which cannot be told apart)."""
        current = pid
        for _ in range(MAX_PROCESS_DEPTH):
            if current == self.root:
                return True
            parent = self.parent_of(current)
            if parent is None:
                return current == pid  # gone: named; a gone parent is no link to the run
            if parent in (0, current):
                return False
            current = parent
        return False

    def feed(self, line: str) -> str | None:
        """The file a line newly names, or None."""
        report = parse_report(line)
        if (report is None or report.allowed != self.allowed or report.path in self.named
                or not self.of_this_run(report.pid)):
            return None
        self.named.append(report.path)
        return report.path


def parent_of(pid: int) -> int | None:
    """The parent of `pid` by `ps` (a Mac has no /proc), or None when it is gone."""
    try:
        done = subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True,
                              text=True, timeout=PS_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    answer = done.stdout.strip()
    return int(answer) if done.returncode == 0 and answer.isdigit() else None


class LogReader:
    """`log stream` read while the run's program runs; `stop()` gives what it named."""

    __slots__ = ("naming", "process", "thread")

    def __init__(self, root: int, env: Mapping[str, str],
                 parents: Callable[[int], int | None] = parent_of, *,
                 learning: bool = False) -> None:
        program = shutil.which(LOG, path=env.get("PATH", ""))
        if program is None:
            raise FileNotFoundError(f"no {LOG} program on the PATH: refused programs go "
                                    "unnamed (Seatbelt still refuses them)")
        self.naming = Naming(root, parents, allowed=learning)
        self.process = subprocess.Popen(log_stream_argv(program, learning=learning),
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        stdin=subprocess.DEVNULL, env=dict(env))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.naming.feed(raw[:MAX_REPORT_BYTES + 1].decode("utf-8", "surrogateescape"))

    def stop(self) -> list[str]:
        """Stops `log` and returns the files named, in order."""
        self.process.terminate()
        self.process.wait()
        self.thread.join()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return list(self.naming.named)
