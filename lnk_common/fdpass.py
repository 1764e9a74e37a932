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
    "receive_fds",
    "receive_labelled",
    "send_fd",
    "send_fds",
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
