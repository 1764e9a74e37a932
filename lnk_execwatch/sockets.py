"""The watch's socket calls: a program connects to (or sends to) a unix socket by path
only when that socket was made inside its own sandbox.

Why here: a unix socket is reached by its path whatever the mounts say (a read-only
mount does not stop connect), and Landlock ABI 7 has no right for it, so a read grant on
`~` would reach Docker's socket, an ssh ControlMaster, a gpg-agent. The seccomp filter
cannot see a socket's family nor read an address, so it hands every `connect` and every
`sendto` with an address to this watch (lnk_wrap.seccomp_filter).

Order of operations for one call, and why each step:
1. Take the caller's socket itself (pidfd_getfd): the family and type are read from the
   socket, never from the program's memory or its descriptor number, which another of
   its threads may change at any moment. Linux 6.9+ opens a pidfd for the calling thread
   (PIDFD_THREAD); an older one only for its group, so the socket taken from the group
   is checked to be the file the thread has at that number (_take_from_thread_group).
2. Read the address (and, for sendto, the data) once, from the caller's memory; check the
   call is still pending (ID_VALID), so what was read was read from the caller.
3. Do the call here, on the socket taken, with the copy read: never let the program's
   call go on (CONTINUE would have the kernel read the descriptor and the address again,
   after the check). A unix path is resolved inside the sandbox's root (openat2
   RESOLVE_IN_ROOT), pinned (O_PATH), checked to be a socket bound in the sandbox's own
   network namespace (sock_diag, lnk_execwatch.unixdiag), and connected to through the
   pin (/proc/self/fd/N): a path swapped after the check changes nothing. Other families
   and abstract addresses are used as read: the socket keeps the network namespace it was
   made in, the sandbox's own, where only the sandbox's sockets and loopback are.
4. Answer with the call's result. A call on a socket that may block (no O_NONBLOCK, no
   MSG_DONTWAIT) is done by a worker thread, so one slow peer stalls only its caller.

A refusal is EACCES (what a socket without the write bit gives), named in one line on
the sandbox's stderr and in Link's settings (the watch's log).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import stat

from lnk_common.arch import number
from lnk_common.syscalls import libc, syscall
from lnk_execwatch import notify
from lnk_execwatch.memory import IoVec, SmallReader, read_memory, write_memory
from lnk_execwatch.messages import (
    MMSGHDR_BYTES,
    MSGHDR_BYTES,
    SCM_CREDENTIALS,
    SCM_RIGHTS,
    SOL_SOCKET,
    UIO_MAXIOV,
    Control,
    MessageError,
    build_control,
    parse_control,
    parse_header,
    parse_iovecs,
)
from lnk_execwatch.unixdiag import (
    ABSTRACT,
    AF_UNIX,
    PATH,
    UNNAMED,
    UnixDiagError,
    dump_request,
    kernel_device,
    parse_dump,
    parse_unix_address,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import queue
    import threading
    from collections.abc import Callable

    from lnk_execwatch.unixdiag import UnixAddress

__all__ = ["CONNECT", "SENDMMSG", "SENDMSG", "SENDTO", "SocketGuard"]

# This machine's numbers (lnk_common.arch): what a notification's `nr` says.
CONNECT = number("connect")
SENDTO = number("sendto")
SENDMSG = number("sendmsg")
SENDMMSG = number("sendmmsg")
_SYS_PIDFD_OPEN = 434
_SYS_PIDFD_GETFD = 438
_SYS_OPENAT2 = 437
_PIDFD_THREAD = 0o200  # O_EXCL: a notification names a thread, not a process
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10
_SOL_SOCKET = 1
_SO_TYPE = 3
_SO_DOMAIN = 39
_SOCK_STREAM = 1
_SOCK_DGRAM = 2
_MSG_DONTWAIT = 0x40
_F_GETFL = 3
_F_SETFL = 4
_SO_ERROR = 4
_SO_SNDTIMEO = 21
_TIMEVAL_BYTES = 16

# The kernel copies at most a sockaddr_storage; a longer address is EINVAL.
SOCKADDR_MAX = 128
# Data of one sendto with an address done here. A datagram longer than this gets
# EMSGSIZE (a unix datagram's default ceiling is ~208 KiB, UDP's 64 KiB); a stream
# socket is sent this much (a short write, which a stream allows).
SENDTO_MAX = 1 << 20
# Why every unix socket by name (path or abstract) is refused in a sandbox with this
# machine's network: "made inside" is told by the sandbox's own network namespace
# (lnk_execwatch.unixdiag), and with the host's, every socket of this machine is in it.
HOST_NETWORK = ("this sandbox has this machine's network ([network] mode = \"host\"), "
                "where a socket made inside cannot be told from yours")
PATH_MAX = 4096
# How long a blocking inet connect is waited for here before a worker takes it over: a
# connection on the sandbox's own loopback is made in microseconds.
CONNECT_WAIT_MS = 2
# Control data of one message done here: the kernel's own ceiling (net.core.optmem_max)
# is 20-128 KiB; a longer one gets ENOBUFS, as the kernel gives past its ceiling.
CONTROL_MAX = 1 << 16
# Threads doing calls that may block; more wait in line (only their callers wait).
MAX_WORKERS = 64
# Threads' descriptors remembered (pidfds); a sandbox runs a few hundred at most.
MAX_PIDFDS = 1024


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_syscall = libc.syscall  # restype set by lnk_common.syscalls; no argtypes
_connect = libc["connect"]  # its own function object: argtypes are per object
_connect.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_sendto = libc["sendto"]  # its own function object: argtypes are per object
_sendto.restype = ctypes.c_ssize_t
_sendto.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                    ctypes.c_char_p, ctypes.c_uint32]
_setsockopt = libc["setsockopt"]  # its own function object: argtypes are per object
_setsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p,
                        ctypes.c_uint32]
_getsockopt = libc["getsockopt"]  # its own function object: argtypes are per object
_getsockopt.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                        ctypes.c_void_p]

class _MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(IoVec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_char_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


_sendmsg = libc["sendmsg"]  # its own function object: argtypes are per object
_sendmsg.restype = ctypes.c_ssize_t
_sendmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_MsgHdr), ctypes.c_int]


class _Message:
    """One message of a sendmsg or sendmmsg, as read from the caller: its address (the
    pin's path once checked), its data, its control data with the caller's descriptors
    replaced by this process's copies (`fds`, closed after)."""

    __slots__ = ("address", "control", "data", "fds", "pin", "rest")

    def __init__(self, address: bytes, data: bytes, control: bytes, fds: list[int]) -> None:
        self.address = address
        self.data = data
        self.control = control
        self.fds = fds
        self.pin = -1
        # A stream's data past SENDTO_MAX, still in the caller's memory (address, length):
        # a blocking stream sends all of it, so a worker reads and sends it in pieces.
        self.rest: list[tuple[int, int]] = []

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        if self.pin >= 0:
            os.close(self.pin)


def _send_message(fd: int, message: _Message, flags: int, *, skip: int = 0) -> int:
    """sendmsg(2) of `message` on `fd` (from its byte `skip` on, then with no address or
    control: the rest of a stream's message); the result, or minus the errno."""
    data = message.data[skip:]
    buffer = ctypes.create_string_buffer(data, len(data))
    vector = IoVec(ctypes.cast(buffer, ctypes.c_void_p), len(data))
    header = _MsgHdr(None, 0, ctypes.pointer(vector), 1, None, 0, 0)
    if not skip:
        if message.address:
            header.name, header.namelen = message.address, len(message.address)
        if message.control:
            header.control, header.controllen = message.control, len(message.control)
    ctypes.set_errno(0)
    result = int(_sendmsg(fd, ctypes.byref(header), flags))
    return result if result >= 0 else -(ctypes.get_errno() or errno.EIO)


def _signed(value: int) -> int:
    """A system call's int argument (the low 32 bits of its register), signed."""
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


def _failed() -> OSError:  # after a ctypes call made with use_errno
    code = ctypes.get_errno() or errno.EIO
    return OSError(code, os.strerror(code))


class _Scratch:
    """Buffers made once: every connect in the sandbox passes here, and building ctypes
    objects for each would be most of its cost."""

    __slots__ = ("address", "option", "option_size", "saved", "saved_size", "size_at",
                 "value_at", "wait")

    def __init__(self) -> None:
        self.address = SmallReader(SOCKADDR_MAX)
        self.option = ctypes.c_int(0)
        self.option_size = ctypes.c_uint32(4)
        self.value_at = ctypes.byref(self.option)
        self.size_at = ctypes.byref(self.option_size)
        self.saved = ctypes.create_string_buffer(_TIMEVAL_BYTES)
        self.saved_size = ctypes.c_uint32(_TIMEVAL_BYTES)
        self.wait = (0).to_bytes(8, "little") + (CONNECT_WAIT_MS * 1000).to_bytes(8, "little")

    def bound_connect_wait(self, fd: int) -> None:
        """Keep the socket's send timeout (a blocking connect's), and set ours."""
        self.saved_size.value = _TIMEVAL_BYTES
        if (_getsockopt(fd, _SOL_SOCKET, _SO_SNDTIMEO, self.saved, ctypes.byref(self.saved_size))
                < 0 or _setsockopt(fd, _SOL_SOCKET, _SO_SNDTIMEO, self.wait, _TIMEVAL_BYTES) < 0):
            raise _failed()

    def restore_connect_wait(self, fd: int) -> None:
        _setsockopt(fd, _SOL_SOCKET, _SO_SNDTIMEO, self.saved, _TIMEVAL_BYTES)

    def socket_option(self, fd: int, option: int) -> int:
        self.option_size.value = 4
        if _getsockopt(fd, _SOL_SOCKET, option, self.value_at, self.size_at) < 0:
            raise _failed()
        return self.option.value

    def read_address(self, pid: int, at: int, length: int) -> bytes:
        return self.address.read_exactly(pid, at, length)


class _Call:
    """One call to do here: on `fd` (taken from the caller; closed after), connect to
    `address`, or send `data` to it with `flags`."""

    __slots__ = ("address", "at", "data", "family", "fd", "flags", "id", "messages", "nr",
                 "pid", "pin", "sent", "stream")

    def __init__(self, nr: int, id: int, fd: int, family: int, address: bytes,
                 data: bytes = b"", flags: int = 0) -> None:
        self.nr = nr
        self.id = id
        self.fd = fd
        self.family = family
        self.address = address
        self.data = data
        self.flags = flags
        self.pin = -1
        # sendmsg and sendmmsg: the messages read, where the caller's headers are (for
        # the lengths sendmmsg writes back), bytes of a stream's message sent already.
        self.messages: list[_Message] = []
        self.pid = 0
        self.at = 0
        self.sent = 0
        self.stream = False

    def close(self) -> None:
        os.close(self.fd)
        if self.pin >= 0:
            os.close(self.pin)
        for message in self.messages:
            message.close()


def thread_group(status: bytes) -> int:
    """The thread group (the process) a thread belongs to: the Tgid of its
    /proc/<tid>/status."""
    for line in status.splitlines():
        if line.startswith(b"Tgid:"):
            return int(line.split()[1])
    raise OSError(errno.ESRCH, "no Tgid in the thread's status")


def _take_from_thread_group(tid: int, fd: int) -> int:
    """The calling thread's socket on Linux before 6.9, whose pidfd_open takes only a
    thread group's leader: taken from the thread's group, then checked to be the very
    file the thread has at `fd` (a thread made with CLONE_THREAD but without CLONE_FILES
    has a table of its own; a mismatch is refused, EBADF). The pidfd is opened for this
    call alone: a thread's number may go to another process's thread once it ends. The
    call is still pending while this runs (the caller waits in it), so `tid` is the
    caller's; ID_VALID after the address is read says it stayed so."""
    try:
        with open(f"/proc/{tid}/status", "rb") as status:
            group = thread_group(status.read())
    except FileNotFoundError:
        raise OSError(errno.ESRCH, "the calling thread is gone") from None
    pidfd = syscall(_SYS_PIDFD_OPEN, ctypes.c_int(group), ctypes.c_uint(0))
    try:
        taken = syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
    finally:
        os.close(pidfd)
    try:
        seen = os.stat(f"/proc/{tid}/fd/{fd}")
        mine = os.fstat(taken)
    except OSError:
        os.close(taken)
        raise
    if (seen.st_dev, seen.st_ino) != (mine.st_dev, mine.st_ino):
        os.close(taken)
        raise OSError(errno.EBADF, "the thread's descriptor table is not its group's")
    return taken


def _named(target: UnixAddress) -> str:
    """A unix address as said in a refusal: a path, or @name for an abstract one."""
    name = os.fsdecode(target.name)
    return "@" + name if target.kind == ABSTRACT else name


class SocketGuard:
    """Answers `connect` and `sendto`-with-an-address notifications of one sandbox."""

    __slots__ = ("counting", "diag", "host_network", "idle", "in_line", "listener", "pidfds",
                 "queue", "refused", "scratch", "sequence", "thread_pidfds", "workers")

    def __init__(self, listener: int, diag: int, *,
                 refused: Callable[[str, str], None], host_network: bool = False) -> None:
        self.listener = listener
        # mode "host": the sandbox shares this machine's network namespace, so a socket
        # listed there may be anyone's; every unix socket by name is refused (HOST_NETWORK).
        self.host_network = host_network
        self.diag = diag
        self.refused = refused
        self.scratch = _Scratch()
        self.pidfds: dict[int, int] = {}
        # Whether the kernel opens a pidfd for one thread (PIDFD_THREAD, Linux 6.9); when
        # it refuses (EINVAL), each call takes the socket from the thread's group instead.
        self.thread_pidfds = True
        self.sequence = 0
        self.queue: queue.SimpleQueue[_Call] | None = None
        self.counting: threading.Lock | None = None
        # Workers started, those waiting for a call no one claimed, and calls handed
        # over with every worker busy: calls in the queue = claimed ones + in_line.
        self.workers = 0
        self.idle = 0
        self.in_line = 0

    def handle(self, call: notify.Notification) -> None:
        taken = -1
        try:
            taken = self._take(call.pid, _signed(call.args[0]))
            if call.nr in (SENDMSG, SENDMMSG):
                work = self._prepare_messages(call, taken)
            else:
                work = self._prepare(call, taken)
        except MessageError as error:
            os.close(taken)
            self._answer(call.id, -error.code)
            return
        except OSError as error:
            if taken >= 0:
                os.close(taken)
            self._answer(call.id, -(error.errno or errno.EINVAL))
            return
        if work is None:
            os.close(taken)
            return
        try:
            if work.nr in (SENDMSG, SENDMMSG):
                self._send_messages(work)
            elif work.family == AF_UNIX:
                self._hand_to_worker(work)  # rare, and a unix peer may make a caller wait
            elif work.nr == CONNECT:
                self._connect(work)
            else:
                self._send(work)
        except OSError as error:  # the socket refused an option: the call fails, said so
            work.close()
            self._answer(work.id, -(error.errno or errno.EINVAL))

    # -- what the call is ---------------------------------------------------------------

    def _take(self, tid: int, fd: int) -> int:
        """The caller's socket, as a descriptor of this process."""
        if not self.thread_pidfds:
            return _take_from_thread_group(tid, fd)
        for _ in range(2):
            pidfd = self.pidfds.get(tid)
            if pidfd is None:
                if len(self.pidfds) >= MAX_PIDFDS:
                    for old in self.pidfds.values():
                        os.close(old)
                    self.pidfds.clear()
                try:
                    pidfd = syscall(_SYS_PIDFD_OPEN, ctypes.c_int(tid),
                                    ctypes.c_uint(_PIDFD_THREAD))
                except OSError as refused:
                    if refused.errno != errno.EINVAL:
                        raise
                    self.thread_pidfds = False  # Linux before 6.9: no PIDFD_THREAD
                    return _take_from_thread_group(tid, fd)
                self.pidfds[tid] = pidfd
            taken = _syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if taken >= 0:
                return int(taken)
            error = _failed()
            if error.errno != errno.ESRCH:
                raise error
            os.close(self.pidfds.pop(tid))  # a thread gone, its number taken again
        raise OSError(errno.ESRCH, "the calling thread is gone")

    def _prepare(self, call: notify.Notification, taken: int) -> _Call | None:
        """Read what the call needs, decide, and return the call to do here; None when it
        was answered (refused) already."""
        family = self.scratch.socket_option(taken, _SO_DOMAIN)
        if call.nr == CONNECT:
            address_at, address_length = call.args[1], _signed(call.args[2])
        else:
            address_at, address_length = call.args[4], _signed(call.args[5])
        if not 0 <= address_length <= SOCKADDR_MAX:
            raise OSError(errno.EINVAL, "address length")
        address = self.scratch.read_address(call.pid, address_at, address_length)
        data, flags = b"", 0
        if call.nr == SENDTO:
            length, flags = call.args[2], _signed(call.args[3])
            if length > SENDTO_MAX and self.scratch.socket_option(taken, _SO_TYPE) != _SOCK_STREAM:
                raise OSError(errno.EMSGSIZE, "datagram too long")
            data = self._read(call.pid, call.args[1], min(length, SENDTO_MAX))
        if not notify.id_valid(self.listener, call.id):
            return None  # the caller is gone or interrupted: what was read is not its
        work = _Call(call.nr, call.id, taken, family, address, data, flags)
        if family != AF_UNIX:
            return work
        try:
            target = parse_unix_address(address)
        except UnixDiagError:
            raise OSError(errno.EINVAL, "not a unix socket address") from None
        if self.host_network and target.kind != UNNAMED:
            self.refused("socket", f"refused to {'connect' if call.nr == CONNECT else 'send'} "
                         f"to the unix socket {_named(target)}: {HOST_NETWORK}")
            self._answer(call.id, -errno.EACCES)
            return None
        if target.kind != PATH:
            return work
        work.pin = self._pin(call.pid, os.fsdecode(target.name))
        try:
            inside = self._made_inside(work.pin)
        except BaseException:
            os.close(work.pin)
            raise
        if not inside:
            os.close(work.pin)
            self.refused("socket",
                         f"refused to {'connect' if call.nr == CONNECT else 'send'} to "
                         f"the unix socket {os.fsdecode(target.name)}: it was not made "
                         "inside this sandbox (the sandbox's one way out is its wire)")
            self._answer(call.id, -errno.EACCES)
            return None
        work.address = (AF_UNIX.to_bytes(2, "little")
                        + f"/proc/self/fd/{work.pin}".encode() + b"\0")
        return work

    def _prepare_messages(self, call: notify.Notification, taken: int) -> _Call | None:
        """A sendmsg's message or a sendmmsg's messages read once, each address judged as
        a sendto's; None when answered already. A message the kernel would refuse, or
        one refused here, ends the list there: the ones before it are sent (sendmmsg's
        own rule: the count sent, or the first one's error)."""
        family = self.scratch.socket_option(taken, _SO_DOMAIN)
        stream = self.scratch.socket_option(taken, _SO_TYPE) == _SOCK_STREAM
        if call.nr == SENDMSG:
            count, flags = 1, _signed(call.args[2])
        else:
            count, flags = min(call.args[2] & 0xFFFFFFFF, UIO_MAXIOV), _signed(call.args[3])
        work = _Call(call.nr, call.id, taken, family, b"", flags=flags)
        work.pid, work.at, work.stream = call.pid, call.args[1], stream
        step = MSGHDR_BYTES if call.nr == SENDMSG else MMSGHDR_BYTES
        headers = self._read(call.pid, call.args[1], step * count)
        budget = SENDTO_MAX
        refusal: OSError | MessageError | None = None
        for index in range(count):
            try:
                message = self._read_message(call.pid, headers[index * step:][:MSGHDR_BYTES],
                                             budget, stream)
            except (OSError, MessageError) as error:
                refusal = error
                break
            work.messages.append(message)
            budget -= len(message.data)
            if budget <= 0:
                break
        if not notify.id_valid(self.listener, call.id):
            for message in work.messages:
                message.close()
            return None  # the caller is gone or interrupted: what was read is not its
        if family == AF_UNIX:
            for index, message in enumerate(work.messages):
                why: OSError | None = None
                try:
                    allowed = not message.address or self._judge_message(call, message)
                except OSError as error:
                    allowed, why = False, error
                if not allowed:
                    for later in work.messages[index:]:
                        later.close()
                    del work.messages[index:]
                    refusal = why or OSError(errno.EACCES, "refused")
                    break
        if not work.messages:  # the socket itself is closed by the caller (handle)
            code = refusal.code if isinstance(refusal, MessageError) else (
                refusal.errno if refusal is not None and refusal.errno else errno.EINVAL)
            self._answer(call.id, -code if count else 0)
            return None
        return work

    def _read_message(self, pid: int, raw: bytes, budget: int, stream: bool) -> _Message:
        header = parse_header(raw)
        address = self.scratch.read_address(pid, header.name_at, header.name_length)
        data: list[bytes] = []
        rest: list[tuple[int, int]] = []
        left = budget
        for at, length in parse_iovecs(self._read(pid, header.iov_at, 16 * header.iov_count)):
            if left <= 0:
                rest.append((at, length))
                continue
            if length > left and not stream:
                raise MessageError(errno.EMSGSIZE, "datagram too long")
            piece = self._read(pid, at, min(length, left))
            data.append(piece)
            left -= len(piece)
            if len(piece) < length:
                rest.append((at + len(piece), length - len(piece)))
        if header.control_length > CONTROL_MAX:
            raise MessageError(errno.ENOBUFS, "control data too long")
        controls = parse_control(self._read(pid, header.control_at, header.control_length))
        kept: list[Control] = []
        fds: list[int] = []
        try:
            for control in controls:
                if control.level == SOL_SOCKET and control.kind == SCM_CREDENTIALS:
                    # Only the sender's own may be sent (no sandbox holds the capability
                    # to name another's), and a receiver that asks (SO_PASSCRED) gets the
                    # sender's by itself: the watch's, as for everything it sends.
                    continue
                if control.level == SOL_SOCKET and control.kind == SCM_RIGHTS:
                    mine = []
                    for number in control.fds:
                        try:
                            mine.append(self._take(pid, number))
                        except OSError:
                            raise MessageError(errno.EBADF, "descriptor") from None
                        fds.append(mine[-1])
                    control = Control(control.level, control.kind, b"".join(
                        fd.to_bytes(4, "little") for fd in mine))
                kept.append(control)
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        message = _Message(address, b"".join(data), build_control(kept), fds)
        message.rest = rest
        return message

    def _judge_message(self, call: notify.Notification, message: _Message) -> bool:
        """A unix message's address checked as a sendto's: a path must be a socket made
        inside (the message then goes to the pin); said and False when it is not."""
        try:
            target = parse_unix_address(message.address)
        except UnixDiagError:
            return True  # the kernel refuses it (EINVAL) when the call is done
        if self.host_network and target.kind != UNNAMED:
            self.refused("socket", f"refused to send (sendmsg) to the unix socket "
                         f"{_named(target)}: {HOST_NETWORK}")
            return False
        if target.kind != PATH:
            return True
        message.pin = self._pin(call.pid, os.fsdecode(target.name))  # the kernel's error
        if not self._made_inside(message.pin):
            self.refused("socket",
                         f"refused to send (sendmsg) to the unix socket "
                         f"{os.fsdecode(target.name)}: it was not made inside this sandbox "
                         "(the sandbox's one way out is its wire)")
            return False
        message.address = (AF_UNIX.to_bytes(2, "little")
                           + f"/proc/self/fd/{message.pin}".encode() + b"\0")
        return True

    def _send_messages(self, work: _Call) -> None:
        """Done here without blocking: a sendmsg that would wait (or a blocking stream's
        that sent part) and any blocking sendmmsg are finished by a worker."""
        blocking = not (work.flags & _MSG_DONTWAIT
                        or fcntl.fcntl(work.fd, _F_GETFL) & os.O_NONBLOCK)
        if work.nr == SENDMMSG:
            result = self._send_all(work, work.flags | _MSG_DONTWAIT)
            if blocking and work.sent < len(work.messages) and (
                    result == -errno.EAGAIN or result == work.sent):
                self._hand_to_worker(work)  # from the message that would wait
                return
        else:
            message = work.messages[0]
            result = _send_message(work.fd, message, work.flags | _MSG_DONTWAIT)
            if blocking and (result == -errno.EAGAIN or (
                    work.stream and 0 <= result < len(message.data)) or (
                    message.rest and result == len(message.data))):
                work.sent = max(result, 0)
                self._hand_to_worker(work)
                return
        work.close()
        self._answer(work.id, result)

    @staticmethod
    def _send_all(work: _Call, flags: int) -> int:
        """sendmmsg's messages, one by one from `work.sent` (those sent before): the
        count sent, each one's length written back into the caller's header as the
        kernel does, or the first one's error. The count sent is kept in `work.sent`,
        so that a worker goes on from a message that would have waited."""
        for index in range(work.sent, len(work.messages)):
            result = _send_message(work.fd, work.messages[index], flags)
            if result < 0:
                if result == -errno.EAGAIN and flags & _MSG_DONTWAIT and not work.sent:
                    return result
                return work.sent or result
            write_memory(work.pid, work.at + index * MMSGHDR_BYTES + MSGHDR_BYTES,
                         result.to_bytes(4, "little"))
            work.sent += 1
        return work.sent

    def _read(self, pid: int, address: int, length: int) -> bytes:
        if length == 0:
            return b""
        data = read_memory(pid, address, length)
        if len(data) != length:
            raise OSError(errno.EFAULT, "unreadable")
        return data

    def _pin(self, pid: int, path: str) -> int:
        """The file at `path` as the caller sees it, resolved inside the sandbox's root,
        held by an O_PATH descriptor; a socket file that is not there is refused by the
        kernel's own error (ENOENT, ECONNREFUSED for a file that is no socket)."""
        if not path.startswith("/"):
            path = os.readlink(f"/proc/{pid}/cwd").rstrip("/") + "/" + path
        if len(path) >= PATH_MAX:
            raise OSError(errno.ENAMETOOLONG, "path")
        root = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            how = _OpenHow(os.O_PATH | os.O_CLOEXEC, 0,
                           _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
            pin = syscall(_SYS_OPENAT2, ctypes.c_int(root),
                          os.fsencode(path.lstrip("/") or "."), ctypes.byref(how),
                          ctypes.c_size_t(ctypes.sizeof(how)))
        finally:
            os.close(root)
        if not stat.S_ISSOCK(os.fstat(pin).st_mode):
            os.close(pin)
            raise OSError(errno.ECONNREFUSED, "not a socket")
        return pin

    def _made_inside(self, pin: int) -> bool:
        """Whether a unix socket bound in the sandbox's own network namespace sits at the
        pinned file (the pin keeps that inode from being freed and reused meanwhile)."""
        info = os.fstat(pin)
        wanted = (kernel_device(os.major(info.st_dev), os.minor(info.st_dev)), info.st_ino)
        self.sequence = (self.sequence + 1) & 0xFFFFFFFF
        os.write(self.diag, dump_request(self.sequence))
        found = False
        while True:
            reply = os.read(self.diag, 1 << 16)
            try:
                bound, done = parse_dump(reply, self.sequence)
            except UnixDiagError as error:
                raise OSError(errno.EACCES, f"sock_diag: {error}") from None
            found = found or wanted in bound
            if done:
                return found

    # -- doing it -----------------------------------------------------------------------

    def _answer(self, notification_id: int, result: int) -> None:
        try:  # noqa: SIM105 (contextlib is one more import at every start)
            notify.answer_value(self.listener, notification_id, result)
        except notify.NotifyError:
            pass  # the caller was interrupted meanwhile

    def _connect(self, work: _Call) -> None:
        """An inet (or other non-unix) connect, done here without ever blocking this
        loop for long: on a blocking socket the connect waits at most CONNECT_WAIT_MS
        (SO_SNDTIMEO, the socket's own connect timeout, set for the call and put back),
        and one still in progress then (EINPROGRESS) is waited for by a worker. Inside
        its own network a sandbox reaches only local addresses, made in microseconds, so
        that is rare: a listener whose queue is full."""
        blocking = not fcntl.fcntl(work.fd, _F_GETFL) & os.O_NONBLOCK
        if blocking:
            self.scratch.bound_connect_wait(work.fd)
        ctypes.set_errno(0)
        result = _connect(work.fd, work.address, len(work.address))
        code = 0 if result == 0 else ctypes.get_errno() or errno.EIO
        if blocking:
            self.scratch.restore_connect_wait(work.fd)
            if code == errno.EINPROGRESS:
                # A connect to wait for, in a worker, as long as the program's own
                # timeout (none: for as long as it takes).
                work.flags = -1
                work.data = self.scratch.saved.raw
                self._hand_to_worker(work)
                return
        work.close()
        self._answer(work.id, -code)

    def _send(self, work: _Call) -> None:
        result = self._sendto(work, work.flags | _MSG_DONTWAIT)
        if result == -errno.EAGAIN and not (work.flags & _MSG_DONTWAIT or fcntl.fcntl(
                work.fd, _F_GETFL) & os.O_NONBLOCK):
            self._hand_to_worker(work)  # a blocking send that would wait: a worker waits
            return
        work.close()
        self._answer(work.id, result)

    @staticmethod
    def _sendto(work: _Call, flags: int) -> int:
        ctypes.set_errno(0)
        result = int(_sendto(work.fd, work.data, len(work.data), flags,
                             work.address or None, len(work.address)))
        return result if result >= 0 else -(ctypes.get_errno() or errno.EIO)

    def _finish(self, work: _Call) -> None:
        """In a worker: the call as the program made it, waiting as it would."""
        if work.nr == SENDTO:
            result = self._sendto(work, work.flags)
        elif work.nr == SENDMMSG:
            result = self._send_all(work, work.flags)
        elif work.nr == SENDMSG:
            result = self._finish_message(work)
        elif work.flags == -1:  # an inet connect in progress; data: the program's timeout
            seconds = int.from_bytes(work.data[:8], "little")
            micros = int.from_bytes(work.data[8:16], "little")
            timeout = seconds * 1000 + micros // 1000 if seconds or micros else -1
            if _writable(work.fd, timeout):
                try:
                    result = -_Scratch().socket_option(work.fd, _SO_ERROR)
                except OSError as error:  # a worker never dies of a call: it is counted
                    result = -(error.errno or errno.EIO)
            else:
                result = -errno.EINPROGRESS  # the program's own timeout, as the kernel says
        else:
            ctypes.set_errno(0)
            result = int(_connect(work.fd, work.address, len(work.address)))
            result = 0 if result == 0 else -(ctypes.get_errno() or errno.EIO)
        work.close()
        self._answer(work.id, result)

    @staticmethod
    def _finish_message(work: _Call) -> int:
        """A blocking sendmsg, in a worker: what is left of the message read, then (a
        stream's) the data past SENDTO_MAX, read from the caller piece by piece; what
        was sent counts, as the kernel's blocking send returns it."""
        message = work.messages[0]
        sent = work.sent
        if sent < len(message.data) or not message.data:
            result = _send_message(work.fd, message, work.flags, skip=sent)
            if result < 0:
                return sent or result
            sent += result
            if sent < len(message.data):
                return sent
        piece = _Message(b"", b"", b"", [])
        for at, length in message.rest:
            done = 0
            while done < length:
                try:
                    piece.data = read_memory(work.pid, at + done, min(length - done, SENDTO_MAX))
                except OSError:
                    return sent or -errno.EFAULT
                if not piece.data:
                    return sent or -errno.EFAULT
                result = _send_message(work.fd, piece, work.flags)
                if result < 0:
                    return sent or result
                sent += result
                done += result
                if result < len(piece.data):
                    return sent
        return sent

    def _hand_to_worker(self, work: _Call) -> None:
        """Each call handed over takes a worker of its own: an idle one (claimed here,
        not when it wakes: calls handed over before it wakes would all count it, and
        wait behind the first, which may wait forever), or a new one up to MAX_WORKERS;
        past that it waits in line for the first worker done."""
        import queue
        import threading

        if self.queue is None or self.counting is None:
            self.queue = queue.SimpleQueue()
            self.counting = threading.Lock()
        with self.counting:
            start = False
            if self.idle > 0:
                self.idle -= 1
            elif self.workers < MAX_WORKERS:
                self.workers += 1
                start = True
            else:
                self.in_line += 1
        self.queue.put(work)
        if start:
            threading.Thread(target=self._work, args=(self.queue, self.counting),
                             daemon=True).start()

    def _work(self, waiting: queue.SimpleQueue[_Call], counting: threading.Lock) -> None:
        while True:
            self._finish(waiting.get())
            with counting:  # done: take a call waiting in line, or be idle
                if self.in_line > 0:
                    self.in_line -= 1
                else:
                    self.idle += 1


def _writable(fd: int, milliseconds: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return bool(poller.poll(milliseconds))
