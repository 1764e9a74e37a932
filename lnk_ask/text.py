"""What the person reads: a question's text made plain, printable ASCII (sans IO).

A question's text comes, in part, from a sandbox (a tool's name and arguments, a URL): a
control character could forge a line or drive the terminal (an escape that moves the
cursor and rewrites what was shown), a bidi mark could reverse what the eye reads, and a
look-alike letter (Cyrillic a, U+0430, for Latin a) could pass for another name. So every
way of asking shows `plain(text)`: printable ASCII kept as it is, the
backslash doubled, anything else written as an escape (`\\xNN` below 0x100, `\\uNNNN`,
`\\UNNNNNNNN`). Each escape begins with a backslash and a literal backslash is doubled,
so the coding is prefix-free: two different texts never read the same (what the person
reads is what is asked; tests/test_ask.py decodes it back under Hypothesis).

A text longer than the limit is cut, and the cut says how much is not shown and gives a
short digest of the whole, so two long texts that differ only past the cut still read
differently (with the odds of a 64-bit collision).
"""

from __future__ import annotations

import hashlib

__all__ = ["MAX_QUESTION_CHARS", "MAX_TITLE_CHARS", "MAX_WHOLE_QUESTION_CHARS", "plain"]

# The question as shown, in characters of plain ASCII. A dialog or a terminal shows some
# 2,000 characters before the buttons or the prompt scroll off; a tool's arguments may be
# far longer, and what is cut is said, with a digest of the whole.
MAX_QUESTION_CHARS = 2000
# A question that must be shown whole (`--whole`): a page the sandbox asks to open is
# judged by its whole URL, and a cut URL hides its end, where data leaves. The URL is at
# most lnk_proxy.open_rules.MAX_URL_BYTES (16 KiB) of printable ASCII, which `plain`
# keeps as it is; a few lines around it.
MAX_WHOLE_QUESTION_CHARS = 17 * 1024
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


def plain(text: str, limit: int = MAX_QUESTION_CHARS) -> str:
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
