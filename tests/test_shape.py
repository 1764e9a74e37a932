"""No product function is over MAX_FUNCTION_LINES lines (issue 30, step 3; record 0041).

An AST walk over every module of our packages (lnk_*/, but the vendored copy of CPython's
tomllib in lnk_wrap/vendor/, which is kept as upstream wrote it). A function's lines run
from its `def` to its last line, its docstring, comments and blank lines included: what
a reader scrolls through. A nested function counts on its own and inside its outer one.

KNOWN_LONG lists functions allowed over the limit for a while, each with its owner; the
test fails when a listed one is no longer over it, so the list only shrinks. It is empty
since issue 30's branches merged.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A function a newcomer reads whole, on one screen and a half, as a table of contents
# of the smaller ones it calls (docs/decisions/0041-packages-and-functions.md).
MAX_FUNCTION_LINES = 80
# Kept as upstream wrote it (lnk_wrap/vendor/README.md): not ours to split.
NOT_OURS = ("lnk_wrap/vendor/",)

# (module, qualified name) -> the issue 30 branch splitting it; remove at its merge.
KNOWN_LONG: dict[tuple[str, str], str] = {}


def function_lengths(source: str) -> dict[str, tuple[int, int]]:
    """Each function's qualified name (`Class.method`, `outer.<locals>.inner`) and its
    (first line, number of lines)."""
    found: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                last = child.end_lineno if child.end_lineno is not None else child.lineno
                found[name] = (child.lineno, last - child.lineno + 1)
                visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def product_modules() -> list[str]:
    """Every module of our packages (a folder lnk_* with an __init__.py), as a path
    relative to the repository."""
    modules = []
    for init in sorted(ROOT.glob("lnk_*/__init__.py")):
        for path in sorted(init.parent.rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith(NOT_OURS):
                modules.append(relative)
    return modules


@functools.cache
def long_functions() -> dict[tuple[str, str], tuple[int, int]]:
    """(module, function) -> (first line, lines) of each product function over the
    limit (read once a run)."""
    found = {}
    for module in product_modules():
        for name, (line, count) in function_lengths((ROOT / module).read_text()).items():
            if count > MAX_FUNCTION_LINES:
                found[(module, name)] = (line, count)
    return found


def test_the_walk_sees_every_package() -> None:
    modules = product_modules()
    packages = {module.split("/", 1)[0] for module in modules}
    assert packages == {init.parent.name for init in ROOT.glob("lnk_*/__init__.py")}
    assert "lnk_wrap/cli.py" in modules
    assert not any(module.startswith(NOT_OURS) for module in modules)


def test_a_function_at_the_limit_passes_and_one_past_it_does_not() -> None:
    def source(lines: int) -> str:
        """A method of `lines` lines, its `def` on line 2."""
        return "class C:\n    def method(self) -> None:\n" + "        x = 1\n" * (lines - 1)

    at_limit = function_lengths(source(MAX_FUNCTION_LINES))
    assert at_limit["C.method"] == (2, MAX_FUNCTION_LINES)
    assert function_lengths(source(MAX_FUNCTION_LINES + 1))["C.method"][1] == (
        MAX_FUNCTION_LINES + 1)
    nested = function_lengths("def outer():\n    def inner():\n        pass\n    return inner\n")
    assert nested == {"outer": (1, 4), "outer.<locals>.inner": (2, 2)}


def test_no_product_function_is_over_the_limit() -> None:
    """Split it into functions of one job each, the top one read as a table of contents
    (record 0041 says how the seven of step 3 were split)."""
    over = {key: found for key, found in long_functions().items() if key not in KNOWN_LONG}
    assert not over, "functions over {} lines:\n{}".format(MAX_FUNCTION_LINES, "\n".join(
        f"  {module}:{line}: {name}: {count} lines"
        for (module, name), (line, count) in sorted(over.items())))


def test_each_known_exception_is_still_over_the_limit() -> None:
    """A function split (or renamed, or gone) comes off KNOWN_LONG at once: the list
    only shrinks."""
    long = long_functions()
    stale = sorted(f"  {module}: {name} (owner: {owner})"
                   for (module, name), owner in KNOWN_LONG.items()
                   if (module, name) not in long)
    assert not stale, ("no longer over {} lines: take off KNOWN_LONG in "
                       "tests/test_shape.py:\n{}".format(MAX_FUNCTION_LINES,
                                                          "\n".join(stale)))


def test_the_clis_table_has_a_row_for_every_command_of_its_usage() -> None:
    """The commands' if-chain became a table (lnk_wrap.cli._COMMANDS) in this step: a
    command the usage lists and the table lacks would be refused as a usage mistake,
    silently."""
    from lnk_wrap import cli, usage

    assert set(usage.commands(cli.__doc__ or "")) - {"mcp-remote"} == set(cli._COMMANDS)
