"""Shared fixtures: a fresh Link settings folder, spec files, and the real sandbox.

Every sandbox test runs the real thing: the installed `lnk-sandbox` beside this
interpreter (or the checkout's bin/), real bubblewrap, the real kernel. Nothing here
skips: a missing bubblewrap or Landlock fails the run (`test_machine.py` says which).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_BESIDE = Path(sys.executable).parent / "lnk-sandbox"
LNK_SANDBOX = str(_BESIDE) if _BESIDE.exists() else str(ROOT / "bin" / "lnk-sandbox")

# A sandboxed command in a test that takes longer than this is hung, not slow.
SANDBOX_TIMEOUT_SECONDS = 30


@pytest.fixture
def lnk_home(tmp_path: Path) -> Path:
    home = tmp_path / "lnk-settings"
    home.mkdir()
    return home


@pytest.fixture
def sandbox_env(lnk_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LNK_HOME"] = str(lnk_home)
    return env


WriteSpec = Callable[[str], Path]


@pytest.fixture
def write_spec(tmp_path: Path) -> Iterator[WriteSpec]:
    count = 0

    def write(text: str) -> Path:
        nonlocal count
        count += 1
        path = tmp_path / f"spec{count}.toml"
        path.write_text(text)
        return path

    yield write


RunSandbox = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_sandbox(sandbox_env: dict[str, str], tmp_path: Path) -> RunSandbox:
    """run_sandbox(spec, *command, cwd=None, env=None, verb="run") → CompletedProcess."""

    def run(spec: Path, *command: str, cwd: Path | None = None,
            env: dict[str, str] | None = None, verb: str = "run",
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [LNK_SANDBOX, verb, "--spec", str(spec), "--", *command],
            cwd=str(cwd or tmp_path), env=env or sandbox_env, capture_output=True, text=True,
            timeout=SANDBOX_TIMEOUT_SECONDS, input=stdin, check=False,
        )

    return run


def toml_list(*paths: Path | str) -> str:
    """A TOML array of path strings (json's quoting is TOML's for these)."""
    import json

    return json.dumps([str(path) for path in paths])


@pytest.fixture(scope="session")
def testnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Real test hosts in network namespaces (tests/testnet.py). Made here when run as
    root; the ordinary-user run of .ci/run gets them made by root beforehand, named by
    LNK_TEST_NET. Never skipped: without either, the wire's tests fail and say why."""
    shared = os.environ.get("LNK_TEST_NET", "")
    if shared:
        if not (Path(shared) / "ready").exists():
            pytest.fail(f"LNK_TEST_NET={shared} holds no ready test network")
        yield Path(shared)
        return
    if os.geteuid() != 0:
        pytest.fail("the wire's tests make network namespaces for their test hosts: run them "
                    "as root, or with LNK_TEST_NET from `.ci/run`")
    from tests import testnet as network

    state = tmp_path_factory.mktemp("testnet")
    network.up(state)
    try:
        yield state
    finally:
        network.down(state)


def start_proxy(settings: Path, *options: str, stderr: int | None = subprocess.DEVNULL
                ) -> tuple[subprocess.Popen[bytes], int]:
    """A standalone proxy (the launcher's argv with `--listen`) on a free port of
    127.0.0.1, once it takes connections; killed if it ends first or takes longer than
    20 s to start. The caller ends it (terminate, wait)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [str(Path(LNK_SANDBOX).with_name("lnk-sandbox-proxy")), "--settings", str(settings),
         *options, "--listen", f"127.0.0.1:{port}"], stderr=stderr)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                process.wait()
                raise AssertionError(f"the proxy did not start ({process.returncode})") from None
            time.sleep(0.05)


def end_run(run: subprocess.Popen[str]) -> None:
    """Kill a sandbox a test started, if it is still running (a failed test must not
    leave one behind)."""
    if run.poll() is None:
        run.kill()
        run.communicate()


# The venv's own interpreter (not its real path: the SDKs and clients are the venv's), and
# the venv, which a spec grants so a client imports inside a sandbox.
VENV_PYTHON = str(Path(LNK_SANDBOX).parent / "python")
VENV = Path(VENV_PYTHON).parent.parent


def run_out_script(spec: Path, env: dict[str, str], tmp_path: Path, source: str,
                   *args: str) -> tuple[object, subprocess.CompletedProcess[str]]:
    """Run `source` (which fills a dict `out`) with the venv's Python inside a sandbox of
    `spec`; `out` (printed as JSON on the last line of its output) and the completed run."""
    import json
    import secrets

    script = tmp_path / f"script{secrets.token_hex(4)}.py"
    script.write_text(source + "\nprint(json.dumps(out))\n")
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON,
                           str(script), *args], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS,
                          check=False)
    assert done.returncode == 0, done
    lines = done.stdout.strip().splitlines()
    assert lines, done
    return json.loads(lines[-1]), done


def wire_log_of(env: dict[str, str], wire: str) -> str:
    """The wire's log in the settings of `env` (LNK_HOME), or "" before any line."""
    path = Path(env["LNK_HOME"]) / "sandbox" / "wires" / wire / "log"
    return path.read_text() if path.exists() else ""


def call_lines(log: str) -> str:
    """A wire's log without the launcher's run lines (each run's `started` and `exited`,
    lnk_wrap.runs): the calls' lines only."""
    return "".join(line for line in log.splitlines(keepends=True)
                   if line.split("\t")[1:2] not in (["started"], ["exited"]))


def answer_next(env: dict[str, str], answer: str, seen: set[str]) -> dict[str, str]:
    """Wait for a new question in `lnk-sandbox asks --json` and answer it; the question."""
    import json
    import time

    deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        listed = subprocess.run([LNK_SANDBOX, "asks", "--json"], env=env, capture_output=True,
                                text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
        waiting = [ask for ask in json.loads(listed.stdout or '{"asks": []}')["asks"]
                   if ask["id"] not in seen]
        if waiting:
            seen.add(waiting[0]["id"])
            subprocess.run([LNK_SANDBOX, "answer", waiting[0]["id"], answer], env=env,
                           check=True, capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)
            return dict(waiting[0])
        time.sleep(0.1)
    raise AssertionError("no question waited")
