"""Asking the person (lnk_ask, lnk-sandbox-ask, `lnk-sandbox asks|answer`), for real.

Each way is driven as the person would: the queue answered by `lnk-sandbox answer` from
another process; the terminal through tmux (capture-pane reads what is shown, send-keys
types); the dialog with zenity on Xvfb, clicked with xdotool (a screenshot kept in the
test's folder). The attacks run in a real sandbox (`lnk-sandbox run`): a faked question
on the terminal, TIOCSTI, the queue, another wire's question. The dialogs of an asker
started here, with no sandbox, are tests/test_ask_dialog.py's (run once, not as each user).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import shlex
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_ask import Answer, ask, ask_async, printable
from lnk_ask.asker import AskUsageError, log_path
from lnk_ask.main import UsageError, parse
from lnk_ask.queue import MAX_WAITING_PER_WIRE, AskQueue, QueueError, id_problem
from lnk_ask.text import MAX_ALLOWS_CHARS, MAX_QUESTION_CHARS
from lnk_ask.ways import (
    CHECKBOX_LINES,
    DIALOG_HEIGHT,
    DIALOG_WIDTH,
    ZENITY_NO_DISPLAY,
    Dialog,
    checkbox_label,
    code_matches,
    dialog_environment,
    dialog_lines,
    dialog_size,
    dialog_text,
    dialog_verdict,
    find_program,
    notify_argv,
    osascript_argv,
    pick_dialog,
    zenity_argv,
)
from lnk_common.chain import helper_argv
from lnk_proxy.open_rules import MAX_URL_BYTES
from tests.conftest import LNK_SANDBOX, WriteSpec, fuzz, toml_list, wait_until

ASK = str(Path(sys.executable).parent / "lnk-sandbox-ask")
EXIT_REFUSED = 125
# A step a test waits for (a question queued, a window shown) that takes longer is hung.
WAIT_SECONDS = 30.0


# -- printable(): what the person reads -----------------------------------------------------


def read_back(shown: str) -> str:
    """printable()'s inverse (for a text under the limit): proves no two texts read alike."""
    out, index = [], 0
    while index < len(shown):
        char = shown[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        kind = shown[index + 1]
        width = {"\\": 0, "x": 2, "u": 4, "U": 8}[kind]
        out.append("\\" if kind == "\\" else chr(int(shown[index + 2:index + 2 + width], 16)))
        index += 2 + width
    return "".join(out)


def printable_ascii(text: str) -> bool:
    return all(0x20 <= ord(char) <= 0x7E for char in text)


@fuzz(5)
@given(st.text(alphabet=st.characters(codec=None), max_size=300))
def test_printable_is_printable_ascii_and_reads_back(text: str) -> None:
    shown = printable(text)
    assert printable_ascii(shown)
    assert read_back(shown) == text


@fuzz(3)
@given(st.text(max_size=80), st.text(max_size=80))
def test_printable_keeps_distinct_texts_distinct(first: str, second: str) -> None:
    if first != second:
        assert printable(first) != printable(second)


@fuzz(2)
@given(st.text(min_size=1, max_size=50), st.integers(min_value=0, max_value=40))
def test_printable_bounds_long_texts_and_tells_them_apart(tail: str, extra: int) -> None:
    head = "\u202e" * (MAX_QUESTION_CHARS // 6 + 1 + extra)  # each escape: 6 characters
    first, second = printable(head + tail), printable(head + tail + "!")
    assert len(first) <= MAX_QUESTION_CHARS and len(second) <= MAX_QUESTION_CHARS
    assert printable_ascii(first) and printable_ascii(second)
    assert first != second  # the digest of the whole differs
    assert "not shown whole; sha256" in first
    # No half escape before the note: the kept part reads back as a prefix of the text.
    kept = first.split(" [... ")[0]
    assert (head + tail).startswith(read_back(kept))


def test_printable_examples() -> None:
    assert printable("rm -rf /") == "rm -rf /"
    assert printable("a\nb\x1b[2J") == "a\\x0ab\\x1b[2J"
    assert printable("evil\u202etxt.exe") == "evil\\u202etxt.exe"  # a bidi override
    assert printable("p\u0430ypal") == "p\\u0430ypal"  # Cyrillic a
    assert printable("\\x0a") == "\\\\x0a"  # a typed escape is not a newline
    assert printable("\U0001f600") == "\\U0001f600"


# -- the ways as data ---------------------------------------------------------------------


def test_zenity_argv_golden() -> None:
    assert zenity_argv("/usr/bin/zenity", "github: run delete_repo?",
                       "sandbox w, server github, tool delete_repo", 120, (680, 460)) == [
        "/usr/bin/zenity", "--text-info", "--title=github: run delete_repo?", "--editable",
        "--checkbox=I have read it, and allow: sandbox w, \nserver github, tool delete_repo",
        "--font=Monospace 10", "--width=680", "--height=460", "--ok-label=Allow",
        "--cancel-label=Deny", "--timeout=120"]


def test_checkbox_label_says_what_a_yes_allows_cut_to_fit() -> None:
    assert checkbox_label("sandbox w opens a page on a.example", 680) == (
        "I have read it, and allow: sandbox w opens \na page on a.example")
    for width, chars in ((680, 43), (512, 31)):
        lines = checkbox_label("W" * MAX_ALLOWS_CHARS, width).split("\n")
        assert len(lines) == CHECKBOX_LINES and lines[-1].endswith("W [cut]")
        assert max(len(line) for line in lines) == chars


def test_dialog_size_and_text() -> None:
    assert dialog_size(None) == (DIALOG_WIDTH, DIALOG_HEIGHT)
    assert dialog_size((3840, 2160)) == (DIALOG_WIDTH, DIALOG_HEIGHT)
    assert dialog_size((640, 480)) == (512, 384)
    text = dialog_text("w: open a.example?", "x" * 200, 680)
    assert text == ("w: open a.example?\n(3 lines below: read them to the end)\n\n"
                    + "x" * 76 + "\n" + "x" * 76 + "\n" + "x" * 48 + "\n")


@fuzz(3)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=400),
       st.integers(min_value=1, max_value=120))
def test_dialog_lines_keep_every_character(text: str, width: int) -> None:
    lines = dialog_lines(text, width).split("\n")
    assert "".join(lines) == text
    assert all(len(line) <= width for line in lines)


def test_notify_argv_golden() -> None:
    assert notify_argv("/usr/bin/notify-send", "T", "a <b> & c", 3) == [
        "/usr/bin/notify-send", "--app-name=lnk-sandbox", "--urgency=critical", "--wait",
        "--expire-time=3000", "--action=yes=Allow", "--action=no=Deny", "--",
        "T", "a &lt;b&gt; &amp; c"]


def test_osascript_argv_golden() -> None:
    """Generated here; not run on a Mac yet (docs/components/README.md, "Stated gaps", says so)."""
    assert osascript_argv('T "x"', '-say \\ "hi") & do shell script "x', 60) == [
        "/usr/bin/osascript", "-e", "on run argv", "-e",
        'display dialog (item 2 of argv) with title (item 3 of argv) buttons {"Deny", "Allow"} '
        'default button "Deny" cancel button "Deny" with icon caution giving up after 60',
        "-e", "end run", "lnk-sandbox", '-say \\ "hi") & do shell script "x', 'T "x"']


@pytest.mark.parametrize(("kind", "status", "output", "verdict"), [
    ("notify-send", 0, "yes\n", "yes"), ("notify-send", 0, "no\n", "no"),
    ("notify-send", 0, "\n", None), ("notify-send", 1, "yes", None),
    ("osascript", 0, "button returned:Allow, gave up:false", "yes"),
    ("osascript", 0, "button returned:, gave up:true", None),
    ("osascript", 1, "execution error: User canceled. (-128)", "no"),
    ("osascript", 1, "execution error: other (-1728)", None),
    ("other", 0, "yes", None),
])
def test_dialog_verdicts(kind: str, status: int, output: str, verdict: str | None) -> None:
    assert dialog_verdict(kind, status, output) == verdict


@pytest.mark.parametrize(("status", "output", "verdict"), [
    (0, "T\n\nQ\n", "yes"), (0, "T\n\nQ \n", "no"), (0, "T\n\n\nQ\n", "no"), (0, "", "no"),
    (1, "", "no"), (5, "", None), (255, "", None), (-15, "", None),
])
def test_zenity_verdicts(status: int, output: str, verdict: str | None) -> None:
    """Allow is yes only with the text as shown: a key that landed in it is no."""
    assert dialog_verdict("zenity", status, output, shown="T\n\nQ\n") == verdict
    assert dialog_verdict("zenity", 0, "", shown="") == "no"  # nothing shown: never yes


def test_a_zenity_that_cannot_open_its_display_is_no_answer_not_a_no() -> None:
    """zenity exits 1 both for Deny and when GTK cannot open the display: only the first is
    the person's no; the second leaves the question open on the other ways. The message
    is the one real zenity prints (DISPLAY naming no server: the status and text below
    are read from it)."""
    import subprocess

    free = next(number for number in range(177, 400)
                if not Path(f"/tmp/.X11-unix/X{number}").exists()
                and not Path(f"/tmp/.X{number}-lock").exists())
    done = subprocess.run(["zenity", "--question", "--text", "q"], env={
        "PATH": "/usr/bin:/bin", "DISPLAY": f":{free}"}, capture_output=True, text=True,
        timeout=30, check=False)
    assert done.returncode == 1 and ZENITY_NO_DISPLAY in done.stderr, done
    dialog = Dialog("zenity", ["zenity"], "T\n\nQ\n")
    assert dialog.verdict(done.returncode, done.stdout, done.stderr) is None
    assert dialog.verdict(1, "", "") == "no"
    assert dialog.verdict(1, "", "(zenity:1): Gtk-WARNING **: something else") == "no"


def test_no_screen_no_dialog_and_programs_only_from_system_folders(tmp_path: Path) -> None:
    assert pick_dialog({}, "linux", "T", "Q", 5, allows="A") is None
    planted = tmp_path / "zenity"
    planted.write_text("#!/bin/sh\nexit 0\n")
    planted.chmod(0o755)
    # A zenity on PATH (a folder a sandbox may write) is never the one run.
    assert find_program("zenity", (str(tmp_path),)) == str(planted)  # a sane folder: found
    tmp_path.chmod(0o777)
    try:
        assert find_program("zenity", (str(tmp_path),)) is None  # others may write it
    finally:
        tmp_path.chmod(0o755)
    found = pick_dialog({"DISPLAY": ":9", "PATH": str(tmp_path)}, "linux", "T", "Q", 5,
                        allows="A")
    assert found is not None and found.argv[0] == "/usr/bin/zenity"
    kept = dialog_environment({"DISPLAY": ":9", "LD_PRELOAD": "/x.so", "GTK_MODULES": "x",
                               "PATH": str(tmp_path), "HOME": "/root"})
    assert kept == {"DISPLAY": ":9", "HOME": "/root", "PATH": "/usr/bin:/bin",
                    "GTK_OVERLAY_SCROLLING": "0"}


def test_code_matches_only_the_code() -> None:
    assert code_matches(b"123456", "123456")
    assert code_matches(b" 123 456 ", "123456")
    for typed in (b"", b"12345", b"1234567", b"y", b"yes", b"123457"):
        assert not code_matches(typed, "123456")


def test_command_line_parse() -> None:
    assert parse(["--title", "T", "--question=Q"]) == {
        "--title": "T", "--question": "Q", "--timeout": "120", "--wire": "ask", "--json": False,
        "--whole": False}
    for words in (["--title", "T"], ["--title", "T", "--question"], ["--title=T",
                  "--question=Q", "--title=U"], ["--title=T", "--question=Q", "--yes"],
                  ["--title=T", "--question=Q", "--json=1"]):
        with pytest.raises(UsageError):
            parse(words)


def test_ask_helper_argv_is_isolated() -> None:
    argv = helper_argv("ask")
    assert argv[1:3] == ["-I", "-S"] and argv[-1] == "ask"


@pytest.mark.parametrize("words", [
    [], ["--title=T"], ["--title=T", "--question=Q", "--timeout=0"],
    ["--title=T", "--question=Q", "--timeout=x"], ["--title=T", "--question=Q", "--wire=a/b"],
    ["--title=T", "--question=Q", "--timeout=100000"], ["--title= ", "--question=Q"],
])
def test_bad_usage_exits_2(words: list[str], sandbox_env: dict[str, str]) -> None:
    done = subprocess.run([ASK, *words], env=sandbox_env, capture_output=True, text=True,
                          timeout=WAIT_SECONDS, check=False, stdin=subprocess.DEVNULL,
                          start_new_session=True)
    assert done.returncode == 2, done
    assert done.stderr.strip().splitlines()[-1].startswith("lnk-sandbox-ask: ")


def test_id_problem() -> None:
    assert id_problem("0123456789ab") is None
    for bad in ("", "0123456789a", "0123456789abc", "0123456789aB", "../../etc/pa",
                "0123456789a/"):
        assert id_problem(bad) is not None


# -- the queue, answered from another process ----------------------------------------------


def cli(env: dict[str, str], *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, *words], env=env, capture_output=True, text=True,
                          timeout=WAIT_SECONDS, check=False, stdin=subprocess.DEVNULL)


def start_ask(env: dict[str, str], *words: str, timeout: int = 30) -> subprocess.Popen[str]:
    """lnk-sandbox-ask with no terminal (a new session) and no screen: the queue only."""
    quiet = {key: value for key, value in env.items()
             if key not in ("DISPLAY", "WAYLAND_DISPLAY")}
    return subprocess.Popen([ASK, "--timeout", str(timeout), "--json", *words], env=quiet,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(process: subprocess.Popen[str]) -> tuple[int, dict[str, str], str]:
    out, err = process.communicate(timeout=WAIT_SECONDS * 2)
    return process.returncode, json.loads(out), err


def waiting(env: dict[str, str], wire: str | None = None) -> list[dict[str, object]]:
    listed = cli(env, "asks", "--json")
    assert listed.returncode == 0, listed
    found: list[dict[str, object]] = json.loads(listed.stdout)["asks"]
    return [entry for entry in found if wire is None or entry["wire"] == wire]


def test_queue_answered_yes_by_another_process(sandbox_env: dict[str, str],
                                               lnk_home: Path) -> None:
    asker = start_ask(sandbox_env, "--title", "Tool call: demo", "--question",
                      "wipe {\"all\": true}\nnow\u202e?", "--wire", "w1")
    try:
        entries = wait_until(lambda: waiting(sandbox_env), "the question in asks")
        assert isinstance(entries, list) and len(entries) == 1
        entry = entries[0]
        assert set(entry) == {"id", "wire", "title", "question", "allows", "since"}
        assert entry["allows"] == "what the wire w1 asks: Tool call: demo"
        assert entry["wire"] == "w1" and entry["title"] == "Tool call: demo"
        assert entry["question"] == 'wipe {"all": true}\\x0anow\\u202e?'
        ident = str(entry["id"])
        folder = lnk_home / "sandbox" / "asks"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / f"{ident}.json").stat().st_mode) == 0o600
        shown = cli(sandbox_env, "asks")
        assert ident in shown.stdout and f"lnk-sandbox answer {ident} yes|no" in shown.stdout
        done = cli(sandbox_env, "answer", ident, "yes")
        assert (done.returncode, done.stdout) == (0, f"answered yes: {ident}\n"), done
        status, found, _ = finish(asker)
        assert (status, found) == (0, {"answer": "yes", "how": "queue", "id": ident})
        # Answered already: one line, 125, saying how it was answered.
        again = cli(sandbox_env, "answer", ident, "no")
        assert again.returncode == EXIT_REFUSED
        assert again.stderr == (f"lnk-sandbox: the question {ident} has ended: answered yes "
                                "(queue)\n")
        assert waiting(sandbox_env) == []
        log = Path(log_path(str(lnk_home))).read_text().splitlines()
        assert [line.split("\t")[1:] for line in log] == [
            ["w1", ident, "asked", "Tool call: demo", 'wipe {"all": true}\\x0anow\\u202e?'],
            ["w1", ident, "yes", "queue"]]
        assert stat.S_IMODE(Path(log_path(str(lnk_home))).stat().st_mode) == 0o600
    finally:
        asker.kill()
        asker.communicate()


def test_queue_answered_no(sandbox_env: dict[str, str]) -> None:
    asker = start_ask(sandbox_env, "--title", "T", "--question", "Q")
    try:
        entries = wait_until(lambda: waiting(sandbox_env), "the question")
        assert isinstance(entries, list)
        ident = str(entries[0]["id"])
        assert cli(sandbox_env, "answer", ident, "no").returncode == 0
        status, found, _ = finish(asker)
        assert (status, found["answer"], found["how"]) == (1, "no", "queue")
    finally:
        asker.kill()
        asker.communicate()


def test_answer_refusals(sandbox_env: dict[str, str]) -> None:
    unknown = cli(sandbox_env, "answer", "0123456789ab", "yes")
    assert (unknown.returncode, unknown.stderr) == (
        EXIT_REFUSED, "lnk-sandbox: no question 0123456789ab waits (see lnk-sandbox asks)\n")
    bad_id = cli(sandbox_env, "answer", "../../x", "yes")
    assert bad_id.returncode == EXIT_REFUSED and len(bad_id.stderr.splitlines()) == 1
    for word in ("maybe", "YES", "y", "1", ""):
        done = cli(sandbox_env, "answer", "0123456789ab", word)
        assert done.returncode == 2, done
        assert len(done.stderr.splitlines()) == 1
    assert cli(sandbox_env, "answer", "0123456789ab").returncode == 2  # docopt's usage


def test_silence_is_no_after_the_timeout(sandbox_env: dict[str, str], lnk_home: Path) -> None:
    started = time.monotonic()
    asker = start_ask(sandbox_env, "--title", "T", "--question", "Q", timeout=2)
    status, found, err = finish(asker)
    assert time.monotonic() - started >= 2
    assert (status, found["answer"], found["how"]) == (1, "no", "timeout")
    assert f"lnk-sandbox answer {found['id']} yes|no" in err  # said, and silence is still no
    # The late answer is told who decided.
    late = cli(sandbox_env, "answer", found["id"], "yes")
    assert late.returncode == EXIT_REFUSED and "answered no (timeout)" in late.stderr
    assert Path(log_path(str(lnk_home))).read_text().splitlines()[-1].endswith("\tno\ttimeout")


def test_python_api_in_a_thread_and_async(sandbox_env: dict[str, str], lnk_home: Path) -> None:
    env = {key: value for key, value in sandbox_env.items() if key != "DISPLAY"}
    result: list[Answer] = []
    thread = threading.Thread(target=lambda: result.append(
        ask(str(lnk_home), "api", "T", "Q", 30, env=env, terminal="")))
    thread.start()
    entries = wait_until(lambda: waiting(sandbox_env, "api"), "the API's question")
    assert isinstance(entries, list)
    assert cli(sandbox_env, "answer", str(entries[0]["id"]), "yes").returncode == 0
    thread.join(WAIT_SECONDS)
    assert result and result[0].yes and result[0].how == "queue"

    async def asked() -> Answer:
        return await ask_async(str(lnk_home), "api2", "T", "Q", 30, env=env)

    answers: list[Answer] = []
    runner = threading.Thread(target=lambda: answers.append(asyncio.run(asked())))
    runner.start()
    entries = wait_until(lambda: waiting(sandbox_env, "api2"), "the async question")
    assert isinstance(entries, list)
    assert cli(sandbox_env, "answer", str(entries[0]["id"]), "no").returncode == 0
    runner.join(WAIT_SECONDS)
    assert answers and not answers[0].yes and answers[0].how == "queue"
    with pytest.raises(AskUsageError):
        ask(str(lnk_home), "bad/wire", "T", "Q", 5)


def test_too_many_questions_of_one_wire(lnk_home: Path) -> None:
    queue = AskQueue(str(lnk_home))
    for _ in range(MAX_WAITING_PER_WIRE):
        queue.open_question("busy", "T", "Q", time.time() + 60)
    with pytest.raises(QueueError, match="wait already"):
        queue.open_question("busy", "T", "Q", time.time() + 60)
    queue.open_question("other", "T", "Q", time.time() + 60)  # another wire still asks
    found = ask(str(lnk_home), "busy", "T", "Q", 5, env={}, terminal="")
    assert (found.answer, found.how) == ("no", "error")


def test_a_link_planted_at_the_queue_is_refused(lnk_home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (lnk_home / "sandbox").mkdir()
    (lnk_home / "sandbox" / "asks").symlink_to(elsewhere)
    found = ask(str(lnk_home), "w", "T", "Q", 5, env={}, terminal="")
    assert (found.answer, found.how) == ("no", "error") and "not a folder" in found.reason
    assert list(elsewhere.iterdir()) == []


# -- the terminal, through tmux -------------------------------------------------------------


class Tmux:
    """A tmux server of the test's own (its socket in the test's folder)."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.socket = str(tmp_path / "tmux.sock")
        self.env = env

    def tmux(self, *words: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *words],
                              env=self.env, capture_output=True, text=True, check=True,
                              timeout=WAIT_SECONDS).stdout

    def start(self, command: str, columns: int = 200, rows: int = 50) -> None:
        self.tmux("new-session", "-d", "-x", str(columns), "-y", str(rows), "-s", "t", command)
        # A detached session takes the size of the window given, not of a client's.
        self.tmux("set-option", "-t", "t", "window-size", "manual")
        self.tmux("resize-window", "-t", "t", "-x", str(columns), "-y", str(rows))

    def screen(self) -> str:
        try:
            return self.tmux("capture-pane", "-p", "-t", "t")
        except subprocess.CalledProcessError:
            return ""

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "t", *keys)

    def stop(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True,
                       check=False, timeout=WAIT_SECONDS)


@pytest.fixture
def tmux(tmp_path: Path, sandbox_env: dict[str, str]) -> Iterator[Tmux]:
    env = {key: value for key, value in sandbox_env.items()
           if key not in ("DISPLAY", "WAYLAND_DISPLAY", "TMUX")}
    found = Tmux(tmp_path, env)
    yield found
    found.stop()


QUESTION_SHOWN = re.compile(r"\[lnk\] asks \(([0-9a-f]{12}), wire [^)]*\)[\s\S]*"
                            r"Type (\d{6}) to allow: ")


def shown_code(tmux: Tmux) -> tuple[str, str]:
    match = wait_until(lambda: QUESTION_SHOWN.search(tmux.screen()), "the question on the terminal")
    assert isinstance(match, re.Match)
    return match.group(1), match.group(2)


def ask_in_pane(tmux: Tmux, out: Path, before: str = "", wire: str = "term") -> None:
    command = (f"{before}{shlex.quote(ASK)} --title 'Tool call: demo' "
               f"--question 'wipe everything?' --wire {wire} --timeout 60 --json "
               f"> {shlex.quote(str(out))}")
    tmux.start(f"sh -c {shlex.quote(command + '; sleep 60')}")


def answer_in(out: Path) -> dict[str, str]:
    text = wait_until(lambda: out.exists() and out.read_text().strip(), "the asker's answer")
    assert isinstance(text, str)
    found: dict[str, str] = json.loads(text)
    return found


def test_terminal_code_typed_back_is_yes(tmux: Tmux, tmp_path: Path) -> None:
    out = tmp_path / "answer.json"
    ask_in_pane(tmux, out)
    ident, code = shown_code(tmux)
    assert f"[lnk] asks ({ident}, wire term): Tool call: demo" in tmux.screen()
    assert "  | wipe everything?" in tmux.screen()
    tmux.send(code, "Enter")
    assert answer_in(out) == {"answer": "yes", "how": "terminal", "id": ident}
    wait_until(lambda: "[lnk] yes (terminal)" in tmux.screen(), "the outcome shown")


def test_terminal_wrong_code_is_no(tmux: Tmux, tmp_path: Path) -> None:
    out = tmp_path / "answer.json"
    ask_in_pane(tmux, out)
    ident, code = shown_code(tmux)
    wrong = f"{(int(code) + 1) % 10 ** 6:06d}"
    tmux.send(wrong, "Enter")
    assert answer_in(out) == {"answer": "no", "how": "terminal", "id": ident}


def test_terminal_keys_typed_before_the_question_are_not_an_answer(
    tmux: Tmux, tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    """Type-ahead is flushed when the question is shown; the queue answers meanwhile, and
    the terminal shows who did."""
    out = tmp_path / "answer.json"
    go = tmp_path / "go"
    ask_in_pane(tmux, out, before=f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.1; done; ")
    tmux.send("y", "Enter")  # typed while the shell waits, before the question
    go.touch()
    ident, _ = shown_code(tmux)
    # A wait for an absence (the type-ahead answered nothing): nothing to poll for.
    time.sleep(1)
    assert not out.read_text().strip() if out.exists() else True
    assert cli(sandbox_env, "answer", ident, "no").returncode == 0
    assert answer_in(out) == {"answer": "no", "how": "queue", "id": ident}
    wait_until(lambda: "[lnk] no (queue)" in tmux.screen(), "the outcome shown")


# -- the dialog: zenity on Xvfb, clicked with xdotool -----------------------------------------


def _xvfb(size: str) -> Iterator[str]:
    """A virtual screen of `size` (Xvfb picks a free display number). `-noreset`: by
    default an X server resets when its last client leaves, and a client that connects
    while it does is refused (zenity: "cannot open display", xwininfo: no size), which
    made a dialog test that began just after another's end fail one run in a few."""
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", f"{size}x24",
                               "-nolisten", "tcp", "-noreset"], pass_fds=(write,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        with os.fdopen(read) as numbers:
            number = numbers.readline().strip()
        assert number.isdigit(), "Xvfb gave no display"
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(WAIT_SECONDS)


@pytest.fixture(scope="module")
def display() -> Iterator[str]:
    """A virtual screen of this module's own, 1024x768 (the issue's laptop)."""
    yield from _xvfb("1024x768")


def xdotool(display: str, *words: str) -> str:
    return subprocess.run(["xdotool", *words], env={**os.environ, "DISPLAY": display},
                          capture_output=True, text=True, check=False,
                          timeout=WAIT_SECONDS).stdout


# The process that asks under each title a test started, so that a dialog not shown says
# what that process said (window's failure).
ASKERS: dict[str, subprocess.Popen[str]] = {}


def what_was_said(asker: subprocess.Popen[str] | None) -> str:
    """What `asker` has written on its standard error so far, read without waiting (it
    may still run: a dialog not shown is what the test is failing on)."""
    if asker is None or asker.stderr is None:
        return "(no asker known under this title)"
    fd = asker.stderr.fileno()
    os.set_blocking(fd, False)
    try:
        said = os.read(fd, 1 << 16).decode(errors="replace")
    except BlockingIOError:
        said = ""
    finally:
        os.set_blocking(fd, True)
    return f"asker pid {asker.pid}, exit {asker.poll()}, stderr so far: {said!r}"


def screen_state(display: str) -> str:
    """The display's windows and the zenity processes on the machine, timed: what a
    dialog that never showed leaves to look at."""
    started = time.monotonic()
    tree = subprocess.run(["xwininfo", "-root", "-tree"], capture_output=True, text=True,
                          env={**os.environ, "DISPLAY": display}, timeout=WAIT_SECONDS,
                          check=False)
    took = time.monotonic() - started
    named = [line.strip() for line in tree.stdout.splitlines() if '"' in line]
    zenities = subprocess.run(["pgrep", "-a", "zenity"], capture_output=True, text=True,
                              check=False).stdout.strip().splitlines()
    return (f"xwininfo -root -tree on {display}: exit {tree.returncode} in {took:.2f} s, "
            f"stderr {tree.stderr.strip()!r}, named windows {named[:20]}; "
            f"zenity processes: {zenities[:20]}")


def window(display: str, title: str) -> dict[str, int]:
    """The geometry of the dialog titled `title` once it is shown; failing, says what the
    asker said and what the screen holds."""
    try:
        return _window(display, title)
    except AssertionError as failure:
        failure.add_note(what_was_said(ASKERS.get(title)))
        failure.add_note(screen_state(display))
        raise


def _window(display: str, title: str) -> dict[str, int]:
    def geometry() -> dict[str, int] | None:
        found = xdotool(display, "search", "--onlyvisible", "--name",
                        f"^{re.escape(title)}$").split()
        if not found:
            return None
        shell = xdotool(display, "getwindowgeometry", "--shell", found[0])
        values = dict(line.split("=", 1) for line in shell.split())
        return {key: int(value) for key, value in values.items()}

    wait_until(geometry, f"the dialog {title!r}")
    time.sleep(0.5)  # drawn, not only mapped, before it is photographed and clicked
    # Read again: on a loaded machine a window may be mapped before it is laid out.
    return wait_until(geometry, f"the dialog {title!r}")


def dialog_shown(display: str, title: str) -> bool:
    return bool(xdotool(display, "search", "--onlyvisible", "--name",
                        f"^{re.escape(title)}$").split())


def click(display: str, title: str, button: str) -> None:
    """Click the dialog's button, again (with its geometry read again) while its window
    stays: on a loaded machine a window may be mapped before it is laid out. The
    buttons sit at the window's bottom right: Deny, then Allow."""
    for _ in range(10):
        where = window(display, title)
        x = where["X"] + where["WIDTH"] - (50 if button == "Allow" else 139)
        y = where["Y"] + where["HEIGHT"] - 25
        xdotool(display, "mousemove", str(x), str(y), "click", "1")
        try:
            wait_until(lambda: not dialog_shown(display, title), "the dialog to close", 3)
            return
        except AssertionError:
            continue


def screenshot(display: str, path: Path) -> None:
    subprocess.run(["import", "-window", "root", str(path)], check=True, timeout=WAIT_SECONDS,
                   env={**os.environ, "DISPLAY": display}, capture_output=True)
    assert path.stat().st_size > 1000


# A tool call's question as the MCP verb asks it (lnk_proxy.mcp_verb), and what its yes
# allows.
TOOL_TITLE = "demo: run delete_repo?"
TOOL_ALLOWS = "sandbox dlg, server demo, tool delete_repo"


def start_dialog_ask(env: dict[str, str], display: str, title: str, timeout: int,
                     question: str = "wipe\u202e everything?",
                     allows: str = TOOL_ALLOWS) -> subprocess.Popen[str]:
    ASKERS[title] = subprocess.Popen(
        [ASK, "--title", title, "--question", question, "--allows", allows,
         "--timeout", str(timeout), "--json", "--wire", "dlg"],
        env={**env, "DISPLAY": display}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    return ASKERS[title]


def keys(display: str, where: dict[str, int], *names: str) -> None:
    for name in names:
        xdotool(display, "windowfocus", "--sync", str(where["WINDOW"]), "key", name)


def tick_and_allow(display: str, title: str) -> None:
    """The person's deliberate yes: Ctrl+Tab out of the text to the box, Space ticks it
    (Allow is greyed until then), then a click on Allow (bottom right)."""
    where = window(display, title)
    keys(display, where, "ctrl+Tab", "space")
    click(display, title, "Allow")


def test_dialog_answered_from_the_queue_closes(display: str, sandbox_env: dict[str, str]) -> None:
    title = f"{TOOL_TITLE} {secrets.token_hex(4)}"
    asker = start_dialog_ask(sandbox_env, display, title, 60)
    try:
        window(display, title)
        entries = waiting(sandbox_env, "dlg")
        assert len(entries) == 1
        assert cli(sandbox_env, "answer", str(entries[0]["id"]), "yes").returncode == 0
        status, found, _ = finish(asker)
        assert (status, found["how"]) == (0, "queue")
        wait_until(lambda: not xdotool(display, "search", "--name", f"^{title}$").split(),
                 "the dialog to close")
    finally:
        asker.kill()
        asker.communicate()


# -- a page's question in the dialog: the whole URL, scrolling, at the limits ---------------

# The longest URL the open verb accepts, as it asks about it (lnk_proxy.open_verb, OpenVerb.call):
# 16 KiB once escaped, with a login's callback line after.
LONGEST_URL = "https://docs.example.org/authorize?redirect_uri=http%3A%2F%2Flocalhost%3A8080&d="
LONGEST_URL += "x" * (MAX_URL_BYTES - len(LONGEST_URL))
PAGE_QUESTION = (f"The sandbox pages asks to open this page in your browser: {LONGEST_URL}"
                 "  Its login comes back to port 8080 of this machine's loopback "
                 "(http://localhost:8080), and that answer is passed into the sandbox, once.")


def close_window(display: str, window_id: int) -> None:
    """What a window manager's close button does: WM_DELETE_WINDOW sent to the window
    (no window manager runs on Xvfb; libX11 through ctypes)."""
    import ctypes
    import ctypes.util

    x11 = ctypes.CDLL(ctypes.util.find_library("X11"))
    x11.XOpenDisplay.restype = ctypes.c_void_p
    x11.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x11.XInternAtom.restype = ctypes.c_ulong
    x11.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]

    class ClientMessage(ctypes.Structure):
        _fields_ = [("type", ctypes.c_int), ("serial", ctypes.c_ulong),
                    ("send_event", ctypes.c_int), ("display", ctypes.c_void_p),
                    ("window", ctypes.c_ulong), ("message_type", ctypes.c_ulong),
                    ("format", ctypes.c_int), ("data", ctypes.c_long * 5)]

    class Event(ctypes.Union):
        _fields_ = [("xclient", ClientMessage), ("pad", ctypes.c_long * 24)]

    x11.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long,
                               ctypes.POINTER(Event)]
    x11.XCloseDisplay.argtypes = [ctypes.c_void_p]
    connection = x11.XOpenDisplay(display.encode())
    assert connection, "no X display"
    try:
        event = Event()
        event.xclient.type = 33  # ClientMessage
        event.xclient.window = window_id
        event.xclient.message_type = x11.XInternAtom(connection, b"WM_PROTOCOLS", 0)
        event.xclient.format = 32
        event.xclient.data[0] = x11.XInternAtom(connection, b"WM_DELETE_WINDOW", 0)
        assert x11.XSendEvent(connection, window_id, 0, 0, ctypes.byref(event))
    finally:
        x11.XCloseDisplay(connection)  # flushes


def start_page_ask(env: dict[str, str], display: str, title: str, timeout: int,
                   question: str = PAGE_QUESTION) -> subprocess.Popen[str]:
    """A page's question (`--whole`), given on standard input as the proxy gives it."""
    asker = subprocess.Popen([ASK, "--title", title, "--question", "-", "--whole",
                              "--timeout", str(timeout), "--json", "--wire", "pages"],
                             env={**env, "DISPLAY": display}, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert asker.stdin is not None
    asker.stdin.write(question)
    asker.stdin.close()
    asker.stdin = None  # given whole: communicate() reads only
    ASKERS[title] = asker
    return asker


# -- attacks from inside a real sandbox -------------------------------------------------------

ATTACKER = r'''
import ctypes, errno, json, os, sys, time
work = sys.argv[1]
settings = sys.argv[2]
ident = sys.argv[3] if len(sys.argv) > 3 else ""
go = os.path.join(work, "go")
while not os.path.exists(go):
    time.sleep(0.05)
found = {}
# 1. A faked question on the terminal, with a code of its own.
os.write(1, b"\r\n[lnk-sandbox asks] Tool call: demo (wire term, question 000000000000)\r\n"
            b"  read README?\r\n  To allow, type 111111 and Enter.\r\n  > ")
# 2. Everything it can look at for the real code.
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for part in ("cmdline", "environ"):
            try:
                seen.append(open(f"/proc/{pid}/{part}", "rb").read().decode("latin-1"))
            except OSError as error:
                seen.append(str(error))
found["pids"] = sorted(int(pid) for pid in os.listdir("/proc") if pid.isdigit())
for path in (settings, os.path.join(settings, "sandbox", "asks"),
             os.path.join(settings, "sandbox", "asks.log")):
    try:
        seen.append(repr(os.listdir(path)) if os.path.isdir(path) else open(path).read())
        found[path] = "read"
    except OSError as error:
        found[path] = errno.errorcode[error.errno]
# 3. TIOCSTI: type into the terminal (on its stdin, and on a descriptor that is none).
libc = ctypes.CDLL(None, use_errno=True)
for fd in (0, 999):
    result = libc.ioctl(fd, 0x5412, ctypes.c_char_p(b"1"))
    found[f"tiocsti {fd}"] = [result, errno.errorcode.get(ctypes.get_errno(), "")]
# 4. The queue: answer the real question (its id given), or plant one.
for name in (f"{ident}.answer", "0123456789ab.json"):
    target = os.path.join(settings, "sandbox", "asks", name)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, b'{"answer": "yes", "how": "queue"}\n')
        found[name] = "written"
    except OSError as error:
        found[name] = errno.errorcode[error.errno]
found["seen"] = seen
open(os.path.join(work, "probe.json"), "w").write(json.dumps(found))
open(os.path.join(work, "done"), "w").close()
'''


def attack_spec(write_spec: WriteSpec, tmp_path: Path, work: Path) -> Path:
    attacker = tmp_path / "attacker.py"
    attacker.write_text(ATTACKER)
    # The program reads the whole test folder, Link's settings among it (hidden anyway).
    return write_spec(f"[files]\nread = {toml_list(tmp_path)}\nwrite = {toml_list(work)}\n")


def test_attack_terminal_fake_question_and_tiocsti(
    tmux: Tmux, tmp_path: Path, write_spec: WriteSpec, lnk_home: Path,
) -> None:
    """A sandboxed program on the same terminal fakes a question with its own code and
    tries to type (TIOCSTI): the real code is nowhere it can look, TIOCSTI is refused by
    the seccomp filter (EPERM even on a descriptor that is none, which the kernel would
    call EBADF), and the person typing the fake code answers the real question no."""
    work = tmp_path / "work"
    work.mkdir()
    spec = attack_spec(write_spec, tmp_path, work)
    out = tmp_path / "answer.json"
    sandboxed = (f"{shlex.quote(LNK_SANDBOX)} run --spec {shlex.quote(str(spec))} -- "
                 f"python3 {shlex.quote(str(tmp_path / 'attacker.py'))} "
                 f"{shlex.quote(str(work))} {shlex.quote(str(lnk_home))} "
                 f"</dev/tty >/dev/tty 2>{shlex.quote(str(tmp_path / 'sandbox.err'))} & ")
    ask_in_pane(tmux, out, before=sandboxed)
    ident, code = shown_code(tmux)
    (work / "go").touch()
    wait_until(lambda: (work / "done").exists(), "the attacker to finish")
    probe = json.loads((work / "probe.json").read_text())
    screen = tmux.screen()
    assert "type 111111" in screen and f"Type {code}" in screen  # both on the terminal
    assert code not in json.dumps(probe), "the real code was visible inside"
    assert probe["tiocsti 0"] == [-1, "EPERM"]
    assert probe["tiocsti 999"] == [-1, "EPERM"]  # the filter, not the kernel's EBADF
    libc_result = subprocess.run([sys.executable, "-c", (
        "import ctypes, errno; libc = ctypes.CDLL(None, use_errno=True); "
        "print(libc.ioctl(999, 0x5412, ctypes.c_char_p(b'1')), "
        "errno.errorcode[ctypes.get_errno()])")], capture_output=True, text=True, check=True)
    assert libc_result.stdout.split() == ["-1", "EBADF"]  # outside: no filter
    assert probe[str(lnk_home)] in ("EACCES", "ENOENT")
    assert probe[str(lnk_home / "sandbox" / "asks")] == "ENOENT"
    assert all(":" not in pid for pid in map(str, probe["pids"]))
    # Nothing was typed for it, and the question still waits.
    assert not out.exists() or not out.read_text().strip()
    assert AskQueue(str(lnk_home)).answered(ident) is None
    tmux.send("111111", "Enter")  # the person types the faked code
    assert answer_in(out) == {"answer": "no", "how": "terminal", "id": ident}


def test_attack_queue_and_another_wires_question(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    """The program knows a waiting question's id and tries to answer it, and to plant a
    question: Link's settings are not there for it at all; the question still waits. An
    answer names one id: answering wire a's question leaves wire b's waiting."""
    first = start_ask(sandbox_env, "--title", "T", "--question", "a?", "--wire", "a")
    second = start_ask(sandbox_env, "--title", "T", "--question", "b?", "--wire", "b")
    try:
        of_a = wait_until(lambda: waiting(sandbox_env, "a"), "a's question")
        of_b = wait_until(lambda: waiting(sandbox_env, "b"), "b's question")
        assert isinstance(of_a, list) and isinstance(of_b, list)
        ident_a, ident_b = str(of_a[0]["id"]), str(of_b[0]["id"])
        work = tmp_path / "work"
        work.mkdir()
        spec = attack_spec(write_spec, tmp_path, work)
        (work / "go").touch()
        run = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", "python3",
                              str(tmp_path / "attacker.py"), str(work), str(lnk_home),
                              ident_a], env=sandbox_env, capture_output=True, text=True,
                             timeout=WAIT_SECONDS, check=False, stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run
        probe = json.loads((work / "probe.json").read_text())
        assert probe[f"{ident_a}.answer"] == "ENOENT"
        assert probe["0123456789ab.json"] == "ENOENT"
        assert probe[str(lnk_home / "sandbox" / "asks")] == "ENOENT"
        assert probe[str(lnk_home / "sandbox" / "asks.log")] == "ENOENT"
        assert "a?" not in json.dumps(probe["seen"])
        assert {str(entry["id"]) for entry in waiting(sandbox_env)} == {ident_a, ident_b}
        assert not (lnk_home / "sandbox" / "asks" / "0123456789ab.json").exists()
        # The person answers a's question: b's still waits.
        assert cli(sandbox_env, "answer", ident_a, "yes").returncode == 0
        status, found, _ = finish(first)
        assert (status, found["how"], found["id"]) == (0, "queue", ident_a)
        assert [str(entry["id"]) for entry in waiting(sandbox_env)] == [ident_b]
        assert cli(sandbox_env, "answer", ident_b, "no").returncode == 0
        status, found, _ = finish(second)
        assert (status, found["answer"], found["id"]) == (1, "no", ident_b)
    finally:
        for asker in (first, second):
            asker.kill()
            asker.communicate()


def test_sigterm_is_no_and_cleans_up(sandbox_env: dict[str, str], lnk_home: Path) -> None:
    asker = start_ask(sandbox_env, "--title", "T", "--question", "Q", "--wire", "term")
    try:
        entries = wait_until(lambda: waiting(sandbox_env, "term"), "the question")
        assert isinstance(entries, list)
        asker.terminate()
        status, found, err = finish(asker)
        assert (status, found["answer"], found["how"]) == (1, "no", "error")
        assert err.splitlines()[-1] == "lnk-sandbox-ask: no: interrupted"
        assert waiting(sandbox_env) == []
        assert not (lnk_home / "sandbox" / "asks" / f"{entries[0]['id']}.json").exists()
    finally:
        asker.kill()
        asker.communicate()


def test_question_from_standard_input(sandbox_env: dict[str, str]) -> None:
    quiet = {key: value for key, value in sandbox_env.items() if key != "DISPLAY"}
    asker = subprocess.Popen([ASK, "--title", "T", "--question", "-", "--timeout", "30",
                              "--json", "--wire", "stdin"], env=quiet, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    try:
        assert asker.stdin is not None
        asker.stdin.write("line one\nline two \u202e".encode())
        asker.stdin.close()
        entries = wait_until(lambda: waiting(sandbox_env, "stdin"), "the question")
        assert isinstance(entries, list)
        assert entries[0]["question"] == "line one\\x0aline two \\u202e"
        assert cli(sandbox_env, "answer", str(entries[0]["id"]), "yes").returncode == 0
        assert asker.wait(WAIT_SECONDS) == 0
    finally:
        asker.kill()
        asker.wait()


def test_the_ask_script_is_isolated(tmp_path: Path, sandbox_env: dict[str, str]) -> None:
    """bin/setup's `lnk-sandbox-ask` starts Python `-IS` (lnk_wrap/entry.py), and so does
    helper_argv("ask"): a PYTHONPATH handed in (a folder a sandbox wrote) cannot put an
    `lnk_ask` of its own in place of ours and answer yes."""
    fake = tmp_path / "fake" / "lnk_ask"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "main.py").write_text("import sys\ndef main():\n    print('{\"answer\": \"yes\"}')\n"
                                  "    sys.exit(0)\n")
    env = {**sandbox_env, "PYTHONPATH": str(tmp_path / "fake")}
    env.pop("DISPLAY", None)
    assert Path(ASK).read_text().splitlines()[0].endswith(" -IS")
    for argv in ([ASK], helper_argv("ask")):
        done = subprocess.run([*argv, "--title", "T", "--question", "Q", "--timeout", "1",
                               "--json"], env=env, capture_output=True, text=True,
                              timeout=WAIT_SECONDS, check=False, stdin=subprocess.DEVNULL,
                              start_new_session=True)
        assert done.returncode == 1, done
        assert json.loads(done.stdout)["how"] == "timeout"


def test_entry_writes_only_our_scripts() -> None:
    from lnk_wrap.entry import EntryError, script

    text = script("/usr/bin/python3", "/x", ["/y"], "lnk_ask.main")
    assert text.startswith("#!/usr/bin/python3 -IS\n\"\"\"lnk-sandbox-ask, written")
    assert "from lnk_ask.main import main\n" in text
    with pytest.raises(EntryError):
        script("/usr/bin/python3", "/x", ["/y"], "os")


def test_terminal_in_the_background_is_left_alone(
    tmux: Tmux, tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    """An asker outside the terminal's foreground process group (GNU timeout makes a
    group of its own) neither shows the question there nor is stopped by job control;
    the queue answers it."""
    out = tmp_path / "answer.json"
    ask_in_pane(tmux, out, before="timeout 50 ", wire="bg")
    entries = wait_until(lambda: waiting(sandbox_env, "bg"), "the question")
    assert isinstance(entries, list)
    # A wait for an absence (nothing shown on the terminal): nothing to poll for.
    time.sleep(1)
    assert "lnk-sandbox asks" not in tmux.screen()
    assert cli(sandbox_env, "answer", str(entries[0]["id"]), "yes").returncode == 0
    assert answer_in(out)["how"] == "queue"
    assert "lnk-sandbox" not in tmux.screen()


def test_ask_async_cancelled_ends_the_child(sandbox_env: dict[str, str],
                                           lnk_home: Path) -> None:
    """The proxy cancels a call's question (the program went away): the child is sent
    SIGTERM, answers no and takes its question out of the queue."""
    env = {key: value for key, value in sandbox_env.items() if key != "DISPLAY"}

    async def cancelled() -> None:
        task = asyncio.create_task(ask_async(str(lnk_home), "gone", "T", "Q", 60, env=env))
        await asyncio.to_thread(wait_until, lambda: waiting(sandbox_env, "gone"), "the question")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert waiting(sandbox_env) == []
    lines = Path(log_path(str(lnk_home))).read_text().splitlines()
    assert lines[-1].split("\t")[3:] == ["no", "error", "interrupted"]


# -- the terminal: the question fits it, its code's line says what a yes allows ----------------

# A stdio MCP server (JSON-RPC a line): delete_repo and read_readme, each answering "did
# NAME".
MCP_TOOL = r'''
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m: continue
    meth, r = m.get("method"), None
    if meth == "initialize":
        r = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
             "serverInfo": {"name": "demo", "version": "1"}}
    elif meth == "tools/list":
        r = {"tools": [{"name": n, "inputSchema": {"type": "object"}}
                       for n in ("delete_repo", "read_readme")]}
    elif meth == "tools/call":
        r = {"content": [{"type": "text", "text": "did " + m["params"]["name"]}]}
    out = {"jsonrpc": "2.0", "id": m["id"],
           **({"result": r} if r is not None else {"error": {"code": -32601, "message": "no"}})}
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush()
'''

# Inside: MCP over HTTP to $LNK_SANDBOX_URL/mcp/demo; one tools/call of delete_repo with
# the arguments in the file argv[1] (JSON); prints the call's text or ERROR.
MCP_CLIENT = r'''
import json, os, sys, urllib.request
url = os.environ["LNK_SANDBOX_URL"] + "/mcp/demo"
sid = None
def post(msg):
    global sid
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if sid: h["Mcp-Session-Id"] = sid
    if msg.get("method") != "initialize": h["MCP-Protocol-Version"] = "2025-11-25"
    req = urllib.request.Request(url, data=json.dumps(msg).encode(), headers=h, method="POST")
    with urllib.request.urlopen(req, timeout=200) as r:
        sid = r.headers.get("Mcp-Session-Id") or sid
        raw = r.read().decode()
        if "id" not in msg: return None
        if r.headers.get("Content-Type", "").startswith("text/event-stream"):
            for line in raw.splitlines():
                if line.startswith("data:"):
                    d = json.loads(line[5:])
                    if d.get("id") == msg["id"]: return d
        return json.loads(raw)
post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "c", "version": "1"}}})
post({"jsonrpc": "2.0", "method": "notifications/initialized"})
arguments = json.load(open(sys.argv[1]))
d = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
          "params": {"name": "delete_repo", "arguments": arguments}})
print(d["result"]["content"][0]["text"] if "result" in d else "ERROR " + json.dumps(d["error"]),
      flush=True)
'''

# What a program pads its arguments with: a look-alike of Link's question for a harmless
# tool, lined up (by the spaces before it) to start a line of an 80-column terminal,
# right above where the real code is shown.
FAKE_QUESTION = ("\n[lnk-sandbox asks] Tool call: harmless read_readme (wire w)\n"
                 "  To allow, type the code below and Enter.\n")
SMALL_TERMINAL = (80, 24)


def padded_arguments() -> dict[str, str]:
    """3,000 characters and more: padding, the fake (which a line break, shown as an
    escape, would not have put on a line of its own), and a long tail."""
    note = ("x" * 61 + " " * 1900 + FAKE_QUESTION.replace("\n", " ") + " " * 19
            + "y" * 2500)
    arguments = {"repo": "me/everything", "note": note + "END-OF-ARGUMENTS"}
    assert len(json.dumps(arguments)) >= 3000
    return arguments


def small_screen(tmux: Tmux) -> list[str]:
    lines = tmux.screen().rstrip("\n").split("\n")
    assert len(lines) <= SMALL_TERMINAL[1]
    return lines


def code_line(tmux: Tmux) -> tuple[str, str, str]:
    """(the question's id, its code, the code's line) once the question is on screen."""
    ident, code = shown_code(tmux)

    def drawn() -> str | None:
        lines = [line for line in small_screen(tmux) if f"Type {code} to allow: " in line]
        return lines[0] if len(lines) == 1 else None

    return ident, code, wait_until(drawn, "the whole prompt drawn")


def assert_fits_and_marked(lines: list[str], ident: str, code: str) -> None:
    """Nothing scrolled off (Link's header is the screen's first line), no line wider than
    the terminal, every line either Link's (its mark, flush left) or the program's text
    (after the gutter), and what was cut said, with where it is whole."""
    assert lines[0].startswith(f"[lnk] asks ({ident}, wire "), "\n".join(lines)
    assert all(len(line) <= SMALL_TERMINAL[0] for line in lines), lines
    assert all(line.startswith(("[lnk] ", "  | ")) for line in lines), lines
    assert any(re.fullmatch(rf"\[lnk\] \d+ more characters: lnk-sandbox asks --show {ident}",
                            line) for line in lines), lines
    assert lines[-1].startswith("[lnk] >"), lines  # capture-pane drops the space after
    assert sum(f"Type {code} to allow: " in line for line in lines) == 1


def test_terminal_mcp_question_fits_and_its_code_line_names_tool_server_and_wire(
    tmux: Tmux, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
) -> None:
    """A real sandbox calls delete_repo through the MCP verb with 3,000 characters of
    arguments, padded so that a look-alike question for a harmless tool would sit right
    above the code. On an 80x24 terminal (full before the question), the question fits:
    its header is the first line, the fake is inside the gutter as the program's text,
    the code's line says the sandbox, server and tool a yes allows, and `asks --show`
    gives the whole arguments. (Before: one long line; the header scrolled off, the fake
    lined up above the bare code.)"""
    folder = tmp_path / "mcp"
    folder.mkdir()
    (folder / "tool.py").write_text(MCP_TOOL)
    (folder / "client.py").write_text(MCP_CLIENT)
    (folder / "arguments.json").write_text(json.dumps(padded_arguments()))
    subprocess.run([LNK_SANDBOX, "tool", "add", "demo", "--", sys.executable,
                    str(folder / "tool.py")], env=sandbox_env, check=True,
                   capture_output=True, timeout=WAIT_SECONDS)
    spec = write_spec(f"[files]\nread = {toml_list(folder)}\n[verbs]\ntools = [\"demo\"]\n")
    out = tmp_path / "out.txt"
    command = (f"seq 1 100; {shlex.quote(LNK_SANDBOX)} run --spec {shlex.quote(str(spec))} "
               f"--wire victim -- python3 {shlex.quote(str(folder / 'client.py'))} "
               f"{shlex.quote(str(folder / 'arguments.json'))} </dev/null "
               f">{shlex.quote(str(out))} 2>&1")
    tmux.start(f"sh -c {shlex.quote(command + '; sleep 60')}", *SMALL_TERMINAL)
    ident, code, line = code_line(tmux)
    lines = small_screen(tmux)
    assert_fits_and_marked(lines, ident, code)
    assert "demo: run delete_repo?" in lines[0]
    assert line == f"[lnk] Type {code} to allow: sandbox victim, server demo, tool delete_repo"
    faked = [shown for shown in lines if "[lnk-sandbox asks] Tool call" in shown]
    assert faked and all(shown.startswith("  | ") for shown in faked), lines
    assert any("[1901 spaces][lnk-sandbox asks]" in shown for shown in lines), lines
    # The whole question, every argument, with `asks --show`.
    shown = cli(sandbox_env, "asks", "--show", ident, "--json")
    assert shown.returncode == 0, shown
    whole = json.loads(shown.stdout)
    assert whole["allows"] == "sandbox victim, server demo, tool delete_repo"
    assert json.dumps(padded_arguments(), separators=(",", ":")) in whole["question"]
    assert whole["question"].count("END-OF-ARGUMENTS") == 1
    human = cli(sandbox_env, "asks", "--show", ident)
    assert human.returncode == 0, human
    assert "a yes allows: sandbox victim, server demo, tool delete_repo\n" in human.stdout
    assert "[1901 spaces][lnk-sandbox asks] Tool call" in human.stdout
    assert "y" * 2500 + 'END-OF-ARGUMENTS"}' in human.stdout
    listed = cli(sandbox_env, "asks")
    assert "    a yes allows: sandbox victim, server demo, tool delete_repo\n" in listed.stdout
    assert "  " not in listed.stdout.split("\n")[1][4:]
    unknown = cli(sandbox_env, "asks", "--show", "0123456789ab")
    assert (unknown.returncode, unknown.stderr) == (
        EXIT_REFUSED, "lnk-sandbox: no question 0123456789ab waits (see lnk-sandbox asks)\n")
    tmux.send(code, "Enter")
    assert wait_until(lambda: out.exists() and "did delete_repo" in out.read_text(),
                    "the call to run")


STRAY_KEYS = [["Return"], ["space"], ["Tab", "space"], ["Tab", "space", "Return"],
              ["Tab", "Tab", "space"], ["ISO_Left_Tab", "space"], ["Escape"], ["close"]]


@pytest.mark.parametrize("stray", [*STRAY_KEYS, ["tick", "Allow"]])
def test_attack_a_tool_calls_dialog_takes_no_stray_key_for_a_yes(
    display: str, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
    stray: list[str],
) -> None:
    """A real sandbox calls delete_repo through the MCP verb, its question on zenity (no
    terminal): keys typed into the dialog by a person typing elsewhere as it appears
    (Enter, Space, Tab-Space, Tab-Space-Enter, Shift+Tab-Space), Escape, and closing
    the window are all no, the tool not run, even when the box is ticked and Allow
    clicked after them; only the box ticked, then Allow, runs it. The box says what a
    yes allows, in Link's words (screenshot). (Before: `zenity --question`, Deny had the
    focus and Allow was next: Tab then Space ran delete_repo.)"""
    folder = tmp_path / "mcp"
    folder.mkdir()
    (folder / "tool.py").write_text(MCP_TOOL)
    (folder / "client.py").write_text(MCP_CLIENT)
    (folder / "arguments.json").write_text(json.dumps({"repo": "me/everything"}))
    subprocess.run([LNK_SANDBOX, "tool", "add", "demo", "--", sys.executable,
                    str(folder / "tool.py")], env=sandbox_env, check=True,
                   capture_output=True, timeout=WAIT_SECONDS)
    spec = write_spec(f"[files]\nread = {toml_list(folder)}\n[verbs]\ntools = [\"demo\"]\n")
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--wire", "victim", "--",
                            "python3", str(folder / "client.py"),
                            str(folder / "arguments.json")],
                           env={**sandbox_env, "DISPLAY": display}, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)  # no terminal: the dialog and the queue
    try:
        where = window(display, TOOL_TITLE)
        if stray == ["tick", "Allow"]:
            screenshot(display, tmp_path / "tool-dialog.png")
            tick_and_allow(display, TOOL_TITLE)
        else:
            if stray == ["close"]:
                close_window(display, where["WINDOW"])
            else:
                keys(display, where, *stray)
            with contextlib.suppress(AssertionError):  # the keys alone: no, or none yet
                wait_until(lambda: not dialog_shown(display, TOOL_TITLE), "an answer", 1)
            if dialog_shown(display, TOOL_TITLE):
                tick_and_allow(display, TOOL_TITLE)
        out, err = run.communicate(timeout=WAIT_SECONDS * 2)
        if stray == ["tick", "Allow"]:
            assert out == "did delete_repo\n", (out, err)
        else:
            assert out.startswith("ERROR ") and "did delete_repo" not in out, (out, err)
            assert "the person did not allow delete_repo (dialog)" in out, out
    finally:
        run.kill()
        run.communicate()


# The person's opener, outside: records the URL it is given.
RECORDING_OPENER = f"""#!{sys.executable}
import os, sys
with open(os.environ["OPENED"], "a") as out:
    out.write(sys.argv[1] + "\\n")
"""


def test_terminal_page_question_fits_and_its_code_line_names_the_host(
    tmux: Tmux, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
) -> None:
    """A real sandbox opens a page with a 4 KiB URL whose tail the program chose: on an
    80x24 terminal the host is on the code's line, the question fits, and `asks --show`
    gives the whole URL. (Before: the host scrolled off with the header.)"""
    opener = tmp_path / "opener"
    opener.mkdir()
    (opener / "xdg-open").write_text(RECORDING_OPENER)
    (opener / "xdg-open").chmod(0o755)
    opened = tmp_path / "opened.txt"
    url = ("https://evil.example.net/p?" + "a" * 3000
           + "&shown=https://docs.example.org/harmless" + "b" * 1000)
    spec = write_spec('[verbs]\nopen = true\n')
    command = (f"seq 1 100; PATH={shlex.quote(str(opener))}:$PATH "
               f"OPENED={shlex.quote(str(opened))} {shlex.quote(LNK_SANDBOX)} run --spec "
               f"{shlex.quote(str(spec))} --wire pages -- xdg-open {shlex.quote(url)} "
               f"</dev/null >/dev/null 2>&1")
    tmux.start(f"sh -c {shlex.quote(command + '; sleep 60')}", *SMALL_TERMINAL)
    ident, code, line = code_line(tmux)
    lines = small_screen(tmux)
    assert_fits_and_marked(lines, ident, code)
    assert "pages: open evil.example.net?" in lines[0]
    assert line == f"[lnk] Type {code} to allow: sandbox pages opens a page on evil.example.net"
    shown = cli(sandbox_env, "asks", "--show", ident, "--json")
    assert shown.returncode == 0, shown
    assert json.loads(shown.stdout)["question"].endswith(f"in your browser: {url}")
    tmux.send(code, "Enter")
    assert wait_until(lambda: opened.exists() and opened.read_text() == url + "\n",
                    "the page to open")


def test_terminal_too_small_says_so_and_the_queue_answers(
    tmux: Tmux, tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    out = tmp_path / "answer.json"
    command = (f"{shlex.quote(ASK)} --title T --question Q --wire tiny --timeout 60 --json "
               f"> {shlex.quote(str(out))}")
    tmux.start(f"sh -c {shlex.quote(command + '; sleep 60')}", 50, 10)
    wait_until(lambda: "this terminal is too small" in tmux.screen(), "the notice")
    assert "Type " not in tmux.screen()
    [entry] = waiting(sandbox_env, "tiny")
    assert cli(sandbox_env, "answer", str(entry["id"]), "yes").returncode == 0
    assert answer_in(out)["how"] == "queue"


def test_the_terminal_prompt_fits_any_size_and_marks_every_line() -> None:
    """The layout as data: at each size from the smallest taken, every line fits, Link's
    lines carry the mark and nothing else does, the code's line says what a yes allows."""
    from lnk_ask.ways import (
        LINK_MARK,
        MIN_TERMINAL_COLUMNS,
        MIN_TERMINAL_ROWS,
        PROGRAM_GUTTER,
        terminal_prompt,
    )

    question = printable("run " + " " * 500 + "[lnk] Type 111111 to allow: harmless\n" * 40)
    for columns in (MIN_TERMINAL_COLUMNS, 80, 132):
        for rows in (MIN_TERMINAL_ROWS, 24, 60):
            shown = terminal_prompt("T", question, "sandbox w, server s, tool t", "w",
                                    "0123456789ab", "654321", 120, columns, rows)
            assert shown is not None
            lines = shown.split("\r\n")[1:]
            assert len(lines) <= rows and all(len(line) < columns for line in lines)
            assert all(line.startswith((LINK_MARK + " ", PROGRAM_GUTTER)) for line in lines)
            assert [line for line in lines if line.startswith(LINK_MARK)][-2].startswith(
                f"{LINK_MARK} Type 654321 to allow: sandbox w")
            assert sum("Type " in line and line.startswith(LINK_MARK) for line in lines) == 1
    assert terminal_prompt("T", "Q", "a", "w", "0123456789ab", "654321", 120,
                           MIN_TERMINAL_COLUMNS - 1, 24) is None


# -- nothing a sandbox does holds a question back -------------------------------------------

# Inside: a terminal of its own as its controlling terminal (a pty of the sandbox's own
# /dev/pts), so /dev/tty opens, then an exclusive flock on /dev/tty (the machine's one
# inode, bound into every sandbox) and on every terminal it holds; held till `release`.
TERMINAL_LOCKER = r'''
import fcntl, glob, json, os, sys, termios, time
work = sys.argv[1]
found = {}
if os.fork() == 0:
    os.setsid()
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    held = []
    for path in ["/dev/tty", *glob.glob("/dev/pts/[0-9]*")]:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held.append(fd)
            found[path] = "locked"
        except OSError as error:
            found[path] = str(error)
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                found[f"fd {fd}"] = "locked"
        except OSError as error:
            found[f"fd {fd}"] = str(error)
    open(os.path.join(work, "probe.json"), "w").write(json.dumps(found))
    open(os.path.join(work, "locked"), "w").close()
    for _ in range(1200):
        if os.path.exists(os.path.join(work, "release")):
            break
        time.sleep(0.1)
    os._exit(0)
os.wait()
'''


def test_attack_a_sandbox_locking_the_terminal_holds_no_question_back(
    tmux: Tmux, tmp_path: Path, write_spec: WriteSpec,
) -> None:
    """A program in a real sandbox, on the person's terminal, takes an exclusive flock on
    /dev/tty (through a controlling terminal of its own) and on every terminal it can
    open: the question is shown on the terminal all the same, and its code answers it.
    (Before: the asker's flock on /dev/tty waited for the program's, and no question
    reached any terminal while it held it.)"""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "locker.py").write_text(TERMINAL_LOCKER)
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path / 'locker.py')}\n"
                      f"write = {toml_list(work)}\n")
    locked = shlex.quote(str(work / "locked"))
    # The pane's own terminal (/dev/pts/N, not /dev/tty) as its standard input and output.
    before = (f"pane=$(tty); {shlex.quote(LNK_SANDBOX)} run --spec {shlex.quote(str(spec))} "
              f"-- python3 {shlex.quote(str(tmp_path / 'locker.py'))} {shlex.quote(str(work))} "
              f"<\"$pane\" >\"$pane\" 2>{shlex.quote(str(tmp_path / 'sandbox.err'))} & "
              f"while [ ! -e {locked} ]; do sleep 0.1; done; ")
    out = tmp_path / "answer.json"
    try:
        ask_in_pane(tmux, out, before=before)
        wait_until(lambda: (work / "locked").exists(), "the program to lock the terminal")
        probe = json.loads((work / "probe.json").read_text())
        assert probe["/dev/tty"] == "locked" and probe["fd 0"] == "locked", probe
        ident, code = shown_code(tmux)
        tmux.send(code, "Enter")
        assert answer_in(out) == {"answer": "yes", "how": "terminal", "id": ident}
    finally:
        (work / "release").touch()


def test_terminal_keys_typed_before_the_question_are_given_back(
    tmux: Tmux, tmp_path: Path, sandbox_env: dict[str, str],
) -> None:
    """Keys typed to the program before the question (a whole line, and a line begun) are
    not an answer to it, and are not thrown away: when the question closes they are where
    they were, and the program reads them. (Before: flushed, at the question's start and
    again at its end.)"""
    out = tmp_path / "answer.json"
    go = tmp_path / "go"
    command = (f"while [ ! -e {shlex.quote(str(go))} ]; do sleep 0.1; done; "
               f"{shlex.quote(ASK)} --title T --question Q --wire ahead --timeout 60 --json "
               f"> {shlex.quote(str(out))}; read -r first; echo \"GOT[$first]\"; "
               f"read -r second; echo \"GOT2[$second]\"")
    tmux.start(f"sh -c {shlex.quote(command + '; sleep 60')}")
    tmux.send("hello there", "Enter")
    tmux.send("part")  # a line begun, not ended
    wait_until(lambda: "part" in tmux.screen(), "the keys echoed")
    go.touch()
    ident, _ = shown_code(tmux)
    assert AskQueue(str(sandbox_env["LNK_HOME"])).answered(ident) is None
    assert cli(sandbox_env, "answer", ident, "no").returncode == 0
    assert answer_in(out) == {"answer": "no", "how": "queue", "id": ident}
    wait_until(lambda: "GOT[hello there]" in tmux.screen(), "the whole line given back")
    tmux.send("ial", "Enter")
    wait_until(lambda: "GOT2[partial]" in tmux.screen(), "the line begun given back")


def test_no_screen_and_no_terminal_says_at_once_where_the_question_waits(
    sandbox_env: dict[str, str],
) -> None:
    """With no dialog and no terminal, `lnk-sandbox-ask` says at once on stderr that the
    question waits in the queue, and the command that answers it. (Before: nothing, then
    no after two minutes.)"""
    import select

    asker = start_ask(sandbox_env, "--title", "T", "--question", "Q", "--wire", "alone",
                      timeout=120)
    try:
        assert asker.stderr is not None
        readable, _, _ = select.select([asker.stderr], [], [], WAIT_SECONDS)
        assert readable, "nothing said on stderr while the question waits"
        line = asker.stderr.readline()
        [entry] = waiting(sandbox_env, "alone")
        ident = str(entry["id"])
        assert line == (f"lnk-sandbox-ask: no screen and no terminal to ask on: the question "
                        f"{ident} waits in the queue (see lnk-sandbox asks); answer it with: "
                        f"lnk-sandbox answer {ident} yes|no (no answer in 120 s is no)\n")
        assert asker.poll() is None  # said while it waits, not at the end
        assert cli(sandbox_env, "answer", ident, "yes").returncode == 0
        status, found, _ = finish(asker)
        assert (status, found["how"]) == (0, "queue")
    finally:
        asker.kill()
        asker.communicate()


def test_a_tool_calls_arguments_are_escaped_once_and_links_cut_is_ascii(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
) -> None:
    """The program's own `…` in a tool call's arguments reads `\\u2026` in `asks`, as any
    non-ASCII character does: escaped once, by lnk_ask, not twice (it read `\\\\u2026`:
    the MCP verb escaped the JSON to ASCII and lnk_ask doubled its backslash), and
    Link's own cut is said in ASCII, with the whole's length and digest, where the MCP
    verb's `…` read `\\u2026` too, like the program's own."""
    folder = tmp_path / "mcp"
    folder.mkdir()
    (folder / "tool.py").write_text(MCP_TOOL)
    (folder / "client.py").write_text(MCP_CLIENT)
    (folder / "arguments.json").write_text(json.dumps({"note": "wait\u2026 " + "z" * 3000}))
    subprocess.run([LNK_SANDBOX, "tool", "add", "demo", "--", sys.executable,
                    str(folder / "tool.py")], env=sandbox_env, check=True,
                   capture_output=True, timeout=WAIT_SECONDS)
    spec = write_spec(f"[files]\nread = {toml_list(folder)}\n[verbs]\ntools = [\"demo\"]\n")
    quiet = {key: value for key, value in sandbox_env.items()
             if key not in ("DISPLAY", "WAYLAND_DISPLAY")}
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--wire", "dots", "--",
                            "python3", str(folder / "client.py"),
                            str(folder / "arguments.json")], env=quiet,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        entries = wait_until(lambda: waiting(sandbox_env, "dots"), "the tool call's question")
        assert isinstance(entries, list)
        [entry] = entries
        question = str(entry["question"])
        assert '{"note":"wait\\u2026 zzz' in question, question[:200]
        assert "\\\\u2026" not in question and "\\u2026 (" not in question
        assert question.count("\\u2026") == 1
        cut = r" \[\.\.\. \d+ characters in all, not shown whole; sha256 [0-9a-f]{16}\]$"
        assert re.search(cut, question), question[-120:]
        assert entry["title"] == "demo: run delete_repo?"
        assert cli(sandbox_env, "answer", str(entry["id"]), "no").returncode == 0
        out, _ = run.communicate(timeout=WAIT_SECONDS * 2)
        assert out.startswith("ERROR "), out
    finally:
        run.kill()
        run.communicate()


# Inside: stop the output of the terminal it shares (tcflow TCOOFF, Ctrl-S's effect) and
# hold it stopped till `release`.
OUTPUT_STOPPER = r'''
import os, sys, termios, time
work = sys.argv[1]
termios.tcflow(0, termios.TCOOFF)
open(os.path.join(work, "stopped"), "w").close()
for _ in range(1200):
    if os.path.exists(os.path.join(work, "release")):
        break
    time.sleep(0.1)
termios.tcflow(0, termios.TCOON)
'''


def test_attack_a_sandbox_stopping_the_terminals_output_holds_no_question_back(
    tmux: Tmux, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
) -> None:
    """A program in a real sandbox stops the shared terminal's output (TCOOFF): the
    terminal cannot show the question and drops out, and the queue still answers it.
    (Before: the asker waited on the terminal's write for ever, and no way could answer.)"""
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "stopper.py").write_text(OUTPUT_STOPPER)
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path / 'stopper.py')}\n"
                      f"write = {toml_list(work)}\n")
    stopped = shlex.quote(str(work / "stopped"))
    before = (f"{shlex.quote(LNK_SANDBOX)} run --spec {shlex.quote(str(spec))} -- python3 "
              f"{shlex.quote(str(tmp_path / 'stopper.py'))} {shlex.quote(str(work))} "
              f"</dev/tty >/dev/null 2>{shlex.quote(str(tmp_path / 'sandbox.err'))} & "
              f"while [ ! -e {stopped} ]; do sleep 0.1; done; ")
    out = tmp_path / "answer.json"
    try:
        ask_in_pane(tmux, out, before=before, wire="stopped")
        entries = wait_until(lambda: waiting(sandbox_env, "stopped"), "the question")
        assert isinstance(entries, list)
        assert cli(sandbox_env, "answer", str(entries[0]["id"]), "yes").returncode == 0
        assert answer_in(out) == {"answer": "yes", "how": "queue", "id": entries[0]["id"]}
    finally:
        (work / "release").touch()


@fuzz(3)
@given(st.text(max_size=3000), st.text(max_size=300), st.text(max_size=100),
       st.integers(min_value=70, max_value=300), st.integers(min_value=6, max_value=120))
def test_the_terminal_prompt_holds_for_any_text(question: str, allows: str, title: str,
                                                columns: int, rows: int) -> None:
    """Whatever the program's text, the prompt fits, and only Link's lines carry the
    mark: the program's never start a line, however they are padded."""
    from lnk_ask.ways import LINK_MARK, PROGRAM_GUTTER, terminal_prompt

    shown = terminal_prompt(printable(title, 80), printable(question), printable(allows, 240), "w",
                            "0123456789ab", "654321", 120, columns, rows)
    assert shown is not None and printable_ascii(shown.replace("\r\n", ""))
    lines = shown.split("\r\n")[1:]
    assert len(lines) <= rows and all(len(line) < columns for line in lines)
    assert lines[0].startswith(f"{LINK_MARK} asks (0123456789ab, wire w): ")
    body = lines[1:-3]
    if body and body[-1].startswith(LINK_MARK):
        body = body[:-1]  # what was cut
    assert body and all(line.startswith(PROGRAM_GUTTER) for line in body)
    assert lines[-2].startswith(f"{LINK_MARK} Type 654321 to allow: ")
    assert lines[-1] == f"{LINK_MARK} > "
