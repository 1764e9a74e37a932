"""What the person reads: a question's text made printable ASCII (sans IO).

A question's text comes, in part, from a sandbox (a tool's name and arguments, a URL): a
control character could forge a line or drive the terminal (an escape that moves the
cursor and rewrites what was shown), a bidi mark could reverse what the eye reads, and a
look-alike letter (Cyrillic a, U+0430, for Latin a) could pass for another name. So every
way of asking shows `printable(text)`: printable ASCII kept as it is, the
backslash doubled, anything else written as an escape (`\\xNN` below 0x100, `\\uNNNN`,
`\\UNNNNNNNN`). Each escape begins with a backslash and a literal backslash is doubled,
so the coding is prefix-free: two different texts never read the same (what the person
reads is what is asked; tests/test_ask.py decodes it back under Hypothesis).

A text longer than the limit is cut, and the cut says how much is not shown and gives a
short digest of the whole, so two long texts that differ only past the cut still read
differently (with the odds of a 64-bit collision).

A question is kept whole (MAX_KEPT_QUESTION_CHARS) in the queue for `lnk-sandbox asks
--show ID`; each way shows what fits it (the terminal: its size; a dialog, `asks` and the
log: MAX_QUESTION_CHARS) and says what it cut. `bounded` cuts a raw text once, where it
is handed to another process (`lnk-sandbox-ask` takes at most 1 MiB on its standard
input), saying so in ASCII with the whole's length and digest. `spaces_shown` makes a
run of spaces visible, so padding cannot move the program's text to where Link's lines
are.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_ALLOWS_CHARS", "MAX_ASKED_CHARS", "MAX_KEPT_QUESTION_CHARS", "MAX_QUESTION_CHARS",
           "MAX_TITLE_CHARS", "MAX_WHOLE_QUESTION_CHARS", "bounded", "printable", "spaces_shown"]

# The question as shown, in characters of printable ASCII. A dialog or a terminal shows some
# 2,000 characters before the buttons or the prompt scroll off; a tool's arguments may be
# far longer, and what is cut is said, with a digest of the whole.
MAX_QUESTION_CHARS = 2000
# A question that must be shown whole (`--whole`): a page the sandbox asks to open is
# judged by its whole URL, and a cut URL hides its end, where data leaves. The URL is at
# most lnk_proxy.open_rules.MAX_URL_BYTES (16 KiB) of printable ASCII, which `printable`
# keeps as it is; a few lines around it.
MAX_WHOLE_QUESTION_CHARS = 17 * 1024
# A question kept whole for `lnk-sandbox asks --show ID`: a tool's arguments a person may
# still read through (some 800 lines of 80 columns); past it `printable`'s note says how much
# more there was, with the whole's digest. The queue's record holds it (MAX_RECORD_BYTES).
MAX_KEPT_QUESTION_CHARS = 64 * 1024
# A question's raw text as handed to `lnk-sandbox-ask` on its standard input: at most 4
# UTF-8 bytes a character, so within its 1 MiB (lnk_ask.main.MAX_QUESTION_INPUT_BYTES),
# and more than MAX_KEPT_QUESTION_CHARS however it is escaped.
MAX_ASKED_CHARS = 256 * 1024
# What a yes allows, in Link's words ("sandbox W, server demo, tool wipe"): one line.
MAX_ALLOWS_CHARS = 240
# A title is a few words ("Tool call: github"); a window's title bar shows about this.
MAX_TITLE_CHARS = 80


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\\":
        return "\\\\"
    if 0x20 <= code < 0x7F:
        return char
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str, limit: int = MAX_QUESTION_CHARS) -> str:
    """`text` as printable ASCII (0x20-0x7E only), distinct texts distinct, at most
    `limit` characters (a cut text ends by saying so, with a digest of the whole)."""
    pieces = [_escape(char) for char in text]
    total = sum(len(piece) for piece in pieces)
    if total <= limit:
        return "".join(pieces)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    note = f" [... {total} characters in all, not shown whole; sha256 {digest}]"
    room = limit - len(note)
    kept: list[str] = []
    for piece in pieces:  # whole escapes only: half of one would read as other text
        if len(piece) > room:
            break
        kept.append(piece)
        room -= len(piece)
    return ("".join(kept) + note)[-limit:] if limit > 0 else ""


def bounded(text: str, limit: int = MAX_ASKED_CHARS) -> str:
    """`text` unchanged when it has at most `limit` characters; else its first part and
    an ASCII note of the whole's length and digest (the note ends the text)."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    note = f" [... {len(text)} characters in all, cut before asking; sha256 {digest}]"
    return text[:max(0, limit - len(note))] + note


# Two spaces or more in a row, in a printable text.
_SPACES = re.compile(r" {2,}")


def spaces_shown(shown: str) -> str:
    """A printable text with every run of two or more spaces written `[N spaces]`: padding is
    seen as padding, and cannot line the program's words up under Link's own."""
    return _SPACES.sub(lambda run: f"[{len(run.group())} spaces]", shown)
