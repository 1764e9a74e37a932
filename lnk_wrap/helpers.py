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

__all__ = ["ASK_WRAP_AGAIN", "HELPERS", "HELPER_MODULES", "KEPT_LINE_FORMAT", "KEPT_LINE_SCRIPT",
           "KEPT_LINE_SHELL", "helper_argv", "kept_line", "missing_helpers", "package_root"]

# Each helper's module, as lnk_wrap/_start.py imports it (a test holds the two equal).
HELPER_MODULES = {"launch": "lnk_wrap.launch", "init": "lnk_wrap.init",
                  "exec-watch": "lnk_execwatch.main", "proxy": "lnk_proxy.main",
                  "relay": "lnk_relay.main", "dns-helper": "lnk_dns.helper",
                  "ask": "lnk_ask.main"}
HELPERS = tuple(HELPER_MODULES)
# How every refusal of a kept line ends (the same words in _start.py and KEPT_LINE_SCRIPT).
ASK_WRAP_AGAIN = "; ask `lnk-sandbox wrap` again for a new line"
_START = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_start.py")

# The format of a kept line: what `_start.py` and the launcher's options (Policy.to_argv)
# mean. Raised when a line an older install printed would be read otherwise by this one
# (an option renamed or gone, a value read another way): the older line then stops with
# one line saying so, not with whatever the new reading makes of it. An upgrade that
# keeps the format keeps every kept line working (tests/test_kept_lines.py's golden line).
KEPT_LINE_FORMAT = 1
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


def package_root() -> str:
    """The folder that holds our packages: a checkout, or site-packages."""
    return os.path.dirname(os.path.dirname(_START))


def missing_helpers(root: str = "") -> list[str]:
    """The helpers whose module is no longer in the install at `root` (this one unless
    given): the launcher looks before it starts any, so that an install changed under a
    kept line is said once, by the launcher, and not by a helper halfway through a start
    (the init inside the sandbox, where the install has another path)."""
    root = root or package_root()
    return [helper for helper, module in HELPER_MODULES.items()
            if not os.path.isfile(os.path.join(root, *module.split(".")) + ".py")]


def helper_argv(helper: str, *, inside: str = "") -> list[str]:
    """The argv that starts `helper`; `inside`: where our packages are bound in a
    sandbox, for a helper that runs there (the init)."""
    if helper not in HELPERS:
        raise ValueError(f"no helper named {helper!r}")
    start = f"{inside}/lnk_wrap/_start.py" if inside else _START
    return [os.path.realpath(sys.executable), "-I", "-S", start, helper]


def kept_line(arguments: list[str], *, python: str = "", start: str = "",
              python_version: str = "") -> list[str]:
    """The line `wrap` prints: the launcher with `arguments` (its options, `--`, the
    command), through the shell's check (KEPT_LINE_SCRIPT). `python`, `start` and
    `python_version`: this interpreter, this install's `_start.py` and this Python's
    version unless given (a golden test gives them)."""
    python = python or os.path.realpath(sys.executable)
    python_version = python_version or f"{sys.version_info[0]}.{sys.version_info[1]}"
    return [KEPT_LINE_SHELL, "-c", KEPT_LINE_SCRIPT, "lnk-sandbox",
            python, "-I", "-S", start or _START,
            "--kept-line", f"{KEPT_LINE_FORMAT}:{python_version}", "launch", *arguments]
