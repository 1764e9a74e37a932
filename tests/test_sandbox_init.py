"""The sandbox's init in C (lnk_wrap/sandbox_init/lnk-init.c; docs/decisions/0039), each
thing it does, on the real kernel, beside the Python init it stands in for
(lnk_wrap.init, the fallback): the same tables, the same refusals in the same words
(exit 125, nothing run), the filter's listener and the sock_diag socket handed to the
watch (this test plays the watch), the watch's word and the go-ahead, the loader's
variables left out, inherited descriptors closed, Landlock applied and checked, the
search on PATH; and the launcher's choice between the two."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from lnk_common.chain import package_root
from lnk_wrap import bwrap, landlock
from lnk_wrap.launch import NATIVE_INIT, NATIVE_INIT_STALE_NS, init_argv
from lnk_wrap.outside import LOADER_VARIABLES
from tests.conftest import SANDBOX_TIMEOUT_SECONDS

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT.joinpath(*NATIVE_INIT)
SOURCE = NATIVE.with_name("lnk-init.c")
PYTHON_INIT = [os.path.realpath("/usr/bin/python3"), "-I", "-S",
               str(ROOT / "lnk_wrap" / "_start.py"), "init"]
INITS = {"c": [str(NATIVE)], "python": PYTHON_INIT}
NOT_RUN = "; the program was not run\n"
# What /bin/sh, cat and ls need to run under Landlock, outside a sandbox.
RUNNABLE = ["--rule", "read:/usr", "--rule", "read:/etc", "--rule", "proc:/proc"]


@pytest.fixture(autouse=True)
def _built() -> None:
    assert os.access(NATIVE, os.X_OK), f"{NATIVE} is not built: run bin/setup (cc, libc6-dev)"


def test_its_tables_are_the_python_inits(tmp_path: Path) -> None:
    """The access names, the rights Landlock handles at each ABI and the loader's
    variables, read from the compiled program itself, are lnk_wrap.landlock's and
    lnk_wrap.outside's."""
    probe = tmp_path / "probe.c"
    probe.write_text(
        f'#define main lnk_init_main\n#include "{SOURCE}"\n#undef main\n'
        "int main(void) {\n"
        "  for (size_t at = 0; at < COUNT(ACCESS_RIGHTS); at++)\n"
        '    printf("access %s %llu\\n", ACCESS_RIGHTS[at].name,\n'
        "           (unsigned long long)ACCESS_RIGHTS[at].rights);\n"
        "  for (long abi = 1; abi <= 9; abi++)\n"
        '    printf("handled %ld %llu\\n", abi, (unsigned long long)handled_by(abi));\n'
        "  for (size_t at = 0; at < COUNT(LOADER_VARIABLES); at++)\n"
        '    printf("loader %s\\n", LOADER_VARIABLES[at]);\n'
        "  return 0;\n}\n")
    built = tmp_path / "probe"
    subprocess.run(["cc", "-pthread", "-o", str(built), str(probe)], check=True)
    lines = subprocess.run([str(built)], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    access = {word[1]: int(word[2]) for word in map(str.split, lines) if word[0] == "access"}
    handled = {int(word[1]): int(word[2]) for word in map(str.split, lines)
               if word[0] == "handled"}
    loader = {word[1] for word in map(str.split, lines) if word[0] == "loader"}
    assert access == landlock.ACCESS_RIGHTS
    assert handled == {abi: landlock.handled_fs(abi) for abi in range(1, 10)}
    assert loader == LOADER_VARIABLES


@pytest.mark.parametrize(("argv", "reason"), [
    ([], "expected OPTIONS -- COMMAND [ARG…]"),
    (["--filter"], "--filter needs a value"),
    (["--rule", "read:relative", "--", "touch"], "not a rule: 'read:relative'"),
    (["--rule", "execute:/usr", "--", "touch"], "not a rule: 'execute:/usr'"),
    (["--rule", "read", "--", "touch"], "not a rule: 'read'"),
    (["--filter", "none", "--", "touch"], "unknown option '--filter' (expected --filter, "
     "--watch-fd, --go-fd, --rule ACCESS:PATH)"),
    (["--filter", "sockets", "--filter", "programs", "--", "touch"],
     "unknown option '--filter' (expected --filter, --watch-fd, --go-fd, --rule ACCESS:PATH)"),
    (["--watch-fd", "3x", "--", "touch"], "unknown option '--watch-fd' (expected --filter, "
     "--watch-fd, --go-fd, --rule ACCESS:PATH)"),
    (["--go-fd", "-1", "--", "touch"], "unknown option '--go-fd' (expected --filter, "
     "--watch-fd, --go-fd, --rule ACCESS:PATH)"),
    (["--bogus", "1", "--", "touch"], "unknown option '--bogus' (expected --filter, "
     "--watch-fd, --go-fd, --rule ACCESS:PATH)"),
    (["--watch-fd", "3", "--", "touch"],
     "--filter is required: no sandbox runs without its seccomp filter"),
    (["--filter", "sockets", "--", "touch"],
     "--watch-fd is required: no sandbox runs without its watch"),
    (["--filter", "sockets", "--watch-fd", "3", "--"], "expected OPTIONS -- COMMAND [ARG…]"),
])
@pytest.mark.parametrize("init", sorted(INITS))
def test_a_bad_line_is_refused_in_the_python_inits_words(
    tmp_path: Path, init: str, argv: list[str], reason: str
) -> None:
    mark = tmp_path / "ran"
    argv = [*argv, str(mark)] if argv[-1:] == ["touch"] else argv
    done = subprocess.run([*INITS[init], *argv], capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert (done.returncode, done.stderr) == (125, f"lnk-sandbox-init: {reason}{NOT_RUN}")
    assert not mark.exists()


class _Watch:
    """This test as the sandbox's watch and its launcher: the init's other end of the
    socket pair, and the go-ahead's pipe."""

    def __init__(self, init: list[str], options: list[str], command: list[str], *,
                 env: dict[str, str] | None = None, extra_fd: int | None = None,
                 watch_gone: bool = False) -> None:
        self.watch, init_end = socket.socketpair()
        go_read, self.go_write = os.pipe()
        if watch_gone:
            self.watch.close()
        given = (init_end.fileno(), go_read, *((extra_fd,) if extra_fd is not None else ()))
        self.process = subprocess.Popen(
            [*init, "--filter", "sockets", "--watch-fd", str(init_end.fileno()), "--go-fd",
             str(go_read), *options, "--", *command],
            pass_fds=given, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        init_end.close()
        os.close(go_read)
        self.received: list[int] = []

    def take(self) -> tuple[bytes, list[int]]:
        label, fds, _, _ = socket.recv_fds(self.watch, 16, 4)
        self.received = fds
        return label, fds

    def finish(self, word: bytes = b"+", go: bytes | None = b"x") -> tuple[int, str, str]:
        try:
            # An init that refused before this (its filter, say) has closed both ends.
            with contextlib.suppress(BrokenPipeError):
                self.watch.send(word)
                if go is not None:
                    os.write(self.go_write, go)
            os.close(self.go_write)
            stdout, stderr = self.process.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.communicate()
            for fd in self.received:
                os.close(fd)
            self.watch.close()
        return self.process.returncode, stdout, stderr


@pytest.mark.parametrize("init", sorted(INITS))
def test_the_listener_and_the_diag_socket_go_to_the_watch_before_anything_runs(
    tmp_path: Path, init: str
) -> None:
    """One message, label "L": the filter's listener and a sock_diag netlink socket. The
    program runs only after the watch's "+" and the go-ahead, under the filter, with no
    new privileges, Landlock applied (the root folder and what no rule grants are
    refused), no loader variable, and no inherited descriptor past 2."""
    secret = tmp_path / "not-granted"
    secret.write_text("no")
    pipe_read, extra_write = os.pipe()
    extra_read = fcntl.fcntl(pipe_read, fcntl.F_DUPFD, 50)  # no number ls takes for itself
    os.close(pipe_read)
    env = {"PATH": "/usr/bin:/bin", "KEPT": "yes", "LD_PRELOAD": "/nonexistent.so",
           "LD_LIBRARY_PATH": "/nonexistent", "GCONV_PATH": "/nonexistent",
           "GLIBC_TUNABLES": "glibc.malloc.check=3"}
    script = (f"env; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status; ls /proc/self/fd; "
              f"ls / || echo root-refused; cat {secret} || echo secret-refused")
    watch = _Watch(INITS[init], RUNNABLE, ["sh", "-c", script], env=env, extra_fd=extra_read)
    os.close(extra_read)
    os.close(extra_write)
    label, fds = watch.take()
    assert label == b"L" and len(fds) == 2
    assert os.readlink(f"/proc/self/fd/{fds[0]}") == "anon_inode:seccomp notify"
    diag = socket.socket(fileno=os.dup(fds[1]))
    assert (diag.family, diag.type, diag.proto) == (socket.AF_NETLINK, socket.SOCK_RAW, 4)
    diag.close()
    assert watch.process.poll() is None  # waiting for the watch's word
    code, stdout, stderr = watch.finish()
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert "KEPT=yes" in lines and not [line for line in lines
                                        if line.startswith(("LD_", "GCONV", "GLIBC"))]
    assert "Seccomp:\t2" in lines and "NoNewPrivs:\t1" in lines
    assert str(extra_read) not in lines[lines.index("NoNewPrivs:\t1") + 1:]
    assert "root-refused" in lines and "secret-refused" in lines


@pytest.mark.parametrize(("word", "go", "reason"), [
    (b"-", b"x", "the sandbox's watch is not there to take the filter's listener"),
    (b"+", b"n", "the sandbox's ways out were not made (its launcher refused or ended)"),
    (b"+", None, "the sandbox's ways out were not made (its launcher refused or ended)"),
])
@pytest.mark.parametrize("init", sorted(INITS))
def test_no_word_from_the_watch_or_no_go_ahead_runs_nothing(
    tmp_path: Path, init: str, word: bytes, go: bytes | None, reason: str
) -> None:
    mark = tmp_path / "ran"
    watch = _Watch(INITS[init], RUNNABLE, ["touch", str(mark)])
    watch.take()
    code, _, stderr = watch.finish(word, go)
    assert (code, stderr) == (125, f"lnk-sandbox-init: {reason}{NOT_RUN}")
    assert not mark.exists()


@pytest.mark.parametrize("init", sorted(INITS))
def test_a_watch_gone_before_the_listener_is_sent_runs_nothing(
    tmp_path: Path, init: str
) -> None:
    mark = tmp_path / "ran"
    watch = _Watch(INITS[init], RUNNABLE, ["touch", str(mark)], watch_gone=True)
    _, stderr = watch.process.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    code = watch.process.returncode
    os.close(watch.go_write)
    assert code == 125
    assert stderr == ("lnk-sandbox-init: the filter's listener could not be sent to the "
                      f"sandbox's watch{NOT_RUN}")
    assert not mark.exists()


@pytest.mark.parametrize(("rule", "reason"), [
    ("read:/", "Landlock did not take effect: the sandbox's root folder is still readable"),
    ("read:/nonexistent", "cannot open /nonexistent for a rule: No such file or directory"),
])
@pytest.mark.parametrize("init", sorted(INITS))
def test_landlock_not_applied_as_asked_runs_nothing(
    tmp_path: Path, init: str, rule: str, reason: str
) -> None:
    mark = tmp_path / "ran"
    watch = _Watch(INITS[init], [*RUNNABLE, "--rule", rule], ["touch", str(mark)])
    watch.take()
    code, _, stderr = watch.finish()
    assert (code, stderr) == (125, f"lnk-sandbox-init: {reason}{NOT_RUN}")
    assert not mark.exists()


@pytest.mark.parametrize("init", sorted(INITS))
def test_the_command_is_searched_on_path_as_a_shell_does(tmp_path: Path, init: str) -> None:
    """Found on PATH past a folder Landlock refuses; not found (127); found but not to be
    run (126: permission denied, or the kernel's own reason)."""
    granted = tmp_path / "granted"
    granted.mkdir()
    refused = tmp_path / "refused"
    refused.mkdir()
    (refused / "true").write_bytes(Path("/usr/bin/true").read_bytes())
    (refused / "only-here").write_bytes(Path("/usr/bin/true").read_bytes())
    for program in refused.iterdir():
        program.chmod(0o755)
    (granted / "not-executable").write_text("#!/bin/sh\n")
    (granted / "garbage").write_bytes(b"\x00\x01not a program")
    (granted / "garbage").chmod(0o755)
    rules = [*RUNNABLE, "--rule", f"read:{granted}"]
    cases = [
        (["true"], f"{refused}:/usr/bin", 0, ""),
        (["nowhere-to-be-found"], "/usr/bin", 127,
         "lnk-sandbox: nowhere-to-be-found: not found in the sandbox\n"),
        (["only-here"], f"{refused}:/usr/bin", 126,
         "lnk-sandbox: only-here: cannot be run in the sandbox (permission denied)\n"),
        ([str(granted / "not-executable")], "/usr/bin", 126,
         f"lnk-sandbox: {granted}/not-executable: cannot be run in the sandbox "
         "(permission denied)\n"),
        (["garbage"], str(granted), 126, "lnk-sandbox: garbage: cannot be run: Exec format "
         "error\n"),
    ]
    for command, path, status, said in cases:
        watch = _Watch(INITS[init], rules, command, env={"PATH": path})
        watch.take()
        assert watch.finish()[0::2] == (status, said), command


def test_a_filter_missing_or_not_bpf_runs_nothing(tmp_path: Path) -> None:
    """The filter is read from ../filters beside the program, by its absolute path."""
    folder = tmp_path / "lnk_wrap" / "sandbox_init"
    folder.mkdir(parents=True)
    copy = folder / "lnk-init"
    shutil.copy2(NATIVE, copy)
    mark = tmp_path / "ran"
    filter_file = tmp_path / "lnk_wrap" / "filters" / f"{os.uname().machine}-sockets.bpf"
    watch = _Watch([str(copy)], RUNNABLE, ["touch", str(mark)])
    code, _, stderr = watch.finish()
    assert (code, stderr) == (125, f"lnk-sandbox-init: cannot read the seccomp filter "
                                   f"{folder}/../filters/{filter_file.name}: No such file or "
                                   f"directory{NOT_RUN}")
    filter_file.parent.mkdir()
    filter_file.write_bytes(b"1234567")
    watch = _Watch([str(copy)], RUNNABLE, ["touch", str(mark)])
    code, _, stderr = watch.finish()
    assert (code, stderr) == (125, f"lnk-sandbox-init: not a BPF program (7 bytes){NOT_RUN}")
    done = subprocess.run(["lnk-init", "--filter", "sockets", "--watch-fd", "0", "--", "touch",
                           str(mark)], executable=str(NATIVE), capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert (done.returncode, done.stderr) == (
        125, f"lnk-sandbox-init: started as lnk-init, not by its absolute path{NOT_RUN}")
    assert not mark.exists()


def test_the_launcher_runs_the_c_init_where_built_else_the_python_one(tmp_path: Path) -> None:
    """Built (bin/setup), every sandbox of this suite starts with the C init; not built,
    with the Python init and its interpreter's folders."""
    assert init_argv(package_root()) == (
        [os.path.join(bwrap.PACKAGES_INSIDE, *NATIVE_INIT)], ())
    python, runtime = init_argv(str(tmp_path))
    assert python[1:] == ["-I", "-S", f"{bwrap.PACKAGES_INSIDE}/lnk_wrap/_start.py", "init"]
    assert runtime
    not_executable = tmp_path.joinpath(*NATIVE_INIT)
    not_executable.parent.mkdir(parents=True)
    not_executable.write_bytes(NATIVE.read_bytes())
    not_executable.chmod(stat.S_IRUSR)
    assert init_argv(str(tmp_path))[0] == python
    built = not_executable
    built.chmod(0o755)
    assert init_argv(str(tmp_path))[1] == ()  # no source beside it: what was installed
    source = built.with_name("lnk-init.c")
    source.write_text("/* changed since it was built */\n")
    changed = source.stat().st_mtime_ns
    os.utime(built, ns=(changed - NATIVE_INIT_STALE_NS - 1,) * 2)
    assert init_argv(str(tmp_path))[0] == python  # older than its source: not run
    # Written with its source by an install, a moment before it (a wheel's order).
    os.utime(built, ns=(changed - NATIVE_INIT_STALE_NS,) * 2)
    assert init_argv(str(tmp_path))[1] == ()
