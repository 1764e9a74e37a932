"""lnk-sandbox log: a wire's log, for a person (or --json, a line of JSON per call)."""

from __future__ import annotations

import os
import sys
import time

from lnk_common.wirelog import log_path, parse_line

__all__ = ["FOLLOW_SECONDS", "show_log"]

# How often --follow looks for new lines.
FOLLOW_SECONDS = 0.25


def _wires(settings: str) -> list[str]:
    folder = os.path.join(settings, "sandbox", "wires")
    try:
        return sorted(name for name in os.listdir(folder)
                      if os.path.isfile(log_path(settings, name)))
    except FileNotFoundError:
        return []


def _render(wire: str, line: str, as_json: bool) -> str | None:
    entry = parse_line(line)
    if entry is None:
        return None
    if as_json:
        import orjson

        return orjson.dumps({"wire": wire, **entry}).decode()
    detail = line.rstrip("\n").split("\t")[3]
    return f"{entry['time']}  {wire}  {entry['event']:7}  {entry['target']}  {detail}"


def show_log(settings: str, wire: str | None, *, follow: bool, as_json: bool) -> int:
    wires = [wire] if wire else _wires(settings)
    if wire and not os.path.isfile(log_path(settings, wire)):
        print(f"lnk-sandbox: no log for a wire named {wire!r} "
              f"(known: {', '.join(_wires(settings)) or 'none'})", file=sys.stderr)
        return 1
    handles = {name: open(log_path(settings, name), encoding="utf-8",  # noqa: SIM115
                          errors="replace") for name in wires}
    try:
        while True:
            for name, handle in handles.items():
                for line in handle:
                    shown = _render(name, line, as_json)
                    if shown is not None:
                        print(shown, flush=follow)
            if not follow:
                return 0
            time.sleep(FOLLOW_SECONDS)
    except KeyboardInterrupt:
        return 0
    finally:
        for handle in handles.values():
            handle.close()
