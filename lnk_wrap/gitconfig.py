"""Git's settings file format, read as git reads it: sans-IO, bytes in, entries out.

Only the launcher uses this, to find what a repository's settings name that runs as the
person later: `core.hooksPath`, `include.path` and `includeIf.<condition>.path`. A
parser that read less than git does would leave a hooks folder unheld, so this one
follows git's own (config.c: git_parse_source, get_base_var, get_value, parse_value)
rule by rule, and tests/test_gitconfig.py checks it against the real git on generated
files. Where git refuses a file (a bad line), GitConfigError is raised; git runs nothing
from such a file, and the launcher refuses the run rather than guess.

GitConfigError is the only exception that leaves this module.
"""

from __future__ import annotations

__all__ = ["MAX_CONFIG_BYTES", "Entry", "GitConfigError", "named_paths", "parse"]

# Git's settings files are small; one this large is not a person's, and reading it whole
# at every sandbox start would cost more than the start itself.
MAX_CONFIG_BYTES = 1024 * 1024

_ALPHA = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_KEY_CHARS = _ALPHA | frozenset("0123456789-")  # git's iskeychar: isalnum or '-'
_SPACE = frozenset(" \t\n\r")  # git's sane_ctype isspace: no \v, no \f


class GitConfigError(Exception):
    """A settings file git itself would refuse, with the line it fails at."""

    def __init__(self, line: int, reason: str) -> None:
        self.line = line
        self.reason = reason
        super().__init__(f"line {line}: {reason}")


class Entry:
    """One `key = value` line: `base` is the section (and subsection) as git names it
    (`core`, `includeif.gitdir:~/work/`), `key` lower-cased, `value` None for a bare key."""

    __slots__ = ("base", "key", "line", "value")

    def __init__(self, base: str, key: str, value: str | None, line: int) -> None:
        self.base = base
        self.key = key
        self.value = value
        self.line = line

    @property
    def name(self) -> str:
        return f"{self.base}.{self.key}" if self.base else self.key

    def __repr__(self) -> str:
        return f"Entry({self.name!r}, {self.value!r}, line={self.line})"


class _Reader:
    """git's get_next_char: CRLF reads as LF; the end reads as a final LF."""

    __slots__ = ("eof", "line", "position", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0
        self.line = 1
        self.eof = False

    def next(self) -> str:
        if self.position >= len(self.text):
            self.eof = True
            return "\n"
        char = self.text[self.position]
        self.position += 1
        if char == "\r" and self.text.startswith("\n", self.position):
            self.position += 1
            char = "\n"
        if char == "\n":
            self.line += 1
        return char


def parse(data: bytes) -> list[Entry]:
    """Every entry of a settings file, in order, or GitConfigError."""
    if len(data) > MAX_CONFIG_BYTES:
        raise GitConfigError(1, f"larger than {MAX_CONFIG_BYTES} bytes")
    text = data.decode("utf-8", "surrogateescape")
    if text.startswith("\ufeff"):
        text = text[1:]
    reader = _Reader(text)
    entries: list[Entry] = []
    base = ""
    comment = False
    while True:
        char = reader.next()
        if reader.eof:
            return entries
        if char == "\n":
            comment = False
            continue
        if comment or char in _SPACE:
            continue
        if char in "#;":
            comment = True
            continue
        if char == "[":
            base = _section(reader)
            continue
        if char not in _ALPHA:
            raise GitConfigError(reader.line, "a key must start with a letter")
        line = reader.line
        key, value = _key_and_value(reader, char)
        if value is not None:
            # git keeps the value in a C string: it ends at a NUL byte, whatever follows.
            value = value.partition("\0")[0]
        entries.append(Entry(base, key, value, line))


def _section(reader: _Reader) -> str:
    """get_base_var: `[name]`, `[name "subsection"]` or the old `[name.subsection]`."""
    name = ""
    while True:
        char = reader.next()
        if reader.eof:
            raise GitConfigError(reader.line, "a section header does not end")
        if char == "]":
            return name
        if char in _SPACE:
            return _subsection(reader, name, char)
        if char not in _KEY_CHARS and char != ".":
            raise GitConfigError(reader.line, f"{char!r} in a section name")
        name += char.lower()


def _subsection(reader: _Reader, name: str, char: str) -> str:
    """get_extended_base_var: the quoted subsection keeps its case; `\\x` is `x`."""
    while True:
        if char == "\n":
            raise GitConfigError(reader.line, "a section header does not end")
        char = reader.next()
        if char not in _SPACE:
            break
    if char != '"':
        raise GitConfigError(reader.line, "a subsection must be quoted")
    name += "."
    while True:
        char = reader.next()
        if char == "\n":
            raise GitConfigError(reader.line, "a subsection does not end")
        if char == '"':
            break
        if char == "\\":
            char = reader.next()
            if char == "\n":
                raise GitConfigError(reader.line, "a subsection does not end")
        name += char
    if reader.next() != "]":
        raise GitConfigError(reader.line, "expected ] after the subsection")
    return name


def _key_and_value(reader: _Reader, first: str) -> tuple[str, str | None]:
    """get_value: the key (letters, digits, '-'), then nothing (a bare key) or `= value`."""
    key = first.lower()
    while True:
        char = reader.next()
        if reader.eof or char not in _KEY_CHARS:
            break
        key += char.lower()
    while char in " \t":
        char = reader.next()
    if char == "\n":
        return key, None
    if char != "=":
        raise GitConfigError(reader.line, f"expected = after the key {key!r}")
    return key, _value(reader)


def _value(reader: _Reader) -> str:
    """parse_value: quotes, the five escapes, comments outside quotes, a backslash at the
    end of a line going on to the next, inner blanks kept as single spaces each."""
    value: list[str] = []
    quoted = comment = False
    spaces = 0
    while True:
        char = reader.next()
        if char == "\n":
            if quoted:
                raise GitConfigError(reader.line - (0 if reader.eof else 1),
                                     "a quoted value does not end")
            return "".join(value)
        if comment:
            continue
        if char in _SPACE and not quoted:
            if value:
                spaces += 1
            continue
        if not quoted and char in ";#":
            comment = True
            continue
        if spaces:
            value.append(" " * spaces)
            spaces = 0
        if char == "\\":
            char = reader.next()
            if char == "\n":
                continue
            escaped = {"t": "\t", "b": "\b", "n": "\n", "\\": "\\", '"': '"'}.get(char)
            if escaped is None:
                raise GitConfigError(reader.line, f"bad escape \\{char}")
            value.append(escaped)
            continue
        if char == '"':
            quoted = not quoted
            continue
        value.append(char)


def named_paths(entries: list[Entry]) -> tuple[list[str], list[str]]:
    """(hooks folders, included files) the entries name, in order, as written (not yet
    expanded): every `core.hooksPath`, not only the last, and every include whatever its
    condition, since which applies depends on where and how git is run."""
    hooks: list[str] = []
    includes: list[str] = []
    for entry in entries:
        if entry.value is None or entry.value == "":
            continue
        if entry.base == "core" and entry.key == "hookspath":
            hooks.append(entry.value)
        elif entry.key == "path" and (
            entry.base == "include" or entry.base.startswith("includeif.")
        ):
            includes.append(entry.value)
    return hooks, includes
