"""Guests over SSH, for real: a real sshd on this machine's loopback (started here on a free
port, with its own host key and config, AuthorizedKeysFile in this test's own home), real
ssh, scp and sftp clients, the real `lnk-sandbox guest add` answered through the queue
(`lnk-sandbox asks --json` / `answer ID yes`), and real sandboxes.

Run as root, sshd is the machine's usual daemon and the guest logs in as root; run as an
ordinary user (CI's second run), sshd runs as that user on its high port with its own
config (UsePAM no) and lets in only that user, who is the guest's owner. Both ways are
the same test: nothing here needs root.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import LNK_SANDBOX, toml_list, wait_until

SSHD = "/usr/sbin/sshd"
# A step that takes longer than this is hung, not slow.
WAIT_SECONDS = 30
USER = pwd.getpwuid(os.getuid()).pw_name
CLIENT_OPTIONS = ("-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o",
                  "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                  "-o", "IdentitiesOnly=yes")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class World:
    """One machine's owner with a guest: the folders, keys, sshd and Link's settings."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.settings = base / "lnk-settings"
        self.data = base / "data"
        self.work = base / "gwork"
        self.other = base / "other"
        for folder in (self.home, self.data / "secret", self.work, self.other, self.settings):
            folder.mkdir(parents=True)
        (self.home / ".ssh").mkdir(mode=0o700)
        (self.data / "readme").write_text("readable\n")
        (self.data / "secret" / "s").write_text("hush\n")
        self.spec = base / "guest.toml"
        self.spec.write_text(f"[files]\nread = {toml_list(self.data)}\n"
                             f"write = {toml_list(self.work)}\n"
                             f"hide = {toml_list(self.data / 'secret')}\n")
        for name in ("hostkey", "ann", "bob", "cid"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f",
                            str(base / name)], check=True, timeout=WAIT_SECONDS)
        self.port = free_port()
        self.owner_gitconfig = base / "owner.gitconfig"
        self.config = base / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {base / 'hostkey'}\n"
            f"AuthorizedKeysFile {self.home / '.ssh' / 'authorized_keys'}\n"
            f"PidFile {base / 'sshd.pid'}\nStrictModes no\nUsePAM no\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\n"
            # The owner's git settings as every session's `enter` reads them (a file the
            # tests write later: sshd's environment is not the test's).
            f"SetEnv GIT_CONFIG_GLOBAL={self.owner_gitconfig}\n")
        self.env = {**os.environ, "HOME": str(self.home), "LNK_HOME": str(self.settings)}
        for variable in ("SSH_AUTH_SOCK", "DISPLAY", "WAYLAND_DISPLAY", "TMUX"):
            self.env.pop(variable, None)
        self.sshd: subprocess.Popen[bytes] | None = None

    def start_sshd(self) -> None:
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # its privilege separation
        log = (self.base / "sshd.log").open("wb")
        self.sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)],
                                     stdout=log, stderr=log)
        log.close()

        def listening() -> bool:
            assert self.sshd is not None
            assert self.sshd.poll() is None, (self.base / "sshd.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_until(listening, "sshd to listen")

    def stop(self) -> None:
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.terminate()
            self.sshd.wait(WAIT_SECONDS)

    def lnk(self, *words: str, answer: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """lnk-sandbox WORDS, with no terminal (its own session); `answer`: every
        question it asks is answered so through the queue, by `lnk-sandbox answer`."""
        environment = env or self.env
        done = threading.Event()
        answerer = None
        if answer is not None:
            answerer = threading.Thread(target=self._answer, args=(answer, done, environment))
            answerer.start()
        try:
            return subprocess.run([LNK_SANDBOX, *words], env=environment, capture_output=True,
                                  text=True, timeout=WAIT_SECONDS * 2, check=False,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            done.set()
            if answerer is not None:
                answerer.join()

    @staticmethod
    def _answer(answer: str, done: threading.Event, env: dict[str, str]) -> None:
        while not done.is_set():
            listed = subprocess.run([LNK_SANDBOX, "asks", "--json"], env=env,
                                    capture_output=True, text=True, check=False,
                                    timeout=WAIT_SECONDS)
            try:
                asks = json.loads(listed.stdout)["asks"]
            except (ValueError, KeyError):
                asks = []
            for ask in asks:
                subprocess.run([LNK_SANDBOX, "answer", ask["id"], answer], env=env,
                               capture_output=True, check=False, timeout=WAIT_SECONDS)
            done.wait(0.2)

    def ssh(self, *command: str, key: str = "ann", options: tuple[str, ...] = (),
            stdin: str | None = None, timeout: float = WAIT_SECONDS
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", *CLIENT_OPTIONS, "-i", str(self.base / key), "-p", str(self.port),
             *options, f"{USER}@127.0.0.1", *command],
            env=self.env, capture_output=True, text=True, timeout=timeout, check=False,
            input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)

    def scp(self, *words: str, key: str = "ann") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["scp", *CLIENT_OPTIONS, "-i", str(self.base / key), "-P",
                               str(self.port), *words], env=self.env, capture_output=True,
                              text=True, timeout=WAIT_SECONDS, check=False,
                              stdin=subprocess.DEVNULL)

    def sftp(self, batch: str, key: str = "ann") -> subprocess.CompletedProcess[str]:
        return subprocess.run(["sftp", *CLIENT_OPTIONS, "-i", str(self.base / key), "-P",
                               str(self.port), "-b", "-", f"{USER}@127.0.0.1"],
                              env=self.env, capture_output=True, text=True,
                              timeout=WAIT_SECONDS, check=False, input=batch)

    def remote(self, path: Path) -> str:
        return f"{USER}@127.0.0.1:{path}"

    @property
    def authorized_keys(self) -> Path:
        return self.home / ".ssh" / "authorized_keys"


def _world() -> Iterator[World]:
    assert Path(SSHD).exists(), "openssh-server is needed (bin/setup --tests)"
    assert shutil.which("ssh") and shutil.which("scp") and shutil.which("sftp"), \
        "openssh-client is needed (bin/setup --tests)"
    base = Path(tempfile.mkdtemp(prefix="lnk-guests-"))
    world = World(base)
    try:
        world.start_sshd()
        added = world.lnk("guest", "add", "ann", "--spec", str(world.spec), "--key",
                          str(base / "ann.pub"), answer="yes")
        assert added.returncode == 0, added
        yield world
    finally:
        world.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    """A guest `ann` added once for the tests that only connect."""
    yield from _world()


@pytest.fixture
def own_world() -> Iterator[World]:
    """A guest `ann` of this test's own, for a test that changes the files."""
    yield from _world()


# -- guest add wrote what it says ------------------------------------------------------

def test_guest_add_writes_a_restricted_forced_command_and_keeps_the_spec(world: World
                                                                          ) -> None:
    line = world.authorized_keys.read_text()
    assert line.count("\n") == 1
    assert line.startswith('restrict,pty,command="')
    assert f' enter --settings={world.settings} ann" ssh-ed25519 ' in line
    command = line.split('"')[1].split()[0]
    assert os.path.isabs(command) and os.path.basename(command) == "lnk-sandbox"
    assert line.rstrip().endswith(" lnk-guest-ann")
    assert world.authorized_keys.stat().st_mode & 0o777 == 0o600
    kept = world.settings / "guests.toml"
    assert kept.stat().st_mode & 0o777 == 0o600
    text = kept.read_text()
    assert str(world.data) in text and str(world.work) in text
    assert str(world.data / "secret") in text
    listed = world.lnk("guest", "list", "--json")
    assert listed.returncode == 0, listed
    guest = json.loads(listed.stdout)["guests"][0]
    assert guest["name"] == "ann" and guest["wire"] == "guest-ann"
    assert guest["folder"] == str(world.settings / "guests" / "ann")
    assert guest["spec_file"] == str(world.spec)
    assert (world.settings / "guests" / "ann").stat().st_mode & 0o777 == 0o700
    plain = world.lnk("guest", "list")
    assert plain.stdout.startswith("ann  ssh-ed25519 SHA256:"), plain


# -- what a guest's session sees -------------------------------------------------------

def test_a_guests_command_reads_what_the_spec_opens_and_nothing_closed(world: World) -> None:
    assert world.ssh("cat", str(world.data / "readme")).stdout == "readable\n"
    hidden = world.ssh("cat", str(world.data / "secret" / "s"))
    assert hidden.returncode != 0 and "hush" not in hidden.stdout
    shadow = world.ssh("cat", "/etc/shadow")
    assert shadow.returncode != 0 and "root:" not in shadow.stdout
    # Link's settings: nothing of it but the mount points on the way to the guest's own
    # folder (as for an agent's); guests.toml, the asks, the secrets are not there.
    settings = world.ssh("ls", "-a", str(world.settings), str(world.settings / "guests"))
    assert "guests.toml" not in settings.stdout and "sandbox" not in settings.stdout
    kept = world.ssh("cat", str(world.settings / "guests.toml"))
    assert kept.returncode != 0 and "guests" not in kept.stdout
    home = world.ssh("sh", "-c", "'echo $HOME; pwd; ls /home /root 2>&1'")
    guest_folder = str(world.settings / "guests" / "ann")
    assert home.stdout.splitlines()[:2] == [guest_folder, guest_folder], home


def test_a_guest_writes_the_written_folder_and_nowhere_else(world: World) -> None:
    wrote = world.ssh("sh", "-c", f"'echo x > {world.work}/mine'")
    assert wrote.returncode == 0, wrote
    assert (world.work / "mine").read_text() == "x\n"
    outside = world.ssh("sh", "-c", f"'echo x > {world.other}/f'")
    assert outside.returncode != 0 and not (world.other / "f").exists()
    home = world.ssh("sh", "-c", f"'echo x > {world.home}/f'")
    assert home.returncode != 0 and not (world.home / "f").exists()
    keys = world.ssh("sh", "-c", f"'echo x >> {world.authorized_keys}'")
    assert keys.returncode != 0 and world.authorized_keys.read_text().count("\n") == 1


def test_a_guests_own_folder_is_written_with_its_dot_files(world: World) -> None:
    done = world.ssh("sh", "-c", "'echo alias ll=ls > ~/.bashrc && mkdir -p ~/.git && "
                     "touch ~/.git/config && echo ok'")
    assert done.stdout == "ok\n", done
    assert (world.settings / "guests" / "ann" / ".bashrc").read_text() == "alias ll=ls\n"


def test_a_command_gets_its_status_and_its_input(world: World) -> None:
    assert world.ssh("exit 7").returncode == 7
    echoed = world.ssh("cat", stdin="through stdin\n")
    assert echoed.stdout == "through stdin\n", echoed


def test_an_unknown_key_gets_nothing(world: World) -> None:
    refused = world.ssh("true", key="bob")
    assert refused.returncode == 255, refused
    assert "Permission denied" in refused.stderr


# -- scp and sftp ----------------------------------------------------------------------

@pytest.mark.parametrize("protocol", [(), ("-O",)], ids=["sftp", "scp-legacy"])
def test_scp_uploads_into_the_written_folder_only(world: World, tmp_path: Path,
                                                  protocol: tuple[str, ...]) -> None:
    name = f"up-{'legacy' if protocol else 'sftp'}.txt"
    local = tmp_path / name
    local.write_text("up\n")
    done = world.scp(*protocol, str(local), world.remote(world.work / name))
    assert done.returncode == 0, done
    assert (world.work / name).read_text() == "up\n"
    outside = world.scp(*protocol, str(local), world.remote(world.other / name))
    assert outside.returncode != 0 and not (world.other / name).exists()
    got = world.scp(*protocol, world.remote(world.data / "readme"), str(tmp_path / "got"))
    assert got.returncode == 0 and (tmp_path / "got").read_text() == "readable\n"
    hidden = world.scp(*protocol, world.remote(world.data / "secret" / "s"),
                       str(tmp_path / "hidden"))
    assert hidden.returncode != 0 and not (tmp_path / "hidden").exists()
    into_hidden = world.scp(*protocol, str(local), world.remote(world.data / "secret" / name))
    assert into_hidden.returncode != 0 and not (world.data / "secret" / name).exists()


def test_sftp_lists_what_is_open_and_gets_nothing_hidden(world: World, tmp_path: Path
                                                         ) -> None:
    listed = world.sftp(f"ls {world.data}\n")
    assert listed.returncode == 0, listed
    assert "readme" in listed.stdout and "secret/s" not in listed.stdout
    hidden = world.sftp(f"get {world.data}/secret/s {tmp_path}/got\n")
    assert hidden.returncode != 0 and not (tmp_path / "got").exists()
    (tmp_path / "put").write_text("p\n")
    outside = world.sftp(f"put {tmp_path}/put {world.other}/put\n")
    assert outside.returncode != 0 and not (world.other / "put").exists()
    inside = world.sftp(f"put {tmp_path}/put {world.work}/put\n")
    assert inside.returncode == 0 and (world.work / "put").read_text() == "p\n"
    shadow = world.sftp(f"get /etc/shadow {tmp_path}/shadow\n")
    assert shadow.returncode != 0 and not (tmp_path / "shadow").exists()


# -- no forwarding gets around it ------------------------------------------------------

def _listener() -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    return server, int(server.getsockname()[1])


def _reached(server: socket.socket, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        connection.close()
        return True
    return False


def test_local_forwarding_carries_nothing(world: World) -> None:
    """ssh -L: a connection to the forwarded port never reaches the target (a listener
    of this test's own, on this machine's loopback)."""
    target, target_port = _listener()
    forwarded = free_port()
    with target:
        client = subprocess.Popen(
            ["ssh", *CLIENT_OPTIONS, "-i", str(world.base / "ann"), "-p", str(world.port),
             "-N", "-L", f"{forwarded}:127.0.0.1:{target_port}", f"{USER}@127.0.0.1"],
            env=world.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            wait_until(lambda: _connects(forwarded), "ssh -L to listen")
            with socket.create_connection(("127.0.0.1", forwarded), timeout=5) as probe:
                probe.sendall(b"hello\n")
                probe.settimeout(5)
                try:
                    answer = probe.recv(16)
                except (TimeoutError, ConnectionResetError):
                    answer = b""
            assert answer == b""
            assert not _reached(target, 2)
        finally:
            client.terminate()
            client.wait(WAIT_SECONDS)


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def test_remote_forwarding_is_refused(world: World) -> None:
    target, target_port = _listener()
    remote = free_port()
    with target:
        done = world.ssh(options=("-N", "-o", "ExitOnForwardFailure=yes", "-R",
                                        f"127.0.0.1:{remote}:127.0.0.1:{target_port}"))
        assert done.returncode == 255, done
        assert "forwarding failed" in done.stderr.lower(), done
        assert not _connects(remote)
        assert not _reached(target, 0.5)


def test_dynamic_forwarding_carries_nothing(world: World) -> None:
    """ssh -D: a SOCKS5 CONNECT through it to this test's listener fails."""
    target, target_port = _listener()
    socks = free_port()
    with target:
        client = subprocess.Popen(
            ["ssh", *CLIENT_OPTIONS, "-i", str(world.base / "ann"), "-p", str(world.port),
             "-N", "-D", f"127.0.0.1:{socks}", f"{USER}@127.0.0.1"],
            env=world.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE)
        try:
            wait_until(lambda: _connects(socks), "ssh -D to listen")
            with socket.create_connection(("127.0.0.1", socks), timeout=5) as probe:
                probe.settimeout(10)
                probe.sendall(b"\x05\x01\x00")
                assert probe.recv(2) == b"\x05\x00"
                probe.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1")
                              + target_port.to_bytes(2, "big"))
                try:
                    reply = probe.recv(10)
                except (TimeoutError, ConnectionResetError):
                    reply = b""
            assert reply[1:2] != b"\x00", reply  # not "succeeded"
            assert not _reached(target, 1)
        finally:
            client.terminate()
            client.wait(WAIT_SECONDS)


def test_agent_forwarding_is_refused(world: World, tmp_path: Path) -> None:
    """ssh -A with a real agent holding a key: the session has no agent socket."""
    agent_socket = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_socket)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(agent_socket.exists, "ssh-agent")
        env = {**world.env, "SSH_AUTH_SOCK": str(agent_socket)}
        subprocess.run(["ssh-add", str(world.base / "cid")], env=env, check=True,
                       capture_output=True, timeout=WAIT_SECONDS)
        done = subprocess.run(
            ["ssh", *CLIENT_OPTIONS, "-A", "-i", str(world.base / "ann"), "-p",
             str(world.port), f"{USER}@127.0.0.1",
             "echo sock=${SSH_AUTH_SOCK:-none}; ssh-add -l; echo status=$?"],
            env=env, capture_output=True, text=True, timeout=WAIT_SECONDS, check=False,
            stdin=subprocess.DEVNULL)
        assert "sock=none" in done.stdout, done
        assert "cid" not in done.stdout and "status=2" in done.stdout, done
    finally:
        agent.terminate()
        agent.wait(WAIT_SECONDS)


def test_x11_forwarding_is_refused(world: World) -> None:
    """ssh -X from a client with a display: the session gets none."""
    done = subprocess.run(
        ["ssh", *CLIENT_OPTIONS, "-X", "-i", str(world.base / "ann"), "-p", str(world.port),
         f"{USER}@127.0.0.1", "echo display=${DISPLAY:-none}"],
        env={**world.env, "DISPLAY": ":97"}, capture_output=True, text=True,
        timeout=WAIT_SECONDS, check=False, stdin=subprocess.DEVNULL)
    assert "display=none" in done.stdout, done


# -- the terminal: the guest's own ------------------------------------------------------

class Tmux:
    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.socket = str(folder / "tmux.sock")
        self.env = env

    def tmux(self, *words: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *words],
                              env=self.env, capture_output=True, text=True, check=True,
                              timeout=WAIT_SECONDS).stdout

    def screen(self) -> str:
        try:
            return self.tmux("capture-pane", "-p", "-t", "t")
        except subprocess.CalledProcessError:
            return ""

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def wait(self, text: str) -> None:
        wait_until(lambda: text in self.screen(), f"{text!r} on the guest's terminal\n"
                 f"{self.screen()}")

    def stop(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True,
                       check=False, timeout=WAIT_SECONDS)


def test_ctrl_c_and_job_control_reach_the_guests_program(world: World, tmp_path: Path
                                                         ) -> None:
    """A login over a real terminal (tmux): the guest's shell prompt; Ctrl-C reaches the
    program it runs (a trap says so) and the shell goes on; Ctrl-Z stops a job, `jobs`
    lists it. Without bubblewrap's --new-session, the terminal is the session's.

    As root, through the real sshd and `ssh -t`. As an ordinary user, sshd cannot hand
    out a terminal on this machine: /dev/pts is mounted without gid=5, so sshd must
    chown each pty to the group tty, which only root may ("chown(/dev/pts/N, UID, 5)
    failed: Operation not permitted", and the session ends). There the very forced
    command of the guest's line runs on tmux's terminal directly, with an environment
    as bare as sshd's."""
    env = {**world.env, "TERM": "xterm"}
    tmux = Tmux(tmp_path, env)
    if os.geteuid() == 0:
        shutil.copy(world.base / "ann", tmp_path / "ann")
        session = " ".join(["ssh", *CLIENT_OPTIONS, "-t", "-i", str(tmp_path / "ann"), "-p",
                            str(world.port), f"{USER}@127.0.0.1"])
    else:
        forced = world.authorized_keys.read_text().split('command="')[1].split('"')[0]
        session = (f"env -i HOME={world.home} USER={USER} LOGNAME={USER} TERM=xterm "
                   f"PATH=/usr/bin:/bin SHELL={pwd.getpwuid(os.getuid()).pw_shell} {forced}")
    try:
        tmux.tmux("new-session", "-d", "-x", "160", "-y", "40", "-s", "t", session)
        tmux.send("PS1='gp''-ok$ '", "Enter")
        tmux.wait("gp-ok$")
        tmux.send(f"cat {world.data}/readme", "Enter")
        tmux.wait("readable")
        # The shell sees only what the spec opens: the hidden folder and the owner's
        # authorized_keys are not there (each listing's status made by the shell).
        tmux.send(f"ls {world.data}/secret; echo hidden-$((1+$?))", "Enter")
        tmux.wait("hidden-3")
        tmux.send(f"cat {world.authorized_keys}; echo keys-$((1+$?))", "Enter")
        tmux.wait("keys-2")
        # Each text waited for is made by the program ($((…))), never the typed line.
        tmux.send("sh -c 'trap \"echo GOT-$((6*7)); exit 9\" INT; echo READY-$((1+1)); "
                  "while :; do sleep 0.1; done'", "Enter")
        tmux.wait("READY-2")
        tmux.send("C-c")
        tmux.wait("GOT-42")
        tmux.send("echo status=$?", "Enter")
        tmux.wait("status=9")
        tmux.send("sleep 300", "Enter")
        time.sleep(0.5)
        tmux.send("C-z")
        tmux.wait("Stopped")
        tmux.send("jobs", "Enter")
        tmux.wait("sleep 300")
        tmux.send("kill %1; echo killed-$((2+3))", "Enter")
        tmux.wait("killed-5")
        tmux.send("exit", "Enter")
    finally:
        tmux.stop()


# -- what changes between sessions -----------------------------------------------------

def test_a_spec_folder_replaced_by_a_link_is_refused_at_the_next_session(own_world: World
                                                                         ) -> None:
    world = own_world
    assert world.ssh("cat", str(world.data / "readme")).stdout == "readable\n"
    real = world.base / "data.real"
    world.data.rename(real)
    world.data.symlink_to(real)
    refused = world.ssh("cat", str(world.data / "readme"))
    assert refused.returncode != 0 and "readable" not in refused.stdout
    assert f"{world.data} became a link to {real} since guest add" in refused.stderr, refused
    login = world.ssh(options=("-T",), stdin="cat " + str(world.data / "readme") + "\n")
    assert "readable" not in login.stdout and "became a link" in login.stderr
    world.data.unlink()
    real.rename(world.data)
    assert world.ssh("cat", str(world.data / "readme")).stdout == "readable\n"
    # Each session and each refusal is a line of Link's guests log, with where from.
    log = (world.settings / "sandbox" / "guests.log").read_text().splitlines()
    assert any(line.endswith(" guest-ann 127.0.0.1 session: a command") for line in log)
    assert any(" guest-ann 127.0.0.1 refused: " in line and "became a link" in line
               for line in log)
    assert any(line.endswith(" guest-ann 127.0.0.1 ended: status 0") for line in log)


def test_a_written_folder_replaced_by_a_link_is_refused(own_world: World) -> None:
    world = own_world
    world.work.rename(world.base / "gwork.real")
    world.work.symlink_to(world.other)
    refused = world.ssh("sh", "-c", f"'echo x > {world.work}/f'")
    assert refused.returncode != 0 and not (world.other / "f").exists()
    assert "became a link" in refused.stderr


def test_a_hidden_folder_replaced_by_a_link_is_refused(own_world: World) -> None:
    """The hide named data/secret; a link there now (to a copy of the secret elsewhere)
    would be hidden as the link, not as what it points to: refused, said in one line."""
    world = own_world
    moved = world.base / "secret.real"
    (world.data / "secret").rename(moved)
    (world.data / "secret").symlink_to(moved)
    refused = world.ssh("cat", str(world.data / "secret" / "s"))
    assert refused.returncode != 0 and "hush" not in refused.stdout
    assert (f"{world.data / 'secret'} became a link to {moved} since guest add"
            in refused.stderr), refused


def test_a_removed_folder_is_refused(own_world: World) -> None:
    world = own_world
    shutil.rmtree(world.work)
    refused = world.ssh("true")
    assert refused.returncode != 0
    assert f"{world.work}" in refused.stderr and "does not exist" in refused.stderr, refused


# -- the key -----------------------------------------------------------------------------

def test_a_duplicate_key_is_refused_and_nothing_is_kept(own_world: World) -> None:
    world = own_world
    before = world.authorized_keys.read_bytes()
    guests = (world.settings / "guests.toml").read_bytes()
    again = world.lnk("guest", "add", "ann2", "--spec", str(world.spec), "--key",
                      str(world.base / "ann.pub"), answer="yes")
    assert again.returncode == 125
    assert "this key is guest ann's already" in again.stderr, again
    assert world.authorized_keys.read_bytes() == before
    assert (world.settings / "guests.toml").read_bytes() == guests
    assert not (world.settings / "guests" / "ann2").exists()


def test_a_key_the_owner_already_lets_in_is_refused(own_world: World) -> None:
    """An owner's own line for the key, with options and another comment, comes first:
    a guest's line after it would never apply (sshd takes the first match)."""
    world = own_world
    blob = (world.base / "bob.pub").read_text().split()[1]
    owner = (b'# my laptop\r\nfrom="10.0.0.0/8,192.168.1.1",environment="A=b c" '
             b"ssh-ed25519 " + blob.encode() + b" bob@laptop\r\n")
    world.authorized_keys.write_bytes(owner + world.authorized_keys.read_bytes())
    before = world.authorized_keys.read_bytes()
    refused = world.lnk("guest", "add", "bob", "--spec", str(world.spec), "--key",
                        str(world.base / "bob.pub"), answer="yes")
    assert refused.returncode == 125
    assert "line 2 already lets this key in" in refused.stderr, refused
    assert world.authorized_keys.read_bytes() == before


def test_no_answer_keeps_nothing(own_world: World) -> None:
    world = own_world
    before = world.authorized_keys.read_bytes()
    said_no = world.lnk("guest", "add", "bob", "--spec", str(world.spec), "--key",
                        str(world.base / "bob.pub"), answer="no")
    assert said_no.returncode == 125
    assert "the answer was no" in said_no.stderr, said_no
    assert "reads and writes: " + str(world.work) in said_no.stdout
    assert world.authorized_keys.read_bytes() == before
    assert "bob" not in world.lnk("guest", "list").stdout
    assert world.ssh("true", key="bob").returncode == 255


@pytest.mark.parametrize("keys_typed", [["Tab", "space"], ["tick", "Allow"]])
def test_attack_guest_adds_dialog_takes_no_stray_key_for_a_yes(
    own_world: World, tmp_path: Path, keys_typed: list[str]
) -> None:
    """`guest add`'s question on zenity (Xvfb, no terminal) is the dialog every question
    has: its box says what a yes allows (the guest and its key's fingerprint:
    screenshot), Tab then Space typed into it is no and keeps nothing, even with the
    box then ticked and Allow clicked; the box ticked, then Allow, adds the guest.
    (Before: `zenity --question`, where Tab then Space was Allow.)"""
    from tests.test_ask import (
        ASKERS,
        _xvfb,
        dialog_shown,
        keys,
        screenshot,
        tick_and_allow,
        window,
    )

    world = own_world
    before = world.authorized_keys.read_bytes()
    title = "Guest over SSH: bob"
    with contextlib.contextmanager(_xvfb)("1024x768") as display:
        adding = subprocess.Popen(
            [LNK_SANDBOX, "guest", "add", "bob", "--spec", str(world.spec), "--key",
             str(world.base / "bob.pub")], env={**world.env, "DISPLAY": display},
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        ASKERS[title] = adding
        try:
            where = window(display, title)
            if keys_typed == ["tick", "Allow"]:
                screenshot(display, tmp_path / "guest-dialog.png")
            else:
                keys(display, where, *keys_typed)
                with contextlib.suppress(AssertionError):  # the keys alone: no, or none yet
                    wait_until(lambda: not dialog_shown(display, title), "an answer", 1)
            if dialog_shown(display, title):
                tick_and_allow(display, title)
            out, err = adding.communicate(timeout=WAIT_SECONDS * 2)
        finally:
            adding.kill()
            adding.communicate()
    if keys_typed == ["tick", "Allow"]:
        assert adding.returncode == 0, (out, err)
        assert world.ssh("true", key="bob").returncode == 0
    else:
        assert adding.returncode == 125, (out, err)
        assert "the answer was no (dialog)" in err, err
        assert world.authorized_keys.read_bytes() == before
        assert world.ssh("true", key="bob").returncode == 255


def test_remove_takes_out_its_line_only(own_world: World) -> None:
    world = own_world
    odd = (b"# first\n\n  ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBJtbmE7bQ0gDHB3c0Ikg6a9Y\r\n"
           b'command="echo a,b \\"q\\"",no-pty ssh-rsa AAAA x\n')
    world.authorized_keys.write_bytes(odd + world.authorized_keys.read_bytes()
                                      + b"#tail without newline")
    added = world.lnk("guest", "add", "bob", "--spec", str(world.spec), "--key",
                      str(world.base / "bob.pub"), answer="yes")
    assert added.returncode == 0, added
    assert world.ssh("cat", str(world.data / "readme"), key="bob").stdout == "readable\n"
    removed = world.lnk("guest", "remove", "ann")
    assert removed.returncode == 0, removed
    text = world.authorized_keys.read_bytes()
    assert text.startswith(odd + b"#tail without newline\n")
    assert b"enter --settings" in text and b" bob\n" not in text and b"lnk-guest-bob" in text
    assert b"lnk-guest-ann" not in text
    assert world.ssh("true").returncode == 255
    assert world.lnk("guest", "remove", "bob").returncode == 0
    assert world.authorized_keys.read_bytes() == odd + b"#tail without newline\n"
    assert world.lnk("guest", "list", "--json").stdout == '{"guests":[]}\n'
    gone = world.lnk("guest", "remove", "bob")
    assert gone.returncode == 125 and "no guest named bob" in gone.stderr


# -- what a guest may write: never what runs as the owner ---------------------------------

def test_a_spec_writing_bashrc_d_is_refused_at_guest_add(own_world: World) -> None:
    """The issue's attack: a guest granted ~/.bashrc.d drops a file there, and it runs as
    the owner at the owner's next login. Refused at `guest add`, naming the rule and the
    path; nothing kept, the guest's key lets nobody in."""
    world = own_world
    (world.home / ".bashrc.d").mkdir()
    spec = world.base / "bashrc.toml"
    spec.write_text(f"[files]\nwrite = {toml_list(world.home / '.bashrc.d')}\n")
    before = world.authorized_keys.read_bytes()
    refused = world.lnk("guest", "add", "bob", "--spec", str(spec), "--key",
                        str(world.base / "bob.pub"), answer="yes")
    assert refused.returncode == 125, refused
    assert (f"{spec}: files.write {world.home}/.bashrc.d is {world.home}/.bashrc.d, a dot "
            "folder of your home") in refused.stderr, refused
    assert world.authorized_keys.read_bytes() == before
    assert "bob" not in world.lnk("guest", "list").stdout
    landed = world.ssh("sh", "-c", f"'echo id > {world.home}/.bashrc.d/x.sh'", key="bob")
    assert landed.returncode == 255 and not (world.home / ".bashrc.d" / "x.sh").exists()


def test_a_kept_folder_that_becomes_what_your_git_runs_is_refused_at_the_next_session(
        own_world: World) -> None:
    """A kept spec's written folder that later turns into a place the owner's programs
    run code from (here: the owner's git settings, as sshd gives them to `enter`, now
    name an editor inside it, which git runs as the owner at the next commit) is refused
    at the next session, and served again once it is not; the refusal is a line of the
    guests log."""
    world = own_world
    assert world.ssh("cat", str(world.data / "readme")).stdout == "readable\n"
    (world.work / "tools").mkdir()
    world.owner_gitconfig.write_text(f"[core]\n\teditor = {world.work}/tools/vi -f\n")
    refused = world.ssh("sh", "-c", f"'echo id > {world.work}/tools/vi'")
    assert refused.returncode != 0 and not (world.work / "tools" / "vi").exists()
    assert (f"guests.ann.spec.files.write {world.work} holds {world.work}/tools/vi, named "
            f"by your git settings (core.editor in {world.owner_gitconfig})"
            in refused.stderr), refused
    log = (world.settings / "sandbox" / "guests.log").read_text()
    assert "refused: " in log and "core.editor" in log
    world.owner_gitconfig.write_text("")
    assert world.ssh("cat", str(world.data / "readme")).stdout == "readable\n"


# -- what `guest add` shows of the guest's files: plain ASCII -----------------------------

# A key comment that, printed raw, clears the screen, draws a forged summary over the
# real one, erases a line, writes the clipboard (OSC 52), reverses text (bidi), and
# passes a Cyrillic letter and an 8-bit CSI (U+009B) for what they are not.
CLIPBOARD = "\x1b]52;c;" + "cm0gLXJmIH4=" + "\x07"
# ASCII only (a key file lnk-sandbox read before too), then with UTF-8's tricks.
EVIL_ASCII = ("laptop\x1b[2J\x1b[H\rguest bob: may write: nothing\x1b[1A\x1b[2K"
              + CLIPBOARD + " \x1b[8mhidden\x1b[0m" + "x" * 300)
EVIL_UNICODE = (EVIL_ASCII[:EVIL_ASCII.index(" \x1b[8m")]
                + " \u202eevil\u202c \u0430dmin \x9b31mred\x1b[0m" + "x" * 300)


def _evil_key(world: World, comment: str = EVIL_ASCII) -> Path:
    blob = (world.base / "bob.pub").read_text().split()[1]
    path = world.base / "evil.pub"
    path.write_bytes(f"ssh-ed25519 {blob} {comment}\n".encode())
    return path


def _only_printable(data: bytes) -> bool:
    return all(byte == 0x0A or 0x20 <= byte < 0x7F for byte in data)


@pytest.mark.parametrize("comment", [EVIL_ASCII, EVIL_UNICODE], ids=["ascii", "unicode"])
def test_a_key_comment_cannot_drive_the_terminal_or_hide_the_summary(own_world: World,
                                                                     comment: str) -> None:
    """What `guest add` prints and asks is plain ASCII: the comment's escapes, CR, OSC 52,
    bidi and look-alikes are shown escaped, after the real summary, which is whole."""
    world = own_world
    answered = world.lnk("guest", "add", "bob", "--spec", str(world.spec), "--key",
                         str(_evil_key(world, comment)), answer="no")
    out = (answered.stdout + answered.stderr).encode()
    assert answered.returncode == 125 and "the answer was no" in answered.stderr, answered
    assert _only_printable(out), out
    assert f"  reads and writes: {world.work}\n" in answered.stdout
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in answered.stdout
    if comment == EVIL_UNICODE:
        assert "\\u202eevil\\u202c \\u0430dmin \\x9b31mred" in answered.stdout
    comment_line = [line for line in answered.stdout.splitlines() if "comment" in line]
    assert len(comment_line) == 1 and comment_line[0].startswith(
        "  the key's comment (the guest's own words): laptop\\x1b[2J\\x1b[H\\x0dguest bob")
    assert "more characters not shown" in comment_line[0]
    assert answered.stdout.index("reads and writes") < answered.stdout.index("comment")
    # The question as asked (lnk_ask's log of it): plain, the summary before the comment.
    from lnk_ask.asker import log_path

    asked = Path(log_path(str(world.settings))).read_bytes()
    assert _only_printable(asked.replace(b"\t", b" "))  # its fields are tab-separated
    question = [line for line in asked.decode().splitlines() if "\tasked\t" in line][-1]
    assert f"reads and writes: {world.work};" in question
    assert question.index("reads and writes") < question.index("The key's comment")
    assert "\\x1b]52;c;" in question


def test_guest_list_and_its_json_show_the_guests_words_escaped(own_world: World) -> None:
    """A spec file named by the guest (kept as its name) with an escape, bidi and Cyrillic:
    `guest list` prints it escaped; `--json` stays JSON (the real name when decoded) and
    holds only printable ASCII."""
    world = own_world
    odd = world.base / "g\x1b]52;c;eA==\x07\u202e\u0430.toml"
    odd.write_text(world.spec.read_text())
    added = world.lnk("guest", "add", "bob", "--spec", str(odd), "--key",
                      str(world.base / "bob.pub"), answer="yes")
    assert added.returncode == 0, added
    assert _only_printable(added.stdout.encode()), added.stdout
    listed = world.lnk("guest", "list")
    assert _only_printable(listed.stdout.encode()), listed.stdout
    assert "g\\x1b]52;c;eA==\\x07\\u202e\\u0430.toml" in listed.stdout
    as_json = world.lnk("guest", "list", "--json")
    assert _only_printable(as_json.stdout.encode()), as_json.stdout
    found = {guest["name"]: guest for guest in json.loads(as_json.stdout)["guests"]}
    assert found["bob"]["spec_file"] == str(odd)


def test_the_guests_log_holds_no_control_character(own_world: World) -> None:
    """A refusal naming a folder the guest named (an escape, bidi, Cyrillic in it) is one
    plain line of guests.log."""
    world = own_world
    odd = world.base / "w\x1b[2J\u202e\u0430"
    odd.mkdir()
    spec = world.base / "odd.toml"
    spec.write_text(f"[files]\nwrite = {toml_list(odd)}\n")
    assert world.lnk("guest", "add", "bob", "--spec", str(spec), "--key",
                     str(world.base / "bob.pub"), answer="yes").returncode == 0
    odd.rmdir()
    refused = world.ssh("true", key="bob")
    assert refused.returncode != 0
    log = (world.settings / "sandbox" / "guests.log").read_bytes()
    assert b"guest-bob" in log and b"refused: " in log
    assert _only_printable(log), log


def test_a_key_comment_on_a_real_terminal_shows_the_summary_and_sets_no_clipboard(
        own_world: World, tmp_path: Path) -> None:
    """`guest add` in a real tmux pane, tmux accepting OSC 52 (set-clipboard on): the pane
    shows the real summary and the comment escaped, no forged line drawn, and tmux made no
    paste buffer from the comment's clipboard sequence."""
    world = own_world
    env = {**world.env, "TERM": "xterm"}
    tmux = Tmux(tmp_path, env)
    key = _evil_key(world)
    done = threading.Event()
    answerer = threading.Thread(target=world._answer, args=("no", done, world.env))
    answerer.start()
    try:
        tmux.tmux("new-session", "-d", "-x", "200", "-y", "50", "-s", "t", "sh")
        tmux.tmux("set-option", "-g", "set-clipboard", "on")
        tmux.send(f"{LNK_SANDBOX} guest add bob --spec {world.spec} --key {key}; "
                  "echo added-$((40+2))", "Enter")
        tmux.wait("added-42")
        assert tmux.tmux("list-buffers") == "", "the comment wrote tmux's clipboard"
        screen = tmux.screen()
        assert f"reads and writes: {world.work}" in screen, screen
        assert "laptop\\x1b[2J\\x1b[H\\x0dguest bob: may write: nothing" in screen, screen
        assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in screen
        assert not [line for line in screen.splitlines()
                    if line.startswith("guest bob: may write: nothing")], screen
    finally:
        done.set()
        answerer.join()
        tmux.stop()
