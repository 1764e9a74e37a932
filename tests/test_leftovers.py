"""lnk_wrap.leftovers on real processes and a real socket pair: the holders of one end
are found by its inode (never this process, never a process holding the other end),
killed through pidfds until the other end hangs up, and a sweep that runs out of time
says so rather than claiming it ended them. tests/test_launch_killed.py runs it where
it is used: a launcher killed while bubblewrap makes the sandbox."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from lnk_wrap import leftovers
from tests.conftest import wait_until

# A child that holds what it inherited until it is killed (a bubblewrap waiting for ever).
HOLD = "import signal; signal.pause()"


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    try:
        yield ours, theirs
    finally:
        ours.close()
        theirs.close()


def _holder(fd: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-I", "-c", HOLD], pass_fds=(fd,))


def _wait_holding(child: subprocess.Popen[bytes], inode: int) -> None:
    """Until /proc shows the child holding the socket (it holds it from its fork on)."""
    wait_until(lambda: child.pid in leftovers.holders(inode), "the child holding the socket")
    assert child.poll() is None, "the child ended"


def test_the_holders_of_one_end_are_found_by_its_inode(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    inode = os.fstat(theirs.fileno()).st_ino
    child = _holder(theirs.fileno())
    try:
        _wait_holding(child, inode)
        assert os.getpid() not in leftovers.holders(inode)  # this process holds it too
        assert child.pid not in leftovers.holders(os.fstat(ours.fileno()).st_ino)
    finally:
        child.kill()
        child.wait()


def test_every_holder_is_killed_and_the_other_end_hangs_up(
        pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    inode = os.fstat(theirs.fileno()).st_ino
    children = [_holder(theirs.fileno()) for _ in range(3)]
    theirs.close()  # the children hold it now, as bubblewrap's processes would
    try:
        for child in children:
            _wait_holding(child, inode)
        assert leftovers.end_holders(inode, ours.fileno())
        for child in children:
            assert child.wait(30) == -9  # SIGKILL
        assert leftovers.holders(inode) == []
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def test_a_sweep_out_of_time_says_so_and_kills_nothing_more(
        pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = pair
    inode = os.fstat(theirs.fileno()).st_ino
    child = _holder(theirs.fileno())
    theirs.close()
    monkeypatch.setattr(leftovers, "SWEEP_SECONDS", -1.0)  # its time over before it looks
    try:
        _wait_holding(child, inode)
        assert not leftovers.end_holders(inode, ours.fileno())
        assert child.poll() is None  # not claimed ended: still there, still holding
        assert leftovers.holders(inode) == [child.pid]
    finally:
        child.kill()
        child.wait()


def test_nothing_to_end_returns_at_once(pair: tuple[socket.socket, socket.socket]) -> None:
    ours, theirs = pair
    inode = os.fstat(theirs.fileno()).st_ino
    theirs.close()  # no holder left: the other end has hung up already
    assert leftovers.end_holders(inode, ours.fileno())
