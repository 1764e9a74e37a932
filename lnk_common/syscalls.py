"""The few raw system calls the sandbox makes through libc (ctypes), with errno kept.

Shared by Landlock (lnk_wrap.landlock), the seccomp loader (lnk_wrap.seccomp) and
the exec watch: ctypes is 3 ms to import, a binding from PyPI 40-54 ms.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["libc", "prctl", "syscall"]

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def syscall(number: int, *args: object) -> int:
    """syscall(2); a negative result raises OSError with the call's errno."""
    ctypes.set_errno(0)
    result = int(libc.syscall(number, *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def prctl(option: int, value: int = 0) -> int:
    ctypes.set_errno(0)
    result = int(libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0),
                            ctypes.c_ulong(0), ctypes.c_ulong(0)))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result
