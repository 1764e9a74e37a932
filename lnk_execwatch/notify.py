"""The seccomp user-notification protocol, through ioctls (libseccomp 2.5 lacks ADDFD).

Sizes and numbers as the kernel gives them (SECCOMP_GET_NOTIF_SIZES here: 80/24/64;
docs/facts/kernel.md). A notification is received into a zeroed buffer (RECV), its target
checked to be still the one blocked in the call after reading its memory (ID_VALID),
and answered once: let the call go on (SEND with FLAG_CONTINUE), fail it with an errno
(SEND), or put a file descriptor into the target as the call's result (ADDFD with
FLAG_SEND, which answers and adds atomically).

NotifyError is the only exception that leaves this module.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl

__all__ = [
    "Notification",
    "NotifyError",
    "add_fd_and_answer",
    "answer_continue",
    "answer_error",
    "answer_value",
    "id_valid",
    "prefer_synchronous_wakeups",
    "receive",
]

_RECV = 0xC0502100
_SEND = 0xC0182101
_ID_VALID = 0x40082102
_ADDFD = 0x40182103
_SET_FLAGS = 0x40082104  # takes the flag value itself, not a pointer
_SYNC_WAKE_UP = 1
_FLAG_CONTINUE = 1
_ADDFD_FLAG_SEND = 1 << 1


class NotifyError(Exception):
    """An ioctl on the listener failed; `errno` says which way (ENOENT: the target is
    gone, its call interrupted)."""

    def __init__(self, code: int, what: str) -> None:
        self.errno = code
        super().__init__(f"{what}: {errno.errorcode.get(code, code)}")


class _Data(ctypes.Structure):
    _fields_ = [("nr", ctypes.c_int), ("arch", ctypes.c_uint32),
                ("instruction_pointer", ctypes.c_uint64), ("args", ctypes.c_uint64 * 6)]


class _Notif(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("pid", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("data", _Data)]


class _Response(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("val", ctypes.c_int64),
                ("error", ctypes.c_int32), ("flags", ctypes.c_uint32)]


class _AddFd(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("flags", ctypes.c_uint32),
                ("srcfd", ctypes.c_uint32), ("newfd", ctypes.c_uint32),
                ("newfd_flags", ctypes.c_uint32)]


class Notification:
    """One blocked call: its id, the calling process (as this side sees its pid), the
    call's number and its six arguments."""

    __slots__ = ("args", "id", "nr", "pid")

    def __init__(self, id: int, pid: int, nr: int, args: tuple[int, ...]) -> None:
        self.id = id
        self.pid = pid
        self.nr = nr
        self.args = args


def _ioctl(listener: int, request: int, buffer: ctypes.Structure, what: str) -> int:
    try:
        return fcntl.ioctl(listener, request, buffer, True)  # type: ignore[no-any-return]
    except OSError as error:
        raise NotifyError(error.errno or errno.EIO, what) from None


# Buffers made once, used by the watch's one receiving thread (every connect in a
# sandbox passes here: a ctypes object made per call is a measurable part of its cost).
_RECEIVED = _Notif()
_RECEIVED_SIZE = ctypes.sizeof(_Notif)
_ASKED = ctypes.c_uint64(0)


def receive(listener: int) -> Notification:
    """The next notification (from the watch's one receiving thread only)."""
    ctypes.memset(ctypes.addressof(_RECEIVED), 0, _RECEIVED_SIZE)  # the kernel requires it
    _ioctl(listener, _RECV, _RECEIVED, "NOTIF_RECV")
    data = _RECEIVED.data
    return Notification(_RECEIVED.id, _RECEIVED.pid, data.nr, tuple(data.args))


def id_valid(listener: int, notification_id: int) -> bool:
    """Whether the target is still blocked in this call (so what was read of its memory
    was read from the process that made it). From the receiving thread only."""
    _ASKED.value = notification_id
    try:
        _ioctl(listener, _ID_VALID, _ASKED, "NOTIF_ID_VALID")  # type: ignore[arg-type]
    except NotifyError:
        return False
    return True


def prefer_synchronous_wakeups(listener: int) -> None:
    """SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (Linux 6.6): the caller hands its CPU to this
    side and back, rather than waking it elsewhere. Without it (an older kernel) only
    the speed differs."""
    try:  # noqa: SIM105 (contextlib is one more import at every start)
        fcntl.ioctl(listener, _SET_FLAGS, _SYNC_WAKE_UP)
    except OSError:
        pass


def answer_continue(listener: int, notification_id: int) -> None:
    _ioctl(listener, _SEND, _Response(notification_id, 0, 0, _FLAG_CONTINUE), "NOTIF_SEND")


def answer_error(listener: int, notification_id: int, code: int) -> None:
    _ioctl(listener, _SEND, _Response(notification_id, 0, -code, 0), "NOTIF_SEND")


def answer_value(listener: int, notification_id: int, value: int) -> None:
    """The call returns `value` (what the watch did in its place), or fails with -value."""
    if value < 0:
        answer_error(listener, notification_id, -value)
        return
    _ioctl(listener, _SEND, _Response(notification_id, value, 0, 0), "NOTIF_SEND")


def add_fd_and_answer(listener: int, notification_id: int, fd: int, *, cloexec: bool) -> int:
    """Put `fd` into the target as the call's result; returns its number there."""
    request = _AddFd(notification_id, _ADDFD_FLAG_SEND, fd, 0, 0o2000000 if cloexec else 0)
    return _ioctl(listener, _ADDFD, request, "NOTIF_ADDFD")
