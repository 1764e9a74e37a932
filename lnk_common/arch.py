"""The machine's architecture, and the system-call numbers the code makes or judges by
number (ctypes' syscall(2), a seccomp notification's `nr`), for each one built for.

Sans IO but for reading the machine's name once (uname). x86-64 has its own table
(arch/x86/entry/syscalls/syscall_64.tbl, /usr/include/x86_64-linux-gnu/asm/unistd_64.h);
aarch64 has the generic one (include/uapi/asm-generic/unistd.h); calls added since
Linux 5.1 (pidfd_open and later, numbered from 424) are the same on both.
tests/test_arch.py holds these against the headers Debian ships. Everything else the
code passes to the kernel (struct layouts, ioctl numbers, open flags) is the same on
both 64-bit little-endian ABIs.

An architecture not here has no seccomp filter (lnk_wrap/filters/): no sandbox starts
on it (exit 125, said), never one unfiltered.
"""

from __future__ import annotations

import os

__all__ = ["ARCHITECTURES", "MACHINE", "NUMBERS", "number", "supported"]

# name → number, for each architecture a filter is built for (lnk_wrap.seccomp_filter).
NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {
        "capget": 125, "capset": 126, "connect": 42, "execve": 59, "execveat": 322,
        "memfd_create": 319, "seccomp": 317, "sendmmsg": 307, "sendmsg": 46, "sendto": 44,
        "pidfd_open": 434, "openat2": 437, "pidfd_getfd": 438,
        "landlock_create_ruleset": 444, "landlock_add_rule": 445,
        "landlock_restrict_self": 446,
    },
    "aarch64": {
        "capget": 90, "capset": 91, "connect": 203, "execve": 221, "execveat": 281,
        "memfd_create": 279, "seccomp": 277, "sendmmsg": 269, "sendmsg": 211, "sendto": 206,
        "pidfd_open": 434, "openat2": 437, "pidfd_getfd": 438,
        "landlock_create_ruleset": 444, "landlock_add_rule": 445,
        "landlock_restrict_self": 446,
    },
}
ARCHITECTURES = tuple(NUMBERS)
# What uname says this machine is ("x86_64", "aarch64", …).
MACHINE = os.uname().machine


def supported(machine: str = "") -> bool:
    """Whether `machine` (this one's by default) has a filter."""
    return (machine or MACHINE) in NUMBERS


def number(name: str, machine: str = "") -> int:
    """The system call `name`'s number on `machine` (this one's by default); -1 on an
    architecture with no table (no sandbox starts there: the launcher and the init
    refuse before any call is made)."""
    table = NUMBERS.get(machine or MACHINE)
    return table[name] if table is not None else -1
