"""The one shape every verb's parser refuses in: an HTTP status and one line.

Each parser keeps its own error type (ModelRequestError, SecretRuleError, LocalModelError,
McpError, VerbError: one error type per parser, so a caller catches exactly its own), all
of them this shape, so the proxy and the relay turn any of them into a refusal the same
way. The reason is one line the program may read and the log may keep: each parser words
its reasons never to quote a key, a secret, a placeholder or a path.
"""

from __future__ import annotations

__all__ = ["StatusError", "odd_path", "refusal_body"]


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


# The error's `status` words by HTTP status, as Google's APIs spell them (google-genai
# shows them); anything else is FAILED_PRECONDITION.
_STATUS_WORDS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 405: "INVALID_ARGUMENT", 408: "DEADLINE_EXCEEDED",
                 413: "INVALID_ARGUMENT", 414: "INVALID_ARGUMENT", 415: "INVALID_ARGUMENT",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE",
                 503: "UNAVAILABLE"}


def refusal_body(status: int, reason: str) -> bytes:
    """A refusal of ours (a verb's, the local model filter's) as one line of JSON in the
    shape every client we serve reads its error message from: Anthropic's (`type`,
    `error.type`, `error.message`), OpenAI's (`error.message`, `error.type`,
    `error.code`), Google's (`error.code`, `error.message`, `error.status`) and Telegram's
    Bot API's (`ok`, `error_code`, `description`) at once. Without it, the OpenAI SDK
    showed only "Error code: 400", python-telegram-bot only "Forbidden (403)", aiogram
    "Failed to deserialize object" (its answer model needs `ok`), and the program never
    learned why. The same bytes by the relayed port and by the proxy's verbs."""
    import orjson  # the helpers have it; this module's importers on a start path do not

    return orjson.dumps({"type": "error", "error": {
        "type": "lnk_sandbox_refused", "code": status,
        "status": _STATUS_WORDS.get(status, "FAILED_PRECONDITION"), "message": reason},
        "ok": False, "error_code": status, "description": reason}) + b"\n"


def odd_path(path: bytes, chars: frozenset[int], *, encoded: str, named: str,
             start: str) -> str | None:
    """Why `path` is not in its one plain form, or None: refused, never cleaned, since a
    path we and the server (or a CDN, or Go's net/http, which cleans and redirects) could
    read differently is how a refused path is reached. `encoded`/`named`: how the reasons
    name the path ("model path"/"a model path", or "path"/"the path"); `start`: the
    reason for one not starting with '/'. No real client sends any of these."""
    if not path.startswith(b"/"):
        return start
    if b"%" in path:
        return f"an encoded {encoded} is refused (no '%' is decoded)"
    if b"\\" in path:
        return f"a backslash in {named} is refused"
    if b"#" in path:
        return f"a fragment in {named} is refused"
    if b"//" in path:
        return f"an empty segment ('//') in {named} is refused"
    if any(segment in (b".", b"..") for segment in path.split(b"/")[1:]):
        return f"a '.' or '..' segment in {named} is refused"
    if not set(path) <= chars:
        return f"{named} may hold only letters, digits and -._~:/"
    return None
