"""How one helper of the chain names another on a command line, and the line `wrap` prints.

A line that `wrap` prints is run later, by another process, maybe with another PATH, so
every helper is named by absolute paths: this interpreter, isolated and without `site`
(lnk_wrap/_start.py says why), and the one entry file that starts any helper.

A harness keeps that line (a kept line) and may run it after the interpreter, the install
or the project itself has changed. So the line starts with `/bin/sh` (the one program
there on every machine the sandbox runs on) and a fixed script that checks the Python
and the install it names are still there before it `exec`s them; `_start.py` then
checks the line's stamp (its format, and the Python version it was made for). Each way a
kept line can go stale is exit 125 and one line saying what moved and to ask `wrap`
again, never a traceback (docs/decisions/0002-kept-lines.md: what it costs, measured).
"""

from __future__ import annotations

import os
import sys

from lnk_common.chain import START

__all__ = ["ASK_WRAP_AGAIN", "KEPT_LINE_FORMAT", "KEPT_LINE_SCRIPT", "KEPT_LINE_SHELL", "kept_line"]

# How every refusal of a kept line ends (the same words in _start.py and KEPT_LINE_SCRIPT).
ASK_WRAP_AGAIN = "; ask `lnk-sandbox wrap` again for a new line"

# The format of a kept line: what `_start.py` and the launcher's options (Policy.to_argv)
# mean. Raised when a line an older install printed would be read otherwise by this one
# (an option renamed or gone, a value read another way): the older line then stops with
# one line saying so, not with whatever the new reading makes of it. An upgrade that
# keeps the format keeps every kept line working (tests/test_kept_lines.py's golden line).
# 2: the policy's options from one table, one spelling (lnk_common.policy.option_of):
# `--run` became `--command`, `--write-dot-files` became `--write-dot-file`.
KEPT_LINE_FORMAT = 2
# The line's first word: POSIX puts a shell there, and nothing of ours or of Python's
# can be gone from it, so even a line whose Python was removed ends in our one line.
KEPT_LINE_SHELL = "/bin/sh"
# The shell's script: fixed text (what the line names is in its positional parameters,
# "$1" the Python and "$4" `_start.py`, never parsed by the shell), on one line (a
# harness may read the printed line as one line) and without a single quote (the shell
# form quotes it whole). It checks, then `exec`s the line's Python: no process of its own
# stays, a signal sent to the line's pid reaches the launcher.
KEPT_LINE_SCRIPT = (
    'k() { printf "lnk-sandbox: %s; ask \\`lnk-sandbox wrap\\` again for a new line\\n" "$1" >&2;'
    " exit 125; }; "
    '[ -x "$1" ] || k "the Python this kept line names, $1, is gone (removed or moved)"; '
    '[ -f "$4" ] || k "the install this kept line names, ${4%/lnk_wrap/_start.py}, is gone'
    ' (moved or removed)"; '
    'exec "$@"'
)


def kept_line(arguments: list[str], *, python: str = "", start: str = "",
              python_version: str = "") -> list[str]:
    """The line `wrap` prints: the launcher with `arguments` (its options, `--`, the
    command), through the shell's check (KEPT_LINE_SCRIPT). `python`, `start` and
    `python_version`: this interpreter, this install's `_start.py` and this Python's
    version unless given (a golden test gives them)."""
    python = python or os.path.realpath(sys.executable)
    python_version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    return [KEPT_LINE_SHELL, "-c", KEPT_LINE_SCRIPT, "lnk-sandbox",
            python, "-I", "-S", start or START,
            "--kept-line", f"{KEPT_LINE_FORMAT}:{python_version}", "launch", *arguments]
