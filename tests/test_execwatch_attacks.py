"""The exec watch attacked from inside a real sandbox (issue 19): it reads nothing on the
sandbox's word that the sandbox could not read itself, judges the file Landlock judges
(not the path it was reached by), and a `#!` line it cannot make sense of neither kills
it nor silences it."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from tests.conftest import RunSandbox, WriteSpec, toml_list
from tests.test_files_attacks import Q
from tests.test_programs import DASH, commands_spec

_SYSLOG_ACTION_SIZE_UNREAD = 9


def _kernel_log_unread() -> int:
    """Bytes of the kernel's log not yet taken by a reader of /proc/kmsg (syslog(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    unread = int(libc.klogctl(_SYSLOG_ACTION_SIZE_UNREAD, None, 0))
    assert unread >= 0, os.strerror(ctypes.get_errno())
    return unread


def test_P1_an_exec_of_proc_kmsg_is_named_and_the_watch_takes_nothing_from_the_kernel_log(
    write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # /proc/kmsg is root's: only a watch run by root could read it, and only root can
    # count what is left unread. An ordinary user's run checks the naming alone.
    as_root = os.geteuid() == 0
    if as_root:
        with open("/dev/kmsg", "w") as kmsg:
            kmsg.write("lnk-sandbox test: a line for the machine's log reader\n")
    before = _kernel_log_unread() if as_root else 0
    spec = commands_spec(write_spec, DASH)
    result = run_sandbox(spec, DASH, "-c",
                         "for i in 1 2 3 4 5 6 7 8 9 10; do /proc/kmsg; done; echo done=$?")
    assert "done=126" in result.stdout, result
    assert f"lnk-sandbox: refused to run /proc/kmsg: not in [commands] of {spec}" in result.stderr
    # The watch took none of it (ten reads of 256 bytes did, before); new lines may come.
    if as_root:
        assert _kernel_log_unread() >= before


def test_P1_a_listed_script_the_sandbox_cannot_read_is_not_read_for_it(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # Root in the sandbox has no capabilities: mode 000 shuts it out. Before, the watch
    # (root, with CAP_DAC_OVERRIDE) read the #! line and named its interpreter on the
    # sandbox's stderr: the first line of a file the sandbox may not read. (An ordinary
    # user's watch has the sandbox's rights; the same attack, the same answer.)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "the-first-line-of-a-secret").write_text("")
    secret = tools / "secret"
    secret.write_bytes(f"#!{tools}/the-first-line-of-a-secret\n".encode())
    secret.chmod(0o000)
    spec = commands_spec(write_spec, DASH, "/usr/bin/cat", str(secret), read=(tools,))
    result = run_sandbox(spec, DASH, "-c",
                         f"{Q(str(secret))}; echo status=$?; cat {Q(str(secret))}; echo cat=$?")
    assert "status=126" in result.stdout and "cat=1" in result.stdout, result
    assert "the-first-line-of-a-secret" not in result.stdout + result.stderr, result


def test_P1_an_unlisted_program_is_named_without_being_read(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # Landlock refuses an unlisted file before the kernel reads a byte of it; the watch
    # names it by identity alone. Evidence of a read that needs no tracer: the file's
    # access time (relatime updates it when it is older than the change).
    tools = tmp_path / "tools"
    tools.mkdir()
    unlisted = tools / "unlisted"
    unlisted.write_bytes(b"#!/bin/sh\necho ran\n")
    unlisted.chmod(0o755)
    os.utime(unlisted, (0, unlisted.stat().st_mtime))
    # Written, not read: a read-only mount never updates an access time.
    spec = commands_spec(write_spec, DASH, write=(tools,))
    result = run_sandbox(spec, DASH, "-c", f"{Q(str(unlisted))}; echo status=$?")
    assert "status=126" in result.stdout and "ran" not in result.stdout, result
    assert f"lnk-sandbox: refused to run {unlisted}: not in [commands] of {spec}" in result.stderr
    assert unlisted.stat().st_atime == 0


def test_P1_a_decoy_where_a_listed_folder_was_renamed_away_is_named(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, lnk_home: Path
) -> None:
    # Landlock's rule holds the folder the init opened, wherever it goes; the watch
    # judged by path and said nothing of the decoy Landlock refused.
    holder = tmp_path / "holder"
    tools = holder / "tools"
    tools.mkdir(parents=True)
    real = tools / "tool"
    real.write_text("#!/bin/sh\necho real\n")
    real.chmod(0o755)
    spec = commands_spec(write_spec, "/usr/bin", str(tools), read=(tools,))
    moved = tmp_path / "moved"
    h, t, m = Q(str(holder)), Q(str(tools)), Q(str(moved))
    result = run_sandbox(spec, DASH, "-c",
                         f"mv {h} {m} && mkdir -p {t} && cp {m}/tools/tool {t}/tool && "
                         f"chmod +x {t}/tool && {t}/tool; echo decoy=$?; "
                         f"{m}/tools/tool; echo moved=$?")
    assert "decoy=126" in result.stdout, result
    assert "real\nmoved=0" in result.stdout, result
    named = [line for line in result.stderr.splitlines() if "refused to run" in line]
    assert named == [f"lnk-sandbox: refused to run {real}: not in [commands] of {spec}"], result
    log = (lnk_home / "sandbox" / "programs.log").read_text()
    assert f"\t{spec}\trefused to run {real}: not in [commands] of {spec}\n" in log


def _nul_script(tools: Path) -> Path:
    script = tools / "nul"
    script.write_bytes(b"#!/bin/\0sh\necho never\n")
    script.chmod(0o755)
    return script


def test_P1_a_nul_in_a_shebang_neither_kills_nor_silences_the_watch(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    script = _nul_script(tools)
    listed = tools / "listed"
    listed.write_text("#!/bin/sh\necho listed-ran\n")
    listed.chmod(0o755)
    spec = commands_spec(write_spec, "/usr/bin", str(tools), read=(tools,))
    result = run_sandbox(spec, DASH, "-c",
                         f"{Q(str(script))}; echo nul=$?; {Q(str(listed))}; "
                         "/usr/sbin/nologin; echo refused=$?; echo end")
    # The kernel runs "/bin/" (a folder: EACCES); the watch passes it over and goes on:
    # a listed program still starts, an unlisted one is still named.
    assert "nul=126" in result.stdout, result
    assert "listed-ran" in result.stdout, result
    assert "refused=126" in result.stdout and "end" in result.stdout, result
    assert (f"lnk-sandbox: refused to run /usr/sbin/nologin: not in [commands] of {spec}"
            in result.stderr), result
    assert "exec watch" not in result.stderr, result


def test_learn_goes_on_past_a_nul_in_a_shebang(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    script = _nul_script(tools)
    spec = write_spec(f"[files]\nread = {toml_list(tools)}\n")
    learned = run_sandbox(spec, DASH, "-c", f"{Q(str(script))}; /usr/bin/id >/dev/null",
                          verb="learn")
    assert learned.returncode == 0, learned
    lines = learned.stdout.splitlines()
    assert any(line.strip().startswith('"/usr/bin/id",') for line in lines), learned
    # The script was recorded too (not offered: it lies in the private /tmp).
    assert f"not offered: {script}: lies in /tmp" in learned.stderr, learned


def test_F2_P1_a_script_in_a_hidden_folder_is_never_read_by_the_watch(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # The folder that holds the hidden one is listed, and the hidden script names an
    # existing, unlisted interpreter: were the watch to read the script past the hide,
    # it would name that interpreter on the sandbox's stderr.
    tools = tmp_path / "tools"
    hidden = tools / "hidden"
    hidden.mkdir(parents=True)
    (tools / "the-hidden-first-line").write_text("")
    script = hidden / "script"
    script.write_bytes(f"#!{tools}/the-hidden-first-line\n".encode())
    script.chmod(0o755)
    spec = write_spec(f"[files]\nread = {toml_list(tools)}\nhide = {toml_list(hidden)}\n"
                      f"[commands]\nrun = {toml_list(DASH, str(tools))}\n")
    result = run_sandbox(spec, DASH, "-c", f"{Q(str(script))}; echo status=$?")
    assert "status=127" in result.stdout, result  # not there, as the kernel says
    assert "the-hidden-first-line" not in result.stdout + result.stderr, result
