"""The system folders every sandbox reads, and the machine's secrets it never does.

A program needs its loader, its libraries and /etc to start; these are read-only in
every sandbox, whatever the spec says. Files that hold the machine's own secrets are
hidden even so: run by root without capabilities, a program still reads a file owned
by root (root is its owner), and /etc/shadow is one.

`gather()` is the only function here that looks at the machine; it fills HostFacts for
the pure plan in lnk_wrap.bwrap.
"""

from __future__ import annotations

import os
import sys

from lnk_common.policy import Policy
from lnk_wrap.bwrap import HostFacts

__all__ = ["LOADERS", "SYSTEM_FOLDERS", "SYSTEM_SECRETS", "elf_interpreter", "gather",
           "loaders", "runtime_paths"]

# Read-only in every sandbox: the loader, libraries, programs and their settings.
# On a merged-/usr system the top-level ones are links into /usr, made as links.
SYSTEM_FOLDERS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Hidden in every sandbox (patterns under the system folders): password hashes, sudo's
# rules, the SSH host keys, TLS private keys. Nothing a sandboxed program needs.
SYSTEM_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/security/opasswd",
    "/etc/ssh/ssh_host_*_key",
    "/etc/ssl/private",
)


# Where x86-64 and aarch64 Linux keep their program loaders (glibc's, musl's). Where
# [commands] lists programs, each that exists stays runnable, with the one a listed
# program names itself.
LOADERS = (
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/usr/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-musl-x86_64.so.1",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
    "/usr/lib/ld-linux-aarch64.so.1",
    "/lib/ld-musl-aarch64.so.1",
)
# An ELF header and its program headers sit in the first few KiB of a program.
_ELF_HEAD_BYTES = 16 * 1024
_PT_INTERP = 3


def elf_interpreter(head: bytes) -> str | None:
    """The loader a 64-bit little-endian ELF program names (PT_INTERP), or None."""
    if len(head) < 64 or head[:6] != b"\x7fELF\x02\x01":
        return None
    offset = int.from_bytes(head[32:40], "little")
    size = int.from_bytes(head[54:56], "little")
    count = int.from_bytes(head[56:58], "little")
    for index in range(count):
        start = offset + index * size
        header = head[start:start + 56]
        if len(header) < 56:
            return None
        if int.from_bytes(header[0:4], "little") == _PT_INTERP:
            where = int.from_bytes(header[8:16], "little")
            length = int.from_bytes(header[32:40], "little")
            name = head[where:where + length].split(b"\0", 1)[0]
            return os.fsdecode(name) if name.startswith(b"/") else None
    return None


def loaders(commands: tuple[str, ...]) -> tuple[str, ...]:
    """The loaders to keep runnable: the machine's, and those listed files name."""
    found = [path for path in LOADERS if os.path.exists(path)]
    for path in commands:
        if os.path.isfile(path):
            try:
                with open(path, "rb") as handle:
                    named = elf_interpreter(handle.read(_ELF_HEAD_BYTES))
            except OSError:
                continue
            if named and os.path.exists(named):
                found.append(named)
    return tuple(dict.fromkeys(os.path.realpath(path) for path in found))


def _kind(path: str) -> str:
    if os.path.islink(path):
        return "link"
    if os.path.isdir(path):
        return "dir"
    if os.path.exists(path):
        return "file"
    return "missing"


def runtime_paths(interpreter: str) -> tuple[str, ...]:
    """What the init's interpreter needs: its folder and standard library."""
    found = [os.path.dirname(interpreter), sys.base_prefix]
    return tuple(dict.fromkeys(os.path.realpath(path) for path in found))


def _matches(pattern: str) -> list[str]:
    """The existing paths a SYSTEM_SECRETS pattern names (one `*` in the last part at most;
    by hand, since glob costs an import at every start)."""
    folder, _, name = pattern.rpartition("/")
    if "*" not in name:
        return [pattern] if os.path.lexists(pattern) else []
    prefix, _, suffix = name.partition("*")
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [f"{folder}/{entry}" for entry in names
            if entry.startswith(prefix) and entry.endswith(suffix)
            and len(entry) >= len(prefix) + len(suffix)]


def gather(policy: Policy, *, cwd: str, info_fd: int | None,
           runtime: tuple[str, ...], packages: str) -> HostFacts:
    system_dirs: list[str] = []
    system_links: list[tuple[str, str]] = []
    for path in SYSTEM_FOLDERS:
        kind = _kind(path)
        if kind == "dir":
            system_dirs.append(path)
        elif kind == "link":
            system_links.append((path, os.readlink(path)))
    hidden = sorted({match for pattern in SYSTEM_SECRETS for match in _matches(pattern)})
    hide_kinds = {path: _kind(path) for path in (*policy.hide, policy.settings)}
    hide_kinds.update({path: _kind(path) for path in hidden})
    return HostFacts(
        loaders=loaders(policy.commands) if policy.commands else (),
        system_dirs=tuple(system_dirs),
        system_links=tuple(system_links),
        system_hidden=tuple(hidden),
        hide_kinds=hide_kinds,
        runtime=runtime,
        packages=packages,
        cwd=cwd,
        info_fd=info_fd,
    )
