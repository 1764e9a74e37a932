"""Passing one file descriptor over a unix socket (SCM_RIGHTS), as the helpers do: the
init hands the seccomp listener to the exec watch, the launcher the proxy's listening
socket to the proxy. `_socket` rather than `socket`: the latter costs an import at every
sandbox start."""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket as _socket
else:
    import _socket

__all__ = [
    "LABEL_BYTES",
    "receive_fd",
    "receive_fds",
    "receive_labelled",
    "send_fd",
    "send_fds",
    "send_numbers",
    "take_numbered",
]

# A label says what a descriptor is for ("dns udp 127.0.0.1 53"): short, one message.
LABEL_BYTES = 128


def send_fd(channel: int, fd: int, label: bytes = b"L") -> None:
    """Send `fd` with a short label (what it is for; at most LABEL_BYTES) over the
    socket `channel`, which stays open."""
    send_fds(channel, (fd,), label)


def send_fds(channel: int, fds: tuple[int, ...], label: bytes = b"L") -> None:
    """Send several descriptors in one message (they arrive together or not at all)."""
    sock = _socket.socket(fileno=channel)
    try:
        sock.sendmsg([label[:LABEL_BYTES]], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                               b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))])
    finally:
        sock.detach()


def receive_fds(channel: int, count: int) -> tuple[int, ...] | None:
    """Exactly `count` descriptors sent in one message over `channel`, or None when the
    other end closed without sending them (any received are closed)."""
    sock = _socket.socket(fileno=channel)
    try:
        _, ancillary, _, _ = sock.recvmsg(LABEL_BYTES, _socket.CMSG_SPACE(4 * count))
    finally:
        sock.detach()
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [int.from_bytes(data[at:at + 4], sys.byteorder)
                    for at in range(0, len(data) - 3, 4)]
    if len(fds) != count:
        for fd in fds:
            import os

            os.close(fd)
        return None
    return tuple(fds)


def receive_fd(channel: int) -> int | None:
    """The descriptor sent over `channel` (which stays open), or None when the other end
    closed without sending one."""
    received = receive_labelled(channel)
    return None if received is None else received[0]


def receive_labelled(channel: int) -> tuple[int, bytes] | None:
    """The descriptor sent over `channel` and its label, or None when the other end
    closed without sending one. `channel` must be a SOCK_SEQPACKET or a stream that
    carries one descriptor a message (each send_fd is read whole)."""
    sock = _socket.socket(fileno=channel)
    try:
        label, ancillary, _, _ = sock.recvmsg(LABEL_BYTES, _socket.CMSG_SPACE(4))
    finally:
        sock.detach()
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
            return int.from_bytes(data[:4], sys.byteorder), label
    return None


# Handing over descriptors without sendmsg: the init's seccomp filter hands every sendmsg
# to the watch, which does not have the filter's listener yet, so the init says the
# numbers (a plain write) and the watch takes the descriptors itself (pidfd_getfd) from
# the process the kernel names as the writer (SO_PASSCRED).
_SO_PASSCRED = 16
_SCM_CREDENTIALS = 2
_UCRED_BYTES = 12  # pid, uid, gid
_SYS_PIDFD_OPEN = 434
_SYS_PIDFD_GETFD = 438
NUMBERS_MAX = 4


def send_numbers(channel: int, fds: tuple[int, ...]) -> None:
    """Say the numbers of `fds` (this process's) over the stream `channel`, one write,
    named by the kernel (SO_PASSCRED on the writer's end attaches the writer to what it
    writes, whenever the reader set its own)."""
    import os

    if not 0 < len(fds) <= NUMBERS_MAX:
        raise ValueError("one to four descriptors")
    sock = _socket.socket(fileno=channel)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _SO_PASSCRED, 1)
    finally:
        sock.detach()
    os.write(channel, bytes([len(fds)]) + b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds))


def take_numbered(channel: int, count: int) -> tuple[int, ...] | None:
    """The `count` descriptors the writer said by number (send_numbers), taken from it
    with pidfd_getfd; None when the other end closed, said other than `count` numbers, or
    is not named by the kernel (every descriptor taken is closed then)."""
    import os

    from lnk_common.syscalls import syscall

    sock = _socket.socket(fileno=channel)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _SO_PASSCRED, 1)  # the writer's name, given
        said, ancillary, _, _ = sock.recvmsg(1 + 4 * NUMBERS_MAX,
                                             _socket.CMSG_SPACE(_UCRED_BYTES))
    finally:
        sock.detach()
    pid = 0
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _SCM_CREDENTIALS and len(data) >= 4:
            pid = int.from_bytes(data[:4], sys.byteorder)
    if pid <= 0 or not said or said[0] != count or len(said) != 1 + 4 * count:
        return None
    numbers = [int.from_bytes(said[at:at + 4], sys.byteorder) for at in range(1, len(said), 4)]
    taken: list[int] = []
    try:
        pidfd = syscall(_SYS_PIDFD_OPEN, pid, 0)
    except OSError:
        return None
    try:
        for number in numbers:
            taken.append(syscall(_SYS_PIDFD_GETFD, pidfd, number, 0))
    except OSError:
        for fd in taken:
            os.close(fd)
        return None
    finally:
        os.close(pidfd)
    return tuple(taken)
