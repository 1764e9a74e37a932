"""The seccomp filter: one table of the system calls a sandbox refuses, and its compiler.

The kernel is a wall too. Each entry below refuses, by name, a call a sandboxed program
does not need and container runtimes refuse too (Docker's and Podman's default profiles,
Flatpak's), with an error rather than a kill, so a program can fall back: EPERM, or
ENOSYS where userspace has a fallback for a call the kernel may lack (clone3 → clone,
the new mount API, io_uring). Calls not listed are allowed: this is a deny-list of the
kernel's attack surface, while what a program may reach is the mounts', Landlock's and
the namespaces' job. Sockets are the one allow-list: `socket` and `socketpair` open only
the families in SOCKET_FAMILIES (and of netlink only NETLINK_PROTOCOLS); any other gets
EAFNOSUPPORT (EPROTONOSUPPORT for a netlink protocol), what a kernel built without it
says, so a program falls back. Foreign architectures (i386's int 0x80 on x86-64) and x32 numbers
are refused whole (ENOSYS), so a program cannot reach a listed call by another number.

Two variants, compiled from the same table, each handing calls to the sandbox's watch
(lnk_execwatch: SECCOMP_RET_USER_NOTIF) outside:
- "sockets" (every sandbox): the table, `execveat` with AT_EMPTY_PATH (running a
  descriptor) refused, and `connect`, and `sendto` with an address, handed to the watch:
  the filter cannot see a socket's family nor read the address, and a unix socket is
  reached by its path whatever the mounts say (Landlock ABI 7 has no right for it). The
  watch lets every other family go on, and connects a unix socket itself, only to one
  made inside this sandbox (lnk_execwatch.sockets).
- "programs" (where [commands] lists programs, and for `learn`): also hands execve and
  execveat to the watch, and memfd_create without MFD_NOEXEC_SEAL, so the watch makes
  the memory file sealed non-executable; a huge-page memory file (MFD_HUGETLB) gets
  EINVAL: hugetlbfs takes the seal but does not enforce it.

pyseccomp (libseccomp) compiles the table to BPF here, at build time; the programs are
kept in lnk_wrap/filters/ and loaded by the init with one system call, because importing
pyseccomp costs 44 ms, which every sandbox start would pay. tests/test_seccomp.py
compiles the table again and compares the bytes (golden), and runs the BPF against a
table of (call, arguments) → action. bin/gen-seccomp writes the files.
"""

from __future__ import annotations

import errno
import os

__all__ = ["ARCH", "ARCHITECTURES", "NETLINK_PROTOCOLS", "REFUSED", "SOCKET_FAMILIES",
           "VARIANTS", "compile_filter", "filter_path", "socket_refusals"]

# The architectures a filter is built for (lnk_common.arch), and this machine's.
ARCHITECTURES = ("x86_64", "aarch64")
ARCH = os.uname().machine

# Flags the rules look at (include/uapi/linux/…).
AT_EMPTY_PATH = 0x1000
MFD_HUGETLB = 0x0004
MFD_NOEXEC_SEAL = 0x0008
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
CLONE_NEW_ANY = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                 | 0x20000000 | 0x40000000 | 0x00000080)  # NS UTS IPC USER PID NET CGROUP TIME

# name → (errno, why). Refused whatever the arguments.
REFUSED: dict[str, tuple[int, str]] = {
    # Kernel code and the machine's state.
    "init_module": (errno.EPERM, "loads kernel code"),
    "finit_module": (errno.EPERM, "loads kernel code"),
    "delete_module": (errno.EPERM, "unloads kernel code"),
    "kexec_load": (errno.EPERM, "replaces the running kernel"),
    "kexec_file_load": (errno.EPERM, "replaces the running kernel"),
    "reboot": (errno.EPERM, "reboots or halts the machine"),
    "swapon": (errno.EPERM, "changes the machine's swap"),
    "swapoff": (errno.EPERM, "changes the machine's swap"),
    "acct": (errno.EPERM, "turns process accounting on for the machine"),
    "settimeofday": (errno.EPERM, "sets the machine's clock"),
    "clock_settime": (errno.EPERM, "sets the machine's clock"),
    "clock_adjtime": (errno.EPERM, "adjusts the machine's clock"),
    "syslog": (errno.EPERM, "reads or clears the kernel's log"),
    "quotactl": (errno.EPERM, "administers disk quotas"),
    "quotactl_fd": (errno.EPERM, "administers disk quotas"),
    "iopl": (errno.EPERM, "raw access to I/O ports"),
    "ioperm": (errno.EPERM, "raw access to I/O ports"),
    "vhangup": (errno.EPERM, "hangs up the terminal for everyone"),
    # Attack surface with a history of kernel exploits; programs do not need it.
    "bpf": (errno.EPERM, "loads programs into the kernel"),
    "perf_event_open": (errno.EPERM, "kernel and hardware performance counters"),
    "userfaultfd": (errno.EPERM, "lets a program stall the kernel mid-copy (exploit aid)"),
    "io_uring_setup": (errno.ENOSYS, "a second system-call interface the filter cannot see"),
    "io_uring_enter": (errno.ENOSYS, "a second system-call interface the filter cannot see"),
    "io_uring_register": (errno.ENOSYS, "a second system-call interface the filter cannot see"),
    "add_key": (errno.EPERM, "the kernel keyring is not namespaced"),
    "request_key": (errno.EPERM, "the kernel keyring is not namespaced"),
    "keyctl": (errno.EPERM, "the kernel keyring is not namespaced"),
    "open_by_handle_at": (errno.EPERM, "opens files by handle, around every path check"),
    "fanotify_init": (errno.EPERM, "watches the whole file system"),
    "lookup_dcookie": (errno.EPERM, "kernel profiling"),
    # Other processes: none outside the sandbox, and none inside need it.
    "ptrace": (errno.EPERM, "reads and writes another process"),
    "process_vm_readv": (errno.EPERM, "reads another process's memory"),
    "process_vm_writev": (errno.EPERM, "writes another process's memory"),
    "kcmp": (errno.EPERM, "compares kernel objects of other processes"),
    "pidfd_getfd": (errno.EPERM, "takes a file descriptor out of another process"),
    # Mounts and namespaces: the sandbox's own are made before the program starts.
    "mount": (errno.EPERM, "changes the mount table"),
    "umount2": (errno.EPERM, "changes the mount table"),
    "pivot_root": (errno.EPERM, "changes the root"),
    "chroot": (errno.EPERM, "changes the root"),
    "setns": (errno.EPERM, "joins another namespace"),
    "open_tree": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "move_mount": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "fsopen": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "fsconfig": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "fsmount": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "fspick": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "mount_setattr": (errno.ENOSYS, "the new mount API (userspace falls back to mount)"),
    "clone3": (errno.ENOSYS, "its flags are in memory the filter cannot read; libc falls back "
                             "to clone, whose namespace flags are refused"),
    # Obsolete: gone from the kernel or never used by a program of this century.
    "uselib": (errno.EPERM, "obsolete (a.out libraries)"),
    "ustat": (errno.EPERM, "obsolete (statfs replaced it)"),
    "sysfs": (errno.EPERM, "obsolete (/proc/filesystems replaced it)"),
    "_sysctl": (errno.EPERM, "obsolete (removed in Linux 5.5; /proc/sys replaced it)"),
    "create_module": (errno.ENOSYS, "obsolete (removed in Linux 2.6)"),
    "get_kernel_syms": (errno.ENOSYS, "obsolete (removed in Linux 2.6)"),
    "query_module": (errno.ENOSYS, "obsolete (removed in Linux 2.6)"),
    "nfsservctl": (errno.ENOSYS, "obsolete (removed in Linux 3.1)"),
}

# Refused only with some arguments: (name, argument index, mask, value, errno, why);
# refused when (argument & mask) == value (a masked compare of the low 64 bits).
REFUSED_WHEN: tuple[tuple[str, int, int, int, int, str], ...] = (
    ("ioctl", 1, 0xFFFFFFFF, TIOCSTI, errno.EPERM,
     "TIOCSTI types into the terminal, as if the person had"),
    ("ioctl", 1, 0xFFFFFFFF, TIOCLINUX, errno.EPERM,
     "TIOCLINUX can read and paste the console's selection"),
    ("execveat", 4, AT_EMPTY_PATH, AT_EMPTY_PATH, errno.EACCES,
     "runs a file descriptor (fexecve), a program in no folder [commands] can judge"),
)
# clone and unshare with any namespace flag (each flag alone, so any one refuses).
_NAMESPACE_FLAGS = tuple(1 << bit for bit in range(32) if CLONE_NEW_ANY & (1 << bit))
for _flag in _NAMESPACE_FLAGS:
    REFUSED_WHEN += (
        ("clone", 0, _flag, _flag, errno.EPERM, "makes a new namespace"),
        ("unshare", 0, _flag, _flag, errno.EPERM, "makes a new namespace"),
    )

# The socket families a sandbox may open (socket and socketpair); every other family is
# refused. The namespaces isolate these four; others they do not (AF_VSOCK reaches the
# host and takes ports for the whole VM) or they are kernel attack surface a program has
# no use for: AF_PACKET, AF_KEY, AF_ALG (the kernel's crypto API: a long record of
# exploits, and userspace has its own crypto), AF_BLUETOOTH, AF_CAN, AF_TIPC, AF_RDS,
# AF_X25, AF_AX25, AF_XDP, … and any family a newer kernel adds.
AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16
SOCKET_FAMILIES: dict[int, str] = {
    AF_UNIX: "AF_UNIX (by path only to a socket made inside: the watch)",
    AF_INET: "AF_INET (the sandbox's own network namespace)",
    AF_INET6: "AF_INET6 (the sandbox's own network namespace)",
    AF_NETLINK: "AF_NETLINK (only the protocols below)",
}
# Of netlink, what programs use in their own network namespace: routes and addresses
# (glibc's getaddrinfo with AI_ADDRCONFIG, if_nameindex, `ip`), and the namespace's own
# sockets (`ss`). Not audit, uevents, netfilter, xfrm, generic netlink's families, ….
NETLINK_PROTOCOLS: dict[int, str] = {
    0: "NETLINK_ROUTE (addresses, links, routes: getaddrinfo, if_nameindex, ip)",
    4: "NETLINK_SOCK_DIAG (the namespace's own sockets: ss)",
}
# One comparison per value below these, one for all from them up (and for any value
# with bits above the int the kernel reads): Linux has 46 families (AF_MCTP is 45) and
# 32 netlink protocols (MAX_LINKS); a family added later is refused all the same.
FAMILY_LIMIT = 64
NETLINK_LIMIT = 32
# socket(AF_INET, SOCK_PACKET) is the obsolete way into AF_PACKET (net/socket.c turns it
# into PF_PACKET); the type's low four bits are the type (SOCK_TYPE_MASK).
SOCK_TYPE_MASK = 0xF
SOCK_PACKET = 10

VARIANTS = ("sockets", "programs")


def socket_refusals() -> tuple[tuple[tuple[tuple[int, str, int, int], ...], int], ...]:
    """Each rule refusing a socket: its conditions (argument, comparison, operand,
    mask) all true, and its errno; the same for socket and socketpair."""
    eq, ge, masked = "EQ", "GE", "MASKED_EQ"
    rules: list[tuple[tuple[tuple[int, str, int, int], ...], int]] = [
        (((0, eq, family, 0),), errno.EAFNOSUPPORT)
        for family in range(FAMILY_LIMIT) if family not in SOCKET_FAMILIES
    ]
    rules.append((((0, ge, FAMILY_LIMIT, 0),), errno.EAFNOSUPPORT))
    rules += [(((0, eq, AF_NETLINK, 0), (2, eq, protocol, 0)), errno.EPROTONOSUPPORT)
              for protocol in range(NETLINK_LIMIT) if protocol not in NETLINK_PROTOCOLS]
    rules.append((((0, eq, AF_NETLINK, 0), (2, ge, NETLINK_LIMIT, 0)), errno.EPROTONOSUPPORT))
    rules.append((((0, eq, AF_INET, 0), (1, masked, SOCK_PACKET, SOCK_TYPE_MASK)),
                  errno.EAFNOSUPPORT))
    return tuple(rules)


def filter_path(variant: str, folder: str | None = None, arch: str = ARCH) -> str:
    base = folder or os.path.join(os.path.dirname(os.path.abspath(__file__)), "filters")
    return os.path.join(base, f"{arch}-{variant}.bpf")


def compile_filter(variant: str, arch: str = "x86_64") -> bytes:
    """The BPF program of `variant` for `arch`, compiled by libseccomp (pyseccomp) on
    any machine: the filter checks the architecture first (any other, i386's int 0x80
    on x86-64 and arm's 32-bit calls on aarch64, is ENOSYS), and libseccomp leaves out
    a call the architecture does not have (iopl, ioperm on aarch64)."""
    import tempfile

    import pyseccomp as seccomp

    if variant not in VARIANTS:
        raise ValueError(f"unknown filter variant {variant!r}")
    if arch not in ARCHITECTURES:
        raise ValueError(f"no filter for the architecture {arch!r}")
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    rules.remove_arch(seccomp.Arch.NATIVE)
    rules.add_arch({"x86_64": seccomp.Arch.X86_64, "aarch64": seccomp.Arch.AARCH64}[arch])
    rules.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.ERRNO(errno.ENOSYS))
    rules.set_attr(seccomp.Attr.CTL_NNP, 0)  # the init sets no_new_privs itself
    for name, (code, _why) in REFUSED.items():
        rules.add_rule(seccomp.ERRNO(code), name)
    for name, index, mask, value, code, _why in REFUSED_WHEN:
        rules.add_rule(seccomp.ERRNO(code), name,
                       seccomp.Arg(index, seccomp.MASKED_EQ, mask, value))
    comparisons = {"EQ": seccomp.EQ, "GE": seccomp.GE, "MASKED_EQ": seccomp.MASKED_EQ}
    for call in ("socket", "socketpair"):
        for conditions, code in socket_refusals():
            rules.add_rule(seccomp.ERRNO(code), call, *(
                seccomp.Arg(index, comparisons[how], mask, operand) if how == "MASKED_EQ"
                else seccomp.Arg(index, comparisons[how], operand)
                for index, how, operand, mask in conditions))
    # Every variant: the calls that can reach a unix socket by its path. sendmsg and
    # sendmmsg carry their address inside a msghdr the filter cannot read: every one is
    # handed over (its cost: docs/decisions/0007-unix-sockets.md).
    rules.add_rule(seccomp.NOTIFY, "connect")
    rules.add_rule(seccomp.NOTIFY, "sendto", seccomp.Arg(4, seccomp.NE, 0))
    rules.add_rule(seccomp.NOTIFY, "sendmsg")
    rules.add_rule(seccomp.NOTIFY, "sendmmsg")
    if variant == "programs":
        # libseccomp drops a conditional ERRNO rule when the same call has an
        # unconditional NOTIFY one: each NOTIFY rule takes the opposite condition.
        rules.add_rule(seccomp.NOTIFY, "execve")
        rules.add_rule(seccomp.NOTIFY, "execveat",
                       seccomp.Arg(4, seccomp.MASKED_EQ, AT_EMPTY_PATH, 0))
        rules.add_rule(seccomp.ERRNO(errno.EINVAL), "memfd_create",
                       seccomp.Arg(1, seccomp.MASKED_EQ, MFD_HUGETLB, MFD_HUGETLB))
        rules.add_rule(seccomp.NOTIFY, "memfd_create",
                       seccomp.Arg(1, seccomp.MASKED_EQ, MFD_HUGETLB | MFD_NOEXEC_SEAL, 0))
    with tempfile.TemporaryFile() as handle:
        rules.export_bpf(handle)
        handle.seek(0)
        return handle.read()
