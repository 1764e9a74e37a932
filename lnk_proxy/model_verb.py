"""The model verb's shell: `/_link/model/<provider>/…` with model_rules' decisions, the
placeholder this sandbox was given and the key from Link's secrets.

It is a ServiceVerb (lnk_proxy.verb_call.service_call runs it: the gate, `place`,
`admit_at`, the body, `request`, the upstream from `pool_at`). Its own steps, in order:
- provider(rest) → (provider, target): the provider is one this sandbox named;
- admit(provider, method, target, headers) → Admitted: before the body is read, the path
  is an inference call, the call carried the placeholder and nothing else, the body is in
  a form we can read;
- request(admitted, raw) → (h11.Request, body): the body rewritten, the real key added
  (read now: a rotated key takes effect at once), the upstream request.
Each refusal is a Refused with a one-line reason that never quotes a key, a query value
or a path (model_rules' reasons are worded so).
"""

from __future__ import annotations

import h11

from lnk_common.secrets import SecretError, read_secret
from lnk_common.wire import Refused
from lnk_proxy import model_rules
from lnk_proxy.model_rules import ModelRequestError
from lnk_proxy.upstream import Pool, tls_context
from lnk_proxy.verbs import VerbError, split_provider

TYPE_CHECKING = False
if TYPE_CHECKING:
    from lnk_proxy.verb_call import Keep, VerbCall

__all__ = ["Admitted", "ModelVerb"]

# Headers never sent on to a provider, whatever else is kept: hop-by-hop fields (RFC 9110
# 7.6.1), the framing we set ourselves (the body is our own re-serialisation), the host
# (the provider's), and `expect` (the proxy takes the body itself).
_DROPPED = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"te", b"trailer",
                      b"upgrade", b"host", b"content-length", b"transfer-encoding",
                      b"expect", b"content-encoding"})
# Content codings the verb can read: none. A compressed body cannot be checked for server
# tools or URL sources, so it is refused (415); no SDK compresses its requests.
_READABLE_CODINGS = frozenset({b"identity"})


class Admitted:
    """A model call admitted before its body: where it goes and the headers kept."""

    __slots__ = ("authority", "headers", "host", "provider", "route")

    def __init__(self, provider: str, route: model_rules.Route,
                 headers: list[tuple[bytes, bytes]]) -> None:
        self.provider = provider
        self.route = route
        self.headers = headers
        self.host = model_rules.PROVIDER_HOSTS[provider]
        self.authority = f"{self.host}:443"


def refused(error: ModelRequestError | VerbError, *, counts: bool = True) -> Refused:
    return Refused(error.status, error.reason, counts=counts)


class ModelVerb:
    """The providers a sandbox named, its placeholder, and a pool of kept connections per
    provider (reused across the client connections of the sandbox)."""

    kind = "model"  # the log's kind=
    # The body is read whole (parsed, checked and re-serialised): the rules' own limit
    # (model_rules.MAX_BODY_BYTES, with its reason), refused (413) from the
    # Content-Length before a byte of it is read, else as it passes.
    max_body_bytes = model_rules.MAX_BODY_BYTES

    def __init__(self, *, providers: frozenset[str], placeholder: bytes, settings: str,
                 server_tools: bool) -> None:
        unknown = providers - model_rules.PROVIDERS
        if unknown:
            raise ValueError(f"unknown model providers: {', '.join(sorted(unknown))}")
        if not placeholder:
            raise ValueError("the model verb needs a placeholder")
        self.providers = providers
        self.placeholder = placeholder
        self.settings = settings
        self.server_tools = server_tools
        self.search_models = model_rules.read_search_models()
        self.pools = {provider: Pool() for provider in providers}
        # One TLS context for every provider: made once (loading the trust store costs
        # some milliseconds), when the proxy starts serving.
        self.tls = tls_context()

    def provider(self, rest: str) -> tuple[str, str]:
        """(provider, target from its root) of the path after `/_link/model`, the
        provider one this sandbox named, or Refused."""
        try:
            provider, target = split_provider(rest)
        except VerbError as error:
            raise refused(error) from None
        if provider not in self.providers:
            if provider in model_rules.PROVIDERS:
                raise Refused(404, f"{provider} is not among this sandbox's model providers "
                                   "([verbs] model names them)")
            raise Refused(404, "unknown model provider (known: "
                               + ", ".join(sorted(model_rules.PROVIDERS))
                               + "; names are lowercase)")
        return provider, target

    async def call(self, call: VerbCall, rest: str) -> Keep:
        from lnk_proxy.verb_call import service_call

        return await service_call(call, self, rest)

    def place(self, rest: str) -> tuple[str, str]:
        """(provider, target): `provider`."""
        return self.provider(rest)

    def where(self, place: tuple[str, str]) -> tuple[str, int]:
        return model_rules.PROVIDER_HOSTS[place[0]], 443

    def admit_at(self, place: tuple[str, str], method: bytes,
                 headers: list[tuple[bytes, bytes]]) -> Admitted:
        return self.admit(place[0], method, place[1], headers)

    def pool_at(self, place: tuple[str, str]) -> Pool:
        return self.pools[place[0]]

    def admit(self, provider: str, method: bytes, target: str,
              headers: list[tuple[bytes, bytes]]) -> Admitted:
        """The call to `provider` (one named) before its body, or Refused."""
        try:
            route = model_rules.route(provider, method, target)
            kept, carried = model_rules.strip_credentials(headers)
            kept = model_rules.drop_receiver_overrides(kept)
            if route.query_credential is not None:
                carried.append(route.query_credential)
            model_rules.check_placeholder(carried, self.placeholder)
        except ModelRequestError as error:
            raise refused(error) from None
        for name, value in kept:
            if name.lower() == b"content-encoding" and value.strip().lower() not in \
                    _READABLE_CODINGS:
                raise Refused(415, "a compressed request body cannot be checked; send it "
                                   "uncompressed")
        return Admitted(provider, route, kept)

    def request(self, admitted: Admitted, raw: bytes) -> tuple[h11.Request, bytes]:
        """The upstream request and its body, or Refused."""
        route = admitted.route
        try:
            body = model_rules.rewrite_body(admitted.provider, route, raw,
                                            server_tools=self.server_tools,
                                            search_models=self.search_models)
        except ModelRequestError as error:
            raise refused(error) from None
        try:
            key = read_secret(self.settings, admitted.provider)
            name, value = model_rules.key_header(admitted.provider, key)
        except SecretError as error:
            # Not the program's doing: said, not counted toward a pause; 403, a status no
            # SDK retries (a 503 kept Claude Code retrying for minutes: lnk_common.wire).
            raise Refused(403, f"no usable key for {admitted.provider}: {error}",
                          counts=False) from None
        except ModelRequestError as error:
            raise refused(error, counts=False) from None
        headers = [(b"host", admitted.host.encode("ascii"))]
        headers += [(field, content) for field, content in admitted.headers
                    if field.lower() not in _DROPPED]
        if route.has_body:
            headers.append((b"content-length", str(len(body)).encode("ascii")))
        headers.append((name, value))
        target = (route.path + route.query).encode("ascii")
        return h11.Request(method=route.method, target=target, headers=headers), body

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
