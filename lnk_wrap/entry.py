"""The `lnk-sandbox` script that bin/setup writes into the venv in place of pip's.

pip's console script starts the venv's interpreter with `site`, which processes every
`.pth` file there (an editable install's import hook alone cost 13 ms here), and then
imports `re` for its own sake: 20 ms before the first line of ours, at every
`lnk-sandbox run`. This script starts the interpreter as every helper is started
(lnk_wrap/_start.py): `-I -S` (isolated: the caller's PYTHONPATH and user site cannot
swap our code; no `site`), with our packages' folder first on sys.path and the venv's
site-packages (docopt-ng, h11, orjson) after the standard library, as `site` would put
it. The paths are written in, once, by `python -m lnk_wrap.entry TARGET [MODULE]` in the
venv; MODULE (default lnk_wrap.cli) is the package whose `main` the script runs
(lnk-sandbox-mcp-remote: lnk_mcpremote.main, which runs as the person's tool and so is
started isolated too: no PYTHONPATH of its caller's can swap its code).
"""

from __future__ import annotations

import os
import sys

from lnk_wrap.helpers import package_root

__all__ = ["EntryError", "main", "script"]

# Linux reads at most this much of a `#!` line (BINPRM_BUF_SIZE, 256 with its NUL).
MAX_SHEBANG_BYTES = 255


class EntryError(Exception):
    """The script cannot be written; pip's stays (slower, but it works)."""


# The modules a script may be written for: each one's `main`, a console script of ours.
ENTRY_MODULES = ("lnk_wrap.cli", "lnk_mcpremote.main")


def script(python: str, root: str, site_packages: list[str],
           module: str = "lnk_wrap.cli") -> str:
    """The script's text. `python` takes one argument on the `#!` line: `-IS`;
    `site_packages`: the venv's folders of libraries (pure, then compiled, if apart)."""
    if module not in ENTRY_MODULES:
        raise EntryError(f"{module!r}: not a module a script is written for")
    shebang = f"#!{python} -IS"
    if any(character.isspace() for character in python) or not os.path.isabs(python):
        raise EntryError(f"{python!r}: a `#!` line needs an absolute path without spaces")
    if len(shebang.encode()) > MAX_SHEBANG_BYTES:
        raise EntryError(f"{python!r}: longer than a `#!` line takes")
    return (
        f"{shebang}\n"
        f'"""{module}, written by bin/setup (lnk_wrap/entry.py says why): the interpreter\n'
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
    if len(sys.argv) not in (2, 3):
        sys.stderr.write("usage: python -m lnk_wrap.entry TARGET [MODULE] (the venv's"
                         " bin/lnk-sandbox, or another console script of ours)\n")
        sys.exit(2)
    module = sys.argv[2] if len(sys.argv) == 3 else "lnk_wrap.cli"
    import sysconfig

    target = sys.argv[1]
    libraries = [sysconfig.get_path("purelib")]
    if sysconfig.get_path("platlib") not in libraries:
        libraries.append(sysconfig.get_path("platlib"))
    try:
        text = script(os.path.realpath(sys.executable), package_root(), libraries, module)
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
