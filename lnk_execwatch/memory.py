"""Reading a stopped program's memory (process_vm_readv: one system call, where
/proc/PID/mem is three): the exec watch reads paths and arguments, the socket guard
addresses and datagrams. One binding of the call, so its argument types are set once."""

from __future__ import annotations

import ctypes
import errno
import os

from lnk_common.syscalls import libc

__all__ = ["IoVec", "SmallReader", "read_memory", "write_memory"]


class IoVec(ctypes.Structure):
    """struct iovec."""

    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


_process_vm_readv = libc["process_vm_readv"]  # its own function object: argtypes are per object
_process_vm_readv.restype = ctypes.c_ssize_t
_process_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(IoVec), ctypes.c_ulong,
                              ctypes.POINTER(IoVec), ctypes.c_ulong, ctypes.c_ulong]


def read_memory(pid: int, address: int, length: int) -> bytes:
    """Up to `length` bytes of a stopped program's memory at `address`."""
    buffer = ctypes.create_string_buffer(length)
    local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), length)
    remote = IoVec(address, length)
    ctypes.set_errno(0)
    done = _process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if done < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return buffer.raw[:done]


class SmallReader:
    """Reads of at most `size` bytes into one buffer made once (every connect in a
    sandbox reads its address: a ctypes object made per read is a measurable part of
    its cost). From one thread only."""

    __slots__ = ("buffer", "local", "remote")

    def __init__(self, size: int) -> None:
        self.buffer = ctypes.create_string_buffer(size)
        self.local = IoVec(ctypes.cast(self.buffer, ctypes.c_void_p), 0)
        self.remote = IoVec(0, 0)

    def read_exactly(self, pid: int, address: int, length: int) -> bytes:
        """`length` bytes (at most the buffer's size), or EFAULT."""
        if length == 0:
            return b""
        self.local.length = length
        self.remote.base = address
        self.remote.length = length
        done = _process_vm_readv(pid, ctypes.byref(self.local), 1, ctypes.byref(self.remote),
                                 1, 0)
        if done != length:
            raise OSError(errno.EFAULT, "the memory cannot be read")
        return self.buffer.raw[:length]


_process_vm_writev = libc["process_vm_writev"]  # its own function object
_process_vm_writev.restype = ctypes.c_ssize_t
_process_vm_writev.argtypes = _process_vm_readv.argtypes


def write_memory(pid: int, address: int, data: bytes) -> bool:
    """Write `data` into a stopped program's memory at `address` (what the kernel writes
    back for a call done on the program's behalf); whether it was written whole."""
    buffer = ctypes.create_string_buffer(data, len(data))
    local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), len(data))
    remote = IoVec(address, len(data))
    return bool(_process_vm_writev(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
                == len(data))
