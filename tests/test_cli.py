"""The commands from the outside: wrap's line kept and run later, run, check."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    fuzz,
    toml_list,
    wait_until,
)


def _wrap(spec: Path, env: dict[str, str], *command: str, json_form: bool = True) -> str:
    result = subprocess.run(
        [LNK_SANDBOX, "wrap", *(["--json"] if json_form else []), "--spec", str(spec), "--",
         *command],
        env=env, capture_output=True, text=True, check=True,
    )
    return result.stdout


def test_wrap_line_runs_later_from_elsewhere_with_a_minimal_environment(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(f"[files]\nwrite = {toml_list(work)}\n")
    line = json.loads(_wrap(spec, sandbox_env, "sh", "-c", f"echo later > {work}/later; pwd"))
    assert isinstance(line, list) and all(isinstance(word, str) for word in line)
    # The spec is gone by the time the line runs: the line carries the policy.
    spec.unlink()
    minimal = {"PATH": "/usr/bin:/bin", "LNK_HOME": sandbox_env["LNK_HOME"]}
    result = subprocess.run(line, cwd="/", env=minimal, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert (work / "later").read_text() == "later\n"


def test_wrap_shell_form_is_the_same_line(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    as_json = json.loads(_wrap(spec, sandbox_env, "echo", "a b", "$HOME"))
    as_shell = shlex.split(_wrap(spec, sandbox_env, "echo", "a b", "$HOME", json_form=False))
    assert as_json == as_shell
    assert as_json[-3:] == ["echo", "a b", "$HOME"]


def test_wrap_names_no_file_descriptor_and_no_relative_program(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    line = json.loads(_wrap(spec, sandbox_env, "true"))
    assert os.path.isabs(line[0])
    assert not any(word.startswith("--info-fd") or word.startswith("--block-fd") for word in line)


def test_wire_name_must_be_a_plain_name(write_spec: WriteSpec,
                                        sandbox_env: dict[str, str]) -> None:
    spec = write_spec("")
    result = subprocess.run([LNK_SANDBOX, "wrap", "--wire", "../x", "--spec", str(spec), "--",
                             "true"], env=sandbox_env, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 125
    assert "--wire '../x'" in result.stderr


def test_lnk_front_runs_the_sandbox_plugin(write_spec: WriteSpec, sandbox_env: dict[str, str],
                                           tmp_path: Path) -> None:
    lnk = Path(__file__).resolve().parent.parent / "bin" / "lnk"
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    env = dict(sandbox_env)
    env["PATH"] = f"{Path(LNK_SANDBOX).parent}:{env['PATH']}"
    result = subprocess.run([str(lnk), "sandbox", "run", "--spec", str(spec), "--", "echo", "hi"],
                            env=env, capture_output=True, text=True, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hi\n"


def test_command_not_found_is_127_and_not_runnable_is_126(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    missing = run_sandbox(spec, "no-such-program-anywhere")
    assert missing.returncode == 127
    assert "no-such-program-anywhere: not found in the sandbox" in missing.stderr
    denied = run_sandbox(spec, str(plain))
    assert denied.returncode == 126


def test_check_json_has_its_documented_shape(sandbox_env: dict[str, str]) -> None:
    result = subprocess.run([LNK_SANDBOX, "check", "--json"], env=sandbox_env,
                            capture_output=True, text=True, check=False)
    found = json.loads(result.stdout)
    assert set(found) == {"ready", "verdict", "kernel", "architecture", "bubblewrap",
                          "landlock_abi", "seccomp", "memfd_noexec", "protections", "gaps",
                          "placeholders", "home", "network", "model_verb", "secret_verb"}
    assert found["secret_verb"] == {"with_rule": []}
    assert found["placeholders"] == []
    assert found["model_verb"] == {"providers": ["anthropic", "openai", "gemini", "openrouter"],
                                   "keys_set": []}
    assert found["ready"] is True and result.returncode == 0
    assert {gap["gap"] for gap in found["gaps"]} >= {"loader", "LD_PRELOAD"}
    assert all(gap["open"] is True for gap in found["gaps"])
    assert all({"protection", "in_force"} <= set(item) for item in found["protections"])


def test_check_in_words_says_gaps_are_open(sandbox_env: dict[str, str]) -> None:
    result = subprocess.run([LNK_SANDBOX, "check"], env=sandbox_env, capture_output=True,
                            text=True, check=False)
    assert "open  loader" in result.stdout and "open  LD_PRELOAD" in result.stdout
    assert "ready: yes" in result.stdout


def test_missing_bubblewrap_is_one_line_with_the_fix(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, sandbox_env: dict[str, str]
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    env = dict(sandbox_env)
    env["LNK_SANDBOX_BWRAP"] = str(tmp_path / "no-bwrap-here")
    result = run_sandbox(spec, "true", env=env)
    assert result.returncode == 125
    assert result.stderr.count("\n") == 1
    assert "bubblewrap" in result.stderr and "apt-get install bubblewrap" in result.stderr
    assert "Traceback" not in result.stderr


def test_readme_demo_spec_writes_its_workspace_and_refuses_the_rest(
    sandbox_env: dict[str, str]
) -> None:
    examples = Path(__file__).resolve().parent.parent / "examples"
    target = examples / "workspace" / "hello-from-test.txt"
    target.unlink(missing_ok=True)
    try:
        result = subprocess.run(
            [LNK_SANDBOX, "run", "--spec", "demo.toml", "--", "sh", "-c",
             "echo written > workspace/hello-from-test.txt && cat workspace/hello-from-test.txt;"
             " cat ../pyproject.toml; ls secret; cat secret/token"],
            cwd=examples, env=sandbox_env, capture_output=True, text=True, check=False,
        )
        assert result.stdout == "written\n"
        assert "../pyproject.toml: No such file or directory" in result.stderr
        assert "cannot open directory 'secret': Permission denied" in result.stderr
        assert "not for the sandbox" not in result.stdout
        assert target.read_text() == "written\n"
    finally:
        target.unlink(missing_ok=True)


# -- every way a person starts a run: the script bin/setup writes, bin/lnk-sandbox, lnk ----

_BIN = Path(__file__).resolve().parent.parent / "bin"
ENTRIES = {
    "installed": [LNK_SANDBOX],
    "installed-lnk": [str(Path(LNK_SANDBOX).with_name("lnk")), "sandbox"],
    "bin-lnk-sandbox": [str(_BIN / "lnk-sandbox")],
    "bin-lnk": [str(_BIN / "lnk"), "sandbox"],
}
_entries = pytest.mark.parametrize("entry", list(ENTRIES))


def _run_by(entry: str, spec: Path, *command: str, env: dict[str, str],
            cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENTRIES[entry], "run", "--spec", str(spec), "--", *command],
                          env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


@_entries
def test_every_entry_gives_the_program_the_callers_environment(
    entry: str, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """The CLI's interpreter is isolated (-I ignores PYTHON* variables); the program is not:
    it gets the caller's variables, PYTHON* ones included, as the line gives them."""
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    env = {**sandbox_env, "PYTHONPATH": "/nowhere/py", "PYTHONWARNINGS": "error",
           "PYTHONSAFEPATH": "1", "LNK_TEST_VALUE": "a b\tc"}
    result = _run_by(entry, spec, "/bin/sh", "-c",
                     'printf "%s|%s|%s|%s" "$PYTHONPATH" "$PYTHONWARNINGS" "$PYTHONSAFEPATH" '
                     '"$LNK_TEST_VALUE"', env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "/nowhere/py|error|1|a b\tc"


@_entries
def test_every_entry_keeps_the_exit_statuses(
    entry: str, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")

    def run(*command: str) -> subprocess.CompletedProcess[str]:
        return _run_by(entry, spec, *command, env=sandbox_env, cwd=tmp_path)

    assert run("/bin/sh", "-c", "exit 7").returncode == 7
    assert run("/bin/sh", "-c", "kill -TERM $$").returncode == 128 + signal.SIGTERM
    missing = run("no-such-program-anywhere")
    assert missing.returncode == 127
    assert "no-such-program-anywhere: not found in the sandbox" in missing.stderr
    assert run(str(plain)).returncode == 126


@_entries
def test_every_entry_refuses_bad_input_as_before(
    entry: str, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """Each refusal says why in one place, whether or not docopt read the argv."""
    marker = tmp_path / "ran"
    touch = ["/bin/sh", "-c", f"touch {marker}"]
    bad_key = write_spec("[files]\nreed = []\n")
    result = _run_by(entry, bad_key, *touch, env=sandbox_env, cwd=tmp_path)
    assert result.returncode == 125
    assert result.stderr == (
        f"lnk-sandbox: {bad_key}: files.reed: unknown key (known in [files]: read, write, "
        "hide, reopen, write_dot_files, home, read_home); nothing was run\n")
    missing = tmp_path / "no-such-spec.toml"
    result = _run_by(entry, missing, *touch, env=sandbox_env, cwd=tmp_path)
    assert result.returncode == 125
    assert result.stderr == f"lnk-sandbox: {missing}: no such file; nothing was run\n"
    good = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    wire = subprocess.run([*ENTRIES[entry], "run", "--wire", "../x", "--spec", str(good), "--",
                           *touch], env=sandbox_env, cwd=tmp_path, capture_output=True,
                          text=True, check=False)
    assert wire.returncode == 125
    assert wire.stderr == ("lnk-sandbox: --wire '../x': use letters, digits, '.', '_' and "
                           "'-'\n")
    for argv in (["run", "--spec"], ["run", "--spec", str(good)], ["run", "--", "true"],
                 ["run", "--spec", str(good), "--spec", str(good), "--", "true"],
                 ["run", "--spec", str(good), "--bogus", "--", "true"]):
        usage = subprocess.run([*ENTRIES[entry], *argv], env=sandbox_env, cwd=tmp_path,
                               capture_output=True, text=True, check=False)
        assert usage.returncode == 2, argv
        said = usage.stderr.splitlines()
        assert len(said) == 3 and said[0].startswith("lnk-sandbox: "), argv
        assert said[1] == ("usage: lnk-sandbox run --spec=FILE [--wire=NAME] "
                           "[--platform=NAME] [--summary=FILE] [--] COMMAND..."), argv
        assert "unmatched" not in usage.stderr and "Argument(" not in usage.stderr
    assert not marker.exists()


@_entries
def test_every_entry_passes_sigterm_to_the_program(
    entry: str, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    ready, marker = written / "ready", written / "marker"
    spec = write_spec(f"[files]\nwrite = {toml_list(written)}\n")
    script = (f"trap 'echo got-term > {marker}; exit 3' TERM\n: > {ready}\n"
              "while :; do sleep 0.1; done\n")
    process = subprocess.Popen([*ENTRIES[entry], "run", "--spec", str(spec), "--", "/bin/sh",
                                "-c", script], env=sandbox_env, cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # At once: the launcher passes a TERM on from the moment the program may start.
        wait_until(lambda: ready.exists() or process.poll() is not None, "the program")
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        assert marker.read_text() == "got-term\n", stderr
        assert process.returncode == 3, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@_entries
def test_callers_pythonpath_cannot_swap_the_cli_code(
    entry: str, tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """A harness may hand the CLI a PYTHONPATH into a folder a sandbox wrote (a project's
    own). Code there must not run outside: the CLI starts isolated, as the helpers do."""
    planted = tmp_path / "planted"
    marker = tmp_path / "swapped"
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for name in ("lnk_wrap", "lnk_common"):
        (planted / name).mkdir(parents=True)
        (planted / name / "__init__.py").write_text(payload)
    for name in ("docopt", "tomllib", "orjson", "h11"):
        (planted / f"{name}.py").write_text(payload)
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    env = {**sandbox_env, "PYTHONPATH": str(planted), "PYTHONUSERBASE": str(planted)}
    result = _run_by(entry, spec, "/bin/sh", "-c", "echo ran", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "ran\n"
    assert not marker.exists(), marker.read_text()


def test_installed_script_starts_python_isolated_without_site() -> None:
    """bin/setup writes the installed script (lnk_wrap/entry.py): `site` and pip's script
    cost ~20 ms of every run here."""
    first = Path(LNK_SANDBOX).read_text().split("\n", 1)[0]
    python = os.path.realpath(Path(LNK_SANDBOX).with_name("python"))
    assert first == f"#!{python} -IS"


def test_entry_script_refuses_an_interpreter_a_shebang_cannot_carry() -> None:
    from lnk_wrap.entry import EntryError, script

    with pytest.raises(EntryError, match="without spaces"):
        script("/opt/my python/bin/python3", "/r", ["/s"])
    with pytest.raises(EntryError, match="longer than"):
        script("/" + "p" * 260, "/r", ["/s"])
    text = script("/usr/bin/python3.11", "/r'o\"ot", ["/s", "/t"])
    assert "sys.path.insert(0, '/r\\'o\"ot')\nsys.path.extend(['/s', '/t'])\n" in text


def _after_python(line: list[str]) -> list[str]:
    """What a kept line hands its Python after `-I -S` (`_start.py --kept-line …`), past
    the shell's check in front (lnk_wrap.helpers.kept_line)."""
    from lnk_wrap.helpers import KEPT_LINE_SCRIPT, KEPT_LINE_SHELL

    assert line[:4] == [KEPT_LINE_SHELL, "-c", KEPT_LINE_SCRIPT, "lnk-sandbox"]
    assert line[5:7] == ["-I", "-S"]
    return line[7:]


def _imported(argv: list[str], env: dict[str, str], cwd: Path) -> set[str]:
    """Every module `argv` (a Python program) imports, as `-X importtime` lists them."""
    done = subprocess.run([os.path.realpath(sys.executable), "-I", "-S", "-X", "importtime",
                           *argv], env=env, cwd=cwd, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def test_run_imports_nothing_heavy_the_line_does_not(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """What `run` costs beyond the line is what it imports besides: none of docopt-ng
    (8 ms here), tomllib (14 ms), re (6 ms), typing (10 ms) …, for a spec of folders.
    Checked against the line's own imports, so the launcher's are not counted twice."""
    (tmp_path / "workspace").mkdir()
    (tmp_path / "secret").mkdir()
    spec = write_spec(f'name = "n"\n[files]\nread = {toml_list(tmp_path)}\n'
                      f'write = {toml_list(tmp_path / "workspace")}\n'
                      f'hide = {toml_list(tmp_path / "secret")}\n')
    command = ["--", "/bin/true"]
    line = json.loads(_wrap(spec, sandbox_env, *command[1:]))
    by_line = _imported(_after_python(line), sandbox_env, tmp_path)
    # The CLI as the installed script starts it: our folder first, the venv's libraries
    # after the standard library, no `site`.
    start = str(Path(__file__).resolve().parent.parent / "lnk_wrap" / "_start.py")
    libraries = sysconfig.get_path("purelib")
    by_run = _imported([start, "--site-packages", libraries, "cli", "run", "--spec", str(spec),
                        *command], sandbox_env, tmp_path)
    heavy = {"docopt", "tomllib", "re", "typing", "enum", "datetime", "dataclasses", "json",
             "ipaddress", "importlib.util", "string", "pathlib", "site", "orjson"}
    assert "lnk_wrap.spec" in by_run and "lnk_wrap.launch" in by_line
    assert sorted((by_run - by_line) & heavy) == []


_words = st.lists(st.sampled_from(
    ["run", "wrap", "sandbox", "--spec", "--spec=s.toml", "--spec=", "--sp", "--sp=s",
     "--wire", "--wire=w", "--wire=", "--", "-", "-h", "--help", "--version", "--json",
     "s.toml", "w", "ls", "-l", "a b", "--x=", "=", "run=x"]), max_size=9)


@fuzz(15)
@given(_words)
@example(["run", "--spec", "s", "--", "ls", "-l"])
@example(["run", "--wire=w", "--spec=s", "ls"])
@example(["run", "--spec", "s", "ls", "--wire", "w"])
@example(["run", "--spec", "s", "--", "ls", "--", "x"])
@example(["run", "--spec", "s", "--", "--"])
@example(["run", "--spec=s", "--", "-h"])
@example(["run", "--spec", "s", "--", "--spec", "t"])
def test_run_reads_argv_exactly_as_docopt_does(words: list[str]) -> None:
    """The usage text stays the one truth: what run_arguments reads, docopt reads alike;
    the rest goes to docopt (its errors, help, abbreviations)."""
    from docopt import DocoptExit, docopt

    from lnk_wrap import cli

    found = cli.run_arguments(words)
    if found is None:
        return
    try:
        expected = docopt(cli.__doc__, argv=words, version=cli.VERSION)
    except (DocoptExit, SystemExit) as error:
        raise AssertionError(f"read {words} as {found}; docopt: {error}") from None
    assert found == dict(expected)


def test_run_arguments_takes_the_usual_shapes() -> None:
    from lnk_wrap.cli import run_arguments

    for words in (["run", "--spec", "s", "--", "ls", "-l"], ["run", "--spec=s", "ls"],
                  ["run", "--wire", "w", "--spec", "s", "--", "ls"]):
        assert run_arguments(words) is not None, words


@pytest.mark.parametrize("lnk", [str(_BIN / "lnk"), str(Path(LNK_SANDBOX).with_name("lnk"))])
def test_lnk_front_refuses_what_is_no_plugin(lnk: str, sandbox_env: dict[str, str]) -> None:
    for argv, status, says in (([], 2, "usage: lnk PLUGIN"),
                               (["../sandbox"], 2, "lnk: not a plugin name: ../sandbox"),
                               (["no-such-plugin"], 127, "lnk: no plugin 'no-such-plugin'")):
        result = subprocess.run([lnk, *argv], env=sandbox_env, capture_output=True, text=True,
                                check=False)
        assert result.returncode == status, argv
        assert result.stderr.startswith(says), result.stderr


_enter_words = st.lists(st.sampled_from(
    ["enter", "ann", "a b", "--settings", "--settings=/s", "--settings=", "--set=/s", "/s",
     "-", "--", "-h", "--json", "run", "guest"]), max_size=5)


@fuzz(8)
@given(_enter_words)
@example(["enter", "ann", "--settings=/s"])
@example(["enter", "ann", "--settings", "/s"])
@example(["enter", "ann"])
@example(["enter", "--settings=/s", "ann"])
def test_enter_reads_argv_exactly_as_docopt_does(words: list[str]) -> None:
    """A guest's forced command is read without docopt, exactly as docopt reads it."""
    from docopt import DocoptExit, docopt

    from lnk_wrap import cli

    found = cli.enter_arguments(words)
    if found is None:
        return
    try:
        expected = docopt(cli.__doc__, argv=words, version=cli.VERSION)
    except (DocoptExit, SystemExit) as error:
        raise AssertionError(f"read {words} as {found}; docopt: {error}") from None
    assert found == dict(expected)


def test_enter_arguments_take_the_forced_commands_shape() -> None:
    from lnk_wrap.cli import enter_arguments

    for words in (["enter", "ann", "--settings=/s"], ["enter", "ann", "--settings", "/s"],
                  ["enter", "ann"]):
        assert enter_arguments(words) is not None, words


def test_a_verbs_start_imports_nothing_heavy(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """A sandbox with a URL secret ([verbs] open here) starts without `re` or Link's
    secrets' module (10 ms here): they are for a spec that names a secret. Before, every
    such start imported them, some 7 ms over a plain proxy's start."""
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n[verbs]\nopen = true\n")
    line = json.loads(_wrap(spec, sandbox_env, "/bin/true"))
    imported = _imported(_after_python(line), sandbox_env, tmp_path)
    assert "lnk_wrap.verb_env" in imported
    assert sorted(imported & {"re", "lnk_common.secrets", "lnk_proxy.secret_rules", "typing",
                              "json", "orjson"}) == []


def test_a_start_on_a_machine_with_tools_imports_nothing_heavy(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str]
) -> None:
    """Every start takes out the variables tools name (issue 26): with tools defined it
    reads them from the tools' index with `os` alone, no `re`, orjson or Link's secrets'
    module (~16 ms here); an index that does not describe the definitions (removed here)
    is not trusted: the definitions are read, and those imports paid."""
    for name in ("one", "two"):
        subprocess.run([LNK_SANDBOX, "tool", "add", name, "--env", f"{name.upper()}=1", "--",
                        "/bin/true"], env=sandbox_env, check=True, capture_output=True)
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    line = json.loads(_wrap(spec, sandbox_env, "/bin/true"))
    heavy = {"re", "lnk_common.secrets", "lnk_proxy.tools", "orjson", "json", "typing"}
    assert sorted(_imported(_after_python(line), sandbox_env, tmp_path) & heavy) == []
    (Path(sandbox_env["LNK_HOME"]) / "sandbox" / "secrets" / "tools.index").unlink()
    assert "lnk_proxy.tools" in _imported(_after_python(line), sandbox_env, tmp_path)
