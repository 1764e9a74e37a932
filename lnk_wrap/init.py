"""lnk-sandbox-init: the first program inside the sandbox, and the last of ours.

    lnk-sandbox-init --filter sockets|programs --watch-fd N [--go-fd N] --rule ACCESS:PATH …
                     -- COMMAND [ARG…]

Order of operations, each checked, any failure refusing to run the program (exit 125):
1. Read the options (ACCESS is one of lnk_wrap.bwrap.Access).
2. Open a sock_diag netlink socket: it belongs to the sandbox's network namespace, so
   the watch outside can list the unix sockets bound in it (made inside this sandbox).
   Start the thread that will send the filter's listener (_HandOver: it is not under
   the filter, which binds only the thread that installs it). Install the seccomp
   filter (lnk_wrap.seccomp_filter says what it refuses and what it hands over), the
   first thing inside, and check it took effect. The thread sends its listener and the
   netlink socket to the watch over the inherited socket N (SCM_RIGHTS) and ends; wait
   for the watch's one-byte acknowledgement (so nothing runs unwatched), close all
   three.
   With --go-fd N (every sandbox the launcher makes): wait for the launcher's go-ahead,
   one byte "x" on N, sent once the sandbox's ways out exist (lnk_dns.helper made its
   sockets) and no stop signal came to the launcher first. Anything else, the end of
   the pipe included (the launcher refused, or died), and nothing runs. This is why the
   wait is here and not bubblewrap's --block-fd: bubblewrap goes on at the end of its
   pipe, and its process inside outlives an outer one that is killed.
3. Clear the loader's injection variables (LD_PRELOAD, LD_AUDIT, … : the list below).
4. Close every inherited file descriptor but 0, 1 and 2.
5. Apply Landlock: single-threaded, after bubblewrap's mounts, right before exec; then
   verify it took effect by opening the sandbox's root folder, which no rule grants.
6. exec the command. This process is replaced: nothing of ours stays inside.

Keep imports here few and cheap: every sandbox start pays for them.
"""

from __future__ import annotations

import os
import sys

from lnk_wrap import landlock, seccomp
from lnk_wrap.outside import LOADER_VARIABLES, without_loader_variables

__all__ = ["LOADER_VARIABLES", "main"]

EXIT_SANDBOX_FAILED = 125
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127

_ACCESS = landlock.ACCESS_RIGHTS


class InitError(Exception):
    """The sandbox cannot be finished as asked; the program is not run."""


_FILTERS = ("sockets", "programs")
_AF_NETLINK = 16
_NETLINK_SOCK_DIAG = 4
_FILTER_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filters")
# The filters built (lnk_wrap.seccomp_filter.ARCHITECTURES, lnk_common.arch): this
# machine's is loaded; on any other architecture nothing runs.
_ARCHITECTURES = ("x86_64", "aarch64")


class Options:
    __slots__ = ("command", "filter", "go_fd", "rules", "watch_fd")

    def __init__(self) -> None:
        self.rules: list[landlock.Rule] = []
        self.filter = ""
        self.watch_fd = -1
        self.go_fd = -1
        self.command: list[str] = []


def parse(argv: list[str]) -> Options:
    options = Options()
    index = 0
    while index < len(argv) and argv[index] != "--":
        option = argv[index]
        if index + 1 >= len(argv):
            raise InitError(f"{option} needs a value")
        value = argv[index + 1]
        if option == "--rule":
            access, _, path = value.partition(":")
            if access not in _ACCESS or not path.startswith("/"):
                raise InitError(f"not a rule: {value!r}")
            options.rules.append((path, _ACCESS[access]))
        elif option == "--filter" and value in _FILTERS and not options.filter:
            options.filter = value
        elif option == "--watch-fd" and value.isdigit() and options.watch_fd < 0:
            options.watch_fd = int(value)
        elif option == "--go-fd" and value.isdigit() and options.go_fd < 0:
            options.go_fd = int(value)
        else:
            raise InitError(f"unknown option {option!r} (expected --filter, --watch-fd, "
                            "--go-fd, --rule ACCESS:PATH)")
        index += 2
    options.command = argv[index + 1 :]
    if index >= len(argv) or not options.command:
        raise InitError("expected OPTIONS -- COMMAND [ARG…]")
    if not options.filter:
        raise InitError("--filter is required: no sandbox runs without its seccomp filter")
    if options.watch_fd < 0:
        raise InitError("--watch-fd is required: no sandbox runs without its watch")
    return options


def install_filter(options: Options) -> None:
    """The seccomp filter, first; its listener and the sandbox's sock_diag socket handed
    to the watch, which acknowledges them (nothing runs unwatched)."""
    import _socket

    arch = os.uname().machine
    if arch not in _ARCHITECTURES:
        raise InitError(f"no seccomp filter is built for {arch} (only for "
                        f"{', '.join(_ARCHITECTURES)}); refusing to run unfiltered")
    try:
        diag = _socket.socket(_AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC,
                              _NETLINK_SOCK_DIAG)
    except OSError as error:
        raise InitError(f"cannot open the sandbox's sock_diag socket: {error.strerror}"
                        ) from None
    hand_over = _HandOver(options.watch_fd, diag.fileno())
    listener = None
    try:
        with open(os.path.join(_FILTER_FOLDER, f"{arch}-{options.filter}.bpf"), "rb") as handle:
            program = handle.read(seccomp.MAX_INSTRUCTIONS * 8 + 1)
        listener = seccomp.install(program, listener=True)
        if listener is None:
            raise InitError("the seccomp filter gave no listener")
    except seccomp.SeccompError as error:
        raise InitError(str(error)) from None
    finally:
        sent = hand_over.send(listener)
        diag.close()
        if listener is not None:
            os.close(listener)
    try:
        if not sent:
            raise InitError("the filter's listener could not be sent to the sandbox's watch")
        if os.read(options.watch_fd, 1) != b"+":
            raise InitError("the sandbox's watch is not there to take the filter's listener")
    finally:
        os.close(options.watch_fd)


class _HandOver:
    """Sends the filter's listener and the sock_diag socket to the watch (SCM_RIGHTS)
    from a thread started before the filter is installed, so not under it: a filter
    binds the thread that installs it (and those it starts after), and under it this
    sendmsg would be handed to the watch itself, which has no listener yet. (Before, the
    numbers were written and the watch took the descriptors with pidfd_getfd, which
    needs ctypes in the watch: some 3 ms of CPU at every start.)

    The thread runs nothing but the send. The init waits for it to have sent before it
    goes on, and its exec of the program ends every other thread of the process
    (de_thread) before the program runs: no code of the sandbox's own ever runs
    unfiltered. Landlock, applied after, binds the init's own thread, which execs."""

    __slots__ = ("diag", "installed", "listener", "send_fds", "sent", "sent_all", "watch_fd")

    def __init__(self, watch_fd: int, diag: int) -> None:
        import _thread

        from lnk_common.fdpass import send_fds

        self.send_fds = send_fds  # imported here: the thread itself only sends
        self.watch_fd = watch_fd
        self.diag = diag
        self.listener: int | None = None
        self.sent_all = False
        self.installed = _thread.allocate_lock()
        self.sent = _thread.allocate_lock()
        self.installed.acquire()
        self.sent.acquire()
        try:
            _thread.start_new_thread(self._run, ())
        except RuntimeError as error:
            raise InitError(f"cannot start the thread that hands the filter's listener to "
                            f"the watch: {error}") from None

    def _run(self) -> None:
        self.installed.acquire()  # until the filter is installed, or failed
        try:
            if self.listener is not None:
                self.send_fds(self.watch_fd, (self.listener, self.diag))
                self.sent_all = True
        except OSError:
            pass  # sent_all stays false: the init refuses to run the program
        finally:
            self.sent.release()

    def send(self, listener: int | None) -> bool:
        """Send `listener` (None: the filter failed, nothing is sent) and wait until the
        thread has; whether it sent both descriptors."""
        self.listener = listener
        self.installed.release()
        self.sent.acquire()
        return self.sent_all


def wait_for_go(fd: int) -> None:
    """The launcher's go-ahead: exactly b"x"; the end of the pipe is a refusal."""
    try:
        said = os.read(fd, 1)
    finally:
        os.close(fd)
    if said != b"x":
        raise InitError("the sandbox's ways out were not made (its launcher refused or "
                        "ended)")


def apply_landlock(rules: list[landlock.Rule]) -> None:
    abi = landlock.abi_version()
    try:
        landlock.restrict_self(rules, abi=abi)
    except landlock.LandlockError as error:
        raise InitError(str(error)) from None
    try:
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        return
    os.close(fd)
    raise InitError("Landlock did not take effect: the sandbox's root folder is still readable")


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    try:
        options = parse(arguments)
        install_filter(options)
        if options.go_fd >= 0:
            wait_for_go(options.go_fd)
        command = options.command
        env = without_loader_variables(os.environ)
        os.closerange(3, 1 << 20)
        apply_landlock(options.rules)
    except (InitError, OSError) as error:
        print(f"lnk-sandbox-init: {error}; the program was not run", file=sys.stderr)
        sys.exit(EXIT_SANDBOX_FAILED)
    try:
        exec_search(command, env)
    except FileNotFoundError:
        print(f"lnk-sandbox: {command[0]}: not found in the sandbox", file=sys.stderr)
        sys.exit(EXIT_NOT_FOUND)
    except PermissionError:
        print(f"lnk-sandbox: {command[0]}: cannot be run in the sandbox (permission denied)",
              file=sys.stderr)
        sys.exit(EXIT_CANNOT_RUN)
    except OSError as error:
        print(f"lnk-sandbox: {command[0]}: cannot be run: {error.strerror}", file=sys.stderr)
        sys.exit(EXIT_CANNOT_RUN)


def exec_search(command: list[str], env: dict[str, str]) -> None:
    """execvpe as the shell does it: a name without a slash is looked for on PATH, a
    folder that refuses (EACCES) is passed over but remembered. By hand, because
    os.execvpe imports `warnings` on its first use, and after Landlock the standard
    library is no longer readable."""
    name = command[0]
    if "/" in name:
        os.execve(name, command, env)
    denied: OSError | None = None
    for folder in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
        try:
            os.execve(os.path.join(folder or ".", name), command, env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError as error:
            denied = denied or error
    raise denied or FileNotFoundError(name)


if __name__ == "__main__":
    main()
