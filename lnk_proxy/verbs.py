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

__all__ = ["MODEL", "PREFIX", "VERBS", "VerbError", "is_verb_target", "split_provider",
           "split_verb"]

PREFIX = "/_link"
MODEL = "model"

# Each verb's path name → the spec key that turns it on (said in the 404 of a verb that is
# off), default deny: a name not here is no verb. Those not built yet say so.
VERBS: dict[str, str] = {
    MODEL: '[verbs] model = "anthropic" (or a list of providers) turns it on',
    "secret": "[verbs] secrets turns it on (not built yet in this version of lnk-sandbox)",
    "s": "[verbs] open and [verbs] tools turn it on (not built yet in this version of "
         "lnk-sandbox)",
}


class VerbError(Exception):
    """A verb call refused before it is the verb's own: a status and one line."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(status, reason)
        self.status = status
        self.reason = reason


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
