"""`/_link/s/<secret>/<part>/…`: the URL secret's verb, and the parts behind it.

The URL secret is compared in constant time before anything else is said (one refusal
for any wrong one, never echoed, never logged: lnk_proxy.verbs.split_url_secret), then
the part, each a verb of its own registered here only when the policy turns it on
(`local`: [localhost] models, lnk_proxy.local_verb; `mcp`: [verbs] tools,
lnk_proxy.mcp_verb; `open`: [verbs] open, lnk_proxy.open_verb); a part that is off
answers 404 naming the key that turns it on.
"""

from __future__ import annotations

from collections.abc import Mapping

from lnk_common.wire import Refused
from lnk_proxy.verb_call import Keep, Verb, VerbCall
from lnk_proxy.verbs import VerbError, split_url_secret

__all__ = ["UrlSecretVerb"]


class UrlSecretVerb:
    """The URL secret and the parts it leads to (each a Verb, by its path segment)."""

    __slots__ = ("enabled", "parts", "secret")

    def __init__(self, secret: bytes, parts: Mapping[str, Verb]) -> None:
        if not secret:
            raise ValueError("the URL secret's verb needs a URL secret")
        self.secret = secret
        self.parts = dict(parts)
        self.enabled = frozenset(self.parts)

    async def call(self, call: VerbCall, rest: str) -> Keep:
        try:
            call.proxy.gate()
            part, after = split_url_secret(rest, self.secret, self.enabled)
        except VerbError as error:
            return await call.refuse("-", Refused(error.status, error.reason))
        except Refused as refusal:
            return await call.refuse("-", refusal)
        return await self.parts[part].call(call, after)

    def close(self) -> None:
        for part in self.parts.values():
            part.close()
