"""Loading a compiled seccomp filter, as the first thing the init does inside.

The program is compiled ahead of time from the table in lnk_wrap.seccomp_filter (see
there why), read from lnk_wrap/filters/, and installed with one seccomp(2) call. With a
listener (every sandbox's), the kernel returns the file descriptor the watch answers
notifications on; the init hands it out and closes its own copy, so that when
the watch is gone, every notifying call fails (ENOSYS): closed, never open.

Trust: the filter applies to the calling thread and everything it execs (the init is
single-threaded); no_new_privs is set first, as the kernel requires of an unprivileged
filter. Whether it took effect is checked (PR_GET_SECCOMP reads 2), or the init refuses.
"""

from __future__ import annotations

import ctypes

from lnk_common.arch import number
from lnk_common.syscalls import prctl, syscall

__all__ = ["SeccompError", "install"]

_SYS_SECCOMP = number("seccomp")
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_PR_SET_NO_NEW_PRIVS = 38
_PR_GET_SECCOMP = 21
_SECCOMP_MODE_FILTER = 2
# A BPF instruction is 8 bytes; the kernel takes at most 4096 of them (BPF_MAXINSNS).
_INSTRUCTION_BYTES = 8
MAX_INSTRUCTIONS = 4096


class SeccompError(Exception):
    """The filter could not be installed as asked; the program must not run."""


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes, *, listener: bool) -> int | None:
    """Install `program`; return the listener's file descriptor when asked for one."""
    count, rest = divmod(len(program), _INSTRUCTION_BYTES)
    if rest or not 0 < count <= MAX_INSTRUCTIONS:
        raise SeccompError(f"not a BPF program ({len(program)} bytes)")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(count, ctypes.cast(buffer, ctypes.c_void_p))
    flags = _SECCOMP_FILTER_FLAG_NEW_LISTENER if listener else 0
    try:
        prctl(_PR_SET_NO_NEW_PRIVS, 1)
        result = syscall(_SYS_SECCOMP, ctypes.c_uint(_SECCOMP_SET_MODE_FILTER),
                         ctypes.c_uint(flags), ctypes.byref(fprog))
    except OSError as error:
        raise SeccompError(f"seccomp(SET_MODE_FILTER): {error.strerror}") from None
    try:
        mode = prctl(_PR_GET_SECCOMP)
    except OSError as error:
        raise SeccompError(f"prctl(PR_GET_SECCOMP): {error.strerror}") from None
    if mode != _SECCOMP_MODE_FILTER:
        raise SeccompError("the seccomp filter did not take effect")
    return result if listener else None
