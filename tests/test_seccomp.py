"""The seccomp filter: its table (golden), its compiled BPF (golden bytes, and run against
a table of (call, arguments) → action by a classic-BPF evaluator written here)."""

from __future__ import annotations

import errno
import json
import struct
from pathlib import Path

import pyseccomp
import pytest

from lnk_wrap.seccomp_filter import (
    AT_EMPTY_PATH,
    MFD_HUGETLB,
    MFD_NOEXEC_SEAL,
    NETLINK_PROTOCOLS,
    REFUSED,
    REFUSED_WHEN,
    SOCKET_FAMILIES,
    TIOCLINUX,
    TIOCSTI,
    VARIANTS,
    compile_filter,
    filter_path,
    socket_refusals,
)

GOLDEN = Path(__file__).parent / "golden"

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
ALLOW = 0x7FFF0000
NOTIFY = 0x7FC00000
ERRNO = 0x00050000


def nr(name: str) -> int:
    number: int = pyseccomp.resolve_syscall(pyseccomp.Arch.X86_64, name)
    return number


# -- a classic BPF evaluator (the instructions libseccomp emits, and a few more) -----------


def run_bpf(program: bytes, *, arch: int, number: int, args: tuple[int, ...] = ()) -> int:
    """What the filter returns for a call: seccomp_data is nr, arch, ip, args[6]."""
    full = (*args, *(0,) * (6 - len(args)))
    data = struct.pack("<iIQ6Q", number, arch, 0, *full)
    instructions = [struct.unpack_from("<HBBI", program, offset)
                    for offset in range(0, len(program), 8)]
    accumulator = index_register = 0
    memory = [0] * 16
    pc = 0
    while True:
        code, jump_true, jump_false, k = instructions[pc]
        kind = code & 0x07
        if kind == 0x00:  # LD
            mode = code & 0xE0
            if mode == 0x20:  # ABS, word
                accumulator = struct.unpack_from("<I", data, k)[0]
            elif mode == 0x60:  # MEM
                accumulator = memory[k]
            elif mode == 0x00:  # IMM
                accumulator = k
            else:
                raise AssertionError(f"LD mode {mode:#x}")
        elif kind == 0x01:  # LDX
            index_register = memory[k] if code & 0xE0 == 0x60 else k
        elif kind == 0x02:  # ST
            memory[k] = accumulator
        elif kind == 0x03:  # STX
            memory[k] = index_register
        elif kind == 0x04:  # ALU
            operand = index_register if code & 0x08 else k
            operation = code & 0xF0
            accumulator = {
                0x00: lambda a, b: a + b, 0x10: lambda a, b: a - b,
                0x50: lambda a, b: a & b, 0x40: lambda a, b: a | b,
                0x60: lambda a, b: a << b, 0x70: lambda a, b: a >> b,
            }[operation](accumulator, operand) & 0xFFFFFFFF
        elif kind == 0x05:  # JMP
            operand = index_register if code & 0x08 else k
            operation = code & 0xF0
            if operation == 0x00:  # JA
                pc += 1 + k
                continue
            taken = {
                0x10: accumulator == operand, 0x20: accumulator > operand,
                0x30: accumulator >= operand, 0x40: bool(accumulator & operand),
            }[operation]
            pc += 1 + (jump_true if taken else jump_false)
            continue
        elif kind == 0x06:  # RET
            return accumulator if code & 0x18 == 0x10 else k
        elif kind == 0x07:  # MISC
            if code & 0xF8 == 0x00:
                index_register = accumulator
            else:
                accumulator = index_register
        pc += 1


def program(variant: str) -> bytes:
    return Path(filter_path(variant, arch="x86_64")).read_bytes()


# -- the table -------------------------------------------------------------------------------


def test_the_table_is_golden() -> None:
    """What is refused, how and why, as reviewed; a change here is a change of policy."""
    table = {
        "refused": {name: [errno.errorcode[code], why] for name, (code, why) in REFUSED.items()},
        "refused_when": [[name, index, hex(mask), hex(value), errno.errorcode[code], why]
                         for name, index, mask, value, code, why in REFUSED_WHEN],
        "socket_families": {str(family): why for family, why in SOCKET_FAMILIES.items()},
        "netlink_protocols": {str(protocol): why for protocol, why in NETLINK_PROTOCOLS.items()},
        "socket_refusals": [[[list(condition) for condition in conditions],
                             errno.errorcode[code]] for conditions, code in socket_refusals()],
    }
    golden = json.loads((GOLDEN / "seccomp_table.json").read_text())
    assert table == golden


def test_every_refusal_names_a_call_the_kernel_knows_and_says_why() -> None:
    for name, (code, why) in REFUSED.items():
        assert nr(name) >= 0, name
        assert code in (errno.EPERM, errno.ENOSYS), name
        assert len(why) > 8, name


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_compiled_programs_are_what_the_table_compiles_to(variant: str) -> None:
    """lnk_wrap/filters/*.bpf, loaded by the init, match the table (bin/gen-seccomp)."""
    assert compile_filter(variant) == program(variant)


# -- the compiled program, call by call ------------------------------------------------------


def _expect(variant: str, number: int, args: tuple[int, ...], expected: int,
            arch: int = AUDIT_ARCH_X86_64) -> None:
    found = run_bpf(program(variant), arch=arch, number=number, args=args)
    assert found == expected, (variant, number, args, hex(found), hex(expected))


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_refused_call_gets_its_errno_in_both_variants(variant: str) -> None:
    for name, (code, _why) in REFUSED.items():
        _expect(variant, nr(name), (), ERRNO | code)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("getpid", (), ALLOW),
        ("read", (0, 0, 0), ALLOW),
        ("openat", (0, 0, 0), ALLOW),
        ("ioctl", (1, TIOCSTI), ERRNO | errno.EPERM),
        ("ioctl", (1, 0xFFFFFFFF00000000 | TIOCSTI), ERRNO | errno.EPERM),
        ("ioctl", (1, TIOCLINUX), ERRNO | errno.EPERM),
        ("ioctl", (1, 0x5401), ALLOW),  # TCGETS: a terminal must work
        ("clone", (0x01200011,), ALLOW),  # fork as glibc does it
        ("clone", (0x003D0F00,), ALLOW),  # a thread
        ("clone", (0x10000000 | 0x11,), ERRNO | errno.EPERM),  # CLONE_NEWUSER
        ("clone", (0x20000000,), ERRNO | errno.EPERM),  # CLONE_NEWPID
        ("clone", (0x00000080,), ERRNO | errno.EPERM),  # CLONE_NEWTIME
        ("unshare", (0x00000400,), ALLOW),  # CLONE_FILES
        ("unshare", (0x00020000,), ERRNO | errno.EPERM),  # CLONE_NEWNS
        ("unshare", (0x40000000,), ERRNO | errno.EPERM),  # CLONE_NEWNET
        ("execveat", (3, 0, 0, 0, AT_EMPTY_PATH), ERRNO | errno.EACCES),
        ("execveat", (3, 0, 0, 0, AT_EMPTY_PATH | 0x100), ERRNO | errno.EACCES),
        ("memfd_create", (0, MFD_NOEXEC_SEAL), ALLOW),
        ("landlock_restrict_self", (3, 0), ALLOW),
        ("seccomp", (1, 0, 0), ALLOW),
    ],
)
def test_calls_with_arguments(variant: str, name: str, args: tuple[int, ...],
                              expected: int) -> None:
    _expect(variant, nr(name), args, expected)


@pytest.mark.parametrize(
    ("name", "args", "sockets", "programs"),
    [
        ("execve", (0, 0, 0), ALLOW, NOTIFY),
        ("execveat", (3, 0, 0, 0, 0), ALLOW, NOTIFY),
        ("execveat", (3, 0, 0, 0, 0x100), ALLOW, NOTIFY),  # AT_SYMLINK_NOFOLLOW alone
        ("memfd_create", (0, 0), ALLOW, NOTIFY),
        ("memfd_create", (0, 0x1), ALLOW, NOTIFY),  # MFD_CLOEXEC
        ("memfd_create", (0, 0x10), ALLOW, NOTIFY),  # MFD_EXEC: made sealed all the same
        ("memfd_create", (0, MFD_NOEXEC_SEAL | 0x1), ALLOW, ALLOW),
        ("memfd_create", (0, MFD_HUGETLB), ALLOW, ERRNO | errno.EINVAL),
        ("memfd_create", (0, MFD_HUGETLB | MFD_NOEXEC_SEAL), ALLOW, ERRNO | errno.EINVAL),
    ],
)
def test_the_programs_variant_hands_exec_and_memory_files_to_the_watch(
    name: str, args: tuple[int, ...], sockets: int, programs: int
) -> None:
    _expect("sockets", nr(name), args, sockets)
    _expect("programs", nr(name), args, programs)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("connect", (3, 0x1000, 16), NOTIFY),  # every family: the filter cannot see it
        ("connect", (3, 0, 0), NOTIFY),
        ("sendto", (3, 0x1000, 5, 0, 0x2000, 110), NOTIFY),  # with an address
        ("sendto", (3, 0x1000, 5, 0, 0, 0), ALLOW),  # a connected socket's send
        ("sendto", (3, 0x1000, 5, 0, 1 << 32, 0), NOTIFY),  # the pointer's high half
        ("sendmsg", (3, 0x1000, 0), NOTIFY),  # its address is in memory: the watch reads it
        ("sendmmsg", (3, 0x1000, 2, 0), NOTIFY),
        ("bind", (3, 0x1000, 110), ALLOW),
        ("socketpair", (1, 1, 0, 0x1000), ALLOW),
    ],
)
def test_every_variant_hands_connect_and_addressed_sendto_to_the_watch(
    variant: str, name: str, args: tuple[int, ...], expected: int
) -> None:
    _expect(variant, nr(name), args, expected)


EAFNOSUPPORT = ERRNO | errno.EAFNOSUPPORT
EPROTONOSUPPORT = ERRNO | errno.EPROTONOSUPPORT


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("call", ["socket", "socketpair"])
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((1, 1, 0), ALLOW),  # AF_UNIX
        ((1, 0x80801, 0), ALLOW),  # SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC
        ((2, 1, 0), ALLOW),  # AF_INET
        ((2, 3, 1), ALLOW),  # AF_INET raw ICMP: the namespace decides (no capability)
        ((10, 2, 0), ALLOW),  # AF_INET6
        ((16, 3, 0), ALLOW),  # NETLINK_ROUTE
        ((16, 0x80003, 4), ALLOW),  # NETLINK_SOCK_DIAG, close-on-exec
        ((40, 1, 0), EAFNOSUPPORT),  # AF_VSOCK
        ((17, 3, 0x300), EAFNOSUPPORT),  # AF_PACKET
        ((2, 10, 0x300), EAFNOSUPPORT),  # AF_INET SOCK_PACKET: AF_PACKET by another name
        ((2, 0x8000A, 0x300), EAFNOSUPPORT),  # … with SOCK_CLOEXEC
        ((38, 5, 0), EAFNOSUPPORT),  # AF_ALG
        ((15, 3, 2), EAFNOSUPPORT),  # AF_KEY
        ((0, 1, 0), EAFNOSUPPORT),  # AF_UNSPEC
        ((45, 2, 0), EAFNOSUPPORT),  # AF_MCTP, the last of Linux 6
        ((63, 1, 0), EAFNOSUPPORT),
        ((64, 1, 0), EAFNOSUPPORT),  # families a later kernel adds
        ((0xFFFFFFFF, 1, 0), EAFNOSUPPORT),
        ((0xFFFFFFFFFFFFFFFF, 1, 0), EAFNOSUPPORT),  # -1 as glibc passes it
        ((1 << 32 | 1, 1, 0), EAFNOSUPPORT),  # the kernel reads AF_UNIX: refused all the same
        ((1 << 32 | 40, 1, 0), EAFNOSUPPORT),
        ((16, 3, 9), EPROTONOSUPPORT),  # NETLINK_AUDIT
        ((16, 2, 15), EPROTONOSUPPORT),  # NETLINK_KOBJECT_UEVENT
        ((16, 3, 31), EPROTONOSUPPORT),
        ((16, 3, 32), EPROTONOSUPPORT),
        ((16, 3, 1 << 32), EPROTONOSUPPORT),  # the kernel reads NETLINK_ROUTE: refused
        ((16, 3, 0xFFFFFFFFFFFFFFFF), EPROTONOSUPPORT),
    ],
)
def test_only_the_listed_socket_families_open(
    variant: str, call: str, args: tuple[int, ...], expected: int
) -> None:
    _expect(variant, nr(call), (*args, 0x1000), expected)


def test_every_family_and_netlink_protocol_below_the_limits_is_allowed_or_refused() -> None:
    for family in range(80):
        expected = ALLOW if family in SOCKET_FAMILIES else EAFNOSUPPORT
        _expect("sockets", nr("socket"), (family, 1, 0), expected)
    for protocol in range(40):
        expected = ALLOW if protocol in NETLINK_PROTOCOLS else EPROTONOSUPPORT
        _expect("sockets", nr("socket"), (16, 3, protocol), expected)


@pytest.mark.parametrize("variant", VARIANTS)
def test_foreign_architectures_and_x32_numbers_are_refused(variant: str) -> None:
    for number in (11, 59, 0, 1):  # i386 execve, anything
        _expect(variant, number, (), ERRNO | errno.ENOSYS, arch=AUDIT_ARCH_I386)
    for arch in (0xC00000B7, 0x40000028):  # aarch64, arm
        _expect(variant, 59, (), ERRNO | errno.ENOSYS, arch=arch)
    _expect(variant, 0x40000000 | 59, (), ERRNO | errno.ENOSYS)  # x32 execve
    _expect(variant, 0x40000000 | 39, (), ERRNO | errno.ENOSYS)
