"""lnk-sandbox stop / on-stop / paused / resume: the wires' controls, for a person."""

from __future__ import annotations

import subprocess
import sys

from lnk_common import wirestate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["ON_STOP_SECONDS", "controls"]

# An on-stop command (e.g. `lnk agent stop NAME`) that has not ended after this long is
# left running; stop goes on with the next.
ON_STOP_SECONDS = 30


def controls(settings: str, arguments: Mapping[str, object], command: list[str]) -> int:
    if arguments["stop"]:
        if arguments["--clear"]:
            lifted = wirestate.clear_stop(settings)
            print("the kill switch is lifted" if lifted else "the kill switch was not on")
            return 0
        wirestate.stop(settings)
        print("the kill switch is on: every proxy refuses every call and closes open ones")
        failed = 0
        for name, argv in wirestate.on_stop_commands(settings):
            try:
                done = subprocess.run(argv, check=False, timeout=ON_STOP_SECONDS,
                                      stdin=subprocess.DEVNULL)
                status = f"exit {done.returncode}"
                failed += done.returncode != 0
            except (OSError, subprocess.TimeoutExpired) as error:
                status = f"did not run to its end ({error})"
                failed += 1
            print(f"on-stop {name}: {' '.join(argv)}: {status}")
        return 1 if failed else 0
    if arguments["on-stop"]:
        registered = wirestate.on_stop_commands(settings)  # (name, argv) pairs
        if arguments["--list"]:
            for name, argv in registered:
                print(f"{name}\t{' '.join(argv)}")
            if not registered:  # on stderr: stdout stays a line a registration
                print("lnk-sandbox: no on-stop command is registered (stop runs none)",
                      file=sys.stderr)
            return 0
        remove = arguments["--remove"]
        if isinstance(remove, str):
            if wirestate.remove_on_stop(settings, remove):
                print(f"removed the on-stop command {remove}; "
                      f"{len(registered) - 1 or 'none'} left")
                return 0
            names = ", ".join(name for name, _ in registered) or "none is registered"
            print(f"lnk-sandbox: no on-stop command named {remove!r} (registered: {names}); "
                  "nothing was removed", file=sys.stderr)
            return 1
        given = arguments["--name"]
        print(wirestate.register_on_stop(settings, command,
                                         given if isinstance(given, str) else ""))
        return 0
    if arguments["paused"]:
        found = wirestate.paused_wires(settings)
        if arguments["--json"]:
            import orjson

            sys.stdout.buffer.write(orjson.dumps({"paused": found}, option=orjson.OPT_INDENT_2)
                                    + b"\n")
        else:
            for entry in found:
                print(f"{entry['wire']}\tsince {entry['since']}\t{entry['reason']}")
        return 0
    wire = arguments["WIRE"]
    if isinstance(wire, str) and wirestate.resume(settings, wire):
        print(f"the wire {wire} is resumed")
        return 0
    print(f"lnk-sandbox: the wire {wire} is not paused", file=sys.stderr)
    return 1
