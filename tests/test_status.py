"""lnk-sandbox status: every wire at a glance, from Link's settings folder only.

The counts from log lines and the text from a document (golden, tests/golden/status.txt);
a real sandbox whose wire makes calls, is refused one and holds one open, then
`status --json` showing them, and its command; a run killed before it could remove its
file; the kill switch; and `--watch` in a real terminal (tmux), redrawn in place.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common import wirestate
from lnk_wrap import status
from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    WriteSpec,
    end_run,
    fuzz,
    toml_list,
    wait_until,
)

GOLDEN = Path(__file__).parent / "golden"
WRITE = os.environ.get("LNK_GOLDEN_WRITE") == "1"
PYTHON = "/usr/bin/python3"


def lnk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, *args], env=env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


def test_the_last_minute_is_counted_from_the_log_s_lines() -> None:
    since = "2026-12-04T10:00:00.000Z"
    lines = [
        "2026-12-04T09:59:59.999Z\tallowed\ta.lnkt:443\tid=1 kind=connect",  # too old
        "2026-12-04T10:00:00.000Z\tallowed\ta.lnkt:443\tid=2 kind=connect",
        "2026-12-04T10:00:01.000Z\tended\ta.lnkt:443\tid=2 sent=1 received=2 seconds=1",
        "2026-12-04T10:00:02.000Z\tallowed\ta.lnkt\tkind=dns type=A",  # answered here
        "2026-12-04T10:00:02.000Z\tallowed\ta.lnkt\tkind=dns type=SRV outside=1",
        "2026-12-04T10:00:03.000Z\trefused\tb.lnkt:80\tid=3 reason=the name is not in hosts",
        "2026-12-04T10:00:13.000Z\trefused\t*\tkind=dns type=A more=41 seconds=10 "
        "reason=… and 41 more like this: <name> is not a name",
        "2026-12-04T10:00:14.000Z\tpaused\t-\treason=a metadata service",
        "2026-12-04T10:00:15.000Z\tstarted\t-\trun=ab pid=7",
        "not a line",
    ]
    assert status.count_recent(lines, since) == (2, 42)
    # A digit of another script is no count (int() would take "\uff11" but not "\u00b2").
    other = ["2026-12-04T10:00:13.000Z\trefused\t*\tmore=\u00b2 reason=x",
             "2026-12-04T10:00:13.000Z\trefused\t*\tmore=\uff11 reason=x"]
    assert status.count_recent(other, since) == (0, 2)


_FIELD = st.text(alphabet=st.sampled_from(
    "\t =more\u00b2\uff119Zallowedrefusedkind=dnsoutside\x00\u00e9"), max_size=30)


@fuzz(2)
@given(st.lists(st.tuples(st.sampled_from(["2026-12-04T10:00:00.000Z", "2026"]),
                          st.sampled_from(["allowed", "refused", "ended", "x"]),
                          _FIELD, _FIELD).map("\t".join) | st.text(), max_size=20))
def test_any_log_lines_give_counts_and_nothing_else(lines: list[str]) -> None:
    """Lines as a log could hold them, or not: counts, never an error (a digit of
    another script in `more=` is no count)."""
    calls, refused = status.count_recent(lines, "2026-12-04T10:00:00.000Z")
    assert 0 <= calls <= len(lines) and refused >= 0


DOCUMENT: dict[str, object] = {
    "time": "2026-12-04T10:01:00.000Z", "settings": "/s", "stopped": True,
    "stop_since": "2026-12-04T10:00:30Z", "stop_reason": "lnk-sandbox stop",
    "wires": [
        {"wire": "claude-code", "running": True, "runs": [
            {"run": "0a1b2c3d", "pid": 41, "command": ["claude", "--print", "fix the tests"]},
            {"run": "0a1b2c3e", "pid": 42, "command": ["claude"]}],
         "calls_last_minute": 12, "refused_last_minute": 3, "open_calls": 2,
         "paused": False, "pause_since": None, "pause_reason": None, "asks_waiting": 1},
        {"wire": "guest-ann", "running": False, "runs": [], "calls_last_minute": 0,
         "refused_last_minute": 20, "open_calls": 0, "paused": True,
         "pause_since": "2026-12-04T10:00:58Z",
         "pause_reason": "20 different targets refused within 60 s\x1b[2J", "asks_waiting": 0},
        {"wire": "evil", "running": True, "runs": [
            {"run": "0a1b2c3f", "pid": 43, "command": ["sh", "-c", "\x1b]52;c;cm0=\x07"]}],
         "calls_last_minute": 0, "refused_last_minute": 0, "open_calls": 0,
         "paused": False, "pause_since": None, "pause_reason": None, "asks_waiting": 0},
    ],
    "idle_wires": ["old", "older"], "wires_error": None, "asks_waiting": 1,
    "asks_error": None,
}


def test_the_text_golden() -> None:
    """What a person sees: the kill switch, a row a wire, a pause's reason, the rest."""
    found = status.render(DOCUMENT)
    path = GOLDEN / "status.txt"
    if WRITE:
        path.write_text(found)
    assert found == path.read_text(), "LNK_GOLDEN_WRITE=1 writes it again"
    assert all(" " <= character <= "~" for character in found.replace("\n", ""))


def _spec(write_spec: WriteSpec, testnet: Path, name: str, marks: Path) -> Path:
    return write_spec(f'name = "{name}"\n[files]\nread = {toml_list(testnet)}\n'
                      f"write = {toml_list(marks)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt", "allowed.lnkt:7"]\n')


# Inside: a call, a refused one, then a tunnel held open (the echo on allowed.lnkt:7)
# until the test writes `go`.
_CALLS_THEN_HOLD = """
import os, socket, sys, time
def get(url):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    host = url.split("/")[2]
    s.sendall(f"GET {url} HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n".encode())
    while s.recv(65536):
        pass
get("http://allowed.lnkt/ok")
get("http://not-listed.lnkt/")
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(b"CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n")
assert b" 200 " in s.recv(4096)
s.sendall(b"x")
s.recv(1)
open(os.path.join(sys.argv[1], "open"), "w").write("open")
while not os.path.exists(os.path.join(sys.argv[1], "go")):
    time.sleep(0.05)
"""


def _wire_of(env: dict[str, str], name: str) -> dict[str, Any] | None:
    done = lnk(env, "status", "--json")
    assert done.returncode == 0, done.stderr
    return next((wire for wire in json.loads(done.stdout)["wires"] if wire["wire"] == name),
                None)


def _wire_where(env: dict[str, str], name: str, key: str, value: object
                ) -> dict[str, Any] | None:
    found = _wire_of(env, name)
    return found if found is not None and found[key] == value else None


def test_a_real_wire_s_calls_refusal_open_call_and_command(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = _spec(write_spec, testnet, "glance", marks)
    # What a run and a proxy killed (SIGKILL) before would have left: swept by this
    # run's end and this run's proxy.
    folder = Path(sandbox_env["LNK_HOME"]) / "sandbox" / "wires" / "glance"
    dead = subprocess.Popen(["true"])
    dead.wait()
    (folder / "runs").mkdir(parents=True)
    (folder / "open").mkdir()
    (folder / "runs" / "deadbeef").write_bytes(f"{dead.pid}\n".encode() + b"old\0")
    (folder / "open" / str(dead.pid)).write_text("5\n")
    command = [PYTHON, "-I", "-c", _CALLS_THEN_HOLD, str(marks)]
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", *command],
                           env=sandbox_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_until(lambda: (marks / "open").exists() or run.poll() is not None,
                   "the tunnel held open")
        assert run.poll() is None, run.communicate()
        # The open call is written within a second (lnk_common.serving).
        wire = wait_until(lambda: _wire_where(sandbox_env, "glance", "open_calls", 1),
                          "one open call shown")
        assert wire["running"] is True and wire["paused"] is False
        assert (wire["calls_last_minute"], wire["refused_last_minute"]) == (2, 1)
        runs = wire["runs"]
        assert isinstance(runs, list) and len(runs) == 1
        assert runs[0]["command"] == command and runs[0]["pid"] == run.pid
        text = lnk(sandbox_env, "status").stdout
        row = next(line for line in text.splitlines() if line.startswith("glance "))
        assert row.split()[:6] == ["glance", "running", "2", "1", "1", "0"], text
        assert row.endswith("  /usr/bin/python3 -I -c '\\x0aimport os, socket, sys, time\\x0adef "
                            "get(url):\\x0a    s = socket.create_connection...")
        (marks / "go").write_text("go")
        assert run.wait(timeout=SANDBOX_TIMEOUT_SECONDS) == 0, run.communicate()
    finally:
        end_run(run)
    # Ended: no run, no open call; the last minute's calls still shown.
    ended = wait_until(lambda: _wire_where(sandbox_env, "glance", "running", False),
                       "the run gone from status")
    assert ended["open_calls"] == 0 and ended["calls_last_minute"] == 2
    assert list((folder / "runs").iterdir()) == []
    assert list((folder / "open").iterdir()) == []


def test_a_run_killed_before_it_removed_its_file_is_not_running(
    sandbox_env: dict[str, str], lnk_home: Path
) -> None:
    """A launcher killed (SIGKILL) leaves its run's file and a helper its open calls: the
    pid gone, or used again by a process started since, counts for nothing."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    later = subprocess.Popen(["sleep", "30"])
    try:
        folder = lnk_home / "sandbox" / "wires" / "killed"
        (folder / "runs").mkdir(parents=True)
        (folder / "open").mkdir()
        for pid in (gone.pid, later.pid, os.getpid()):
            (folder / "runs" / f"r{pid}").write_bytes(f"{pid}\n".encode() + b"cmd\0")
            (folder / "open" / str(pid)).write_text("3\n")
        old = 1_000_000_000  # written long before `later` (and this test) started
        for path in (folder / "runs" / f"r{later.pid}", folder / "open" / str(later.pid)):
            os.utime(path, (old, old))
        wire = _wire_of(sandbox_env, "killed")
        assert wire is not None and wire["open_calls"] == 3
        assert [run["pid"] for run in wire["runs"]] == [os.getpid()]
    finally:
        later.kill()
        later.wait()


def test_the_kill_switch_and_a_pause_are_shown_with_their_reasons(
    sandbox_env: dict[str, str], lnk_home: Path
) -> None:
    wirestate.pause(str(lnk_home), "watched", "a metadata service was asked for")
    assert lnk(sandbox_env, "stop").returncode == 0
    found = json.loads(lnk(sandbox_env, "status", "--json").stdout)
    assert found["stopped"] is True and found["stop_reason"] == "lnk-sandbox stop"
    wire = found["wires"][0]
    assert (wire["wire"], wire["paused"], wire["pause_reason"]) == (
        "watched", True, "a metadata service was asked for")
    text = lnk(sandbox_env, "status").stdout
    assert "kill switch: ON since " in text and "watched paused since" in text
    assert lnk(sandbox_env, "stop", "--clear").returncode == 0
    assert lnk(sandbox_env, "resume", "watched").returncode == 0
    found = json.loads(lnk(sandbox_env, "status", "--json").stdout)
    assert (found["stopped"], found["wires"], found["idle_wires"]) == (False, [], ["watched"])


def test_no_start_imports_status_or_explain() -> None:
    """Each is imported by its own verb only (and explain by `guest add` and a first run
    with write_dot_files): the modules on a sandbox's start, a helper's and a guest
    session's import neither."""
    import sys

    code = ("import sys, lnk_wrap.cli, lnk_wrap.launch, lnk_wrap.runs, lnk_wrap.enter, "
            "lnk_wrap.guests_view, lnk_common.serving, lnk_proxy.main, lnk_relay.main; "
            "print(sorted(name for name in sys.modules if name in "
            "('lnk_wrap.status', 'lnk_wrap.explain')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert done.stdout == "[]\n", done


def test_a_wires_folder_that_cannot_be_read_is_said_not_shown_as_none(
    sandbox_env: dict[str, str], lnk_home: Path
) -> None:
    """A file where the wires' folder is (root passes over a folder's modes): the text and
    the JSON say the wires cannot be listed, never that there is none."""
    (lnk_home / "sandbox").mkdir()
    (lnk_home / "sandbox" / "wires").write_text("not a folder")
    found = json.loads(lnk(sandbox_env, "status", "--json").stdout)
    assert found["wires"] == [] and "Not a directory" in found["wires_error"]
    assert "the wires cannot be listed: " in lnk(sandbox_env, "status").stdout


def test_watch_needs_a_terminal(sandbox_env: dict[str, str]) -> None:
    done = lnk(sandbox_env, "status", "--watch")
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1


# -- --watch in a real terminal ------------------------------------------------------------


class Tmux:
    """A tmux server of the test's own (its socket in the test's folder)."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.socket = str(tmp_path / "tmux.sock")
        self.env = env

    def tmux(self, *words: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *words],
                              env=self.env, capture_output=True, text=True, check=True,
                              timeout=SANDBOX_TIMEOUT_SECONDS).stdout

    def screen(self) -> str:
        try:
            return self.tmux("capture-pane", "-p", "-t", "t")
        except subprocess.CalledProcessError:
            return ""


def _holding(tmux: Tmux, words: str) -> str | None:
    screen = tmux.screen()
    return screen if words in screen else None


@pytest.fixture
def tmux(tmp_path: Path, sandbox_env: dict[str, str]) -> Iterator[Tmux]:
    found = Tmux(tmp_path, {key: value for key, value in sandbox_env.items()
                            if key not in ("DISPLAY", "WAYLAND_DISPLAY", "TMUX")})
    yield found
    subprocess.run(["tmux", "-S", found.socket, "kill-server"], capture_output=True,
                   check=False, timeout=SANDBOX_TIMEOUT_SECONDS)


def test_watch_redraws_in_place_and_gives_the_screen_back(
    tmux: Tmux, lnk_home: Path, tmp_path: Path
) -> None:
    ended = tmp_path / "ended"
    tmux.tmux("new-session", "-d", "-x", "80", "-y", "30", "-s", "t", "sh")
    tmux.tmux("send-keys", "-t", "t", "clear; echo before-the-watch", "Enter")
    wait_until(lambda: "before-the-watch\n" in tmux.screen(), "the shell's line")
    tmux.tmux("send-keys", "-t", "t", f"{shlex.quote(LNK_SANDBOX)} status --watch; "
              f"echo watch-ended-$? > {shlex.quote(str(ended))}", "Enter")
    wait_until(lambda: "(every 1 s; Ctrl-C ends)" in tmux.screen(), "the watch drawn")
    assert "no wire runs" in tmux.screen()
    wirestate.pause(str(lnk_home), "watched", "twenty refusals " + "and more " * 30)
    screen = wait_until(lambda: _holding(tmux, "PAUSED"), "the pause drawn")
    assert "watched  PAUSED" in screen and "before-the-watch" not in screen
    assert screen.count("lnk-sandbox status at") == 1  # in place: drawn over, not below
    # Each line cut to the terminal's 80 columns: the long reason wraps into no other.
    lines = screen.splitlines()
    assert lines[0].startswith("lnk-sandbox status at") and max(map(len, lines)) <= 80
    paused_at = next(index for index, line in enumerate(lines)
                     if line.startswith("  watched paused since"))
    assert lines[paused_at + 1].startswith("calls and refused: in the last minute")
    wirestate.resume(str(lnk_home), "watched")
    wait_until(lambda: "PAUSED" not in tmux.screen() and "1 other wire idle" in tmux.screen(),
               "the resume drawn")
    tmux.tmux("send-keys", "-t", "t", "C-c")  # as a person ends it
    assert wait_until(lambda: ended.exists() and ended.read_text(), "the watch ended") \
        == "watch-ended-0\n"
    screen = wait_until(lambda: _holding(tmux, "before-the-watch"),
                        "the shell's screen given back")
    assert "lnk-sandbox status at" not in screen
