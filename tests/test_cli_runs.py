"""What a harness launcher and a person expect of the commands (issue 28, item 5): a run's
lines on its wire's log and its summary, `log --since/-n/--refused`, a closed call's
`ended` line, `asks --wait`, and `url`."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lnk_common.wirelog import WireLog, parse_line
from lnk_wrap.wirelog_view import LogFilter, LogFilterError, parse_since
from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    end_run,
    toml_list,
    wait_until,
    wire_log_of,
)

PYTHON = "/usr/bin/python3"


def lnk(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, *args], env=env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


def _lines(env: dict[str, str], wire: str) -> list[list[str]]:
    return [line.split("\t") for line in wire_log_of(env, wire).splitlines()]


# -- sans IO: the log's filter, and the ended line of a closed call ----------------------------

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def test_since_reads_relative_times_and_iso_times() -> None:
    assert parse_since("10m", NOW) == "2027-01-15T07:50:00.000Z"
    assert parse_since("2h", NOW) == "2027-01-15T06:00:00.000Z"
    assert parse_since("1d", NOW) == "2027-01-14T08:00:00.000Z"
    assert parse_since("30s", NOW) == "2027-01-15T07:59:30.000Z"
    assert parse_since("2027-01-15T07:00Z", NOW) == "2027-01-15T07:00:00.000Z"
    assert parse_since("2027-01-15T09:00:00+02:00", NOW) == "2027-01-15T07:00:00.000Z"
    local = time.mktime((2027, 1, 15, 7, 0, 0, 0, 0, -1))  # no zone: this machine's time
    assert parse_since("2027-01-15T07:00", NOW) == parse_since(f"{int(NOW - local)}s", NOW)
    for bad in ("yesterday", "10", "m", "-5m", "2027-13-01", ""):
        with pytest.raises(LogFilterError):
            parse_since(bad, NOW)


def _line(stamp: str, event: str) -> str:
    return f"2027-01-15T{stamp}.000Z\t{event}\thost:443\tid=1\n"


def test_the_filter_keeps_refusals_lines_since_a_time_and_the_last_n() -> None:
    lines = [_line("07:00:00", "started"), _line("07:10:00", "allowed"),
             _line("07:20:00", "refused"), _line("07:30:00", "paused"),
             _line("07:40:00", "ended"), _line("07:50:00", "exited")]
    assert LogFilter().first(lines) == lines
    assert LogFilter(refused=True).first(lines) == [lines[2], lines[3]]
    assert LogFilter(since="2027-01-15T07:30:00.000Z").first(lines) == lines[3:]
    assert LogFilter(last=2).first(lines) == lines[4:]
    assert LogFilter(last=0).first(lines) == []
    assert LogFilter(last=100).first(lines) == lines
    # -n counts what the other filters keep, as the last N shown.
    assert LogFilter(last=1, refused=True).first(lines) == [lines[3]]
    assert LogFilter.from_options(None, "3", False, NOW).last == 3
    with pytest.raises(LogFilterError):
        LogFilter.from_options(None, "three", False, NOW)


def test_an_ended_line_written_while_the_switch_closes_calls_says_so(tmp_path: Path) -> None:
    log = WireLog(str(tmp_path), "w")
    log.write("ended", "a.com:443", "id=1 sent=1 received=2 seconds=0.100")
    log.closing = "kill-switch"
    log.write("ended", "a.com:443", "id=2 sent=1 received=2 seconds=0.100 error=X")
    log.write("ended", "localhost:9", "kind=callback reason=no callback came")
    log.write("refused", "b.com:443", "reason=the kill switch is on")
    log.closing = "pause"
    log.write("ended", "a.com:443", "id=3 sent=0 received=0 seconds=0.001")
    log.close()
    entries = [parse_line(line) for line in
               (tmp_path / "sandbox" / "wires" / "w" / "log").read_text().splitlines(True)]
    assert [entry and entry.get("closed") for entry in entries] == \
        [None, "kill-switch", "kill-switch", None, "pause"]
    assert entries[2] is not None and entries[2]["reason"] == "no callback came"
    assert entries[1] is not None and entries[1]["error"] == "X"


# -- real sandboxes: a run's lines, its summary, the log's options ----------------------------


def _spec(write_spec: WriteSpec, testnet: Path, name: str, extra: str = "") -> Path:
    return write_spec(f'name = "{name}"\n[files]\nread = {toml_list(testnet)}\n{extra}'
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt", "allowed.lnkt:7"]\n')


CALLS = ("curl -s -o /dev/null -m 5 http://allowed.lnkt/ok; "
         "curl -s -o /dev/null -m 5 http://allowed.lnkt/ok; "
         "curl -s -o /dev/null -m 5 http://not-listed.lnkt/; exit 7")


def test_a_run_is_marked_on_its_wire_s_log_and_summed_up_for_a_script(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    spec = _spec(write_spec, testnet, "summed")
    summary = tmp_path / "summary.json"
    summary.write_text("an older summary, replaced\n" * 100)
    first = lnk(sandbox_env, "run", "--spec", str(spec), "--summary", str(summary), "--",
                "/bin/sh", "-c", CALLS)
    assert first.returncode == 7, first.stderr
    found = json.loads(summary.read_text())
    assert found == {"status": 7, "wire": "summed", "run": found["run"], "calls": 2,
                     "refused": 1, "paused": False, "pause_reason": None, "stopped": False,
                     "other_runs": False}
    second = lnk(sandbox_env, "run", "--spec", str(spec), "--summary=" + str(summary), "--",
                 "true")
    assert second.returncode == 0, second.stderr
    again = json.loads(summary.read_text())
    assert again["run"] != found["run"] and again["calls"] == 0 and again["status"] == 0
    marks = [line for line in _lines(sandbox_env, "summed") if line[1] in ("started", "exited")]
    assert [(line[1], line[2]) for line in marks] == [("started", "-"), ("exited", "-")] * 2
    assert marks[0][3] == f"run={found['run']} pid={marks[0][3].split('pid=')[1]}"
    assert marks[1][3].startswith(f"run={found['run']} status=7 seconds=")
    assert marks[3][3].startswith(f"run={again['run']} status=0 seconds=")
    # The exited line comes after every call of its run.
    events = [line[1] for line in _lines(sandbox_env, "summed")]
    assert events.index("exited") > max(index for index, event in enumerate(events)
                                        if event in ("allowed", "ended", "refused"))
    # The log's options, as a person reads it.
    shown = lnk(sandbox_env, "log", "summed").stdout.splitlines()
    assert len(shown) == len(events)
    refused = lnk(sandbox_env, "log", "summed", "--refused").stdout.splitlines()
    assert len(refused) == 1 and "not-listed.lnkt:80" in refused[0]
    last = lnk(sandbox_env, "log", "summed", "-n", "1", "--json").stdout.splitlines()
    assert [json.loads(line)["event"] for line in last] == ["exited"]
    assert json.loads(last[0])["status"] == "0"
    assert lnk(sandbox_env, "log", "summed", "--since", "1s").stdout.count("\n") <= len(events)
    assert lnk(sandbox_env, "log", "summed", "--since", "2h").stdout.splitlines() == shown
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    assert lnk(sandbox_env, "log", "summed", "--since", future).stdout == ""
    bad = lnk(sandbox_env, "log", "summed", "--since", "soon")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--since 'soon'" in bad.stderr
    # The log keeps no path of a URL.
    assert "/ok" not in wire_log_of(sandbox_env, "summed")


def test_a_summary_file_that_is_a_link_is_refused_and_nothing_runs(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    spec = _spec(write_spec, testnet, "linked")
    target = tmp_path / "precious"
    target.write_text("mine\n")
    (tmp_path / "summary.json").symlink_to(target)
    done = lnk(sandbox_env, "run", "--spec", str(spec), "--summary",
               str(tmp_path / "summary.json"), "--", "/bin/sh", "-c", "echo ran")
    assert done.returncode == 125 and "ran" not in done.stdout
    assert done.stderr.startswith("lnk-sandbox: --summary ")
    assert target.read_text() == "mine\n"


_HOLD = """
import socket, sys, time
s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
s.sendall(b"CONNECT allowed.lnkt:7 HTTP/1.1\\r\\nHost: allowed.lnkt:7\\r\\n\\r\\n")
assert b" 200 " in s.recv(4096)
s.sendall(b"x")
s.recv(1)
if sys.argv[1] == "pause":  # a metadata service: the wire pauses at once
    m = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    m.sendall(b"GET http://169.254.169.254/ HTTP/1.1\\r\\nHost: 169.254.169.254\\r\\n\\r\\n")
    m.recv(4096)
else:
    open(sys.argv[2], "w").write("open")
s.settimeout(20)
while s.recv(65536):
    pass
print("closed")
"""


@pytest.mark.parametrize("how", ["kill-switch", "pause"])
def test_a_call_the_kill_switch_or_a_pause_closed_says_so_in_its_ended_line(
    write_spec: WriteSpec, testnet: Path, sandbox_env: dict[str, str], tmp_path: Path,
    how: str,
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    wire = f"closed-{how}"
    spec = _spec(write_spec, testnet, wire, extra=f"write = {toml_list(marks)}\n")
    summary = tmp_path / "summary.json"
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--summary", str(summary), "--", PYTHON,
         "-I", "-c", _HOLD, how, str(marks / "open")], env=sandbox_env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if how == "kill-switch":
            deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
            while not (marks / "open").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert lnk(sandbox_env, "stop").returncode == 0
        stdout, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        end_run(run)
        lnk(sandbox_env, "stop", "--clear")
    assert stdout == "closed\n", stderr
    ended = [line for line in _lines(sandbox_env, wire)
             if line[1:3] == ["ended", "allowed.lnkt:7"]]
    assert len(ended) == 1 and ended[0][3].endswith(f" closed={how}"), ended
    found = json.loads(summary.read_text())
    assert found["calls"] == 1 and found["status"] == 0
    if how == "pause":
        assert found["paused"] is True and "metadata" in str(found["pause_reason"])
        assert lnk(sandbox_env, "resume", wire).returncode == 0
    else:
        assert found["stopped"] is True
    # A call after the switch is lifted ends as any other.
    again = lnk(sandbox_env, "run", "--spec", str(spec), "--", "curl", "-s", "-m", "5",
                "http://allowed.lnkt/ok")
    assert again.stdout == "fine\n", again.stderr
    last = [line for line in _lines(sandbox_env, wire) if line[1] == "ended"][-1]
    assert "closed=" not in last[3]


# -- asks --wait ---------------------------------------------------------------------------------


def test_asks_wait_returns_with_the_question_once_one_comes(
    sandbox_env: dict[str, str]
) -> None:
    quick = lnk(sandbox_env, "asks", "--wait", "--timeout", "0.3")
    assert quick.returncode == 1
    assert quick.stderr == "lnk-sandbox: no question came within 0.3 s\n"
    assert lnk(sandbox_env, "asks", "--wait", "--timeout", "soon").returncode == 2
    env = {name: value for name, value in sandbox_env.items()
           if name not in ("DISPLAY", "WAYLAND_DISPLAY")}
    waiter = subprocess.Popen([LNK_SANDBOX, "asks", "--wait", "--json", "--timeout", "25"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    asker = None
    try:
        # The waiter has looked, found nothing, and sleeps until its next look.
        wait_until(lambda: waiter.poll() is not None or _sleeping(waiter.pid),
                   "the waiter to wait")
        assert waiter.poll() is None, waiter.communicate()
        asker = subprocess.Popen(
            [str(Path(LNK_SANDBOX).with_name("lnk-sandbox-ask")), "--title", "Wait test",
             "--question", "May it?", "--allows", "nothing", "--timeout", "20", "--wire", "w"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, text=True)
        stdout, stderr = waiter.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        assert waiter.returncode == 0, stderr
        shown = json.loads(stdout)["asks"]
        assert [(ask["title"], ask["question"], ask["wire"]) for ask in shown] == \
            [("Wait test", "May it?", "w")]
        assert lnk(sandbox_env, "answer", shown[0]["id"], "no").returncode == 0
        asker.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        assert asker.returncode == 1
    finally:
        for process in (waiter, asker):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()


def _sleeping(pid: int) -> bool:
    """Whether `pid` sleeps in nanosleep (what `asks --wait` does between two looks)."""
    try:
        with open(f"/proc/{pid}/wchan") as handle:
            return handle.read() in ("hrtimer_nanosleep", "do_nanosleep")
    except OSError:
        return False


# -- url -----------------------------------------------------------------------------------------


def _pairs(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_url_prints_an_agent_s_urls_before_its_first_start_and_its_runs_use_them(
    write_spec: WriteSpec, sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    lnk_home: Path
) -> None:
    plain = lnk(sandbox_env, "url")
    assert plain.returncode == 0
    assert _pairs(plain.stdout) == {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:3128/_link/model/anthropic",
        "OPENAI_BASE_URL": "http://127.0.0.1:3128/_link/model/openai/v1",
        "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:3128/_link/model/gemini",
        "OPENROUTER_BASE_URL": "http://127.0.0.1:3128/_link/model/openrouter/api/v1"}
    assert "no agent" in plain.stderr
    first = lnk(sandbox_env, "url", "--agent", "main")
    assert first.returncode == 0, first.stderr
    values = _pairs(first.stdout)
    assert values["LNK_SANDBOX_URL"].startswith("http://127.0.0.1:3128/_link/s/")
    assert values["ANTHROPIC_API_KEY"].startswith("lnk-")
    assert lnk(sandbox_env, "url", "--agent", "main").stdout == first.stdout  # kept
    assert json.loads(lnk(sandbox_env, "url", "--agent", "main", "--json").stdout) == values
    assert lnk(sandbox_env, "url", "--agent", "../x").returncode == 125
    # The agent's first run gets the same ones.
    (lnk_home / "agents" / "main").mkdir(parents=True)
    spec = write_spec('[agent]\nname = "main"\n[verbs]\nmodel = ["anthropic"]\nopen = true\n')
    by_spec = _pairs(lnk(sandbox_env, "url", "--spec", str(spec)).stdout)
    assert by_spec == {name: values[name] for name in
                       ("LNK_SANDBOX_URL", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")}
    inside = run_sandbox(spec, "/bin/sh", "-c",
                         'echo "LNK_SANDBOX_URL=$LNK_SANDBOX_URL"; '
                         'echo "ANTHROPIC_BASE_URL=$ANTHROPIC_BASE_URL"; '
                         'echo "ANTHROPIC_API_KEY=$ANTHROPIC_API_KEY"')
    assert inside.returncode == 0, inside.stderr
    assert _pairs(inside.stdout) == by_spec
    assert not any(value in os.environ.values() for value in by_spec.values())
