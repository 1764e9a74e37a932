"""The exec watch's pieces that need no sandbox: path resolution, the judge, learn's offer."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lnk_common.wirelog import printable
from lnk_execwatch.judge import (
    SHEBANG_BYTES,
    Commands,
    interpreter_of,
    is_interpreter,
    offer,
    program_given_to_loader,
)
from lnk_execwatch.main import SandboxRights, open_inside, read_head
from lnk_execwatch.sockets import CONNECT, MAX_WORKERS, SocketGuard, _Call

DASH = os.path.realpath("/bin/sh")
FUZZ = settings(max_examples=int(os.environ.get("LNK_FUZZ_EXAMPLES", "300")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


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


@FUZZ
@given(st.binary(max_size=SHEBANG_BYTES + 40).map(lambda tail: b"#!" + tail))
@example(b"#!/bin/\0sh\n")
def test_interpreter_of_never_raises_and_never_names_a_nul_or_blank(head: bytes) -> None:
    found = interpreter_of(head)
    if found is not None:
        assert found and b"\0" not in found and b" " not in found and b"\t" not in found
        assert head.startswith(b"#!") and len(found) <= SHEBANG_BYTES - 3


@FUZZ
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
            "'--commands'], (900, 901))")
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
