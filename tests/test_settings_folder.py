"""F6 attacked with real sandboxes and the real `lnk-sandbox` verbs: which folder Link's
settings are.

The attack (issue 12, item 2): with `~` written, a link on the way to Link's settings
(GNU stow's `~/.config/lnk -> ../dotfiles/lnk`) is replaced from inside by a folder of
the program's own; afterwards `stop` writes the kill switch where no proxy looks and
runs the program's planted on-stop commands outside, and `log`, `paused`, `resume` and
the next run use the program's folder. Every test here runs the real CLI, as a person
would, with HOME (and LNK_HOME or XDG_CONFIG_HOME where said) pointing into a folder
the test makes.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from lnk_common.settings import settings_folder
from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, RunSandbox, WriteSpec
from tests.test_files_attacks import Q, attack, files_spec, opened

EXIT_SANDBOX_FAILED = 125


def person_env(home: Path, **extra: str) -> dict[str, str]:
    """The person's environment: HOME, and nothing else that names Link's settings."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("LNK_HOME", "XDG_CONFIG_HOME")}
    return {**env, "HOME": str(home), **extra}


def verb(env: dict[str, str], *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, *words], env=env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False, stdin=subprocess.DEVNULL)


def planted_on_stop(folder: Path, marker: Path) -> str:
    """A shell command (run inside) that makes `folder` a settings folder of the
    program's own, with an on-stop command that would run outside at `stop`."""
    entry = json.dumps({"name": "planted", "argv": ["/bin/sh", "-c", f"touch {marker}"]})
    return (f"mkdir -p {Q(str(folder / 'sandbox' / 'on-stop'))} && "
            f"printf %s {Q(entry)} > {Q(str(folder / 'sandbox' / 'on-stop' / 'planted'))}")


def refusal(real: Path, link: Path, written: Path) -> str:
    return (f"lnk-sandbox: Link's settings folder {real} is reached through the link {link} "
            f"in {link.parent}, which this sandbox writes: it could put a folder of its own "
            "there, and stop, log, paused, resume and later runs would take that one; set "
            f"LNK_HOME={real} for every lnk-sandbox command, or do not write {written}\n")


def test_F6_stow_link_to_settings_in_written_home_cannot_be_swapped(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """The issue's attack, end to end: a sandbox writing ~ replaces the stow link, and the
    person's `stop` would then run what it planted. The run is refused instead."""
    home = tmp_path / "home"
    real = home / "dotfiles" / "lnk"
    real.mkdir(parents=True)
    (home / ".config").mkdir()
    (home / ".config" / "lnk").symlink_to("../dotfiles/lnk")
    env = person_env(home)
    marker = tmp_path / "on-stop-ran"
    spec = write_spec(files_spec(write=(home,)))
    link = home / ".config" / "lnk"
    result = run_sandbox(spec, "/bin/sh", "-c",
                         f"rm {Q(str(link))} && {planted_on_stop(link, marker)}", env=env)
    assert (result.returncode, result.stderr) == (EXIT_SANDBOX_FAILED,
                                                  refusal(real, link, home))
    assert os.readlink(link) == "../dotfiles/lnk"
    stopped = verb(env, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert (real / "sandbox" / "stop").is_file()  # where every proxy looks
    assert not marker.exists()
    assert verb(env, "stop", "--clear").returncode == 0
    assert not (real / "sandbox" / "stop").exists()


def _link_at(component: str, home: Path) -> tuple[dict[str, str], Path, Path]:
    """(the person's environment, the link, the real settings folder) with a link at
    `component` of the way to Link's settings, all inside `home`."""
    if component == "LNK_HOME":
        (home / "real-lnk").mkdir(parents=True)
        (home / "lnk-link").symlink_to("real-lnk")
        return (person_env(home, LNK_HOME=str(home / "lnk-link")), home / "lnk-link",
                home / "real-lnk")
    if component == "XDG_CONFIG_HOME":
        (home / "dotconfig" / "lnk").mkdir(parents=True)
        (home / "xdg").symlink_to("dotconfig")
        return (person_env(home, XDG_CONFIG_HOME=str(home / "xdg")), home / "xdg",
                home / "dotconfig" / "lnk")
    if component == "~/.config":
        (home / "dotfiles" / "config" / "lnk").mkdir(parents=True)
        (home / ".config").symlink_to("dotfiles/config")
        return person_env(home), home / ".config", home / "dotfiles" / "config" / "lnk"
    (home / "dotfiles" / "lnk").mkdir(parents=True)
    (home / ".config").mkdir()
    (home / ".config" / "lnk").symlink_to("../dotfiles/lnk")
    return person_env(home), home / ".config" / "lnk", home / "dotfiles" / "lnk"


COMPONENTS = ("LNK_HOME", "XDG_CONFIG_HOME", "~/.config", "~/.config/lnk")


@pytest.mark.parametrize("component", COMPONENTS)
def test_F6_link_on_the_way_to_settings_in_written_folder_refuses_the_run(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, component: str,
) -> None:
    home = tmp_path / "home"
    env, link, real = _link_at(component, home)
    marker = home / "ran"
    spec = write_spec(files_spec(write=(home,)))
    result = run_sandbox(spec, "/bin/sh", "-c",
                         f"touch {Q(str(marker))}; rm {Q(str(link))} && mkdir {Q(str(link))}",
                         env=env)
    assert (result.returncode, result.stderr) == (EXIT_SANDBOX_FAILED,
                                                  refusal(real, link, home))
    assert not marker.exists() and link.is_symlink()
    # The line wrapped earlier and kept by a harness is refused the same way.
    line = json.loads(verb(env, "wrap", "--json", "--spec", str(spec), "--", "true").stdout)
    kept = subprocess.run(line, env=env, capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert (kept.returncode, kept.stderr) == (EXIT_SANDBOX_FAILED, refusal(real, link, home))
    # The fix the line names works: the real path has no link on the way.
    # (git's own settings, ${XDG_CONFIG_HOME:-~/.config}/git/config, are named elsewhere
    # here: a link git follows in a written folder is refused for git's sake, F4.)
    fixed = {**env, "LNK_HOME": str(real), "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig")}
    assert run_sandbox(spec, "/bin/sh", "-c", f"touch {Q(str(marker))}",
                       env=fixed).returncode == 0
    assert marker.exists()
    assert settings_folder(env).root == str(real)  # what every verb takes


@pytest.mark.parametrize("component", COMPONENTS)
def test_F6_link_on_the_way_to_settings_outside_written_folders_is_fine(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, component: str,
) -> None:
    home = tmp_path / "home"
    env, link, real = _link_at(component, home)
    (real / "token.txt").write_text("secret")
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(files_spec(write=(work,), read=(home,)))
    found = attack(run_sandbox, spec, {
        "write in work": f"touch {Q(str(work / 'made'))}",
        "read through the link": f"cat {Q(str(link))}/token.txt",
        "read the real folder": f"cat {Q(str(real))}/token.txt",
        "replace the link": f"rm {Q(str(link))}",
    }, env=env)
    assert opened(found) == ["write in work"]
    assert verb(env, "stop").returncode == 0
    assert (real / "sandbox" / "stop").is_file()


def _plant_controls(settings: Path) -> None:
    """A paused wire and a log line in the person's real settings folder."""
    wire = settings / "sandbox" / "wires" / "w1"
    wire.mkdir(parents=True)
    (wire / "paused").write_text(json.dumps({"wire": "w1", "since": "2026-01-01T00:00:00Z",
                                             "reason": "the real one"}))
    (wire / "log").write_text("2026-01-01T00:00:00Z\trefused\treal.example:443\treason=x\n")


@pytest.mark.parametrize("layout", ["home", "nested"])
def test_F6_sandbox_writing_home_cannot_move_the_verbs_to_another_folder(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, layout: str,
) -> None:
    """No link anywhere: every folder on the way is real. A sandbox writing ~ tries
    every way to put a folder of its own where the verbs look; the real stop, log,
    paused and resume then still take the person's folder. `nested`: the settings folder
    lies in a second written folder inside the first, so the folders between the two
    could be renamed, mount points below them and all, unless they are pinned."""
    home = tmp_path / "home"
    if layout == "home":
        settings = home / ".config" / "lnk"
        env = person_env(home)
        written: tuple[Path, ...] = (home,)
    else:
        settings = home / "a" / "w" / "lnk"
        env = person_env(home, LNK_HOME=str(settings))
        written = (home, home / "a" / "w")
    settings.mkdir(parents=True)
    _plant_controls(settings)
    marker = tmp_path / "on-stop-ran"
    decoy = planted_on_stop(settings, marker)
    s, parent, grand = Q(str(settings)), Q(str(settings.parent)), Q(str(settings.parent.parent))
    spec = write_spec(files_spec(write=written))
    found = attack(run_sandbox, spec, {
        "rename the folder": f"mv {s} {Q(str(home / 'moved'))} && {decoy}",
        "remove the folder": f"rm -rf {s}; rmdir {s} && {decoy}",
        "rename its parent": f"mv {parent} {Q(str(home / 'moved-parent'))} && {decoy}",
        "rename its grandparent": f"mv {grand} {Q(str(home / 'moved-grand'))} && {decoy}",
        "link in its place": f"rm -rf {parent} && ln -s {Q(str(tmp_path))} {parent}",
    }, env=env)
    assert opened(found) == []
    assert verb(env, "stop").returncode == 0
    assert (settings / "sandbox" / "stop").is_file()
    assert not marker.exists()
    paused = verb(env, "paused", "--json")
    assert json.loads(paused.stdout)["paused"][0]["reason"] == "the real one"
    log = verb(env, "log", "w1")
    assert "real.example:443" in log.stdout, log.stderr
    assert verb(env, "resume", "w1").returncode == 0
    assert not (settings / "sandbox" / "wires" / "w1" / "paused").exists()


def test_F6_locate_follows_links_and_names_each(tmp_path: Path) -> None:
    """The one function every verb and helper uses: the real folder, and every link met
    on the way (what the launcher judges), relative and absolute targets alike."""
    from lnk_common.settings import locate

    (tmp_path / "real" / "lnk").mkdir(parents=True)
    (tmp_path / "a").symlink_to(str(tmp_path / "real"))
    (tmp_path / "b").symlink_to("a/../real/lnk")
    found = locate(str(tmp_path / "b" / "not-yet"))
    assert found.root == str(tmp_path / "real" / "lnk" / "not-yet")
    assert found.named == str(tmp_path / "b" / "not-yet")
    assert found.links == (str(tmp_path / "b"), str(tmp_path / "a"))
    plain = locate(str(tmp_path / "real" / "lnk"))
    assert (plain.root, plain.links) == (str(tmp_path / "real" / "lnk"), ())


def test_F6_a_kept_line_whose_settings_path_now_leads_elsewhere_is_refused(
    tmp_path: Path, write_spec: WriteSpec,
) -> None:
    """A harness keeps the line; the link on the way (outside every written folder) is
    pointed at another folder since: the proxies would watch one folder and the verbs
    write another, so the line is refused until wrapped again."""
    home = tmp_path / "home"
    env, link, real = _link_at("~/.config/lnk", home)
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(files_spec(write=(work,)))
    line = json.loads(verb(env, "wrap", "--json", "--spec", str(spec), "--", "true").stdout)
    assert line[line.index("--settings") + 1] == str(real)
    assert line[line.index("--settings-via") + 1] == str(link)
    elsewhere = home / "elsewhere"
    elsewhere.mkdir()
    link.unlink()
    link.symlink_to(elsewhere)
    kept = subprocess.run(line, env=env, capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert (kept.returncode, kept.stderr) == (
        EXIT_SANDBOX_FAILED,
        f"lnk-sandbox: Link's settings folder {link} now leads to {elsewhere}, not to {real} "
        "as when the command line was made (a link on the way changed); wrap the command "
        "again\n")
