"""Sans IO: the unix socket addresses a program hands connect/sendto, and the kernel's
sock_diag listing of the unix sockets bound in one network namespace.

Trust: every byte here comes from the sandbox (an address read from its memory) or from
the kernel (a dump). Nothing is decided here; lnk_execwatch.sockets decides. Both
parsers raise only UnixDiagError; anything else is a bug.

A unix socket belongs to the network namespace it was made in, and every sandbox has a
namespace of its own: a socket listed by a sock_diag socket opened inside the sandbox
(the init opens it) was made inside the sandbox. UNIX_DIAG_VFS names the file a bound
socket sits at by its file system's device and inode (include/uapi/linux/unix_diag.h).
"""

from __future__ import annotations

import struct

__all__ = [
    "ABSTRACT",
    "PATH",
    "UNNAMED",
    "UnixAddress",
    "UnixDiagError",
    "dump_request",
    "kernel_device",
    "parse_dump",
    "parse_unix_address",
]

AF_UNIX = 1
# offsetof(struct sockaddr_un, sun_path), and the whole struct: the kernel refuses a
# longer address (EINVAL) and reads the path only up to its first NUL.
SUN_PATH_OFFSET = 2
SOCKADDR_UN_SIZE = 110

PATH, ABSTRACT, UNNAMED = "path", "abstract", "unnamed"

_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 0x01
_NLM_F_DUMP = 0x300
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_UDIAG_SHOW_VFS = 0x00000002
_UNIX_DIAG_VFS = 1
_ALL_STATES = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: len, type, flags, seq, pid
_REQUEST = struct.Struct("=BBHIII8s")  # unix_diag_req
_MESSAGE = struct.Struct("=BBBBI8s")  # unix_diag_msg
_ATTRIBUTE = struct.Struct("=HH")  # rtattr: len, type
_VFS = struct.Struct("=II")  # unix_diag_vfs: ino, dev


class UnixDiagError(Exception):
    """An address or a dump that cannot be read as the kernel would."""


class UnixAddress:
    """A unix socket address: its kind (PATH, ABSTRACT, UNNAMED) and, for a path, the
    path's bytes as the kernel reads them (up to the first NUL)."""

    __slots__ = ("kind", "name")

    def __init__(self, kind: str, name: bytes) -> None:
        self.kind = kind
        self.name = name


def parse_unix_address(raw: bytes) -> UnixAddress:
    """`raw`: the address a program passed with its length (at most SOCKADDR_UN_SIZE
    bytes read). As the kernel's unix_validate_addr and unix_mkname_bsd read it."""
    if len(raw) <= SUN_PATH_OFFSET:
        if len(raw) == SUN_PATH_OFFSET and int.from_bytes(raw, "little") == AF_UNIX:
            return UnixAddress(UNNAMED, b"")
        raise UnixDiagError("address too short")
    if len(raw) > SOCKADDR_UN_SIZE or int.from_bytes(raw[:2], "little") != AF_UNIX:
        raise UnixDiagError("not a unix socket address")
    path = raw[SUN_PATH_OFFSET:]
    if path[0] == 0:
        return UnixAddress(ABSTRACT, path[1:])
    return UnixAddress(PATH, path.split(b"\0", 1)[0])


def dump_request(sequence: int) -> bytes:
    """A request for every unix socket of the namespace, with the file each is bound at."""
    body = _REQUEST.pack(AF_UNIX, 0, 0, _ALL_STATES, 0, _UDIAG_SHOW_VFS, b"\xff" * 8)
    return _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY,
                        _NLM_F_REQUEST | _NLM_F_DUMP, sequence, 0) + body


def kernel_device(major: int, minor: int) -> int:
    """A device number as the kernel keeps it (s_dev: MKDEV, 12 bits of major above 20 of
    minor), which UNIX_DIAG_VFS reports; stat(2) encodes it otherwise."""
    return (major << 20) | minor


def _align(length: int) -> int:
    return (length + 3) & ~3


def parse_dump(data: bytes, sequence: int) -> tuple[set[tuple[int, int]], bool]:
    """The (kernel device, inode) of each bound socket in one datagram of a dump, and
    whether the dump is done."""
    bound: set[tuple[int, int]] = set()
    offset = 0
    while offset < len(data):
        if len(data) - offset < _HEADER.size:
            raise UnixDiagError("truncated netlink header")
        length, kind, _flags, seq, _pid = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            raise UnixDiagError("netlink message length out of bounds")
        if seq != sequence:
            raise UnixDiagError("answer to another request")
        body = data[offset + _HEADER.size:offset + length]
        offset += _align(length)
        if kind == _NLMSG_DONE:
            return bound, True
        if kind == _NLMSG_ERROR:
            code = -int.from_bytes(body[:4], "little", signed=True) if len(body) >= 4 else 0
            raise UnixDiagError(f"the kernel refused the listing (errno {code})")
        if kind != _SOCK_DIAG_BY_FAMILY or len(body) < _MESSAGE.size:
            raise UnixDiagError("not a unix_diag message")
        at = _MESSAGE.size
        while at + _ATTRIBUTE.size <= len(body):
            attribute_length, attribute = _ATTRIBUTE.unpack_from(body, at)
            if attribute_length < _ATTRIBUTE.size or at + attribute_length > len(body):
                raise UnixDiagError("attribute length out of bounds")
            if attribute == _UNIX_DIAG_VFS and attribute_length >= _ATTRIBUTE.size + _VFS.size:
                inode, device = _VFS.unpack_from(body, at + _ATTRIBUTE.size)
                bound.add((device, inode))
            at += _align(attribute_length)
    return bound, False
