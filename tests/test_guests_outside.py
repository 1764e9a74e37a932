"""What runs outside for a guest takes nothing of the guest's: attacks over a real sshd
(tests/test_guests_ssh.py's World: its own port, host key and config, with Debian's
`AcceptEnv LANG LC_*`), a real tool defined with `lnk-sandbox tool add` (a stdio MCP
server run by the system's python3, which reads its user site from HOME), reached from the
guest's sandbox through the MCP verb, and a real tmux terminal for the guest's session.

- A guest plants a `.pth`, a `usercustomize` and a `sitecustomize` in its HOME and working
  folder and calls the tool: nothing of it runs outside (the tool starts with the owner's
  HOME and folder, and an environment with nothing the client set).
- A guest's tool call that asks: its question is not on the guest's terminal, a code typed
  there answers nothing, and the question waits in the owner's queue, naming the guest.
- A guest's first session: the owner's first-run notice is in the guests log, not on the
  guest's screen.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lnk_wrap.outside import GUEST_LOCALE, GUEST_PATH, Account, outside_environment
from tests.conftest import LNK_SANDBOX, ROOT, VENV_PYTHON, toml_list, wait_until
from tests.test_guests_ssh import CLIENT_OPTIONS, USER, WAIT_SECONDS, Tmux, World

SYSTEM_PYTHON = "/usr/bin/python3"  # not a venv's: it reads the user site under HOME

# A stdio MCP server (JSON-RPC a line), the owner's tool: it keeps what it was started
# with (its HOME, folder and environment) in SEEN, and `wipe` leaves WIPED.
TOOL = '''
import json, os, sys
with open(sys.argv[1], "a") as seen:
    seen.write(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ)}) + "\\n")
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "demo", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "wipe", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        open(sys.argv[2], "w").close()
        result = {"content": [{"type": "text", "text": "wiped"}]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                 "result": result}) + "\\n")
    sys.stdout.flush()
'''

# The guest's client, inside (python3 -I -S: what the guest planted does not run in it).
CLIENT = '''
import http.client, json, os, sys, urllib.parse
url = urllib.parse.urlsplit(os.environ["LNK_SANDBOX_URL"] + "/mcp/demo")
for number, (method, params) in enumerate([("initialize", {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "guest", "version": "1"}}),
        (sys.argv[1], {"name": sys.argv[2], "arguments": {}} if sys.argv[2:] else {})]):
    body = {"jsonrpc": "2.0", "id": number, "method": method, "params": params}
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=300)
    connection.request("POST", url.path, json.dumps(body), {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream"})
    answer = connection.getresponse().read().decode()
    print("ANSWER-" + str(number + 40), answer, flush=True)
'''

# What the guest writes into its HOME and working folder (both its own folder): each,
# run by a python outside, appends its name to the marker (a folder the guest cannot
# write from its sandbox).
PLANT = '''
import os, sys
marker = sys.argv[1]
code = "try:\\n    open(%r, 'a').write(%r)\\nexcept OSError:\\n    pass\\n"
site = os.path.expanduser("~/.local/lib/python%d.%d/site-packages" % sys.version_info[:2])
os.makedirs(site, exist_ok=True)
with open(os.path.join(site, "lnk-attack.pth"), "w") as pth:
    pth.write("import sys; exec(%r)\\n" % (code % (marker, "pth\\n")))
for folder, name in ((site, "usercustomize"), (os.getcwd(), "sitecustomize"),
                     (os.path.expanduser("~"), "json")):
    with open(os.path.join(folder, name + ".py"), "w") as module:
        module.write(code % (marker, name + "\\n"))
print("PLANTED-" + str(6 * 7))
'''


class ToolWorld:
    """A World whose guest's spec names the tool `demo`, defined by the owner."""

    def __init__(self, base: Path) -> None:
        self.world = World(base)
        world = self.world
        with world.config.open("a") as config:
            config.write("AcceptEnv LANG LC_*\n")  # Debian's default
        self.tool_folder = base / "tool"
        self.tool_folder.mkdir()
        (self.tool_folder / "tool.py").write_text(TOOL)
        (world.data / "client.py").write_text(CLIENT)
        (world.data / "plant.py").write_text(PLANT)
        self.seen = self.tool_folder / "seen.jsonl"
        self.wiped = self.tool_folder / "wiped"
        self.marker = world.other / "ran-outside"
        world.spec.write_text(world.spec.read_text() + '[verbs]\ntools = ["demo"]\n')
        added = subprocess.run(
            [LNK_SANDBOX, "tool", "add", "demo", "--", SYSTEM_PYTHON,
             str(self.tool_folder / "tool.py"), str(self.seen), str(self.wiped)],
            env=world.env, capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
        assert added.returncode == 0, added

    def started_with(self) -> list[dict[str, object]]:
        if not self.seen.exists():
            return []
        return [json.loads(line) for line in self.seen.read_text().splitlines()]


@pytest.fixture
def tool_world() -> Iterator[ToolWorld]:
    assert Path(SYSTEM_PYTHON).exists()
    base = Path(tempfile.mkdtemp(prefix="lnk-guests-outside-"))
    made = ToolWorld(base)
    world = made.world
    try:
        world.start_sshd()
        added = world.lnk("guest", "add", "ann", "--spec", str(world.spec), "--key",
                          str(base / "ann.pub"), answer="yes")
        assert added.returncode == 0, added
        yield made
    finally:
        world.stop()
        shutil.rmtree(base, ignore_errors=True)


def _guest_python(world: World, *words: str) -> str:
    return " ".join([SYSTEM_PYTHON, "-I", "-S", str(world.data / words[0]), *words[1:]])


def test_what_a_guest_plants_in_its_home_and_folder_never_runs_outside(
        tool_world: ToolWorld) -> None:
    """The guest writes a .pth, usercustomize and sitecustomize (and a module named as one
    the tool imports) into its HOME and working folder, and calls the owner's tool: the
    tool starts (tools/list answers) with the owner's HOME and folder, an environment of
    nothing the client sent (LC_ALL, LANG through AcceptEnv; TERM), and the planted code
    never runs outside (the marker, where the guest cannot write, is never made)."""
    world = tool_world.world
    planted = world.ssh(_guest_python(world, "plant.py", str(tool_world.marker)))
    assert "PLANTED-42" in planted.stdout, planted
    assert not tool_world.marker.exists()  # the guest cannot write it from inside
    called = world.ssh(
        _guest_python(world, "client.py", "tools/list"),
        options=("-o", "SetEnv=LC_ALL=C.UTF-8 LANG=/tmp/guest-locale"))
    assert "ANSWER-41" in called.stdout and '"wipe"' in called.stdout, called
    assert not tool_world.marker.exists(), tool_world.marker.read_text()
    started = tool_world.started_with()
    assert len(started) == 1, started
    owner = pwd.getpwuid(os.getuid())
    guest_folder = str(world.settings / "guests" / "ann")
    seen_env = started[0]["env"]
    assert isinstance(seen_env, dict)
    assert seen_env["HOME"] == owner.pw_dir, seen_env
    assert started[0]["cwd"] == owner.pw_dir, started
    assert not any(guest_folder in str(value) for value in seen_env.values()), seen_env
    assert "LC_ALL" not in seen_env and seen_env.get("LANG") == GUEST_LOCALE, seen_env
    assert "TERM" not in seen_env and "SSH_CONNECTION" not in seen_env, seen_env
    # The tool's PATH is its definition's, fixed at `tool add` (the owner's, then: its
    # absolute folders), never the session's.
    assert seen_env.get("PATH") == ":".join(
        folder for folder in world.env["PATH"].split(":") if folder.startswith("/")), seen_env


def _screen_code(screen: str) -> str | None:
    for line in screen.splitlines():
        if "To allow, type " in line:
            return line.split("To allow, type ")[1].split()[0]
    return None


def _asker_of(wire: str) -> int:
    """The pid of lnk-sandbox-ask asking for `wire` (`python -I -S _start.py ask …`)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            words = _cmdline(int(entry.name))
            if words[1:3] == [b"-I", b"-S"] and b"ask" in words and wire.encode() in words:
                return int(entry.name)
    raise AssertionError(f"no lnk-sandbox-ask for {wire}")


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the name: state, ppid, pgrp, session, tty_nr, …"""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _terminal_of(pid: int) -> int:
    """The controlling terminal's device number (0: none)."""
    return int(_stat(pid)[4])


def _parent(pid: int) -> int:
    return int(_stat(pid)[1])


def _asks(world: World) -> list[dict[str, str]]:
    listed = subprocess.run([LNK_SANDBOX, "asks", "--json"], env=world.env,
                            capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
    try:
        found: list[dict[str, str]] = json.loads(listed.stdout)["asks"]
    except (ValueError, KeyError):
        return []
    return found


def test_a_guests_question_is_never_on_its_terminal_and_waits_in_the_owners_queue(
        tool_world: ToolWorld, tmp_path: Path) -> None:
    """A guest's session on a real terminal (tmux) runs a command that calls the tool;
    the call asks. The question (and a code) is never shown on the guest's terminal, what
    the guest types there (the code if one were shown, else any) answers nothing, and the
    question is in the owner's `asks`, naming the guest; the owner's no refuses it."""
    world = tool_world.world
    command = _guest_python(world, "client.py", "tools/call", "wipe")
    env = {**world.env, "TERM": "xterm"}
    tmux = Tmux(tmp_path, env)
    if os.geteuid() == 0:
        shutil.copy(world.base / "ann", tmp_path / "ann")
        session = " ".join(["ssh", *CLIENT_OPTIONS, "-t", "-i", str(tmp_path / "ann"), "-p",
                            str(world.port), f"{USER}@127.0.0.1", command,
                            "; echo SESSION-$((40+2)); sleep 600"])
    else:  # sshd as an ordinary user gives no terminal: tests/test_guests_ssh.py says why
        forced = world.authorized_keys.read_text().split('command="')[1].split('"')[0]
        script = tmp_path / "session.sh"
        script.write_text(
            f"env -i HOME={world.home} USER={USER} LOGNAME={USER} TERM=xterm "
            f"PATH=/usr/bin:/bin SHELL={pwd.getpwuid(os.getuid()).pw_shell} "
            f"SSH_ORIGINAL_COMMAND=\"$1\" {forced}\necho SESSION-$((40+2)); sleep 600\n")
        session = f"sh {script} {shlex.quote(command)}"
    try:
        tmux.tmux("new-session", "-d", "-x", "100", "-y", "30", "-s", "t", session)
        tmux.wait("ANSWER-40")
        wait_until(lambda: len(_asks(world)) == 1, "the guest's question in the owner's "
                 f"queue; the guest's terminal:\n{tmux.screen()}")
        question = _asks(world)[0]
        # The asker, once it asks: with no controlling terminal (it cannot open one), or
        # (before the fix) with its prompt on the guest's screen.
        asker = _asker_of("guest-ann")
        wait_until(lambda: "To allow" in tmux.screen() or _terminal_of(asker) == 0,
                 "the asker to ask")
        screen = tmux.screen()
        # What the guest types on its terminal is no answer: the code, were one shown.
        tmux.send(_screen_code(screen) or "123456", "Enter")
        tmux.send("yes", "Enter")
        assert "lnk-sandbox asks" not in screen and "To allow" not in screen, screen
        assert _terminal_of(asker) == 0 and _terminal_of(_parent(asker)) == 0
        assert [ask["id"] for ask in _asks(world)] == [question["id"]]
        assert question["wire"] == "guest-ann", question
        assert question["title"].startswith("guest ann: demo: run"), question
        assert "For the guest ann, over SSH" in question["question"], question
        answered = subprocess.run([LNK_SANDBOX, "answer", question["id"], "no"],
                                  env=world.env, capture_output=True, text=True,
                                  timeout=WAIT_SECONDS, check=False)
        assert answered.returncode == 0, answered
        tmux.wait("SESSION-42")
        screen = tmux.tmux("capture-pane", "-p", "-J", "-t", "t")  # wrapped lines joined
        assert "did not allow wipe (queue)" in screen, screen
        assert "lnk-sandbox asks" not in screen and "To allow" not in screen, screen
        assert not tool_world.wiped.exists()
        asked = (world.settings / "sandbox" / "asks.log").read_text()
        assert f"\t{question['id']}\tno\tqueue" in asked, asked
        # The owner is told where a guest's questions wait, in the guests log.
        log = (world.settings / "sandbox" / "guests.log").read_text()
        assert " guest-ann - its questions wait in your queue only: lnk-sandbox asks" in log \
            or " guest-ann 127.0.0.1 its questions wait in your queue only" in log, log
    finally:
        tmux.stop()


def test_a_guests_first_session_notice_is_the_owners_not_the_guests(tool_world: ToolWorld
                                                                    ) -> None:
    """The guest's folder is written with its dot files open: the spec's first session
    says so once, in the owner's guests log, and nothing of it on the guest's stderr."""
    world = tool_world.world
    first = world.ssh("true")
    assert first.returncode == 0, first
    assert "first run" not in first.stderr and "dot files" not in first.stderr, first
    log = (world.settings / "sandbox" / "guests.log").read_text().splitlines()
    notices = [line for line in log if " guest-ann " in line and " notice: first run" in line]
    assert len(notices) == 1 and "dot files" in notices[0], log
    assert str(world.settings / "guests" / "ann") in notices[0], log
    again = world.ssh("true")
    assert again.returncode == 0 and again.stderr == "", again
    text = (world.settings / "sandbox" / "guests.log").read_text()
    assert text.count("notice: first run") == 1, text


# -- the rule, as data ----------------------------------------------------------------------

def _written(*folders: str) -> Callable[[str], bool]:
    return lambda path: any(path == folder or path.startswith(folder + "/")
                            for folder in folders)


def test_a_guests_helpers_get_the_owners_account_and_nothing_of_the_session() -> None:
    session = {"HOME": "/srv/lnk/guests/ann", "LANG": "/srv/lnk/guests/ann/loc",
               "LC_ALL": "xx", "TERM": "xterm", "SSH_ORIGINAL_COMMAND": "id",
               "PATH": "/usr/bin", "LD_PRELOAD": "/x.so", "DISPLAY": ":9"}
    made = outside_environment(session, guest="ann", account=Account("me", "/home/me"),
                               written=_written("/srv/lnk/guests/ann"),
                               resolve=lambda path: path)
    assert made.env == {"HOME": "/home/me", "USER": "me", "LOGNAME": "me",
                        "PATH": GUEST_PATH, "LANG": GUEST_LOCALE}
    assert made.own_session and made.notes == ()


def test_a_runs_helpers_get_no_path_the_sandbox_writes() -> None:
    caller = {"PATH": "/proj/node_modules/.bin:/usr/bin::relative:/link-to-proj/bin",
              "HOME": "/home/me", "LD_PRELOAD": "/proj/evil.so", "PWD": "/proj",
              "OLDPWD": "/proj/x", "SSL_CERT_FILE": "/etc/ssl/ca.pem", "TERM": "xterm",
              "DISPLAY": ":0"}
    made = outside_environment(
        caller, guest="", account=Account("me", "/home/me"),
        written=_written("/proj"),
        resolve=lambda path: path.replace("/link-to-proj", "/proj"))
    assert made.env == {"PATH": "/usr/bin::relative", "HOME": "/home/me",
                        "SSL_CERT_FILE": "/etc/ssl/ca.pem", "TERM": "xterm",
                        "DISPLAY": ":0", "PWD": "/"}
    assert not made.own_session
    assert made.notes == ("LD_PRELOAD names a path this sandbox writes; not given to Link's "
                          "helpers outside",)


def test_a_written_home_is_replaced_by_the_accounts_when_that_is_not_written() -> None:
    made = outside_environment(
        {"HOME": "/proj/home"}, guest="", account=Account("me", "/home/me"),
        written=_written("/proj"), resolve=lambda path: path)
    assert made.env["HOME"] == "/home/me"
    both = outside_environment(
        {"HOME": "/home/me"}, guest="", account=Account("me", "/home/me"),
        written=_written("/home/me"), resolve=lambda path: path)
    assert "HOME" not in both.env


def test_the_launcher_and_its_helpers_work_in_the_root_folder(
        tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    """A run from a folder the sandbox writes: the program starts there, and the proxy
    outside (seen through /proc) works in /, with PWD / and no variable naming it."""
    work = tmp_path / "work"
    work.mkdir()
    spec = tmp_path / "spec.toml"
    spec.write_text(f"[files]\nwrite = {toml_list(work)}\n"
                    '[network]\nmode = "proxy"\nhosts = ["example.invalid"]\n')
    marker = work / "ready"
    env = {**sandbox_env, "LNK_TEST_FOLDER": str(work)}
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/sh", "-c",
         f"pwd > {marker}; sleep 60"], cwd=str(work), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def started() -> bool:
            assert run.poll() is None, run.communicate()
            return marker.exists() and bool(marker.read_text())

        wait_until(started, "the program to start")
        assert marker.read_text() == f"{work}\n"
        proxies = [pid for pid in _children(run.pid)
                   if _cmdline(pid)[1:3] == [b"-I", b"-S"] and b"proxy" in _cmdline(pid)]
        assert proxies, "no proxy under the launcher"
        for pid in [run.pid, *proxies]:
            assert os.readlink(f"/proc/{pid}/cwd") == "/"
        environ = Path(f"/proc/{proxies[0]}/environ").read_bytes().split(b"\0")
        assert b"PWD=/" in environ, environ
        assert not any(str(work).encode() in item for item in environ), environ
    finally:
        run.kill()
        _, err = run.communicate(timeout=WAIT_SECONDS)
    # The run says, in one line, what its helpers were not given.
    assert "LNK_TEST_FOLDER names a path this sandbox writes" in err, err


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        for child in map(int, text):
            found += [child, *_children(child)]
    return found


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []



# -- a run: nothing outside reads a path the sandbox writes -------------------------------

LIBRARY = r'''
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
    char name[64] = {0};
    int comm = open("/proc/self/comm", O_RDONLY);
    if (comm >= 0) { read(comm, name, sizeof name - 1); close(comm); }
    int marker = open(MARKER, O_WRONLY | O_APPEND | O_CREAT, 0600);
    if (marker >= 0) { write(marker, name, strlen(name)); close(marker); }
}
'''


def _proxy_spec(tmp_path: Path, work: Path) -> Path:
    spec = tmp_path / "spec.toml"
    spec.write_text(f"[files]\nwrite = {toml_list(work)}\n"
                    '[network]\nmode = "proxy"\nhosts = ["example.invalid"]\n')
    return spec


def test_a_library_a_sandbox_wrote_is_never_loaded_outside(
        tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    """LD_PRELOAD names a library in the folder the sandbox writes (as a sandbox's
    earlier run could have left it): nothing Link starts outside (bubblewrap, the proxy)
    loads it (its constructor writes its process's name to the marker, where the sandbox
    cannot write)."""
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "loaded"
    source = tmp_path / "evil.c"
    source.write_text(LIBRARY.replace("MARKER", json.dumps(str(marker))))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(work / "evil.so"), str(source)],
                   check=True, timeout=WAIT_SECONDS)
    done = subprocess.run(
        [LNK_SANDBOX, "run", "--spec", str(_proxy_spec(tmp_path, work)), "--", "/bin/true"],
        env={**sandbox_env, "LD_PRELOAD": str(work / "evil.so")}, cwd=str(work),
        capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
    # The caller (lnk-sandbox, started with it) loads it: that is the person's own doing.
    loaded_by = set(marker.read_text().split()) if marker.exists() else set()
    assert loaded_by <= {"lnk-sandbox"}, loaded_by
    assert done.returncode == 0, done
    assert "LD_PRELOAD names a path this sandbox writes" in done.stderr, done


def test_a_bubblewrap_a_sandbox_wrote_on_path_is_never_run(
        tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    """A PATH folder the sandbox writes holds a `bwrap` (a sandbox's earlier run could
    have put it there): the launcher takes the system's, never that one."""
    work = tmp_path / "work"
    (work / "bin").mkdir(parents=True)
    marker = tmp_path / "ran"
    planted = work / "bin" / "bwrap"
    planted.write_text(f"#!/bin/sh\ntouch {marker}\nexec /usr/bin/bwrap \"$@\"\n")
    planted.chmod(0o755)
    done = subprocess.run(
        [LNK_SANDBOX, "run", "--spec", str(_proxy_spec(tmp_path, work)), "--", "/bin/true"],
        env={**sandbox_env, "PATH": f"{work / 'bin'}:{sandbox_env.get('PATH', '/usr/bin')}"},
        cwd=str(work), capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
    assert not marker.exists()
    assert done.returncode == 0, done
    refused = subprocess.run(
        [LNK_SANDBOX, "run", "--spec", str(_proxy_spec(tmp_path, work)), "--", "/bin/true"],
        env={**sandbox_env, "LNK_SANDBOX_BWRAP": str(planted)}, cwd=str(work),
        capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
    assert refused.returncode == 125 and not marker.exists(), refused
    assert f"LNK_SANDBOX_BWRAP={planted} names a path this sandbox writes" in refused.stderr


def test_a_run_that_would_write_links_own_code_is_refused(
        tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    """Link run from a copy of its packages in the folder the sandbox writes (a checkout
    the agent works on): the sandbox could change what the proxy imports at its first
    connection, or what the next run's helpers run. Refused, in one line; the same run
    from the real packages runs."""
    work = tmp_path / "work"
    copy = work / "link"
    copy.mkdir(parents=True)
    for package in ROOT.glob("lnk_*"):
        shutil.copytree(package, copy / package.name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    spec = tmp_path / "spec.toml"
    spec.write_text(f"[files]\nwrite = {toml_list(work)}\n")
    words = ["run", "--spec", str(spec), "--", "/bin/true"]

    refused = subprocess.run(
        [VENV_PYTHON, "-I", "-S", str(copy / "lnk_wrap" / "_start.py"), "cli", *words],
        env=sandbox_env, cwd=str(tmp_path), capture_output=True, text=True,
        timeout=WAIT_SECONDS, check=False)
    assert refused.returncode == 125, refused
    assert f"this sandbox writes {work}, inside {copy / 'lnk_ask'}" in refused.stderr \
        or f"this sandbox writes {copy}" in refused.stderr, refused
    assert refused.stderr.count("\n") == 1, refused
    ran = subprocess.run([LNK_SANDBOX, *words], env=sandbox_env, cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=WAIT_SECONDS, check=False)
    assert ran.returncode == 0, ran
