"""Attacks from inside a real sandbox on the file (F) and process (P) invariants.

Every test here starts the real `lnk-sandbox` (real bubblewrap, real kernel, real
Landlock) and tries, as a program inside would, to get past what it was given:
reading beside a grant, writing into a read grant, following planted links, walking
`..`, hard-linking, renaming, reaching Link's settings folder, the host's processes,
its sysctls. The invariant attacked is in each test's name (docs/facts/invariants.md).

Most tests send one shell script of named attempts; each attempt prints OPEN:name when
the command succeeded and SHUT:name when it failed, so a failure names the way in.
Nothing here needs root, and nothing here may change the host: sysctls are only ever
written with the value they already hold, and the host is read back after.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    RunSandbox,
    WriteSpec,
    toml_list,
    wait_until,
)

ROOT = Path(__file__).resolve().parent.parent
EXIT_SANDBOX_FAILED = 125

Q = shlex.quote


# -- helpers ------------------------------------------------------------------------------


def files_spec(
    *,
    read: tuple[Path, ...] = (),
    write: tuple[Path, ...] = (),
    hide: tuple[Path, ...] = (),
    reopen: tuple[Path, ...] = (),
    extra: str = "",
) -> str:
    lines = ["[files]"]
    for key, paths in (("read", read), ("write", write), ("hide", hide), ("reopen", reopen)):
        if paths:
            lines.append(f"{key} = {toml_list(*paths)}")
    return "\n".join(lines) + "\n" + extra


def attempts_script(attempts: dict[str, str]) -> str:
    lines = []
    for name, command in attempts.items():
        lines.append(
            f"if ( {command} ) >/dev/null 2>&1; then echo {Q('OPEN:' + name)}; "
            f"else echo {Q('SHUT:' + name)}; fi"
        )
    return "\n".join(lines) + "\n"


def parse_outcomes(stdout: str) -> dict[str, bool]:
    found: dict[str, bool] = {}
    for line in stdout.splitlines():
        state, sep, name = line.partition(":")
        if sep and state in ("OPEN", "SHUT"):
            found[name] = state == "OPEN"
    return found


def attack(
    run_sandbox: RunSandbox,
    spec: Path,
    attempts: dict[str, str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, bool]:
    """Run the named attempts in one sandbox; name → True when the attempt succeeded."""
    result = run_sandbox(spec, "/bin/sh", "-c", attempts_script(attempts), env=env, cwd=cwd)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    found = parse_outcomes(result.stdout)
    assert set(found) == set(attempts), (result.stdout, result.stderr)
    return found


def opened(found: dict[str, bool]) -> list[str]:
    return sorted(name for name, success in found.items() if success)


def python_errnos(
    run_sandbox: RunSandbox, spec: Path, operations: dict[str, str], *,
    env: dict[str, str] | None = None,
) -> dict[str, str]:
    """Run each Python statement inside; name → the errno's name, or OK."""
    code = ["import errno, os"]
    for name, operation in operations.items():
        code += [
            "try:",
            f"    {operation}",
            "except OSError as error:",
            f"    print({name!r}, errno.errorcode.get(error.errno, str(error.errno)))",
            "else:",
            f"    print({name!r}, 'OK')",
        ]
    result = run_sandbox(spec, "/usr/bin/python3", "-I", "-c", "\n".join(code), env=env)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    found = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert set(found) == set(operations), (result.stdout, result.stderr)
    return found


def make_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def tree(folder: Path) -> dict[str, str]:
    """Every file below `folder` (relative path → content; folders as '<dir>')."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = "<dir>" if path.is_dir() and not path.is_symlink() else (
            f"<link {os.readlink(path)}>" if path.is_symlink() else path.read_text()
        )
    return found


# What the launcher itself keeps in Link's settings (runs, the dot files' stand-ins, specs seen).
_BOOKKEEPING = ("sandbox/runs", "sandbox/placeholders", "sandbox/specs-seen")


def settings_tree(folder: Path) -> dict[str, str]:
    """tree() of Link's settings folder without the launcher's own bookkeeping."""
    return {key: value for key, value in tree(folder).items()
            if key != "sandbox" or (folder / "sandbox").is_symlink()
            if not any(key == own or key.startswith(own + "/") for own in _BOOKKEEPING)}


def secret_text(label: str) -> str:
    return f"lnk-secret-{label}-{uuid.uuid4().hex}"


# -- F1: nothing outside read/write is readable; nothing outside write is writable --------


def test_F1_sibling_of_granted_folder_unreadable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    granted = tmp_path / "projects" / "granted"
    sibling = tmp_path / "projects" / "sibling"
    make_file(granted / "ok.txt", "fine")
    secret = make_file(sibling / "secret.txt", secret_text("sibling"))
    spec = write_spec(files_spec(read=(granted,)))
    found = attack(run_sandbox, spec, {
        "read-granted": f"cat {Q(str(granted / 'ok.txt'))}",
        "list-sibling": f"ls {Q(str(sibling))}",
        "read-sibling": f"cat {Q(str(secret))}",
        "read-via-dotdot": f"cat {Q(str(granted))}/../sibling/secret.txt",
        "read-via-proc-root": f"cat /proc/self/root{Q(str(secret))}",
        "python-read-sibling": f"/usr/bin/python3 -I -c 'open({str(secret)!r}).read()'",
    })
    assert opened(found) == ["read-granted"]


def test_F1_home_root_work_and_checkout_unreadable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    granted = tmp_path / "granted"
    granted.mkdir()
    home = os.environ.get("HOME", "/root")
    checkout_file = ROOT / "pyproject.toml"
    assert checkout_file.is_file()  # readable outside: the sandbox is what refuses it
    spec = write_spec(files_spec(read=(granted,)))
    found = attack(run_sandbox, spec, {
        "list-home": f"ls -a {Q(home)}",
        "read-home-profile": f"cat {Q(home)}/.profile",
        "list-root": "ls -a /root",
        "read-root-bashrc": "cat /root/.bashrc",
        "list-work": "ls /work",
        "read-work-design": "cat /work/shared/design/INVARIANTS.md",
        "list-checkout": f"ls {Q(str(ROOT))}",
        "read-checkout": f"cat {Q(str(checkout_file))}",
        "read-checkout-venv": f"cat {Q(str(ROOT / '.venv' / 'pyvenv.cfg'))}",
        # Bound read-only for the init itself; Landlock closes them to the program.
        "read-own-package": f"cat {Q(str(ROOT / 'lnk_wrap' / 'launch.py'))}",
        "list-own-package": f"ls {Q(str(ROOT / 'lnk_common'))}",
        "read-checkout-via-pid1-root": f"cat /proc/1/root{Q(str(checkout_file))}",
        "list-sandbox-root": "ls /",
    })
    assert opened(found) == []


def test_F1_write_in_read_grant_refused(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    folder = tmp_path / "readonly"
    make_file(folder / "existing.txt", "original")
    (folder / "sub").mkdir()
    before = tree(folder)
    spec = write_spec(files_spec(read=(folder,)))
    f = Q(str(folder))
    found = attack(run_sandbox, spec, {
        "read": f"cat {f}/existing.txt",
        "create": f"echo pwned > {f}/new.txt",
        "append": f"echo pwned >> {f}/existing.txt",
        "truncate": f": > {f}/existing.txt",
        "touch": f"touch {f}/existing.txt",
        "mkdir": f"mkdir {f}/newdir",
        "rm": f"rm {f}/existing.txt",
        "rmdir": f"rmdir {f}/sub",
        "rename": f"mv {f}/existing.txt {f}/renamed.txt",
        "chmod": f"chmod 0777 {f}/existing.txt",
        "symlink": f"ln -s /etc/passwd {f}/link",
        "fifo": f"mkfifo {f}/fifo",
    })
    assert opened(found) == ["read"]
    errnos = python_errnos(run_sandbox, spec, {
        "create": f"os.open({str(folder / 'py.txt')!r}, os.O_WRONLY | os.O_CREAT, 0o644)",
        "write": f"os.open({str(folder / 'existing.txt')!r}, os.O_WRONLY)",
    })
    assert set(errnos.values()) <= {"EROFS", "EACCES"}, errnos
    assert tree(folder) == before


def test_F1_write_outside_everything_refused(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    granted = tmp_path / "granted"
    granted.mkdir()
    unlisted = tmp_path / "unlisted"
    make_file(unlisted / "existing.txt", "original")
    home = os.environ.get("HOME", "/root")
    name = f"lnk-attack-{uuid.uuid4().hex}"
    targets = [f"/usr/{name}", f"/etc/{name}", f"/{name}", f"/var/{name}",
               f"{home}/{name}", str(ROOT / name), str(ROOT / "lnk_wrap" / name)]
    spec = write_spec(files_spec(read=(granted,)))
    attempts = {f"create {target}": f"echo pwned > {Q(target)}" for target in targets}
    attempts.update({
        "mkdir /opt": f"mkdir /opt/{name}",
        "append unlisted": f"echo pwned >> {Q(str(unlisted / 'existing.txt'))}",
        "overwrite own package": f"echo pwned >> {Q(str(ROOT / 'lnk_wrap' / 'init.py'))}",
        "write granted(read)": f"echo pwned > {Q(str(granted / name))}",
    })
    # Under /tmp the sandbox has its own empty /tmp: making the unlisted folder there
    # may work, but it must never reach the host's.
    recreate = f"mkdir -p {Q(str(unlisted))} && echo pwned > {Q(str(unlisted / name))}"
    try:
        found = attack(run_sandbox, spec, {**attempts, "recreate unlisted in /tmp": recreate})
        assert opened({k: v for k, v in found.items() if k in attempts}) == []
        for target in targets:
            assert not os.path.lexists(target), target
        assert (unlisted / "existing.txt").read_text() == "original"
        assert sorted(os.listdir(unlisted)) == ["existing.txt"]
        assert "pwned" not in (ROOT / "lnk_wrap" / "init.py").read_text()
    finally:
        for target in targets:
            if os.path.isfile(target):
                os.unlink(target)


def test_F1_read_only_grant_nested_in_write_grant_stays_read_only(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    make_file(inner / "kept.txt", "original")
    (inner / "sub").mkdir()
    before = tree(inner)
    spec = write_spec(files_spec(write=(outer,), read=(inner,)))
    o, i = Q(str(outer)), Q(str(inner))
    found = attack(run_sandbox, spec, {
        "write outer": f"echo ok > {o}/outer-new.txt",
        "read inner": f"cat {i}/kept.txt",
        "create in inner": f"echo pwned > {i}/new.txt",
        "append in inner": f"echo pwned >> {i}/kept.txt",
        "rm in inner": f"rm {i}/kept.txt",
        "rmdir in inner": f"rmdir {i}/sub",
        "move file out of inner": f"mv {i}/kept.txt {o}/stolen.txt",
        "rename inner": f"mv {i} {o}/inner-moved",
        "remove inner": f"rm -rf {i}",
        "chmod inner": f"chmod 0777 {i}",
        "chmod file in inner": f"chmod 0777 {i}/kept.txt",
        "replace inner by symlink": f"mv {i} {o}/x && ln -s /tmp {i}",
    })
    assert opened(found) == ["read inner", "write outer"]
    assert (outer / "outer-new.txt").read_text() == "ok\n"
    assert tree(inner) == before
    # A copy of what the program may read is no escape; the original must stay put.
    assert not (outer / "inner-moved").exists()
    assert not (outer / "x").exists()


def test_F1_write_grant_nested_in_read_grant_is_writable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    outer = tmp_path / "outer"
    inner = outer / "inner"
    make_file(outer / "kept.txt", "original")
    inner.mkdir(parents=True)
    spec = write_spec(files_spec(read=(outer,), write=(inner,)))
    o, i = Q(str(outer)), Q(str(inner))
    found = attack(run_sandbox, spec, {
        "read outer": f"cat {o}/kept.txt",
        "write inner": f"echo made-inside > {i}/new.txt",
        "mkdir inner": f"mkdir {i}/dir",
        "write outer": f"echo pwned > {o}/new.txt",
        "append outer": f"echo pwned >> {o}/kept.txt",
    })
    assert opened(found) == ["mkdir inner", "read outer", "write inner"]
    assert (inner / "new.txt").read_text() == "made-inside\n"
    assert (inner / "dir").is_dir()
    assert not (outer / "new.txt").exists()
    assert (outer / "kept.txt").read_text() == "original"


def test_F1_private_tmp_hides_host_tmp_and_is_discarded(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    granted = tmp_path / "granted"
    granted.mkdir()
    token = uuid.uuid4().hex
    outside = Path(f"/tmp/lnk-outside-{token}")
    inside = Path(f"/tmp/lnk-inside-{token}")
    outside.write_text(secret_text("host-tmp"))
    spec = write_spec(files_spec(read=(granted,)))
    try:
        script = (
            f"ls -a /tmp; echo ---; cat {Q(str(outside))}; echo cat=$?; "
            f"echo made-inside > {Q(str(inside))} && echo write=ok; cat {Q(str(inside))}"
        )
        result = run_sandbox(spec, "/bin/sh", "-c", script)
        assert result.returncode == 0, result.stderr
        listing, _, rest = result.stdout.partition("---\n")
        assert outside.name not in listing
        assert "cat=0" not in rest
        assert "write=ok" in rest  # the sandbox's own /tmp is writable …
        assert "made-inside" in rest
        assert not inside.exists()  # … and gone afterwards, never the host's
    finally:
        outside.unlink()
        if inside.exists():
            inside.unlink()


# -- F2: a hidden folder stays closed, but for what is reopened in it ----------------------


def _hidden_folder_attempts(hidden: Path) -> dict[str, str]:
    h = Q(str(hidden))
    return {
        "list": f"ls {h}",
        "python-listdir": f"/usr/bin/python3 -I -c 'import os; os.listdir({str(hidden)!r})'",
        "read file": f"cat {h}/secret.txt",
        "read file in subfolder": f"cat {h}/sub/inner.txt",
        "list subfolder": f"ls {h}/sub",
        "create file": f"echo pwned > {h}/new.txt",
        "mkdir": f"mkdir {h}/newdir",
        "chmod": f"chmod 0777 {h}",
        "rmdir": f"rmdir {h}",
        "rename": f"mv {h} {h}.moved",
        "remove tree": f"rm -rf {h}",
    }


def _make_hidden_folder(hidden: Path, label: str) -> dict[str, str]:
    make_file(hidden / "secret.txt", secret_text(label))
    make_file(hidden / "sub" / "inner.txt", secret_text(label + "-inner"))
    return tree(hidden)


def test_F2_hidden_folder_closed_under_read_parent(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    parent = tmp_path / "parent"
    hidden = parent / "hidden"
    make_file(parent / "visible.txt", "visible")
    before = _make_hidden_folder(hidden, "read-parent")
    spec = write_spec(files_spec(read=(parent,), hide=(hidden,)))
    found = attack(run_sandbox, spec, {
        "read visible sibling": f"cat {Q(str(parent / 'visible.txt'))}",
        **_hidden_folder_attempts(hidden),
    })
    assert opened(found) == ["read visible sibling"]
    assert tree(hidden) == before
    assert not (parent / "hidden.moved").exists()


def test_F2_hidden_folder_closed_under_write_grandparent(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    grandparent = tmp_path / "grandparent"
    parent = grandparent / "parent"
    hidden = parent / "hidden"
    before = _make_hidden_folder(hidden, "write-grandparent")
    spec = write_spec(files_spec(write=(grandparent,), hide=(hidden,)))
    found = attack(run_sandbox, spec, {
        "write grandparent": f"echo ok > {Q(str(grandparent / 'new.txt'))}",
        "write parent": f"echo ok > {Q(str(parent / 'new.txt'))}",
        **_hidden_folder_attempts(hidden),
        "remove parent tree": f"rm -rf {Q(str(parent))}",
    })
    assert opened(found) == ["write grandparent", "write parent"]
    assert tree(hidden) == before
    assert not (parent / "hidden.moved").exists()


def test_F2_reopened_in_hidden_folder_under_read_is_readable_not_writable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    parent = tmp_path / "parent"
    hidden = parent / "hidden"
    reopened = hidden / "open"
    _make_hidden_folder(hidden, "reopen-read")
    make_file(reopened / "shared.txt", "shared")
    spec = write_spec(files_spec(read=(parent,), hide=(hidden,), reopen=(reopened,)))
    r = Q(str(reopened))
    found = attack(run_sandbox, spec, {
        "read reopened": f"cat {r}/shared.txt",
        "list reopened": f"ls {r}",
        "write reopened": f"echo pwned > {r}/new.txt",
        "append reopened": f"echo pwned >> {r}/shared.txt",
        "list hidden": f"ls {Q(str(hidden))}",
        "read hidden file": f"cat {Q(str(hidden / 'secret.txt'))}",
        "walk from reopened": f"cat {r}/../secret.txt",
    })
    assert opened(found) == ["list reopened", "read reopened"]
    assert sorted(os.listdir(reopened)) == ["shared.txt"]
    assert (reopened / "shared.txt").read_text() == "shared"


def test_F2_reopened_in_hidden_folder_under_write_is_writable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    grandparent = tmp_path / "grandparent"
    hidden = grandparent / "parent" / "hidden"
    reopened = hidden / "open"
    _make_hidden_folder(hidden, "reopen-write")
    make_file(reopened / "shared.txt", "shared")
    before = tree(hidden)
    spec = write_spec(files_spec(write=(grandparent,), hide=(hidden,), reopen=(reopened,)))
    r = Q(str(reopened))
    found = attack(run_sandbox, spec, {
        "read reopened": f"cat {r}/shared.txt",
        "write reopened": f"echo made-inside > {r}/new.txt",
        "list hidden": f"ls {Q(str(hidden))}",
        "read hidden file": f"cat {Q(str(hidden / 'secret.txt'))}",
        "write hidden": f"echo pwned > {Q(str(hidden / 'new.txt'))}",
        "walk from reopened": f"cat {r}/../secret.txt",
        "rename reopened": f"mv {r} {Q(str(hidden / 'moved'))}",
    })
    assert opened(found) == ["read reopened", "write reopened"]
    assert (reopened / "new.txt").read_text() == "made-inside\n"
    before["open/new.txt"] = "made-inside\n"
    assert tree(hidden) == before


def test_F2_hidden_single_file_unreadable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    readable = tmp_path / "readable"
    written = tmp_path / "written"
    text_r = secret_text("file-read")
    text_w = secret_text("file-write")
    hidden_r = make_file(readable / "secret.txt", text_r)
    hidden_w = make_file(written / "secret.txt", text_w)
    make_file(readable / "visible.txt", "visible")
    spec = write_spec(files_spec(read=(readable,), write=(written,), hide=(hidden_r, hidden_w)))
    hr, hw, w = Q(str(hidden_r)), Q(str(hidden_w)), Q(str(written))
    found = attack(run_sandbox, spec, {
        "read visible": f"cat {Q(str(readable / 'visible.txt'))}",
        "read hidden (read grant)": f"cat {hr}",
        "read hidden (write grant)": f"cat {hw}",
        "python read hidden": f"/usr/bin/python3 -I -c 'open({str(hidden_w)!r}).read()'",
        "overwrite hidden": f"echo pwned > {hw}",
        "append hidden": f"echo pwned >> {hw}",
        "remove hidden": f"rm {hw}",
        "rename hidden": f"mv {hw} {w}/moved.txt",
        "chmod hidden": f"chmod 0777 {hw}",
        "hard link hidden": f"ln {hw} {w}/hard.txt",
        "copy hidden": f"cp {hw} {w}/copy.txt",
    })
    assert opened(found) == ["read visible"]
    assert hidden_r.read_text() == text_r
    assert hidden_w.read_text() == text_w
    assert sorted(os.listdir(written)) == ["secret.txt"]


@pytest.mark.parametrize("parent_granted", [False, True], ids=["alone", "settings-parent-read"])
def test_F2_agent_sees_only_its_own_folder(
    tmp_path: Path, lnk_home: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    parent_granted: bool,
) -> None:
    agents = lnk_home / "agents"
    own = agents / "main"
    make_file(own / "own.txt", "mine")
    other_text = secret_text("other-agent")
    make_file(agents / "other" / "secret.txt", other_text)
    extra = f"[files]\nread = {toml_list(tmp_path)}\n" if parent_granted else ""
    spec = write_spec(f'[agent]\nname = "main"\n{extra}')
    later = agents / "later"
    later_text = secret_text("later-agent")
    attempts = {
        "read own": f"cat {Q(str(own / 'own.txt'))}",
        "write own": f"echo made-inside > {Q(str(own / 'new.txt'))}",
        "list other": f"ls {Q(str(agents / 'other'))}",
        "read other": f"cat {Q(str(agents / 'other' / 'secret.txt'))}",
        "list later": f"ls {Q(str(later))}",
        "read later": f"cat {Q(str(later / 'secret.txt'))}",
        "write other": f"echo pwned > {Q(str(agents / 'other' / 'new.txt'))}",
        "write later": f"echo pwned > {Q(str(later / 'new.txt'))}",
    }
    script = f"echo LIST:$(ls -a {Q(str(agents))} 2>&1)\n" + attempts_script(attempts)
    wrapped = subprocess.run(
        [LNK_SANDBOX, "wrap", "--json", "--spec", str(spec), "--", "/bin/sh", "-c", script],
        env=sandbox_env, cwd=str(tmp_path), capture_output=True, text=True, check=False,
        timeout=SANDBOX_TIMEOUT_SECONDS,
    )
    assert wrapped.returncode == 0, wrapped.stderr
    line = json.loads(wrapped.stdout)
    # An agent made after the spec was read and the line kept.
    make_file(later / "secret.txt", later_text)
    result = subprocess.run(line, env=sandbox_env, cwd=str(tmp_path), capture_output=True,
                            text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert result.returncode == 0, (result.stdout, result.stderr)
    found = parse_outcomes(result.stdout)
    assert set(found) == set(attempts), result.stdout
    assert opened(found) == ["read own", "write own"]
    listing = next(x for x in result.stdout.splitlines() if x.startswith("LIST:"))
    assert "other" not in listing
    assert "later" not in listing
    assert other_text not in result.stdout
    assert later_text not in result.stdout
    assert (own / "new.txt").read_text() == "made-inside\n"
    assert sorted(os.listdir(agents / "other")) == ["secret.txt"]
    assert sorted(os.listdir(later)) == ["secret.txt"]


def test_F2_hidden_path_missing_at_start_inside_a_grant_is_refused(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    run_sandbox: RunSandbox,
) -> None:
    # Made while the program runs (by the person, or another sandbox that writes the
    # folder), a hidden path that was missing at start would not be hidden: refuse.
    readable = tmp_path / "readable"
    readable.mkdir()
    hidden = readable / "made-later"
    marker = tmp_path / "ran"
    spec = write_spec(files_spec(read=(readable,), hide=(hidden,)))
    result = run_sandbox(spec, "/bin/sh", "-c", f": > {Q(str(marker))}")
    assert result.returncode == 125
    assert f"hidden path {hidden} does not exist" in result.stderr
    assert not marker.exists()


# -- F3: no link, rename, hard link, bind or `..` walks out --------------------------------


@pytest.mark.parametrize("target_kind", ["hidden-folder", "unlisted-folder", "etc-shadow"])
def test_F3_planted_symlink_not_followed(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, target_kind: str
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    readable = tmp_path / "readable"
    hidden = readable / "hidden"
    text = secret_text(target_kind)
    if target_kind == "hidden-folder":
        make_file(hidden / "secret.txt", text)
        target_dir: Path = hidden
        target = hidden / "secret.txt"
    elif target_kind == "unlisted-folder":
        target_dir = tmp_path / "unlisted"
        target = make_file(target_dir / "secret.txt", text)
    else:
        target_dir = Path("/etc")
        target = Path("/etc/shadow")
    hidden.mkdir(parents=True, exist_ok=True)
    spec = write_spec(files_spec(read=(readable,), write=(written,), hide=(hidden,)))
    (written / "planted").symlink_to(target)
    (written / "planted-dir").symlink_to(target_dir)
    w = Q(str(written))
    found = attack(run_sandbox, spec, {
        "follow planted": f"cat {w}/planted",
        "follow planted folder": f"cat {w}/planted-dir/{Q(target.name)}",
        "follow link made inside": f"ln -s {Q(str(target))} {w}/made && cat {w}/made",
        "copy through link": f"cp {w}/planted {w}/copy && test -s {w}/copy",
        "python follow": f"/usr/bin/python3 -I -c 'open({str(written / 'planted')!r}).read()'",
        "direct": f"cat {Q(str(target))}",
    })
    assert opened(found) == []
    copy = written / "copy"
    if copy.exists():
        assert copy.read_text() == "", "the link's target reached the written folder"
    if target_kind != "etc-shadow":
        assert target.read_text() == text


def test_F3_dotdot_walk_out_of_written_folder_fails(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    secret = make_file(tmp_path / "unlisted" / "secret.txt", secret_text("dotdot"))
    spec = write_spec(files_spec(write=(written,)))
    w = Q(str(written))
    depth = len(written.parts) - 1
    found = attack(run_sandbox, spec, {
        "cat W/../unlisted": f"cat {w}/../unlisted/secret.txt",
        "cd .. then cat": f"cd {w}/.. && cat unlisted/secret.txt",
        "many ..": f"cd {w} && cat {'../' * depth}{Q(str(secret).lstrip('/'))}",
        "proc cwd walk": f"cd {w} && cat /proc/self/cwd/../unlisted/secret.txt",
        "openat from W fd": (
            f"/usr/bin/python3 -I -c 'import os; d = os.open({str(written)!r}, os.O_RDONLY); "
            "os.read(os.open(\"../unlisted/secret.txt\", os.O_RDONLY, dir_fd=d), 100)'"
        ),
    })
    assert opened(found) == []
    # The parent seen inside is the sandbox's own /tmp: it must not show the host's.
    result = run_sandbox(spec, "/bin/sh", "-c", f"ls -a {w}/..")
    assert "unlisted" not in result.stdout


def test_F3_hard_link_to_read_only_file_refused(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    readonly = tmp_path / "readonly"
    original = make_file(readonly / "file.txt", "original")
    spec = write_spec(files_spec(read=(readonly,), write=(written,)))
    errnos = python_errnos(run_sandbox, spec, {
        "link": f"os.link({str(original)!r}, {str(written / 'hard.txt')!r})",
    })
    assert errnos["link"] in ("EXDEV", "EPERM"), errnos
    found = attack(run_sandbox, spec, {
        "ln": f"ln {Q(str(original))} {Q(str(written / 'hard2.txt'))}",
        "ln then write": (
            f"ln {Q(str(original))} {Q(str(written / 'hard3.txt'))} && "
            f"echo pwned >> {Q(str(written / 'hard3.txt'))}"
        ),
    })
    assert opened(found) == []
    assert sorted(os.listdir(written)) == []
    assert original.read_text() == "original"
    assert original.stat().st_nlink == 1


def test_F3_hard_link_to_hidden_file_refused(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    written = tmp_path / "written"
    readable = tmp_path / "readable"
    hidden_in_written = make_file(written / "secret.txt", secret_text("hl-written"))
    hidden_folder_file = make_file(written / "hidden" / "secret.txt", secret_text("hl-folder"))
    hidden_in_read = make_file(readable / "secret.txt", secret_text("hl-read"))
    spec = write_spec(files_spec(
        read=(readable,), write=(written,),
        hide=(hidden_in_written, hidden_folder_file.parent, hidden_in_read),
    ))
    sources = {
        "hidden file in written folder": hidden_in_written,
        "file in hidden folder": hidden_folder_file,
        "hidden file in read folder": hidden_in_read,
        "etc-shadow": Path("/etc/shadow"),
    }
    attempts: dict[str, str] = {}
    for index, (name, source) in enumerate(sources.items()):
        destination = written / f"hard{index}.txt"
        attempts[name] = f"ln {Q(str(source))} {Q(str(destination))} && cat {Q(str(destination))}"
    found = attack(run_sandbox, spec, attempts)
    assert opened(found) == []
    assert sorted(os.listdir(written)) == ["hidden", "secret.txt"]
    for source in sources.values():
        if source.is_relative_to(tmp_path):
            assert source.stat().st_nlink == 1


def test_F3_renamed_parent_of_hidden_folder_keeps_it_closed(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    written = tmp_path / "written"
    parent = written / "parent"
    hidden = parent / "hidden"
    text = secret_text("renamed-parent")
    make_file(hidden / "secret.txt", text)
    spec = write_spec(files_spec(write=(written,), hide=(hidden,)))
    moved = written / "moved"
    m = Q(str(moved))
    script = (
        f"mv {Q(str(parent))} {m} && echo RENAMED\n"
        + attempts_script({
            "read through new name": f"cat {m}/hidden/secret.txt",
            "list through new name": f"ls {m}/hidden",
            "rename hidden now": f"mv {m}/hidden {m}/free",
            "read after second rename": f"cat {m}/free/secret.txt",
            "chmod through new name": f"chmod 0777 {m}/hidden",
        })
    )
    result = run_sandbox(spec, "/bin/sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert text not in result.stdout
    found = parse_outcomes(result.stdout)
    assert len(found) == 5, result.stdout
    assert opened(found) == []


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_F3_renamed_parent_of_hidden_path_stays_closed_in_next_run(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox, kind: str
) -> None:
    written = tmp_path / "written"
    parent = written / "parent"
    hidden = parent / "hidden"
    text = secret_text(f"renamed-parent-next-run-{kind}")
    secret = hidden / "secret.txt" if kind == "folder" else hidden
    make_file(secret, text)
    spec = write_spec(files_spec(write=(written,), hide=(hidden,)))
    moved = written / "moved"
    decoy = f"mkdir -p {Q(str(hidden))}" if kind == "folder" else (
        f"mkdir -p {Q(str(parent))} && : > {Q(str(hidden))}")
    first = run_sandbox(spec, "/bin/sh", "-c",
                        f"mv {Q(str(parent))} {Q(str(moved))}; {decoy}")
    assert text not in first.stdout
    relative = secret.relative_to(parent)
    second = run_sandbox(spec, "/bin/sh", "-c",
                         f"cat {Q(str(moved / relative))}; cat {Q(str(secret))}")
    assert text not in second.stdout + second.stderr


def test_F1_read_only_grant_in_write_grant_stays_read_only_in_next_run(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    outer = tmp_path / "outer"
    inner = outer / "middle" / "inner"
    kept = make_file(inner / "kept.txt", "original")
    spec = write_spec(files_spec(write=(outer,), read=(inner,)))
    moved = outer / "moved"
    run_sandbox(spec, "/bin/sh", "-c",
                f"mv {Q(str(inner.parent))} {Q(str(moved))}; mkdir -p {Q(str(inner))}")
    run_sandbox(spec, "/bin/sh", "-c",
                f"echo pwned >> {Q(str(moved / 'inner' / 'kept.txt'))}; "
                f"echo pwned >> {Q(str(kept))}")
    for candidate in (kept, moved / "inner" / "kept.txt"):
        if candidate.exists():
            assert candidate.read_text() == "original", candidate


def test_F3_nested_namespace_cannot_unmask_hidden_folder(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    parent = tmp_path / "parent"
    hidden = parent / "hidden"
    text = secret_text("unmask")
    make_file(hidden / "secret.txt", text)
    spec = write_spec(files_spec(read=(parent,), hide=(hidden,)))
    # A user namespace of its own gives a program every capability over a mount
    # namespace of its own: the mounts it inherited must stay locked over what they hide.
    code = "\n".join([
        "import ctypes, os",
        "libc = ctypes.CDLL(None, use_errno=True)",
        "CLONE_NEWUSER, CLONE_NEWNS, MNT_DETACH, MS_REC, MS_PRIVATE = "
        "0x10000000, 0x00020000, 2, 0x4000, 0x40000",
        "print('unshare', libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))",
        "libc.mount(b'none', b'/', None, MS_REC | MS_PRIVATE, None)",
        f"for target in ({str(hidden)!r}, {str(parent)!r}, '/tmp', '/'):",
        "    print('umount', target, libc.umount2(target.encode(), MNT_DETACH))",
        f"print('bind', libc.mount({str(parent)!r}.encode(), b'/mnt', None, 0x1000, None))",
        f"for path in ({str(hidden / 'secret.txt')!r}, '/mnt/hidden/secret.txt'):",
        "    try:",
        "        print('READ', open(path).read())",
        "    except OSError as error:",
        "        print('refused', path, error.errno)",
    ])
    result = run_sandbox(spec, "/usr/bin/python3", "-I", "-c", code)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert text not in result.stdout
    assert "READ" not in result.stdout
    assert result.stdout.count("refused ") == 2, result.stdout  # the attack got that far
    assert (hidden / "secret.txt").read_text() == text


def test_F3_inherited_descriptor_does_not_reach_inside(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec
) -> None:
    granted = tmp_path / "granted"
    granted.mkdir()
    text = secret_text("inherited-fd")
    secret = make_file(tmp_path / "unlisted" / "secret.txt", text)
    spec = write_spec(files_spec(read=(granted,)))
    file_fd = os.open(secret, os.O_RDONLY)
    dir_fd = os.open(secret.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        script = attempts_script({
            "read file fd": f"cat <&{file_fd}",
            "read /proc/self/fd file": f"cat /proc/self/fd/{file_fd}",
            "walk dir fd": f"cat /proc/self/fd/{dir_fd}/secret.txt",
        })
        result = subprocess.run(
            [LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/sh", "-c", script],
            env=sandbox_env, cwd=str(tmp_path), capture_output=True, text=True, check=False,
            timeout=SANDBOX_TIMEOUT_SECONDS, pass_fds=(file_fd, dir_fd),
        )
    finally:
        os.close(file_fd)
        os.close(dir_fd)
    assert result.returncode == 0, result.stderr
    assert text not in result.stdout
    found = parse_outcomes(result.stdout)
    assert len(found) == 3, result.stdout
    assert opened(found) == []


@pytest.mark.parametrize("swapped", ["grant", "grant-parent"])
def test_F3_grant_swapped_for_symlink_after_wrap_refused(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec, swapped: str
) -> None:
    text = secret_text("swap")
    if swapped == "grant":
        granted = tmp_path / "granted"
        swap_at = granted
        secret_folder = tmp_path / "secret"
        make_file(secret_folder / "secret.txt", text)
    else:
        granted = tmp_path / "parent" / "granted"
        swap_at = tmp_path / "parent"
        secret_folder = tmp_path / "evil"
        make_file(secret_folder / "granted" / "secret.txt", text)
    make_file(granted / "harmless.txt", "harmless")
    spec = write_spec(files_spec(read=(granted,)))
    g = Q(str(granted))
    wrapped = subprocess.run(
        [LNK_SANDBOX, "wrap", "--json", "--spec", str(spec), "--",
         "/bin/sh", "-c", f"ls {g}; cat {g}/secret.txt; cat {g}/harmless.txt"],
        env=sandbox_env, cwd=str(tmp_path), capture_output=True, text=True, check=False,
        timeout=SANDBOX_TIMEOUT_SECONDS,
    )
    assert wrapped.returncode == 0, wrapped.stderr
    line = json.loads(wrapped.stdout)
    assert isinstance(line, list)
    # The folder the line grants is swapped for a link to a secret one.
    moved_away = swap_at.with_name(swap_at.name + "-orig")
    swap_at.rename(moved_away)
    swap_at.symlink_to(secret_folder)
    result = subprocess.run(line, env=sandbox_env, cwd=str(tmp_path), capture_output=True,
                            text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert result.returncode == EXIT_SANDBOX_FAILED, (result.stdout, result.stderr)
    assert text not in result.stdout + result.stderr
    assert "secret.txt" not in result.stdout


# -- F6: Link's settings folder is never readable or writable inside -----------------------


def _settings_attempts(settings: Path, around: Path) -> dict[str, str]:
    s, a = Q(str(settings)), Q(str(around))
    return {
        "list": f"ls -a {s}",
        "read planted": f"cat {s}/token.txt",
        "read nested": f"cat {s}/sandbox/wire.toml",
        "create": f"echo pwned > {s}/new.txt",
        "append planted": f"echo pwned >> {s}/token.txt",
        "mkdir": f"mkdir {s}/agents",
        "remove planted": f"rm {s}/token.txt",
        "remove tree": f"rm -rf {s}",
        "rename": f"mv {s} {a}/moved",
        "chmod": f"chmod 0777 {s}",
        "follow link": f"ln -s {s}/token.txt {a}/link.txt && cat {a}/link.txt",
        "python listdir": f"/usr/bin/python3 -I -c 'import os; os.listdir({str(settings)!r})'",
    }


def _plant_settings(settings: Path) -> tuple[str, dict[str, str]]:
    text = secret_text("settings")
    make_file(settings / "token.txt", text)
    make_file(settings / "sandbox" / "wire.toml", secret_text("wire"))
    return text, settings_tree(settings)


@pytest.mark.parametrize("access", ["write", "read"])
def test_F6_settings_folder_closed_when_parent_granted(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    run_sandbox: RunSandbox, access: str,
) -> None:
    around = tmp_path / "around"
    settings = around / "lnk"
    text, before = _plant_settings(settings)
    env = {**sandbox_env, "LNK_HOME": str(settings)}
    spec = write_spec(
        files_spec(write=(around,)) if access == "write" else files_spec(read=(around,))
    )
    found = attack(run_sandbox, spec, _settings_attempts(settings, around), env=env)
    # ln -s of a link in a written folder works; following it must not.
    assert opened(found) == []
    assert settings_tree(settings) == before
    assert not (around / "moved").exists()
    result = run_sandbox(spec, "/bin/sh", "-c", f"cat {Q(str(settings))}/token.txt", env=env)
    assert text not in result.stdout + result.stderr


def test_F6_settings_folder_parent_rename_neither_swaps_nor_exposes_it(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    run_sandbox: RunSandbox,
) -> None:
    written = tmp_path / "written"
    settings = written / "config" / "lnk"
    text, before = _plant_settings(settings)
    env = {**sandbox_env, "LNK_HOME": str(settings)}
    spec = write_spec(files_spec(write=(written,)))
    moved = written / "config-moved"
    first = run_sandbox(spec, "/bin/sh", "-c",
                        f"mv {Q(str(settings.parent))} {Q(str(moved))}; "
                        f"mkdir -p {Q(str(settings))} && "
                        f"echo planted > {Q(str(settings / 'planted.txt'))}", env=env)
    assert text not in first.stdout
    second = run_sandbox(spec, "/bin/sh", "-c", f"cat {Q(str(moved / 'lnk' / 'token.txt'))}",
                         env=env)
    assert text not in second.stdout + second.stderr
    assert settings_tree(settings) == before  # LNK_HOME still holds Link's own, not the program's


def test_F6_missing_settings_folder_made_0700_before_start(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    run_sandbox: RunSandbox,
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    settings = written / "lnk-not-yet"
    env = {**sandbox_env, "LNK_HOME": str(settings)}
    spec = write_spec(files_spec(write=(written,)))
    assert not settings.exists()
    s = Q(str(settings))
    found = attack(run_sandbox, spec, {
        "make it": f"mkdir {s}",
        "write in it": f"echo pwned > {s}/kill-switch",
        "make nested": f"mkdir -p {s}/sandbox && echo pwned > {s}/sandbox/stop",
        "list it": f"ls -a {s}",
    }, env=env)
    assert opened(found) == []
    info = settings.lstat()
    assert stat.S_ISDIR(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid()
    assert settings_tree(settings) == {}  # nothing but the launcher's own bookkeeping


# -- P4: no capability survives; a user namespace always -----------------------------------


def _capabilities(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Cap"):
            found[key] = int(value.strip(), 16)
    return found


def test_P4_no_capability_survives(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/sh", "-c",
                         "cat /proc/self/status; echo ---; cat /proc/1/status")
    assert result.returncode == 0, result.stderr
    program, _, pid1 = result.stdout.partition("---\n")
    caps = _capabilities(program)
    for key in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        assert caps.get(key) == 0, (key, caps)
    # The sandbox's pid 1 (bubblewrap) keeps none it could lend either.
    assert _capabilities(pid1).get("CapEff") == 0, pid1


def test_P4_root_cannot_override_file_modes(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    written = tmp_path / "written"
    locked = make_file(written / "locked.txt", "locked")
    locked.chmod(0)
    locked_dir = written / "locked-dir"
    make_file(locked_dir / "inside.txt", "inside")
    locked_dir.chmod(0)
    spec = write_spec(files_spec(write=(written,)))
    try:
        found = attack(run_sandbox, spec, {
            "read mode-000 file": f"cat {Q(str(locked))}",
            "write mode-000 file": f"echo pwned >> {Q(str(locked))}",
            "list mode-000 folder": f"ls {Q(str(locked_dir))}",
            "read in mode-000 folder": f"cat {Q(str(locked_dir / 'inside.txt'))}",
            "chown to another user": f"chown 4242:4242 {Q(str(written))}/*",
            "mknod": f"mknod {Q(str(written / 'null'))} c 1 3",
        })
        assert opened(found) == []
        assert not (written / "null").exists()
    finally:
        locked_dir.chmod(0o700)
        locked.chmod(0o600)
    assert locked.read_text() == "locked"


def test_P4_uid_and_gid_kept(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/sh", "-c", "id -u; id -g")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(os.getuid()), str(os.getgid())]


def test_P4_own_user_namespace(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/sh", "-c",
                         "readlink /proc/self/ns/user; readlink /proc/self/ns/uts; "
                         "readlink /proc/self/ns/pid; readlink /proc/self/ns/mnt")
    assert result.returncode == 0, result.stderr
    inside = result.stdout.split()
    outside = [os.readlink(f"/proc/self/ns/{kind}") for kind in ("user", "uts", "pid", "mnt")]
    assert len(inside) == 4
    for mine, theirs in zip(inside, outside, strict=True):
        assert mine.split(":")[0] == theirs.split(":")[0]
        assert mine != theirs, (mine, theirs)


def test_P4_proc_sys_not_writable_and_host_unchanged(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    # Only ever the value already there is written: if a write got through, the host
    # would still be as it was (and the test fails on the write's success).
    sysctls = ("/proc/sys/kernel/hostname", "/proc/sys/vm/swappiness")
    before = {path: Path(path).read_text() for path in sysctls}
    spec = write_spec(files_spec(read=(tmp_path,)))
    found = attack(run_sandbox, spec, {
        path: f"printf %s {Q(value)} > {Q(path)}" for path, value in before.items()
    } | {
        f"python {path}": f"/usr/bin/python3 -I -c 'open({path!r}, \"w\").write({value!r})'"
        for path, value in before.items()
    })
    assert opened(found) == []
    assert {path: Path(path).read_text() for path in sysctls} == before


def test_P4_hostname_changes_stay_in_own_uts_namespace(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    host_name = socket.gethostname()
    host_uts = os.readlink("/proc/self/ns/uts")
    new_name = f"lnk-attack-{uuid.uuid4().hex[:8]}"
    spec = write_spec(files_spec(read=(tmp_path,)))
    # The attempt guards itself: it only runs once it sees a uts namespace of its own.
    script = (
        f'if [ "$(readlink /proc/self/ns/uts)" = {Q(host_uts)} ]; then\n'
        "  echo SHARED-UTS; exit 0\n"
        "fi\n"
        + attempts_script({
            "sethostname": (
                "/usr/bin/python3 -I -c "
                f"'import socket; socket.sethostname({new_name!r})'"
            ),
        })
    )
    result = run_sandbox(spec, "/bin/sh", "-c", script)
    assert result.returncode == 0, result.stderr
    assert "SHARED-UTS" not in result.stdout
    assert opened(parse_outcomes(result.stdout)) == []
    assert socket.gethostname() == host_name
    assert Path("/proc/sys/kernel/hostname").read_text().strip() == host_name


# -- P6: no signal, ptrace or /proc reach to a process outside ------------------------------


def test_P6_outside_process_invisible_and_unsignalable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    outside = subprocess.Popen(["sleep", "30"])
    try:
        pid = outside.pid
        spec = write_spec(files_spec(read=(tmp_path,)))
        found = attack(run_sandbox, spec, {
            "see /proc/pid": f"test -e /proc/{pid}",
            "read its cmdline": f"cat /proc/{pid}/cmdline",
            "kill -0": f"kill -0 {pid}",
            "kill -TERM": f"kill -TERM {pid}",
            "python kill": f"/usr/bin/python3 -I -c 'import os; os.kill({pid}, 0)'",
            "read host pid 1 environ": "cat /proc/1/environ | grep -q LNK_HOME",
        })
        assert opened(found) == []
        assert outside.poll() is None, "the outside process was killed from inside"
    finally:
        outside.kill()
        outside.wait()


def test_P6_bubblewrap_pid1_root_cwd_and_descriptors_unreachable(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    granted = tmp_path / "granted"
    granted.mkdir()
    secret = make_file(tmp_path / "unlisted" / "secret.txt", secret_text("pid1"))
    spec = write_spec(files_spec(read=(granted,)))
    found = attack(run_sandbox, spec, {
        "pid1 root": f"cat /proc/1/root{Q(str(secret))}",
        "pid1 cwd": "ls /proc/1/cwd/",
        "pid1 fds": "ls -l /proc/1/fd/ | grep -q -- '->'",
        "pid1 fd walk": "for fd in /proc/1/fd/*; do ls \"$fd/\" && exit 0; done; exit 1",
        "pid1 environ": "cat /proc/1/environ | grep -q .",
        "pid1 mem": "head -c 1 /proc/1/mem",
    })
    assert opened(found) == []


def test_P6_pid1_is_bubblewrap(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/cat", "/proc/1/cmdline")
    assert result.returncode == 0, result.stderr
    argv0 = result.stdout.split("\0")[0]
    assert os.path.basename(argv0) == "bwrap", result.stdout
    host_init = Path("/proc/1/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    assert os.path.basename(host_init) != "bwrap"


def test_P6_proc_lists_only_sandbox_pids(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/ls", "/proc")
    assert result.returncode == 0, result.stderr
    pids = sorted(int(name) for name in result.stdout.split() if name.isdigit())
    assert 1 in pids
    assert len(pids) <= 4, pids
    host_pids = [name for name in os.listdir("/proc") if name.isdigit()]
    assert len(host_pids) > len(pids)


# -- the program's exit, signals, environment, folders --------------------------------------


def test_exit_status_passes_through(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    assert run_sandbox(spec, "/bin/sh", "-c", "exit 7").returncode == 7
    assert run_sandbox(spec, "/bin/sh", "-c", "exit 0").returncode == 0


def test_signal_death_is_128_plus_n(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/sh", "-c", "kill -TERM $$")
    assert result.returncode == 128 + signal.SIGTERM


def test_sigterm_to_launcher_reaches_program(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec
) -> None:
    written = tmp_path / "written"
    written.mkdir()
    ready, marker = written / "ready", written / "marker"
    spec = write_spec(files_spec(write=(written,)))
    script = (
        f"trap 'echo got-term > {Q(str(marker))}; exit 3' TERM\n"
        f": > {Q(str(ready))}\n"
        "while :; do sleep 0.1; done\n"
    )
    process = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", "/bin/sh", "-c", script],
        env=sandbox_env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # At once: the launcher passes a TERM on from the moment the program may start.
        wait_until(lambda: ready.exists() or process.poll() is not None, "the program")
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
        assert marker.exists(), stderr
        assert marker.read_text() == "got-term\n"
        assert process.returncode == 3, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def test_P5_loader_variables_cleared_others_kept(
    tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec,
    run_sandbox: RunSandbox,
) -> None:
    env = {
        **sandbox_env,
        "FOO": "bar",
        "LD_PRELOAD": "/nonexistent/lnk-attack-preload.so",
        "LD_LIBRARY_PATH": "/nonexistent/lnk-attack-lib",
        "LD_AUDIT": "/nonexistent/lnk-attack-audit.so",
        "GLIBC_TUNABLES": "glibc.malloc.perturb=0",
    }
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/usr/bin/env", env=env)
    assert result.returncode == 0, result.stderr
    seen = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert seen.get("FOO") == "bar"
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GLIBC_TUNABLES"):
        assert name not in seen, (name, seen.get(name))
    assert not [name for name in seen if name.startswith("LD_")]


def test_dev_shm_writable_and_private(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    name = f"lnk-shm-{uuid.uuid4().hex}"
    spec = write_spec(files_spec(read=(tmp_path,)))
    result = run_sandbox(spec, "/bin/sh", "-c",
                         f"echo shared > /dev/shm/{name} && cat /dev/shm/{name}")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "shared\n"
    assert not os.path.lexists(f"/dev/shm/{name}")


def test_working_directory_kept_when_granted(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    work = tmp_path / "work"
    make_file(work / "here.txt", "here")
    spec = write_spec(files_spec(read=(work,)))
    result = run_sandbox(spec, "/bin/sh", "-c", "pwd; cat here.txt", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{work}\nhere"
    assert "working directory" not in result.stderr


def test_F1_working_directory_not_granted_starts_in_root_with_notice(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox
) -> None:
    granted = tmp_path / "granted"
    granted.mkdir()
    unlisted = tmp_path / "unlisted"
    text = secret_text("cwd")
    make_file(unlisted / "secret.txt", text)
    spec = write_spec(files_spec(read=(granted,)))
    result = run_sandbox(spec, "/bin/sh", "-c", "pwd; cat secret.txt; ls", cwd=unlisted)
    assert result.stdout.splitlines()[0] == "/"
    assert text not in result.stdout
    notices = [line for line in result.stderr.splitlines() if line.startswith("lnk-sandbox:")]
    assert len(notices) == 1, result.stderr
    assert str(unlisted) in notices[0]
    assert "starts in /" in notices[0]
