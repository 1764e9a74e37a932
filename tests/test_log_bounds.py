"""N11 and N10 attacked: no log in Link's settings grows without bound, whatever a
sandbox does (issue 12, item 7), and a flood of refused DNS names pauses the wire.

Floods from inside real sandboxes (real bwrap, the real exec watch, the real proxy and
its DNS; the programs are tests/floods.py, which bench/logflood also runs): refused
execs of long control-character names, refused DNS queries of distinct 253-byte names
over UDP and TCP, refused CONNECTs of distinct 253-byte names. Each asserts what the
folder grew by (a size, never a time), that every refusal is either a line or counted
in a fold line ("… and N more like this"), and, for DNS, the pause and its reason.
`log --follow` is followed by a real `lnk-sandbox log` process while real writer
processes rotate the log.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from lnk_common.boundedlog import (
    FOLD_AFTER,
    MAX_FOLDS,
    MAX_LINE_BYTES,
    MAX_LOG_BYTES,
    BoundedLog,
    Folds,
    clip,
)
from lnk_common.controls import DNS_NAMES_PER_TARGET, MAX_TRACKED_NAMES, Controls
from lnk_common.endpoints import MAX_KEPT_NAMES
from lnk_common.wirelog import WireLog, ended_detail, fold_key, parse_line
from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    end_run,
    toml_list,
    wait_until,
)
from tests.floods import CONNECT, DNS, EXEC, folded, settings_bytes
from tests.test_endpoints import net  # noqa: F401  (a fixture)
from tests.test_endpoints import spec as endpoint_spec

PYTHON = os.path.realpath("/usr/bin/python3")
DASH = os.path.realpath("/bin/sh")
# What a flood may grow Link's settings by: a log and its one older file, for each log a
# sandbox can reach (its wire's, programs.log), and the window file.
FOLDER_BOUND = 2 * (2 * MAX_LOG_BYTES) + (1 << 20)


def _lines(path: Path) -> list[str]:
    found = []
    for name in (path.name + ".1", path.name):
        if (path.parent / name).exists():
            found += (path.parent / name).read_text(errors="replace").splitlines()
    return found


def _inside(run_sandbox: RunSandbox, spec: Path, tmp_path: Path, code: str, *args: str,
            env: dict[str, str] | None = None) -> tuple[dict[str, object],
                                                        subprocess.CompletedProcess[str]]:
    script = tmp_path / f"flood{len(list(tmp_path.glob('flood*.py')))}.py"
    script.write_text(code)
    result = run_sandbox(spec, PYTHON, str(script), *args, env=env)
    assert result.stdout.strip(), result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result


# -- the sans-IO folds and the bounded file -----------------------------------------------------


def test_every_calls_ended_line_has_one_shape() -> None:
    """The proxy's calls (the lane's, h11's, a tunnel's) and the relay's write their
    `ended` line through one function: id, bytes each way, seconds, then a failure."""
    started = time.monotonic()
    detail = ended_detail(7, 12, 34, started)
    assert re.fullmatch(r"id=7 sent=12 received=34 seconds=\d+\.\d{3}", detail), detail
    failed = ended_detail(8, 0, 5, started, " error=ConnectionResetError")
    assert re.fullmatch(r"id=8 sent=0 received=5 seconds=\d+\.\d{3} "
                        r"error=ConnectionResetError", failed), failed


def test_N11_folds_write_the_first_lines_of_a_kind_then_count_the_rest() -> None:
    folds = Folds(seconds=10)
    written = [folds.admit("refused dns", 100.0 + step / 100) for step in range(50)]
    assert written == [True] * FOLD_AFTER + [False] * (50 - FOLD_AFTER)
    assert folds.admit("another kind", 101.0) is True
    assert folds.due(109.9) == []
    assert folds.due(110.0) == [("refused dns", 50 - FOLD_AFTER)]
    assert folds.admit("refused dns", 110.5) is True  # a new window
    for _ in range(FOLD_AFTER + 3):
        folds.admit("refused dns", 111.0)
    assert folds.all() == [("refused dns", 4)]


def test_N11_past_max_folds_kinds_a_new_kind_is_written_whole_never_dropped() -> None:
    folds = Folds(seconds=10)
    assert all(folds.admit(f"kind {index}", 0.0) for index in range(MAX_FOLDS))
    assert [folds.admit("one kind too many", 0.0) for _ in range(FOLD_AFTER + 5)] \
        == [True] * (FOLD_AFTER + 5)


def test_N10_dns_names_pause_at_exactly_their_threshold_and_repeats_count_once() -> None:
    controls = Controls(calls_per_minute=0, pause=(30, 20, 60))
    threshold = 20 * DNS_NAMES_PER_TARGET
    for index in range(threshold - 1):
        assert controls.dns_refusal(float(index) / 100, f"name{index}.example.com") is None
        # The same name again (a retry, AAAA beside A, a trailing dot, another case).
        assert controls.dns_refusal(float(index) / 100, f"NAME{index}.example.com.") is None
    assert controls.dns_refusal(2.0, "one-more.example.com") == (
        f"{threshold} different names refused by the sandbox's DNS within 60 s "
        f"(the threshold is {threshold}: {DNS_NAMES_PER_TARGET} times [pause] targets)")
    # Refused names do not count toward the calls' thresholds, nor the other way.
    assert controls.refused == deque() and controls.refused_targets == {}
    later = Controls(calls_per_minute=0, pause=(30, 20, 60))
    for index in range(threshold - 1):
        later.dns_refusal(0.0, f"old{index}")
    assert later.dns_refusal(60.0, "new") is None  # the old ones left the window


def test_N11_the_fold_key_is_the_kind_and_the_reason_class_never_the_name() -> None:
    one = fold_key("refused", "a" * 253, f"kind=dns type=A reason={'a' * 253} is not a name "
                                         "this sandbox may reach")
    two = fold_key("refused", "b" * 253, f"kind=dns type=A reason={'b' * 253} is not a name "
                                         "this sandbox may reach")
    assert one == two and one is not None and "aaa" not in one
    assert fold_key("refused", "x", "kind=dns type=AAAA reason=x is not a name this sandbox "
                                    "may reach") != one
    assert fold_key("refused", "a.com:443", "reason=a.com is not in this sandbox's hosts") \
        == fold_key("refused", "b.org:443", "reason=b.org is not in this sandbox's hosts")
    # Calls out and their bytes are never folded, nor SRV/TXT asked outside.
    assert fold_key("allowed", "a.com:443", "id=7 kind=connect") is None
    assert fold_key("ended", "a.com:443", "id=7 sent=1 received=2 seconds=0.1") is None
    assert fold_key("allowed", "_x._tcp.a.com", "kind=dns type=SRV outside=NOERROR "
                                                "answers=2") is None


_WRITER = r"""
import sys
from lnk_common.boundedlog import BoundedLog
log = BoundedLog(sys.argv[1])
writer, count = sys.argv[2], int(sys.argv[3])
for index in range(count):
    log.append(f"{writer} {index:08d} {'x' * 100}\n".encode())
"""


def test_N11_processes_writing_one_log_rotate_it_without_losing_or_mixing_lines(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log"
    count, writers = 12_000, 4  # 4 x 12,000 x 112 bytes: some 5 MiB, four rotations
    runs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(writer),
                              str(count)], cwd=Path(__file__).parent.parent)
            for writer in range(writers)]
    assert [run.wait(timeout=SANDBOX_TIMEOUT_SECONDS) for run in runs] == [0] * writers
    assert path.stat().st_size <= MAX_LOG_BYTES
    assert (tmp_path / "log.1").stat().st_size <= MAX_LOG_BYTES
    lines = _lines(path)
    assert all(len(line) == 111 and line.endswith("x" * 100) for line in lines)
    # The two files hold the last lines written: each writer's, in order, with no gap.
    for writer in range(writers):
        numbers = [int(line.split()[1]) for line in lines if line.startswith(f"{writer} ")]
        assert numbers == list(range(count - len(numbers), count))



def test_N11_a_line_after_its_file_was_renamed_or_removed_by_anyone_goes_to_path(
    tmp_path: Path,
) -> None:
    """The file held is checked against PATH at every line, not only for this module's
    own rotations: moved away by a person or removed, the next line makes PATH again."""
    path = tmp_path / "logs" / "log"
    log = BoundedLog(str(path))
    log.append(b"one\n")
    os.rename(path, tmp_path / "logs" / "kept")
    log.append(b"two\n")
    path.unlink()
    log.append(b"three\n")
    assert (tmp_path / "logs" / "kept").read_bytes() == b"one\n"
    assert path.read_bytes() == b"three\n"
    (tmp_path / "logs" / "kept").unlink()
    path.unlink()
    os.rmdir(tmp_path / "logs")  # the folder too
    log.append(b"four\n")
    other = BoundedLog(str(path), limit=8)  # another writer rotates it before its line:
    other.append(b"five\n")                # the first writer's next goes to the new file
    log.append(b"six\n")
    log.close()
    other.close()
    assert (path.parent / "log.1").read_bytes() == b"four\n"
    assert path.read_bytes() == b"five\nsix\n"


def test_N11_a_line_is_four_system_calls_and_a_reopening_never_reuses_a_closed_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flock, stat of PATH, write, unlock: the file held is known by the device and inode
    taken when it was opened, so no fstat is made for a line. A reopening that fails
    (no descriptor left) leaves no closed number to be locked or closed later."""
    import fcntl

    path = tmp_path / "log"
    log = BoundedLog(str(path))
    calls: list[str] = []
    for module, name in ((os, "fstat"), (os, "stat"), (os, "write"), (fcntl, "flock")):
        real = getattr(module, name)

        def counted(*args: object, real: Any = real, name: str = name, **kwargs: object
                    ) -> object:
            calls.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    log.append(b"one\n")
    assert calls == ["flock", "stat", "write", "flock"]
    monkeypatch.undo()
    path.unlink()
    real_open = os.open

    def no_descriptor(*args: Any, **kwargs: Any) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "open", no_descriptor)
    with pytest.raises(OSError, match="Too many open files"):
        log.append(b"lost\n")
    assert log.fd == -1
    monkeypatch.setattr(os, "open", real_open)
    log.append(b"two\n")
    log.close()
    assert path.read_bytes() == b"two\n"


def test_N11_a_line_is_cut_to_its_limit_saying_how_much() -> None:
    kept = (MAX_LINE_BYTES - 40) // 4
    assert clip("\\x1b" * 5000) == "\\x1b" * kept + f"… ({20000 - 4 * kept} bytes cut)"
    assert len(clip("\\x1b" * 5000).encode()) <= MAX_LINE_BYTES
    assert clip("short") == "short"


def test_N11_a_wire_log_line_cut_to_its_limit_keeps_its_four_fields(tmp_path: Path) -> None:
    log = WireLog(str(tmp_path), "cut")
    log.write("allowed", "\x1b" * 3000 + ":443", "id=1 kind=connect " + "\n" * 3000)
    log.close()
    (line,) = _lines(tmp_path / "sandbox" / "wires" / "cut" / "log")
    assert len(line.encode()) <= MAX_LINE_BYTES
    entry = parse_line(line)
    assert entry is not None and entry["event"] == "allowed" and entry["id"] == "1"
    assert entry["target"].endswith("bytes cut)")


# -- floods from inside a real sandbox ---------------------------------------------------------


def test_N11_a_flood_of_refused_execs_of_long_control_character_names_stays_bounded(
    write_spec: WriteSpec, run_sandbox: RunSandbox, lnk_home: Path, tmp_path: Path,
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n"
                      f"[commands]\nrun = {toml_list(PYTHON)}\n")
    before = settings_bytes(lnk_home)
    sent = 4000
    found, result = _inside(run_sandbox, spec, tmp_path, EXEC, str(sent))
    assert found["refused"] == sent
    grown = settings_bytes(lnk_home) - before
    lines = _lines(lnk_home / "sandbox" / "programs.log")
    named = [line for line in lines if "\trefused to run /tmp/flood/" in line]
    # Every refusal is named or counted; the fold lines say how many.
    assert len(named) + folded(lines) == sent, lines[-3:]
    assert FOLD_AFTER <= len(named) < sent // 10
    assert grown < 64 * 1024, grown  # before: ~2.4 KiB a refusal, 9 MiB here
    assert all(len(line.encode()) <= MAX_LINE_BYTES + 40 for line in lines)
    assert "\x1b" not in "".join(lines) and "\\x1b[2J" in "".join(lines)
    # The sandbox's stderr is folded alike.
    said = [line for line in result.stderr.splitlines() if "refused to run" in line]
    assert len(said) == len(named)
    assert folded(result.stderr.splitlines()) == folded(lines)


def _paused(lnk_home: Path, wire: str) -> dict[str, str] | None:
    path = lnk_home / "sandbox" / "wires" / wire / "paused"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_N10_N11_a_flood_of_refused_dns_names_pauses_the_wire_and_stays_bounded(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, lnk_home: Path,
    net: tuple[Path, dict[str, str]], transport: str,  # noqa: F811
) -> None:
    _, env = net
    path = endpoint_spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    before = settings_bytes(lnk_home)
    sent = 3000
    found, _ = _inside(run_sandbox, path, tmp_path, DNS, transport, str(sent), env=env)
    threshold = DNS_NAMES_PER_TARGET * 20
    # NXDOMAIN (3) until the threshold, REFUSED (5) once paused: every query answered.
    assert found["rcodes"] == {"3": threshold, "5": sent - threshold}
    pause = _paused(lnk_home, "ep")
    assert pause is not None
    assert pause["reason"] == (f"{threshold} different names refused by the sandbox's DNS "
                               f"within 60 s (the threshold is {threshold}: "
                               f"{DNS_NAMES_PER_TARGET} times [pause] targets)")
    lines = _lines(lnk_home / "sandbox" / "wires" / "ep" / "log")
    refused = [line for line in lines if "\trefused\t" in line and "more=" not in line]
    assert len(refused) + folded(lines) == sent
    assert len(refused) < sent // 10
    assert any(line.split("\t")[1] == "paused" for line in lines)
    assert settings_bytes(lnk_home) - before < 64 * 1024  # before: ~1.1 MiB here


def test_N11_distinct_allowed_names_rotate_the_log_at_its_bound(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, lnk_home: Path,
    net: tuple[Path, dict[str, str]],  # noqa: F811
) -> None:
    """Names under a `*.lnkt` endpoint are each allowed and given an address here, and
    an allowed answer of a new name is never folded: the log's rotation alone bounds
    them (8,192 lines of ~320 bytes, as many names as a sandbox is given addresses for:
    some 2.5 MiB written, at most twice the limit kept)."""
    _, env = net
    path = endpoint_spec(write_spec, tmp_path, '[tcp]\nendpoints = ["*.lnkt:5432"]\n')
    before = settings_bytes(lnk_home)
    sent = MAX_KEPT_NAMES
    found, _ = _inside(run_sandbox, path, tmp_path, DNS, "udp", str(sent), "wildcard",
                       env=env)
    assert found["rcodes"] == {"0": sent}
    wires = lnk_home / "sandbox" / "wires" / "ep"
    assert (wires / "log.1").stat().st_size <= MAX_LOG_BYTES
    assert (wires / "log").stat().st_size <= MAX_LOG_BYTES
    assert settings_bytes(lnk_home) - before <= FOLDER_BOUND
    lines = _lines(wires / "log")
    assert all(parse_line(line) is not None for line in lines)
    # The newest lines are kept, the last one the last name asked (then the run's
    # exited line).
    assert lines[-1].split("\t")[1] == "exited"
    assert lines[-2].split("\t")[2].startswith(f"{sent - 1:010d}")


def test_N10_a_resolver_workload_with_retries_and_search_lists_never_pauses(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, lnk_home: Path,
    net: tuple[Path, dict[str, str]],  # noqa: F811
) -> None:
    """What resolvers do on their own: A and AAAA, a name under each domain of a search
    list (six, glibc's most) and alone, retries (dig +tries=5), the same lookups again:
    listed names and a few unlisted ones. None of it pauses."""
    _, env = net
    path = endpoint_spec(write_spec, tmp_path, '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    unlisted = [f"telemetry{index}.example.com" for index in range(5)]
    search = [f"corp{index}.example.net" for index in range(6)]
    names = [*unlisted, *(f"{name}.{domain}" for name in unlisted for domain in search)]
    script = "; ".join(
        ["getent hosts db.lnkt", "getent ahosts db.lnkt > /dev/null"]
        + [f"getent ahosts {name} > /dev/null" for name in names]
        + [f"dig +tries=5 +short {kind} {name} > /dev/null"
           for name in unlisted for kind in ("A", "AAAA")]
        + [f"dig +tcp +short {name} > /dev/null" for name in unlisted]
        + ["python3 -c 'import socket\nfor name in " + json.dumps(names) + " * 3:\n"
           "  try: socket.getaddrinfo(name, 443)\n  except OSError: pass'"]
        + ["getent hosts db.lnkt"])
    result = run_sandbox(path, "/bin/sh", "-c", script, env=env)
    assert result.stdout.split() == ["127.53.0.1", "db.lnkt"] * 2, result.stderr
    assert _paused(lnk_home, "ep") is None
    lines = _lines(lnk_home / "sandbox" / "wires" / "ep" / "log")
    assert not any(line.split("\t")[1] == "paused" for line in lines)
    assert f"\trefused\t{unlisted[0]}\t" in "\n".join(lines)


def test_N11_a_flood_of_refused_connects_to_long_names_stays_bounded(
    run_sandbox: RunSandbox, write_spec: WriteSpec, tmp_path: Path, lnk_home: Path,
    testnet: Path,
) -> None:
    path = write_spec(f'name = "cf"\n[files]\nread = {toml_list(tmp_path)}\n'
                      '[network]\nmode = "proxy"\nhosts = ["allowed.lnkt"]\n')
    before = settings_bytes(lnk_home)
    sent = 2000
    found, _ = _inside(run_sandbox, path, tmp_path, CONNECT, str(sent))
    assert found["statuses"] == {"403": sent}
    pause = _paused(lnk_home, "cf")
    assert pause is not None and "different targets refused" in pause["reason"]
    lines = _lines(lnk_home / "sandbox" / "wires" / "cf" / "log")
    refused = [line for line in lines if "\trefused\t" in line and "more=" not in line]
    assert len(refused) + folded(lines) == sent
    assert settings_bytes(lnk_home) - before < 64 * 1024  # before: ~1.2 MiB here


_LEARN_FLOOD = r"""
import os, shutil
true = os.path.realpath("/usr/bin/true")
paths = []
for index in range(800):
    name = ("\x1b[2J\x07" * 60 + f"{index:03d}")[-250:]
    folder = f"/tmp/learn/{name}/{name}"
    os.makedirs(folder, exist_ok=True)
    path = folder + "/" + ("\x1b]0;x\x07" * 40)[:200]
    shutil.copy(true, path)
    paths.append(path)
for path in paths * 2:
    os.waitpid(os.posix_spawn(path, [path], {}), 0)
print("ran", len(paths) * 2)
"""


def test_N11_a_learn_run_of_thousands_of_new_programs_keeps_its_record_bounded(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path,
) -> None:
    """`learn` records each program once, and at most MAX_LEARN_BYTES (~1.5 KiB a line
    here: some 700 fit), then counts the rest and says so."""
    script = tmp_path / "learnflood.py"
    script.write_text(_LEARN_FLOOD)
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    learned = run_sandbox(spec, PYTHON, str(script), verb="learn")
    assert "ran 1600" in learned.stdout, learned.stderr[-2000:]
    said = [line for line in learned.stderr.splitlines() if "the record was full" in line]
    assert len(said) == 1, learned.stderr[-2000:]
    unrecorded = int(said[0].split("; ")[1].split()[0])
    not_offered = [line for line in learned.stderr.splitlines() if "not offered: /tmp/" in line]
    assert len(not_offered) + unrecorded // 2 == 800  # each recorded once, each run twice


def test_N11_a_fold_count_is_written_when_its_window_ends_while_the_sandbox_runs(
    write_spec: WriteSpec, tmp_path: Path, lnk_home: Path, sandbox_env: dict[str, str],
    net: tuple[Path, dict[str, str]],  # noqa: F811
) -> None:
    """Not only at exit: the exec watch and the proxy each write a fold's count once its
    window ends, while the flood's sandbox is still running (the test reads the logs
    from outside while the program sleeps, then ends it)."""
    _, env = net
    exec_flood, dns_flood = tmp_path / "exec.py", tmp_path / "dns.py"
    exec_flood.write_text(EXEC)
    dns_flood.write_text(DNS)
    spec = write_spec(f'name = "ep"\n[files]\nread = {toml_list(tmp_path)}\n'
                      f"[commands]\nrun = {toml_list(PYTHON, '/usr/bin/sleep', DASH)}\n"
                      '[tcp]\nendpoints = ["db.lnkt:5432"]\n')
    script = (f"{PYTHON} {exec_flood} 100 >/dev/null && {PYTHON} {dns_flood} udp 50 "
              f">/dev/null && echo flooded "
              f"&& exec /usr/bin/sleep {SANDBOX_TIMEOUT_SECONDS}")
    # stderr to a file: a pipe nobody reads would hold the watch (and the flood) once full.
    said = (tmp_path / "stderr").open("w")
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", DASH, "-c", script],
                           env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=said,
                           text=True)
    try:
        assert run.stdout is not None
        assert "flooded" in run.stdout.readline()
        programs = lnk_home / "sandbox" / "programs.log"
        wire = lnk_home / "sandbox" / "wires" / "ep" / "log"
        wait_until(lambda: run.poll() is not None
                   or (folded(_lines(programs)) and folded(_lines(wire))), "the folded lines")
        assert run.poll() is None, run.communicate()  # written by the window's end, not the exit
        named = [line for line in _lines(programs) if "\trefused to run /tmp/flood/" in line]
        assert len(named) + folded(_lines(programs)) == 100
        refused = [line for line in _lines(wire) if "\trefused\t" in line
                   and "more=" not in line]
        assert len(refused) + folded(_lines(wire)) == 50
    finally:
        end_run(run)
        said.close()


# -- the window file --------------------------------------------------------------------------


def test_N11_the_window_holds_digests_and_counts_whatever_the_thresholds() -> None:
    controls = Controls(calls_per_minute=0, pause=(1_000_000, 1_000_000, 3600))
    reasons = [controls.refusal(1000.0 + index / 1000, "n" * 250 + str(index))
               for index in range(MAX_TRACKED_NAMES + 1)]
    assert reasons[:-1] == [None] * MAX_TRACKED_NAMES
    assert reasons[-1] == (f"more than {MAX_TRACKED_NAMES} different targets refused "
                           "within 3600 s (more than Link keeps count of)")
    assert len(controls.refused) <= 6  # counts by the second
    assert all(len(key) == 16 for key in controls.refused_targets)


# -- log --follow across rotations ------------------------------------------------------------

_FOLLOWED_FLOOD = r"""
import socket, struct, sys
batches, per = int(sys.argv[1]), int(sys.argv[2])
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.settimeout(5)
sock.connect(("127.0.0.1", 53))
for batch in range(batches):
    for index in range(batch * per, (batch + 1) * per):
        name = ".".join([f"{index:010d}" + "x" * 53, "y" * 63, "z" * 63, "w" * 56, "lnkt"])
        question = b"".join(bytes([len(label)]) + label.encode() for label in name.split("."))
        sock.send(struct.pack(">HHHHHH", index & 0xFFFF, 0x0100, 1, 0, 0, 0) + question
                  + b"\0" + struct.pack(">HH", 1, 1))
        assert sock.recv(4096)[3] & 0xF == 0
    print(name, flush=True)
    sys.stdin.readline()  # the test says when the follower has shown this batch
"""


def test_N11_log_follow_follows_a_real_sandbox_flood_across_rotations(
    tmp_path: Path, lnk_home: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    net: tuple[Path, dict[str, str]],  # noqa: F811
) -> None:
    """A real `lnk-sandbox log ep --follow` while a real sandbox's DNS flood (distinct
    names under a `*.lnkt` endpoint, each allowed, never folded) rotates the wire's log
    twice (as many names as a sandbox is given addresses for). Each batch is less than a
    file and waits until the follower has shown its last name, so the follower never
    falls a whole file behind; every name must be shown once, in order."""
    _, env = net
    script = tmp_path / "followed.py"
    script.write_text(_FOLLOWED_FLOOD)
    spec = endpoint_spec(write_spec, tmp_path, '[tcp]\nendpoints = ["*.lnkt:5432"]\n')
    wire_log = lnk_home / "sandbox" / "wires" / "ep" / "log"
    wire_log.parent.mkdir(parents=True)
    wire_log.write_text("")
    batches, per = 4, MAX_KEPT_NAMES // 4  # 2,048 lines of ~310 bytes a batch: 0.6 MiB
    follower = subprocess.Popen([LNK_SANDBOX, "log", "ep", "--follow"], env=sandbox_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    flood = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON,
                              str(script), str(batches), str(per)], env=env, cwd=tmp_path,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    shown: list[str] = []
    try:
        assert flood.stdin is not None and flood.stdout is not None
        assert follower.stdout is not None
        for _ in range(batches):
            last = flood.stdout.readline().strip()
            assert last, flood.communicate()
            while not shown or shown[-1] != last:
                line = follower.stdout.readline()
                assert line, follower.communicate()
                if " allowed " in line:
                    shown.append(line.split()[3])
            flood.stdin.write("go\n")
            flood.stdin.flush()
        assert flood.wait(timeout=SANDBOX_TIMEOUT_SECONDS) == 0
    finally:
        end_run(flood)
        follower.terminate()
        _, errors = follower.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    assert (wire_log.parent / "log.1").exists()
    names = [".".join([f"{index:010d}" + "x" * 53, "y" * 63, "z" * 63, "w" * 56, "lnkt"])
             for index in range(batches * per)]
    assert shown == names  # each once, in order, across the rotations
    assert "may be missing" not in errors


# -- log --follow across rotations, written by processes of one wire --------------------


_WIRE_WRITER = r"""
import sys
from lnk_common.wirelog import WireLog
log = WireLog(sys.argv[1], "rot")
writer, start, count = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for index in range(start, start + count):
    log.write("allowed", f"w{writer}-{index:07d}.lnkt:443", f"id={index} kind=connect")
log.close()
"""


def test_N11_log_follow_keeps_following_across_rotations_without_loss_or_repeat(
    lnk_home: Path, sandbox_env: dict[str, str],
) -> None:
    """A real `lnk-sandbox log rot --follow` while two writer processes (the wire log's
    own code, as a proxy and a relay of one wire) rotate the log several times. Each
    round writes less than a file (so the follower never falls a whole file behind) and
    waits until the follower has shown the round's last lines."""
    wire_log = lnk_home / "sandbox" / "wires" / "rot" / "log"
    wire_log.parent.mkdir(parents=True)
    wire_log.write_text("")
    follower = subprocess.Popen([LNK_SANDBOX, "log", "rot", "--follow"], env=sandbox_env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = Path(__file__).parent.parent
    shown: list[str] = []
    per_round, rounds = 3000, 8  # 2 x 3,000 lines of ~80 bytes a round: 0.45 MiB
    try:
        for round_index in range(rounds):
            start = round_index * per_round
            writers = [subprocess.Popen([sys.executable, "-c", _WIRE_WRITER,
                                         str(lnk_home), str(writer), str(start),
                                         str(per_round)], cwd=root) for writer in (0, 1)]
            assert [run.wait(timeout=SANDBOX_TIMEOUT_SECONDS) for run in writers] == [0, 0]
            last = {f"w{writer}-{start + per_round - 1:07d}.lnkt:443" for writer in (0, 1)}
            assert follower.stdout is not None
            while last:
                line = follower.stdout.readline()
                assert line, follower.stderr.read() if follower.stderr else ""
                shown.append(line)
                last.discard(line.split()[3])
    finally:
        follower.terminate()
        _, errors = follower.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    assert (wire_log.parent / "log.1").exists()
    assert wire_log.stat().st_size <= MAX_LOG_BYTES
    targets = [line.split()[3] for line in shown]
    expected = {f"w{writer}-{index:07d}.lnkt:443" for writer in (0, 1)
                for index in range(per_round * rounds)}
    assert len(targets) == len(set(targets)) == len(expected)
    assert set(targets) == expected
    assert "may be missing" not in errors
    for writer in (0, 1):  # each writer's lines in the order written
        mine = [target for target in targets if target.startswith(f"w{writer}-")]
        assert mine == sorted(mine)
    assert all(parse_line(line) is not None for line in _lines(wire_log))
