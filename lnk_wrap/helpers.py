"""How one helper of the chain names another on a command line.

A line that `wrap` prints is run later, by another process, maybe with another PATH, so
every helper is named by absolute paths: this interpreter, run isolated (`-I`: no
PYTHONPATH, no user site, no script folder on sys.path, so the caller's environment
cannot swap our code), and the helper's module or, from a checkout, its bin/ launcher.
"""

from __future__ import annotations

import importlib.util
import os
import sys

__all__ = ["HELPERS", "helper_argv"]

# Console script name → module with a main().
HELPERS = {
    "launch": ("lnk-sandbox-launch", "lnk_wrap.launch"),
    "init": ("lnk-sandbox-init", "lnk_wrap.init"),
}

_CHECKOUT_BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin")


def helper_argv(helper: str) -> list[str]:
    script, module = HELPERS[helper]
    launcher = os.path.join(_CHECKOUT_BIN, script)
    if os.path.isfile(launcher):
        return [sys.executable, "-I", launcher]
    if importlib.util.find_spec(module) is None:
        raise RuntimeError(f"{module} is not importable by {sys.executable}")
    return [sys.executable, "-I", "-m", module]
