"""`lnk-sandbox check --probe` (lnk_wrap.probe, lnk_wrap.probe_inside): the escape attempts
run for real, in a real sandbox on this machine, as root and (CI's user run) as the
ordinary user: every one held here. A battery whose spec is widened to grant what a
probe tries reports it OPEN, with why, and exits nonzero; a battery whose controls fail
says nothing held and fails (fail closed); a witness outside that was reached makes its
probe open whatever the line from inside says. The report's shape is golden.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lnk_wrap.probe import (
    HELD_BY,
    INVARIANTS,
    ProbeError,
    Targets,
    _rows,
    lacks,
    probe,
    show,
    why_open,
)
from lnk_wrap.probe_inside import CONTROLS, PROBES
from tests.conftest import LNK_SANDBOX, ROOT

PROBE_SECONDS = 180


def _check_probe(env: dict[str, str], *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, "check", "--probe", *words], env=env,
                          capture_output=True, text=True, timeout=PROBE_SECONDS, check=False)


def test_F1_to_F4_F6_P1_to_P4_P6_N1_to_N3_every_probe_holds_on_this_machine(
    sandbox_env: dict[str, str]
) -> None:
    done = _check_probe(sandbox_env)
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0] == f"probe: every wall held ({len(PROBES)} of {len(PROBES)})"
    assert lines[1].startswith("kernel ") and ", Landlock ABI " in lines[1]
    shown = [line.split()[:2] for line in lines[3:]]
    assert shown == [["held", name] for name, _, _ in PROBES], done.stdout
    as_json = _check_probe(sandbox_env, "--json")
    assert as_json.returncode == 0, as_json.stderr
    found = json.loads(as_json.stdout)
    assert found["held"] is True
    assert set(found) == {"held", "rows", "controls", "machine"}
    assert all(set(row) == {"name", "invariant", "tries", "held_means", "held", "saw"}
               for row in found["rows"])
    assert set(found["machine"]) == {"kernel", "landlock_abi", "seccomp_user_notification",
                                     "memfd_noexec", "apparmor_restrict_unprivileged_userns"}
    assert [row["name"] for row in found["rows"]] == [name for name, _, _ in PROBES]
    assert all(row["held"] for row in (*found["rows"], *found["controls"]))
    assert {row["invariant"] for row in found["rows"]} == {
        "F1", "F2", "F3", "F4", "F6", "P1", "P2", "P3", "P4", "P6", "N1", "N2", "N3"}
    # Nothing of the battery is left behind: its canary in Link's settings is gone.
    assert list((Path(sandbox_env["LNK_HOME"]) / "sandbox" / "probe").iterdir()) == []


# `lnk-sandbox check --probe` with the battery's spec changed by a Targets subclass: the
# whole command, its real sandbox, only the spec widened or narrowed.
CHANGED = """
import sys
sys.path.insert(0, {root!r})
from lnk_wrap import cli, probe

class Changed(probe.Targets):
    def spec(self, addresses):
        text = super().spec(addresses)
        return {change}

probe.Targets = Changed
cli.main(["check", "--probe"])
"""


def _changed_probe(env: dict[str, str], change: str) -> subprocess.CompletedProcess[str]:
    program = CHANGED.format(root=str(ROOT), change=change)
    python = str(Path(LNK_SANDBOX).parent / "python")
    return subprocess.run([python if Path(python).exists() else sys.executable, "-c", program],
                          env=env, capture_output=True, text=True, timeout=PROBE_SECONDS,
                          check=False)


def test_F1_a_spec_that_grants_the_folder_a_probe_tries_is_reported_open(
    sandbox_env: dict[str, str]
) -> None:
    """The folder beside the granted one, granted too: the probe reads its file (and
    through a link made in the written folder), the report says OPEN with what holds
    each, and the exit status is 1."""
    done = _changed_probe(sandbox_env, 'text.replace(\'read = ["\' + self.granted + \'"]\', '
                                       '\'read = ["\' + self.granted + \'", "\' + self.root '
                                       '+ \'/outside"]\')')
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0] == f"probe: OPEN: 2 of {len(PROBES)} (files-outside, links-out)"
    opened = next(index for index, line in enumerate(lines) if "OPEN  files-outside" in line)
    assert lines[opened].endswith(": read 18 bytes")
    assert lines[opened + 1].strip() == (
        "held means the file cannot be opened; held by bubblewrap's mounts, then Landlock")
    linked = next(line for line in lines if "OPEN  links-out" in line)
    assert "to-outside: read 18 bytes; to-settings: ENOENT" in linked, linked


def test_a_battery_whose_controls_fail_says_nothing_held(sandbox_env: dict[str, str]) -> None:
    """The probe's own folder not granted: no control passes, so no probe can be
    believed: the command says so and fails; nothing is reported held."""
    done = _changed_probe(sandbox_env, "text.replace('read = ', 'read = [\"/usr\"]\\n#')")
    assert done.returncode == 125, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.startswith("lnk-sandbox: check --probe: the battery's control "
                                  "control-read failed (no report came for this probe"), \
        done.stderr
    assert done.stderr.rstrip().endswith("; nothing was probed")


def test_a_missing_line_or_a_reached_witness_is_open() -> None:
    lines = {"files-outside": {"name": "files-outside", "held": True, "saw": "ENOENT"},
             "unix-socket-outside": {"name": "unix-socket-outside", "held": True,
                                     "saw": "EACCES"}}
    rows = {row["name"]: row for row in _rows(lines, PROBES,
                                              {"unix-socket-outside": ["a client"]})}
    assert rows["files-outside"]["held"] is True
    assert rows["unix-socket-outside"]["held"] is False
    assert rows["unix-socket-outside"]["saw"] == (
        "EACCES; the witness outside was reached from ['a client']")
    execveat = next(row for row in PROBES if row[0] == "execveat")
    assert rows["execveat"] == {
        "name": "execveat", "invariant": "P2", "tries": execveat[1], "held_means": execveat[2],
        "held": False, "saw": "no report came for this probe (it did not run)"}
    assert [name for name, _, _ in CONTROLS] == [
        "control-read", "control-program", "control-socket", "control-proxy"]


def test_the_report_golden() -> None:
    rows: list[dict[str, object]] = [
        {"name": "files-outside", "tries": "read a file beside", "held_means": "no read",
         "held": True, "saw": "ENOENT: No such file or directory"},
        {"name": "memory-file", "tries": "run a memfd", "held_means": "it does not start",
         "held": False, "saw": "it ran",
         "why": "held by the exec watch's seal (MFD_NOEXEC_SEAL, Linux 6.3+); this kernel "
                "has no MFD_NOEXEC_SEAL (Linux 6.3)"},
    ]
    found: dict[str, object] = {"held": False, "rows": rows}
    assert show(found) == (
        "probe: OPEN: 1 of 2 (memory-file)\n"
        "\n"
        "  held  files-outside  read a file beside: ENOENT: No such file or directory\n"
        "  OPEN  memory-file    run a memfd: it ran\n"
        "                       held means it does not start; held by the exec watch's seal "
        "(MFD_NOEXEC_SEAL, Linux 6.3+); this kernel has no MFD_NOEXEC_SEAL (Linux 6.3)")
    found["rows"] = rows[:1]
    assert show(found).splitlines()[0] == "probe: every wall held (1 of 1)"


def test_an_open_probe_says_what_holds_it_and_what_this_machine_lacks() -> None:
    bare = {"landlock_abi": 0, "memfd_noexec": False, "seccomp": {"user_notification": False}}
    assert why_open("files-outside", bare) == (
        "held by bubblewrap's mounts, then Landlock; this kernel has no Landlock")
    assert why_open("memory-file", bare) == (
        "held by the exec watch's seal (MFD_NOEXEC_SEAL, Linux 6.3+); this kernel has no "
        "MFD_NOEXEC_SEAL (Linux 6.3); this kernel's seccomp has no user notification")
    assert why_open("unix-socket-outside", bare).endswith(
        "; this kernel's seccomp has no user notification")
    assert why_open("abstract-socket-outside", {"landlock_abi": 4}) == (
        "held by the sandbox's own network namespace; Landlock ABI 4 has no scoping of "
        "abstract sockets (ABI 6)")
    assert why_open("refused-host", bare) == "held by the proxy's name check"
    assert set(HELD_BY) == set(INVARIANTS) == {name for name, _, _ in PROBES}


def test_the_report_says_what_the_machine_lacks() -> None:
    facts = {"kernel": "5.15.0", "landlock_abi": 1, "memfd_noexec": False,
             "seccomp_user_notification": True,
             "apparmor_restrict_unprivileged_userns": "1"}
    assert lacks(facts) == [
        "Landlock's refer: a file moved or linked between folders (ABI 2; this kernel's "
        "is 1)",
        "Landlock's truncate (ABI 3; this kernel's is 1)",
        "Landlock's ioctl on devices (ABI 5; this kernel's is 1)",
        "Landlock's scopes: signals and abstract unix sockets out of the sandbox (ABI 6; "
        "this kernel's is 1)",
        "MFD_NOEXEC_SEAL (Linux 6.3)",
        "unprivileged user namespaces (AppArmor restricts them: bubblewrap runs by its "
        "profile, or not at all)"]
    found = {"held": True, "machine": {**facts, "landlock_abi": 7, "memfd_noexec": True,
                                       "apparmor_restrict_unprivileged_userns": "0"},
             "rows": [{"name": "refused-host", "tries": "CONNECT", "held_means": "403",
                       "held": True, "saw": "HTTP/1.1 403 Forbidden"}]}
    assert show(found) == (
        "probe: every wall held (1 of 1)\n"
        "kernel 5.15.0, Landlock ABI 7; it has every right and call a sandbox uses\n"
        "\n"
        "  held  refused-host  CONNECT: HTTP/1.1 403 Forbidden")


def test_no_battery_runs_where_no_sandbox_can_start(tmp_path: Path) -> None:
    """AppArmor's restriction (or no user namespaces at all): `check`'s diagnosis, with
    its fix, is the one line; nothing is made."""
    machine = {"bubblewrap": {"user_namespaces": False, "why":
                              "AppArmor refuses user namespaces to unconfined programs"}}
    with pytest.raises(ProbeError, match=r"^no sandbox can start on this machine: AppArmor"):
        probe({}, str(tmp_path / "settings"), machine, site_packages="")
    assert not (tmp_path / "settings").exists()


def test_a_witness_counts_every_connection_even_one_not_yet_accepted(tmp_path: Path) -> None:
    """The unix and TCP witnesses, made as the battery makes them: connections made
    just before they close (still in the backlog) are counted; nothing is left."""
    import socket

    targets = Targets(str(tmp_path / "settings"))
    targets.make()
    unix, abstract, tcp = targets.witnesses
    for _ in range(3):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(Path(targets.granted) / "outside.sock"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(b"\0lnk-probe-" + Path(targets.root).name.encode())
    with socket.create_connection(("127.0.0.1", targets.port)):
        targets.remove()
    assert len(unix.reached) == 3
    assert len(abstract.reached) == 1
    assert len(tcp.reached) == 1 and "127.0.0.1" in tcp.reached[0]
    assert not Path(targets.root).exists() and not Path(targets.canary_folder).exists()


def test_the_probes_find_this_machine_open_outside_any_sandbox(tmp_path: Path) -> None:
    """The probes are not vacuous: run here, outside any sandbox, the ones that need no
    target find the walls missing (a user namespace is made, the bounding set is full,
    the file beside is read), as root or not."""
    from lnk_wrap import probe_inside

    assert probe_inside.refused_calls({}) == (False, "unshare succeeded")
    held, saw = probe_inside.capabilities({})
    assert not held and "CapBnd 0000000000000000" not in saw, saw
    beside = tmp_path / "secret"
    beside.write_text("lnk-sandbox probe\n")
    assert probe_inside.files_outside({"outside_file": str(beside)}) == (False, "read 18 bytes")
