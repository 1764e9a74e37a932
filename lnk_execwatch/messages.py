"""What a `sendmsg` or `sendmmsg` says, read as the kernel reads it (sans IO): the
message header's fields, its iovecs and its control messages, for the watch to do the
call itself (lnk_execwatch.sockets).

Why these calls are handed to the watch at all: a unix datagram sent with `sendmsg`
carries its address inside the header, which the seccomp filter cannot read, so it was a
way to any datagram socket outside at a path the sandbox sees, both ways, descriptors
passed. The layouts are x86-64's (and every 64-bit Linux's): `struct msghdr` is 56 bytes,
`struct mmsghdr` 64, `struct cmsghdr` 16 with its data aligned to 8.

Each reading error is a `MessageError` carrying the errno the kernel would give.
"""

from __future__ import annotations

import errno
import struct

__all__ = [
    "CMSG_HEADER",
    "MMSGHDR_BYTES",
    "MSGHDR_BYTES",
    "SCM_CREDENTIALS",
    "SCM_MAX_FD",
    "SCM_RIGHTS",
    "SOL_SOCKET",
    "UIO_MAXIOV",
    "Control",
    "Header",
    "MessageError",
    "build_control",
    "parse_control",
    "parse_header",
    "parse_iovecs",
]

MSGHDR_BYTES = 56
MMSGHDR_BYTES = 64  # a msghdr and the msg_len the kernel writes back, padded
CMSG_HEADER = 16
IOVEC_BYTES = 16
# The kernel's own limits: at most UIO_MAXIOV iovecs (else EMSGSIZE) and messages in one
# sendmmsg (more are not sent), at most SCM_MAX_FD descriptors in one SCM_RIGHTS.
UIO_MAXIOV = 1024
SCM_MAX_FD = 253
# The kernel copies at most a sockaddr_storage of an address (a longer one is cut).
SOCKADDR_MAX = 128
SOL_SOCKET = 1
SCM_RIGHTS = 1
SCM_CREDENTIALS = 2

_HEADER = struct.Struct("=QiiQQQQi4x")
_IOVEC = struct.Struct("=QQ")
_CMSG = struct.Struct("=Qii")


class MessageError(Exception):
    """A message the kernel would refuse; `code` is its errno."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class Header:
    """A msghdr's fields: where its parts are in the caller's memory, and how long."""

    __slots__ = ("control_at", "control_length", "iov_at", "iov_count", "name_at",
                 "name_length")

    def __init__(self, name_at: int, name_length: int, iov_at: int, iov_count: int,
                 control_at: int, control_length: int) -> None:
        self.name_at = name_at
        self.name_length = name_length
        self.iov_at = iov_at
        self.iov_count = iov_count
        self.control_at = control_at
        self.control_length = control_length


def parse_header(raw: bytes) -> Header:
    """A msghdr as the kernel copies it (copy_msghdr_from_user): a negative name length
    is EINVAL, a longer one than a sockaddr_storage is cut to it, no name pointer means
    no name, more than UIO_MAXIOV iovecs is EMSGSIZE."""
    if len(raw) != MSGHDR_BYTES:
        raise MessageError(errno.EFAULT, "short message header")
    name_at, name_length, _pad, iov_at, iov_count, control_at, control_length, _flags = (
        _HEADER.unpack(raw))
    if name_length < 0:
        raise MessageError(errno.EINVAL, "negative address length")
    if name_at == 0:
        name_length = 0
    name_length = min(name_length, SOCKADDR_MAX)
    if iov_count > UIO_MAXIOV:
        raise MessageError(errno.EMSGSIZE, "too many iovecs")
    if control_length > 0x7FFFFFFF:
        raise MessageError(errno.ENOBUFS, "control data too long")
    return Header(name_at, name_length, iov_at, iov_count, control_at, control_length)


def parse_iovecs(raw: bytes) -> list[tuple[int, int]]:
    """The (address, length) pairs of an iovec array; a total past the kernel's ssize
    ceiling is EINVAL."""
    if len(raw) % IOVEC_BYTES:
        raise MessageError(errno.EFAULT, "short iovec array")
    pairs = [_IOVEC.unpack_from(raw, at) for at in range(0, len(raw), IOVEC_BYTES)]
    if sum(length for _, length in pairs) > 0x7FFFFFFFFFFFF000:
        raise MessageError(errno.EINVAL, "iovecs too long")
    return pairs


class Control:
    """One control message: its level, type and data (for SCM_RIGHTS, the caller's
    descriptor numbers in `fds`)."""

    __slots__ = ("data", "fds", "kind", "level")

    def __init__(self, level: int, kind: int, data: bytes, fds: tuple[int, ...] = ()) -> None:
        self.level = level
        self.kind = kind
        self.data = data
        self.fds = fds


def _aligned(length: int) -> int:
    return (length + 7) & ~7


def parse_control(raw: bytes) -> list[Control]:
    """The control messages in `raw`, walked as the kernel walks them (__scm_send): each
    header at least 16 bytes and within what is left, the next one at the aligned end.
    SCM_RIGHTS is read into descriptor numbers (at most SCM_MAX_FD, else EINVAL)."""
    found: list[Control] = []
    at = 0
    while at + CMSG_HEADER <= len(raw):
        length, level, kind = _CMSG.unpack_from(raw, at)
        if length < CMSG_HEADER or length > len(raw) - at:
            raise MessageError(errno.EINVAL, "malformed control message")
        data = raw[at + CMSG_HEADER:at + length]
        if level == SOL_SOCKET and kind == SCM_RIGHTS:
            count = len(data) // 4
            if count == 0 or count > SCM_MAX_FD:
                raise MessageError(errno.EINVAL, "descriptor count")
            fds = tuple(int.from_bytes(data[index * 4:index * 4 + 4], "little", signed=True)
                        for index in range(count))
            found.append(Control(level, kind, data, fds))
        else:
            found.append(Control(level, kind, data))
        at += _aligned(length)
    return found


def build_control(messages: list[Control]) -> bytes:
    """The control data for a call done by the watch: each message laid out as the
    caller's libc would (CMSG_SPACE each)."""
    parts: list[bytes] = []
    for message in messages:
        length = CMSG_HEADER + len(message.data)
        parts.append(_CMSG.pack(length, message.level, message.kind) + message.data
                     + b"\0" * (_aligned(length) - length))
    return b"".join(parts)
