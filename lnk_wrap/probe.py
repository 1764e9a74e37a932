"""lnk-sandbox check --probe: escape attempts from a real sandbox on this machine.

Job: make targets outside (a folder beside the granted one, a hidden folder, a canary in
Link's settings folder, held dot files, a unix socket, an abstract one, a TCP listener),
run lnk_wrap.probe_inside in a sandbox of a spec made for it, and report each of its
PROBES held or open, with what was seen, and where one is open the machine's reasons
(Landlock's ABI and the rights it lacks, AppArmor's user-namespace restriction,
seccomp's user notification, the memory files' seal).

Fail closed: the controls must pass (a granted file read, the listed interpreter run, a
socket made inside reached, the proxy answering), or the battery says nothing and the
run fails; a probe no line came for is not held; a witness outside (the unix socket,
the TCP listener) that was reached makes its probes open whatever the line says.

Order: targets made → the spec parsed as any spec is (lnk_wrap.spec) → the kept line
run (lnk_wrap.helpers), its output kept → the report read against the table → every
target removed (the canary in Link's settings too).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from typing import Any

from lnk_wrap.probe_inside import CONTROLS, PROBES

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["EXIT_OPEN", "HELD_BY", "INVARIANTS", "PROBE_TIMEOUT_SECONDS", "ProbeError",
           "Targets", "lacks", "machine_addresses", "probe", "show", "why_open"]

# Exit status when a probe found something open (125 stays "could not run", as for run).
EXIT_OPEN = 1
# The whole battery, start to end: some 2 s here; past this a probe hangs, and the run is
# ended and reported as not held.
PROBE_TIMEOUT_SECONDS = 120
# What a probe's witness outside reads of a connection before it closes it.
_WITNESS_BYTES = 64
# The rows each witness speaks for, in the order Targets.make makes them.
_WITNESSED = (("unix-socket-outside",), ("abstract-socket-outside",),
              ("direct-network", "this-machine-by-proxy"))
# The invariant each probe attacks (docs/facts/invariants.md).
INVARIANTS = {
    "files-outside": "F1", "machine-secrets": "F1", "read-only-grant": "F1",
    "hidden-folder": "F2", "settings-folder": "F6", "dot-files": "F4", "links-out": "F3",
    "refused-calls": "P3", "capabilities": "P4",
    "unlisted-program": "P1", "execveat": "P2", "memory-file": "P2",
    "unix-socket-outside": "N1", "abstract-socket-outside": "N1", "direct-network": "N1",
    "this-machine-by-proxy": "N3", "refused-host": "N2", "socket-families": "N1",
    "process-outside": "P6", "metadata-by-proxy": "N3",
}
# Where an open row's reason is looked for: what holds each row.
HELD_BY = {
    "files-outside": "bubblewrap's mounts, then Landlock",
    "machine-secrets": "bubblewrap's mounts (hidden system secrets)",
    "read-only-grant": "a read-only bind, then Landlock",
    "hidden-folder": "bubblewrap's mounts, then Landlock",
    "settings-folder": "bubblewrap's mounts, then Landlock",
    "dot-files": "read-only binds of the held dot files",
    "links-out": "bubblewrap's mounts (a link's target is not there), then Landlock",
    "refused-calls": "the seccomp filter (each refused call fails with an errno)",
    "capabilities": "bubblewrap's --cap-drop ALL in its own user namespace",
    "unlisted-program": "Landlock's execute right, and the exec watch",
    "execveat": "the seccomp filter",
    "memory-file": "the exec watch's seal (MFD_NOEXEC_SEAL, Linux 6.3+)",
    "unix-socket-outside": "the seccomp filter's user notification and the exec watch",
    "abstract-socket-outside": "the sandbox's own network namespace",
    "direct-network": "the sandbox's own network namespace",
    "this-machine-by-proxy": "the proxy's address check",
    "refused-host": "the proxy's name check",
    "socket-families": "the seccomp filter",
    "process-outside": "the sandbox's own pid namespace",
    "metadata-by-proxy": "the proxy's address check",
}


class ProbeError(Exception):
    """The battery could not run (no sandbox, a control that failed): one line."""


class _Witness:
    """A listening socket outside that records every connection made to it."""

    def __init__(self, server: socket.socket) -> None:
        self.server = server
        self.reached: list[str] = []
        server.settimeout(0.2)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                client, peer = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.reached.append(str(peer) or "a client")
            client.close()

    def close(self) -> None:
        """Stop serving, then take every connection still waiting in the backlog (one the
        kernel completed before the thread got to it counts as much)."""
        self.stopped.set()
        self.thread.join()
        self.server.setblocking(False)
        while True:
            try:
                client, peer = self.server.accept()
            except OSError:  # BlockingIOError: none left
                break
            self.reached.append(str(peer) or "a client")
            client.close()
        self.server.close()


class Targets:
    """What the probes aim at, made outside in a fresh folder (and one canary in Link's
    settings), and the spec of the sandbox they run in."""

    def __init__(self, settings: str) -> None:
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="lnk-probe-"))
        self.settings = settings
        self.granted = os.path.join(self.root, "granted")
        self.work = os.path.join(self.root, "work")
        self.canary_folder = os.path.join(settings, "sandbox", "probe", os.urandom(6).hex())
        self.witnesses: list[_Witness] = []
        self.port = 0

    def make(self) -> None:
        os.makedirs(os.path.join(self.granted, "hidden"))
        os.makedirs(os.path.join(self.root, "outside"))
        os.makedirs(os.path.join(self.work, ".git"))
        for path in (os.path.join(self.granted, "canary"),
                     os.path.join(self.granted, "hidden", "secret"),
                     os.path.join(self.root, "outside", "secret"),
                     os.path.join(self.work, ".envrc"), os.path.join(self.work, ".git", "config")):
            with open(path, "w") as handle:
                handle.write("lnk-sandbox probe\n")
        from lnk_wrap.launch import ensure_settings_folder

        ensure_settings_folder(self.settings)  # 0700, as a run makes it
        os.makedirs(self.canary_folder, mode=0o700)
        with open(os.path.join(self.canary_folder, "canary"), "w") as handle:
            handle.write("lnk-sandbox probe\n")
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(os.path.join(self.granted, "outside.sock"))
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(b"\0lnk-probe-" + os.path.basename(self.root).encode())
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind(("0.0.0.0", 0))  # noqa: S104 (the witness: any address of this machine)
        self.port = tcp.getsockname()[1]
        for server in (unix, abstract, tcp):
            server.listen(8)
            self.witnesses.append(_Witness(server))

    def spec(self, addresses: list[str]) -> str:
        """The battery's spec, TOML: the granted folder read (a folder hidden in it), the
        work folder written, only the interpreter listed, the proxy with this machine's
        names and addresses listed at the witness's port (so its address check is what
        refuses them)."""
        hosts = [f"{host}:{self.port}" for host in ("localhost", "127.0.0.1", *addresses)]
        return (f"[files]\nread = {json.dumps([self.granted])}\n"
                f"write = {json.dumps([self.work])}\n"
                f"hide = {json.dumps([os.path.join(self.granted, 'hidden')])}\n"
                f"[commands]\nrun = {json.dumps([os.path.realpath(sys.executable)])}\n"
                f'[network]\nmode = "proxy"\nhosts = {json.dumps(hosts)}\n')

    def arguments(self, addresses: list[str]) -> dict[str, object]:
        return {
            "report": os.path.join(self.work, "report.jsonl"),
            "granted": self.granted, "work": self.work, "settings": self.settings,
            "canary": os.path.join(self.granted, "canary"),
            "outside_file": os.path.join(self.root, "outside", "secret"),
            "hidden_file": os.path.join(self.granted, "hidden", "secret"),
            "settings_file": os.path.join(self.canary_folder, "canary"),
            "outside_socket": os.path.join(self.granted, "outside.sock"),
            "abstract_name": "lnk-probe-" + os.path.basename(self.root),
            "machine_addresses": addresses, "port": self.port,
            "proxy_targets": ["localhost", "127.0.0.1", *addresses],
            "outside_pid": os.getpid(),
        }

    def remove(self) -> None:
        for witness in self.witnesses:
            witness.close()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.canary_folder, ignore_errors=True)


def machine_addresses() -> list[str]:
    """This machine's own IPv4 addresses but loopback (the kernel's table of local
    routes, /proc/net/fib_trie), at most three."""
    try:
        with open("/proc/net/fib_trie") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    found: list[str] = []
    for before, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            address = before.strip().removeprefix("|-- ")
            if not address.startswith("127.") and address not in found:
                found.append(address)
    return found[:3]


# The Landlock rights a sandbox uses, by the ABI that brought each (lnk_wrap.landlock):
# a kernel below one holds without it, by the other walls alone.
LANDLOCK_RIGHTS = ((2, "refer: a file moved or linked between folders"),
                   (3, "truncate"), (5, "ioctl on devices"),
                   (6, "scopes: signals and abstract unix sockets out of the sandbox"))


def lacks(machine: Mapping[str, Any]) -> list[str]:
    """What this machine lacks of what a sandbox uses, one phrase each (none: all)."""
    abi = int(machine.get("landlock_abi") or 0)
    found = ["Landlock (absent)"] if abi < 1 else [
        f"Landlock's {right} (ABI {needs}; this kernel's is {abi})"
        for needs, right in LANDLOCK_RIGHTS if abi < needs]
    if not machine.get("memfd_noexec"):
        found.append("MFD_NOEXEC_SEAL (Linux 6.3)")
    if not machine.get("seccomp_user_notification"):
        found.append("seccomp's user notification")
    if machine.get("apparmor_restrict_unprivileged_userns") == "1":
        found.append("unprivileged user namespaces (AppArmor restricts them: bubblewrap "
                     "runs by its profile, or not at all)")
    return found


def why_open(row: str, machine: Mapping[str, Any]) -> str:
    """The machine's reasons a row may be open: what holds it, and what this machine
    lacks of it."""
    lacks = []
    abi = int(machine.get("landlock_abi", 0))
    if "Landlock" in HELD_BY[row] and abi < 1:
        lacks.append("this kernel has no Landlock")
    if row == "memory-file" and not machine.get("memfd_noexec"):
        lacks.append("this kernel has no MFD_NOEXEC_SEAL (Linux 6.3)")
    if row == "abstract-socket-outside" and abi < 6:
        lacks.append(f"Landlock ABI {abi} has no scoping of abstract sockets (ABI 6)")
    if "exec watch" in HELD_BY[row] and not machine.get("seccomp", {}).get(
            "user_notification"):
        lacks.append("this kernel's seccomp has no user notification")
    return f"held by {HELD_BY[row]}" + (f"; {'; '.join(lacks)}" if lacks else "")


def _run_battery(targets: Targets, env: Mapping[str, str], site_packages: str
                 ) -> subprocess.CompletedProcess[str]:
    """The probes run in a sandbox of the targets' spec, by the kept line `wrap` would
    print (the whole chain, as a harness runs it); its output kept for the report."""
    from lnk_wrap.helpers import kept_line
    from lnk_wrap.spec import SpecError, parse_spec

    addresses = machine_addresses()
    targets.make()
    spec_path = os.path.join(targets.root, "probe.toml")
    text = targets.spec(addresses)
    with open(spec_path, "w") as handle:
        handle.write(text)
    try:
        policy = parse_spec(text.encode(), file=spec_path, env=env)
    except SpecError as error:
        raise ProbeError(f"the battery's own spec was refused: {error}") from None
    program = os.path.join(targets.granted, "probe_inside.py")
    shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "probe_inside.py"), program)
    arguments = os.path.join(targets.granted, "arguments.json")
    with open(arguments, "w") as handle:
        json.dump(targets.arguments(addresses), handle)
    line = kept_line([*policy.with_site_packages(site_packages).to_argv(), "--",
                      os.path.realpath(sys.executable), "-I", "-S", program, arguments])
    try:
        return subprocess.run(line, env=dict(env), cwd=targets.work, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_SECONDS, check=False,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(line, -1, "", f"the battery ran past "
                                           f"{PROBE_TIMEOUT_SECONDS} s and was ended")


def _lines_of(report: str) -> dict[str, dict[str, Any]]:
    """The report's lines by name (a line that is not one of ours is left out: the
    table decides what a row is)."""
    found: dict[str, dict[str, Any]] = {}
    try:
        with open(report, encoding="utf-8", errors="replace") as handle:
            for text in handle:
                try:
                    line = json.loads(text)
                except ValueError:
                    continue
                if isinstance(line, dict) and isinstance(line.get("name"), str):
                    found.setdefault(line["name"], line)
    except FileNotFoundError:
        pass
    return found


def _rows(lines: Mapping[str, Mapping[str, Any]], table: tuple[tuple[str, str, str], ...],
          reached: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    rows = []
    for name, tries, held_means in table:
        line = lines.get(name)
        if line is None:
            held, saw = False, "no report came for this probe (it did not run)"
        else:
            held, saw = line.get("held") is True, str(line.get("saw", ""))
        if reached.get(name):
            held, saw = False, f"{saw}; the witness outside was reached from {reached[name]}"
        rows.append({"name": name, "invariant": INVARIANTS.get(name, ""), "tries": tries,
                     "held_means": held_means, "held": held, "saw": saw})
    return rows


def probe(env: Mapping[str, str], settings: str, machine: Mapping[str, Any], *,
          site_packages: str, targets: Targets | None = None) -> dict[str, Any]:
    """Run the battery; the report: `held` (every probe), `rows`, `controls`, the
    machine's facts, and the sandbox's stderr where it failed. `targets`: what is made
    and the spec (a test widens it to see a probe find something open)."""
    if not machine.get("bubblewrap", {}).get("user_namespaces"):
        why = machine.get("bubblewrap", {}).get("why") or "bubblewrap cannot run here"
        raise ProbeError(f"no sandbox can start on this machine: {why}")
    from lnk_wrap.launch import LaunchError

    targets = targets or Targets(settings)
    try:
        try:
            done = _run_battery(targets, env, site_packages)
        except (LaunchError, OSError) as error:
            raise ProbeError(f"the battery's targets could not be made: {error}") from None
        lines = _lines_of(os.path.join(targets.work, "report.jsonl"))
    finally:
        targets.remove()  # the witnesses closed: every connection made to them counted
    reached = {name: witness.reached
               for names, witness in zip(_WITNESSED, targets.witnesses, strict=True)
               for name in names}
    controls = _rows(lines, CONTROLS, {})
    if not all(row["held"] for row in controls):
        failed = next(row for row in controls if not row["held"])
        tail = done.stderr.strip().splitlines()[-1:] if done.returncode else []
        raise ProbeError(f"the battery's control {failed['name']} failed ({failed['saw']})"
                         + (f": {tail[0]}" if tail else "") + "; nothing was probed")
    rows = _rows(lines, PROBES, reached)
    for row in rows:
        if not row["held"]:
            row["why"] = why_open(row["name"], machine)
    return {"held": all(row["held"] for row in rows), "rows": rows, "controls": controls,
            "machine": _facts(machine)}


def _facts(machine: Mapping[str, Any]) -> dict[str, Any]:
    """What the machine gave the battery (`check`'s findings), and AppArmor's
    restriction of user namespaces (Ubuntu 23.10+: bubblewrap then needs a profile)."""
    try:
        with open("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") as handle:
            apparmor: str | None = handle.read().strip()
    except OSError:
        apparmor = None
    return {"kernel": machine.get("kernel"), "landlock_abi": machine.get("landlock_abi"),
            "seccomp_user_notification": machine.get("seccomp", {}).get("user_notification"),
            "memfd_noexec": machine.get("memfd_noexec"),
            "apparmor_restrict_unprivileged_userns": apparmor}


def show(found: Mapping[str, Any]) -> str:
    """The report for a person: a verdict line, what the machine lacks of what a
    sandbox uses, then one line a probe (held or OPEN, its name, what it tried, what was
    seen), and for an open one why it may be."""
    rows = found["rows"]
    open_rows = [row for row in rows if not row["held"]]
    names = ", ".join(row["name"] for row in open_rows)
    lines = [f"probe: every wall held ({len(rows)} of {len(rows)})" if not open_rows else
             f"probe: OPEN: {len(open_rows)} of {len(rows)} ({names})", ""]
    if "machine" in found:
        facts = found["machine"]
        missing = lacks(facts)
        lines[1:1] = [f"kernel {facts.get('kernel')}, Landlock ABI {facts.get('landlock_abi')}; "
                      + (f"lacks: {'; '.join(missing)}" if missing else
                         "it has every right and call a sandbox uses")]
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        mark = "held" if row["held"] else "OPEN"
        lines.append(f"  {mark}  {row['name']:{width}}  {row['tries']}: {row['saw']}")
        if not row["held"]:
            lines.append(f"        {'':{width}}  held means {row['held_means']}; "
                         f"{row['why']}")
    return "\n".join(lines)
