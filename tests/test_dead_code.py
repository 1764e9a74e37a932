"""No dead code in the judged packages: vulture over the product's source, each finding
judged once, here.

vulture reads every module of the product (the packages but lnk_wrap/vendor, which is
CPython's tomllib as it is, and the Python scripts of bin/) and reports each name nothing
else names. A module's `__all__` is not taken for a use (an export no module imports is
dead too): the sources are read from a copy with `__all__` blanked. The tests are not
read: a function only a test calls is dead in the product. Every finding in the judged
packages must be in ALLOWED with its reason, and an entry no longer found must leave it;
docs/decisions/0040-docs-for-a-newcomer.md ("Dead code") says what was removed and why.
"""

from __future__ import annotations

import ast
from pathlib import Path

from vulture import Vulture  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
# What the product is: every package, and bin/'s Python scripts (the rest are shell).
PACKAGES = ("lnk_common", "lnk_wrap", "lnk_execwatch", "lnk_proxy", "lnk_dns", "lnk_relay",
            "lnk_mcpremote", "lnk_ask")
BIN_SCRIPTS = ("bin/lnk-sandbox-init", "bin/lnk-sandbox-launch")
NOT_READ = ("lnk_wrap/vendor/",)  # CPython's tomllib, vendored whole (record 0003)
# Judged here (issue 30, step 6); lnk_proxy and lnk_relay are read as users only, and
# lnk_common/wire.py is the proxy's branch's at this step.
JUDGED = ("lnk_wrap/", "lnk_ask/", "lnk_common/", "lnk_dns/", "lnk_execwatch/",
          "lnk_mcpremote/", "bin/")
NOT_JUDGED = ("lnk_common/wire.py",)
# vulture's confidence is 60 for a name nothing uses (a function, class, variable or
# attribute), 90 for an import, 100 for unreachable code: 60 takes every kind.
MIN_CONFIDENCE = 60

_KERNEL_READS = "a field of struct msghdr that sendmsg's kernel side reads (ctypes)"
_LANDLOCK_BIT = ("a Landlock right as include/uapi/linux/landlock.h names it: the masks by "
                 "ABI grant every bit, and each bit they grant is named")
_GEN_SECCOMP = ("bin/gen-seccomp (a shell script whose Python vulture does not read) "
                "compiles the filters with it at setup; bench/programs too")
# (file, name) → why it stays though nothing in the product names it.
ALLOWED: dict[tuple[str, str], str] = {
    ("lnk_execwatch/sockets.py", "namelen"): _KERNEL_READS,
    ("lnk_execwatch/sockets.py", "controllen"): _KERNEL_READS,
    ("lnk_wrap/landlock.py", "REMOVE_DIR"): _LANDLOCK_BIT,
    ("lnk_wrap/landlock.py", "REMOVE_FILE"): _LANDLOCK_BIT,
    ("lnk_wrap/landlock.py", "MAKE_DIR"): _LANDLOCK_BIT,
    ("lnk_wrap/landlock.py", "MAKE_REG"): _LANDLOCK_BIT,
    ("lnk_wrap/landlock.py", "MAKE_SOCK"): _LANDLOCK_BIT,
    ("lnk_wrap/landlock.py", "MAKE_SYM"): _LANDLOCK_BIT,
    ("lnk_wrap/landlock.py", "REFER"): _LANDLOCK_BIT,
    ("lnk_wrap/seccomp_filter.py", "filter_path"): _GEN_SECCOMP,
    ("lnk_wrap/seccomp_filter.py", "compile_filter"): _GEN_SECCOMP,
}


def _without_all(source: str) -> str:
    """`source` with every module-level `__all__ = …` blanked, line numbers kept."""
    lines = source.split("\n")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == "__all__"
                   for target in targets):
                end = node.end_lineno or node.lineno
                lines[node.lineno - 1:end] = [""] * (end - node.lineno + 1)
    return "\n".join(lines)


def _product() -> list[Path]:
    found = [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))]
    found += [ROOT / script for script in BIN_SCRIPTS]
    return [path for path in found
            if not path.relative_to(ROOT).as_posix().startswith(NOT_READ)]


def _findings(copy: Path) -> set[tuple[str, str]]:
    for path in _product():
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.with_suffix(".py").write_text(_without_all(path.read_text()))
    scanner = Vulture()
    scanner.scavenge([str(copy)])
    found = set()
    for item in scanner.get_unused_code(min_confidence=MIN_CONFIDENCE):
        where = Path(item.filename).relative_to(copy).as_posix()
        if where.startswith("bin/"):
            where = where.removesuffix(".py")
        if where.startswith(JUDGED) and where not in NOT_JUDGED:
            found.add((where, item.name))
    return found


def test_no_dead_code_but_what_is_allowed_with_its_reason(tmp_path: Path) -> None:
    found = _findings(tmp_path)
    new = sorted(found - set(ALLOWED))
    assert not new, ("dead code (remove it, or add it to ALLOWED in tests/test_dead_code.py "
                     f"with the reason it stays): {new}")
    gone = sorted(set(ALLOWED) - found)
    assert not gone, f"ALLOWED names what is no longer found; take it off: {gone}"


def test_the_scan_sees_a_dead_function_and_an_unused_export(tmp_path: Path) -> None:
    """The check itself: a function nothing calls is found, and so is one that only
    `__all__` names."""
    module = tmp_path / "lnk_wrap" / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text('__all__ = ["exported"]\n\n\ndef exported() -> None:\n    pass\n\n\n'
                      "def _unused() -> None:\n    pass\n")
    scanner = Vulture()
    scanner.scavenge([str(tmp_path / "lnk_wrap")])
    alone = {item.name for item in scanner.get_unused_code(min_confidence=MIN_CONFIDENCE)}
    assert alone == {"_unused"}  # vulture alone takes `__all__` for a use
    module.write_text(_without_all(module.read_text()))
    scanner = Vulture()
    scanner.scavenge([str(tmp_path / "lnk_wrap")])
    blanked = {item.name for item in scanner.get_unused_code(min_confidence=MIN_CONFIDENCE)}
    assert blanked == {"exported", "_unused"}
