"""The exec watch's pieces that need no sandbox: path resolution, the judge, learn's offer."""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lnk_common.syscalls import syscall
from lnk_common.wirelog import printable
from lnk_execwatch import sockets
from lnk_execwatch.judge import (
    SHEBANG_BYTES,
    Commands,
    interpreter_of,
    is_interpreter,
    offer,
    program_given_to_loader,
)
from lnk_execwatch.main import (
    SandboxRights,
    kernel_seals_memory_files,
    memory_file_flags,
    open_inside,
    read_head,
)
from lnk_execwatch.sockets import (
    CONNECT,
    MAX_WORKERS,
    SocketGuard,
    _Call,
    _take_from_thread_group,
    thread_group,
)
from lnk_wrap import check
from tests.conftest import fuzz

DASH = os.path.realpath("/bin/sh")

def _reached(path: str) -> tuple[str, tuple[int, int], tuple[tuple[int, int], ...]] | None:
    reached = open_inside(os.getpid(), path)
    if reached is None:
        return None
    resolved, pinned, folders = reached
    info = os.fstat(pinned)
    os.close(pinned)
    return resolved, (info.st_dev, info.st_ino), folders


def _identity(path: str) -> tuple[int, int]:
    info = os.stat(path)
    return info.st_dev, info.st_ino


def test_open_inside_follows_links_and_never_climbs_above_the_root() -> None:
    for path in ("/bin/sh", "/../../../bin/sh", "/usr/bin/../../bin/./sh"):
        found = _reached(path)
        assert found is not None and found[0] == DASH and found[1] == _identity(DASH), path
    assert _reached("/no/such/file") is None
    assert _reached("/") is None  # a folder: never an exec's file
    assert _reached("/usr/bin/..") is None
    found = _reached(DASH)
    assert found is not None
    # The folders walked are the file's real folders, from the root down.
    assert found[2] == tuple(_identity(os.path.dirname(DASH).rsplit("/", depth)[0] or "/")
                             for depth in reversed(range(DASH.count("/") - 1)))


def test_read_head_reads_disk_files_only_with_the_sandboxs_rights(tmp_path: Path) -> None:
    rights = SandboxRights()

    def head(path: str) -> bytes | None:
        pinned = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            return read_head(pinned, rights)
        finally:
            os.close(pinned)

    assert (head(DASH) or b"")[:4] == b"\x7fELF"
    # procfs and sysfs are never read, whatever the mode says.
    assert head("/proc/self/status") is None
    assert head("/proc/self/cmdline") is None
    if os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"):
        assert head("/sys/kernel/mm/transparent_hugepage/enabled") is None
    # A file the sandbox cannot read (no capability survives, even for root) is not read.
    secret = tmp_path / "secret"
    secret.write_bytes(b"#!/the/secret/interpreter\n")
    secret.chmod(0o000)
    assert head(str(secret)) is None
    secret.chmod(0o400)
    assert head(str(secret)) == b"#!/the/secret/interpreter\n"
    # The watch's own rights are whole again after.
    secret.chmod(0o000)
    if os.geteuid() == 0:
        assert secret.read_bytes() == b"#!/the/secret/interpreter\n"


def test_the_judge_allows_listed_files_folders_and_the_loader_by_identity() -> None:
    commands = Commands(("/usr/bin/git", "/opt/tools"), ("/lib/ld.so",))
    git, tools, loader, other, bin_folder = (1, 10), (1, 20), (1, 30), (1, 40), (1, 50)
    commands.pin(frozenset({git, tools}), frozenset({loader}))
    assert commands.allows(git, ((1, 2), bin_folder))
    assert commands.allows(other, ((1, 2), tools, (1, 21)))
    assert commands.allows(loader, ())
    assert commands.is_loader(loader) and not commands.is_loader(git)
    assert not commands.allows(other, ((1, 2), bin_folder))
    # Before it is pinned, nothing is allowed: no path is trusted.
    assert not Commands(("/usr/bin/git",), ()).allows(git, ())


# (the first bytes of a file, the interpreter the kernel runs it with, or None: ENOEXEC)
SHEBANGS: list[tuple[bytes, bytes | None]] = [
    (b"#!/bin/sh\necho", b"/bin/sh"),
    (b"#! \t/usr/bin/env python3 -u\n", b"/usr/bin/env"),
    (b"#!/bin/sh   \t\n", b"/bin/sh"),
    (b"#!/bin/sh\targ\n", b"/bin/sh"),
    (b"#!\n", None),
    (b"#!   \t \n", None),
    (b"#!", None),
    (b"#", None),
    (b"", None),
    (b"\x7fELF", None),
    (b"#!/bin/sh", b"/bin/sh"),  # no newline, the file ends: NULs follow in the buffer
    (b"#!/bi\0n/sh\n", b"/bi"),  # a NUL ends the name (and hides the newline after it)
    (b"#!\0/bin/sh\n", None),  # the name is empty
    (b"#! \0\n", None),
    (b"#!/bin/sh\0 -x\n", b"/bin/sh"),
    (b"#!/a\rb\n", b"/a\rb"),  # only blanks and tabs separate; \r is part of the name
    (b"#!" + b"/x" * 127, None),  # no newline and no end within the buffer: cut short
    (b"#!" + b"/x" * 126 + b" y", b"/x" * 126),
    (b"#!" + b" " * 254, None),
    (b"#!" + b"/" * 253 + b" ", b"/" * 253),
    (b"#!" + b"/" * 254, None),  # the name fills the buffer: may go on, ENOEXEC
    (b"#!" + b"/" * 253 + b"\n", b"/" * 253),
    (b"#!/bin/sh" + b" " * 300 + b"\n", b"/bin/sh"),
]


def test_interpreter_of_reads_the_shebang_as_the_kernel_does() -> None:
    for head, expected in SHEBANGS:
        assert interpreter_of(head) == expected, head


@fuzz(3)
@given(st.binary(max_size=SHEBANG_BYTES + 40).map(lambda tail: b"#!" + tail))
@example(b"#!/bin/\0sh\n")
def test_interpreter_of_never_raises_and_never_names_a_nul_or_blank(head: bytes) -> None:
    found = interpreter_of(head)
    if found is not None:
        assert found and b"\0" not in found and b" " not in found and b"\t" not in found
        assert head.startswith(b"#!") and len(found) <= SHEBANG_BYTES - 3


@fuzz(3)
@given(st.binary(max_size=SHEBANG_BYTES * 2))
def test_interpreter_of_never_raises_on_any_bytes(head: bytes) -> None:
    interpreter_of(head)


def test_program_given_to_loader_skips_its_options() -> None:
    assert program_given_to_loader(["ld.so", "/tmp/x", "-a"]) == "/tmp/x"
    assert program_given_to_loader(["ld.so", "--library-path", "/l", "--verify", "./y"]) == "./y"
    assert program_given_to_loader(["ld.so", "--argv0", "z"]) is None


def test_interpreters_are_known_by_name() -> None:
    for path in ("/usr/bin/python3.11", "/usr/bin/bash", "/usr/bin/node", "/usr/bin/perl5.36",
                 "/usr/bin/dash", "/usr/bin/gawk"):
        assert is_interpreter(path), path
    for path in ("/usr/bin/git", "/usr/bin/cc", "/usr/bin/make", "/usr/bin/shred"):
        assert not is_interpreter(path), path


def test_learn_never_offers_what_the_sandbox_could_replace() -> None:
    offered, refused = offer(
        ["/usr/bin/git", "/work/build/tool", "/tmp/x", "/usr/bin/git", "/usr/bin/cc"],
        listed=("/usr/bin/cc",), replaceable=("/work", "/tmp"))
    assert offered == ["/usr/bin/git"]
    assert [path for path, _ in refused] == ["/work/build/tool", "/tmp/x"]


def test_printable_escapes_control_characters() -> None:
    assert printable("/tmp/a\nb\x1b[2J") == "/tmp/a\\x0ab\\x1b[2J"
    assert printable("/tmp/é") == "/tmp/é"


def test_a_watch_that_stops_says_so_on_stderr_and_in_the_log(tmp_path: Path) -> None:
    import subprocess
    import sys

    # A listener that is not one (a closed descriptor): the first ioctl fails and the
    # watch cannot go on. It ends (its listener closes: every call fails with ENOSYS),
    # and says why, once, in both places.
    (tmp_path / "sandbox").mkdir()
    code = ("from lnk_execwatch.main import main; "
            f"main(['--socket-fd', '0', '--settings', {str(tmp_path)!r}, '--spec', 's.toml', "
            "'--command', '/usr/bin/true'], (900, 901))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=60)
    assert done.returncode == 1, done
    said = [line for line in done.stderr.splitlines() if line]
    assert len(said) == 1 and said[0].startswith("lnk-sandbox: the exec watch stopped ("), said
    assert said[0].endswith("the sandbox's programs can no longer start nor connect "
                            "(their calls fail with ENOSYS)"), said
    log = (tmp_path / "sandbox" / "programs.log").read_text()
    assert log.count("\n") == 1 and "\ts.toml\tthe exec watch stopped (" in log


# -- the socket guard's workers: one per call handed over, up to MAX_WORKERS -----------------


class _HeldCalls(SocketGuard):
    """The guard's pool with calls that wait until released (the pool is what is tested
    here; the calls themselves are real ones in tests/test_unix_sockets.py)."""

    __slots__ = ("done", "release", "started")

    def __init__(self) -> None:
        super().__init__(-1, -1, refused=lambda _kind, _line: None)
        self.release: dict[int, threading.Event] = {}
        self.started: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def _finish(self, work: _Call) -> None:
        self.started.put(work.id)
        self.release[work.id].wait()
        self.done.put(work.id)

    def hand(self, number: int) -> None:
        self.release[number] = threading.Event()
        self._hand_to_worker(_Call(CONNECT, number, -1, 1, b""))


def _taken(guard: _HeldCalls, count: int) -> set[int]:
    return {guard.started.get(timeout=30) for _ in range(count)}


def test_a_burst_of_calls_each_takes_a_worker_and_past_the_limit_waits_in_line() -> None:
    guard = _HeldCalls()
    for number in range(10):  # handed over faster than a new worker wakes
        guard.hand(number)
    assert _taken(guard, 10) == set(range(10))
    for number in range(10, MAX_WORKERS):
        guard.hand(number)
    assert _taken(guard, MAX_WORKERS - 10) == set(range(10, MAX_WORKERS))
    guard.hand(MAX_WORKERS)  # every worker busy: in line
    assert guard.workers == MAX_WORKERS
    assert guard.started.empty()
    guard.release[3].set()
    assert guard.done.get(timeout=30) == 3
    assert _taken(guard, 1) == {MAX_WORKERS}  # the freed worker takes the one in line
    guard.release[5].set()
    assert guard.done.get(timeout=30) == 5
    deadline = time.monotonic() + 30
    while guard.idle != 1 and time.monotonic() < deadline:  # the freed worker idles again
        time.sleep(0.01)
    assert (guard.idle, guard.in_line) == (1, 0)
    guard.hand(MAX_WORKERS + 1)  # taken by the idle one, no new worker
    assert _taken(guard, 1) == {MAX_WORKERS + 1}
    assert guard.workers == MAX_WORKERS
    for event in guard.release.values():
        event.set()


# -- kernels older than the machine's (found on Debian 12's Linux 6.1, bench/aarch64) ----


def test_thread_group_is_read_from_a_threads_status() -> None:
    status = b"Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4321\nNgid:\t0\n"
    assert thread_group(status) == 4321
    with open(f"/proc/{threading.get_native_id()}/status", "rb") as own:
        assert thread_group(own.read()) == os.getpid()
    with pytest.raises(OSError, match="no Tgid"):
        thread_group(b"Name:\tx\n")


def _in_a_thread(body: Callable[[], None], done: threading.Event) -> tuple[int, threading.Thread]:
    """`body` run in a new thread, which then waits for `done`; the thread's id."""
    ready: queue.SimpleQueue[int] = queue.SimpleQueue()

    def run() -> None:
        body()
        ready.put(threading.get_native_id())
        done.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    return ready.get(timeout=10), thread


def test_before_linux_6_9_a_threads_socket_is_taken_from_its_group() -> None:
    """Linux before 6.9 has no PIDFD_THREAD: the socket a (non-leader) thread names is
    taken from its process, the very file it has at that number."""
    caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    done = threading.Event()
    tid, thread = _in_a_thread(lambda: None, done)
    try:
        assert tid != os.getpid()
        taken = _take_from_thread_group(tid, caller.fileno())
        mine, theirs = os.fstat(taken), os.fstat(caller.fileno())
        os.close(taken)
        assert (mine.st_dev, mine.st_ino) == (theirs.st_dev, theirs.st_ino)
    finally:
        done.set()
        thread.join()
        caller.close()


def test_before_linux_6_9_a_thread_with_its_own_table_is_refused_not_confused() -> None:
    """A thread that unshared its descriptor table (CLONE_FILES) has, at the number it
    names, a file its group does not: the group's is never taken for it (EBADF)."""
    libc = ctypes.CDLL(None, use_errno=True)
    group_socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    number = group_socket.fileno()

    def unshare_and_replace() -> None:
        assert libc.unshare(0x400) == 0, ctypes.get_errno()  # CLONE_FILES
        other = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        os.dup2(other.fileno(), number)  # in this thread's own table only
        other.close()

    done = threading.Event()
    tid, thread = _in_a_thread(unshare_and_replace, done)
    try:
        with pytest.raises(OSError) as refused:
            _take_from_thread_group(tid, number)
        assert refused.value.errno == errno.EBADF
    finally:
        done.set()
        thread.join()
        group_socket.close()


def test_a_kernel_that_refuses_pidfd_thread_is_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first EINVAL for PIDFD_THREAD turns the guard to its thread-group way for
    good; the socket is still taken."""
    asked: list[int] = []

    def old_kernel(number: int, *args: object) -> int:
        if number == 434 and isinstance(args[1], ctypes.c_uint) and args[1].value:
            asked.append(args[1].value)
            raise OSError(errno.EINVAL, "Invalid argument")
        return syscall(number, *args)

    monkeypatch.setattr(sockets, "syscall", old_kernel)
    guard = SocketGuard(-1, -1, refused=lambda kind, text: None)
    caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        for _ in range(2):
            taken = guard._take(threading.get_native_id(), caller.fileno())
            assert os.fstat(taken).st_ino == os.fstat(caller.fileno()).st_ino
            os.close(taken)
        assert asked == [0o200] and not guard.thread_pidfds and not guard.pidfds
    finally:
        caller.close()


def test_memory_files_are_sealed_only_where_the_kernel_has_the_seal() -> None:
    cloexec, allow_sealing, noexec_seal, exec_flag = 0x1, 0x2, 0x8, 0x10
    assert memory_file_flags(0, seal=True) == noexec_seal | cloexec
    assert memory_file_flags(exec_flag | allow_sealing, seal=True) == \
        noexec_seal | allow_sealing | cloexec
    # Before Linux 6.3 neither flag exists: the caller's own, for the kernel to judge.
    assert memory_file_flags(0, seal=False) == cloexec
    assert memory_file_flags(allow_sealing, seal=False) == allow_sealing | cloexec
    assert memory_file_flags(exec_flag, seal=False) == exec_flag | cloexec
    # This machine's kernel: the watch's probe and check's agree.
    assert kernel_seals_memory_files() == check._memfd_noexec()
