"""Landlock through ctypes: the kernel's allow-list of paths, applied to the calling thread.

Why our own few lines rather than a binding from PyPI: the init runs at every sandbox
start, and importing `landlockpy` took 54 ms and `py_landlock` 40 ms here, against 3 ms
for ctypes (python -X importtime); one of the older bindings also misreads errno after
a failed call. Landlock is three system calls and three structs.

Trust and order: the init applies this inside the sandbox, after bubblewrap's mounts
(a landlocked process cannot mount), single-threaded (Landlock restricts the calling
thread only), right before exec. Rights are handled as far as the kernel's ABI knows
them ("best effort by ABI"); `check` says which ABI is in force.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from lnk_common.syscalls import prctl, syscall

__all__ = [
    "ACCESS_FS_READ",
    "ACCESS_FS_READ_EXECUTE",
    "ACCESS_FS_TEMP",
    "ACCESS_FS_WRITE",
    "ACCESS_RIGHTS",
    "LandlockError",
    "Rule",
    "abi_version",
    "restrict_self",
]

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights (include/uapi/linux/landlock.h), with the ABI that brought each.
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_FS_ALL = (1 << 16) - 1  # ABI 5 and later

# Scopes (ABI 6): a landlocked process may not signal, nor connect to an abstract unix
# socket of, a process outside its own Landlock domain.
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# Rights that only mean something on a folder; on a file they give EINVAL.
_FS_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

ACCESS_FS_READ = READ_FILE | READ_DIR
ACCESS_FS_READ_EXECUTE = ACCESS_FS_READ | EXECUTE
# FIFOs and device files: a FIFO left where the person's tools read a file (.gitignore,
# a hook, an included settings file) hangs their git, prompt and editor after the run
# (F8); a device file has no use in a folder the person works in. The private temp
# folders keep them (make's jobserver, shells' and test runners' FIFOs live there);
# unix sockets are kept everywhere (a server in a written folder must work).
MAKE_SPECIAL = MAKE_FIFO | MAKE_CHAR | MAKE_BLOCK
ACCESS_FS_WRITE = _FS_ALL & ~MAKE_SPECIAL
ACCESS_FS_TEMP = _FS_ALL

# The named kinds of access a sandbox gives a path; the bwrap plan writes these names on
# the init's command line, the init turns them into rights.
ACCESS_RIGHTS = {
    "read": ACCESS_FS_READ_EXECUTE,
    "write": ACCESS_FS_WRITE,
    # The private /tmp, /var/tmp and /dev/shm: everything, FIFOs and device files too.
    "temp": ACCESS_FS_TEMP,
    # /dev: read and write the device nodes bwrap put there (null, tty, urandom …) and
    # their ioctls (a terminal needs TCGETS); no making of files, no execution.
    "devices": READ_FILE | WRITE_FILE | READ_DIR | IOCTL_DEV,
    "proc": ACCESS_FS_READ,
    # Where [commands] lists programs, the grants lose the right to run what they hold,
    # and each listed file or folder (and the loader) gets it back: Landlock checks the
    # execute right on the file exec is given and on a script's or program's interpreter.
    "read-no-exec": ACCESS_FS_READ,
    "write-no-exec": ACCESS_FS_WRITE & ~EXECUTE,
    "temp-no-exec": ACCESS_FS_TEMP & ~EXECUTE,
    "run": ACCESS_FS_READ_EXECUTE,
}


class LandlockError(Exception):
    """Landlock could not be applied as asked; the init refuses to run the program."""


# `access` beneath `path` (a folder's whole tree, or one file). A tuple, not a class:
# the init imports this at every start.
Rule = tuple[str, int]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]




def abi_version() -> int:
    """The kernel's Landlock ABI, or 0 when Landlock is absent or disabled at boot."""
    try:
        return syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError as error:
        if error.errno in (errno.ENOSYS, errno.EOPNOTSUPP):
            return 0
        raise


def handled_fs(abi: int) -> int:
    return _FS_BY_ABI.get(abi, _FS_ALL) if abi > 0 else 0


def restrict_self(rules: list[Rule], *, abi: int) -> None:
    """Allow only `rules` (as far as `abi` knows), for this thread and all it execs.

    Raises LandlockError when any step fails: the caller must not run the program then.
    """
    if abi < 1:
        raise LandlockError("Landlock is not available in this kernel")
    handled = handled_fs(abi)
    attr = _RulesetAttr(handled_access_fs=handled, handled_access_net=0,
                        scoped=(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    try:
        ruleset = syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    except OSError as error:
        raise LandlockError(f"landlock_create_ruleset: {error.strerror}") from None
    try:
        for rule in rules:
            _add_path_rule(ruleset, rule, handled)
        try:
            prctl(_PR_SET_NO_NEW_PRIVS, 1)
        except OSError as error:
            raise LandlockError(f"prctl(PR_SET_NO_NEW_PRIVS): {error.strerror}") from None
        try:
            syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
        except OSError as error:
            raise LandlockError(f"landlock_restrict_self: {error.strerror}") from None
    finally:
        os.close(ruleset)


def _add_path_rule(ruleset: int, rule: Rule, handled: int) -> None:
    path, allowed = rule
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as error:
        raise LandlockError(f"cannot open {path} for a rule: {error.strerror}") from None
    try:
        access = allowed & handled
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            access &= _FS_FILE_ONLY
        attr = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
        try:
            syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                     ctypes.byref(attr), ctypes.c_uint32(0))
        except OSError as error:
            raise LandlockError(f"landlock_add_rule {path}: {error.strerror}") from None
    finally:
        os.close(fd)
