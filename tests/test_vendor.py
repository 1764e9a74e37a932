"""The copied tomllib (lnk_wrap/vendor/tomllib.py) differs from its upstream only as its
patch says: CPython 3.11's Lib/tomllib/_parser.py and _re.py, kept as they are in
tests/data/tomllib-3.11/ (identical from 3.11.2 through 3.11.7). A change to the copy
comes with its patch regenerated (`python -m tests.test_vendor` writes it) and read."""

from __future__ import annotations

import difflib
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UPSTREAM = ROOT / "tests" / "data" / "tomllib-3.11"
OURS = ROOT / "lnk_wrap" / "vendor" / "tomllib.py"
PATCH = ROOT / "lnk_wrap" / "vendor" / "tomllib.patch"
# The upstream files as CPython 3.11 ships them (lnk_wrap/vendor/README.md says the same).
UPSTREAM_SHA256 = {
    "_parser.py": "4579b04a7566452304781ccce37d3ebc1c36e810b058bdb1f33c0e51ddab0397",
    "_re.py": "75b8e0e428594f6dca6bdcfd0c73977ddb52a4fc147dd80c5e78fc34ea25cbec",
}


def _diff() -> str:
    upstream = "".join((UPSTREAM / f"{name}.orig").read_text() for name in UPSTREAM_SHA256)
    return "".join(difflib.unified_diff(
        upstream.splitlines(True), OURS.read_text().splitlines(True),
        "upstream/_parser.py+_re.py", "lnk_wrap/vendor/tomllib.py"))


def test_the_upstream_files_are_cpython_311s() -> None:
    for name, digest in UPSTREAM_SHA256.items():
        assert hashlib.sha256((UPSTREAM / f"{name}.orig").read_bytes()).hexdigest() == digest


def test_the_copy_differs_from_upstream_only_by_its_patch() -> None:
    assert _diff() == PATCH.read_text(), (
        "lnk_wrap/vendor/tomllib.py changed: regenerate its patch with "
        "`python -m tests.test_vendor` and read the difference")


def test_the_running_pythons_tomllib_is_that_upstream_on_311() -> None:
    """On 3.11 (this project's CI) the stored upstream is the interpreter's own."""
    import tomllib
    here = Path(tomllib.__file__).parent
    for name in UPSTREAM_SHA256:
        stored = (UPSTREAM / f"{name}.orig").read_bytes()
        assert (here / name).read_bytes() == stored or sys.version_info[:2] != (3, 11)


if __name__ == "__main__":
    PATCH.write_text(_diff())
