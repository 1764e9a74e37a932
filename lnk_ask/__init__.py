"""Asking the person: one question, every way at once (a dialog, the terminal with a
code, the queue in Link's settings), the first answer wins, silence is no.
docs/decisions/0028-asking-the-person.md."""

from lnk_ask.asker import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_TIMEOUT_SECONDS,
    Answer,
    AskUsageError,
    ask,
    ask_async,
    command,
)
from lnk_ask.text import printable

__all__ = ["DEFAULT_TIMEOUT_SECONDS", "MAX_TIMEOUT_SECONDS", "Answer", "AskUsageError", "ask",
           "ask_async", "command", "printable"]
