"""lnk-sandbox-exec-watch: outside the sandbox, the other end of its seccomp filter.

    lnk-sandbox-exec-watch --socket-fd N --settings DIR [--spec FILE] [--learn FILE]
                           [--command PATH]… [--loader PATH]… [--write PATH]…
                           [--network MODE]

The options that carry the policy (all but --socket-fd and --loader) are its fields'
own, spelt and checked as the launcher's are (lnk_common.policy.FIELDS). Programs are
judged against [commands] when any --command is given (and not --learn).

Started by the launcher for every sandbox (a fork of it, `lnk-watch`), right after
bubblewrap. The init, first thing inside, installs the filter ("sockets", or "programs"
where [commands] lists programs and for `learn`) and sends its listener and a sock_diag
socket of the sandbox's network over the inherited socket N; this watch acknowledges
with one byte (the init runs nothing before it has it) and then answers every
notification until the sandbox is gone (the listener hangs up). Where only sockets are
handed over, the launcher's fork imports this module at the first call (a call waits in
the kernel meanwhile): a sandbox that makes none ends without it.

- connect, and sendto with an address: lnk_execwatch.sockets (a unix socket by path
  only when made inside this sandbox; the call done here, on the socket taken).

- execve / execveat: read the path the program gave (its memory, /proc/PID/mem), check
  the call is still pending (ID_VALID), resolve the path inside the sandbox's own root
  (/proc/PID/root: the sandbox's mounts, its links followed there), pin the file (O_PATH)
  and judge it by identity, as Landlock does, against [commands] as pinned at the first
  call (the init's exec, before anything of the sandbox's own runs). Only an allowed
  program's first bytes are read (for its #! line), and only on a disk or memory file
  system, with the sandbox's own rights (read_head). A refused one is named on the sandbox's
  stderr and in Link's settings (sandbox/programs.log, bounded: lnk_common.boundedlog;
  refusals of one kind within FOLD_SECONDS are folded into "… and N more like this",
  on stderr as in the log). The call always goes on:
  Landlock alone decides (the seed: naming is advice; CONTINUE is racy, a decision on
  it would not be). A loader run directly is named with the program it is handed: the
  loader gap, reported, not hidden. With --learn, every program run is recorded instead
  (each once, and at most MAX_LEARN_BYTES of them, then a line saying more were run).
- memfd_create without MFD_NOEXEC_SEAL: make the memory file here with the seal added
  and put it into the program as the call's answer (ADDFD + SEND): it can write, seal
  and map it executable, never run it. (MFD_HUGETLB got EINVAL in the filter itself.)
  Before Linux 6.3 the kernel has no such seal: the file is made as asked (only running
  a descriptor, execveat's AT_EMPTY_PATH, is refused there, by the filter).

A fault on one call refuses that call (EACCES) and is said; a fault that stops this
watch is said (stderr and programs.log), then the listener closes and every notifying
call fails with ENOSYS: nothing runs that was not seen, and the person is told why.
It asks the kernel to kill it when its parent (the launcher) goes, so no watch
outlives its sandbox.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
import time

from lnk_common.arch import number
from lnk_common.boundedlog import FOLD_SECONDS, BoundedLog, Folds, clip, printable
from lnk_common.fdpass import receive_fds
from lnk_common.syscalls import libc
from lnk_execwatch import notify, sockets
from lnk_execwatch.judge import (
    SHEBANG_BYTES,
    Commands,
    FileId,
    interpreter_of,
    program_given_to_loader,
)
from lnk_execwatch.memory import read_memory

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable
else:
    pass

__all__ = ["main"]

_EXECVE = number("execve")
_EXECVEAT = number("execveat")
_MEMFD_CREATE = number("memfd_create")
_AT_FDCWD = -100
_MFD_CLOEXEC = 0x0001
_MFD_NOEXEC_SEAL = 0x0008
_MFD_EXEC = 0x0010
_PR_SET_PDEATHSIG = 1
_SIGKILL = 9
_POLLIN = 0x001
_POLLHUP = 0x010

# The kernel takes a path of at most PATH_MAX bytes, and a memory file's name of 249.
PATH_MAX = 4096
MEMFD_NAME_MAX = 249
# How many of a loader's arguments are read to find the program it is handed.
MAX_LOADER_ARGS = 16
# Links followed in one path (the kernel's own limit), and #! interpreters in a chain
# (BINPRM's recursion limit).
MAX_LINKS = 40
MAX_SCRIPT_DEPTH = 4
# The system folders, read only in every sandbox (lnk_wrap.system): what a path there
# leads to cannot change during a run, unless the spec writes a folder in them.
SYSTEM_PREFIXES = ("/usr/", "/etc/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/lib32/")
# Paths remembered; a build runs a few hundred distinct programs at most.
MAX_CACHED = 4096
# A learn record holds each program once, and at most this much: a build runs a few
# hundred programs (some 30 KiB of paths); a program that runs thousands of files of new
# names is not something to list, and must not fill Link's settings.
MAX_LEARN_BYTES = 1 << 20


_PAGE = 4096


def read_string(pid: int, address: int, limit: int) -> bytes:
    """A NUL-ended string of a stopped program, read a page at a time (a string may end
    just before memory that is not mapped)."""
    data = b""
    while len(data) < limit:
        at = address + len(data)
        chunk = read_memory(pid, at, min(limit - len(data), _PAGE - at % _PAGE))
        if not chunk:
            break
        end = chunk.find(b"\0")
        if end >= 0:
            return data + chunk[:end]
        data += chunk
    raise OSError(errno.ENAMETOOLONG if len(data) >= limit else errno.EFAULT,
                  "no string at that address")


def read_pointers(pid: int, address: int, count: int) -> list[int]:
    raw = read_memory(pid, address, 8 * count)
    found = []
    for offset in range(0, len(raw) - 7, 8):
        pointer = int.from_bytes(raw[offset:offset + 8], "little")
        if pointer == 0:
            break
        found.append(pointer)
    return found


# A file reached inside the sandbox: its path there, an O_PATH descriptor of it, and the
# identities of the folders it was reached through, from the root down.
Reached = tuple[str, int, tuple[FileId, ...]]


def open_inside(pid: int, path: str) -> Reached | None:
    """The file `path` (absolute, as the sandbox sees it) leads to inside the sandbox's
    root, every link followed there, pinned (O_PATH: opened for nothing, not even
    read), or None when it leads to nothing there or to a folder.

    Walked one name at a time from file descriptors (lstat and open relative to the
    folder reached, never a path through /proc/PID/root that the kernel would walk on
    this side), `..` taken off the walked names and never above the root: the program
    can swap a folder for a link at any moment, and this watch must not follow one to
    the person's files, not even to learn whether they exist. The folders walked are
    those Landlock's walk goes up through, so their identities say whether a listed
    folder holds the file."""
    try:
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    walked: list[tuple[str, int, FileId]] = [("", root, (0, 0))]
    pending = [part for part in reversed(path.split("/")) if part]
    links = 0
    try:
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            if part == "..":
                if len(walked) > 1:
                    os.close(walked.pop()[1])
                continue
            folder, folder_fd, _ = walked[-1]
            info = os.lstat(part, dir_fd=folder_fd)
            if stat.S_ISLNK(info.st_mode):
                links += 1
                if links > MAX_LINKS:
                    return None
                target = os.readlink(part, dir_fd=folder_fd)
                if target.startswith("/"):
                    while len(walked) > 1:
                        os.close(walked.pop()[1])
                pending += [name for name in reversed(target.split("/")) if name]
                continue
            if not pending:
                pinned = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
                                 dir_fd=folder_fd)
                return (f"{folder}/{part}", pinned,
                        tuple(identity for _, _, identity in walked[1:]))
            walked.append((f"{folder}/{part}", os.open(
                part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=folder_fd), (info.st_dev, info.st_ino)))
        return None  # the root, or a path ending in `..`: a folder
    except (OSError, ValueError):  # ValueError: a NUL in a name, which no file has
        return None
    finally:
        for _, fd, _ in walked:
            os.close(fd)


_fstatfs = libc.fstatfs
_fstatfs.restype = ctypes.c_int
_fstatfs.argtypes = [ctypes.c_int, ctypes.c_char_p]
# struct statfs is 120 bytes on x86-64; its first field, a long, is the type.
_STATFS_SIZE = 120

# The file systems whose regular files the watch reads the first bytes of: disks and
# memory, where reading a file has no effect and returns at once. Everything else is
# never read (default deny): procfs, sysfs, debugfs, tracefs, securityfs, cgroup, bpf,
# configfs, efivarfs and the like, where a "regular file" is the kernel's code (reading
# /proc/kmsg takes the kernel's log from the machine's log reader), and network and
# user-space file systems (NFS, FUSE, 9p), where a read waits on a server. A script
# there is not judged: Landlock still decides.
READABLE_FILE_SYSTEMS = {
    0xEF53: "ext2/ext3/ext4",
    0x58465342: "xfs",
    0x9123683E: "btrfs",
    0xF2F52010: "f2fs",
    0x2FC12FC1: "zfs",
    0xCA451A4E: "bcachefs",
    0x73717368: "squashfs",
    0xE0F5E1E2: "erofs",
    0x794C7630: "overlayfs",
    0x01021994: "tmpfs",
    0x858458F6: "ramfs",
}


def file_system_type(fd: int) -> int:
    buffer = ctypes.create_string_buffer(_STATFS_SIZE)
    ctypes.set_errno(0)
    if _fstatfs(fd, buffer) < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int.from_bytes(buffer.raw[:8], "little", signed=True) & 0xFFFFFFFF


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_SYS_CAPGET = number("capget")
_SYS_CAPSET = number("capset")
_CAPABILITY_VERSION_3 = 0x20080522
# What root has and the sandbox (no capabilities, even run by root) has not, for
# opening a file: reading past its mode (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH).
_CAP_DAC_BITS = (1 << 1) | (1 << 2)


class SandboxRights:
    """Opens a file for reading with no more rights than the sandbox has: the watch runs
    as the sandbox's user (the launcher's fork) and groups, so the kernel's own checks,
    modes and ACLs, judge it as they judge the sandbox, once the capabilities the
    sandbox lacks are off. Run by root, this thread's CAP_DAC_* are taken out of its
    effective set for the open and put back after (capabilities are per thread: the
    socket workers are not touched)."""

    __slots__ = ("header", "lowered", "raised")

    def __init__(self) -> None:
        from lnk_common.syscalls import syscall

        self.header = _CapHeader(_CAPABILITY_VERSION_3, 0)
        self.raised = (_CapData * 2)()
        syscall(_SYS_CAPGET, ctypes.byref(self.header), self.raised)
        self.lowered = (_CapData * 2)()
        ctypes.memmove(self.lowered, self.raised, ctypes.sizeof(self.raised))
        self.lowered[0].effective &= ~_CAP_DAC_BITS & 0xFFFFFFFF

    def open_for_reading(self, pinned: int) -> int:
        from lnk_common.syscalls import syscall

        reopen = f"/proc/self/fd/{pinned}"
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        if not self.raised[0].effective & _CAP_DAC_BITS:
            return os.open(reopen, flags)
        syscall(_SYS_CAPSET, ctypes.byref(self.header), self.lowered)
        try:
            return os.open(reopen, flags)
        finally:
            # Put back. Should this fail, the thread keeps less than it had, never more:
            # later reads and connects fail closed (and are not named), none opens wider.
            syscall(_SYS_CAPSET, ctypes.byref(self.header), self.raised)


def read_head(pinned: int, rights: SandboxRights) -> bytes | None:
    """The first bytes of the regular file `pinned` (an O_PATH descriptor), when it lies
    on a file system of READABLE_FILE_SYSTEMS and the sandbox itself could read it; None
    otherwise (nothing is then read). Reopened from the pin, not by its path: the file
    judged is the file read."""
    try:
        if file_system_type(pinned) not in READABLE_FILE_SYSTEMS:
            return None
        fd = rights.open_for_reading(pinned)
    except OSError:
        return None
    try:
        return os.read(fd, SHEBANG_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)


# (the file a path leads to, allowed by [commands], a loader, its first bytes or None)
Seen = tuple[str, bool, bool, bytes | None]


class Watch:
    __slots__ = ("cache", "commands", "folds", "learn", "learned", "learned_bytes",
                 "listener", "log", "log_file", "memfd_seal", "pinned", "rights", "say",
                 "sockets", "spec", "unrecorded", "written")

    def __init__(self, listener: int, commands: Commands | None, *, spec: str, log: str,
                 learn: str, say: Callable[[str], None], written: tuple[str, ...] = (),
                 diag: int = -1, host_network: bool = False) -> None:
        self.listener = listener
        # Whether this kernel seals a memory file non-executable (Linux 6.3): asked at
        # the first memfd_create (kernel_seals_memory_files), never told by a caller.
        self.memfd_seal: bool | None = None
        self.sockets = sockets.SocketGuard(listener, diag, refused=self.refused,
                                           host_network=host_network)
        self.written = written
        self.cache: dict[str, Seen] = {}
        self.commands = commands
        self.pinned = commands is None
        self.rights = SandboxRights()
        self.spec = spec
        self.log = log
        self.log_file: BoundedLog | None = None  # opened at the first refusal
        self.folds = Folds()
        self.learn = learn
        self.learned: set[str] = set()
        self.learned_bytes = 0
        self.unrecorded = 0
        self.say = say

    def serve(self) -> None:
        try:
            self._serve()
        finally:
            self.end()

    def _serve(self) -> None:
        import select

        if self.commands is None and not self.learn:
            # Only sockets are handed over: the caller waits for each answer, and a
            # synchronous wake-up runs this watch on the caller's CPU at once (Linux
            # 6.6; TCP connects +57 µs to +21-36 µs here). Not where execs are handed
            # over: there it made a loop of execs slower (below, in the docs).
            notify.prefer_synchronous_wakeups(self.listener)

        poller = select.poll()
        poller.register(self.listener, _POLLIN)
        folds = self.folds
        while True:
            # Wake when a fold's window ends, to write its count even if nothing follows
            # (and look at the clock only while a window is open: every connect passes).
            if folds.next_due == float("inf"):
                events = poller.poll()
            else:
                wait = folds.next_due - time.time()
                events = poller.poll(max(0, int(wait * 1000) + 1))
                self.write_counts(folds.due(time.time()))
            if not events:
                continue
            if any(event & _POLLHUP for _, event in events):
                return  # every process of the sandbox is gone
            try:
                call = notify.receive(self.listener)
            except notify.NotifyError as error:
                if error.errno in (errno.ENOENT, errno.EINTR):
                    continue  # the caller went away before its call was read
                raise
            if not self.pinned:
                # The first call comes from the init, right after it applied Landlock
                # and before anything of the sandbox's own runs: [commands] is pinned
                # now, from the sandbox's root, as the init opened it for Landlock.
                self.pin(call.pid)
            try:
                if call.nr in (sockets.CONNECT, sockets.SENDTO, sockets.SENDMSG, sockets.SENDMMSG):
                    self.sockets.handle(call)
                elif call.nr == _MEMFD_CREATE:
                    self.memfd_create(call)
                else:
                    self.execve(call)
            except notify.NotifyError as error:
                if error.errno != errno.ENOENT:
                    raise
            except Exception as error:  # a fault of this watch, on one call
                self.failed_on(call, error)

    def failed_on(self, call: notify.Notification, error: Exception) -> None:
        """A fault of this watch on one call (a bug: every parser here returns rather than
        raises): the call is refused (EACCES), the person told in one line on stderr and
        in programs.log, and the watch goes on serving the rest. Closed, never silent."""
        what = {_EXECVE: "execve", _EXECVEAT: "execveat", _MEMFD_CREATE: "memfd_create",
                sockets.CONNECT: "connect", sockets.SENDTO: "sendto",
                sockets.SENDMSG: "sendmsg", sockets.SENDMMSG: "sendmmsg"}.get(call.nr, str(call.nr))
        message = clip(printable(
            f"the exec watch failed on a {what} call ({type(error).__name__}: {error}); "
            "that call was refused (EACCES), the watch goes on"))
        self.say(f"lnk-sandbox: {message}")
        self.append(f"{self.spec}\t{message}")
        try:  # noqa: SIM105 (contextlib is one more import at every start)
            notify.answer_error(self.listener, call.id, errno.EACCES)
        except notify.NotifyError:
            pass  # the caller is gone

    def pin(self, pid: int) -> None:
        """The identities of the listed files and folders, and the loaders, inside the
        sandbox (a path that leads to nothing there is not pinned: the init refused to
        start with it already)."""
        assert self.commands is not None
        self.pinned = True

        def identities(paths: tuple[str, ...]) -> frozenset[FileId]:
            found = set()
            for path in paths:
                reached = open_inside(pid, path)
                if reached is None:
                    continue
                info = os.fstat(reached[1])
                os.close(reached[1])
                found.add((info.st_dev, info.st_ino))
            return frozenset(found)

        self.commands.pin(identities(self.commands.run), identities(self.commands.loaders))

    # -- exec ---------------------------------------------------------------------------

    def execve(self, call: notify.Notification) -> None:
        """Judged while the caller waits (its root and cwd are still there to read, even
        for a program that exits at once when refused), then always let go on."""
        try:  # noqa: SIM105 (contextlib is one more import at every start)
            self.judge(call, self.exec_path(call), depth=0)
        except OSError:
            pass  # advice only: what cannot be read is not named, and Landlock decides
        notify.answer_continue(self.listener, call.id)

    def exec_path(self, call: notify.Notification) -> str:
        if call.nr == _EXECVE:
            dirfd, path_at = _AT_FDCWD, call.args[0]
        else:
            dirfd = int.from_bytes((call.args[0] & 0xFFFFFFFF).to_bytes(4, "little"),
                                   "little", signed=True)
            path_at = call.args[1]
        path = os.fsdecode(read_string(call.pid, path_at, PATH_MAX))
        if not path.startswith("/"):
            base = os.readlink(f"/proc/{call.pid}/cwd" if dirfd == _AT_FDCWD
                               else f"/proc/{call.pid}/fd/{dirfd}")
            path = f"{base.rstrip('/')}/{path}"
        return path

    def loader_argv(self, call: notify.Notification) -> list[str]:
        argv_at = call.args[1] if call.nr == _EXECVE else call.args[2]
        return [os.fsdecode(read_string(call.pid, pointer, PATH_MAX))
                for pointer in read_pointers(call.pid, argv_at, MAX_LOADER_ARGS)]

    def look(self, pid: int, path: str) -> Seen | None:
        """What `path` leads to inside the sandbox: (the file there, whether [commands]
        allows it, whether it is a loader, its first bytes or None), or None where it
        leads to no regular file (the kernel says so itself).

        Judged by identity (the file and the folders it was reached through, against
        those pinned: Landlock's judgement). Read only when allowed (a refused program is
        named without reading it), and then only as read_head says: on a disk or memory
        file system, with the sandbox's own rights. What lies in the system folders,
        which no sandbox writes, is remembered: most programs run are there, and each
        look costs a dozen system calls through /proc."""
        cacheable = self.cacheable(path)
        if cacheable and path in self.cache:
            return self.cache[path]
        reached = open_inside(pid, path)
        if reached is None:
            return None
        resolved, pinned, folders = reached
        try:
            info = os.fstat(pinned)
            if not stat.S_ISREG(info.st_mode):
                return None  # a folder, a device, a FIFO: the kernel refuses it itself
            identity = (info.st_dev, info.st_ino)
            if self.commands is None:  # learn: every program may start
                allowed, loader = True, False
            else:
                allowed = self.commands.allows(identity, folders)
                loader = self.commands.is_loader(identity)
            head = read_head(pinned, self.rights) if allowed else None
        finally:
            os.close(pinned)
        seen = (resolved, allowed, loader, head)
        if cacheable and self.cacheable(resolved):
            if len(self.cache) >= MAX_CACHED:
                self.cache.clear()
            self.cache[path] = seen
        return seen

    def cacheable(self, path: str) -> bool:
        return (path.startswith(SYSTEM_PREFIXES) and "/." not in path
                and not any(path == folder or path.startswith(folder + "/")
                            for folder in self.written))

    def judge(self, call: notify.Notification, path: str, *, depth: int,
              script: str = "") -> None:
        seen = self.look(call.pid, path)
        if seen is None:
            return
        resolved, allowed, loader, head = seen
        # What is said or recorded is said only of a call still pending (ID_VALID): its
        # memory was then read from the process that made it, not from one that took its
        # pid since. A call let go on in silence needs no such check.
        if self.learn:
            if notify.id_valid(self.listener, call.id):
                self.record(resolved, script)
        elif not allowed:
            what = f"{resolved}, the interpreter of {script}," if script else resolved
            if notify.id_valid(self.listener, call.id):
                self.refused("interpreter" if script else "program",
                             f"refused to run {what}: not in [commands] of {self.spec}")
            return
        elif loader and not script:
            program = program_given_to_loader(self.loader_argv(call))
            if program is not None and notify.id_valid(self.listener, call.id):
                self.refused("loader", f"the loader {resolved} was run directly on {program}: "
                             "[commands] cannot judge what the loader is handed "
                             "(a stated gap; `lnk-sandbox check`)")
        interpreter = None if head is None else interpreter_of(head)
        if interpreter is not None and depth < MAX_SCRIPT_DEPTH:
            name = os.fsdecode(interpreter)
            if not name.startswith("/"):  # the kernel opens it from the caller's folder
                name = f"{os.readlink(f'/proc/{call.pid}/cwd').rstrip('/')}/{name}"
            self.judge(call, name, depth=depth + 1, script=resolved)

    def refused(self, kind: str, message: str) -> None:
        """Name a refusal on stderr and in programs.log, or count it: refusals of one
        `kind` (a program, an interpreter, a loader run directly: never the program's
        name, which a flood changes every time) within a fold's window are one count."""
        now = time.time()
        self.write_counts(self.folds.due(now))
        if not self.folds.admit(f"{kind}\t{self.spec}", now):
            return
        message = clip(printable(message))
        self.say(f"lnk-sandbox: {message}")
        self.append(f"{self.spec}\t{message}")

    def append(self, line: str) -> None:
        if self.log_file is None:
            self.log_file = BoundedLog(self.log)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.log_file.append(clip(f"{stamp}\t{line}").encode("utf-8", "surrogateescape")
                             + b"\n")

    def write_counts(self, counts: list[tuple[str, int]]) -> None:
        for key, count in counts:
            kind, spec = key.split("\t", 1)
            what = {"program": "programs refused", "interpreter": "interpreters refused",
                    "loader": "loaders run directly",
                    "socket": "unix sockets outside refused"}[kind]
            where = spec if kind == "socket" else f"[commands] of {spec}"
            message = (f"… and {count} more like this within {FOLD_SECONDS:g} s "
                       f"({what}, {where})")
            self.say(f"lnk-sandbox: {message}")
            self.append(f"{spec}\t{message}")

    def end(self) -> None:
        """At the end: every count still held is written."""
        self.write_counts(self.folds.all())
        if self.unrecorded:
            self.write_record(f"unrecorded\t{self.unrecorded}\n")
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None

    def record(self, path: str, script: str) -> None:
        """Each program (and interpreter) once; past MAX_LEARN_BYTES only counted, and
        the count is the record's last line (learn says so)."""
        path, script = printable(path), printable(script)
        line = clip(f"interpreter\t{path}\t{script}" if script else f"program\t{path}") + "\n"
        if line in self.learned:
            return
        if self.learned_bytes + len(line) > MAX_LEARN_BYTES:
            self.unrecorded += 1
            return
        self.learned.add(line)
        self.learned_bytes += len(line)
        self.write_record(line)

    def write_record(self, line: str) -> None:
        fd = os.open(self.learn, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, line.encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)

    # -- memory files -------------------------------------------------------------------

    def memfd_create(self, call: notify.Notification) -> None:
        flags = call.args[1] & 0xFFFFFFFF
        try:
            name = read_string(call.pid, call.args[0], MEMFD_NAME_MAX + 1)
        except PermissionError:
            # The kernel may refuse reading other processes' memory outright (Yama's
            # ptrace_scope 3): the file is made all the same, under a name of ours.
            name = b"lnk-sandbox"
        except OSError as error:
            notify.answer_error(self.listener, call.id, error.errno or errno.EFAULT)
            return
        if not notify.id_valid(self.listener, call.id):
            return
        if self.memfd_seal is None:
            self.memfd_seal = kernel_seals_memory_files()
        try:
            made = os.memfd_create(os.fsdecode(name),
                                   memory_file_flags(flags, seal=self.memfd_seal))
        except OSError as error:
            notify.answer_error(self.listener, call.id, error.errno or errno.EINVAL)
            return
        try:
            notify.add_fd_and_answer(self.listener, call.id, made,
                                     cloexec=bool(flags & _MFD_CLOEXEC))
        finally:
            os.close(made)


def memory_file_flags(flags: int, *, seal: bool) -> int:
    """The flags the watch makes a caller's memory file with: sealed non-executable (and
    never MFD_EXEC) where the kernel has the seal; before Linux 6.3, which has neither
    flag, the caller's own, for the kernel to judge as it would have (execveat of a
    descriptor is still refused by the filter: `lnk-sandbox check` says so). Close-on-exec
    always: the file is this watch's only until it is put into the caller."""
    if seal:
        return (flags | _MFD_NOEXEC_SEAL | _MFD_CLOEXEC) & ~_MFD_EXEC
    return flags | _MFD_CLOEXEC


def kernel_seals_memory_files() -> bool:
    """Whether this kernel takes MFD_NOEXEC_SEAL (Linux 6.3+; older ones refuse an unknown
    flag with EINVAL). Asked with a memory file of the watch's own, so no caller's flags
    can make it say no."""
    try:
        os.close(os.memfd_create("lnk-sandbox-probe", _MFD_NOEXEC_SEAL | _MFD_CLOEXEC))
    except OSError as error:
        if error.errno == errno.EINVAL:
            return False
        raise
    return True


def _receive_listener(socket_fd: int) -> tuple[int, int] | None:
    """The listener and the sandbox's sock_diag socket the init sends first thing,
    acknowledged with one byte; None when none come (the sandbox was never made, and the
    init, unacknowledged, runs nothing)."""
    received = receive_fds(socket_fd, 2)
    if received is not None:
        os.write(socket_fd, b"+")
    os.close(socket_fd)
    return None if received is None else (received[0], received[1])


def _parse(argv: list[str]) -> dict[str, list[str]]:
    """The watch's options by the policy's table (its fields') and its own two."""
    from lnk_common.policy import PolicyArgvError, parse_helper_argv

    try:
        options = parse_helper_argv("watch", argv, ("--socket-fd", "--loader"))
    except PolicyArgvError as error:
        raise ValueError(str(error)) from None
    for single in ("--socket-fd", "--settings"):
        if len(options[single]) != 1:
            raise ValueError(f"{single} is required, once")
    return options


def main(argv: list[str] | None = None, received: tuple[int, int] | None = None) -> None:
    """`received`: the listener and sock_diag socket, when the caller (the launcher's
    fork) took them from the init already, so that the init goes on while this imports."""
    from lnk_common.syscalls import prctl

    try:
        options = _parse(sys.argv[1:] if argv is None else argv)
    except ValueError as error:
        print(f"lnk-sandbox-exec-watch: {error}", file=sys.stderr)
        sys.exit(2)
    prctl(_PR_SET_PDEATHSIG, _SIGKILL)
    settings = options["--settings"][0]
    commands = (Commands(tuple(options["--command"]), tuple(options["--loader"]))
                if options["--command"] and not options["--learn"] else None)

    def say(message: str) -> None:
        os.write(2, (message + "\n").encode("utf-8", "surrogateescape"))

    spec = (options["--spec"] or ["the policy"])[0]
    log = os.path.join(settings, "sandbox", "programs.log")
    try:
        if received is None:
            received = _receive_listener(int(options["--socket-fd"][0]))
        if received is None:
            return
        listener, diag = received
        Watch(listener, commands, diag=diag, spec=spec, log=log,
              learn=(options["--learn"] or [""])[0], say=say,
              written=tuple(options["--write"]),
              host_network=options["--network"] == ["host"]).serve()
    except Exception as error:  # whatever stops the watch is said
        # This process ends, its listener closes, and every call the filter hands over
        # fails with ENOSYS from now on: closed. The person is told, once, here and in
        # the log (the fork that runs this swallows what escapes it).
        message = clip(printable(
            f"the exec watch stopped ({type(error).__name__}: {error}); the sandbox's "
            "programs can no longer start nor connect (their calls fail with ENOSYS)"))
        say(f"lnk-sandbox: {message}")
        try:
            stopped = BoundedLog(log)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            stopped.append(clip(f"{stamp}\t{spec}\t{message}").encode(
                "utf-8", "surrogateescape") + b"\n")
            stopped.close()
        except OSError:
            pass  # said on stderr; the log's folder is gone
        sys.exit(1)


if __name__ == "__main__":
    main()
