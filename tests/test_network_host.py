"""`[network] mode = "host"` (issue 28 item 5): this machine's network as it is (the
seed's harness "lan" permission), with every other protection in force, no wire, and
`stop` ending the sandbox itself. Real sandboxes, a real server on this machine's
loopback, a real abstract unix socket and a real unix socket outside."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, RunSandbox, WriteSpec, toml_list
from tests.test_socket_families import OPEN, PROTOCOL_REFUSED, PYTHON, REFUSED

HOST = 'name = "harness"\n[network]\nmode = "host"\n'


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP server on this machine's loopback, answering "hello" to each connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            client.sendall(b"hello")
            client.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server
    server.close()


REACH = """
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10) as s:
        print(s.recv(5).decode())
except OSError as error:
    print("errno", error.errno)
"""


@pytest.mark.parametrize("mode", ["host", "none"])
def test_host_reaches_this_machines_loopback_and_none_does_not(
    listener: socket.socket, write_spec: WriteSpec, run_sandbox: RunSandbox, mode: str,
) -> None:
    spec = write_spec(f'[network]\nmode = "{mode}"\n')
    port = listener.getsockname()[1]
    result = run_sandbox(spec, PYTHON, "-c", REACH, str(port))
    assert result.returncode == 0, result
    assert result.stdout == ("hello\n" if mode == "host" else "errno 111\n")


ABSTRACT = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(b"\\0" + sys.argv[1].encode()); print("connected")
except OSError as error:
    print("errno", error.errno)
"""


def test_host_keeps_this_machines_abstract_and_path_unix_sockets_closed(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path, lnk_home: Path,
) -> None:
    """The host's network namespace holds the session's abstract sockets (X11, D-Bus)
    and every socket of this machine, so the watch cannot tell one made inside by its
    namespace: every unix socket by name is refused (EACCES), said, and logged. Before
    that refusal, the watch connected to the person's abstract socket for the sandbox
    (it connects outside Landlock's scope)."""
    name = f"lnk-test-{os.getpid()}-{time.monotonic_ns()}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(b"\0" + name.encode())
    abstract.listen(1)
    folder = tmp_path / "outside"
    folder.mkdir()
    by_path = socket.socket(socket.AF_UNIX)
    by_path.bind(str(folder / "agent.sock"))
    by_path.listen(1)
    try:
        spec = write_spec(HOST + f"[files]\nread = {toml_list(folder)}\n")
        result = run_sandbox(spec, PYTHON, "-c", ABSTRACT, name)
        assert result.stdout == "errno 13\n", result
        line = (f"refused to connect to the unix socket @{name}: this sandbox has this "
                "machine's network ([network] mode = \"host\"), where a socket made inside "
                "cannot be told from yours")
        assert f"lnk-sandbox: {line}" in result.stderr
        assert line in (lnk_home / "sandbox" / "programs.log").read_text()
        connect = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
                   "    s.connect(sys.argv[1]); print('connected')\n"
                   "except OSError as error:\n    print('errno', error.errno)\n")
        result = run_sandbox(spec, PYTHON, "-c", connect, str(folder / "agent.sock"))
        assert result.stdout == "errno 13\n", result
    finally:
        abstract.close()
        by_path.close()


INSIDE = """
import socket
server = socket.socket(socket.AF_UNIX)
server.bind("/tmp/inside.sock")
server.listen(1)
client = socket.socket(socket.AF_UNIX)
try:
    client.connect("/tmp/inside.sock"); print("connected")
except OSError as error:
    print("errno", error.errno)
one, two = socket.socketpair()
one.sendall(b"pair")
print(two.recv(4).decode())
"""


def test_host_refuses_even_a_socket_made_inside_and_keeps_socketpair(
    write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """The residue, fail closed: in mode "host" a socket made inside cannot be told from
    one of this machine's, so it is refused too; unnamed sockets (socketpair) work."""
    result = run_sandbox(write_spec(HOST), PYTHON, "-c", INSIDE)
    assert result.stdout == "errno 13\npair\n", result


def test_host_refuses_the_socket_families_as_every_sandbox_does(
    write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    result = run_sandbox(write_spec(HOST), PYTHON, "-I", "-c", OPEN, json.dumps(REFUSED))
    assert result.returncode == 0, result
    assert set(json.loads(result.stdout).values()) == {97, 93}  # EAFNOSUPPORT, EPROTONOSUPPORT
    assert {name for name, code in json.loads(result.stdout).items()
            if code == 93} == PROTOCOL_REFUSED


@pytest.mark.parametrize(("section", "key"), [
    ('[verbs]\nmodel = "anthropic"\n', "verbs.model"),
    ('[tcp]\nendpoints = ["db.example.com:5432"]\n', "tcp.endpoints"),
    ("[localhost]\nports = [5432]\n", "localhost.ports"),
    ("[verbs]\nopen = true\n", "verbs.open"),
    ("[pause]\nrefusals = 5\n", "pause"),
])
def test_host_with_what_needs_a_wire_is_refused_naming_the_key(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path, section: str, key: str,
) -> None:
    spec = write_spec(HOST + section)
    marker = tmp_path / "ran"
    result = run_sandbox(spec, "/bin/sh", "-c", f"touch {marker}")
    assert result.returncode == 125
    assert result.stderr.startswith(f"lnk-sandbox: {spec}: {key}: needs the sandbox's own "
                                    "network and its wire"), result.stderr
    assert not marker.exists()


def test_stop_ends_a_sandbox_with_the_host_network_and_none_starts_while_on(
    write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    spec = write_spec(HOST + f"[files]\nwrite = {toml_list(written)}\n")
    started = written / "started"
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/sh", "-c",
                            f"echo > {started}; exec sleep 600"],
                           env=sandbox_env, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while not started.exists():
            assert time.monotonic() < deadline and run.poll() is None, run.poll()
            time.sleep(0.02)
        subprocess.run([LNK_SANDBOX, "stop"], env=sandbox_env, check=True,
                       capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)
        _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        run.kill()
        run.wait()
    assert run.returncode == 137, stderr
    assert "the kill switch is on (lnk-sandbox stop): this sandbox has this machine's " \
           "network and no wire to close, so it is ended" in stderr
    again = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/true"],
                           env=sandbox_env, capture_output=True, text=True, cwd=tmp_path,
                           timeout=SANDBOX_TIMEOUT_SECONDS)
    assert again.returncode == 125
    assert "the kill switch is on (lnk-sandbox stop)" in again.stderr


def test_check_says_what_host_opens(write_spec: WriteSpec, sandbox_env: dict[str, str]) -> None:
    spec = write_spec(HOST)
    found = subprocess.run([LNK_SANDBOX, "check", "--spec", str(spec)], env=sandbox_env,
                           capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert ("NETWORK: this machine's network as it is ([network] mode = \"host\"): every "
            "host, this machine's own ports") in found.stdout, found.stdout
