"""The start's order (lnk_wrap.launch, lnk_wrap.init, docs/decisions/0039): the watch,
forked after bubblewrap, takes nothing that judges a call before one comes, judges the
first all the same, and never outlives its launcher; on the real kernel."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from lnk_wrap.launch import WATCH_PROCESS_NAME
from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, WriteSpec, end_run, toml_list
from tests.test_files_attacks import Q

PYTHON = os.path.realpath("/usr/bin/python3")
REFUSAL = "it was not made inside this sandbox (the sandbox's one way out is its wire)"
CONNECT = ("import socket, sys\n"
           "try:\n    socket.socket(socket.AF_UNIX).connect(sys.argv[1])\n"
           "except OSError as error:\n    print('errno', error.errno)\n")


def _line(spec: Path, env: dict[str, str], *command: str) -> list[str]:
    """The line `wrap` prints: its launcher is the process that runs it."""
    done = subprocess.run([LNK_SANDBOX, "wrap", "--json", "--spec", str(spec), "--",
                           *command], env=env, capture_output=True, text=True, check=True)
    line: list[str] = json.loads(done.stdout)
    return line


def _watch_of(launcher: int) -> int:
    deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{launcher}/task/{launcher}/children") as handle:
                children = [int(word) for word in handle.read().split()]
        except OSError:
            children = []
        for child in children:
            try:
                with open(f"/proc/{child}/comm", "rb") as handle:
                    if handle.read().strip() == WATCH_PROCESS_NAME:
                        return child
            except OSError:
                continue
        time.sleep(0.01)
    raise AssertionError("no watch found")


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_watch_loads_nothing_before_a_call_and_judges_the_first_all_the_same(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """A sandbox with no [commands] and no wire: until its first call the watch has not
    loaded what judges one (no ctypes), and that call is judged as ever: a unix socket
    outside, in a granted folder, is refused and named."""
    gates = tmp_path / "gates"
    gates.mkdir()
    outside = socket.socket(socket.AF_UNIX)
    outside.bind(str(gates / "outside.sock"))
    outside.listen()
    spec = write_spec(f"[files]\nwrite = {toml_list(gates)}\n")
    running, gate = gates / "running", gates / "open"
    line = _line(spec, sandbox_env, "/bin/sh", "-c",
                 f": > {Q(str(running))}; while [ ! -e {Q(str(gate))} ]; do sleep 0.01; "
                 f"done; {PYTHON} -c {Q(CONNECT)} {Q(str(gates / 'outside.sock'))}")
    run = subprocess.Popen(line, env=sandbox_env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        watch = _watch_of(run.pid)
        _wait_for(running)
        with open(f"/proc/{watch}/maps") as handle:
            assert "_ctypes" not in handle.read()
        gate.touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
        outside.close()
    assert stdout == "errno 13\n", (stdout, stderr)
    assert f"refused to connect to the unix socket {gates / 'outside.sock'}: {REFUSAL}" \
        in stderr


def test_a_watch_waiting_for_its_first_call_ends_with_its_launcher(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """No watch outlives its launcher, even before it has asked the kernel for that
    (PDEATHSIG, set once it serves): killed outright, the launcher takes it along."""
    gates = tmp_path / "gates"
    gates.mkdir()
    spec = write_spec(f"[files]\nwrite = {toml_list(gates)}\n")
    running = gates / "running"
    run = subprocess.Popen(_line(spec, sandbox_env, "/bin/sh", "-c",
                                 f": > {Q(str(running))}; sleep 60"),
                           env=sandbox_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        watch = _watch_of(run.pid)
        _wait_for(running)
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=SANDBOX_TIMEOUT_SECONDS)
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while _alive(watch):
            assert time.monotonic() < deadline, "the watch outlived its launcher"
            time.sleep(0.01)
    finally:
        if run.poll() is None:
            run.kill()
        run.communicate()
