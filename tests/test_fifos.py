"""F8 attacked with real sandboxes: nothing left in a written folder hangs the person's
tools or a later run.

A FIFO where a file is read (`.gitignore`, a hook, an included settings file) makes
whoever opens it wait for a writer that never comes: the person's `git status`, their
prompt, their editor. A sandbox may not make one (nor a device file) in a written
folder, wherever that folder lies: under /tmp too, where Landlock's rule for the
private /tmp would otherwise reach it. And one left there anyway (by a run on an older
kernel, or by another tool) must not hang the launcher of a later run: it is passed
over where git passes it over, and refused in one line where git itself would wait.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunSandbox, WriteSpec
from tests.test_dotfiles import git, listing, make_repository
from tests.test_files_attacks import Q, files_spec

EXIT_SANDBOX_FAILED = 125


@pytest.fixture
def outside_temp() -> Iterator[Path]:
    """A folder under this user's home: beneath none of the sandbox's private temp
    folders (/tmp, /var/tmp, /dev/shm), so no temp folder's rule reaches it. Works for
    root and for CI's ordinary user alike."""
    folder = Path(tempfile.mkdtemp(prefix="lnk-test-fifo-", dir=Path.home()))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _outcomes(stdout: str) -> dict[str, str]:
    """`name=OK` or `name=ERROR message` lines, as the script below prints them."""
    found = {}
    for line in stdout.splitlines():
        name, sep, rest = line.partition("=")
        if sep:
            found[name] = rest
    return found


def _try(name: str, command: str) -> str:
    return (f"if err=$( {command} 2>&1 ); then echo {Q(name)}=OK; "
            f"else echo {Q(name)}=\"ERROR $err\"; fi\n")


@pytest.mark.parametrize("where", ["under /tmp", "outside the temp folders"])
def test_F8_a_written_folder_gets_no_fifo_nor_device_file_wherever_it_lies(
    tmp_path: Path, outside_temp: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
    where: str,
) -> None:
    written = (tmp_path if where == "under /tmp" else outside_temp) / "work"
    written.mkdir()
    before = listing(written)
    w = Q(str(written))
    script = "".join([
        _try("fifo", f"mkfifo {w}/.gitignore"),
        _try("fifo below", f"mkdir -p {w}/src && mkfifo {w}/src/.gitignore"),
        _try("char device", f"mknod {w}/null c 1 3"),
        _try("whiteout", f"mknod {w}/whiteout c 0 0"),
        _try("block device", f"mknod {w}/disk b 8 0"),
        _try("fifo in /var/tmp", "mkfifo /var/tmp/fifo"),
        _try("fifo in /dev/shm", "mkfifo /dev/shm/fifo"),
        _try("fifo in /tmp", "mkfifo /tmp/fifo"),
        _try("file", f"echo x > {w}/file && rm {w}/file"),
        _try("folder", f"mkdir {w}/d && rmdir {w}/d && rmdir {w}/src"),
        _try("unix socket", f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                            f"s.bind('{written}/sock'); s.listen()\" && rm {w}/sock"),
    ])
    result = run_sandbox(write_spec(files_spec(write=(written,))), "/bin/sh", "-c", script)
    assert result.returncode == 0, result.stderr
    found = _outcomes(result.stdout)
    for refused in ("fifo", "fifo below", "char device", "whiteout", "block device"):
        assert found[refused].startswith("ERROR") and "Permission denied" in found[refused], (
            refused, found[refused])
    for allowed in ("fifo in /var/tmp", "fifo in /dev/shm", "file", "folder", "unix socket"):
        assert found[allowed] == "OK", (allowed, found[allowed])
    # The private /tmp keeps FIFOs, but where a written folder lies beneath it: Landlock
    # rights along a path are a union, so its rule would reach the written folder.
    if where == "under /tmp":
        assert "Permission denied" in found["fifo in /tmp"]
    else:
        assert found["fifo in /tmp"] == "OK"
    assert listing(written) == before


# (where, what is left there, what the launcher does: "runs" as git passes it over,
# "refused" where git itself would wait on it)
LEFT_BEHIND = [
    (".git/hooks/pre-commit", "fifo", "runs"),  # read for a hook manager's name
    (".git/hooks/pre-push", "socket", "runs"),
    (".git/config", "fifo", "refused"),
    (".git/config", "socket", "refused"),
    ("included", "fifo", "refused"),  # named by include.path
    (".git/commondir", "fifo", "refused"),
    (".git/HEAD", "fifo", "refused"),
    (".git", "fifo", "runs"),  # where a `gitdir:` file may be: not a repository
    (".pre-commit-config.yaml", "fifo", "runs"),  # a hook names pre-commit
]


@pytest.mark.parametrize(("place", "kind", "outcome"), LEFT_BEHIND)
def test_F8_a_fifo_left_in_a_written_folder_never_hangs_a_later_run(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, place: str, kind: str,
    outcome: str,
) -> None:
    written = make_repository(tmp_path / "project")
    (written / ".git" / "hooks" / "pre-merge-commit").write_text(
        "#!/bin/sh\nexec pre-commit hook-impl --hook-type=pre-merge-commit\n")
    if place == "included":
        git(written, "config", "include.path", "../included")
    path = written / place
    if place == ".git":
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    bound = None
    if kind == "fifo":  # as an older kernel's run, or another tool, could leave it
        os.mkfifo(path)
    else:
        bound = socket.socket(socket.AF_UNIX)
        bound.bind(str(path))
    marker = tmp_path / "ran"
    spec = write_spec(files_spec(write=(written, tmp_path / "out")))
    (tmp_path / "out").mkdir()
    try:
        result = run_sandbox(spec, "/bin/sh", "-c", f"touch {Q(str(tmp_path / 'out' / 'ran'))}")
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher hung on a {kind} at {place}")
    finally:
        if bound is not None:
            bound.close()
    marker = tmp_path / "out" / "ran"
    if outcome == "runs":
        assert result.returncode == 0, result.stderr
        assert marker.exists()
    else:
        assert result.returncode == EXIT_SANDBOX_FAILED, result.stderr
        assert not marker.exists()
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        what = "a FIFO (named pipe)" if kind == "fifo" else "a unix socket"
        assert f"{path} is {what} where git reads a file" in lines[0]
        assert f"rm {path}" in lines[0]


def test_F8_a_device_where_git_reads_settings_is_read_as_git_reads_it(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
    sandbox_env: dict[str, str],
) -> None:
    # GIT_CONFIG_GLOBAL=/dev/null is common (CI, scripts): git reads it as empty, and
    # so does the launcher, without a word; only what would hang is refused.
    written = make_repository(tmp_path / "project")
    env = {**sandbox_env, "GIT_CONFIG_GLOBAL": "/dev/null"}
    result = run_sandbox(write_spec(files_spec(write=(written,))), "true", env=env,
                         cwd=written)
    assert (result.returncode, result.stderr) == (0, "")
