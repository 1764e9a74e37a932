"""A HOME of the sandbox's own (issue 28 item 1; lnk_wrap.home): it exists and can be
written in every sandbox, dot files and all, and is never the person's unless the spec
writes theirs. Real sandboxes: a harness's first moves (mkdir ~/.codex, a config file,
~/.bashrc) and what must stay closed (the person's HOME, another wire's)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, RunSandbox, WriteSpec, toml_list

HARNESS = ('mkdir -p "$HOME/.codex" && echo kept > "$HOME/.codex/config.toml" '
           '&& echo "alias x=y" > "$HOME/.bashrc" && echo "HOME=$HOME" '
           '&& echo "XDG=${XDG_CONFIG_HOME:-unset}"')


@pytest.fixture
def person(tmp_path: Path, sandbox_env: dict[str, str]) -> Path:
    """The caller's HOME, with a dot file of theirs, and XDG_CONFIG_HOME inside it."""
    home = tmp_path / "person"
    (home / ".config").mkdir(parents=True)
    (home / ".bashrc").write_text("the person's\n")
    sandbox_env["HOME"] = str(home)
    sandbox_env["XDG_CONFIG_HOME"] = str(home / ".config")
    return home


def _homes(lnk_home: Path) -> Path:
    return lnk_home / "sandbox" / "homes"


def test_a_named_wire_has_a_home_of_its_own_kept_across_its_runs(
    person: Path, lnk_home: Path, tmp_path: Path, write_spec: WriteSpec,
    run_sandbox: RunSandbox,
) -> None:
    spec = write_spec(f'name = "codex"\n[files]\nread = {toml_list(tmp_path / "spec1.toml")}\n')
    first = run_sandbox(spec, "/bin/sh", "-c", HARNESS)
    home = _homes(lnk_home) / "codex"
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"HOME={home}\nXDG=unset\n"
    assert f"lnk-sandbox: HOME is {home}, the wire codex's own (made now" in first.stderr
    assert (home / ".codex" / "config.toml").read_text() == "kept\n"
    assert os.stat(home).st_mode & 0o777 == 0o700
    again = run_sandbox(spec, "/bin/sh", "-c", 'cat "$HOME/.codex/config.toml" "$HOME/.bashrc"')
    assert (again.returncode, again.stdout) == (0, "kept\nalias x=y\n"), again.stderr
    assert "HOME is" not in again.stderr  # said once, when made
    assert (person / ".bashrc").read_text() == "the person's\n"
    assert sorted(os.listdir(person)) == [".bashrc", ".config"]


def test_another_wire_sees_neither_the_home_nor_the_folder_of_homes(
    person: Path, lnk_home: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    one = write_spec('name = "one"\n')
    assert run_sandbox(one, "/bin/sh", "-c", 'echo secret > "$HOME/token"').returncode == 0
    other = write_spec('name = "two"\n')
    homes = _homes(lnk_home)
    found = run_sandbox(other, "/bin/sh", "-c",
                        f"cat {homes}/one/token; ls {homes}; echo \"$HOME\"")
    assert "secret" not in found.stdout
    # Inside, the hidden settings hold only the folders made to mount this one's own.
    assert found.stdout.splitlines() == ["two", str(homes / "two")], found
    assert "No such file or directory" in found.stderr


def test_a_run_of_no_named_wire_has_a_home_that_ends_with_it(
    person: Path, lnk_home: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    spec = write_spec("")
    first = run_sandbox(spec, "/bin/sh", "-c", HARNESS + ' && ls -ld "$HOME" | cut -c1-10')
    assert first.returncode == 0, first.stderr
    assert first.stdout == "HOME=/tmp/home\nXDG=unset\ndrwx------\n"
    again = run_sandbox(spec, "/bin/sh", "-c", 'ls -A "$HOME"')
    assert (again.returncode, again.stdout) == (0, ""), again
    assert not _homes(lnk_home).exists()


def test_a_spec_that_writes_your_home_keeps_it_and_its_dot_files_held_as_any(
    person: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    spec = write_spec(f'name = "mine"\n[files]\nwrite = {toml_list(person)}\n')
    result = run_sandbox(spec, "/bin/sh", "-c",
                         'echo "HOME=$HOME XDG=$XDG_CONFIG_HOME"; mkdir "$HOME/.vscode/x"')
    assert result.stdout == f"HOME={person} XDG={person / '.config'}\n", result
    assert result.returncode != 0 and "Read-only file system" in result.stderr
    assert sorted(os.listdir(person)) == [".bashrc", ".config"]


def test_files_home_names_the_programs_home(
    person: Path, tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    own = tmp_path / "harness-home"
    own.mkdir()
    spec = write_spec(f'[files]\nhome = "{own}"\n')
    result = run_sandbox(spec, "/bin/sh", "-c", HARNESS)
    assert (result.returncode, result.stdout) == (0, f"HOME={own}\nXDG=unset\n"), result
    assert (own / ".bashrc").read_text() == "alias x=y\n"
    listed = subprocess.run([LNK_SANDBOX, "check", "--spec", str(spec)], capture_output=True,
                            text=True, env=os.environ | {"HOME": str(person)}, check=False,
                            timeout=SANDBOX_TIMEOUT_SECONDS)
    assert f"HOME: {own}, the spec's [files] home, written with its dot files" in listed.stdout


@pytest.mark.parametrize(("value", "why"), [
    ("PERSON", "is, or holds, your own HOME, whose dot files run as you"),
    ("PERSON/..", "is, or holds, your own HOME, whose dot files run as you"),
    ("MISSING", "does not exist"),
])
def test_a_files_home_that_is_yours_or_missing_is_refused_and_nothing_runs(
    person: Path, tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
    value: str, why: str,
) -> None:
    named = value.replace("PERSON", str(person)).replace("MISSING", str(tmp_path / "nope"))
    spec = write_spec(f'[files]\nhome = "{named}"\n')
    marker = tmp_path / "ran"
    result = run_sandbox(spec, "/bin/sh", "-c", f"touch {marker}")
    assert result.returncode == 125
    assert result.stderr.startswith(f"lnk-sandbox: {spec}: files.home: ")
    assert why in result.stderr and result.stderr.endswith("; nothing was run\n")
    assert not marker.exists()


def test_an_agents_home_is_its_own_folder(
    person: Path, lnk_home: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    (lnk_home / "agents" / "main").mkdir(parents=True)
    spec = write_spec('[agent]\nname = "main"\n')
    result = run_sandbox(spec, "/bin/sh", "-c", HARNESS)
    own = lnk_home / "agents" / "main"
    assert (result.returncode, result.stdout) == (0, f"HOME={own}\nXDG=unset\n"), result
    assert (own / ".codex" / "config.toml").read_text() == "kept\n"
    assert not _homes(lnk_home).exists()


def test_a_link_where_the_wires_home_goes_is_refused(
    person: Path, lnk_home: Path, tmp_path: Path, write_spec: WriteSpec,
    run_sandbox: RunSandbox,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _homes(lnk_home).mkdir(parents=True)
    (_homes(lnk_home) / "w").symlink_to(elsewhere)
    spec = write_spec('name = "w"\n')
    marker = tmp_path / "ran"
    result = run_sandbox(spec, "/bin/sh", "-c", f"touch {marker}")
    assert result.returncode == 125
    assert result.stderr == (f"lnk-sandbox: the wire w's HOME {_homes(lnk_home) / 'w'} is not "
                             "a folder of yours; refusing (remove it, and Link makes it "
                             "again)\n")
    assert not marker.exists() and os.listdir(elsewhere) == []
