"""lnk_wrap.gitdiscovery against the real git: which repository git finds from a folder.

A table of the odd `.git`s a sandbox (or another run's stand-in) can leave at the top
of a written folder W inside a repository R: for each, what `git rev-parse` says from W
is what discover(W) says. And read_regular never blocks on what is not a regular file.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from lnk_wrap.gitdiscovery import NotRegularFileError, discover, read_regular

GIT_ENV = {
    **{key: value for key, value in os.environ.items() if not key.startswith("GIT_")},
    "GIT_CONFIG_NOSYSTEM": "1",
}
OBJECT_NAME = "0123456789abcdef0123456789abcdef01234567"


def _git_finds(folder: Path) -> tuple[str | None, str] | None:
    """(top or None when bare, absolute git dir) as git finds it from `folder`."""
    found = subprocess.run(["git", "-C", str(folder), "rev-parse", "--absolute-git-dir"],
                           capture_output=True, text=True, env=GIT_ENV, check=False)
    if found.returncode != 0:
        return None
    bare = subprocess.run(["git", "-C", str(folder), "rev-parse", "--is-bare-repository"],
                          capture_output=True, text=True, env=GIT_ENV, check=True)
    if bare.stdout.strip() == "true":
        return None, found.stdout.strip()
    top = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, env=GIT_ENV, check=True)
    return top.stdout.strip(), found.stdout.strip()


def _ours(folder: Path) -> tuple[str | None, str] | None:
    found = discover(str(folder))
    if found is None:
        return None
    top, git_dir = found
    return (None if top is None else os.path.realpath(top)), os.path.realpath(git_dir)


def _git_dir(path: Path, *, head: str | None = "ref: refs/heads/main\n",
             objects: bool = True, refs: bool = True) -> None:
    path.mkdir(parents=True)
    if head is not None:
        (path / "HEAD").write_text(head)
    if objects:
        (path / "objects").mkdir()
    if refs:
        (path / "refs").mkdir()


def _init(folder: Path) -> None:
    subprocess.run(["git", "init", "-q", str(folder)], check=True, env=GIT_ENV)


def _bare_at(w: Path) -> None:
    _git_dir(w / "x")
    for name in ("HEAD", "objects", "refs"):
        os.rename(w / "x" / name, w / name)


def _make(case: str, w: Path) -> None:
    """Leave the odd case `case` at the top of the written folder `w`."""
    if case == "empty .git folder (a stand-in)":
        (w / ".git").mkdir()
    elif case == ".git file without gitdir":
        (w / ".git").write_text("not a gitfile\n")
    elif case == ".git file with an empty gitdir":
        (w / ".git").write_text("gitdir: \n")
    elif case == ".git file naming a missing folder":
        (w / ".git").write_text("gitdir: gone\n")
    elif case == ".git file naming an empty folder":
        (w / "elsewhere").mkdir()
        (w / ".git").write_text("gitdir: elsewhere\n")
    elif case == ".git file naming a valid git dir":
        _git_dir(w / "real")
        (w / ".git").write_text("gitdir: real\r\n")
    elif case == "HEAD missing":
        _git_dir(w / ".git", head=None)
    elif case == "objects missing":
        _git_dir(w / ".git", objects=False)
    elif case == "refs missing":
        _git_dir(w / ".git", refs=False)
    elif case == "HEAD not a ref":
        _git_dir(w / ".git", head="ref: heads/main\n")
    elif case == "HEAD garbage":
        _git_dir(w / ".git", head="hello\n")
    elif case == "HEAD detached":
        _git_dir(w / ".git", head=OBJECT_NAME + "\n")
    elif case == "HEAD short object name":
        _git_dir(w / ".git", head=OBJECT_NAME[:39])
    elif case == "HEAD ref with spaces":
        _git_dir(w / ".git", head="ref:\t  refs/x")
    elif case == "HEAD a folder":
        _git_dir(w / ".git", head=None)
        (w / ".git/HEAD").mkdir()
    elif case == "HEAD a link into refs":
        _git_dir(w / ".git", head=None)
        (w / ".git/HEAD").symlink_to("refs/heads/main")
    elif case == "HEAD a link elsewhere":
        _git_dir(w / ".git", head=None)
        (w / ".git/HEAD").symlink_to("../HEAD")
    elif case == "objects a file":
        _git_dir(w / ".git", objects=False)
        (w / ".git/objects").write_text("")
    elif case.startswith("commondir"):
        if case == "commondir to a valid common dir":
            _git_dir(w / "common")
        else:
            (w / "common").mkdir()
        _git_dir(w / ".git", objects=False, refs=False)
        (w / ".git/commondir").write_text("../common\n")
    elif case == "a real repository":
        _init(w)
    elif case == "W itself bare, no .git":
        _bare_at(w)
    elif case == "W bare behind an empty .git":
        (w / ".git").mkdir()
        _bare_at(w)
    elif case == ".git a FIFO":
        os.mkfifo(w / ".git")
    elif case == ".git a unix socket":
        _bound(w / ".git")


CASES = (
    "no .git", "empty .git folder (a stand-in)", ".git file without gitdir",
    ".git file with an empty gitdir", ".git file naming a missing folder",
    ".git file naming an empty folder", ".git file naming a valid git dir", "HEAD missing",
    "objects missing", "refs missing", "HEAD not a ref", "HEAD garbage", "HEAD detached",
    "HEAD short object name", "HEAD ref with spaces", "HEAD a folder",
    "HEAD a link into refs", "HEAD a link elsewhere", "objects a file",
    "commondir to a valid common dir", "commondir to an empty folder", "a real repository",
    "W itself bare, no .git", "W bare behind an empty .git", ".git a FIFO",
    ".git a unix socket",
)

_SOCKETS: list[socket.socket] = []


def _bound(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    _SOCKETS.append(server)


@pytest.mark.parametrize("name", CASES)
def test_F8_discovery_finds_what_git_finds(tmp_path: Path, name: str) -> None:
    repository = tmp_path / "R"
    _init(repository)
    written = repository / "W"
    written.mkdir()
    _make(name, written)
    try:
        assert _ours(written) == _git_finds(written), name
        assert _ours(repository) == _git_finds(repository)
    finally:
        while _SOCKETS:
            _SOCKETS.pop().close()


def test_F8_discovery_passes_over_an_outside_standin_to_the_repository_above(
    tmp_path: Path,
) -> None:
    repository = tmp_path / "R"
    _init(repository)
    (repository / "a" / "W" / ".git").mkdir(parents=True)
    found = _ours(repository / "a" / "W")
    assert found == (str(repository.resolve()), str((repository / ".git").resolve()))


@pytest.mark.parametrize("where", ["HEAD", "commondir"])
def test_F8_a_fifo_where_git_reads_a_file_is_named_not_waited_on(
    tmp_path: Path, where: str
) -> None:
    folder = tmp_path / "W"
    _git_dir(folder / ".git", head=None if where == "HEAD" else "ref: refs/heads/x\n")
    os.mkfifo(folder / ".git" / where)
    with pytest.raises(NotRegularFileError) as raised:
        discover(str(folder))
    assert raised.value.path == f"{folder}/.git/{where}"
    assert raised.value.kind == "a FIFO (named pipe)"


def test_read_regular_never_blocks_and_names_what_it_found(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    _bound(tmp_path / "sock")
    (tmp_path / "file").write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to("file")
    try:
        with pytest.raises(NotRegularFileError, match="is a FIFO"):
            read_regular(str(tmp_path / "fifo"), 10)
        with pytest.raises(NotRegularFileError, match="is a unix socket"):
            read_regular(str(tmp_path / "sock"), 10)
        with pytest.raises(NotRegularFileError, match="is a folder"):
            read_regular(str(tmp_path), 10)
        with pytest.raises(OSError):
            read_regular(str(tmp_path / "link"), 10)
        assert read_regular(str(tmp_path / "link"), 4, follow=True) == b"xxxx"
        assert read_regular(str(tmp_path / "file"), 100) == b"x" * 10
    finally:
        while _SOCKETS:
            _SOCKETS.pop().close()
