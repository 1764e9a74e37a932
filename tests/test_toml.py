"""lnk_wrap/vendor/tomllib.py reads every document exactly as the standard library's tomllib does
(the same tables, or the same error at the same place), on documents built from TOML's
tokens and on real specs, and a spec's number past Python's digit limit is a bad spec,
not a traceback."""

from __future__ import annotations

import string
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lnk_wrap.spec import SpecError, load_spec
from lnk_wrap.vendor import tomllib as toml
from tests.conftest import ROOT, RunSandbox, WriteSpec, fuzz

EXIT_SANDBOX_FAILED = 125
# The pieces TOML is made of, and the ones where the copy differs from tomllib: the
# hand-read decimal integer (digits, then what may end a value) against every
# neighbour the regular expressions see (dates, times, signs, bases, '_', '.', 'e').
_TOKENS = [
    "a", "b.c", '"q"', "'l'", "x-y", " ", "\t", "\n", "\r\n", "\r", "=", " = ", ",", ".", "[",
    "]", "[[", "]]", "{", "}", "#", "# c\n", '"""', "'''", "\\", "\\u0041", "\\n", '\\"',
    "0", "1", "7", "12", "65535", "007", "0x1f", "0o7", "0b1", "1_000", "_", "+1", "-0", "+",
    "-", "1.5", "1e3", "1E-2", ".5", "e", "1979-05-27", "07:32:00", "1979-05-27T07:32:00Z",
    "T", "Z", ":", "+01:00", ".999", "true", "false", "inf", "nan", "-inf", "+nan", "é", "\x00",
    "\x7f", "9" * 30,
]
_documents = st.lists(st.sampled_from(_TOKENS) | st.text(max_size=3), max_size=24).map("".join)

# Documents that are valid, with every kind of value: lines `key = value` in tables.
# Bare keys as st.text over their alphabet: the same keys as st.from_regex's
# `[A-Za-z0-9_-]{1,8}`, drawn about three times faster (the property's thousand documents
# took 18 s of CI's root run with the regex; record 0038).
_keys = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=8)
_scalars = (
    st.integers(min_value=-(10**20), max_value=10**20).map(str)
    | st.integers(min_value=0, max_value=10**6).map(str)
    | st.sampled_from(["0", "1_000", "0xff", "+7", "-0", "1.5", "-1e3", "inf", "nan", "true",
                       "false", '"s"', "'lit'", '"""m\nl"""', "1979-05-27",
                       "1979-05-27 07:32:00.5+01:00", "07:32:00", "[]", "{}"])
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4).map(lambda items: f"[{', '.join(items)}]")
    | st.lists(st.tuples(_keys, inner), max_size=3).map(
        lambda pairs: "{" + ", ".join(f"{key} = {value}" for key, value in pairs) + "}"),
    max_leaves=8,
)
_lines = st.tuples(_keys, _values, st.sampled_from(["", " # c", ",", " 1", "\t"])).map(
    lambda line: f"{line[0]} = {line[1]}{line[2]}")
_tables = st.lists(
    st.tuples(st.sampled_from(["", "[t]\n", "[t.u]\n", "[[a]]\n", "[files]\n"]),
              st.lists(_lines, max_size=4)),
    max_size=4,
).map(lambda parts: "".join(head + "".join(f"{line}\n" for line in lines)
                            for head, lines in parts))


def _ours(document: str) -> tuple[str, str]:
    """What the copy makes of `document`: its tables (repr: NaN equals NaN) or its one
    error type; any other exception fails the test."""
    try:
        return "tables", repr(toml.loads(document))
    except toml.TOMLDecodeError as error:
        return "error", str(error)


def _theirs(document: str) -> tuple[str, str]:
    try:
        return "tables", repr(tomllib.loads(document))
    except ValueError as error:  # TOMLDecodeError, and a bare ValueError (digits)
        return "error", str(error)


def _same(document: str) -> None:
    ours, theirs = _ours(document), _theirs(document)
    if theirs[0] == "error" and "integer string conversion" in theirs[1]:
        # The one difference on purpose: past the digit limit tomllib lets ValueError out.
        assert ours[0] == "error"
        assert "Invalid integer (too many digits)" in ours[1]
        return
    if sys.version_info[:2] == (3, 11):
        assert ours == theirs  # the very code it was copied from: the same words too
    else:
        assert ours[0] == theirs[0] and (ours[0] == "error" or ours == theirs)


@fuzz(10)
@given(_documents)
@example("x = 1\n")
@example("x = 0123")
@example("x = 1979-05-27")
@example("x = 12:00:00")
@example("x = [1,2 ,3]#c")
@example("x = 1\r")
def test_toml_reads_token_soup_as_tomllib_does(document: str) -> None:
    _same(document)


@fuzz(10)
@given(_tables)
def test_toml_reads_valid_documents_as_tomllib_does(document: str) -> None:
    _same(document)


def test_toml_reads_every_example_spec_as_tomllib_does() -> None:
    examples = sorted((ROOT / "examples").glob("*.toml"))
    assert examples
    for path in examples:
        text = path.read_text()
        assert toml.loads(text) == tomllib.loads(text), path


def test_toml_a_spec_of_strings_and_integers_imports_no_re() -> None:
    """The point of the copy: a spec of paths, ports and counts is read without `re`,
    `typing`, `datetime` or `string` (14 ms of every start here)."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); from lnk_wrap.vendor import tomllib as toml; "
        "assert toml.loads(sys.argv[2]) == {'name': 'n', 'localhost': {'ports': [5432, 0]}, "
        "'pause': {'refusals': 10}}; "
        "print(sorted({'re', 'typing', 'datetime', 'string', 'enum'} & set(sys.modules)))"
    )
    document = 'name = "n"\n[localhost]\nports = [5432, 0]\n[pause]\nrefusals = 10 # c\n'
    done = subprocess.run([sys.executable, "-I", "-S", "-c", script, str(ROOT), document],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_spec_with_a_number_past_the_digit_limit_is_a_bad_spec(tmp_path: Path) -> None:
    spec = tmp_path / "spec.toml"
    spec.write_text("[pause]\nrefusals = " + "9" * 5000 + "\n")
    with pytest.raises(SpecError) as caught:
        load_spec(spec, {"LNK_HOME": str(tmp_path / "lnk"), "HOME": str(tmp_path)})
    assert str(caught.value) == (
        f"{spec}: not valid TOML: Invalid integer (too many digits) (at line 2, column 12)")


def test_spec_with_a_number_past_the_digit_limit_runs_nothing_and_says_why(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path
) -> None:
    """Before: tomllib's bare ValueError left the CLI as a traceback (exit 1)."""
    spec = write_spec("[pause]\nrefusals = " + "9" * 5000 + "\n")
    marker = tmp_path / "ran"
    result = run_sandbox(spec, "/bin/sh", "-c", f"touch {marker}")
    assert result.returncode == EXIT_SANDBOX_FAILED, result.stderr
    assert result.stderr == (
        f"lnk-sandbox: {spec}: not valid TOML: Invalid integer (too many digits) "
        "(at line 2, column 12); nothing was run\n")
    assert not marker.exists()
