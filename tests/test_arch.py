"""Both architectures the filter is built for (issue 29 item 2), tested here without an
aarch64 machine: each compiled filter run in the classic-BPF evaluator of
tests/test_seccomp.py over the kernel's own system-call table for its architecture (the
headers Debian ships: asm/unistd_64.h for x86-64, asm-generic/unistd.h for aarch64),
every call's verdict compared with what the table (lnk_wrap.seccomp_filter) says, the
architecture check included; the numbers the code makes calls by (lnk_common.arch)
against the same headers; and a machine with no filter refused at start."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path

import pyseccomp
import pytest

from lnk_common import arch
from lnk_wrap.seccomp_filter import (
    ARCHITECTURES,
    REFUSED,
    VARIANTS,
    compile_filter,
    filter_path,
)
from tests.conftest import SANDBOX_TIMEOUT_SECONDS, WriteSpec
from tests.test_seccomp import ALLOW, ERRNO, NOTIFY, run_bpf

HEADERS = {"x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
           "aarch64": Path("/usr/include/asm-generic/unistd.h")}
AUDIT = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# Other architectures' audit values a call may come with: i386, arm (32-bit), and each
# of the two above on the other's filter.
FOREIGN = {"x86_64": (0x40000003, 0xC00000B7, 0x40000028),
           "aarch64": (0x40000028, 0xC000003E, 0x40000003)}
ROOT = Path(__file__).resolve().parent.parent


def kernel_table(machine: str) -> dict[str, int]:
    """name → number, as the kernel's uapi header for `machine` defines them (aarch64
    takes the generic table's 64-bit names: __NR3264_x is __NR_x there)."""
    text = HEADERS[machine].read_text()
    found: dict[str, int] = {}
    for prefix, name, number in re.findall(r"#define __NR(3264)?_(\w+)\s+(\d+)\b", text):
        del prefix
        found.setdefault(name, int(number))
    found.pop("syscalls", None)  # the count, not a call
    return found


def expected(name: str, variant: str) -> int:
    """The table's verdict for `name` with every argument 0."""
    if name in REFUSED:
        return ERRNO | REFUSED[name][0]
    if name in ("socket", "socketpair"):
        return ERRNO | errno.EAFNOSUPPORT  # family 0, AF_UNSPEC: not a listed family
    if name in ("connect", "sendmsg", "sendmmsg"):
        return NOTIFY
    if variant == "programs" and name in ("execve", "execveat", "memfd_create"):
        return NOTIFY
    return ALLOW


@pytest.mark.parametrize("machine", ARCHITECTURES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_each_filter_file_is_what_the_table_compiles_to(machine: str, variant: str) -> None:
    assert Path(filter_path(variant, arch=machine)).read_bytes() == compile_filter(variant,
                                                                                   machine)


@pytest.mark.parametrize("machine", ARCHITECTURES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_call_of_the_kernels_table_gets_the_tables_verdict(
    machine: str, variant: str,
) -> None:
    program = Path(filter_path(variant, arch=machine)).read_bytes()
    table = kernel_table(machine)
    assert len(table) > 300, machine  # the whole table, not a part of it
    wrong = {}
    for name, number in table.items():
        found = run_bpf(program, arch=AUDIT[machine], number=number)
        if found != expected(name, variant):
            wrong[name] = (number, hex(found), hex(expected(name, variant)))
    assert wrong == {}
    # A refused call not in the kernel's table is one the architecture does not have
    # (aarch64 has no iopl, no uselib, no _sysctl …): libseccomp knows no number for it.
    for name in set(REFUSED) - set(table):
        assert machine != "x86_64", name
        assert pyseccomp.resolve_syscall(pyseccomp.Arch.AARCH64, name) < 0, name


@pytest.mark.parametrize("machine", ARCHITECTURES)
def test_a_call_of_another_architecture_is_refused(machine: str) -> None:
    for variant in VARIANTS:
        program = Path(filter_path(variant, arch=machine)).read_bytes()
        for audit in FOREIGN[machine]:
            for number in (0, 1, 59, 203, 221, 317):
                assert run_bpf(program, arch=audit, number=number) == ERRNO | errno.ENOSYS


def test_aarch64s_own_numbers_reach_the_watch_and_the_refusals() -> None:
    sockets = Path(filter_path("sockets", arch="aarch64")).read_bytes()
    programs = Path(filter_path("programs", arch="aarch64")).read_bytes()
    audit = AUDIT["aarch64"]
    assert run_bpf(sockets, arch=audit, number=203, args=(3, 1, 16)) == NOTIFY  # connect
    assert run_bpf(sockets, arch=audit, number=206, args=(3, 1, 5, 0, 0x1000)) == NOTIFY
    assert run_bpf(sockets, arch=audit, number=206, args=(3, 1, 5, 0, 0)) == ALLOW
    assert run_bpf(sockets, arch=audit, number=198, args=(40, 1, 0)) == \
        ERRNO | errno.EAFNOSUPPORT  # socket(AF_VSOCK)
    assert run_bpf(sockets, arch=audit, number=198, args=(1, 1, 0)) == ALLOW  # AF_UNIX
    assert run_bpf(sockets, arch=audit, number=281, args=(3, 0, 0, 0, 0x1000)) == \
        ERRNO | errno.EACCES  # execveat(AT_EMPTY_PATH)
    assert run_bpf(programs, arch=audit, number=221) == NOTIFY  # execve
    assert run_bpf(sockets, arch=audit, number=221) == ALLOW
    assert run_bpf(sockets, arch=audit, number=29, args=(1, 0x5412)) == \
        ERRNO | errno.EPERM  # ioctl(TIOCSTI)
    assert run_bpf(sockets, arch=audit, number=220, args=(0x10000000,)) == \
        ERRNO | errno.EPERM  # clone(CLONE_NEWUSER)


@pytest.mark.parametrize("machine", ARCHITECTURES)
def test_the_numbers_the_code_calls_by_are_the_kernels(machine: str) -> None:
    table = kernel_table(machine)
    assert {name: table[name] for name in arch.NUMBERS[machine]} == arch.NUMBERS[machine]


def test_a_machine_with_no_filter_starts_no_sandbox(
    write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """uname says riscv64 (set in the launcher's own process): exit 125, one line, and
    the program never runs."""
    marker = tmp_path / "ran"
    spec = write_spec("")
    code = ("import sys; import lnk_common.arch as a; a.MACHINE = 'riscv64'; "
            "from lnk_wrap.cli import main; sys.argv[0] = 'lnk-sandbox'; main()")
    result = subprocess.run(
        [sys.executable, "-I", "-c", code, "run", "--spec", str(spec), "--", "/bin/sh", "-c",
         f"touch {marker}"], env={**sandbox_env, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert result.returncode == 125, result
    assert result.stderr == (
        "lnk-sandbox: this machine is riscv64, and lnk-sandbox's seccomp filter is built "
        "for x86_64, aarch64 only: no sandbox starts unfiltered\n")
    assert not marker.exists()
    assert arch.number("connect", "riscv64") == -1 and not arch.supported("riscv64")
    assert os.uname().machine in ARCHITECTURES  # this machine's own has a filter
