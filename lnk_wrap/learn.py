"""lnk-sandbox learn: run a command once with every program open, and say which ran.

A list written by hand misses the helper a program starts only now and then (git's
git-remote-https, a compiler's linker), and a run that fails on it says only
"Permission denied". So `learn` runs the command once under the spec's other grants,
every program open, with the exec watch recording each program started (and each
script's interpreter), and prints the `[commands]` list to put in the spec. It writes
nothing: the person adds the lines, so what a spec runs is still what they wrote. It
never offers a program the sandbox could replace (in a folder it writes, or a temp
folder), and marks interpreters, which run any code they are given.
"""

from __future__ import annotations

import os
import sys

from lnk_common.policy import Policy
from lnk_execwatch.judge import is_interpreter, offer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["TEMP_FOLDERS", "format_commands", "learn"]

# The sandbox's own temp folders: anything in them was written by the program.
TEMP_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm")


def learn(policy: Policy, command: list[str], env: Mapping[str, str]
          ) -> tuple[int, list[str], list[tuple[str, str]]]:
    """Run `command` learning; (its exit status, programs to list, programs not offered
    with why)."""
    from lnk_wrap.launch import launch

    folder = os.path.join(policy.settings, "sandbox", "learn")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    record = os.path.join(folder, os.urandom(8).hex())
    os.close(os.open(record, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    # The spec's every other grant kept (its wire and model verb included: a copy made
    # field by field had dropped them, and with a model verb the program then ran with
    # the harness's keys in its environment); only [commands] opened, and the record.
    learning = policy.replace(commands=(), learn=record)
    try:
        status = launch(learning, command, env)
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
    offered, refused = offer(seen, listed=policy.commands,
                             replaceable=(*policy.write, *TEMP_FOLDERS))
    return status, offered, refused


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
