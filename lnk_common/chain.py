"""How one helper of the chain names another on a command line.

Every helper starts through one entry file, lnk_wrap/_start.py, run by this interpreter
isolated and without `site` (`python -I -S _start.py HELPER …`: _start.py says why), and
by absolute paths, since a line is run later, by another process, maybe with another PATH.
Any helper that starts another (the launcher each helper, the proxy the asker) builds its
argv here; the line `wrap` prints, and its check, are lnk_wrap.helpers'.
"""

from __future__ import annotations

import os
import sys

__all__ = ["HELPERS", "HELPER_MODULES", "START", "helper_argv", "missing_helpers", "package_root"]

# Each helper's module, as lnk_wrap/_start.py imports it (a test holds the two equal).
HELPER_MODULES = {"launch": "lnk_wrap.launch", "init": "lnk_wrap.init",
                  "exec-watch": "lnk_execwatch.main", "proxy": "lnk_proxy.main",
                  "relay": "lnk_relay.main", "dns-helper": "lnk_dns.helper",
                  "ask": "lnk_ask.main"}
HELPERS = tuple(HELPER_MODULES)
# The one entry file (a path, not an import: no package imports the launcher's).
START = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "lnk_wrap", "_start.py")


def package_root() -> str:
    """The folder that holds our packages: a checkout, or site-packages."""
    return os.path.dirname(os.path.dirname(START))


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
    start = f"{inside}/lnk_wrap/_start.py" if inside else START
    return [os.path.realpath(sys.executable), "-I", "-S", start, helper]
