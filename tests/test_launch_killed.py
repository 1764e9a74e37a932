"""A launcher killed outright (SIGKILL: nothing of it runs after) leaves no process
behind, whenever it is killed: before bubblewrap starts, while it makes the sandbox,
or once the program runs.

bubblewrap's own `--die-with-parent` has a gap (containers/bubblewrap issue #633): its
outer process sets its parent-death signal only after it has made the sandbox's first
process, and that first process waits, unkillable by anything but a signal, for the
outer one to say go. An outer process that dies in between (its launcher killed: the
death signal, or SIGPIPE on --info-fd, whose reader is gone) leaves the first process
waiting for ever. The sandbox's watch ends it (lnk_wrap.leftovers).

Each run is made under a small reaper (PR_SET_CHILD_SUBREAPER): every process of the
run, orphaned or not, becomes its child, so "nothing left" is "the reaper has no child
left", polled with a deadline, and a process left is named with what /proc says of it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LNK_SANDBOX

BWRAP = "/usr/bin/bwrap"
LAUNCHER = LNK_SANDBOX.replace("lnk-sandbox", "lnk-sandbox-launch")
# Longer than any run's end here takes on a busy machine: a sandbox killed ends in
# milliseconds; a process left waits for ever.
REAP_SECONDS = 30

# Runs argv[3:] as its child; kills it after argv[1] seconds (never, when negative);
# then reaps every process that comes to it, until none is left (exit 0) or
# REAP_SECONDS have passed (exit 1, each left named on stdout, then killed).
REAPER = """
import ctypes, os, signal, sys, time
PR_SET_CHILD_SUBREAPER = 36
if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
    sys.exit("no subreaper")
delay, limit, argv = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
quiet = os.open(os.devnull, os.O_WRONLY)  # a process left holds no pipe of the test's
launcher = os.posix_spawn(argv[0], argv, os.environ, file_actions=[
    (os.POSIX_SPAWN_DUP2, quiet, 1), (os.POSIX_SPAWN_DUP2, quiet, 2)])
if delay >= 0:
    time.sleep(delay)  # the moment of the kill is what is tried, not a wait for it
    os.kill(launcher, signal.SIGKILL)

def left():
    pids = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as handle:
            pids += handle.read().split()
    return pids

def named(pid):
    said = []
    for name in ("comm", "wchan"):
        try:
            with open(f"/proc/{pid}/{name}") as handle:
                said.append(handle.read().strip())
        except OSError:
            said.append("?")
    try:
        with open(f"/proc/{pid}/status") as handle:
            said += [line.split(":", 1)[1].strip() for line in handle
                     if line.startswith("NSpid:")]
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            said.append(handle.read()[:300].replace(bytes(1), b" ").decode(errors="replace"))
    except OSError:
        pass
    return f"{pid} " + " ".join(said)

def too_late(signum, frame):
    pids = left()
    print("left:", "; ".join(named(pid) for pid in pids), flush=True)
    for pid in pids:  # not left for the next test
        os.kill(int(pid), signal.SIGKILL)
    os._exit(1)

signal.signal(signal.SIGALRM, too_late)
signal.alarm(int(limit))
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
signal.alarm(0)
print("none left")
"""

# Kills its launcher outright, then becomes bubblewrap: bubblewrap starts with its
# launcher gone, makes the sandbox's first process, and dies writing --info-fd (no
# reader): the first process is left waiting at once, for certain, not by timing.
KILL_THEN_BWRAP = """#!/bin/sh
kill -KILL $PPID
exec {bwrap} "$@"
"""


def _reaped(argv: list[str], env: dict[str, str], delay: float) -> str:
    done = subprocess.run([sys.executable, "-I", "-c", REAPER, str(delay),
                           str(REAP_SECONDS), *argv], env=env, capture_output=True,
                          text=True, timeout=REAP_SECONDS * 3)
    return done.stdout + done.stderr


def _launch_argv(settings: str, folder: Path) -> list[str]:
    return [LAUNCHER, "--settings", settings, "--write", str(folder), "--", "/bin/sleep",
            "60"]


def test_a_launcher_killed_as_bubblewrap_starts_leaves_nothing_behind(
    tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    """The gap itself, reached for certain: bubblewrap's first process was made and
    waits for a go that never comes; the watch finds it by the socket it holds and
    ends it."""
    wrapper = tmp_path / "bwrap-wrapper"
    wrapper.write_text(KILL_THEN_BWRAP.format(bwrap=BWRAP))
    wrapper.chmod(0o755)
    folder = tmp_path / "work"
    folder.mkdir()
    said = _reaped(_launch_argv(sandbox_env["LNK_HOME"], folder),
                   {**sandbox_env, "LNK_SANDBOX_BWRAP": str(wrapper)}, -1)
    assert said.strip().endswith("none left"), said


@pytest.mark.parametrize("delay", [index * 0.004 for index in range(25)])
def test_a_launcher_killed_at_any_moment_of_its_start_leaves_nothing_behind(
    tmp_path: Path, sandbox_env: dict[str, str], delay: float,
) -> None:
    """Killed 0 to 96 ms after it was started, 4 ms apart: before bubblewrap, while it
    makes the sandbox, and once the program runs (a start takes some 20 to 60 ms
    here)."""
    folder = tmp_path / "work"
    folder.mkdir()
    said = _reaped(_launch_argv(sandbox_env["LNK_HOME"], folder), sandbox_env, delay)
    assert said.strip().endswith("none left"), said
