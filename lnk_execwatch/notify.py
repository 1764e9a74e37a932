"""The seccomp user-notification protocol, through ioctls (libseccomp 2.5 lacks ADDFD).

Sizes and numbers as the kernel gives them (SECCOMP_GET_NOTIF_SIZES here: 80/24/64;
VERIFIED-FACTS.md). A notification is received into a zeroed buffer (RECV), its target
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
    "receive",
]

_RECV = 0xC0502100
_SEND = 0xC0182101
_ID_VALID = 0x40082102
_ADDFD = 0x40182103
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


def receive(listener: int) -> Notification:
    raw = _Notif()  # zeroed, as the kernel requires
    _ioctl(listener, _RECV, raw, "NOTIF_RECV")
    return Notification(raw.id, raw.pid, raw.data.nr, tuple(raw.data.args))


def id_valid(listener: int, notification_id: int) -> bool:
    """Whether the target is still blocked in this call (so what was read of its memory
    was read from the process that made it)."""
    try:
        _ioctl(listener, _ID_VALID, ctypes.c_uint64(notification_id), "NOTIF_ID_VALID")  # type: ignore[arg-type]
    except NotifyError:
        return False
    return True


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
