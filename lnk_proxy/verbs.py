"""The verbs' namespace on the proxy's own listener: `/_link/<verb>/…` (sans IO).

Every way out that is not a plain call to a listed host is a verb: small code of ours,
off unless the spec names it. This module only splits a request target into the verb and
the rest, and words the 404 of a verb that is unknown or off. The target is compared as
it came, never decoded or normalised: `/_link/Model/`, `/_link/%6dodel/` and
`/_link//model/` are not the model verb.

VerbError is the only exception that leaves this module; its reason is one line that
never quotes the target (a verb's path may carry a secret).
"""

from __future__ import annotations

import functools
import hmac

from lnk_proxy.refusal import StatusError, refusal_body

__all__ = ["MODEL", "MODEL_EXAMPLES", "PREFIX", "SECRET", "URL_SECRET", "URL_SECRET_PARTS",
           "VERBS", "VerbError", "asked_line", "is_verb_target", "path_words", "split_local",
           "split_provider", "split_url_secret", "split_verb", "verb_refusal_body"]

PREFIX = "/_link"
MODEL = "model"
SECRET = "secret"  # noqa: S105  (the verb's name, not a secret)
URL_SECRET = "s"  # noqa: S105  (the verb's name, not a secret)

# Each verb's path name → the spec key that turns it on (said in the 404 of a verb that is
# off), default deny: a name not here is no verb. Those not built yet say so.
VERBS: dict[str, str] = {
    MODEL: '[verbs] model = "anthropic" (or a list of providers) turns it on',
    SECRET: '[verbs] secrets = ["NAME"] (secrets of Link\'s store, each with its rule) '
            "turns it on",
    URL_SECRET: "[localhost] models, [verbs] tools or [verbs] open turns it on",
}


# What follows a URL secret (`/_link/s/<secret>/<part>/…`) → what turns it on.
URL_SECRET_PARTS: dict[str, str] = {
    "local": "[localhost] models = [PORT] turns it on",
    "mcp": "[verbs] tools turns it on",
    "open": "[verbs] open = true turns it on",
}
# One refusal for every URL secret that is not this sandbox's, whatever byte differs or
# whoever's it is: the line says nothing of what was given.
WRONG_URL_SECRET = "the URL secret is not this sandbox's"  # noqa: S105  (a refusal)
_URL_SECRET_SHAPE = ("the URL secret's path is /_link/s/<secret>/<"
                     + "|".join(sorted(URL_SECRET_PARTS)) + ">/…")


class VerbError(StatusError):
    """A verb call refused before it is the verb's own: a status and one line."""


def verb_refusal_body(status: int, reason: str) -> bytes:
    """A verb's refusal: lnk_proxy.refusal.refusal_body (one line of JSON every SDK
    reads its message from)."""
    return refusal_body(status, reason)


# How much of the path a 404 shows back: a refusal is one line a harness shows whole.
ASKED_PATH_CHARS = 160


@functools.cache
def path_words() -> frozenset[str]:
    """The segments a 404 shows as they are: the verbs' own names and the providers' and
    local runtimes' route segments. Everything else the program put in the path is shown
    as `…`: a refusal echoes no byte the program chose (a path may carry a key, a URL
    secret in another spelling, or text meant for whoever reads the harness's log)."""
    from lnk_proxy import local_models, model_rules

    words = {".", "..", PREFIX.strip("/"), *VERBS, *URL_SECRET_PARTS, *model_rules.PROVIDERS,
             *model_rules.path_words()}
    words.update(word for _, path in local_models.ALLOWED_ROUTES
                 for word in path.split("/") if word)
    return frozenset(words)


def asked_line(method: bytes, target: bytes) -> str:
    """`METHOD /_link/…` in the shape the program sent, for the program's 404 only (never
    the log): from `/_link` on (an absolute-form target's scheme and host left off), each
    segment shown if it is one of path_words() and as `…` if not, `?…` for a query, the
    method if it is a token of letters, at most ASKED_PATH_CHARS."""
    start = target.find(PREFIX.encode())
    path, query, _ = target[max(start, 0):].partition(b"?")
    words = path_words()
    shown = [word if not word or word in words else "…"
             for word in path.decode("ascii", "replace").split("/")]
    text = "/".join(shown)
    if len(text) > ASKED_PATH_CHARS:
        text = text[:ASKED_PATH_CHARS] + "…"
    verb = method.decode("ascii", "replace")
    verb = verb if verb.isascii() and verb.isalpha() and len(verb) <= 16 else "…"
    line = f"{verb} {text}{'?…' if query else ''}"
    provider = text[len(PREFIX + "/" + MODEL + "/"):].partition("/")[0]
    example = MODEL_EXAMPLES.get(provider) if text.startswith(PREFIX + "/" + MODEL + "/") else None
    # Said when the path is not of that call's shape (not when the verb is off, say).
    if example is not None and not text.startswith(example.split(" ")[1].split("<")[0]):
        line += f" (one that goes: {example})"
    return line


# One inference call of each provider, named in a model path's 404 (to the program only:
# the log keeps no path), since the usual mistake is a base URL a segment short or long:
# an SDK that wants `/v1` in it (opencode's), one that adds it itself.
MODEL_EXAMPLES = {
    "anthropic": "POST /_link/model/anthropic/v1/messages",
    "openai": "POST /_link/model/openai/v1/chat/completions",
    "gemini": "POST /_link/model/gemini/v1beta/models/<model>:generateContent",
    "openrouter": "POST /_link/model/openrouter/api/v1/chat/completions"}


def is_verb_target(path: str) -> bool:
    """Whether an origin-form target to the proxy is in the verbs' namespace."""
    return path == PREFIX or path.startswith((PREFIX + "/", PREFIX + "?"))


def split_verb(path: str, enabled: frozenset[str]) -> tuple[str, str]:
    """(verb, the rest of the target after `/_link/<verb>`) for an enabled verb, or
    VerbError: 404 for no such verb, or one not turned on (naming the key that does)."""
    rest = path[len(PREFIX):]
    if not rest.startswith("/"):
        raise VerbError(404, f"{PREFIX}/ holds the verbs: " + ", ".join(sorted(VERBS)))
    after = rest[1:]
    cut = min((at for at in (after.find("/"), after.find("?")) if at >= 0), default=len(after))
    name, remainder = after[:cut], after[cut:]
    if name not in VERBS:
        raise VerbError(404, "no such verb (the verbs, by exact name: "
                             + ", ".join(sorted(VERBS)) + ")")
    if name not in enabled:
        raise VerbError(404, f"the {name} verb is off in this sandbox: {VERBS[name]}")
    return name, remainder


def split_provider(rest: str) -> tuple[str, str]:
    """(provider, target from the provider's root) of `/<provider>/…` after the model
    verb, or VerbError. The provider's name is compared exactly by the caller."""
    if not rest.startswith("/"):
        raise VerbError(404, "the model verb's path is /_link/model/<provider>/<the "
                             "provider's own path>")
    provider, slash, after = rest[1:].partition("/")
    if not slash or "?" in provider:
        raise VerbError(404, "the model verb's path is /_link/model/<provider>/<the "
                             "provider's own path>")
    return provider, "/" + after


def split_url_secret(rest: str, secret: bytes, enabled: frozenset[str]) -> tuple[str, str]:
    """(part, the rest after `/<secret>/<part>`) of the path after `/_link/s`, or
    VerbError: 403 for a secret that is not `secret` (compared in constant time), 404 for
    a part that is unknown or off (naming the key that turns it on)."""
    if not rest.startswith("/"):
        raise VerbError(404, _URL_SECRET_SHAPE)
    given, slash, after = rest[1:].partition("/")
    # Compared before anything else is said: a wrong secret learns nothing of the parts.
    if not secret or not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), secret):
        raise VerbError(403, WRONG_URL_SECRET)
    part, _, remainder = after.partition("/")
    if not slash or part not in URL_SECRET_PARTS:
        raise VerbError(404, _URL_SECRET_SHAPE)
    if part not in enabled:
        raise VerbError(404, f"/_link/s/…/{part} is off in this sandbox: "
                             f"{URL_SECRET_PARTS[part]}")
    return part, "/" + remainder


# A port as it is written in a path: 1 to 65535, no sign, no leading zero (one spelling).
_MAX_PORT = 65535


def split_local(rest: str, ports: frozenset[int]) -> tuple[int, str]:
    """(port, the runtime's own path with its query) of `/<port>/…` after
    `/_link/s/<secret>/local`, the port one of `[localhost] models`, or VerbError."""
    text, slash, after = rest[1:].partition("/") if rest.startswith("/") else ("", "", "")
    if not (text.isascii() and text.isdigit() and text[0] != "0"
            and int(text) <= _MAX_PORT) or not slash:
        raise VerbError(404, "the local form is /_link/s/<secret>/local/<port>/<the "
                             "runtime's own path>")
    port = int(text)
    if port not in ports:
        raise VerbError(404, f"port {port} is not among this sandbox's [localhost] models")
    return port, "/" + after
