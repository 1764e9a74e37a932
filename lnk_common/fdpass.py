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

__all__ = ["receive_fd", "send_fd"]


def send_fd(channel: int, fd: int) -> None:
    """Send `fd` with one byte over the socket `channel`, which stays open."""
    sock = _socket.socket(fileno=channel)
    try:
        sock.sendmsg([b"L"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                               fd.to_bytes(4, sys.byteorder))])
    finally:
        sock.detach()


def receive_fd(channel: int) -> int | None:
    """The descriptor sent over `channel` (which stays open), or None when the other end
    closed without sending one."""
    sock = _socket.socket(fileno=channel)
    try:
        _, ancillary, _, _ = sock.recvmsg(1, _socket.CMSG_SPACE(4))
    finally:
        sock.detach()
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS and len(data) >= 4:
            return int.from_bytes(data[:4], sys.byteorder)
    return None
