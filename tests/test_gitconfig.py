"""The git settings parser, checked against the real git on the same bytes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile

from hypothesis import given
from hypothesis import strategies as st

from lnk_wrap.gitconfig import MAX_CONFIG_BYTES, Entry, GitConfigError, named_paths, parse
from tests.conftest import fuzz


def _git_list(data: bytes) -> list[tuple[str, str | None]] | None:
    """What `git config --list` reads from these bytes, or None when git refuses them."""
    with tempfile.NamedTemporaryFile(suffix=".cfg", delete=False) as handle:
        handle.write(data)
    try:
        done = subprocess.run(
            ["git", "config", "--file", handle.name, "--list", "--null"],
            capture_output=True, check=False,
            env={"PATH": os.environ["PATH"], "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"},
        )
    finally:
        os.unlink(handle.name)
    if done.returncode != 0:
        return None
    found: list[tuple[str, str | None]] = []
    for item in done.stdout.split(b"\0")[:-1]:
        name, newline, value = item.partition(b"\n")
        found.append((os.fsdecode(name), os.fsdecode(value) if newline else None))
    return found


def _ours(data: bytes) -> list[tuple[str, str | None]] | None:
    try:
        return [(entry.name, entry.value) for entry in parse(data)]
    except GitConfigError:
        return None


_PIECES = st.sampled_from([
    "[core]", "[Core]", "[core ]", '[core "x"]', '[includeIf "gitdir:~/w/"]', "[include]",
    "[a.B]", "[a.b c]", '[x "a\\"b"]', '[x "a\\qb"]', '[x "unterminated', "[bad_name]",
    "hooksPath", "HooksPath", "path", "key", "k-1", "1key", "-k", "=", " = ", "\t=",
    "value", "v a  l", '"quoted"', '"a # b"', '"open', "# comment", "; comment", "\\",
    "\\n", "\\t", "\\b", "\\\\", '\\"', "\\x", "\\\n", "\n", "\r\n", "\r", " ", "\t",
    "/abs/path", "~/hooks", "../rel", "é", "\x00", "\ufeff", "\v", "\f",
])


@fuzz(4)
@given(st.lists(_PIECES, max_size=14))
def test_parses_as_git_does(pieces: list[str]) -> None:
    data = "".join(pieces).encode("utf-8", "surrogatepass")
    assert _ours(data) == _git_list(data)


_SECTIONS = st.sampled_from(["[core]", "[CoRe]", '[core "x"]', "[include]",
                             '[includeIf "gitdir:/a/"]', "[core.sub]", "[a-b.C]", ""])
_KEYS = st.sampled_from(["hooksPath", "path", "HOOKSPATH", "x-y", "k"])
_VALUES = st.lists(st.sampled_from(["a", " ", "\t", '"', "\\", "#c", ";c", "\\\n", "~/x", "\t"]),
                   max_size=6).map("".join)
_LINES = st.one_of(
    _SECTIONS,
    st.tuples(_KEYS, st.sampled_from(["", " = ", "=", "\t=\t"]), _VALUES).map(
        lambda parts: parts[0] + (parts[1] + parts[2] if parts[1] else "")),
    st.sampled_from(["# comment", "", "  ", "\ufeff"]),
)


@fuzz(4)
@given(st.lists(_LINES, max_size=10), st.sampled_from(["\n", "\r\n"]))
def test_parses_line_shaped_files_as_git_does(lines: list[str], newline: str) -> None:
    data = newline.join(lines).encode()
    assert _ours(data) == _git_list(data)


@fuzz(2)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_its_own_error(data: bytes) -> None:
    with contextlib.suppress(GitConfigError):
        parse(data)


def test_a_key_after_the_section_header_on_the_same_line_counts() -> None:
    assert [e.name for e in parse(b"[core] hooksPath = /h\n")] == ["core.hookspath"]
    assert _git_list(b"[core] hooksPath = /h\n") == [("core.hookspath", "/h")]


def test_named_paths_takes_every_hooks_path_and_every_include() -> None:
    data = (b'[core]\n\thooksPath = first\n[CORE]\n\tHOOKSPATH = "sec ond"\n'
            b'[include]\n\tpath = a.inc\n[includeIf "gitdir:/x/"]\n\tpath = ~/b.inc\n'
            b'[core "sub"]\n\thookspath = not-this\n[include]\n\tpath\n')
    hooks, includes = named_paths(parse(data))
    assert hooks == ["first", "sec ond"]
    assert includes == ["a.inc", "~/b.inc"]


def test_line_continuation_and_comments_in_values() -> None:
    entries = parse(b"[core]\n hooksPath = a\\\nb ; comment\n")
    assert [(e.name, e.value) for e in entries] == [("core.hookspath", "ab")]


def test_limit_on_size() -> None:
    try:
        parse(b"#" * (MAX_CONFIG_BYTES + 1))
    except GitConfigError as error:
        assert "larger" in str(error)
    else:
        raise AssertionError("an oversized file parsed")


def test_entry_repr_names_the_key() -> None:
    assert "core.hookspath" in repr(Entry("core", "hookspath", "x", 1))
