"""The one entry point of every helper on a command line: `python -I -S _start.py HELPER …`,
and of the commands (`cli`) where no entry script written by bin/setup is at hand (bin/lnk-sandbox
without a venv).

A sandbox start pays for every helper's interpreter start, and `site` is the biggest
part of it here (an editable install's import hook alone took 17 ms), so helpers run
without it (-S) and isolated (-I: no PYTHONPATH, no user site, so the caller's
environment cannot swap our code). This file puts the folder that holds our packages
(a checkout, or site-packages) first on sys.path and runs the helper.

A line `wrap` printed (a kept line, lnk_wrap.helpers) comes with `--kept-line
FORMAT:PYTHON`: the line's format and the Python version it was made for, checked here
before anything else is imported, so that a line this install or this interpreter no
longer fits stops with exit 125 and one line, never a traceback. A helper whose code is
gone or changed (an ImportError) is one line and 125 too. This file is read by whatever
Python the line's path now leads to: it keeps to what every Python from 3.6 reads.
"""

import os
import sys

EXIT_SANDBOX_FAILED = 125
# lnk_wrap.helpers.ASK_WRAP_AGAIN, written out: nothing else is imported before the checks.
AGAIN = "; ask `lnk-sandbox wrap` again for a new line"

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)


def _refuse(why: str) -> None:
    sys.stderr.write(f"lnk-sandbox: {why}\n")
    sys.exit(EXIT_SANDBOX_FAILED)


_KEPT = sys.argv[1:2] == ["--kept-line"]
if _KEPT:
    stamp = sys.argv[2] if len(sys.argv) > 2 else ""
    del sys.argv[1:3]
    made_format, _, made_for = stamp.partition(":")
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if made_for != running:
        _refuse(f"this kept line was made for Python {made_for or '?'}, and its interpreter is "
                f"Python {running} now ({sys.executable}){AGAIN}")
    try:
        from lnk_wrap.helpers import KEPT_LINE_FORMAT
    except ImportError as error:
        _refuse(f"the install this kept line names, {_ROOT}, changed: {error}{AGAIN}")
    if made_format != str(KEPT_LINE_FORMAT):
        _refuse(f"this kept line is of format {made_format or '?'}, made by another version of "
                f"lnk-sandbox; the install at {_ROOT} reads format {KEPT_LINE_FORMAT}{AGAIN}")
if sys.argv[1:2] == ["--site-packages"] and len(sys.argv) > 2:
    # A helper that needs libraries besides ours (the proxy: h11) is told where they are.
    sys.argv.pop(1)
    sys.path.append(sys.argv.pop(1))
_HELPER = sys.argv.pop(1) if len(sys.argv) > 1 else ""
try:
    if _HELPER == "launch":
        from lnk_wrap.launch import main
    elif _HELPER == "init":
        from lnk_wrap.init import main
    elif _HELPER == "exec-watch":
        from lnk_execwatch.main import main
    elif _HELPER == "proxy":
        from lnk_proxy.main import main
    elif _HELPER == "relay":
        from lnk_relay.main import main
    elif _HELPER == "dns-helper":
        from lnk_dns.helper import main
    elif _HELPER == "ask":
        from lnk_ask.main import main
    elif _HELPER == "cli":
        from lnk_wrap.cli import main
    else:
        _refuse(f"no helper named {_HELPER!r}")
    main()
except ImportError as error:
    # Our code or a library it needs is gone or changed under this file (an install
    # moved, removed or upgraded in part): said in one line, whenever it is found out.
    _refuse(f"the install at {_ROOT} cannot start its {_HELPER}: {error}"
            + (AGAIN if _KEPT else " (bin/setup, or pip install, puts it back)"))
