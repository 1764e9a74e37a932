"""The verbs from the outside: wrap's line kept and run later, run, check."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from tests.conftest import LNK_SANDBOX, RunSandbox, WriteSpec, toml_list


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
    assert set(found) == {"ready", "kernel", "bubblewrap", "landlock_abi", "seccomp",
                          "memfd_noexec", "protections", "gaps", "placeholders"}
    assert found["placeholders"] == []
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
