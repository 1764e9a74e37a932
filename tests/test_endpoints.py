"""[tcp] endpoints with the sandbox's own DNS, [lan] hosts and [localhost] ports, from
inside real sandboxes, with real clients (psql, redis-cli, dig, getent, Python's
resolver) against real servers: PostgreSQL on a test host in a network namespace
(tests/testnet.py), a counting DNS server of each test's own on loopback answering the
test hosts' names (tests/testservers.own_dns_server: the test net's answering code, with
a zone and a query log no other test shares), Redis on this machine's loopback, an echo
server on a machine of this machine's own network (the test router).

N3 through endpoints, N6 and N7 attacked: every refused DNS query is checked to have made
no query outside (counted at the DNS server); rebinding, `.local` SRV, one-label TXT, a
port not listed, UDP past port 53, loopback addresses not given out, `ports = ["*"]`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    end_run,
    toml_list,
)
from tests.testservers import (
    INITIAL_ZONE,
    LAN_ADDRESS,
    LAN_ADDRESS6,
    LAN_ECHO_PORT,
    dns_queries,
    own_dns_server,
    set_zone,
)

PYTHON = "/usr/bin/python3"
VENV_PYTHON = str(Path(LNK_SANDBOX).parent / "python")
WIRE = "ep"


@pytest.fixture
def net(testnet: Path, sandbox_env: dict[str, str], tmp_path: Path
        ) -> Iterator[tuple[Path, dict[str, str]]]:
    """A DNS server of this test's own (the test net's answers, INITIAL_ZONE, on loopback:
    tests/testservers.own_dns_server), its state folder (`set_zone` and `dns_queries`
    take it), and the environment that points the proxy at it. The test net's own DNS
    server has one zone and one query log for every test running at once (xdist's other
    workers, other runs), so what a test asserts was or was not asked is read here, where
    nothing but this test's sandbox asks. The hosts the answers name are the test net's."""
    state = tmp_path / "dns-server"
    with own_dns_server(state) as address:
        yield state, {**sandbox_env, "LNK_SANDBOX_DNS": address}


def spec(write_spec: WriteSpec, tmp_path: Path, body: str, *, read: tuple[Path, ...] = ()
         ) -> Path:
    return write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(tmp_path, *read)}\n{body}')


def wire_log(env: dict[str, str]) -> list[list[str]]:
    path = Path(env["LNK_HOME"]) / "sandbox" / "wires" / WIRE / "log"
    if not path.exists():
        return []
    return [line.split("\t") for line in path.read_text().splitlines()]


def logged(env: dict[str, str], event: str, target: str) -> list[str]:
    """The DETAIL of each line of `event` for `target`."""
    return [fields[3] for fields in wire_log(env) if fields[1:3] == [event, target]]


def python(run_sandbox: RunSandbox, tmp_path: Path, spec_path: Path, env: dict[str, str],
           code: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"probe{len(list(tmp_path.glob('probe*.py')))}.py"
    script.write_text(code)
    return run_sandbox(spec_path, PYTHON, str(script), *args, env=env)


CONNECT = """
import socket, sys
host, port = sys.argv[1], int(sys.argv[2])
try:
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(b"hello\\n")
    data = s.recv(100)
    print(data.decode().strip() if data else "closed")
except OSError as e:
    print(type(e).__name__)
"""


# -- real clients reach real servers by name ---------------------------------------------------


def test_psql_reaches_postgres_by_name_through_an_endpoint(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    result = run_sandbox(path, "psql", "-h", "db.lnkt", "-U", "postgres", "-d", "lnkt",
                         "-tAc", "select word from greeting", env=env)
    assert result.stdout.strip() == "hello-from-origin", result.stderr
    assert "kind=dns type=A answer=127.53.0.1" in logged(env, "allowed", "db.lnkt")
    allowed = logged(env, "allowed", "db.lnkt:5432")
    assert allowed and all(detail.endswith("kind=endpoint") for detail in allowed)
    assert len(logged(env, "ended", "db.lnkt:5432")) == len(allowed)
    # The real lookup is the proxy's, outside, when it connects: never the program's.
    assert ("db.lnkt", "A") in dns_queries(dns)


def test_getent_dig_and_python_resolve_to_the_sandbox_own_address(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432", "allowed.lnkt:80"]\n')
    result = run_sandbox(path, "sh", "-c",
                         "getent hosts db.lnkt; dig +short db.lnkt; dig +short +tcp allowed.lnkt;"
                         " dig +short AAAA db.lnkt; python3 -c 'import socket;"
                         " print(socket.gethostbyname(\"allowed.lnkt\"))'", env=env)
    assert result.stdout.split() == ["127.53.0.1", "db.lnkt", "127.53.0.1", "127.53.0.2",
                                     "127.53.0.2"], result
    # An address of the sandbox's own is given here: nothing is asked outside.
    assert dns_queries(dns) == []
    assert "kind=dns type=AAAA" in " ".join(logged(env, "allowed", "db.lnkt"))


def test_resolv_conf_and_hosts_inside_are_the_sandbox_own(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    result = run_sandbox(path, "sh", "-c", "cat /etc/resolv.conf /etc/hosts", env=env)
    assert "nameserver 127.0.0.1" in result.stdout
    assert "lnkt" not in result.stdout  # this machine's /etc/hosts names the test hosts
    assert "search" not in result.stdout


def test_a_proxy_sandbox_without_dns_names_127_0_0_1_where_nothing_listens_yet(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    """No endpoint, no [lan] name: the package's resolv.conf (127.0.0.1, where the proxy
    serves DNS once `allow --tcp` adds an endpoint), read only; the machine's hosts, as
    before (it names the test hosts); a lookup of a name it does not list is refused at
    once and nothing is logged for it."""
    import lnk_wrap
    from lnk_wrap.launch import _later_files

    _, env = net
    assert [source for source, _ in _later_files()] == [
        str(Path(lnk_wrap.__file__).parent / "resolv.conf")]
    path = spec(write_spec, tmp_path, '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt"]\n')
    result = run_sandbox(path, "sh", "-c", "cat /etc/resolv.conf; getent hosts db.lnkt; "
                         "echo looked=$?; echo x >> /etc/resolv.conf || echo read-only; "
                         "cat /etc/hosts", env=env)
    assert "nameserver 127.0.0.1" in result.stdout and "search" not in result.stdout
    assert "looked=2" in result.stdout and "read-only" in result.stdout, result
    assert "allowed.lnkt" in result.stdout  # the machine's hosts
    assert not [line for line in wire_log(env) if "kind=dns" in line[-1]]


def test_a_resolv_conf_that_is_a_link_is_replaced_where_it_points(
    write_spec: WriteSpec, tmp_path: Path, net: tuple[Path, dict[str, str]],
) -> None:
    """/etc/resolv.conf a link into /run (systemd-resolved's stub), here in a mount
    namespace of the test's own, dangling as /run is not the sandbox's: the sandbox of
    the proxy's network without DNS reads the package's file through the link, at the
    path it names, read only."""
    _, env = net
    etc = tmp_path / "etc"
    path = spec(write_spec, tmp_path, '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt"]\n')
    inside = ("readlink /etc/resolv.conf; cat /etc/resolv.conf; "
              "echo x >> /run/lnkt-stub/stub-resolv.conf || echo read-only")
    result = subprocess.run(
        ["unshare", "-rm", "sh", "-c",
         'mkdir "$0" && (cp -a /etc/. "$0" 2>/dev/null; true) && rm -f "$0/resolv.conf" && '
         'ln -s /run/lnkt-stub/stub-resolv.conf "$0/resolv.conf" && mount --bind "$0" /etc '
         '&& exec "$@"', str(etc), LNK_SANDBOX, "run", "--spec", str(path), "--",
         "sh", "-c", inside], env=env, capture_output=True, text=True,
        timeout=SANDBOX_TIMEOUT_SECONDS)
    lines = result.stdout.splitlines()
    assert lines[0] == "/run/lnkt-stub/stub-resolv.conf", result
    assert "nameserver 127.0.0.1" in lines and lines[-1] == "read-only", result


def test_mongodb_srv_lookup_asks_srv_and_txt_outside_once_each(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path,
                '[tcp]\nendpoints = ["*.cluster0.lnkt:27017", "cluster0.lnkt:27017"]\n')
    result = run_sandbox(path, "sh", "-c",
                         "dig +short SRV _mongodb._tcp.cluster0.lnkt | sort;"
                         " dig +short TXT cluster0.lnkt; dig +short shard-01.cluster0.lnkt;"
                         " dig +short shard-00.cluster0.lnkt; dig +short shard-01.cluster0.lnkt",
                         env=env)
    assert result.stdout.splitlines() == [
        "0 0 27017 shard-00.cluster0.lnkt.", "0 0 27017 shard-01.cluster0.lnkt.",
        '"authSource=admin&replicaSet=rs0"',
        "127.53.0.2", "127.53.0.3", "127.53.0.2",  # given at lookup, and kept
    ], result
    assert dns_queries(dns) == [("_mongodb._tcp.cluster0.lnkt", "SRV"),
                                    ("cluster0.lnkt", "TXT")]
    assert logged(env, "allowed", "_mongodb._tcp.cluster0.lnkt") == [
        "kind=dns type=SRV outside=NOERROR answers=2"]


def test_pymongo_resolves_a_mongodb_srv_url_inside(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    """A real driver's `mongodb+srv://` lookup (PyMongo, with dnspython): SRV for the
    hosts, TXT for the options, each asked outside once; the hosts then resolve to
    addresses of the sandbox's own."""
    dns, env = net
    set_zone(dns, {**INITIAL_ZONE,
                       "_mongodb._tcp.rs.db.lnkt": {"SRV": [[0, 0, 27017, "a.rs.db.lnkt"],
                                                            [0, 0, 27017, "b.rs.db.lnkt"]]},
                       "rs.db.lnkt": {"TXT": ["replicaSet=rs0&authSource=admin"]},
                       "a.rs.db.lnkt": {"A": ["10.212.0.2"]},
                       "b.rs.db.lnkt": {"A": ["10.212.0.2"]}})
    venv = Path(VENV_PYTHON).parent.parent
    path = spec(write_spec, tmp_path,
                '[tcp]\nendpoints = ["*.rs.db.lnkt:27017", "rs.db.lnkt:27017"]\n',
                read=(venv,))
    script = tmp_path / "srv.py"
    script.write_text("""
import socket
from pymongo.uri_parser import parse_uri
parsed = parse_uri("mongodb+srv://rs.db.lnkt/")
print(sorted(parsed["nodelist"]))
print(parsed["options"]["replicaSet"], parsed["options"]["authSource"])
print(sorted(socket.gethostbyname(host) for host, _ in parsed["nodelist"]))
""")
    result = run_sandbox(path, VENV_PYTHON, str(script), env=env)
    assert result.stdout.splitlines() == [
        "[('a.rs.db.lnkt', 27017), ('b.rs.db.lnkt', 27017)]", "rs0 admin",
        "['127.53.0.2', '127.53.0.3']"], result
    assert sorted(dns_queries(dns)) == [("_mongodb._tcp.rs.db.lnkt", "SRV"),
                                            ("rs.db.lnkt", "TXT")]


def test_a_name_under_a_star_endpoint_connects_by_its_given_address(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    set_zone(dns, {**INITIAL_ZONE, "echo.cluster0.lnkt": {"A": ["10.212.0.2"]}})
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["*.cluster0.lnkt:7"]\n')
    result = python(run_sandbox, tmp_path, path, env, CONNECT, "echo.cluster0.lnkt", "7")
    assert result.stdout.strip() == "hello", result
    assert logged(env, "allowed", "echo.cluster0.lnkt:7") == ["id=1 kind=endpoint"]


# -- N7: DNS inside answers only names the sandbox may reach -------------------------------------


def test_N7_unlisted_names_do_not_exist_and_ask_nothing_outside(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    result = run_sandbox(path, "sh", "-c",
                         "for t in A AAAA SRV TXT MX; do"
                         " dig $t denied.lnkt | grep -o 'status: [A-Z]*'; done;"
                         " dig SRV _pg._tcp.denied.lnkt | grep -o 'status: [A-Z]*';"
                         " dig A db.lnkt.denied.lnkt | grep -o 'status: [A-Z]*';"
                         " getent hosts denied.lnkt; echo getent=$?;"
                         " python3 -c 'import socket; socket.getaddrinfo(\"denied.lnkt\", 80)'"
                         " 2>&1 | tail -1", env=env)
    lines = result.stdout.splitlines()
    assert lines[:7] == ["status: NXDOMAIN"] * 7, result
    assert lines[7] == "getent=2"
    assert "gaierror" in lines[8]
    assert dns_queries(dns) == []  # a refused name leaks nothing to a resolver
    refusals = logged(env, "refused", "denied.lnkt")
    assert any("type=MX" in detail for detail in refusals)
    assert all("not a name this sandbox may reach" in detail for detail in refusals)


def test_N7_local_network_srv_and_txt_are_refused_even_for_a_listed_name(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n'
                '[lan]\nhosts = ["printer.local:631", "single:80"]\n')
    result = run_sandbox(path, "sh", "-c",
                         "for q in 'SRV printer.local' 'TXT printer.local'"
                         " 'SRV _ipp._tcp.printer.local' 'TXT single' 'SRV single'; do"
                         " dig $q | grep -o 'status: [A-Z]*'; done", env=env)
    assert result.stdout.splitlines() == ["status: REFUSED"] * 5, result
    assert dns_queries(dns) == []
    assert all(".local" in detail for detail in logged(env, "refused", "printer.local"))


def test_N7_every_query_is_on_the_wire_log(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    run_sandbox(path, "sh", "-c", "for n in db.lnkt x.lnkt y.example; do dig +short $n;"
                " dig +short +tcp TXT $n; done", env=env)
    dns_lines = [fields for fields in wire_log(env) if "kind=dns" in fields[3]]
    asked = sorted((fields[2], fields[3].split()[1]) for fields in dns_lines)
    assert asked == sorted((name, f"type={kind}") for name in ("db.lnkt", "x.lnkt", "y.example")
                           for kind in ("A", "TXT"))


def test_N7_a_query_that_does_not_parse_is_refused_and_logged(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    result = python(run_sandbox, tmp_path, path, env, """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(b"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x05db", ("127.0.0.1", 53))
reply = s.recv(512)
print(reply[:2].hex(), reply[3] & 0x0F)
""")
    assert result.stdout.split() == ["1234", "1"], result  # FORMERR, same id
    assert any("kind=dns" in fields[3] and fields[1] == "refused" for fields in wire_log(env))


# -- N3 through endpoints ---------------------------------------------------------------------


@pytest.mark.parametrize("rebound", ["127.0.0.1", "machine", "169.254.169.254"])
def test_N3_rebinding_an_allowed_name_to_this_machine_is_refused(
    write_spec: WriteSpec, tmp_path: Path, testnet: Path, net: tuple[Path, dict[str, str]],
    rebound: str,
) -> None:
    dns, env = net
    if rebound == "machine":
        rebound = json.loads((testnet / "ready").read_text())["machine"]
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["rebind.lnkt:7"]\n')
    script = tmp_path / "twice.py"
    script.write_text("""
import socket, sys
for _ in (1, 2):
    input()
    try:
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
        s.sendall(b"hello\\n")
        data = s.recv(100)
        print(data.decode().strip() if data else "closed", flush=True)
    except OSError as e:
        print(type(e).__name__, flush=True)
""")
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(path), "--", PYTHON, "-u",
                            str(script), "rebind.lnkt", "7"], env=env, text=True,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert run.stdin is not None and run.stdout is not None
        run.stdin.write("\n")
        run.stdin.flush()
        assert run.stdout.readline().strip() == "hello"  # the first lookup: the test host
        set_zone(dns, {**INITIAL_ZONE, "rebind.lnkt": {"A": [rebound]}})
        run.stdin.write("\n")
        run.stdin.flush()
        assert run.stdout.readline().strip() in ("closed", "ConnectionResetError")
        run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    refusals = logged(env, "refused", "rebind.lnkt:7")
    assert len(refusals) == 1 and f"resolves to {rebound}" in refusals[0], wire_log(env)
    assert len(logged(env, "allowed", "rebind.lnkt:7")) == 1


def test_N3_a_port_not_listed_on_an_allowed_name_is_refused(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    for host, port in (("db.lnkt", "5433"), ("db.lnkt", "22"), ("127.53.0.1", "7")):
        result = python(run_sandbox, tmp_path, path, env, CONNECT, host, port)
        assert result.stdout.strip() == "ConnectionRefusedError", (host, port, result)
    assert not logged(env, "allowed", "db.lnkt:5433")


def test_N3_loopback_addresses_not_given_out_are_refused(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["*.cluster0.lnkt:7"]\n')
    for address in ("127.53.0.200", "127.0.0.1", "127.9.9.9"):
        result = python(run_sandbox, tmp_path, path, env, CONNECT, address, "7")
        assert result.stdout.strip() in ("closed", "ConnectionResetError"), (address, result)
        assert logged(env, "refused", f"{address}:7") == [
            f"reason={address} is no address this sandbox was given"]
    assert not [fields for fields in wire_log(env) if fields[1] == "allowed"]


def test_N3_udp_reaches_nothing_but_the_sandbox_dns(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n'
                f'[lan]\nhosts = ["{LAN_ADDRESS}:{LAN_ECHO_PORT}"]\n')
    result = python(run_sandbox, tmp_path, path, env, f"""
import socket
query = bytes.fromhex("abcd01000001000000000000026462046c6e6b740000010001")  # db.lnkt A
for address, port in (("10.212.0.2", 53), ("10.212.0.2", 7), ("127.53.0.1", 5432),
                      ("{LAN_ADDRESS}", {LAN_ECHO_PORT}), ("127.0.0.1", 5353),
                      ("192.0.2.99", 53)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
    try:
        s.sendto(query, (address, port)); s.recv(512); print("answered")
    except OSError as e:
        print(type(e).__name__)
""")
    assert "answered" not in result.stdout, result
    assert dns_queries(dns) == []


# -- [lan]: the local network through the proxy, never this machine ----------------------------


def test_lan_host_by_address_is_reached_through_the_proxy(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, f'[lan]\nhosts = ["{LAN_ADDRESS}:{LAN_ECHO_PORT}"]\n')
    result = python(run_sandbox, tmp_path, path, env, CONNECT, LAN_ADDRESS, str(LAN_ECHO_PORT))
    assert result.stdout.strip() == "hello", result
    assert logged(env, "allowed", f"{LAN_ADDRESS}:{LAN_ECHO_PORT}") == ["id=1 kind=endpoint"]


def test_lan_host_by_ipv6_address_is_reached_and_this_machine_is_not(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, f'[lan]\nhosts = ["[{LAN_ADDRESS6}]:{LAN_ECHO_PORT}", '
                '"[fd00:211::1]:22"]\n')
    result = python(run_sandbox, tmp_path, path, env, CONNECT, LAN_ADDRESS6, str(LAN_ECHO_PORT))
    assert result.stdout.strip() == "hello", result
    assert logged(env, "allowed", f"[{LAN_ADDRESS6}]:{LAN_ECHO_PORT}") == ["id=1 kind=endpoint"]
    mine = python(run_sandbox, tmp_path, path, env, CONNECT, "fd00:211::1", "22")
    assert mine.stdout.strip() in ("closed", "ConnectionResetError"), mine
    assert "fd00:211::1 is this machine" in logged(env, "refused", "[fd00:211::1]:22")[0]


def test_lan_host_by_name_is_reached_through_the_proxy(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    set_zone(dns, {**INITIAL_ZONE, "router.lnkt": {"A": [LAN_ADDRESS]}})
    path = spec(write_spec, tmp_path, f'[lan]\nhosts = ["router.lnkt:{LAN_ECHO_PORT}"]\n')
    result = python(run_sandbox, tmp_path, path, env, CONNECT, "router.lnkt", str(LAN_ECHO_PORT))
    assert result.stdout.strip() == "hello", result


def test_the_same_machine_without_lan_is_refused_as_this_machine_network(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    set_zone(dns, {**INITIAL_ZONE, "router.lnkt": {"A": [LAN_ADDRESS]}})
    path = spec(write_spec, tmp_path, f'[tcp]\nendpoints = ["router.lnkt:{LAN_ECHO_PORT}"]\n')
    result = python(run_sandbox, tmp_path, path, env, CONNECT, "router.lnkt", str(LAN_ECHO_PORT))
    assert result.stdout.strip() in ("closed", "ConnectionResetError"), result
    assert "on one of this machine's own networks" in logged(
        env, "refused", f"router.lnkt:{LAN_ECHO_PORT}")[0]


def test_lan_never_reaches_this_machine_by_its_own_address(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, testnet: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    machine = json.loads((testnet / "ready").read_text())["machine"]
    path = spec(write_spec, tmp_path, f'[lan]\nhosts = ["{machine}:22", "10.211.0.1:22"]\n')
    for address in (machine, "10.211.0.1"):  # this machine's, on the test net too
        result = python(run_sandbox, tmp_path, path, env, CONNECT, address, "22")
        assert result.stdout.strip() in ("closed", "ConnectionResetError"), result
        assert f"{address} is this machine" in logged(env, "refused", f"{address}:22")[0]


def test_lan_through_the_proxy_variables_too(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[network]\nmode = "proxy"\n'
                f'[lan]\nhosts = ["{LAN_ADDRESS}:{LAN_ECHO_PORT}"]\n')
    result = python(run_sandbox, tmp_path, path, env, f"""
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
s.sendall(b"CONNECT {LAN_ADDRESS}:{LAN_ECHO_PORT} HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
head = s.recv(200).split(b"\\r\\n")[0]
s.sendall(b"via-proxy\\n")
print(head.decode(), s.recv(100).decode().strip())
""")
    assert result.stdout.strip() == "HTTP/1.1 200 Connection established via-proxy", result


@pytest.mark.parametrize(("entry", "reason"), [
    ("169.254.169.254:80", "cloud metadata service"),
    ("127.0.0.1:22", "this machine"),
    ("[::1]:22", "this machine"),
    ("0.0.0.0:80", "this machine"),
    ("*.lan:80", "one machine"),
    ("*", "every host"),
])
def test_lan_spec_refuses_what_is_no_machine_of_the_local_network(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, entry: str, reason: str,
) -> None:
    marker = tmp_path / "ran"
    path = spec(write_spec, tmp_path, f'[lan]\nhosts = ["{entry}"]\n')
    result = run_sandbox(path, "touch", str(marker))
    assert result.returncode == 125 and reason in result.stderr, result.stderr
    assert "lan.hosts[0]" in result.stderr
    assert not marker.exists()


# -- [localhost] ports: this machine's loopback, relayed in ----------------------------------


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[int]:
    """A real Redis on this machine's loopback (127.0.0.1 and ::1), on a free port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "-::1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        yield port
    finally:
        server.terminate()
        server.wait()


def test_redis_cli_reaches_redis_on_this_machine_loopback(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    sandbox_env: dict[str, str], redis: int,
) -> None:
    path = spec(write_spec, tmp_path, f"[localhost]\nports = [{redis}]\n")
    result = run_sandbox(path, "sh", "-c",
                         f"redis-cli -p {redis} set greeting hi; redis-cli -p {redis} get greeting;"
                         f" redis-cli -h ::1 -p {redis} ping;"
                         f" redis-cli -h localhost -p {redis} ping",
                         env=sandbox_env)
    assert result.stdout.split() == ["OK", "hi", "PONG", "PONG"], result
    allowed = logged(sandbox_env, "allowed", f"localhost:{redis}")
    assert len(allowed) == 4 and all(detail.endswith("kind=relay") for detail in allowed)
    assert len(logged(sandbox_env, "ended", f"localhost:{redis}")) == 4


def test_N6_only_the_named_ports_are_relayed(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    sandbox_env: dict[str, str], redis: int,
) -> None:
    with socket.socket() as other:  # another server on this machine's loopback
        other.bind(("127.0.0.1", 0))
        other.listen()
        path = spec(write_spec, tmp_path, f"[localhost]\nports = [{redis}]\n")
        result = python(run_sandbox, tmp_path, path, sandbox_env, CONNECT, "127.0.0.1",
                        str(other.getsockname()[1]))
    assert result.stdout.strip() == "ConnectionRefusedError", result


def test_N6_a_named_port_nothing_listens_on_is_refused_and_logged(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    sandbox_env: dict[str, str],
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    path = spec(write_spec, tmp_path, f"[localhost]\nports = [{port}]\n")
    result = python(run_sandbox, tmp_path, path, sandbox_env, CONNECT, "127.0.0.1", str(port))
    assert result.stdout.strip() in ("closed", "ConnectionResetError"), result
    assert "nothing listens" in logged(sandbox_env, "refused", f"localhost:{port}")[0]


def test_N6_ports_star_is_refused_with_the_seed_reason_and_nothing_runs(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
) -> None:
    marker = tmp_path / "ran"
    path = spec(write_spec, tmp_path, '[localhost]\nports = ["*"]\n')
    result = run_sandbox(path, "touch", str(marker))
    assert result.returncode == 125
    assert "localhost.ports[0]" in result.stderr
    assert "other sandboxes' proxies" in result.stderr
    assert not marker.exists()


@pytest.mark.parametrize(("body", "key", "reason"), [
    ('[localhost]\nports = [53]\n[tcp]\nendpoints = ["a.lnkt:1"]', "localhost.ports",
     "the sandbox's DNS"),
    ('[localhost]\nports = [3128]\n[network]\nmode = "proxy"', "localhost.ports",
     "the proxy's own port"),
    ('[localhost]\nports = [7]\n[tcp]\nendpoints = ["*.lnkt:7"]', "tcp.endpoints",
     "a [localhost] port"),
    ('[localhost]\nports = [0]', "localhost.ports[0]", "1 to 65535"),
    ('[localhost]\nports = ["5432"]', "localhost.ports[0]", "must be a port number"),
    ('[tcp]\nendpoints = ["db.lnkt"]', "tcp.endpoints[0]", "names its port"),
    ('[tcp]\nendpoints = ["10.0.0.1:5432"]', "tcp.endpoints[0]", "goes in [lan] hosts"),
    ('[tcp]\nendpoints = ["*:5432"]', "tcp.endpoints[0]", "every host"),
    ('[tcp]\nendpoints = ["db.lnkt:99999"]', "tcp.endpoints[0]", "1 to 65535"),
])
def test_spec_refusals_name_the_key_and_reason(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, body: str, key: str,
    reason: str,
) -> None:
    path = spec(write_spec, tmp_path, body + "\n")
    result = run_sandbox(path, "true")
    assert result.returncode == 125
    assert f"{path}: {key}: " in result.stderr and reason in result.stderr, result.stderr


# -- the wire's controls over DNS, endpoints and the relay --------------------------------------


def test_N8_only_queries_asked_outside_count_toward_calls_a_minute(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]],
) -> None:
    dns, env = net
    path = spec(write_spec, tmp_path, '[network]\ncalls_per_minute = 3\n'
                '[tcp]\nendpoints = ["*.cluster0.lnkt:27017", "cluster0.lnkt:27017"]\n')
    result = run_sandbox(path, "sh", "-c",
                         "for i in 1 2 3 4 5 6 7 8 9 10; do dig A shard-00.cluster0.lnkt"
                         " | grep -o 'status: [A-Z]*'; done;"
                         " for i in 1 2 3 4; do dig TXT cluster0.lnkt | grep -o 'status: [A-Z]*';"
                         " done;"
                         " python3 -c 'import socket; s = socket.create_connection("
                         "(\"shard-00.cluster0.lnkt\", 27017)); print(s.recv(10) or \"closed\")'",
                         env=env)
    assert result.stdout.splitlines() == ["status: NOERROR"] * 13 + ["status: REFUSED",
                                                                     "closed"], result
    assert dns_queries(dns) == [("cluster0.lnkt", "TXT")] * 3
    assert "calls in a minute" in logged(env, "refused", "cluster0.lnkt")[0]
    # An endpoint's connection past the limit is closed, and said why (no pause).
    assert "calls in a minute" in logged(env, "refused", "shard-00.cluster0.lnkt:27017")[0]
    assert not [fields for fields in wire_log(env) if fields[1] == "paused"]


def test_N9_the_kill_switch_refuses_dns_and_closes_endpoint_and_relay_calls(
    write_spec: WriteSpec, tmp_path: Path, net: tuple[Path, dict[str, str]], redis: int,
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["allowed.lnkt:7"]\n'
                f"[localhost]\nports = [{redis}]\n")
    script = tmp_path / "hold.py"
    script.write_text(f"""
import socket, subprocess, time
echo = socket.create_connection(("allowed.lnkt", 7), timeout=5)
echo.sendall(b"x\\n"); echo.recv(10)
store = socket.create_connection(("127.0.0.1", {redis}), timeout=5)
store.sendall(b"PING\\r\\n"); store.recv(10)
print("open", flush=True)
input()
started = time.monotonic()
for s in (echo, store):
    s.settimeout(3)
    try:
        print("closed" if s.recv(10) == b"" else "data", flush=True)
    except OSError as e:
        print(type(e).__name__, flush=True)
print("within", round(time.monotonic() - started, 2), flush=True)
print(subprocess.run(["dig", "db.lnkt"], capture_output=True, text=True).stdout.count("REFUSED"))
""")
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(path), "--", PYTHON, str(script)],
                           env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        assert run.stdout is not None and run.stdin is not None
        assert run.stdout.readline().strip() == "open"
        stop = subprocess.run([LNK_SANDBOX, "stop"], env=env, capture_output=True, text=True,
                              timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
        assert stop.returncode == 0, stop.stderr
        run.stdin.write("\n")
        run.stdin.flush()
        out, _ = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
        subprocess.run([LNK_SANDBOX, "stop", "--clear"], env=env, capture_output=True,
                       timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    lines = out.split("\n")
    assert lines[0] in ("closed", "ConnectionResetError") and lines[1] == lines[0], out
    assert float(lines[2].split()[1]) < 1.0
    assert int(lines[3]) >= 1  # status: REFUSED


# -- how the ways in are made ------------------------------------------------------------------


def test_nothing_of_ours_runs_inside(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path,
    net: tuple[Path, dict[str, str]], redis: int,
) -> None:
    _, env = net
    path = spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n'
                f'[localhost]\nports = [{redis}]\n[lan]\nhosts = ["{LAN_ADDRESS}:7"]\n')
    result = run_sandbox(path, "sh", "-c", "cat /proc/[0-9]*/comm", env=env)
    # bubblewrap's own pid 1 (which reaps), the shell and cat: no helper, no proxy.
    names = result.stdout.split()
    assert names[0] == "bwrap" and set(names[1:]) <= {"sh", "cat"} and len(names) <= 3, result


def test_the_dns_helper_runs_alone_for_an_administrator(tmp_path: Path) -> None:
    """lnk-sandbox-dns-helper, given a process's pid and its network: the sockets it
    makes there come over the inherited socket, labelled, bound where the plan says."""
    from lnk_common.fdpass import receive_labelled

    unshare = shutil.which("unshare")
    assert unshare, "util-linux's unshare is needed"
    target = subprocess.Popen([unshare, "--user", "--map-root-user", "--net", "sh", "-c",
                               "ip link set lo up && echo up && exec sleep 30"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout is not None and target.stdout.readline().strip() == "up"
        network = os.stat(f"/proc/{target.pid}/ns/net").st_ino
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        helper = Path(LNK_SANDBOX).with_name("lnk-sandbox-dns-helper")
        done = subprocess.run(
            [str(helper), "--pid", str(target.pid), "--net-namespace", str(network),
             "--proxy-fd", str(theirs.fileno()), "--endpoint", "db.lnkt:5432",
             "--lan", "192.168.77.9:8123", "--lan", "[fd00::77]:8080"],
            pass_fds=[theirs.fileno()], capture_output=True, text=True, timeout=30, check=False)
        theirs.close()
        assert done.returncode == 0, done.stderr
        found = []
        while (received := receive_labelled(ours.fileno())) is not None:
            sock = socket.socket(fileno=received[0])
            found.append((received[1].decode(), sock.getsockname()[:2]))
            sock.close()
        ours.close()
    finally:
        target.kill()
        target.wait()
    assert found == [("dns udp", ("127.0.0.1", 53)), ("dns tcp", ("127.0.0.1", 53)),
                     ("endpoint tcp", ("127.53.0.1", 5432)),
                     ("endpoint tcp", ("192.168.77.9", 8123)),
                     ("endpoint tcp", ("fd00::77", 8080))]


def test_the_dns_helper_refuses_a_process_that_is_not_in_the_named_network() -> None:
    helper = Path(LNK_SANDBOX).with_name("lnk-sandbox-dns-helper")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    done = subprocess.run(
        [str(helper), "--pid", str(os.getpid()), "--net-namespace", "1",
         "--proxy-fd", str(theirs.fileno()), "--endpoint", "db.lnkt:5432"],
        pass_fds=[theirs.fileno()], capture_output=True, text=True, timeout=30, check=False)
    ours.close()
    theirs.close()
    assert done.returncode == 1
    assert "network namespace did not appear" in done.stderr


def test_the_program_never_starts_when_its_ways_in_cannot_be_made(
    tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    """Nothing fails open: when a socket cannot be made inside (here the launcher is
    given, by hand, a [lan] address and port that the proxy's own port already holds),
    bubblewrap is killed before the program starts, and the run says why."""
    marker = tmp_path / "ran"
    launcher = LNK_SANDBOX.replace("lnk-sandbox", "lnk-sandbox-launch")
    done = subprocess.run(
        [launcher, "--settings", sandbox_env["LNK_HOME"], "--write", str(tmp_path),
         "--network", "proxy", "--lan", "127.0.0.1:3128", "--", "/usr/bin/touch",
         str(marker)], env=sandbox_env, capture_output=True, text=True,
        timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert done.returncode == 125, done
    assert "could not be made inside it" in done.stderr
    assert "127.0.0.1 port 3128" in done.stderr
    assert not marker.exists()


def test_the_launcher_refuses_ports_that_collide_before_anything_starts(
    tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    marker = tmp_path / "ran"
    launcher = LNK_SANDBOX.replace("lnk-sandbox", "lnk-sandbox-launch")
    done = subprocess.run(
        [launcher, "--settings", sandbox_env["LNK_HOME"], "--write", str(tmp_path),
         "--network", "proxy", "--localhost-port", "3128", "--", "/usr/bin/touch",
         str(marker)], env=sandbox_env, capture_output=True, text=True,
        timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert done.returncode == 125
    assert done.stderr.splitlines()[-1] == ("lnk-sandbox: [localhost] port 3128 is the "
                                            "proxy's own port inside the sandbox")
    assert not marker.exists()


@pytest.mark.parametrize(("said", "runs"), [(b"", False), (b"y", False), (b"x", True)])
def test_the_init_runs_the_program_only_on_the_go_ahead(said: bytes, runs: bool,
                                                         tmp_path: Path) -> None:
    """The init waits on --go-fd for exactly "x": the end of the pipe (a launcher that
    refused or was killed) or anything else, and the program is not run."""
    from lnk_common.chain import helper_argv

    read_end, write_end = os.pipe()
    os.write(write_end, said)
    os.close(write_end)
    watch_end, init_end = socket.socketpair()
    watch = subprocess.Popen(
        [*helper_argv("exec-watch"), "--socket-fd", str(watch_end.fileno()),
         "--settings", str(tmp_path)], pass_fds=(watch_end.fileno(),))
    watch_end.close()
    done = subprocess.run(
        [*helper_argv("init"), "--filter", "sockets", "--watch-fd", str(init_end.fileno()),
         "--go-fd", str(read_end),
         "--rule", "read:/usr", "--rule", "read:/lib", "--rule", "read:/lib64",
         "--", "/usr/bin/true"], pass_fds=(read_end, init_end.fileno()), capture_output=True,
        text=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    os.close(read_end)
    init_end.close()
    watch.wait(timeout=SANDBOX_TIMEOUT_SECONDS)
    if runs:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 125
        assert "ways out were not made" in done.stderr


def test_the_services_example_reaches_a_relayed_port_and_resolves_only_its_endpoint(
    sandbox_env: dict[str, str], redis: int, tmp_path: Path,
) -> None:
    """examples/services.toml, with its Redis port changed to the test's own: the
    relayed port answers, the endpoint's name resolves to the sandbox's own address
    (nothing is asked outside for it), and any other name does not exist."""
    examples = Path(__file__).resolve().parent.parent / "examples"
    text = (examples / "services.toml").read_text().replace("ports = [6379]",
                                                            f"ports = [{redis}]")
    copy = examples / f"services-test-{os.getpid()}.toml"
    copy.write_text(text)
    try:
        result = subprocess.run(
            [LNK_SANDBOX, "run", "--spec", copy.name, "--", "sh", "-c",
             f"redis-cli -p {redis} ping; getent hosts db.example.com;"
             " getent hosts example.com || echo none"],
            cwd=examples, env=sandbox_env, capture_output=True, text=True,
            timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    finally:
        copy.unlink()
    assert result.stdout.split() == ["PONG", "127.53.0.1", "db.example.com", "none"], result
