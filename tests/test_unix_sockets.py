"""N1 for unix sockets (issue 12 item 1): a program inside connects or sends only to a
pathname socket made inside the same sandbox. Attacked from inside real sandboxes with
real listeners outside (in a folder the spec reads, one it writes, another sandbox's),
through links, relative paths and races on the path and on the descriptor; and what must
keep working (servers inside, socketpair, abstract sockets, multiprocessing, PostgreSQL)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
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

PYTHON = os.path.realpath("/usr/bin/python3")
REFUSAL = "it was not made inside this sandbox (the sandbox's one way out is its wire)"


class Listener:
    """A unix socket server outside any sandbox, counting what reaches it."""

    def __init__(self, path: Path, kind: int = socket.SOCK_STREAM) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, kind)
        self.sock.bind(str(path))
        self.reached = 0
        self.stopped = False
        if kind == socket.SOCK_STREAM:
            self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, args=(kind,), daemon=True)
        self.thread.start()

    def _serve(self, kind: int) -> None:
        while not self.stopped:
            try:
                if kind == socket.SOCK_STREAM:
                    peer, _ = self.sock.accept()
                    peer.close()
                else:
                    self.sock.recv(4096)
            except (TimeoutError, OSError):
                continue
            self.reached += 1

    def close(self) -> None:
        self.stopped = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[Listener]:
    folder = tmp_path / "outside"
    folder.mkdir()
    listener = Listener(folder / "agent.sock")
    yield listener
    listener.close()


def _log(lnk_home: Path) -> str:
    path = lnk_home / "sandbox" / "programs.log"
    return path.read_text() if path.exists() else ""


CONNECT = """
import socket, sys
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    client.connect(sys.argv[1])
    print("connected")
except OSError as error:
    print("errno", error.errno)
"""


@pytest.mark.parametrize("grant", ["read", "write"])
def test_N1_a_unix_socket_outside_is_refused_by_its_path(
    grant: str, outside: Listener, write_spec: WriteSpec, run_sandbox: RunSandbox,
    lnk_home: Path,
) -> None:
    """Docker's socket, an ssh ControlMaster, a gpg-agent: a socket of a process outside,
    in a folder the spec grants. Read-only mounts never stopped connect()."""
    spec = write_spec(f"[files]\n{grant} = {toml_list(outside.path.parent)}\n")
    result = run_sandbox(spec, PYTHON, "-c", CONNECT, str(outside.path))
    assert result.stdout == "errno 13\n", result
    line = f"refused to connect to the unix socket {outside.path}: {REFUSAL}"
    assert f"lnk-sandbox: {line}" in result.stderr
    assert line in _log(lnk_home)
    assert outside.reached == 0


def test_N11_a_flood_of_refused_unix_connects_is_folded_not_written_whole(
    outside: Listener, write_spec: WriteSpec, run_sandbox: RunSandbox, lnk_home: Path,
) -> None:
    """Each refusal is named, but a flood of them is folded: the first few lines, then
    '… and N more like this' (never silently dropped)."""
    spec = write_spec(f"[files]\nread = {toml_list(outside.path.parent)}\n")
    program = ("import socket, sys\n"
               "for _ in range(500):\n"
               "    try:\n        socket.socket(socket.AF_UNIX).connect(sys.argv[1])\n"
               "    except PermissionError:\n        pass\n")
    result = run_sandbox(spec, PYTHON, "-c", program, str(outside.path))
    assert result.returncode == 0, result
    log = _log(lnk_home)
    named = log.count(f"refused to connect to the unix socket {outside.path}")
    folded = [line for line in log.splitlines() if "more like this" in line]
    assert 1 <= named <= 20, log
    assert folded and "unix sockets outside refused" in folded[-1], log
    counted = sum(int(line.split("… and ", 1)[1].split()[0]) for line in folded)
    assert named + counted == 500, log
    assert outside.reached == 0


def test_N1_a_link_made_inside_to_an_outside_socket_is_refused(
    outside: Listener, write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path,
) -> None:
    written = tmp_path / "work"
    written.mkdir()
    spec = write_spec(f"[files]\nread = {toml_list(outside.path.parent)}\n"
                      f"write = {toml_list(written)}\n")
    program = (f"import os; os.symlink({str(outside.path)!r}, 'innocent.sock'); "
               + CONNECT.replace("sys.argv[1]", "'innocent.sock'"))
    result = run_sandbox(spec, PYTHON, "-c", program, cwd=written)
    assert result.stdout == "errno 13\n", result
    assert "refused to connect to the unix socket innocent.sock" in result.stderr
    assert outside.reached == 0


def test_N1_a_datagram_sent_to_an_outside_socket_is_refused(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, lnk_home: Path,
) -> None:
    """journald's and syslog's sockets are datagram sockets: sendto with an address."""
    folder = tmp_path / "outside"
    folder.mkdir()
    listener = Listener(folder / "log.sock", socket.SOCK_DGRAM)
    try:
        spec = write_spec(f"[files]\nread = {toml_list(folder)}\n")
        program = ("import socket, sys\n"
                   "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                   "try:\n    s.sendto(b'forged', sys.argv[1]); print('sent')\n"
                   "except OSError as error:\n    print('errno', error.errno)\n"
                   "try:\n    s.connect(sys.argv[1]); print('connected')\n"
                   "except OSError as error:\n    print('errno', error.errno)\n")
        result = run_sandbox(spec, PYTHON, "-c", program, str(listener.path))
        assert result.stdout == "errno 13\nerrno 13\n", result
        assert f"refused to send to the unix socket {listener.path}: {REFUSAL}" in result.stderr
        assert f"refused to connect to the unix socket {listener.path}" in _log(lnk_home)
        time.sleep(0.2)
        assert listener.reached == 0
    finally:
        listener.close()


SERVE = """
import socket, sys, time
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1]); server.listen(8)
print("ready", flush=True)
server.settimeout(float(sys.argv[2]))
try:
    peer, _ = server.accept(); print("accepted", flush=True)
except OSError:
    print("none", flush=True)
"""


def test_N1_another_sandboxs_socket_is_refused_across_sandboxes(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
    run_sandbox: RunSandbox,
) -> None:
    """Sandbox B reads the folder sandbox A writes: A's socket is not B's."""
    shared = tmp_path / "shared"
    shared.mkdir()
    spec_a = write_spec(f"[files]\nwrite = {toml_list(shared)}\n")
    spec_b = write_spec(f"[files]\nread = {toml_list(shared)}\n")
    path = shared / "a.sock"
    serving = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec_a), "--", PYTHON, "-c", SERVE, str(path), "3"],
        env=sandbox_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert serving.stdout is not None
        assert serving.stdout.readline() == "ready\n"
        result = run_sandbox(spec_b, PYTHON, "-c", CONNECT, str(path))
        assert result.stdout == "errno 13\n", result
        out, _ = serving.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        assert out == "none\n"
    finally:
        end_run(serving)


RACE_PATH = """
import os, socket, sys, threading
outside, inside_path = sys.argv[1], "/tmp/inside.sock"
server = socket.socket(socket.AF_UNIX); server.bind(inside_path); server.listen(1024)
def accept():
    while True:
        peer, _ = server.accept(); peer.close()
threading.Thread(target=accept, daemon=True).start()
os.symlink(inside_path, "/tmp/link")
stop = False
def swap():
    flip = 0
    while not stop:
        target = outside if flip else inside_path
        os.symlink(target, "/tmp/link.new"); os.replace("/tmp/link.new", "/tmp/link")
        flip ^= 1
threading.Thread(target=swap, daemon=True).start()
counts = {"ok": 0, "refused": 0, "other": 0}
for _ in range(int(sys.argv[2])):
    client = socket.socket(socket.AF_UNIX)
    try:
        client.connect("/tmp/link"); counts["ok"] += 1
    except PermissionError:
        counts["refused"] += 1
    except OSError:
        counts["other"] += 1
    client.close()
stop = True
print(counts["ok"] > 0, counts["refused"] > 0)
"""


def test_N1_a_path_swapped_while_the_watch_checks_it_never_reaches_outside(
    outside: Listener, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """A link flipped between a socket made inside and one outside, as fast as a thread
    can, while another connects through it: the watch connects to the inode it checked."""
    spec = write_spec(f"[files]\nread = {toml_list(outside.path.parent)}\n")
    result = run_sandbox(spec, PYTHON, "-c", RACE_PATH, str(outside.path), "1500")
    assert result.stdout == "True True\n", result
    assert outside.reached == 0


RACE_DESCRIPTOR = """
import ctypes, os, socket, struct, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
path = sys.argv[1].encode()
address = struct.pack("=H", socket.AF_UNIX) + path + b"\\0"
inet = socket.socket(); unix = socket.socket(socket.AF_UNIX)
number = os.dup(inet.fileno())
stop = False
def swap():
    while not stop:
        os.dup2(unix.fileno(), number); os.dup2(inet.fileno(), number)
threading.Thread(target=swap, daemon=True).start()
seen = set()
for _ in range(int(sys.argv[2])):
    result = libc.connect(number, address, len(address))
    seen.add(0 if result == 0 else ctypes.get_errno())
stop = True
print(sorted(seen))
"""


def test_N1_a_descriptor_swapped_while_the_watch_checks_it_never_reaches_outside(
    outside: Listener, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """connect(N, outside path) while another thread swaps N between an inet socket
    (whose family the watch would let go on) and a unix one: the watch does the call on
    the socket it took, never letting the kernel read N or the address again."""
    spec = write_spec(f"[files]\nread = {toml_list(outside.path.parent)}\n")
    result = run_sandbox(spec, PYTHON, "-c", RACE_DESCRIPTOR, str(outside.path), "3000")
    assert result.returncode == 0, result
    seen = set(eval(result.stdout))  # noqa: S307 (our own program's printed list)
    assert 0 not in seen and 13 in seen, result.stdout  # EACCES; EAFNOSUPPORT on inet
    assert outside.reached == 0


INSIDE = """
import multiprocessing, os, socket, sys
results = []
for folder in ("/tmp", sys.argv[1]):
    path = os.path.join(folder, "inside.sock")
    server = socket.socket(socket.AF_UNIX); server.bind(path); server.listen(1)
    client = socket.socket(socket.AF_UNIX); client.connect(path)
    peer, _ = server.accept(); client.sendall(b"ping"); results.append(peer.recv(4).decode())
    os.chdir(folder)
    relative = socket.socket(socket.AF_UNIX); relative.connect("inside.sock")
    results.append("relative")
    dgram_path = os.path.join(folder, "inside.dgram")
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); sink.bind(dgram_path)
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"d", dgram_path)
    results.append(sink.recv(1).decode())
left, right = socket.socketpair(); left.sendall(b"pair"); results.append(right.recv(4).decode())
abstract = socket.socket(socket.AF_UNIX); abstract.bind("\\0lnk-test-abstract"); abstract.listen(1)
socket.socket(socket.AF_UNIX).connect("\\0lnk-test-abstract"); results.append("abstract")
try:
    socket.socket(socket.AF_UNIX).connect("/tmp/missing.sock")
except FileNotFoundError:
    results.append("missing")
open("/tmp/plain", "w").close()
try:
    socket.socket(socket.AF_UNIX).connect("/tmp/plain")
except ConnectionRefusedError:
    results.append("not-a-socket")
if __name__ == "__main__":
    manager = multiprocessing.Manager(); shared = manager.list([1]); shared.append(2)
    results.append(f"manager {list(shared)}"); manager.shutdown()
print(" ".join(results))
"""


def test_N1_unix_sockets_made_inside_keep_working(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, lnk_home: Path,
) -> None:
    written = tmp_path / "work"
    written.mkdir()
    script = tmp_path / "inside.py"
    script.write_text(INSIDE)
    spec = write_spec(f"[files]\nread = {toml_list(script)}\nwrite = {toml_list(written)}\n")
    result = run_sandbox(spec, PYTHON, str(script), str(written))
    assert result.stdout == ("ping relative d ping relative d pair abstract missing "
                             "not-a-socket manager [1, 2]\n"), result
    assert "refused" not in result.stderr
    assert "refused" not in _log(lnk_home)


def _run_as_a_person(script: str, run_sandbox: RunSandbox, tmp_path: Path
                     ) -> subprocess.CompletedProcess[str]:
    """`script` (sh, FOLDER in it replaced by a folder the sandbox writes) in a sandbox of
    an ordinary user: PostgreSQL and sshd will not run as root. Run by root, that is the
    postgres user, in a folder of its own; run by anyone else, themselves."""
    as_root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="lnk-person-")) if as_root else tmp_path
    try:
        os.chmod(base, 0o755)  # noqa: S103 (the postgres user must reach it)
        written = base / "work"
        written.mkdir()
        spec = base / "spec.toml"
        spec.write_text(f"[files]\nwrite = {toml_list(written)}\n")
        spec.chmod(0o644)
        script = script.replace("FOLDER", str(written))
        if not as_root:
            return run_sandbox(spec, "/bin/sh", "-c", script,
                               env={**os.environ, "LNK_HOME": str(base / "lnk"),
                                    "HOME": str(written)})
        (base / "lnk").mkdir(mode=0o700)
        for owned in (written, base / "lnk"):
            shutil.chown(owned, "postgres")
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", "env", f"LNK_HOME={base}/lnk",
             f"HOME={written}", LNK_SANDBOX, "run", "--spec", str(spec), "--",
             "/bin/sh", "-c", script],
            capture_output=True, text=True, cwd="/", timeout=SANDBOX_TIMEOUT_SECONDS * 2,
            check=False)
    finally:
        if as_root:
            shutil.rmtree(base, ignore_errors=True)


PG = Path("/usr/lib/postgresql/15/bin")


def test_N1_postgresql_serves_its_own_socket_inside(
    tmp_path: Path, run_sandbox: RunSandbox,
) -> None:
    """A real server inside: initdb, postgres on a unix socket only, psql through it."""
    assert (PG / "postgres").exists(), "PostgreSQL 15 is needed (bin/setup --tests)"
    result = _run_as_a_person(
        f"set -e; {PG}/initdb -D FOLDER/data -A trust -U lnk >/dev/null; "
        f"{PG}/pg_ctl -D FOLDER/data -o \"-k FOLDER -c listen_addresses=''\" "
        f"-l FOLDER/log -w start >/dev/null; "
        f"psql -h FOLDER -U lnk -d postgres -tAc 'select 40 + 2'; "
        f"{PG}/pg_ctl -D FOLDER/data -m immediate stop >/dev/null", run_sandbox, tmp_path)
    assert result.stdout == "42\n", result


SSH = ("ssh -F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
       "-o LogLevel=ERROR -o ControlPath=FOLDER/master.sock")


def test_N1_an_ssh_control_master_inside_serves_its_clients(
    tmp_path: Path, run_sandbox: RunSandbox,
) -> None:
    """ssh -o ControlMaster inside: the master's socket in a written folder, a second
    ssh through it. The server is sshd in inetd mode, as the master's ProxyCommand (no
    network needed)."""
    assert Path("/usr/sbin/sshd").exists(), "openssh-server is needed (bin/setup --tests)"
    script = (
        "set -e; cd FOLDER; ssh-keygen -q -t ed25519 -N '' -f hostkey; "
        "ssh-keygen -q -t ed25519 -N '' -f userkey; cp userkey.pub authorized_keys; "
        "printf 'HostKey FOLDER/hostkey\\nAuthorizedKeysFile FOLDER/authorized_keys\\n"
        "UsePAM no\\nStrictModes no\\nPidFile none\\n' > sshd_config; "
        f"{SSH} -i userkey -o ProxyCommand='/usr/sbin/sshd -i -f FOLDER/sshd_config' "
        "-o ControlMaster=yes -o ControlPersist=30 -fN lnk-test; "
        f"{SSH} -O check lnk-test 2>&1; {SSH} lnk-test echo through-the-master; "
        f"{SSH} -O exit lnk-test 2>&1")
    result = _run_as_a_person(script, run_sandbox, tmp_path)
    assert "Master running" in result.stdout, result
    assert "through-the-master\n" in result.stdout, result
    assert "refused" not in result.stderr


SLOW_CONNECT = r"""
import ctypes, errno, socket, struct, threading, time
libc = ctypes.CDLL(None, use_errno=True)
full = socket.socket(); full.bind(("127.0.0.1", 0)); full.listen(0)
address = full.getsockname()
queued = []
for _ in range(8):  # fill the accept queue: a blocking connect then waits in SYN_SENT
    extra = socket.socket(); extra.setblocking(False)
    try:
        extra.connect(address)
    except BlockingIOError:
        pass
    queued.append(extra)
time.sleep(0.2)
def connect_blocking(sock, timeout_ms):
    if timeout_ms:
        tv = struct.pack("qq", 0, timeout_ms * 1000)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    raw = struct.pack("!HH4s8x", socket.AF_INET, address[1], socket.inet_aton(address[0]))
    raw = struct.pack("=H", socket.AF_INET) + raw[2:]
    started = time.monotonic()
    result = libc.connect(sock.fileno(), raw, len(raw))
    return (0 if result == 0 else ctypes.get_errno()), time.monotonic() - started
other = socket.socket(); other.bind(("127.0.0.1", 0)); other.listen(8)
meanwhile = []
def quick():
    time.sleep(0.1)
    started = time.monotonic()
    socket.create_connection(other.getsockname()).close()
    meanwhile.append(time.monotonic() - started)
threading.Thread(target=quick).start()
code, took = connect_blocking(socket.socket(), 600)
timed_out = code == errno.EINPROGRESS and 0.5 < took < 5
print("timeout" if timed_out else f"timeout? {code} {took:.2f}")
print("not blocked" if meanwhile and meanwhile[0] < 0.3 else f"blocked {meanwhile}")
def accept_later():
    time.sleep(0.5)
    while True:
        full.accept()
threading.Thread(target=accept_later, daemon=True).start()
code, took = connect_blocking(socket.socket(), 0)
print("connected" if code == 0 and took > 0.2 else f"connected? {code} {took:.2f}")
"""


def test_N1_a_blocking_connect_that_waits_is_waited_for_as_the_program_asked(
    write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """A blocking connect to a listener whose queue is full waits (SYN retried), as the
    kernel's would: up to the socket's own timeout (then EINPROGRESS), or until the
    listener takes it; and the watch answers the sandbox's other calls meanwhile."""
    spec = write_spec("[files]\nread = []\n")
    result = run_sandbox(spec, PYTHON, "-c", SLOW_CONNECT)
    assert result.stdout == "timeout\nnot blocked\nconnected\n", result


STALLED_LISTENER = """
import glob, socket, sys, threading, time
folder = sys.argv[1]
full = socket.socket(socket.AF_UNIX)
full.bind(folder + "/full.sock")
full.listen(0)  # one connection queued, never accepted: every other connect waits
other = socket.socket(socket.AF_UNIX)
other.bind(folder + "/other.sock")
other.listen(64)
start = threading.Barrier(10)
def blocked():
    start.wait()
    socket.socket(socket.AF_UNIX).connect(folder + "/full.sock")
for _ in range(10):
    threading.Thread(target=blocked, daemon=True).start()
def in_connect():
    count = 0
    for path in glob.glob("/proc/self/task/*/syscall"):
        try:
            count += open(path).read().startswith("42 ")
        except OSError:
            pass
    return count
deadline = time.monotonic() + 30
while in_connect() < 9 and time.monotonic() < deadline:
    time.sleep(0.01)
print("waiting" if in_connect() >= 9 else "not waiting")
answered = []
def quick():
    started = time.monotonic()
    socket.socket(socket.AF_UNIX).connect(folder + "/other.sock")
    answered.append(time.monotonic() - started)
probe = threading.Thread(target=quick, daemon=True)
probe.start()
probe.join(10)
print("answered" if answered else "stalled")
"""


def test_N1_connects_blocked_on_a_listener_that_never_accepts_stall_only_their_callers(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """Ten blocking connects to a listener whose queue is full (listen(0), never
    accepted) each hold one of the watch's workers; another connect, to a second
    listener, is answered meanwhile, while the first listener lives."""
    written = tmp_path / "work"
    written.mkdir()
    spec = write_spec(f"[files]\nwrite = {toml_list(written)}\n")
    result = run_sandbox(spec, PYTHON, "-c", STALLED_LISTENER, str(written))
    assert result.stdout == "waiting\nanswered\n", result


def test_N1_check_lists_unix_sockets_among_the_protections(
    sandbox_env: dict[str, str],
) -> None:
    done = subprocess.run([LNK_SANDBOX, "check"], env=sandbox_env, capture_output=True,
                          text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert "unix sockets" in done.stdout, done.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
