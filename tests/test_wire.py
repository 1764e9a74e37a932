"""N1-N5 and N11 attacked from inside a real sandbox, with real clients, against real test
hosts in network namespaces (tests/testnet.py) and a DNS server that counts queries."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    call_lines,
    end_run,
    ended,
    toml_list,
    wait_until,
    wire_log_of,
)
from tests.test_files_attacks import Q
from tests.testnet import ORIGIN_ADDRESS

PYTHON = "/usr/bin/python3"
VENV_PYTHON = str(Path(LNK_SANDBOX).parent / "python")


class CountingDNS:
    """A DNS server on this machine's loopback that answers the test names (A for an
    IPv4 address, AAAA for an IPv6 one) and counts every query by name (the proxy is
    pointed at it with LNK_SANDBOX_DNS)."""

    def __init__(self, answers: dict[str, str]) -> None:
        from dnslib import AAAA, QTYPE, RR, A
        from dnslib.server import BaseResolver, DNSServer

        self.queries: dict[str, int] = {}
        outer = self

        class Resolver(BaseResolver):  # type: ignore[misc]
            def resolve(self, request, handler):  # type: ignore[no-untyped-def]
                name = str(request.q.qname).rstrip(".").lower()
                outer.queries[name] = outer.queries.get(name, 0) + 1
                reply = request.reply()
                address = answers.get(name, "")
                if address and ":" not in address and request.q.qtype == QTYPE.A:
                    reply.add_answer(RR(name, QTYPE.A, rdata=A(address), ttl=5))
                if ":" in address and request.q.qtype == QTYPE.AAAA:
                    packed = tuple(ipaddress.IPv6Address(address).packed)
                    reply.add_answer(RR(name, QTYPE.AAAA, rdata=AAAA(packed), ttl=5))
                return reply

        self.server = DNSServer(Resolver(), port=0, address="127.0.0.1")
        self.server.start_thread()
        self.port = self.server.server.server_address[1]

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def dns(testnet: Path) -> Iterator[CountingDNS]:
    machine = json.loads((testnet / "ready").read_text())["machine"]
    server = CountingDNS({"allowed.lnkt": ORIGIN_ADDRESS, "denied.lnkt": ORIGIN_ADDRESS,
                          "self-lo.lnkt": "127.0.0.1", "self-eth.lnkt": machine,
                          "meta.lnkt": "169.254.169.254"})
    yield server
    server.stop()


@pytest.fixture
def wire(testnet: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
         dns: CountingDNS) -> tuple[Path, dict[str, str]]:
    spec = write_spec(
        f"name = \"tests\"\n[files]\nread = {toml_list(testnet, Path(VENV_PYTHON).parent.parent)}"
        "\n[network]\nmode = \"proxy\"\n"
        'hosts = ["allowed.lnkt", "self-lo.lnkt", "self-eth.lnkt", "meta.lnkt", '
        '"allowed.lnkt:7"]\n')
    return spec, {**sandbox_env, "LNK_SANDBOX_DNS": f"127.0.0.1:{dns.port}"}


def curl(run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], *args: str
         ) -> subprocess.CompletedProcess[str]:
    spec, env = wire
    return run_sandbox(spec, "curl", "-s", "-m", "10", "-w", "\n%{http_code}", *args, env=env)


def code_of(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.rsplit("\n", 1)[-1]


def wire_log(sandbox_env: dict[str, str]) -> str:
    return call_lines(wire_log_of(sandbox_env, "tests"))


# -- real clients, unmodified, through the proxy variables ------------------------------------


def test_curl_http_and_https_reach_a_listed_host(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], testnet: Path
) -> None:
    plain = curl(run_sandbox, wire, "http://allowed.lnkt/ok")
    assert plain.stdout == "fine\n\n200", plain
    tls = curl(run_sandbox, wire, "--cacert", str(testnet / "cert.pem"), "https://allowed.lnkt/ok")
    assert tls.stdout == "fine\n\n200", tls


def test_git_clone_over_http(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], tmp_path: Path,
    write_spec: WriteSpec, testnet: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    spec, env = wire
    writable = write_spec(spec.read_text().replace("[network]",
                                                   f"write = {toml_list(work)}\n[network]"))
    result = run_sandbox(writable, "git", "clone", "-q", "http://allowed.lnkt/repo.git",
                         str(work / "clone"), env=env)
    assert result.returncode == 0, result.stderr
    assert (work / "clone" / "README").read_text() == "a repository served over http\n"
    secure = run_sandbox(writable, "git", "clone", "-q", "https://allowed.lnkt/repo.git",
                         str(work / "clone-tls"),
                         env={**env, "GIT_SSL_CAINFO": str(testnet / "cert.pem")})
    assert secure.returncode == 0, secure.stderr
    assert (work / "clone-tls" / "README").exists()


def test_pip_installs_from_an_index_on_a_test_host(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], tmp_path: Path,
    write_spec: WriteSpec,
) -> None:
    target = tmp_path / "site"
    target.mkdir()
    spec, env = wire
    writable = write_spec(spec.read_text().replace("[network]",
                                                   f"write = {toml_list(target)}\n[network]"))
    result = run_sandbox(writable, VENV_PYTHON, "-m", "pip", "--isolated", "install", "-q",
                         "--trusted-host", "allowed.lnkt",
                         "--disable-pip-version-check", "--no-cache-dir",
                         "--index-url", "http://allowed.lnkt/simple", "--target", str(target),
                         "lnktpkg", env=env)
    assert result.returncode == 0, result.stderr
    assert (target / "lnktpkg" / "__init__.py").read_text() == "VALUE = 42\n"


def test_python_urllib(run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]) -> None:
    spec, env = wire
    code = ("import urllib.request\n"
            "print(urllib.request.urlopen('http://allowed.lnkt/ok', timeout=10).read())")
    result = run_sandbox(spec, PYTHON, "-I", "-c", code, env=env)
    assert result.stdout.strip() == "b'fine\\n'", result


def test_post_bodies_go_through(run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]
                                ) -> None:
    result = curl(run_sandbox, wire, "--data-binary", "x" * 100_000, "http://allowed.lnkt/p")
    assert result.stdout == "got 100000\n\n200", result


# -- N2: refused by name, before any lookup -----------------------------------------------------


def test_N2_an_unlisted_name_gets_403_and_no_dns_query(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], dns: CountingDNS,
    sandbox_env: dict[str, str],
) -> None:
    plain = curl(run_sandbox, wire, "http://denied.lnkt/ok")
    assert plain.stdout == "denied.lnkt:80 is not in this sandbox's hosts\n\n403", plain
    port = curl(run_sandbox, wire, "http://allowed.lnkt:8080/")
    assert port.stdout == "allowed.lnkt:8080 is not in this sandbox's hosts\n\n403", port
    tls = curl(run_sandbox, wire, "-w", " %{http_connect}", "https://denied.lnkt/ok")
    assert tls.stdout == " 403" and tls.returncode == 56, tls  # the CONNECT refused
    assert dns.queries.get("denied.lnkt", 0) == 0
    refused = [line.split("\t")[2:] for line in wire_log(sandbox_env).splitlines()]
    # The log's line (not the program's) says the command that would let it through.
    assert refused == [[target, f"reason={target} is not in this sandbox's hosts; "
                                f"`lnk-sandbox allow tests {entry}` lets it through"]
                       for target, entry in (("denied.lnkt:80", "denied.lnkt"),
                                             ("allowed.lnkt:8080", "allowed.lnkt:8080"),
                                             ("denied.lnkt:443", "denied.lnkt"))]
    curl(run_sandbox, wire, "http://allowed.lnkt/ok")
    assert dns.queries.get("allowed.lnkt", 0) >= 1  # the counter does count


# -- N3: never this machine, its networks, metadata ---------------------------------------------


# Every attack below reaches the address check: each name, address and spelling is
# listed in the spec (a name check refusing it would prove nothing about N3), looked up
# by the system's resolver as the proxy does (glibc reads 127.1, 0x7f000001 and
# 2130706433 as 127.0.0.1; the test net's /etc/hosts maps self-lo, self-eth and meta), or,
# for IPv6 answers, by a DNS server of the test's own.
_SELF_V6 = {"self-v6.lnkt": "::1", "self-mapped.lnkt": "::ffff:127.0.0.1",
            "self-nat64.lnkt": "64:ff9b::7f00:1", "self-6to4.lnkt": "2002:7f00:1::1"}
_LOOPBACK = "is this machine (loopback)"


def _n3_cases() -> list[tuple[str, str, str]]:
    """(url, status, the refusal's one line); MACHINE stands for this machine's address."""
    return [
        ("http://127.1/", "403", f"127.1 resolves to 127.0.0.1 {_LOOPBACK}"),
        ("http://0x7f000001/", "403", f"0x7f000001 resolves to 127.0.0.1 {_LOOPBACK}"),
        ("http://2130706433/", "403", f"2130706433 resolves to 127.0.0.1 {_LOOPBACK}"),
        ("http://127.0.0.1/", "403", f"127.0.0.1 {_LOOPBACK}"),
        ("http://0.0.0.0/", "403", f"0.0.0.0 {_LOOPBACK}"),
        ("http://localhost/", "403", f"localhost resolves to LOCALHOST {_LOOPBACK}"),
        ("http://self-lo.lnkt/", "403", f"self-lo.lnkt resolves to 127.0.0.1 {_LOOPBACK}"),
        ("https://self-lo.lnkt/", "403", f"self-lo.lnkt resolves to 127.0.0.1 {_LOOPBACK}"),
        ("http://self-eth.lnkt/", "403", "self-eth.lnkt resolves to MACHINE is this machine"),
        ("http://MACHINE/", "403", "MACHINE is this machine"),
        ("http://10.211.0.1/", "403", "10.211.0.1 is this machine"),
        ("http://10.211.0.2/", "403", "10.211.0.2 is on one of this machine's own networks"),
        ("http://meta.lnkt/", "403",
         "meta.lnkt resolves to 169.254.169.254 is a cloud metadata service"),
        *((f"http://{name}/", "403", f"{name} resolves to "
           + (f"::1 {_LOOPBACK}" if address == "::1"
              else f"127.0.0.1 {_LOOPBACK} (as {ipaddress.ip_address(address)})"))
          for name, address in _SELF_V6.items()),
        # Metadata addresses are refused before the name, listed or not.
        ("http://169.254.169.254/latest/meta-data/", "403",
         "169.254.169.254 is a cloud metadata service"),
        ("http://[fd00:ec2::254]/", "403", "fd00:ec2::254 is a cloud metadata service"),
        ("http://100.100.100.200/", "403", "100.100.100.200 is a cloud metadata service"),
        # Literals no spec can list: refused by name.
        ("http://[::1]/", "403", "[::1]:80 is not in this sandbox's hosts"),
        ("http://[::ffff:127.0.0.1]/", "403", "[::ffff:7f00:1]:80 is not in this sandbox's hosts"),
        # The proxy itself, by its own address: no verb, never forwarded.
        ("http://127.0.0.1:3128/", "400",
         "the proxy takes absolute-form requests (http://host/…), CONNECT, and its verbs' "
         "paths (/_link/…)"),
    ]


# The request as a client sends it, byte for byte (curl would write 127.1 as 127.0.0.1
# before the proxy saw it): absolute-form for http, a CONNECT for https; prints the
# status and the refusal's line.
_ASK = r"""
import socket, sys
url = sys.argv[1]
authority = url.split("/")[2]
if url.startswith("https://"):
    head = f"CONNECT {authority}:443 HTTP/1.1\r\nHost: {authority}:443\r\n\r\n"
else:
    head = f"GET {url} HTTP/1.1\r\nHost: {authority}\r\n\r\n"
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(head.encode())
data = b""
while chunk := s.recv(65536):
    data += chunk
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b" ")[1].decode() + "|" + body.decode().strip())
"""


@pytest.mark.parametrize(("url", "status", "reason"), _n3_cases(),
                         ids=[case[0] for case in _n3_cases()])
def test_N3_this_machine_and_metadata_are_never_reached(
    run_sandbox: RunSandbox, write_spec: WriteSpec, testnet: Path,
    sandbox_env: dict[str, str], url: str, status: str, reason: str,
) -> None:
    import socket

    machine = json.loads((testnet / "ready").read_text())["machine"]
    localhost = str(socket.getaddrinfo("localhost", 80, type=socket.SOCK_STREAM)[0][4][0])
    url, reason = (text.replace("MACHINE", machine).replace("LOCALHOST", localhost)
                   for text in (url, reason))
    listed = ["127.1", "0x7f000001", "2130706433", "127.0.0.1", "0.0.0.0", "localhost",  # noqa: S104
              "self-lo.lnkt", "self-eth.lnkt", machine, "10.211.0.1", "10.211.0.2",
              "meta.lnkt", *_SELF_V6]
    spec = write_spec(f'name = "tests"\n[files]\nread = {toml_list(testnet)}\n'
                      f'[network]\nmode = "proxy"\nhosts = {toml_list(*listed)}\n')
    env = sandbox_env
    names = None
    if any(name in url for name in _SELF_V6):
        names = CountingDNS(_SELF_V6)
        env = {**sandbox_env, "LNK_SANDBOX_DNS": f"127.0.0.1:{names.port}"}
    try:
        result = run_sandbox(spec, PYTHON, "-I", "-c", _ASK, url, env=env)
    finally:
        if names is not None:
            names.stop()
    assert result.stdout == f"{status}|{reason}\n", result
    authority = url.split("/")[2]
    if authority.startswith("["):
        inner, _, port = authority[1:].partition("]")
        authority = f"[{ipaddress.ip_address(inner)}]{port}"
    port = ":443" if url.startswith("https://") else ":80"
    target = authority if ":" in authority.rsplit("]", 1)[-1] else authority + port
    refused = [line.split("\t")[2:] for line in wire_log(sandbox_env).splitlines()
               if line.split("\t")[1] == "refused"]
    logged = "-" if status == "400" else target
    assert refused == [[logged, f"reason={reason}"]], refused


# -- N1: the only way out is the proxy ---------------------------------------------------------

_DIRECT = f"""
import socket, errno
found = {{}}
def attempt(name, action):
    try:
        action()
        found[name] = "OK"
    except OSError as error:
        found[name] = errno.errorcode.get(error.errno, str(error))
def tcp():
    socket.create_connection(("{ORIGIN_ADDRESS}", 80), timeout=3)
def tcp6():
    socket.create_connection(("2001:db8::1", 80), timeout=3)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("{ORIGIN_ADDRESS}", 53))
def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def packet():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
def netlink_route():
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
    s.bind((0, 0))
    import struct
    # RTM_NEWROUTE for a default route would need CAP_NET_ADMIN: refused
    s.send(struct.pack("=LHHLL", 28, 24, 0x405, 1, 0) + bytes(12))
    reply = s.recv(4096)
    code = struct.unpack("=i", reply[16:20])[0]
    if code != 0:
        raise OSError(-code, "netlink")
for name, action in list(globals().items()):
    if name in ("tcp", "tcp6", "udp", "raw", "packet", "netlink_route"):
        attempt(name, action)
print(found)
"""


def test_N1_no_route_and_no_other_socket_reaches_out(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]
) -> None:
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", _DIRECT, env=env)
    found = eval(result.stdout)  # noqa: S307 (the dict this test printed)
    assert found["tcp"] in ("ENETUNREACH", "EHOSTUNREACH"), found
    assert found["tcp6"] in ("ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"), found
    assert found["udp"] in ("ENETUNREACH", "EHOSTUNREACH"), found
    # A raw socket: no capability in the sandbox's namespace. AF_PACKET: a family no
    # sandbox opens (the seccomp filter's allow-list of families).
    assert found["raw"] == "EPERM" and found["packet"] == "EAFNOSUPPORT", found
    assert found["netlink_route"] == "EPERM", found
    direct = run_sandbox(spec, "curl", "-s", "-m", "5", "--noproxy", "*",
                         f"http://{ORIGIN_ADDRESS}/ok", env=env)
    assert direct.returncode != 0 and "fine" not in direct.stdout


# -- N5: a tunnel's ClientHello names its host -------------------------------------------------

_TUNNEL = """
import os, socket, ssl, sys
def tunnel(target, sni):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=8)
    s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
    if b" 200 " not in s.recv(4096):
        return "no-tunnel"
    context = ssl.create_default_context(cafile=sys.argv[1])
    context.check_hostname = False
    try:
        t = context.wrap_socket(s, server_hostname=sni)
        t.sendall(b"GET /ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\nConnection: close\\r\\n\\r\\n")
        data = b""
        while chunk := t.recv(4096):
            data += chunk
        return "served" if b"fine" in data else "closed"
    except (OSError, ssl.SSLError):
        return "closed"
print({
    "same": tunnel("allowed.lnkt:443", "allowed.lnkt"),
    "other": tunnel("allowed.lnkt:443", "denied.lnkt"),
    "none": tunnel("allowed.lnkt:443", None),
    "ip": tunnel("allowed.lnkt:443", "10.212.0.2"),
    "fronting-case": tunnel("allowed.lnkt:443", "ALLOWED.lnkt"),
})
"""


def test_N5_a_tunnel_naming_another_host_or_none_is_closed(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], testnet: Path,
    sandbox_env: dict[str, str],
) -> None:
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", _TUNNEL, str(testnet / "cert.pem"), env=env)
    found = eval(result.stdout)  # noqa: S307
    assert found == {"same": "served", "other": "closed", "none": "closed", "ip": "closed",
                     "fronting-case": "served"}, (found, result.stderr)
    log = wire_log(sandbox_env)
    assert "reason=the tunnel's TLS ClientHello names another host (denied.lnkt)" in log
    assert "reason=the tunnel's TLS ClientHello names no host" in log


def test_plain_tcp_through_a_tunnel_to_a_listed_port(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]
) -> None:
    code = ("import socket\n"
            "s = socket.create_connection(('127.0.0.1', 3128), timeout=8)\n"
            "s.sendall(b'CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n')\n"
            "assert b' 200 ' in s.recv(4096)\n"
            "s.sendall(b'echo me'); print(s.recv(100).decode())\n")
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", code, env=env)
    assert result.stdout.strip() == "echo me", result


# -- N4: smuggling heads ----------------------------------------------------------------------

_RAW = """
import socket, sys
heads = {
    "bare LF": b"GET http://allowed.lnkt/ok HTTP/1.1\\nHost: allowed.lnkt\\n\\n",
    "bare CR": b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\rX: y\\r\\n\\r\\n",
    "NUL": b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\x00\\r\\n\\r\\n",
    "obs-fold": b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\nX: a\\r\\n b\\r\\n\\r\\n",
    "CL+TE": b"POST http://allowed.lnkt/p HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\n",
    "two CL": b"POST http://allowed.lnkt/p HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\nContent-Length: 1\\r\\nContent-Length: 2\\r\\n\\r\\nab",
    "userinfo": b"GET http://allowed.lnkt@denied.lnkt/ok HTTP/1.1\\r\\nHost: denied.lnkt\\r\\n\\r\\n",
    "long head": b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\nX: " + b"a" * 40000 + b"\\r\\n\\r\\n",
    "origin form": b"GET /ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\n\\r\\n",
    "verb": b"GET http://127.0.0.1:3128/_link/model HTTP/1.1\\r\\nHost: 127.0.0.1:3128\\r\\n\\r\\n",
    "ipv6 literal": b"GET http://[::1]/ HTTP/1.1\\r\\nHost: [::1]\\r\\n\\r\\n",
    "fronting": b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: denied.lnkt\\r\\n\\r\\n",
    "host with port": b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt:80\\r\\nConnection: close\\r\\n\\r\\n",
}
found = {}
for name, head in heads.items():
    s = socket.create_connection(("127.0.0.1", 3128), timeout=8)
    s.sendall(head)
    reply = b""
    try:
        while chunk := s.recv(65536):
            reply += chunk
    except OSError:
        pass
    head, _, body = reply.partition(b"\\r\\n\\r\\n")
    found[name] = (head.split(b"\\r\\n", 1)[0].decode(errors="replace"),
                   body.decode(errors="replace").strip())
print(found)
"""


def test_N4_smuggling_heads_are_refused_before_anything_is_sent(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]
) -> None:
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", _RAW, env=env)
    found = eval(result.stdout)  # noqa: S307
    bad = "HTTP/1.1 400 Bad Request"
    assert found == {
        "bare LF": (bad, "a line of the request head ends in a bare LF"),
        "bare CR": (bad, "the request head has a bare CR"),
        "NUL": (bad, "the request head has a control character (0x00)"),
        "obs-fold": (bad, "a header line is folded (obs-fold)"),
        "CL+TE": (bad, "both Content-Length and Transfer-Encoding"),
        "two CL": (bad, "more than one Content-Length"),
        "userinfo": (bad, "a URL with userinfo (user@host) is refused"),
        "long head": (bad, "the request head is larger than 32768 bytes"),
        "origin form": (bad, "the proxy takes absolute-form requests (http://host/…), "
                             "CONNECT, and its verbs' paths (/_link/…)"),
        # A verb's refusal: one line of JSON, its message the reason.
        "verb": ("HTTP/1.1 404 Not Found", '{"type":"error","error":{"type":'
                 '"lnk_sandbox_refused","code":404,"status":"NOT_FOUND","message":"the model '
                 'verb is off in this sandbox: [verbs] model = \\"anthropic\\" (or a list of '
                 'providers) turns it on; got GET /_link/model"},"ok":false,"error_code":404,'
                 '"description":"the model verb is off in this sandbox: [verbs] model = '
                 '\\"anthropic\\" (or a list of providers) turns it on; got GET /_link/model"}'),
        "ipv6 literal": ("HTTP/1.1 403 Forbidden", "[::1]:80 is not in this sandbox's hosts"),
        "fronting": (bad, "the Host header names another host than the request's URL"),
        "host with port": ("HTTP/1.1 200 OK", "fine"),
    }, found


# -- N11: the log keeps host and port only ------------------------------------------------------


def test_N11_the_log_has_host_and_port_never_a_path_query_or_body(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], sandbox_env: dict[str, str],
    testnet: Path,
) -> None:
    curl(run_sandbox, wire, "http://allowed.lnkt/ok?token=SECRETQUERY")
    curl(run_sandbox, wire, "--data", "SECRETBODY", "http://allowed.lnkt/SECRETPATH")
    curl(run_sandbox, wire, "--cacert", str(testnet / "cert.pem"),
         "https://allowed.lnkt/ok?k=SECRETTLS")
    curl(run_sandbox, wire, "http://denied.lnkt/SECRETREFUSED?x=SECRETQ2")
    log = wire_log(sandbox_env)
    for secret in ("SECRET", "/ok", "token"):
        assert secret not in log, secret
    events = [line.split("\t")[1:3] for line in log.splitlines()]
    assert ["allowed", "allowed.lnkt:80"] in events and ["ended", "allowed.lnkt:80"] in events
    assert ["allowed", "allowed.lnkt:443"] in events and ["ended", "allowed.lnkt:443"] in events
    assert ["refused", "denied.lnkt:80"] in events
    ended = next(line for line in log.splitlines() if "\tended\tallowed.lnkt:443\t" in line)
    assert "sent=" in ended and "received=" in ended and "seconds=" in ended
    shown = subprocess.run([LNK_SANDBOX, "log", "tests", "--json"], env=sandbox_env,
                           capture_output=True, text=True, check=True)
    entries = [json.loads(line) for line in shown.stdout.splitlines()]
    assert {entry["event"] for entry in entries} == {"allowed", "ended", "refused", "started",
                                                     "exited"}
    assert all(set(entry) >= {"wire", "time", "event", "target"} for entry in entries)


# -- fails closed -------------------------------------------------------------------------------


def test_the_sandbox_has_no_way_out_when_the_proxy_dies(
    wire: tuple[Path, dict[str, str]], tmp_path: Path, write_spec: WriteSpec
) -> None:
    spec, env = wire
    gates = tmp_path / "gates"
    gates.mkdir()
    gated = write_spec(spec.read_text().replace("[network]",
                                                f"write = {toml_list(gates)}\n[network]"))
    gate, running = gates / "open", gates / "running"
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(gated), "--", "/bin/sh", "-c",
         f": > {Q(str(running))}; while [ ! -e {Q(str(gate))} ]; do sleep 0.05; done; "
         "curl -s -m 5 -o /dev/null -w '%{http_code}' http://allowed.lnkt/ok; echo; "
         f"curl -s -m 5 --noproxy '*' http://{ORIGIN_ADDRESS}/ok; echo direct=$?"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(running.exists, "the program running")
        proxy = _find_child(run.pid, b"proxy")
        os.kill(proxy, signal.SIGKILL)
        wait_until(lambda: ended(proxy), "the killed proxy to end")
        gate.touch()
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
    lines = stdout.splitlines()
    assert lines[0] == "000", (stdout, stderr)
    assert "fine" not in stdout and lines[-1] != "direct=0"


def _find_child(parent: int, word: bytes) -> int:
    def child() -> int | None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                words = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if word in words and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                return int(entry)
        return None

    return wait_until(child, f"a child {word!r} of {parent}")


def test_many_concurrent_tunnels_are_all_served(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]
) -> None:
    code = """
import socket, threading
results = []
def one():
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
        s.sendall(b"CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n")
        if b" 200 " in s.recv(4096):
            s.sendall(b"ping")
            results.append(s.recv(10) == b"ping")
        s.close()
    except OSError:
        results.append(False)
threads = [threading.Thread(target=one) for _ in range(200)]
[t.start() for t in threads]
[t.join() for t in threads]
print(sum(results), len(results))
"""
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", code, env=env)
    assert result.stdout.split() == ["200", "200"], result


_KEEP_ALIVE = """
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\n\\r\\n"
          b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\n\\r\\n"
          b"GET http://denied.lnkt/ok HTTP/1.1\\r\\nHost: denied.lnkt\\r\\n\\r\\n"
          b"GET http://allowed.lnkt/ok HTTP/1.1\\r\\nHost: allowed.lnkt\\r\\n\\r\\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
import re
print([found.decode() for found in re.findall(rb"HTTP/1\\.1 [0-9]{3} [A-Za-z]+", data)])
"""


def test_a_kept_alive_connection_has_each_request_decided_afresh(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]], sandbox_env: dict[str, str]
) -> None:
    spec, env = wire
    result = run_sandbox(spec, PYTHON, "-I", "-c", _KEEP_ALIVE, env=env)
    # Two served on one connection; the third refused (and the connection closed with it).
    assert eval(result.stdout) == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK",  # noqa: S307
                                   "HTTP/1.1 403 Forbidden"], result
    reused = curl(run_sandbox, wire, "-o", "/dev/null", "-o", "/dev/null", "-w",
                  "%{num_connects} ", "http://allowed.lnkt/ok", "http://allowed.lnkt/ok")
    assert reused.stdout.split()[:2] == ["1", "0"], reused  # the second reused the first's


def test_forwarding_edge_cases_real_clients_send(
    run_sandbox: RunSandbox, wire: tuple[Path, dict[str, str]]
) -> None:
    head = curl(run_sandbox, wire, "-I", "http://allowed.lnkt/ok")
    assert head.stdout.splitlines()[0].startswith("HTTP/1.1 200") and "200" in head.stdout
    chunked = curl(run_sandbox, wire, "-H", "Transfer-Encoding: chunked", "--data-binary",
                   "x" * 5000, "http://allowed.lnkt/p")
    assert code_of(chunked) in ("200", "411", "501"), chunked  # the origin's own answer
    spec, env = wire
    expect = run_sandbox(spec, "curl", "-s", "-m", "20", "-w", "\n%{http_code}", "-H",
                         "Expect: 100-continue", "--data-binary", "@-",
                         "http://allowed.lnkt/p", env=env, stdin="y" * 2_000_000)
    assert expect.stdout == "got 2000000\n\n200", expect
    old = curl(run_sandbox, wire, "-0", "http://allowed.lnkt/ok")
    assert old.stdout == "fine\n\n200", old
    missing = curl(run_sandbox, wire, "http://allowed.lnkt/no-such-file")
    assert code_of(missing) == "404"
    many = run_sandbox(spec, "curl", "-s", "-m", "20", "-w", "%{http_code} ",
                       "--data-binary", "@-", "http://allowed.lnkt/p", "http://allowed.lnkt/p",
                       "http://allowed.lnkt/p", env=env, stdin="z" * 300_000)
    assert many.stdout.count("got 300000") == 3 and many.returncode == 0, many
