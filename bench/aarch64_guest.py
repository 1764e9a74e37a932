"""What bench/aarch64 runs inside the emulated aarch64 machine, as an ordinary user.

Stdlib only (the guest's /usr/bin/python3, Debian bookworm's 3.11); it never imports the
project. Called by the guest's init as

    python3 aarch64_guest.py CHECKOUT WHEELS

where CHECKOUT is a writable copy of the project's files and WHEELS a folder of the
project's dependencies for aarch64 (and setuptools, the build backend): the guest has no
network, so pip takes them from there (PIP_NO_INDEX, PIP_FIND_LINKS).

Each check prints `PASS name` or `FAIL name`, then what it saw, indented; the last line
is `aarch64: N passed, N failed`. In order:
    readme demo     the README's command, as written (bin/setup, then the run)
    check           `lnk-sandbox check` names aarch64 and finds nothing missing
    filter          the seccomp filter in force (/proc/self/status)
    commands        a [commands] refusal: a listed shell running an unlisted program
    execveat        execveat(2) by its aarch64 number (281): a memory file refused by the
                    filter, unlisted programs (by path and by a folder's descriptor)
                    refused by the watch and named, a listed one run
    unix connect    connect(2) to a unix socket outside (a listener of this script's, in
                    a folder the spec reads) refused and named, nothing reaching it; one
                    made inside the sandbox connected, from the first thread and another;
                    a TCP connect to the sandbox's own loopback
    wheel           the checkout built into a wheel (its tag: linux_aarch64, the browser
                    compiled in), installed into a fresh venv outside the checkout, the
                    demo run with that install from another folder
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

CHECKOUT = Path(sys.argv[1])
WHEELS = Path(sys.argv[2])
WORK = Path.home() / "work"
SETTINGS = WORK / "settings"
PYTHON = os.path.realpath("/usr/bin/python3")
DASH = os.path.realpath("/bin/sh")
TIMEOUT = 600
RESULTS: list[tuple[str, bool]] = []


def env() -> dict[str, str]:
    return {**os.environ, "LNK_HOME": str(SETTINGS), "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(WHEELS), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def shown(text: str) -> str:
    return "".join(f"    | {line}\n" for line in text.rstrip("\n").splitlines())


def run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    start = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    print(f"  $ {' '.join(command)}   (exit {done.returncode}, "
          f"{time.monotonic() - start:.1f} s)")
    if done.stdout:
        print("  stdout:\n" + shown(done.stdout), end="")
    if done.stderr:
        print("  stderr:\n" + shown(done.stderr), end="")
    return done


def check(name: str) -> Callable[[Callable[[], bool]], None]:
    def wrapped(body: Callable[[], bool]) -> None:
        print(f"== {name}", flush=True)
        start = time.monotonic()
        try:
            passed = body()
        except Exception as error:  # a check that broke fails; the rest still run
            print(f"  error: {error!r}")
            passed = False
        print(f"{'PASS' if passed else 'FAIL'} {name} ({time.monotonic() - start:.1f} s)",
              flush=True)
        RESULTS.append((name, passed))

    return wrapped


def toml_list(*items: str) -> str:
    return json.dumps(list(items))


def write_spec(name: str, text: str) -> Path:
    path = WORK / f"{name}.toml"
    path.write_text(text)
    return path


def lnk_sandbox() -> str:
    return str(CHECKOUT / ".venv" / "bin" / "lnk-sandbox")


def readme_command() -> str:
    """The README's first command, read from the README itself."""
    for line in (CHECKOUT / "README.md").read_text().splitlines():
        if line.startswith("cd examples && ../bin/setup && "):
            return line
    raise AssertionError("the README's demo command is not in README.md")


def demo_seen(done: subprocess.CompletedProcess[str]) -> bool:
    return (done.returncode != 0 and "written" in done.stdout.splitlines()
            and "pyproject.toml: No such file or directory" in done.stderr
            and "secret" in done.stderr and "Permission denied" in done.stderr)


def main() -> None:
    WORK.mkdir(exist_ok=True)
    SETTINGS.mkdir(exist_ok=True)
    print(f"guest: {platform.machine()}, {platform.platform()}, Python {platform.python_version()}"
          f", uid {os.getuid()}", flush=True)

    @check("readme demo")
    def _() -> bool:
        command = readme_command()
        # The demo's workspace holds what an earlier run wrote: start it empty.
        for path in (CHECKOUT / "examples" / "workspace").glob("hello.txt"):
            path.unlink()
        done = run(["sh", "-c", command], cwd=CHECKOUT)
        return demo_seen(done)

    @check("check")
    def _() -> bool:
        done = run([lnk_sandbox(), "check"])
        return done.returncode == 0 and " on aarch64" in done.stdout

    @check("filter")
    def _() -> bool:
        spec = write_spec("plain", "[files]\n")
        done = run([lnk_sandbox(), "run", "--spec", str(spec), "--", "/usr/bin/grep",
                    "-E", "^(Seccomp|NoNewPrivs|CapEff):", "/proc/self/status"])
        fields = dict(line.split(":\t", 1) for line in done.stdout.splitlines())
        return (fields.get("Seccomp", "").strip() == "2"
                and fields.get("NoNewPrivs", "").strip() == "1"
                and fields.get("CapEff", "").strip() == "0000000000000000")

    @check("commands")
    def _() -> bool:
        spec = write_spec("commands", f"[commands]\nrun = {toml_list(DASH, '/usr/bin/cat')}\n")
        done = run([lnk_sandbox(), "run", "--spec", str(spec), "--", DASH, "-c",
                    "echo listed | /usr/bin/cat; /usr/bin/id; echo status=$?"])
        named = f"lnk-sandbox: refused to run /usr/bin/id: not in [commands] of {spec}"
        log = SETTINGS / "sandbox" / "programs.log"
        return ("listed" in done.stdout and "status=126" in done.stdout
                and "uid=" not in done.stdout and named in done.stderr.splitlines()
                and log.exists() and "refused to run /usr/bin/id" in log.read_text())

    execveat = """
import ctypes, errno, os, sys
assert os.uname().machine == "aarch64"
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
EXECVEAT, MEMFD_CREATE = 281, 279  # the generic table's numbers (aarch64)
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
argv = (ctypes.c_char_p * 2)(b"x", None)
envp = (ctypes.c_char_p * 1)(None)
def attempt(label, dirfd, path, flags):
    pid = os.fork()
    if pid == 0:
        libc.syscall(EXECVEAT, dirfd, path, argv, envp, flags)
        name = errno.errorcode.get(ctypes.get_errno(), "?")
        os.write(1, f"{label}: refused, {name}\\n".encode())
        os._exit(3)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) == 0:
        print(f"{label}: ran, exit 0", flush=True)
memfd = libc.syscall(MEMFD_CREATE, b"payload", 0)
if memfd < 0:
    print(f"memfd_create: {errno.errorcode.get(ctypes.get_errno(), '?')}", flush=True)
    sys.exit(1)
os.write(memfd, open("/usr/bin/true", "rb").read())
attempt("memory file (AT_EMPTY_PATH)", memfd, b"", AT_EMPTY_PATH)
attempt("unlisted /usr/bin/id by path", AT_FDCWD, b"/usr/bin/id", 0)
folder = os.open("/usr/bin", os.O_PATH | os.O_DIRECTORY)
attempt("unlisted id by the folder's descriptor", folder, b"id", 0)
attempt("listed /usr/bin/true by path", AT_FDCWD, b"/usr/bin/true", 0)
"""

    @check("execveat")
    def _() -> bool:
        spec = write_spec("execveat", "[commands]\n"
                          f"run = {toml_list(PYTHON, '/usr/bin/true')}\n")
        done = run([lnk_sandbox(), "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                    execveat])
        lines = done.stdout.splitlines()
        named = [line for line in done.stderr.splitlines() if "refused to run" in line]
        return (lines == ["memory file (AT_EMPTY_PATH): refused, EACCES",
                          "unlisted /usr/bin/id by path: refused, EACCES",
                          "unlisted id by the folder's descriptor: refused, EACCES",
                          "listed /usr/bin/true by path: ran, exit 0"]
                and len(named) == 2
                and all("refused to run /usr/bin/id: not in [commands]" in line
                        for line in named))

    # Every connect passes the watch: a unix path judged, an inet address used as read
    # (the sandbox's own loopback); one from a thread other than the process's first
    # (the watch takes the socket from the thread: PIDFD_THREAD, or before Linux 6.9
    # from its group, checked).
    connect = """
import os, socket, sys, threading
def attempt(label, path, family=socket.AF_UNIX):
    client = socket.socket(family, socket.SOCK_STREAM)
    try:
        client.connect(path)
        print(f"{label}: connected", flush=True)
    except OSError as error:
        print(f"{label}: errno {error.errno}", flush=True)
attempt("outside", sys.argv[1])
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind("/tmp/inside.sock")
server.listen(4)
attempt("made inside", "/tmp/inside.sock")
thread = threading.Thread(target=attempt, args=("made inside, from a thread", "/tmp/inside.sock"))
thread.start()
thread.join()
loopback = socket.create_server(("127.0.0.1", 0))
attempt("tcp to the sandbox's loopback", loopback.getsockname(), socket.AF_INET)
"""

    @check("unix connect")
    def _() -> bool:
        outside = WORK / "outside"
        outside.mkdir(exist_ok=True)
        path = outside / "agent.sock"
        if path.exists():
            path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(8)
        listener.settimeout(0.2)
        reached = []
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    peer, _ = listener.accept()
                except OSError:
                    continue
                reached.append(1)
                peer.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            spec = write_spec("unix", f"[files]\nread = {toml_list(str(outside))}\n")
            done = run([lnk_sandbox(), "run", "--spec", str(spec), "--", PYTHON, "-I", "-c",
                        connect, str(path)])
        finally:
            stop.set()
            thread.join()
            listener.close()
        print(f"  connections that reached the listener outside: {len(reached)}")
        line = (f"lnk-sandbox: refused to connect to the unix socket {path}: it was not "
                "made inside this sandbox")
        return (done.stdout.splitlines() == ["outside: errno 13", "made inside: connected",
                                             "made inside, from a thread: connected",
                                             "tcp to the sandbox's loopback: connected"]
                and any(got.startswith(line) for got in done.stderr.splitlines())
                and not reached)

    @check("wheel")
    def _() -> bool:
        built = WORK / "wheel"
        shutil.rmtree(built, ignore_errors=True)
        fresh = WORK / "fresh-venv"
        shutil.rmtree(fresh, ignore_errors=True)
        source = WORK / "source"  # a copy: the build writes beside the sources
        shutil.rmtree(source, ignore_errors=True)
        shutil.copytree(CHECKOUT, source, ignore=shutil.ignore_patterns(".venv", "build",
                                                                        "*.egg-info"))
        # Debian's python3 has no pip of its own (python3-pip): the fresh venv's builds.
        if run([PYTHON, "-m", "venv", str(fresh)]).returncode != 0:
            return False
        if run([str(fresh / "bin" / "pip"), "wheel", "--no-deps", "-w", str(built),
                str(source)]).returncode != 0:
            return False
        wheels = [path.name for path in built.glob("lnk_sandbox-*.whl")]
        print(f"  built: {wheels}")
        if run([str(fresh / "bin" / "pip"), "install", "-q",
                *[str(built / name) for name in wheels]]).returncode != 0:
            return False
        shutil.rmtree(source)
        # The demo's spec and folders, away from any checkout.
        demo = WORK / "demo"
        shutil.rmtree(demo, ignore_errors=True)
        (demo / "workspace").mkdir(parents=True)
        (demo / "secret").mkdir()
        (demo / "secret" / "key").write_text("hidden\n")
        shutil.copy(CHECKOUT / "examples" / "demo.toml", demo / "demo.toml")
        (WORK / "pyproject.toml").write_text("outside the demo folder\n")
        done = run([str(fresh / "bin" / "lnk-sandbox"), "run", "--spec", "demo.toml", "--",
                    "sh", "-c", "echo written > workspace/hello.txt && cat workspace/hello.txt;"
                    " cat ../pyproject.toml; ls secret"], cwd=demo)
        opened = run([str(fresh / "bin" / "lnk-sandbox"), "check"])
        return (len(wheels) == 1 and wheels[0].endswith("-py3-none-linux_aarch64.whl")
                and demo_seen(done) and opened.returncode == 0)

    passed = sum(1 for _, ok in RESULTS if ok)
    print(f"aarch64: {passed} passed, {len(RESULTS) - passed} failed", flush=True)


if __name__ == "__main__":
    main()
