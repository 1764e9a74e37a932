"""What the network benches (bench/wire, bench/endpoints) share: running in the
project's venv, timing a command, and the line `wrap` prints for a spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
_VENV = PROJECT_ROOT / ".venv"
# Bare bubblewrap with the namespaces lnk-sandbox uses: the floor every start is set against.
BWRAP_ARGS = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-uts",
    "--unshare-ipc",
    "--die-with-parent",
    "--cap-drop",
    "ALL",
    "--new-session",
    "--ro-bind",
    "/usr",
    "/usr",
    "--symlink",
    "usr/bin",
    "/bin",
    "--symlink",
    "usr/lib",
    "/lib",
    "--symlink",
    "usr/lib64",
    "/lib64",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",  # noqa: S108 - a path inside the sandbox, not a host temp file
)


def in_project_venv(script: str) -> None:
    """Run `script` again in the project's venv (bin/setup) when it is not already:
    the test hosts' DNS server needs dnslib, and the proxy's code h11."""
    python = _VENV / "bin" / "python"
    if Path(sys.prefix).resolve() != _VENV.resolve() and python.exists():
        os.execv(str(python), [str(python), script, *sys.argv[1:]])  # noqa: S606


def run(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    """Seconds `argv` took, and its output; a failure ends the bench, saying why."""
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{argv[:4]}… failed ({done.returncode}): {done.stderr[-600:]}")
    return elapsed, done.stdout


def wrap(lnk: str, spec: Path, command: list[str], env: dict[str, str]) -> list[str]:
    """The line `lnk-sandbox wrap` prints for `command` under `spec`."""
    done = subprocess.run([lnk, "wrap", "--json", "--spec", str(spec), "--", *command],
                          env=env, capture_output=True, text=True, check=True)
    line: list[str] = json.loads(done.stdout)
    return line
