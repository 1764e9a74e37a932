"""The `lnk-sandbox` script that bin/setup writes into the venv in place of pip's.

pip's console script starts the venv's interpreter with `site`, which processes every
`.pth` file there (an editable install's import hook alone cost 13 ms here), and then
imports `re` for its own sake: 20 ms before the first line of ours, at every
`lnk-sandbox run`. This script starts the interpreter as every helper is started
(lnk_wrap/_start.py): `-I -S` (isolated: the caller's PYTHONPATH and user site cannot
swap our code; no `site`), with our packages' folder first on sys.path and the venv's
site-packages (docopt-ng, h11, orjson) after the standard library, as `site` would put
it. The paths are written in, once, by `python -m lnk_wrap.entry TARGET` in the venv.
"""

from __future__ import annotations

import os
import sys

from lnk_common.chain import package_root

__all__ = ["SCRIPTS", "EntryError", "main", "script"]

# The console scripts written so (their name in the venv's bin/, the module they run):
# the commands, and lnk-sandbox-ask, which a script or administrator runs directly.
SCRIPTS = {"lnk-sandbox": "lnk_wrap.cli", "lnk-sandbox-ask": "lnk_ask.main",
           "lnk-sandbox-mcp-remote": "lnk_mcpremote.main"}
# Linux reads at most this much of a `#!` line (BINPRM_BUF_SIZE, 256 with its NUL).
MAX_SHEBANG_BYTES = 255


class EntryError(Exception):
    """The script cannot be written; pip's stays (slower, but it works)."""


def script(python: str, root: str, site_packages: list[str],
           module: str = "lnk_wrap.cli") -> str:
    """The script's text. `python` takes one argument on the `#!` line: `-IS`;
    `site_packages`: the venv's folders of libraries (pure, then compiled, if apart);
    `module`: whose `main` it runs (one of SCRIPTS' values)."""
    if module not in SCRIPTS.values():
        raise EntryError(f"{module!r}: not a module a script is written for (no script of "
                         "ours runs it)")
    name = next(name for name, runs in SCRIPTS.items() if runs == module)
    shebang = f"#!{python} -IS"
    if any(character.isspace() for character in python) or not os.path.isabs(python):
        raise EntryError(f"{python!r}: a `#!` line needs an absolute path without spaces")
    if len(shebang.encode()) > MAX_SHEBANG_BYTES:
        raise EntryError(f"{python!r}: longer than a `#!` line takes")
    return (
        f"{shebang}\n"
        f'"""{name}, written by bin/setup (lnk_wrap/entry.py says why): the interpreter\n'
        'without `site`, isolated, as every helper of the chain starts."""\n'
        "import sys\n"
        "\n"
        f"sys.path.insert(0, {root!r})\n"
        f"sys.path.extend({site_packages!r})\n"
        f"from {module} import main\n"
        "\n"
        "main()\n"
    )


def main() -> None:
    if len(sys.argv) != 2 or os.path.basename(sys.argv[1]) not in SCRIPTS:
        sys.stderr.write("usage: python -m lnk_wrap.entry TARGET (the venv's bin/lnk-sandbox, "
                         "bin/lnk-sandbox-ask or bin/lnk-sandbox-mcp-remote)\n")
        sys.exit(2)
    import sysconfig

    target = sys.argv[1]
    libraries = [sysconfig.get_path("purelib")]
    if sysconfig.get_path("platlib") not in libraries:
        libraries.append(sysconfig.get_path("platlib"))
    try:
        text = script(os.path.realpath(sys.executable), package_root(), libraries,
                      SCRIPTS[os.path.basename(target)])
    except EntryError as error:
        # Slower, not less safe: setup goes on, and says so.
        sys.stderr.write(f"lnk-sandbox: {error}; pip's script stays in {target} "
                         "(it starts Python with `site`: ~15 ms more at every run)\n")
        return
    partial = f"{target}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(partial, 0o755)  # noqa: S103 - a program's mode, as pip gives its scripts
    os.replace(partial, target)


if __name__ == "__main__":
    main()
