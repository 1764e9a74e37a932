"""The secret verb's shell: `/_link/secret/<name>/…` with secret_rules' decisions, the
placeholder this sandbox was given for each secret, and the secret and its rule from Link's
secrets. The proxy's verbs' registry (lnk_proxy.verb_call, service_call) calls it for
every `/_link/secret/` request.

It is a ServiceVerb, as the model verb is (lnk_proxy.verb_call.service_call runs both:
the gate, `place`, `admit_at`, the body, `request`, the upstream from `pool_at`). Its
own steps, in order:
- secret(rest) → (name, target): the name is one this sandbox named ([verbs] secrets);
- rule(name) → Rule: read and parsed now, so a rule set anew takes effect at once; its
  host:port is where the call's refusals are logged from here on;
- admit(name, rule, method, target, headers) → Admitted: before the body is read, the path
  is one of the rule's shapes with the placeholder where the secret goes, no refused name,
  no `method` parameter, a body in a coding we can read;
- request(admitted, raw) → (h11.Request, body): the body checked (a `method` field, a URL
  where the rule's not_urls takes only a file; read as Telegram reads it), the
  secret read now (a rotated token takes effect at once) and put where the rule says,
  inbound credentials and framing dropped. The body is sent as it came (it is checked, not
  rewritten: nothing in it is the secret's business but the `method` field).
Each refusal is a Refused whose reason never quotes the secret, the placeholder, the path
or the query (secret_rules' reasons are worded so); a store error is the person's to fix
and does not count toward a pause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import h11

from lnk_common.secrets import SecretError, name_problem, read_rule, read_secret
from lnk_common.wire import Refused
from lnk_proxy import secret_rules
from lnk_proxy.model_rules import drop_receiver_overrides
from lnk_proxy.secret_rules import Matched, Rule, SecretRuleError
from lnk_proxy.upstream import Pool, tls_context

if TYPE_CHECKING:
    from collections.abc import Mapping

    from lnk_proxy.verb_call import Keep, VerbCall

__all__ = ["MAX_BODY_BYTES", "Admitted", "SecretVerb", "split_secret"]

# A secret verb's body is read whole to look for a `method` field. Telegram's Bot API takes
# uploads of up to 50 MB from a bot (sendDocument, sendVideo …); more is refused (413).
MAX_BODY_BYTES = 50 * 1024 * 1024
# Headers never sent on, whatever else is kept: hop-by-hop fields (RFC 9110 7.6.1), the
# framing we set ourselves, the host (the rule's), `expect` (the proxy takes the body
# itself), and every credential a program may send (the rule's own is added by us).
_DROPPED = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"te", b"trailer",
                      b"upgrade", b"host", b"content-length", b"transfer-encoding",
                      b"expect"}) | secret_rules.INBOUND_CREDENTIAL_HEADERS
# A compressed body cannot be checked for a `method` field: refused (415). No Telegram
# client compresses its requests.
_READABLE_CODINGS = frozenset({b"identity"})
_PATH = "the secret verb's path is /_link/secret/<name>/<the service's own path>"


def split_secret(rest: str) -> tuple[str, str]:
    """(name, target from the service's root) of `/<name>/…` after `/_link/secret`, or
    Refused (404). The name is compared exactly by the caller, never decoded."""
    if not rest.startswith("/"):
        raise Refused(404, _PATH)
    name, slash, after = rest[1:].partition("/")
    if not slash or "?" in name or name_problem(name) is not None:
        raise Refused(404, _PATH)
    return name, "/" + after


class Admitted:
    """A secret call admitted before its body: where it goes and the headers kept."""

    __slots__ = ("authority", "headers", "matched", "name")

    def __init__(self, name: str, matched: Matched, headers: list[tuple[bytes, bytes]]) -> None:
        self.name = name
        self.matched = matched
        self.headers = headers
        self.authority = f"{matched.rule.host}:{matched.rule.port}"


def _refused(error: SecretRuleError, *, counts: bool = True) -> Refused:
    return Refused(error.status, error.reason, counts=counts)


class SecretVerb:
    """The secrets a sandbox named, the placeholder of each, and a pool of kept
    connections per upstream authority (keyed by host:port, not by name: a rule set anew
    with another host never reuses a connection to the old one). A ServiceVerb
    (lnk_proxy.verb_call.service_call runs it): `place` is the name and its rule read
    now, `admit_at` the rule's shapes matched, `request` the body checked and the secret
    put in. The log names the rule's host and port, never the name's path, the secret or
    the placeholder."""

    kind = "secret"  # the log's kind=
    max_body_bytes = MAX_BODY_BYTES

    def __init__(self, *, placeholders: Mapping[str, bytes], settings: str) -> None:
        for name, placeholder in placeholders.items():
            if name_problem(name) is not None:
                raise ValueError("a secret's name the store would refuse")
            if not placeholder:
                raise ValueError(f"the secret verb needs a placeholder for {name}")
        self.placeholders = dict(placeholders)
        self.names = frozenset(placeholders)
        self.settings = settings
        self.pools: dict[str, Pool] = {}
        # One TLS context for every service, made once when the proxy starts serving.
        self.tls = tls_context()

    def secret(self, rest: str) -> tuple[str, str]:
        """(name, target) of the path after `/_link/secret`, the name one this sandbox
        named, or Refused. The name is not echoed: a value pasted there must not be."""
        name, target = split_secret(rest)
        if name not in self.names:
            raise Refused(404, "not among this sandbox's secrets ([verbs] secrets names them; "
                               "names are compared exactly)")
        return name, target

    async def call(self, call: VerbCall, rest: str) -> Keep:
        from lnk_proxy.verb_call import service_call

        return await service_call(call, self, rest)

    def place(self, rest: str) -> tuple[str, str, Rule]:
        """(name, target, the name's rule read now): `secret`, then `rule`."""
        name, target = self.secret(rest)
        return name, target, self.rule(name)

    def where(self, place: tuple[str, str, Rule]) -> tuple[str, int]:
        return place[2].host, place[2].port

    def admit_at(self, place: tuple[str, str, Rule], method: bytes,
                 headers: list[tuple[bytes, bytes]]) -> Admitted:
        name, target, rule = place
        return self.admit(name, rule, method, target, headers)

    def pool_at(self, place: tuple[str, str, Rule]) -> Pool:
        return self.pool(f"{place[2].host}:{place[2].port}")

    def rule(self, name: str) -> Rule:
        """The rule kept with `name`, read and parsed now, or Refused (403, final, not counted)."""
        try:
            return secret_rules.parse_rule(read_rule(self.settings, name))
        except SecretError as error:
            raise Refused(403, f"no usable rule for the secret {name}: {error}",
                          counts=False) from None
        except SecretRuleError as error:
            raise Refused(403, f"the rule kept with the secret {name} is refused: "
                               f"{error.reason}", counts=False) from None

    def admit(self, name: str, rule: Rule, method: bytes, target: str,
              headers: list[tuple[bytes, bytes]]) -> Admitted:
        """The call before its body, or Refused."""
        try:
            matched = secret_rules.match(rule, method, target.encode("latin-1"),
                                         self.placeholders[name], headers)
        except SecretRuleError as error:
            raise _refused(error) from None
        except UnicodeEncodeError:
            raise Refused(400, "a byte outside the path's plain alphabet is refused") from None
        kept = []
        if sum(field.lower() == b"content-type" for field, _ in headers) > 1:
            # tdlib reads the last, other readers the first: the body is read as one type.
            raise Refused(400, "a call with two Content-Type headers is refused")
        for field, value in headers:
            lowered = field.lower()
            if lowered == b"content-encoding" and value.strip().lower() not in _READABLE_CODINGS:
                raise Refused(415, "a compressed request body cannot be checked; send it "
                                   "uncompressed")
            if lowered not in _DROPPED:
                kept.append((field, value))
        # A header that changes the method or path at the service: as toward every
        # provider (the rule's paths and methods were checked against this request).
        return Admitted(name, matched, drop_receiver_overrides(kept))

    def request(self, admitted: Admitted, raw: bytes) -> tuple[h11.Request, bytes]:
        """The upstream request and its body (the body as it came), or Refused."""
        content_type = b""
        for field, value in admitted.headers:
            if field.lower() == b"content-type":
                content_type = value
        try:
            secret_rules.check_body(admitted.matched.rule, content_type, raw)
        except SecretRuleError as error:
            raise _refused(error) from None
        try:
            secret = read_secret(self.settings, admitted.name)
        except SecretError as error:
            raise Refused(403, f"no usable secret {admitted.name}: {error}",
                          counts=False) from None
        try:
            filled = secret_rules.fill(admitted.matched, secret)
        except SecretRuleError as error:
            raise _refused(error, counts=False) from None
        headers = [(b"host", filled.host.encode("ascii"))]
        headers += admitted.headers
        if raw or admitted.matched.method in (b"POST", b"PUT", b"PATCH"):
            headers.append((b"content-length", str(len(raw)).encode("ascii")))
        if filled.header is not None:
            headers.append(filled.header)
        request = h11.Request(method=filled.method, target=filled.target, headers=headers)
        return request, raw

    def pool(self, authority: str) -> Pool:
        """The kept connections to `authority` (host:port of a rule)."""
        pool = self.pools.get(authority)
        if pool is None:
            pool = self.pools[authority] = Pool()
        return pool

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
