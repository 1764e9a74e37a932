"""A stop signal (TERM, INT, HUP, QUIT) sent to the launcher before the program starts
means the program never starts, and the exit status is 128+N; one sent after is passed
on to the program (tests/test_files_attacks.py: test_sigterm_to_launcher_reaches_program).

Each moment is reached for certain, not by timing: the launcher waiting on the
stand-ins' index lock (held by the test), a bubblewrap that signals its launcher
as it starts, and one that does so once the sandbox exists and the init is waiting for
its go-ahead. The program would leave a marker: it must never appear.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    end_run,
    toml_list,
    wait_until,
)
from tests.test_dotfiles import listing
from tests.test_files_attacks import Q, files_spec

BWRAP = "/usr/bin/bwrap"

# Signals the launcher, then becomes bubblewrap: the signal is there right after the
# launcher started bubblewrap, before it knows the sandbox's pid.
SIGNAL_THEN_BWRAP = """#!/bin/sh
kill -{signal} $PPID
exec {bwrap} "$@"
"""

# Starts bubblewrap, waits until the sandbox's init runs (bubblewrap's first process
# inside has a child), signals the launcher, and only then lets go of its copy of
# --info-fd: the launcher learns the sandbox's pid after the signal, with the init
# waiting for its go-ahead.
SIGNAL_ONCE_THE_SANDBOX_EXISTS = """#!{python}
import os, signal, sys, time
args = sys.argv[1:]
info = int(args[args.index("--info-fd") + 1])
pid = os.posix_spawn("{bwrap}", ["{bwrap}", *args], os.environ)

def children(pid):
    try:
        with open(f"/proc/{{pid}}/task/{{pid}}/children") as handle:
            return handle.read().split()
    except OSError:
        return []

deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    inside = children(pid)
    if inside and children(int(inside[0])):
        break
    time.sleep(0.005)
os.kill(os.getppid(), signal.{signal})
os.close(info)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


# Holds bubblewrap before it starts the init (its own --block-fd, which it reads before
# it forks the init) until the launcher has written the go-ahead (the init's --go-fd
# turns readable) or a second has passed; signals the launcher; then lets bubblewrap go
# on. A launcher that gave its go-ahead before the init existed drops the signal (no
# one to pass it to) and the program runs.
SIGNAL_BEFORE_THE_INIT_EXISTS = """#!{python}
import os, select, signal, sys
args = sys.argv[1:]
info = int(args[args.index("--info-fd") + 1])
go = int(args[args.index("--go-fd") + 1])
block_read, block_write = os.pipe()
os.set_inheritable(block_read, True)
pid = os.posix_spawn("{bwrap}", ["{bwrap}", "--block-fd", str(block_read), *args],
                     os.environ)
os.close(block_read)
os.close(info)
select.select([go], [], [], 1.0)
os.kill(os.getppid(), signal.{signal})
os.write(block_write, b"x")
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""


def _wrapper(tmp_path: Path, text: str, signum: signal.Signals) -> dict[str, str]:
    wrapper = tmp_path / "bwrap-wrapper"
    wrapper.write_text(text.format(signal=signum.name.removeprefix("SIG") if "{python}"
                                   not in text else signum.name,
                                   bwrap=BWRAP, python=sys.executable))
    wrapper.chmod(0o755)
    return {"LNK_SANDBOX_BWRAP": str(wrapper)}


def _spec(write_spec: WriteSpec, tmp_path: Path, network: str) -> tuple[Path, Path]:
    out = tmp_path / "out"
    out.mkdir()
    extra = '[network]\nmode = "proxy"\nhosts = ["example.invalid"]\n' if network else ""
    return write_spec(files_spec(write=(out,), extra=extra)), out / "ran"


def _run(spec: Path, env: dict[str, str], marker: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/sh", "-c",
         f"touch {Q(str(marker))}"],
        env=env, cwd=str(marker.parent), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


@pytest.mark.parametrize("network", ["", "proxy"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_a_stop_signal_right_after_bubblewrap_starts_means_the_program_never_runs(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
    signum: signal.Signals, network: str,
) -> None:
    spec, marker = _spec(write_spec, tmp_path, network)
    run = _run(spec, {**sandbox_env, **_wrapper(tmp_path, SIGNAL_THEN_BWRAP, signum)}, marker)
    try:
        _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert run.returncode == 128 + signum, stderr
    assert not marker.exists()


@pytest.mark.parametrize("network", ["", "proxy"])
@pytest.mark.parametrize("moment", ["once the sandbox exists",
                                    "after the sandbox is known, before its init exists"])
def test_a_stop_signal_before_the_program_starts_means_it_never_runs(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str], network: str,
    moment: str,
) -> None:
    """TERM at a moment reached for certain (a bubblewrap that signals its launcher):
    the program's marker never appears, and the status is 143."""
    wrapper = (SIGNAL_ONCE_THE_SANDBOX_EXISTS if moment == "once the sandbox exists"
               else SIGNAL_BEFORE_THE_INIT_EXISTS)
    spec, marker = _spec(write_spec, tmp_path, network)
    run = _run(spec, {**sandbox_env, **_wrapper(tmp_path, wrapper, signal.SIGTERM)}, marker)
    try:
        _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert run.returncode == 143, stderr
    assert not marker.exists()
    time.sleep(0.2)  # a program that slipped through would have touched it by now
    assert not marker.exists()


def _waits_on_lock(pid: int, lock: Path) -> bool:
    """Whether `pid` has `lock` open and sleeps in the kernel's wait for a file lock."""
    try:
        opened = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        with open(f"/proc/{pid}/wchan") as handle:
            waiting = "lock" in handle.read()
    except OSError:
        return False
    return str(lock) in opened and waiting


def _signal_taken(pid: int, signum: int) -> bool:
    """Whether `signum`, sent to `pid`, is pending no more, for its threads or the
    process (/proc/PID/status, SigPnd and ShdPnd): its handler has been entered."""
    bit = 1 << (signum - 1)
    with open(f"/proc/{pid}/status") as handle:
        pending = [int(line.split()[1], 16) for line in handle
                   if line.startswith(("SigPnd:", "ShdPnd:"))]
    return len(pending) == 2 and not any(mask & bit for mask in pending)


def test_a_stop_signal_while_the_launcher_holds_dot_files_means_the_program_never_runs(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
) -> None:
    written = tmp_path / "work"
    written.mkdir()
    before = listing(written)
    spec, marker = _spec(write_spec, tmp_path, "")
    spec.write_text(files_spec(write=(written, marker.parent)))
    lock_folder = Path(sandbox_env["LNK_HOME"]) / "sandbox" / "placeholders"
    lock_folder.mkdir(parents=True)
    lock = os.open(lock_folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    run = None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        run = _run(spec, sandbox_env, marker)
        launcher = run
        wait_until(lambda: launcher.poll() is not None
                   or _waits_on_lock(launcher.pid, lock_folder / "lock"),
                   "the launcher to wait on the index")
        assert run.poll() is None, run.communicate()
        run.send_signal(signal.SIGTERM)
        wait_until(lambda: _signal_taken(launcher.pid, signal.SIGTERM),
                   "the launcher to take the TERM")
        fcntl.flock(lock, fcntl.LOCK_UN)
        _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        os.close(lock)
        if run is not None:
            end_run(run)
    assert run.returncode == 143, stderr
    assert not marker.exists()
    assert listing(written) == before  # its stand-ins were made and taken away


def test_the_program_gets_the_signals_python_ignores_at_their_defaults(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path
) -> None:
    """CPython ignores SIGPIPE and SIGXFSZ for itself at its start; the program gets
    them at their defaults, as a shell gives them: a pipe whose reader ends ends its
    writer quietly, not with "Broken pipe"."""
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    done = run_sandbox(spec, "/bin/sh", "-c", "grep SigIgn /proc/self/status; yes | head -1")
    assert (done.returncode, done.stderr) == (0, ""), done
    ignored = int(done.stdout.split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)), done.stdout
    assert done.stdout.splitlines()[1:] == ["y"]
