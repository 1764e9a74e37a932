"""lnk-sandbox learn: run a command once with every program open and its wire logged, and
say which programs ran and which hosts it was refused.

A list written by hand misses the helper a program starts only now and then (git's
git-remote-https, a compiler's linker), and a run that fails on it says only
"Permission denied". So `learn` runs the command once under the spec's other grants,
every program open, with the exec watch recording each program started (and each
script's interpreter), and prints the `[commands]` list to put in the spec. It writes
nothing: the person adds the lines, so what a spec runs is still what they wrote. It
never offers a program the sandbox could replace (in a folder it writes, or a temp
folder), and marks interpreters, which run any code they are given.

The network: the run keeps the spec's hosts and its wire (a spec of no network gets a
wire of its own, with no host, so every call is refused and logged; a spec of the
machine's network has no wire, so nothing is seen). It reads its run's lines of the
wire's log and offers the `[network] hosts` refused by name (lnk_wrap.learn_network:
grouped, providers' hosts never). So that a name looked up directly (a database client,
not through the proxy) is logged too, a spec whose sandbox has no DNS of its own gets it
for the run: one endpoint, LEARN_DNS_ENDPOINT, a name that never resolves anywhere.
A spec that names its wire and its HOME ([agent], a recipe) learns on a wire of its own,
so that its refusals never pause the named one; one that names a wire and lets the
launcher choose its HOME learns on that wire (its HOME is the wire's), and its refusals
count toward the wire's pause, as any run's do.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from lnk_common.policy import Policy
from lnk_execwatch.judge import is_interpreter, offer
from lnk_wrap.learn_network import Seen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from lnk_wrap.runs import Run

__all__ = ["LEARN_DNS_ENDPOINT", "MAC_TEMP_FOLDERS", "TEMP_FOLDERS", "Learned",
           "format_commands", "learn", "learn_macos", "learning_policy"]

# The sandbox's own temp folders: anything in them was written by the program.
TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")
# The endpoint that gives a learning run its own DNS when the spec's sandbox has none:
# `.invalid` never resolves (RFC 6761 §6.4), so a call to it reaches nothing, and the
# DNS answers every other name NXDOMAIN and logs it.
# A Mac's temp folders as Seatbelt's reports name them (resolved: /tmp is /private/tmp;
# /private/var/folders holds each user's $TMPDIR).
MAC_TEMP_FOLDERS = ("/private/tmp", "/private/var/tmp", "/private/var/folders")
LEARN_DNS_NAME = "dns-for-learn.invalid"
LEARN_DNS_ENDPOINT = LEARN_DNS_NAME + ":9"


@dataclass
class Learned:
    """What one learning run found: its exit status, the programs to list and those not
    offered (with why), and what its wire saw (None: it had no wire)."""

    status: int
    offered: list[str]
    refused: list[tuple[str, str]]
    network: Seen | None = None
    runs: list[Run] = field(default_factory=list)


def learning_policy(policy: Policy, record: str) -> Policy:
    """The policy a learning run gets: the spec's every other grant kept (its wire and
    model verb included: a copy made field by field had dropped them, and with a model
    verb the program then ran with the harness's keys in its environment); [commands]
    opened, with the record; a wire (with no host) where the spec had no network; DNS
    where its sandbox had none; a wire of its own where the spec names its HOME."""
    changes: dict[str, object] = {"commands": (), "learn": record}
    if policy.name and policy.home:
        # A wire of its own: its refusals never count toward the named wire's pause (a
        # learning run is refused much, by design); its HOME is the spec's all the same.
        changes["name"] = ""
    if policy.network == "host":
        return policy.replace(**changes)
    if policy.network == "none":
        changes["network"] = "proxy"
    from lnk_common import endpoints

    if not endpoints.has_dns(endpoints.entries(policy.endpoints, policy.lan)):
        changes["endpoints"] = (*policy.endpoints, LEARN_DNS_ENDPOINT)
    return policy.replace(**changes)


def learn(policy: Policy, command: list[str], env: Mapping[str, str]) -> Learned:
    """Run `command` learning: its exit status, the programs to list and not, and the
    hosts its wire was refused."""
    from lnk_wrap.launch import launch

    folder = os.path.join(policy.settings, "sandbox", "learn")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    record = os.path.join(folder, os.urandom(8).hex())
    os.close(os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    learning = learning_policy(policy, record)
    found = Learned(status=0, offered=[], refused=[])
    try:
        found.status = launch(learning, command, env, on_run=found.runs.append)
        with open(record, encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
    finally:
        os.unlink(record)
    seen: list[str] = []
    for line in lines:
        kind, _, rest = line.partition("\t")
        if kind == "unrecorded":  # the watch's record was full (MAX_LEARN_BYTES)
            print(f"lnk-sandbox: learn: the record was full (a program ran thousands of new "
                  f"files); {rest} programs run after were not recorded", file=sys.stderr)
        elif rest:
            seen.append(rest.split("\t")[0])
    found.offered, found.refused = offer(seen, listed=policy.commands,
                                         replaceable=(*policy.write, *TEMP_FOLDERS))
    if found.runs:
        found.network = _seen(policy, found.runs[0])
    return found


def learn_macos(policy: Policy, command: list[str], env: Mapping[str, str], *,
                sandbox_exec: str) -> Learned:
    """`learn --platform macos`: the command run once by the Mac's parent (lnk_wrap.
    seatbelt_run) under a profile that allows every program with report, the programs
    named from Seatbelt's reports (lnk_wrap.seatbelt_log), offered as on Linux. Its
    wire's hosts are not read here (`log WIRE --refused` lists them). Never run on a
    Mac: the words of an allowed report are the seed's, not seen (seatbelt_log)."""
    from lnk_wrap.seatbelt import mac_path
    from lnk_wrap.seatbelt_run import run_reported

    # Policy.learn marks the run as a learning one; on a Mac the reports are the record,
    # so this path (never made) is only the mark.
    learning = policy.replace(commands=(), learn=os.path.join(policy.settings, "sandbox",
                                                              "learn", "seatbelt-reports"))
    status, seen = run_reported(learning, command, env, sandbox_exec=sandbox_exec)
    found = Learned(status=status, offered=[], refused=[])
    written = tuple(mac_path(path) for path in policy.write)
    found.offered, found.refused = offer(seen, listed=tuple(mac_path(path) for path in
                                                            policy.commands),
                                         replaceable=(*written, *MAC_TEMP_FOLDERS))
    return found


def _seen(policy: Policy, run: Run) -> Seen:
    """What the run's wire refused, from its lines of the wire's log."""
    from lnk_common.wirelog import log_path
    from lnk_wrap.learn_network import run_lines, seen_on_wire

    lines: list[str] = []
    path = log_path(run.settings, run.wire)
    for name in (path + ".1", path):  # the older file first (lnk_common.boundedlog)
        lines += _read_lines(name)
    return seen_on_wire(run_lines(lines, run.ident), hosts=policy.hosts,
                        endpoints=policy.endpoints, ignore=(LEARN_DNS_NAME,))


def _read_lines(path: str) -> list[str]:
    from lnk_common.filewrite import read_whole

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    try:
        data = read_whole(fd)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").splitlines()


def format_commands(listed: tuple[str, ...], offered: list[str],
                    written: Mapping[str, str] | None = None) -> str:
    """The `[commands]` table with what was listed and what to add, each marked; a listed
    entry in the spec's own words (`written`: lnk_wrap.spec.commands_as_written, by the
    path it resolves to). With nothing to list, no table (an empty `run` is refused by
    the spec's parser), but a comment saying so."""
    if not listed and not offered:
        return ("# nothing to list: the command started no program a [commands] list may "
                "hold (the lines on stderr say why);\n# an empty `run = []` is refused, so none is "
                "printed")
    spelled = written or {}
    entries = ([(spelled.get(path, path), path, "listed") for path in listed]
               + [(path, path, "new") for path in offered])
    width = max((len(repr(shown)) for shown, _, _ in entries), default=0) + 1
    lines = ["[commands]", "run = ["]
    for shown, path, state in entries:
        quoted = '"' + shown.replace("\\", "\\\\").replace('"', '\\"') + '",'
        note = state + ("; an interpreter: runs any code it is given"
                        if is_interpreter(path) or is_interpreter(shown) else "")
        lines.append(f"    {quoted:{width + 2}} # {note}")
    lines.append("]")
    return "\n".join(lines)
