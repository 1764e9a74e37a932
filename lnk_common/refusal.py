"""The one shape every verb's parser refuses in: an HTTP status and one line.

Each parser keeps its own error type (ModelRequestError, SecretRuleError, LocalModelError,
McpError, VerbError: one error type per parser, so a caller catches exactly its own), all
of them this shape, so the proxy and the relay turn any of them into a refusal the same
way. The reason is one line the program may read and the log may keep: each parser words
its reasons never to quote a key, a secret, a placeholder or a path.
"""

from __future__ import annotations

__all__ = ["StatusError"]


class StatusError(Exception):
    """A refusal: `status` (HTTP) and `reason`, one line."""

    def __init__(self, status: int, reason: str) -> None:
        if "\n" in reason or "\r" in reason:
            raise ValueError("a refusal reason is one line")
        super().__init__(status, reason)
        self.status = status
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.status} {self.reason}"
