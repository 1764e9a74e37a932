"""The refused programs named from Seatbelt's reports (lnk_wrap.seatbelt_log), here.

No Mac: a fake `log` on PATH prints reports in the form Seatbelt writes them (the
fixture tests/data/macos/log_stream.txt, its "Filtering the log data" line first, made
from the documented form, not captured on a Mac) with the pids of a real process tree,
and the reader runs it as it would run /usr/bin/log, reading `ps` for the tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_wrap.seatbelt_log import (
    LEARN_PREDICATE,
    MAX_REPORT_BYTES,
    PREDICATE,
    LogReader,
    Naming,
    log_stream_argv,
    parent_of,
    parse_report,
)

from .conftest import fuzz, wait_until

FIXTURE = Path(__file__).parent / "data" / "macos" / "log_stream.txt"
FAKE_LOG = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_LOG_ARGS"
cat "$FAKE_LOG_FIXTURE"
exec sleep 600
"""


def _gone_pid() -> int:
    done = subprocess.Popen(["/bin/true"])
    done.wait()
    return done.pid


def test_P1_the_reader_names_this_runs_refused_programs_only(tmp_path: Path) -> None:
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "log").write_text(FAKE_LOG)
    (bin_folder / "log").chmod(0o755)
    # The run: its first process, a child, a grandchild (as sandbox-exec, a shell, a program).
    run = subprocess.Popen(["/bin/sh", "-c", "/bin/sh -c 'sleep 600 & echo $!; wait' & "
                            "echo $!; wait"], stdout=subprocess.PIPE, text=True)
    started: list[int] = []
    try:
        assert run.stdout is not None
        child, grandchild = int(run.stdout.readline()), int(run.stdout.readline())
        started += [grandchild, child]
        fixture = FIXTURE.read_text()
        for word, pid in (("{CHILD}", child), ("{GRANDCHILD}", grandchild),
                          ("{OTHER}", os.getpid()), ("{GONE}", _gone_pid())):
            fixture = fixture.replace(word, str(pid))
        (tmp_path / "fixture").write_text(fixture)
        env = {"PATH": f"{bin_folder}:{os.environ['PATH']}",
               "FAKE_LOG_ARGS": str(tmp_path / "args"),
               "FAKE_LOG_FIXTURE": str(tmp_path / "fixture")}
        reader = LogReader(run.pid, env)
        expected = ["/usr/bin/curl", "/usr/local/bin/gone", '/Users/u/a path (with) "quotes"/x']
        wait_until(lambda: reader.naming.named == expected or None, "the three reports named")
        assert reader.stop() == expected
        assert reader.process.returncode is not None
        assert (tmp_path / "args").read_text().splitlines() == [
            "stream", "--style", "compact", "--predicate", PREDICATE]
    finally:
        for pid in started:  # the processes this test started, by their ids
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.kill()
        run.wait()


def test_no_log_program_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="Seatbelt still refuses them"):
        LogReader(os.getpid(), {"PATH": str(tmp_path)})


def test_parent_of_reads_ps() -> None:
    assert parent_of(os.getpid()) == os.getppid()
    assert parent_of(_gone_pid()) is None


def test_naming_follows_the_tree_and_says_each_file_once() -> None:
    parents = {30: 20, 20: 10, 10: 1, 1: 0, 40: 1}
    naming = Naming(10, parents.get)
    line = "Sandbox: sh({pid}) deny(1) process-exec* {path}"
    assert naming.feed(line.format(pid=30, path="/bin/a")) == "/bin/a"
    assert naming.feed(line.format(pid=30, path="/bin/a")) is None  # once
    assert naming.feed(line.format(pid=40, path="/bin/b")) is None  # still there, not ours
    assert naming.feed(line.format(pid=99, path="/bin/c")) == "/bin/c"  # gone: named
    assert naming.feed(line.format(pid=10, path="/bin/d")) == "/bin/d"  # the run's first
    looping = Naming(10, {5: 6, 6: 5}.get)
    assert looping.feed(line.format(pid=5, path="/bin/e")) is None
    assert naming.named == ["/bin/a", "/bin/c", "/bin/d"]


def test_parse_report_table() -> None:
    report = parse_report("x (Sandbox) Sandbox: my prog(123) deny(1) process-exec* /a b\n")
    assert report is not None and (report.name, report.pid, report.path) == (
        "my prog", 123, "/a b")
    for line in ("Filtering the log data using \"…\"",
                 "Sandbox: sh(1) deny(1) file-read-data /etc/x",
                 "Sandbox: sh(x) deny(1) process-exec* /bin/x",
                 "Sandbox: sh(1) deny(1) process-exec* relative",
                 "Sandbox: sh(1) allowed process-exec* /bin/x",
                 "Sandbox: sh(1) allow(x) process-exec* /bin/x",
                 "Sandbox: sh(1) deny(1) process-exec* /" + "a" * MAX_REPORT_BYTES):
        assert parse_report(line) is None, line


def test_a_learning_runs_reports_are_the_allowed_ones() -> None:
    """learn --platform macos: the profile allows every program with report; the reader
    names the allowed ones (with or without the count a refusal's line has: the words of
    an allowed report are the seed's, not seen on a Mac), each once, and a learning
    reader names no refusal, as a run's names no allowed program."""
    for line in ("Sandbox: sh(12) allow process-exec* /usr/bin/git",
                 "Sandbox: sh(12) allow(1) process-exec /usr/bin/git"):
        report = parse_report(line)
        assert report is not None and report.allowed and report.path == "/usr/bin/git"
    refused = parse_report("Sandbox: sh(12) deny(1) process-exec* /usr/bin/git")
    assert refused is not None and not refused.allowed
    parents = {12: 10, 10: 1}
    learning, running = Naming(10, parents.get, allowed=True), Naming(10, parents.get)
    for line in ("Sandbox: sh(12) allow process-exec* /usr/bin/git",
                 "Sandbox: sh(12) deny(1) process-exec* /usr/bin/curl",
                 "Sandbox: sh(12) allow(1) process-exec* /usr/bin/git",
                 "Sandbox: sh(10) allow process-exec* /bin/sh"):
        learning.feed(line)
        running.feed(line)
    assert learning.named == ["/usr/bin/git", "/bin/sh"]
    assert running.named == ["/usr/bin/curl"]
    assert log_stream_argv("log", learning=True)[-1] == LEARN_PREDICATE
    assert log_stream_argv("log")[-1] == PREDICATE


@fuzz()
@given(st.text(max_size=300))
def test_parse_report_reads_any_line_or_passes_it_over(line: str) -> None:
    report = parse_report(line)
    assert report is None or report.path.startswith("/")
    whole = FIXTURE.read_text().replace("{CHILD}", "7")
    for cut in range(0, len(whole), 37):
        parse_report(whole[:cut])  # a line cut anywhere is a line, or none
