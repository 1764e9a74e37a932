"""Test hosts that are not this machine, for the wire's tests: real network namespaces.

    python -m tests.testnet up STATE-FOLDER     (as root; .ci/run does it for the user run)
    python -m tests.testnet down STATE-FOLDER

An origin namespace (10.212.0.2) reached through a router namespace, so that its network
is not one of this machine's own (this machine's own networks are refused by the
proxy), serving HTTP on 80 and HTTPS on 443 (a self-signed certificate the clients are
told to trust) from a folder of test files (among them a git repository, a PEP 503 index
for pip at `/simple/` with one real wheel, lnktpkg 1.0, and a minimal npm registry at
`/npm/` (NPM_REGISTRY names it on other.lnkt): lnktpkg 1.0.0's package document, sent as
JSON, whose `dist.tarball` names `/npm/-/lnktpkg-1.0.0.tgz` on the same host, a real
package tarball made at `up` with its `dist.integrity` and `dist.shasum`; and two paths
of its own: `/upgrade` with an Upgrade field answers 101 and echoes every byte after;
`/drop-next` answers, then closes its connection unanswered at the next request on it),
a plain TCP echo on 7, a "bulk" source on 9 (send a byte count and a newline, get that
many zeros), a DNS server on 53 (UDP and TCP, answering from STATE/dns/zone.json:
tests/testservers.py) and PostgreSQL 15 on 5432 (trust authentication; database `lnkt`,
table `greeting` holding 'hello-from-origin').
Names go into /etc/hosts (and are removed): allowed.lnkt, denied.lnkt, other.lnkt → the
origin; self-lo.lnkt → 127.0.0.1; self-eth.lnkt → this machine's own address; meta.lnkt →
169.254.169.254. A second origin address (10.212.0.3) serves the fake model providers
over HTTPS on 443 (tests/fakeproviders.py: api.anthropic.com, api.openai.com,
generativelanguage.googleapis.com, openrouter.ai, and a fake Bot API for api.telegram.org,
which the test DNS server answers with
that address and /etc/hosts never names), with a certificate signed by a test CA whose
PEM is STATE/providers/ca.pem; what they receive is logged in STATE/providers/requests.jsonl.
The state folder holds the certificate, the served files, the DNS zone
and query log (world-writable, for the ordinary-user run), PostgreSQL's data (owned by
the postgres user; kept under the postgres user's home instead when it cannot reach the
state folder, as under pytest's private temporary folder) and a `ready` file, JSON:

    {"server": PID, "machine": ADDRESS, "dns": PID, "bulk": PID, "postgres": PID,
     "postgres_folder": PATH, "addresses": {"http": "10.212.0.2:80", ...}}
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests import fakeproviders, testservers

ROUTER, ORIGIN = "lnkt-router", "lnkt-origin"
ORIGIN_ADDRESS = "10.212.0.2"
# The origin's second address: the fake model providers (HTTPS on 443 for their real names).
PROVIDERS_ADDRESS = fakeproviders.PROVIDERS_ADDRESS
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PG_USER = "postgres"
PG_FALLBACK = "lnkt-testnet"  # under the postgres user's home
SERVERS = Path(__file__).with_name("testservers.py")
PROVIDERS = Path(__file__).with_name("fakeproviders.py")
WAIT_SECONDS = 20
NAMES = ("allowed.lnkt", "denied.lnkt", "other.lnkt")
HOSTS_MARK = "# lnk-sandbox tests"
# The npm registry the origin serves (tests/test_learn_network.py installs from it): a
# name of its own, so that learn's offer for npm is not pip's index (allowed.lnkt).
NPM_REGISTRY = "http://other.lnkt/npm/"
NPM_PACKAGE = "lnktpkg"

_SERVER = r'''
import http.server, os, socket, socketserver, ssl, sys, threading, functools
root, cert, key, addr = sys.argv[1:5]
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    disable_nagle_algorithm = True
    def log_message(self, *args):
        pass
    def guess_type(self, path):
        # The npm registry's package documents have no suffix; a registry sends them as
        # JSON.
        if os.path.relpath(path, root).startswith("npm" + os.sep) and not path.endswith(".tgz"):
            return "application/json"
        return super().guess_type(path)
    def do_GET(self):
        if getattr(self, "drop_next", False):
            # The request after /drop-next: the connection is closed unanswered, as a
            # server does that timed out a kept-alive connection meanwhile.
            self.close_connection = True
            return
        if self.path == "/drop-next":
            self.drop_next = True
            reply = b"the next request on this connection is dropped\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)
            return
        if self.path == "/upgrade" and self.headers.get("Upgrade"):
            # A WebSocket-style switch: 101, then every byte echoed as it comes.
            self.send_response(101)
            self.send_header("Upgrade", self.headers["Upgrade"])
            self.send_header("Connection", "Upgrade")
            self.end_headers()
            self.close_connection = True
            while data := self.rfile.read1(65536):
                self.wfile.write(data)
            return
        super().do_GET()
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        reply = f"got {len(body)}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
H = functools.partial(Handler, directory=root)
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024
plain = Server((addr, 80), H)
tls = Server((addr, 443), H)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
tls.socket = context.wrap_socket(tls.socket, server_side=True)
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)
class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
echo = EchoServer((addr, 7), Echo)
for server in (tls, echo):
    threading.Thread(target=server.serve_forever, daemon=True).start()
plain.serve_forever()
'''


def _run(*argv: str, namespace: str = "") -> None:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    subprocess.run([*prefix, *argv], check=True, capture_output=True)


def _machine_address() -> str:
    done = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                          capture_output=True, text=True, check=True)
    for line in done.stdout.splitlines():
        address = line.split()[3].split("/")[0]
        if not address.startswith("10.211."):
            return address
    return "192.0.2.1"


def _hosts(add: list[str] | None) -> None:
    lines = [line for line in Path("/etc/hosts").read_text().splitlines()
             if HOSTS_MARK not in line]
    if add:
        lines += [f"{entry} {HOSTS_MARK}" for entry in add]
    Path("/etc/hosts").write_text("\n".join(lines) + "\n")


def _files(state: Path) -> None:
    www = state / "www"
    www.mkdir(parents=True, exist_ok=True)
    (www / "ok").write_text("fine\n")
    with open(www / "big", "wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # 64 MiB of zeros, for throughput
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=allowed.lnkt",
                    "-addext", "subjectAltName=" + ",".join(f"DNS:{name}" for name in NAMES),
                    "-keyout", str(state / "key.pem"), "-out", str(state / "cert.pem")],
                   check=True, capture_output=True)
    repo = state / "source"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text("a repository served over http\n")
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(www / "repo.git")],
                   check=True)
    subprocess.run(["git", "-C", str(www / "repo.git"), "update-server-info"], check=True)
    _wheel(www)
    _npm_registry(www, NPM_REGISTRY)


def _wheel(www: Path) -> None:
    """A real, tiny wheel in a PEP 503 simple index, for pip."""
    import base64
    import hashlib
    import zipfile

    name = "lnktpkg-1.0-py3-none-any.whl"
    files = {
        "lnktpkg/__init__.py": "VALUE = 42\n",
        "lnktpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: lnktpkg\nVersion: 1.0\n",
        "lnktpkg-1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: lnk-tests\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append("lnktpkg-1.0.dist-info/RECORD,,")
    folder = www / "simple" / "lnktpkg"
    folder.mkdir(parents=True)
    with zipfile.ZipFile(folder / name, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr("lnktpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    (folder / "index.html").write_text(f'<a href="{name}">{name}</a>\n')
    (www / "simple" / "index.html").write_text('<a href="lnktpkg/">lnktpkg</a>\n')


def _npm_tarball() -> bytes:
    """lnktpkg 1.0.0 as npm packs it: `package/package.json` and `package/index.js` in a
    gzip'd tar, with fixed times and owners so that its digests are the same every `up`."""
    import gzip
    import io
    import tarfile

    files = {"package/package.json": json.dumps({"name": NPM_PACKAGE, "version": "1.0.0",
                                                  "main": "index.js", "license": "MIT"},
                                                 indent=2) + "\n",
             "package/index.js": "module.exports = 42;\n"}
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w", format=tarfile.USTAR_FORMAT) as archive:
        for path, text in files.items():
            member = tarfile.TarInfo(path)
            member.size, member.mode, member.mtime = len(text.encode()), 0o644, 0
            archive.addfile(member, io.BytesIO(text.encode()))
    return gzip.compress(packed.getvalue(), mtime=0)


def _npm_registry(www: Path, registry: str) -> None:
    """A minimal npm registry at `registry` (served from www/npm/): lnktpkg's package
    document (what `npm install lnktpkg` asks for first) and its tarball, which the
    document names by an absolute address on the same host, as a registry does, with the
    digests npm checks it by (`dist.integrity`, sha512; `dist.shasum`, sha1)."""
    import base64
    import hashlib

    tarball = _npm_tarball()
    name = f"{NPM_PACKAGE}-1.0.0.tgz"
    folder = www / "npm"
    (folder / "-").mkdir(parents=True)
    (folder / "-" / name).write_bytes(tarball)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    version = {"name": NPM_PACKAGE, "version": "1.0.0", "main": "index.js", "license": "MIT",
               "dist": {"tarball": f"{registry}-/{name}", "integrity": integrity,
                        "shasum": hashlib.sha1(tarball).hexdigest()}}  # noqa: S324 (npm's)
    (folder / NPM_PACKAGE).write_text(json.dumps(
        {"name": NPM_PACKAGE, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}))


def _postgres_folder(state: Path) -> Path:
    """Where PostgreSQL's data goes: under the state folder if the postgres user can reach
    it, else (pytest's temporary folders are root's alone) under the postgres user's home."""
    reach = subprocess.run(["runuser", "-u", PG_USER, "--", "test", "-x", str(state)],
                           capture_output=True, check=False, cwd="/")
    if reach.returncode == 0:
        return state / "postgres"
    import pwd

    return Path(pwd.getpwnam(PG_USER).pw_dir) / PG_FALLBACK


def _as_postgres(*argv: str, namespace: str = "") -> subprocess.CompletedProcess[str]:
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return subprocess.run([*prefix, "runuser", "-u", PG_USER, "--", *argv], cwd="/",
                          capture_output=True, text=True, check=False, start_new_session=True)


def _postgres_init(folder: Path) -> subprocess.Popen[bytes]:
    """initdb, started in the background (it takes a few seconds; the rest of `up` goes on)."""
    import pwd

    if folder.exists():
        shutil.rmtree(folder)
    (folder / "run").mkdir(parents=True)
    user = pwd.getpwnam(PG_USER)
    for path in (folder, folder / "run"):
        os.chown(path, user.pw_uid, user.pw_gid)
        os.chmod(path, 0o700)
    return subprocess.Popen(
        ["runuser", "-u", PG_USER, "--", str(PG_BIN / "initdb"), "-D", str(folder / "data"),
         "-U", PG_USER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync",
         "--no-instructions"],
        cwd="/", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _postgres_start(folder: Path, init: subprocess.Popen[bytes]) -> int:
    """Finish initdb, configure, start in the origin namespace, make the `lnkt` database;
    the postmaster's pid."""
    output, _ = init.communicate(timeout=120)
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {output.decode(errors='replace')}")
    data = folder / "data"
    with open(data / "postgresql.conf", "a") as conf:
        conf.write(f"\n# lnk-sandbox test net\nlisten_addresses = '{ORIGIN_ADDRESS}'\n"
                   f"port = {testservers.PG_PORT}\n"
                   f"unix_socket_directories = '{folder / 'run'}'\n"
                   "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
    (data / "pg_hba.conf").write_text("local all all trust\nhost all all 0.0.0.0/0 trust\n"
                                      "host all all ::/0 trust\n")
    started = _as_postgres(str(PG_BIN / "pg_ctl"), "start", "-w", "-t", str(WAIT_SECONDS),
                           "-D", str(data), "-l", str(folder / "log"), namespace=ORIGIN)
    if started.returncode != 0:
        log = (folder / "log").read_text(errors="replace") if (folder / "log").exists() else ""
        raise RuntimeError(f"postgres did not start: {started.stdout}{started.stderr}{log}")
    deadline = time.monotonic() + WAIT_SECONDS
    psql = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", ORIGIN_ADDRESS,
            "-p", str(testservers.PG_PORT), "-U", PG_USER]
    while subprocess.run(["pg_isready", "-q", "-t", "1", "-h", ORIGIN_ADDRESS,
                          "-p", str(testservers.PG_PORT)], check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise RuntimeError("postgres does not accept connections on the origin")
        time.sleep(0.05)
    subprocess.run([*psql, "-d", "postgres", "-c", "create database lnkt"], check=True,
                   capture_output=True, cwd="/")
    subprocess.run([*psql, "-d", "lnkt", "-c", "create table greeting(word text); "
                    "insert into greeting values ('hello-from-origin')"],
                   check=True, capture_output=True, cwd="/")
    return int((data / "postmaster.pid").read_text().split()[0])


def _postgres_stop(folder: Path) -> None:
    data = folder / "data"
    pid_file = data / "postmaster.pid"
    pid = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int(pid_file.read_text().split()[0])
    if pid_file.exists():
        _as_postgres(str(PG_BIN / "pg_ctl"), "stop", "-m", "immediate", "-w", "-t", "10",
                     "-D", str(data))
    if pid:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)


def _wait_tcp(port: int, what: str, address: str = ORIGIN_ADDRESS) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test origin's {what} did not come up") from None
            time.sleep(0.05)


def _origin_server(*argv: str, namespace: str = ORIGIN) -> int:
    """A server run as root in the origin namespace, in its own session; its pid."""
    return subprocess.Popen(
        ["ip", "netns", "exec", namespace, *argv], cwd="/",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True).pid


def up(state: Path) -> None:
    down(state)
    state.mkdir(parents=True, exist_ok=True)
    os.chmod(state, 0o755)  # noqa: S103 (the ordinary-user run reads the test files)
    postgres = _postgres_folder(state)
    init = _postgres_init(postgres)
    try:
        _up(state, postgres, init)
    except BaseException:
        if init.poll() is None:
            init.kill()
            init.wait()
        raise


def _up(state: Path, postgres: Path, init: subprocess.Popen[bytes]) -> None:
    _files(state)
    (state / "server.py").write_text(_SERVER)
    for top, folders, files in os.walk(state):
        # PostgreSQL's folder (being filled by initdb just now) keeps its own modes.
        folders[:] = [name for name in folders if Path(top, name) != postgres]
        for name in folders:
            os.chmod(Path(top, name), 0o755)  # noqa: S103
        for name in files:
            os.chmod(Path(top, name), 0o644)
    testservers.write_initial_zone(state)
    testservers.write_fixed_zone(state, {name: {"A": [PROVIDERS_ADDRESS]}
                                         for name in fakeproviders.SERVED_NAMES})
    fakeproviders.make_certificates(state)
    _run("ip", "netns", "add", ROUTER)
    _run("ip", "netns", "add", ORIGIN)
    _run("ip", "link", "add", "lnkt-h", "type", "veth", "peer", "name", "lnkt-r0")
    _run("ip", "link", "set", "lnkt-r0", "netns", ROUTER)
    _run("ip", "addr", "add", "10.211.0.1/30", "dev", "lnkt-h")
    _run("ip", "link", "set", "lnkt-h", "up")
    _run("ip", "addr", "add", "10.211.0.2/30", "dev", "lnkt-r0", namespace=ROUTER)
    _run("ip", "link", "set", "lnkt-r0", "up", namespace=ROUTER)
    # IPv6 on the same link, for [lan] by IPv6 address (no duplicate address detection:
    # the addresses are usable at once).
    _run("ip", "-6", "addr", "add", "fd00:211::1/64", "dev", "lnkt-h", "nodad")
    _run("ip", "-6", "addr", "add", f"{testservers.LAN_ADDRESS6}/64", "dev", "lnkt-r0",
         "nodad", namespace=ROUTER)
    _run("ip", "link", "set", "lo", "up", namespace=ROUTER)
    _run("ip", "link", "add", "lnkt-r1", "netns", ROUTER, "type", "veth", "peer", "name",
         "lnkt-o", "netns", ORIGIN)
    _run("ip", "addr", "add", "10.212.0.1/24", "dev", "lnkt-r1", namespace=ROUTER)
    _run("ip", "link", "set", "lnkt-r1", "up", namespace=ROUTER)
    _run("ip", "addr", "add", f"{ORIGIN_ADDRESS}/24", "dev", "lnkt-o", namespace=ORIGIN)
    _run("ip", "addr", "add", f"{PROVIDERS_ADDRESS}/24", "dev", "lnkt-o", namespace=ORIGIN)
    _run("ip", "link", "set", "lnkt-o", "up", namespace=ORIGIN)
    _run("ip", "link", "set", "lo", "up", namespace=ORIGIN)
    _run("ip", "route", "add", "default", "via", "10.212.0.1", namespace=ORIGIN)
    _run("sysctl", "-qw", "net.ipv4.ip_forward=1", namespace=ROUTER)
    _run("ip", "route", "add", "10.212.0.0/24", "via", "10.211.0.2")
    server = _origin_server(sys.executable, str(state / "server.py"), str(state / "www"),
                            str(state / "cert.pem"), str(state / "key.pem"), ORIGIN_ADDRESS)
    dns = _origin_server(sys.executable, str(SERVERS), "dns", str(state), ORIGIN_ADDRESS)
    bulk = _origin_server(sys.executable, str(SERVERS), "bulk", ORIGIN_ADDRESS)
    raw = _origin_server(sys.executable, str(SERVERS), "raw", ORIGIN_ADDRESS)
    providers = _origin_server(sys.executable, str(PROVIDERS), str(state), PROVIDERS_ADDRESS)
    lan = _origin_server(sys.executable, str(SERVERS), "echo", testservers.LAN_ADDRESS,
                         str(testservers.LAN_ECHO_PORT), namespace=ROUTER)
    lan6 = _origin_server(sys.executable, str(SERVERS), "echo", testservers.LAN_ADDRESS6,
                          str(testservers.LAN_ECHO_PORT), namespace=ROUTER)
    # Recorded at once, so that `down` ends them even if the rest of `up` fails.
    ready = {"server": server, "machine": _machine_address(), "dns": dns, "bulk": bulk,
             "raw": raw,
             "lan": lan, "lan6": lan6, "providers": providers,
             "postgres": 0, "postgres_folder": str(postgres),
             "addresses": {"http": f"{ORIGIN_ADDRESS}:80", "https": f"{ORIGIN_ADDRESS}:443",
                           "echo": f"{ORIGIN_ADDRESS}:7",
                           "bulk": f"{ORIGIN_ADDRESS}:{testservers.BULK_PORT}",
                           "raw": f"{ORIGIN_ADDRESS}:{testservers.RAW_PORT}",
                           "dns": testservers.DNS_SERVER,
                           "providers": f"{PROVIDERS_ADDRESS}:{fakeproviders.PROVIDERS_PORT}",
                           "postgres": f"{testservers.PG_HOST_ADDRESS}:{testservers.PG_PORT}"}}
    (state / "servers.json").write_text(json.dumps(ready))
    _hosts([f"{ORIGIN_ADDRESS} {' '.join(NAMES)}", "127.0.0.1 self-lo.lnkt",
            f"{_machine_address()} self-eth.lnkt", "169.254.169.254 meta.lnkt"])
    for _ in range(200):
        probe = subprocess.run(["curl", "-s", "-m", "1", f"http://{ORIGIN_ADDRESS}/ok"],
                               capture_output=True, text=True, check=False)
        if probe.stdout == "fine\n":
            break
        time.sleep(0.05)
    else:
        raise RuntimeError("the test origin did not come up")
    _wait_tcp(53, "DNS server")
    _wait_tcp(testservers.BULK_PORT, "bulk server")
    _wait_tcp(testservers.RAW_PORT, "raw response server")
    _wait_tcp(fakeproviders.PROVIDERS_PORT, "fake providers", PROVIDERS_ADDRESS)
    _wait_tcp(testservers.LAN_ECHO_PORT, "lan echo server", testservers.LAN_ADDRESS)
    _wait_tcp(testservers.LAN_ECHO_PORT, "lan echo server (IPv6)", testservers.LAN_ADDRESS6)
    ready["postgres"] = _postgres_start(postgres, init)
    (state / "servers.json").write_text(json.dumps(ready))
    (state / "ready").write_text(json.dumps(ready))
    for path in (state / "servers.json", state / "ready"):
        os.chmod(path, 0o644)


def down(state: Path) -> None:
    recorded: dict[str, object] = {}
    for name in ("ready", "servers.json"):
        with contextlib.suppress(OSError, ValueError):
            recorded = json.loads((state / name).read_text())
            break
    for key in ("server", "dns", "bulk", "raw", "lan", "lan6", "providers"):
        pid = recorded.get(key)
        if isinstance(pid, int) and pid > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    folders = {state / "postgres"}
    if isinstance(recorded.get("postgres_folder"), str):
        folders.add(Path(str(recorded["postgres_folder"])))
    with contextlib.suppress(KeyError):
        import pwd

        folders.add(Path(pwd.getpwnam(PG_USER).pw_dir) / PG_FALLBACK)
    for folder in folders:
        _postgres_stop(folder)
    # Whatever still runs in the origin namespace was started by `up`: end it, by pid.
    left = subprocess.run(["ip", "netns", "pids", ORIGIN], capture_output=True, text=True,
                          check=False)
    for pid_text in left.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_text), signal.SIGKILL)
    subprocess.run(["ip", "route", "del", "10.212.0.0/24"], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", "lnkt-h"], capture_output=True, check=False)
    for namespace in (ORIGIN, ROUTER):
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
    _hosts(None)
    if state.exists():
        shutil.rmtree(state)


if __name__ == "__main__":
    action, folder = sys.argv[1], Path(sys.argv[2])
    up(folder) if action == "up" else down(folder)
