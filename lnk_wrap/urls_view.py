"""lnk-sandbox url: the verbs' URLs a harness is configured with, before its first start.

Job: a harness that keeps its provider's base URL (and key) in its own configuration
(Codex's provider entry, opencode's base URL) must be told them before it runs. The
model verb's base URLs are fixed (the proxy's address inside, lnk_wrap.model_env's
`verb_base`); an agent's URL secret and its key placeholder are made once per agent and
kept in Link's settings (`sandbox/agents/<name>/`, lnk_wrap.model_env.agent_value), so
this makes them as the agent's first run would, and its runs then give the same ones.

Trust: what is printed is what the agent's programs hold anyway (the placeholder is no
key; the URL secret is the program's); never a provider's key. A sandbox that is no
agent's gets a new URL secret and placeholder every run: only its base URLs are shown.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from lnk_common.policy import Policy

__all__ = ["UrlsError", "show_urls", "urls"]


class UrlsError(Exception):
    """The agent's values cannot be had; one line."""


def urls(settings: str, agent: str | None, policy: Policy | None,
         port: int | None = None) -> list[tuple[str, str]]:
    """(variable, value) for the harness's configuration: $LNK_SANDBOX_URL for an agent,
    then each provider's base-URL variable (and, for an agent, its key variable with
    the agent's placeholder). `port`: the proxy's on the Mac's loopback (macOS), else
    its port inside a Linux sandbox."""
    from lnk_common.endpoints import PROXY_ADDRESS, PROXY_PORT
    from lnk_common.policy import is_name
    from lnk_wrap.model_env import (
        PLACEHOLDER_FILE,
        PROVIDER_VARIABLES,
        ModelEnvError,
        agent_value,
        is_placeholder,
        new_placeholder,
        verb_base,
    )
    from lnk_wrap.verb_env import URL_SECRET_BYTES, URL_SECRET_FILE, is_url_secret, new_url_secret

    proxy_port = PROXY_PORT if port is None else port
    providers: tuple[str, ...] = tuple(PROVIDER_VARIABLES)
    if policy is not None:
        agent = policy.agent or None
        providers = policy.models
    if agent is not None and not is_name(agent):
        raise UrlsError(f"--agent {agent!r}: use letters, digits, '.', '_' and '-'")
    found: list[tuple[str, str]] = []
    placeholder = ""
    if agent is not None:
        try:
            if policy is None or policy.has_url_secret():
                secret = agent_value(settings, agent, URL_SECRET_FILE, new_url_secret,
                                     is_url_secret, f"a URL secret ({2 * URL_SECRET_BYTES} "
                                                    "lowercase hex characters)")
                found.append(("LNK_SANDBOX_URL",
                              f"http://{PROXY_ADDRESS}:{proxy_port}/_link/s/{secret}"))
            if providers:
                placeholder = agent_value(settings, agent, PLACEHOLDER_FILE, new_placeholder,
                                          is_placeholder, "a placeholder (lnk- and 40 "
                                                          "lowercase hex characters)")
        except ModelEnvError as error:
            raise UrlsError(str(error)) from None
    for provider in providers:
        base_variable, _, key_variable = PROVIDER_VARIABLES[provider]
        found.append((base_variable, verb_base(provider, PROXY_ADDRESS, proxy_port)))
        if placeholder:
            found.append((key_variable, placeholder))
    return found


def show_urls(settings: str, agent: str | None, policy: Policy | None, *,
              as_json: bool, port: int | None = None) -> int:
    found = urls(settings, agent, policy, port)
    if as_json:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(dict(found)) + b"\n")
        return 0
    for name, value in found:
        print(f"{name}={value}")
    named = policy.agent if policy is not None else agent
    if not named:
        print("# no agent: $LNK_SANDBOX_URL and the key placeholders are new at every run "
              "(an [agent] keeps its own; --agent NAME shows them)", file=sys.stderr)
    return 0
