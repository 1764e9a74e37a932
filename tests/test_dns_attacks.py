"""The sandbox's DNS attacked for the memory it makes its proxy hold (issue 19, item 3),
and for lookups a search domain would turn into another name (item 6), from inside real
sandboxes (real bwrap, the proxy's real sockets, DNS servers of the tests' own answering
as the test net's does: tests/testservers.own_dns_server).

Item 6: the proxy looked listed names up as they were written, so glibc tried a name that
does not exist again under resolv.conf's search domain, reaching a host the policy never
named. The proxy is run in a mount and network namespace of the test's (`unshare -rmn`)
whose /etc/resolv.conf names a DNS server and a search domain whose zone holds
`missing.lnkt.<search domain>`; a sandbox that lists `missing.lnkt` must be told it does
not exist, by the system's resolver and through LNK_SANDBOX_DNS alike, and the DNS server
must never be asked for the name under the search domain (SRV and TXT asked outside too).
That DNS server is the test's own on the namespace's 127.0.0.1:53, so the query log read
is this test's alone.

Item 3: a reply kept under the whole query let 4,000 queries of 60 KB (padded with an
EDNS option or extra records) take the proxy from 23 MB to 260 MB. Now a query longer than
MAX_QUERY_BYTES gets FORMERR unread, a kept reply is keyed by what it depends on, the kept
replies are bounded in bytes, and a TCP connection holds at most one query: the flood is
sent over UDP and TCP and the proxy's resident memory (VmRSS) read before and after.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lnk_dns.message import MAX_QUERY_BYTES
from lnk_proxy.dns_server import MAX_TCP_CONNECTIONS
from tests.conftest import (
    LNK_SANDBOX,
    ROOT,
    SANDBOX_TIMEOUT_SECONDS,
    VENV_PYTHON,
    WriteSpec,
    end_run,
)
from tests.test_endpoints import (
    CONNECT,
    PYTHON,
    logged,
    net,  # noqa: F401  (a fixture)
    spec,
    wire_log,
)
from tests.testservers import (
    INITIAL_ZONE,
    PG_HOST_ADDRESS,
    dns_queries,
    set_zone,
    write_initial_zone,
)

# What the proxy may grow by under the floods below: "a few MiB above idle", with a margin
# for the allocator's own slack (before the fix: some 240 MiB).
GROWTH_BOUND_KIB = 8 * 1024

FLOOD = r"""
import os, socket, struct, sys

def question(name):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return labels + b"\0" + struct.pack("!HH", 1, 1)

def opt(options=b""):
    return b"\0" + struct.pack("!HHIH", 41, 1232, 0, len(options)) + options

def query(qid, name, extra=b"", arcount=0):
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, arcount) + question(name) + extra

def padded(qid, pad):
    # Over the limit either way: one EDNS option of `pad` random bytes, or as many TXT
    # records of random text in the additional section.
    if qid % 2:
        return query(qid, "db.lnkt", opt(struct.pack("!HH", 65001, pad) + os.urandom(pad)), 1)
    records, count = b"", 0
    while len(records) < pad:
        text = os.urandom(250)
        records += b"\0" + struct.pack("!HHIH", 16, 1, 0, 251) + bytes([250]) + text
        count += 1
    return query(qid, "db.lnkt", records, count)

def rcode_udp(data):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    try:
        s.sendto(data, ("127.0.0.1", 53))
        reply = s.recv(4096)
        return reply[3] & 15, reply
    except OSError as e:
        return type(e).__name__, b""
    finally:
        s.close()

def normal():
    # A normal query, with a cookie of its own each time (an option, never part of the key).
    rcode, reply = rcode_udp(query(7, "db.lnkt", opt(struct.pack("!HH", 10, 8) + os.urandom(8)), 1))
    at = 12 + len(question("db.lnkt")) + 12  # the answer's address, after its name pointer
    return f"{rcode} {socket.inet_ntoa(reply[at:at + 4])}" if rcode == 0 else f"{rcode} -"

print("first", normal(), flush=True)
input()
count, pad = int(sys.argv[1]), 60000
udp = {}
for qid in range(count):
    rcode, _ = rcode_udp(padded(qid, pad))
    udp[rcode] = udp.get(rcode, 0) + 1
tcp = {}
for qid in range(count // 10):
    s = socket.create_connection(("127.0.0.1", 53), timeout=5)
    data = padded(qid, pad)
    try:
        s.sendall(struct.pack("!H", len(data)) + data)
    except OSError:
        pass
    try:
        head = s.recv(2)
        reply = s.recv(struct.unpack("!H", head)[0]) if len(head) == 2 else b""
        rcode = reply[3] & 15 if len(reply) >= 4 else "closed"
    except OSError as e:
        rcode = type(e).__name__
    tcp[rcode] = tcp.get(rcode, 0) + 1
    s.close()
# Many connections at once, each holding a frame that is never finished.
held, open_ = [], 0
for qid in range(200):
    s = socket.create_connection(("127.0.0.1", 53), timeout=5)
    try:
        s.sendall(struct.pack("!H", 500) + padded(qid, 60000)[:400])
        open_ += 1
    except OSError:
        pass
    held.append(s)
print("udp", sorted(udp.items()), flush=True)
print("tcp", sorted(tcp.items()), flush=True)
print("held", open_, flush=True)
input()
for s in held:
    s.close()
print("after", normal(), flush=True)
"""


def proxy_memory_kib(lnk_home: str, field: str) -> int:
    """A field of /proc/PID/status (VmRSS: resident now; VmHWM: the most it ever was) of
    the proxy serving this test's settings folder (its --settings names it)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            words = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if (b"proxy" in words and any(word.endswith(b"_start.py") for word in words)
                and any(word.startswith(lnk_home.encode()) for word in words)):
            for line in status.splitlines():
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    raise AssertionError("no proxy of this test's settings folder is running")


def test_N11_padded_query_flood_over_udp_and_tcp_keeps_the_proxy_memory_bounded(
    write_spec: WriteSpec, tmp_path: Path, net: tuple[Path, dict[str, str]],  # noqa: F811
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    sent = 4000
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(path), "--", PYTHON, "-u",
                            str(script), str(sent)], env=env, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert run.stdin is not None and run.stdout is not None
        first = run.stdout.readline().split()
        assert first == ["first", "0", "127.53.0.1"], (first, run.stderr)
        idle = proxy_memory_kib(env["LNK_HOME"], "VmRSS")
        run.stdin.write("\n")
        run.stdin.flush()
        said = {}
        for _ in range(3):
            word, _, rest = run.stdout.readline().strip().partition(" ")
            said[word] = rest
        # The peak, not only what is held at the end (the 200 connections still open):
        # before the fix, the kept replies were dropped all at once past 4,096 of them.
        flooded = proxy_memory_kib(env["LNK_HOME"], "VmHWM")
        run.stdin.write("\n")
        run.stdin.flush()
        after = run.stdout.readline().split()
        run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    assert flooded - idle < GROWTH_BOUND_KIB, (idle, flooded)
    # Every padded query got FORMERR (1), over UDP and over TCP, and normal queries are
    # answered after it as before.
    assert said["udp"] == f"[(1, {sent})]", said
    assert said["tcp"] == f"[(1, {sent // 10})]", said
    assert after == ["after", "0", "127.53.0.1"]
    # Refused and said why (folded: the first lines whole, the rest counted).
    lines = wire_log(env)
    reasons = [fields[3] for fields in lines if fields[1] == "refused" and fields[2] in "-*"]
    assert any(f"(a stub resolver's is at most {MAX_QUERY_BYTES})" in reason
               and "a query of 6" in reason for reason in reasons), reasons[:3]
    assert any(f"{MAX_TCP_CONNECTIONS} TCP connections" in reason for reason in reasons)
    assert any("more=" in reason for reason in reasons)
    assert "kind=dns type=A answer=127.53.0.1" in logged(env, "allowed", "db.lnkt")


# The search domain of the proxy's resolv.conf, and the internal host under it that a
# search list would reach for `missing.lnkt` (the test host's address: from the namespace
# below, a try to reach it fails "unreachable", a refusal reason other than the one
# asserted, and its lookup is on the query log).
SEARCH_DOMAIN = "corp.lnkt"
INTERNAL_NAME = f"missing.lnkt.{SEARCH_DOMAIN}"

# Run by `unshare -rmn`: a network and mount namespace of the test's own, where the DNS
# server the proxy's resolv.conf names is the test's own on 127.0.0.1:53 (resolv.conf
# names no port, and port 53 is only root's outside; the test net's server has one zone
# and one query log for every test running at once). Then `lnk-sandbox run ARGV...`.
_IN_A_NETWORK_OF_ITS_OWN = """
import subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.testservers import own_dns_server
state, resolv, *run = sys.argv[2:]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
subprocess.run(["mount", "--bind", resolv, "/etc/resolv.conf"], check=True)
with own_dns_server(Path(state), 53):
    sys.exit(subprocess.run(run).returncode)
"""


@pytest.mark.parametrize("lookups", ["system resolver", "LNK_SANDBOX_DNS"])
def test_N3_a_listed_name_that_does_not_exist_is_never_tried_under_a_search_domain(
    write_spec: WriteSpec, tmp_path: Path, sandbox_env: dict[str, str], lookups: str,
) -> None:
    dns = tmp_path / "dns-server"
    write_initial_zone(dns)
    set_zone(dns, {**INITIAL_ZONE,
                   INTERNAL_NAME: {"A": [PG_HOST_ADDRESS], "TXT": ["internal-only"]},
                   f"_echo._tcp.{INTERNAL_NAME}": {"SRV": [[0, 0, 7, INTERNAL_NAME]]}})
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver 127.0.0.1\nsearch {SEARCH_DOMAIN}\n")
    env = {**sandbox_env, "LNK_SANDBOX_DNS": "127.0.0.1:53"}
    if lookups == "system resolver":
        env = {name: value for name, value in env.items() if name != "LNK_SANDBOX_DNS"}
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["missing.lnkt:7"]\n')
    probe = tmp_path / "connect.py"
    probe.write_text(CONNECT)
    inside = (f"{PYTHON} {probe} missing.lnkt 7;"
              " dig TXT missing.lnkt | grep -o 'status: [A-Z]*';"
              " dig SRV _echo._tcp.missing.lnkt | grep -o 'status: [A-Z]*';"
              " dig +short TXT missing.lnkt")
    # The proxy (started by the launcher) sees the test's resolv.conf at /etc/resolv.conf.
    result = subprocess.run(
        ["unshare", "-rmn", VENV_PYTHON, "-c", _IN_A_NETWORK_OF_ITS_OWN, str(ROOT),
         str(dns), str(resolv), LNK_SANDBOX, "run", "--spec", str(path), "--", "sh", "-c",
         inside], env=env, capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS)
    lines = result.stdout.splitlines()
    # Never a connection to the internal host: closed at once, said why.
    assert lines[:3] == ["closed", "status: NXDOMAIN", "status: NXDOMAIN"], result
    assert "internal-only" not in result.stdout
    refusals = logged(env, "refused", "missing.lnkt:7")
    assert refusals == ["reason=missing.lnkt does not exist or has no address"
                        " (looked up as an absolute name: no search domain)"], wire_log(env)
    assert not logged(env, "allowed", "missing.lnkt:7")
    asked = dns_queries(dns)
    assert ("missing.lnkt", "TXT") in asked and ("_echo._tcp.missing.lnkt", "SRV") in asked
    assert not [query for query in asked if query[0].endswith(SEARCH_DOMAIN)], asked
