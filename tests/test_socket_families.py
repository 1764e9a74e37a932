"""The socket families a sandbox may open (lnk_wrap.seccomp_filter's SOCKET_FAMILIES),
attacked from inside real sandboxes on the real kernel: vsock (not isolated by the
network namespace: it reaches the host and takes ports for the whole VM), packet, the
kernel's crypto API, PF_KEY, netlink beyond route and sock_diag, families no kernel has
yet, and the obsolete AF_INET SOCK_PACKET; and what must keep working (unix, inet,
inet6, route netlink: getaddrinfo, if_nameindex, `ip`)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, RunSandbox, WriteSpec, toml_list

PYTHON = os.path.realpath("/usr/bin/python3")
IP = os.path.realpath("/usr/sbin/ip")

# Each call made with the raw system call (glibc's wrappers pass the int as is), so the
# high half of the register is the program's choice too.
OPEN = """
import ctypes, json, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pair = (ctypes.c_int * 2)()
found = {}
for name, (number, family, kind, protocol) in json.loads(sys.argv[1]).items():
    ctypes.set_errno(0)
    result = libc.syscall(number, ctypes.c_long(family), ctypes.c_long(kind),
                          ctypes.c_long(protocol), pair)
    found[name] = "ok" if result >= 0 else ctypes.get_errno()
print(json.dumps(found))
"""

SOCKET, SOCKETPAIR = 41, 53
STREAM, DGRAM, RAW, SEQPACKET, PACKET = 1, 2, 3, 5, 10
CLOEXEC = 0o2000000
REFUSED = {
    "vsock stream": (SOCKET, 40, STREAM, 0),
    "vsock dgram": (SOCKET, 40, DGRAM, 0),
    "vsock pair": (SOCKETPAIR, 40, STREAM, 0),
    "packet raw": (SOCKET, 17, RAW, 0x0300),
    "packet dgram": (SOCKET, 17, DGRAM, 0x0300),
    "inet SOCK_PACKET": (SOCKET, 2, PACKET, 0x0300),
    "inet SOCK_PACKET cloexec": (SOCKET, 2, PACKET | CLOEXEC, 0x0300),
    "alg": (SOCKET, 38, SEQPACKET, 0),
    "key": (SOCKET, 15, RAW, 2),
    "tipc pair": (SOCKETPAIR, 30, SEQPACKET, 0),
    "bluetooth": (SOCKET, 31, RAW, 0),
    "can": (SOCKET, 29, RAW, 1),
    "rds": (SOCKET, 21, SEQPACKET, 0),
    "x25": (SOCKET, 9, SEQPACKET, 0),
    "ax25": (SOCKET, 3, SEQPACKET, 0),
    "xdp": (SOCKET, 44, RAW, 0),
    "a family no kernel has yet": (SOCKET, 46, STREAM, 0),
    "vsock with the high half set": (SOCKET, (1 << 32) | 40, STREAM, 0),
    "negative family": (SOCKET, -1, STREAM, 0),
    "netlink audit": (SOCKET, 16, RAW, 9),
    "netlink uevent": (SOCKET, 16, DGRAM, 15),
    "netlink netfilter": (SOCKET, 16, RAW, 12),
    "netlink generic": (SOCKET, 16, RAW, 16),
    "netlink xfrm": (SOCKET, 16, RAW, 6),
    "netlink protocol 40": (SOCKET, 16, RAW, 40),
    "netlink route, high half": (SOCKET, 16, RAW, 1 << 32),
}
PROTOCOL_REFUSED = {name for name in REFUSED if name.startswith("netlink")}
WORKING = {
    "unix stream": (SOCKET, 1, STREAM, 0),
    "unix dgram": (SOCKET, 1, DGRAM, 0),
    "unix pair": (SOCKETPAIR, 1, STREAM | CLOEXEC, 0),
    "inet": (SOCKET, 2, STREAM, 0),
    "inet udp": (SOCKET, 2, DGRAM, 0),
    "inet6": (SOCKET, 10, STREAM, 0),
    "netlink route": (SOCKET, 16, RAW | CLOEXEC, 0),
    "netlink sock_diag": (SOCKET, 16, DGRAM, 4),
}


@pytest.fixture(params=["sockets", "programs"])
def spec(request: pytest.FixtureRequest, write_spec: WriteSpec) -> Path:
    """Both filters: a spec without [commands], and one listing the programs."""
    if request.param == "sockets":
        return write_spec("[files]\nread = []\n")
    return write_spec(f"[commands]\nrun = {toml_list(PYTHON, IP)}\n")


def test_families_a_sandbox_has_no_use_for_get_the_errno_of_a_kernel_without_them(
    spec: Path, run_sandbox: RunSandbox,
) -> None:
    """vsock first: made outside the network namespace's reach, here it would connect to
    the host (CID 2) or bind a port of the whole VM; packet and the obsolete inet
    SOCK_PACKET, the crypto API, PF_KEY, audit and uevent netlink: kernel surface."""
    result = run_sandbox(spec, PYTHON, "-I", "-c", OPEN, json.dumps(REFUSED))
    assert result.returncode == 0, result
    found = json.loads(result.stdout)
    expected = {name: errno.EPROTONOSUPPORT if name in PROTOCOL_REFUSED else errno.EAFNOSUPPORT
                for name in REFUSED}
    assert found == expected


WORKS = """
import json, socket, sys
opened = json.loads(sys.argv[1])
names = [name for _index, name in socket.if_nameindex()]
found = socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)
server = socket.socket(socket.AF_INET6)
server.bind(("::1", 0))
server.listen(1)
socket.create_connection(server.getsockname()[:2]).close()
print("lo" in names, bool(found), "connected")
"""


def test_unix_inet_and_route_netlink_keep_working(
    spec: Path, run_sandbox: RunSandbox,
) -> None:
    result = run_sandbox(spec, PYTHON, "-I", "-c", OPEN, json.dumps(WORKING))
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == dict.fromkeys(WORKING, "ok")
    result = run_sandbox(spec, PYTHON, "-I", "-c", WORKS, "{}")
    assert result.stdout == "True True connected\n", result
    result = run_sandbox(spec, IP, "-o", "addr", "show", "dev", "lo")
    assert result.returncode == 0, result
    assert "inet 127.0.0.1/8" in result.stdout, result


def test_check_says_which_families_a_sandbox_may_open(sandbox_env: dict[str, str]) -> None:
    done = subprocess.run([LNK_SANDBOX, "check"], env=sandbox_env, capture_output=True,
                          text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
    line = next(line for line in done.stdout.splitlines() if "socket families" in line)
    for named in ("AF_UNIX", "AF_INET", "AF_INET6", "NETLINK_ROUTE", "NETLINK_SOCK_DIAG",
                  "AF_VSOCK", "EAFNOSUPPORT"):
        assert named in line, line
