"""How one helper of the chain names another on a command line.

A line that `wrap` prints is run later, by another process, maybe with another PATH, so
every helper is named by absolute paths: this interpreter, isolated and without `site`
(lnk_wrap/_start.py says why), and the one entry file that starts any helper.
"""

from __future__ import annotations

import os
import sys

__all__ = ["HELPERS", "helper_argv", "package_root"]

HELPERS = ("launch", "init", "exec-watch", "proxy", "relay", "dns-helper", "ask")
_START = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_start.py")


def package_root() -> str:
    """The folder that holds our packages: a checkout, or site-packages."""
    return os.path.dirname(os.path.dirname(_START))


def helper_argv(helper: str, *, inside: str = "") -> list[str]:
    """The argv that starts `helper`; `inside`: where our packages are bound in a
    sandbox, for a helper that runs there (the init)."""
    if helper not in HELPERS:
        raise ValueError(f"no helper named {helper!r}")
    start = f"{inside}/lnk_wrap/_start.py" if inside else _START
    return [os.path.realpath(sys.executable), "-I", "-S", start, helper]
