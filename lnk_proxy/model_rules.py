"""The model verb's rules: which calls reach a hosted model, and in what form (sans IO).

Job: for `/_link/model/<provider>/<path>` decide, from bytes and dicts only, (1) whether the
method, path and query are one of the provider's inference calls (`route`), (2) which inbound
headers are credentials to remove and what form the real key takes (`strip_credentials`,
`check_placeholder`, `key_header`), (3) what the JSON body becomes (`rewrite_body`): server-side
tools and fields removed unless `[network] server_tools`, any URL the provider would fetch
refused, models that search by nature refused by name. Called by lnk_proxy.model_verb.

Trust: everything here comes from the sandboxed program and is hostile. The provider lists in
docs/facts/providers.md go stale, so every rule is an allow-list: an unknown path, query
key, tool type or tool_choice form is refused or removed, never passed.

Order of operations (the shell's): route -> strip_credentials -> drop_receiver_overrides
-> check_placeholder -> rewrite_body -> add key_header. The body sent upstream is always our
own re-serialisation of what we checked (orjson.dumps), never the program's bytes: a
duplicate key or an odd encoding cannot mean one thing to us and another to the provider.

ModelRequestError is the only exception that leaves this module; its reason is one line, safe
to send to the program: it never quotes a key, a query value or a path.
"""

from __future__ import annotations

import fnmatch
import hmac
import re
from importlib import resources
from typing import Any

import orjson

from lnk_proxy.refusal import StatusError, odd_path

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_FALLBACK_MODELS",
    "MAX_NESTING_DEPTH",
    "MAX_TARGET_BYTES",
    "MAX_TOOLS",
    "PROVIDERS",
    "PROVIDER_HOSTS",
    "ModelRequestError",
    "Route",
    "SearchModels",
    "check_placeholder",
    "drop_receiver_overrides",
    "key_header",
    "parse_body",
    "parse_search_models",
    "path_words",
    "read_search_models",
    "rewrite",
    "rewrite_body",
    "route",
    "strip_credentials",
]

# ---------------------------------------------------------------------------------------------
# Limits (each a named constant with its reason)

# Anthropic's Messages API refuses requests over 32 MB; base64 images and PDFs make real bodies
# large, but the proxy holds one parsed body per call in memory on a small machine. 413 above.
MAX_BODY_BYTES = 32 * 1024 * 1024
# The deepest real body (tool_result > document > source.content > image > source, inside a
# message list, beside a tool's JSON schema) is under 30 levels. The rewriter walks the tree;
# a bound keeps the walk's cost linear and far from Python's recursion limit.
MAX_NESTING_DEPTH = 128
# Claude Code with many MCP servers sends a few hundred tools; OpenAI caps functions at 128.
# Bounds the tool filter's work and the tool_choice look-ups.
MAX_TOOLS = 1024
# OpenRouter's `models` and Anthropic's `fallbacks` name a handful of models; each is matched.
MAX_FALLBACK_MODELS = 16
# A path and query of an inference call is short; a long one is a probe or a smuggled payload.
MAX_TARGET_BYTES = 2048


class ModelRequestError(StatusError):
    """A call the model verb refuses: an HTTP status and one line the program may read."""


# ---------------------------------------------------------------------------------------------
# Providers and their hosts (the verb's upstreams; docs/facts/providers.md §1.4, §2, §3, §4)

PROVIDER_HOSTS: dict[str, str] = {
    "anthropic": "api.anthropic.com",
    "openai": "api.openai.com",
    "gemini": "generativelanguage.googleapis.com",
    "openrouter": "openrouter.ai",
}
PROVIDERS = frozenset(PROVIDER_HOSTS)


class Route:
    """One admitted call: where it goes upstream and what its body is checked as."""

    __slots__ = ("api", "method", "model", "name", "path", "provider", "query",
                 "query_credential")

    def __init__(self, *, provider: str, name: str, api: str, method: str, path: str,
                 query: str, model: str | None, query_credential: bytes | None) -> None:
        self.provider = provider
        self.name = name            # e.g. "messages", "generateContent", "models.list"
        self.api = api              # the body's shape: "anthropic", "chat", "responses", ...
        self.method = method
        self.path = path            # sent upstream as is (it passed the exact table)
        self.query = query          # the cleaned query, "" or "?alt=sse"; never `key=`
        self.model = model          # the model named in the path (Gemini), else None
        self.query_credential = query_credential  # a `key=` value, for the placeholder check

    @property
    def has_body(self) -> bool:
        return self.method == "POST"

    def __repr__(self) -> str:  # never the credential
        return f"Route({self.provider} {self.method} {self.path}{self.query} as {self.api})"


# The exact paths, per provider: (method, path) -> (route name, body shape, why it is allowed).
# Anything absent is refused: files, batches, fine-tuning, admin, realtime, Gemini's
# interactions and cachedContents, and every path not yet known.
_EXACT_ROUTES: dict[str, dict[tuple[str, str], tuple[str, str, str]]] = {
    "anthropic": {
        ("POST", "/v1/messages"): ("messages", "anthropic", "inference"),
        ("POST", "/v1/messages/count_tokens"): ("count_tokens", "anthropic",
                                                "token count of a request, no inference side"),
        ("GET", "/v1/models"): ("models.list", "none", "model listing (SDKs probe it)"),
    },
    "openai": {
        ("POST", "/v1/chat/completions"): ("chat.completions", "chat", "inference"),
        ("POST", "/v1/responses"): ("responses", "responses", "inference"),
        ("POST", "/v1/embeddings"): ("embeddings", "embeddings", "inference"),
        ("GET", "/v1/models"): ("models.list", "none", "model listing"),
    },
    "gemini": {
        ("GET", "/v1beta/models"): ("models.list", "none", "model listing"),
        ("GET", "/v1/models"): ("models.list", "none", "model listing"),
    },
    "openrouter": {
        # OpenRouter's base is https://openrouter.ai/api/v1 (docs/facts/providers.md §4).
        ("POST", "/api/v1/chat/completions"): ("chat.completions", "chat", "inference"),
        ("POST", "/api/v1/responses"): ("responses", "responses", "inference"),
        ("POST", "/api/v1/messages"): ("messages", "anthropic", "inference, Anthropic form"),
        ("POST", "/api/v1/embeddings"): ("embeddings", "embeddings", "inference"),
        ("GET", "/api/v1/models"): ("models.list", "none", "model listing"),
    },
}

def path_words() -> frozenset[str]:
    """Every segment of a path some provider's route has (`v1`, `messages`, …): the words
    a refused path's 404 may show back as they are (lnk_proxy.verbs.asked_line)."""
    return frozenset(word for routes in _EXACT_ROUTES.values() for _, path in routes
                     for word in path.split("/") if word)


# A model id in a path: provider ids are lowercase/uppercase letters, digits, '.', '-', '_'
# (OpenAI fine-tunes add ':'). No '/', '%', '..' can pass: the first char is alphanumeric.
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_GEMINI_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Gemini's inference methods on models/{model}: name -> (body shape, why).
_GEMINI_METHODS: dict[str, tuple[str, str]] = {
    "generateContent": ("gemini", "inference"),
    "streamGenerateContent": ("gemini", "inference, streamed"),
    "countTokens": ("gemini", "token count; may hold a whole generateContentRequest"),
    "embedContent": ("gemini", "inference"),
    "batchEmbedContents": ("gemini", "inference (synchronous, not the Batch API)"),
}

# Query keys an inference call needs, per (provider, route name): key -> allowed values
# (None: any value of the safe charset). Anything else is refused, and `key=` is taken out
# as a credential (its value is checked as the placeholder, never sent on).
_QUERY_KEYS: dict[tuple[str, str], dict[str, frozenset[str] | None]] = {
    # The SDK posts beta calls to /v1/messages?beta=true.
    ("anthropic", "messages"): {"beta": frozenset({"true"})},
    ("anthropic", "count_tokens"): {"beta": frozenset({"true"})},
    ("anthropic", "models.list"): {"limit": None, "before_id": None, "after_id": None,
                                   "beta": frozenset({"true"})},
    ("anthropic", "models.get"): {"beta": frozenset({"true"})},
    # Server-sent events for the streamed call; nothing else changes the answer's form.
    ("gemini", "streamGenerateContent"): {"alt": frozenset({"sse"})},
    ("gemini", "models.list"): {"pageSize": None, "pageToken": None},
}
# A query value: what page tokens, ids and the placeholder are made of. No '%': nothing is
# decoded, so nothing encoded can pass.
_QUERY_VALUE = re.compile(r"[A-Za-z0-9._~=+/:-]{1,512}")
_QUERY_CREDENTIAL_KEYS = frozenset({"key"})
# Bytes a path may hold at all: RFC 3986 pchar minus '%' (no decoding, ever), minus ';' and
# '=' and other sub-delims no inference path uses. A backslash, space or control byte is out.
_PATH_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                        b"-._~:/")


def route(provider: str, method: bytes | str, target: bytes | str) -> Route:
    """The call `method target` to `provider` as an admitted Route, or ModelRequestError.

    `target` is what follows `/_link/model/<provider>` in the request target: a path from
    the provider's root, with its query. It is compared, never decoded or normalised.
    """
    if provider not in PROVIDERS:
        raise ModelRequestError(404, "unknown model provider (known: anthropic, gemini, "
                                     "openai, openrouter; names are lowercase)")
    method_s = _ascii(method, "method")
    target_b = target.encode("utf-8", "surrogateescape") if isinstance(target, str) else target
    if len(target_b) > MAX_TARGET_BYTES:
        raise ModelRequestError(414, f"the path and query are over {MAX_TARGET_BYTES} bytes")
    path_b, has_query, query_b = target_b.partition(b"?")
    _refuse_odd_path(path_b)
    path = path_b.decode("ascii")
    name, api, model = _match_path(provider, method_s, path)
    query, credential = _clean_query(provider, name, query_b if has_query else None)
    return Route(provider=provider, name=name, api=api, method=method_s, path=path,
                 query=query, model=model, query_credential=credential)


def _ascii(value: bytes | str, what: str) -> str:
    try:
        return value.decode("ascii") if isinstance(value, bytes) else value.encode(
            "ascii").decode("ascii")
    except UnicodeError:
        raise ModelRequestError(400, f"the {what} is not ASCII") from None


def _refuse_odd_path(path: bytes) -> None:
    why = odd_path(path, _PATH_CHARS, encoded="model path", named="a model path",
                   start="the model path must start with '/'")
    if why is not None:
        raise ModelRequestError(404, why)


def _match_path(provider: str, method: str, path: str) -> tuple[str, str, str | None]:
    exact = _EXACT_ROUTES[provider].get((method, path))
    if exact is not None:
        return exact[0], exact[1], None
    if provider in ("anthropic", "openai") and method == "GET":
        rest = _after(path, "/v1/models/")
        if rest is not None and _MODEL_ID.fullmatch(rest):
            return "models.get", "none", None
    if provider == "gemini":
        # google-genai 3.x calls /v1/ unless GOOGLE_GENAI_API_VERSION=beta; older SDKs and
        # the REST docs call /v1beta/: the same inference methods under either.
        rest = _after(path, "/v1beta/models/")
        if rest is None:
            rest = _after(path, "/v1/models/")
        if rest is not None:
            if method == "GET" and _GEMINI_MODEL.fullmatch(rest):
                return "models.get", "none", None
            model, colon, verb = rest.partition(":")
            if (method == "POST" and colon and verb in _GEMINI_METHODS
                    and _GEMINI_MODEL.fullmatch(model)):
                return verb, _GEMINI_METHODS[verb][0], model
    raise ModelRequestError(404, _why_not(provider, method, path))


def _after(path: str, prefix: str) -> str | None:
    return path[len(prefix):] if path.startswith(prefix) else None


# Known non-inference surfaces, each with the one line that says why they are refused.
# Only used to word the refusal: anything unmatched is refused all the same.
_REFUSED_SURFACES: tuple[tuple[str, str], ...] = (
    ("/files", "the Files API is refused (stores data at the provider, outside the sandbox)"),
    ("/batches", "batches are refused (run later, outside this call and its rules)"),
    ("/batch", "batches are refused (run later, outside this call and its rules)"),
    (":batchGenerateContent", "batches are refused (run later, outside this call and its "
                              "rules)"),
    ("/fine_tuning", "fine-tuning is refused (trains on uploaded data)"),
    ("/fine-tunes", "fine-tuning is refused (trains on uploaded data)"),
    ("/tunedModels", "tuned models are refused (train on uploaded data)"),
    ("/organizations", "admin paths are refused"),
    ("/organization", "admin paths are refused"),
    ("/admin", "admin paths are refused"),
    ("/keys", "admin paths are refused"),
    ("/realtime", "realtime (websocket) calls are refused: their tools come over the socket"),
    ("/ws/", "live (websocket) calls are refused: their tools come over the socket"),
    ("/interactions", "Gemini's Interactions API is refused (server tools and agents)"),
    ("/cachedContents", "Gemini's cachedContents is refused (a cache can hold server tools)"),
    ("/agents", "agents are refused (run server-side with their own tools)"),
    ("/environments", "environments are refused (server-side machines)"),
    ("/vector_stores", "vector stores are refused (server-side file search)"),
    ("/assistants", "assistants are refused (server-side tools and state)"),
    ("/threads", "assistants threads are refused (server-side tools and state)"),
    ("/containers", "containers are refused (server-side code execution)"),
    ("/uploads", "uploads are refused (stores data at the provider)"),
    ("/skills", "skills are refused (server-side code)"),
)


def _why_not(provider: str, method: str, path: str) -> str:
    for marker, why in _REFUSED_SURFACES:
        if marker in path:
            return f"{why}; the model verb passes only {provider}'s inference calls"
    return (f"not one of {provider}'s inference calls (method and path compared exactly, "
            "case included)")



def _clean_query(provider: str, name: str, query: bytes | None) -> tuple[str, bytes | None]:
    if query is None:
        return "", None
    if query == b"":
        return "", None
    if b"%" in query or b"#" in query:
        raise ModelRequestError(400, "an encoded query is refused (no '%' is decoded)")
    allowed = _QUERY_KEYS.get((provider, name), {})
    kept: list[str] = []
    seen: set[bytes] = set()
    credential: bytes | None = None
    for pair in query.split(b"&"):
        key, equals, value = pair.partition(b"=")
        if not equals or not key or not value:
            raise ModelRequestError(400, "a query parameter without a key and a value is "
                                         "refused")
        if key in seen:
            raise ModelRequestError(400, "a query parameter given twice is refused")
        seen.add(key)
        if not _QUERY_VALUE.fullmatch(value.decode("latin-1")):
            raise ModelRequestError(400, "a query value holds a character a model call "
                                         "does not use")
        key_s = key.decode("latin-1")
        if key_s in _QUERY_CREDENTIAL_KEYS:
            credential = value  # removed: checked as the placeholder, never sent on
            continue
        if key_s not in allowed:
            raise ModelRequestError(400, f"query parameters other than the inference call's "
                                         f"own are refused (for {name}: "
                                         f"{', '.join(sorted(allowed)) or 'none'})")
        values = allowed[key_s]
        value_s = value.decode("ascii")
        if values is not None and value_s not in values:
            raise ModelRequestError(400, f"query parameter {key_s} takes only "
                                         f"{', '.join(sorted(values))}")
        kept.append(f"{key_s}={value_s}")
    return ("?" + "&".join(kept)) if kept else "", credential


# ---------------------------------------------------------------------------------------------
# Credentials: what comes in is removed; the real key is added in the provider's form.

# Lowercased names, '_' read as '-' (some servers and CDNs fold one into the other).
# Each is removed from every model call, whatever the provider.
_INBOUND_CREDENTIAL_HEADERS: dict[str, str] = {
    "authorization": "Bearer token: Anthropic auth_token, OpenAI, OpenRouter, Gemini OAuth",
    "x-api-key": "Anthropic's API key",
    "api-key": "Azure OpenAI's key",
    "x-goog-api-key": "Gemini's API key",
    "proxy-authorization": "a credential for a proxy, never for the provider",
    "cookie": "a session credential; no inference call uses one",
    # Not credentials, but they choose which of the key owner's organisations and projects a
    # call is billed to and may see: the owner's default applies.
    "openai-organization": "chooses the key owner's organisation",
    "openai-project": "chooses the key owner's project",
    "x-goog-user-project": "chooses the Google Cloud project billed",
}
# Headers whose value is a placeholder candidate, and how to read it out of the value.
_BEARER = b"bearer "


def strip_credentials(headers: list[tuple[bytes, bytes]]
                      ) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """(headers without any credential form, the credential values that were carried).

    The values go to check_placeholder; `Authorization: Bearer X` counts as X.
    """
    kept: list[tuple[bytes, bytes]] = []
    carried: list[bytes] = []
    for name, value in headers:
        folded = name.lower().replace(b"_", b"-").decode("latin-1")
        if folded not in _INBOUND_CREDENTIAL_HEADERS:
            kept.append((name, value))
            continue
        if folded in ("authorization", "x-api-key", "api-key", "x-goog-api-key"):
            stripped = value.strip(b" \t")
            if folded == "authorization":
                if stripped[:len(_BEARER)].lower() != _BEARER:
                    carried.append(b"")  # not a bearer token: cannot be the placeholder
                    continue
                stripped = stripped[len(_BEARER):].strip(b" \t")
            carried.append(stripped)
    return kept, carried


# Headers that make a receiver (a framework, gateway or CDN in front of the provider) take
# another method or path than the one the route admitted: the route's exact (method, path)
# table would be checked against one request and another would run. Dropped toward every
# provider, in any case and with '_' read as '-' (issue 27, item 7). A query `_method=` is
# already refused (no query key outside the route's own passes).
_RECEIVER_OVERRIDE_HEADERS: dict[str, str] = {
    "x-http-method-override": "changes the method (Google, Microsoft, Express, Rails)",
    "x-http-method": "changes the method (Microsoft OData, Symfony)",
    "x-method-override": "changes the method (Express method-override, IBM)",
    "x-original-url": "changes the path (IIS URL Rewrite, Symfony)",
    "x-rewrite-url": "changes the path (IIS, Symfony)",
}


def drop_receiver_overrides(headers: list[tuple[bytes, bytes]]
                            ) -> list[tuple[bytes, bytes]]:
    """`headers` without any that would change the method or path at the receiver."""
    return [(name, value) for name, value in headers
            if name.lower().replace(b"_", b"-").strip(b" \t").decode("latin-1")
            not in _RECEIVER_OVERRIDE_HEADERS]


def check_placeholder(carried: list[bytes], placeholder: bytes) -> None:
    """Accept the call only if it carried the placeholder, and nothing but the placeholder.

    Every credential the call carried (headers from strip_credentials and Route's `key=`)
    must equal it, compared in constant time: a second, different credential is a program
    trying something, and refusing it costs a real harness nothing.
    """
    if not placeholder:
        raise ModelRequestError(500, "no placeholder key is set for this sandbox")
    if not carried:
        raise ModelRequestError(401, "the call carried no key; use the placeholder key this "
                                     "sandbox was given")
    matches = [hmac.compare_digest(value, placeholder) for value in carried]
    if not all(matches):
        raise ModelRequestError(401, "the call carried a key that is not this sandbox's "
                                     "placeholder")


# The real key's form per provider (docs/facts/providers.md §1.4, §2, §3, §4).
_KEY_FORMS: dict[str, tuple[bytes, bytes]] = {
    "anthropic": (b"x-api-key", b""),
    "openai": (b"authorization", b"Bearer "),
    "gemini": (b"x-goog-api-key", b""),
    "openrouter": (b"authorization", b"Bearer "),
}
# A key goes in a header: visible ASCII only, so it cannot end the line or add a header.
_KEY_CHARS = frozenset(range(0x21, 0x7F))


def key_header(provider: str, key: bytes) -> tuple[bytes, bytes]:
    """The header (name, value) that carries the real `key` to `provider`."""
    if provider not in _KEY_FORMS:
        raise ModelRequestError(404, "unknown model provider")
    if not key or not set(key) <= _KEY_CHARS:
        raise ModelRequestError(500, f"the stored {provider} key is empty or not a valid "
                                     "header value (secret set it again)")
    name, prefix = _KEY_FORMS[provider]
    return name, prefix + key


# ---------------------------------------------------------------------------------------------
# Models that search by nature (one data file kept with the code)

class SearchModels:
    """fnmatch patterns, lowercase, matched against a lowercased model name."""

    __slots__ = ("patterns",)

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns

    def refuses(self, model: str) -> bool:
        name = model.strip().lower()  # a front end that trims must not see another name
        # Gemini names come as "models/x" in bodies; OpenRouter adds ":variant".
        candidates = {name, name.removeprefix("models/"), name.split(":", 1)[0]}
        return any(fnmatch.fnmatchcase(candidate, pattern)
                   for candidate in candidates for pattern in self.patterns)


def parse_search_models(text: str) -> SearchModels:
    """One pattern a line; '#' starts a comment (the reason beside each entry)."""
    patterns: list[str] = []
    for line in text.splitlines():
        pattern = line.split("#", 1)[0].strip().lower()
        if pattern:
            patterns.append(pattern)
    if not patterns:
        raise ModelRequestError(500, "the search model list is empty")
    return SearchModels(tuple(patterns))


def read_search_models() -> SearchModels:
    """The list shipped with the code (lnk_proxy/data/search_models.txt); the one read here."""
    text = resources.files("lnk_proxy").joinpath("data/search_models.txt").read_text("utf-8")
    return parse_search_models(text)


# ---------------------------------------------------------------------------------------------
# Bodies

def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, within the limits, or ModelRequestError."""
    if len(raw) > MAX_BODY_BYTES:
        raise ModelRequestError(413, f"the body is over {MAX_BODY_BYTES // (1024 * 1024)} MiB "
                                     "(MAX_BODY_BYTES)")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ModelRequestError(400, "the body is not JSON (UTF-8)") from None
    if not isinstance(body, dict):
        raise ModelRequestError(400, "the body is not a JSON object")
    _refuse_deep(body)
    return body


def _refuse_deep(body: Any) -> None:
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            raise ModelRequestError(400, f"the body nests deeper than {MAX_NESTING_DEPTH} "
                                         "levels (MAX_NESTING_DEPTH)")
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)


def rewrite_body(provider: str, admitted: Route, raw: bytes, *, server_tools: bool,
                 search_models: SearchModels) -> bytes:
    """The bytes to send upstream for `raw`: parsed, rewritten, re-serialised."""
    if not admitted.has_body:
        if raw:
            raise ModelRequestError(400, f"{admitted.name} takes no body")
        return b""
    body = parse_body(raw)
    return orjson.dumps(rewrite(provider, admitted, body, server_tools=server_tools,
                                search_models=search_models))


def rewrite(provider: str, admitted: Route, body: dict[str, Any], *, server_tools: bool,
            search_models: SearchModels) -> dict[str, Any]:
    """The body with server-side tools and fields removed, or ModelRequestError.

    Refuses (400) any URL the provider would fetch and any model that searches by nature,
    whatever `server_tools` says: those are egress by the provider, not tools.
    """
    if provider != admitted.provider:
        raise ModelRequestError(400, "the route is for another provider")
    if not isinstance(body, dict):
        raise ModelRequestError(400, "the body is not a JSON object")
    _refuse_deep(body)
    try:
        out: dict[str, Any] = orjson.loads(orjson.dumps(body))  # a copy we own, JSON types only
    except (orjson.JSONEncodeError, orjson.JSONDecodeError):
        raise ModelRequestError(400, "the body holds a value JSON cannot carry") from None
    # A top-level null is the field's absence to every provider (an optional field left
    # at its default), so it is dropped before any check, for every field alike:
    # `"tools": null` goes as no `tools` does (and as `[]`, which is dropped), and no
    # check below has to tell null from absent. The local filter does the same.
    out = {key: value for key, value in out.items() if value is not None}
    api = admitted.api
    if api == "anthropic":
        _anthropic(provider, out, server_tools)
    elif api == "chat":
        _chat(provider, out, server_tools)
    elif api == "responses":
        _responses(provider, out, server_tools)
    elif api == "gemini":
        _gemini(out, server_tools)
        for nested_key in ("generateContentRequest", "generate_content_request"):
            nested = out.get(nested_key)
            if isinstance(nested, dict):
                _gemini(nested, server_tools)
    elif api != "embeddings":
        raise ModelRequestError(400, f"{admitted.name} takes no body")
    _check_models(provider, admitted, out, search_models)
    _refuse_stored_state(api, out)
    _refuse_fetched_urls(api, out)
    return out


# --- models ---

def _check_models(provider: str, admitted: Route, body: dict[str, Any],
                  search_models: SearchModels) -> None:
    names: list[str] = []
    if admitted.model is not None:
        names.append(admitted.model)
    bodies = [body]
    for nested_key in ("generateContentRequest", "generate_content_request"):
        if isinstance(body.get(nested_key), dict):
            bodies.append(body[nested_key])
    if admitted.name == "batchEmbedContents" and isinstance(body.get("requests"), list):
        bodies.extend(item for item in body["requests"] if isinstance(item, dict))
    for part in bodies:
        if "model" in part:
            if not isinstance(part["model"], str):
                raise ModelRequestError(400, "model must be a string")
            names.append(part["model"])
    for key in ("models", "fallbacks"):
        if key not in body:
            continue
        fallbacks = body[key]
        if not isinstance(fallbacks, list):
            raise ModelRequestError(400, f"{key} must be a list")
        if len(fallbacks) > MAX_FALLBACK_MODELS:
            raise ModelRequestError(400, f"{key} names over {MAX_FALLBACK_MODELS} models "
                                         "(MAX_FALLBACK_MODELS)")
        for entry in fallbacks:
            if isinstance(entry, dict):
                entry = entry.get("model")
            if not isinstance(entry, str):
                raise ModelRequestError(400, f"an entry of {key} is not a model name this "
                                             "verb can check")
            names.append(entry)
    for name in names:
        if search_models.refuses(name):
            raise ModelRequestError(400, "a model that searches the web by nature is refused "
                                         "(the request or one of its fallbacks names one)")
    if provider == "openrouter":
        _refuse_openrouter_names(body, names)


def _refuse_openrouter_names(body: dict[str, Any], names: list[str]) -> None:
    """OpenRouter's model names that bring search or the account's settings, always refused
    (egress by the provider, as a URL source is; docs/facts/providers.md §4)."""
    if "preset" in body:
        raise ModelRequestError(400, "an OpenRouter preset is refused: it carries the "
                                     "account's plugins (web search among them)")
    for name in names:
        lowered = name.lower()
        # ':online' is the web plugin by another name, and Perplexity's older '-online'
        # models search by nature: any 'online' in a name, any case, any variant order.
        if "online" in lowered:
            raise ModelRequestError(400, "an OpenRouter ':online' or '-online' model searches "
                                         "the web and is refused")
        # `@preset/x` and `vendor/model@preset/x` apply a preset; no slug holds '@' else.
        if "@" in lowered:
            raise ModelRequestError(400, "an OpenRouter @preset/ model name is refused: a "
                                         "preset carries the account's plugins (web search "
                                         "among them)")


# --- tools ---

# Anthropic tool types the program runs itself (docs/facts/providers.md §1.1): kept. Everything else
# (web_search_*, web_fetch_*, code_execution_*, tool_search_*, advisor_*, mcp_toolset, and
# any type not yet known) is server-side and removed.
_ANTHROPIC_CLIENT_TOOLS: dict[str, str] = {
    "custom": "a function the program runs",
    "bash_20241022": "bash, run by the program",
    "bash_20250124": "bash, run by the program",
    "text_editor_20241022": "text editor, run by the program",
    "text_editor_20250124": "text editor, run by the program",
    "text_editor_20250429": "text editor, run by the program",
    "text_editor_20250728": "text editor, run by the program",
    "computer_20241022": "computer use, run by the program",
    "computer_20250124": "computer use, run by the program",
    "computer_20251124": "computer use, run by the program",
    "memory_20250818": "memory, files kept by the program",
}
# OpenAI Chat Completions, OpenRouter: functions only (docs/facts/providers.md §2.1, §4; OpenRouter
# hoists any other type, even a bare web_search, to its own server tool).
_CHAT_CLIENT_TOOLS: dict[str, str] = {
    "function": "a function the program runs",
    "custom": "a free-form tool the program runs",
}
# OpenAI Responses (docs/facts/providers.md §2.2). `shell` kept only with environment.type "local";
# `namespace` only with function/custom inside (both checked below).
_RESPONSES_CLIENT_TOOLS: dict[str, str] = {
    "function": "a function the program runs",
    "custom": "a free-form tool the program runs",
    "local_shell": "a shell the program runs",
    "apply_patch": "patches the program applies",
    "computer": "computer use, run by the program",
    "computer_use_preview": "computer use, run by the program",
    "shell": "a shell the program runs (environment local only)",
    "namespace": "a group of functions the program runs",
}
# Gemini tools[] entries are objects of capabilities; kept keys, both proto spellings.
_GEMINI_CLIENT_KEYS: dict[str, str] = {
    "functionDeclarations": "functions the program runs",
    "function_declarations": "functions the program runs",
    "computerUse": "computer use, run by the program",
    "computer_use": "computer use, run by the program",
}
_GEMINI_SPELLINGS = (("functionDeclarations", "function_declarations"),
                     ("computerUse", "computer_use"))

# Top-level fields that bring server capability, per body shape: removed unless server_tools.
# `web_search_options` is in every OpenAI-like and Anthropic-like shape: OpenRouter reads it
# on /chat/completions, /messages and /responses alike (its web search's settings).
_SERVER_FIELDS: dict[str, dict[str, str]] = {
    "anthropic": {
        "mcp_servers": "Anthropic's servers connect to the MCP servers named",
        "container": "a server-side code execution container (and its skills)",
        "web_search_options": "server-side web search (OpenRouter's /messages)",
    },
    "chat": {
        "web_search_options": "server-side web search",
        "plugins": "OpenRouter plugins (web search, web fetch, file parser)",
    },
    "responses": {
        "web_search_options": "server-side web search (OpenRouter's /responses)",
        "plugins": "OpenRouter plugins (web search, web fetch, file parser)",
    },
    "gemini": {
        "cachedContent": "a cache can hold server tools and tool config",
        "cached_content": "a cache can hold server tools and tool config",
    },
}


def _tool_list(body: dict[str, Any], key: str = "tools") -> list[Any] | None:
    tools = body.get(key)
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ModelRequestError(400, f"{key} must be a list")
    if len(tools) > MAX_TOOLS:
        raise ModelRequestError(400, f"over {MAX_TOOLS} tools (MAX_TOOLS)")
    if not all(isinstance(tool, dict) for tool in tools):
        raise ModelRequestError(400, f"an entry of {key} is not an object")
    return tools


def _drop_server_fields(api: str, body: dict[str, Any], provider: str) -> None:
    for field in _SERVER_FIELDS.get(api, {}):
        if field == "plugins" and provider != "openrouter":
            continue
        body.pop(field, None)
    if provider == "openrouter":
        body.pop("plugins", None)


def _text(value: Any) -> str | None:
    """A JSON value as a string, or None: a list or object where a name belongs is no name
    (and must not reach a set look-up, where it would raise TypeError)."""
    return value if isinstance(value, str) else None


def _tool_name(tool: dict[str, Any]) -> str | None:
    name = tool.get("name")
    if name is None and isinstance(tool.get("function"), dict):
        name = tool["function"].get("name")
    return name if isinstance(name, str) else None


def _anthropic(provider: str, body: dict[str, Any], server_tools: bool) -> None:
    if server_tools:
        return
    _drop_server_fields("anthropic", body, provider)
    tools = _tool_list(body)
    kept_names: set[str] = set()
    removed = False
    if tools is not None:
        client = _CHAT_CLIENT_TOOLS if provider == "openrouter" else _ANTHROPIC_CLIENT_TOOLS
        kept: list[dict[str, Any]] = []
        for tool in tools:
            kind = _text(tool.get("type", "custom"))  # absent means a custom (client) tool
            if kind in client and (provider != "openrouter" or kind == "custom"):
                kept.append(tool)
                name = _tool_name(tool)
                if name is not None:
                    kept_names.add(name)
            else:
                removed = True
        for tool in kept:
            _fix_allowed_callers(tool, frozenset({"direct"}))
        _set_tools(body, kept)
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not isinstance(choice, dict):
        raise ModelRequestError(400, "tool_choice must be an object")
    kind = _text(choice.get("type"))
    if kind in ("auto", "none"):
        return
    if kind == "any":
        if not kept_names and removed:
            raise _choice_refused()
        return
    if kind == "tool" and _text(choice.get("name")) in kept_names:
        return
    raise _choice_refused()


def _choice_refused() -> ModelRequestError:
    return ModelRequestError(400, "tool_choice names a server-side tool, which this sandbox "
                                  "removes ([network] server_tools is off)")


def _fix_allowed_callers(tool: dict[str, Any], kept_callers: frozenset[str]) -> None:
    # A caller naming a removed tool (code_execution_*, programmatic) would be dangling:
    # it is taken out; a tool left with no caller is refused, not widened to "direct".
    if "allowed_callers" not in tool:
        return
    callers = tool["allowed_callers"]
    if not isinstance(callers, list):
        raise ModelRequestError(400, "allowed_callers must be a list")
    fixed = [caller for caller in callers
             if isinstance(caller, str) and caller in kept_callers]
    if not fixed:
        raise ModelRequestError(400, "a tool's allowed_callers names only server-side tools, "
                                     "which this sandbox removes")
    tool["allowed_callers"] = fixed


def _set_tools(body: dict[str, Any], kept: list[dict[str, Any]], key: str = "tools") -> None:
    if kept:
        body[key] = kept
    else:
        body.pop(key, None)  # providers refuse an empty tools list; none is the same meaning


def _chat(provider: str, body: dict[str, Any], server_tools: bool) -> None:
    if server_tools:
        return
    _drop_server_fields("chat", body, provider)
    tools = _tool_list(body)
    kept_names: set[tuple[str, str]] = set()
    removed = False
    if tools is not None:
        kept: list[dict[str, Any]] = []
        for tool in tools:
            kind = _text(tool.get("type"))
            if kind in _CHAT_CLIENT_TOOLS:
                kept.append(tool)
                body_of_kind = tool.get(kind)
                name = _text(body_of_kind.get("name")) if isinstance(body_of_kind, dict) else None
                if isinstance(name, str):
                    kept_names.add((kind, name))
            else:
                removed = True
        _set_tools(body, kept)
    _chat_tool_choice(body.get("tool_choice"), kept_names, removed)


def _chat_tool_choice(choice: Any, kept_names: set[tuple[str, str]], removed: bool) -> None:
    if choice is None or choice in ("auto", "none"):
        return
    if choice == "required":
        if not kept_names and removed:
            raise _choice_refused()
        return
    if not isinstance(choice, dict):
        raise _choice_refused()
    kind = _text(choice.get("type"))
    if kind in _CHAT_CLIENT_TOOLS:
        named = choice.get(kind)
        if isinstance(named, dict) and (kind, _text(named.get("name"))) in kept_names:
            return
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools")
        entries = allowed.get("tools") if isinstance(allowed, dict) else None
        if isinstance(entries, list) and entries:
            for entry in entries:
                if not isinstance(entry, dict):
                    raise _choice_refused()
                entry_kind = _text(entry.get("type"))
                named = entry.get(entry_kind) if isinstance(entry_kind, str) else None
                if not (isinstance(named, dict) and (entry_kind, _text(named.get("name")))
                        in kept_names):
                    raise _choice_refused()
            return
    raise _choice_refused()


def _responses_tool_kept(tool: dict[str, Any], provider: str) -> bool:
    kind = _text(tool.get("type"))
    if provider == "openrouter":
        return kind in _CHAT_CLIENT_TOOLS
    if kind not in _RESPONSES_CLIENT_TOOLS:
        return False
    if kind == "shell":
        environment = tool.get("environment")
        # No environment: OpenAI's default is its own container, so absent is not local.
        return isinstance(environment, dict) and environment.get("type") == "local"
    if kind == "namespace":
        inner = _tool_list(tool)
        return inner is not None and all(_text(entry.get("type")) in _CHAT_CLIENT_TOOLS
                                         for entry in inner)
    return True


def _responses(provider: str, body: dict[str, Any], server_tools: bool) -> None:
    if server_tools:
        return
    _drop_server_fields("responses", body, provider)
    if "prompt" in body:
        # A stored prompt lives at OpenAI and may carry its own hosted tools (UNCONFIRMED,
        # docs/facts/providers.md §2.2): what we cannot see, we refuse.
        raise ModelRequestError(400, "a stored prompt (prompt) is refused: it may carry "
                                     "server-side tools this verb cannot see")
    tools = _tool_list(body)
    kept_names: set[tuple[str, str]] = set()
    kept_kinds: set[str] = set()
    removed = False
    if tools is not None:
        kept: list[dict[str, Any]] = []
        for tool in tools:
            if _responses_tool_kept(tool, provider):
                kept.append(tool)
                _fix_allowed_callers(tool, frozenset({"direct"}))
                kind = str(tool.get("type"))
                kept_kinds.add(kind)
                name = tool.get("name")
                if isinstance(name, str):
                    kept_names.add((kind, name))
            else:
                removed = True
        _set_tools(body, kept)
    _responses_tool_choice(body.get("tool_choice"), kept_names, kept_kinds, removed)


def _responses_choice_entry_kept(entry: Any, kept_names: set[tuple[str, str]],
                                 kept_kinds: set[str]) -> bool:
    if not isinstance(entry, dict):
        return False
    kind = _text(entry.get("type"))
    if kind in ("function", "custom"):
        return (kind, _text(entry.get("name"))) in kept_names
    # A hosted-kind choice (apply_patch, shell, computer...) is fine only if that tool was kept.
    return isinstance(kind, str) and kind in kept_kinds and kind in _RESPONSES_CLIENT_TOOLS


def _responses_tool_choice(choice: Any, kept_names: set[tuple[str, str]],
                           kept_kinds: set[str], removed: bool) -> None:
    if choice is None or choice in ("auto", "none"):
        return
    if choice == "required":
        if not kept_kinds and removed:
            raise _choice_refused()
        return
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        entries = choice.get("tools")
        if isinstance(entries, list) and entries and all(
                _responses_choice_entry_kept(entry, kept_names, kept_kinds)
                for entry in entries):
            return
        raise _choice_refused()
    if _responses_choice_entry_kept(choice, kept_names, kept_kinds):
        return
    raise _choice_refused()


def _gemini(body: dict[str, Any], server_tools: bool) -> None:
    for camel, snake in (("cachedContent", "cached_content"), ("toolConfig", "tool_config"),
                         ("systemInstruction", "system_instruction"),
                         ("generationConfig", "generation_config")):
        if camel in body and snake in body:
            # Which one the provider reads is its parser's choice: refuse, do not guess.
            raise ModelRequestError(400, f"both {camel} and {snake} are given; use one")
    if server_tools:
        return
    _drop_server_fields("gemini", body, "gemini")
    tools = _tool_list(body)
    if tools is None:
        return
    kept: list[dict[str, Any]] = []
    for tool in tools:
        for camel, snake in _GEMINI_SPELLINGS:
            if camel in tool and snake in tool:
                raise ModelRequestError(400, f"a tool holds both {camel} and {snake}; use one")
        client = {key: value for key, value in tool.items() if key in _GEMINI_CLIENT_KEYS}
        if client:
            kept.append(client)
    _set_tools(body, kept)


# --- URLs the provider would fetch ---

# Files the Gemini API holds itself (Files API): a file id, nothing fetched from elsewhere,
# but the account's stored state, refused as every file id is (issue 27, item 7).
_GEMINI_FILES_URI = re.compile(
    r"https://generativelanguage\.googleapis\.com/v1beta/files/[a-z0-9-]{1,128}")
# What is program data and never a source is skipped by its place in the body, never by its
# shape: a node that says `"type": "tool_use"` at the top of a Responses body is the
# conversation (`input`), not a replayed call (issue 27, item 2). The places, per body shape,
# as paths of keys from the root; `*` is every entry of a list, `=v` a dict whose `type` is v
# (docs/facts/providers.md §1-§3). Walking more than this costs only a false refusal, never a pass.
_CALL_BLOCK_TYPES = ("tool_use", "server_tool_use", "mcp_tool_use")
_SCHEMA_KEYS = ("parameters", "parametersJsonSchema", "parameters_json_schema", "response",
                "responseJsonSchema", "response_json_schema")
_PROGRAM_DATA_PLACES: dict[str, tuple[tuple[str, ...], ...]] = {
    "anthropic": (
        # A client tool's JSON schema, and an assistant's replayed tool call (model output).
        ("tools", "*", "input_schema"),
        *(("messages", "*", "role=assistant", "content", "*", f"={kind}", "input")
          for kind in _CALL_BLOCK_TYPES),
        ("output_format", "schema"), ("output_config", "format", "schema"),
    ),
    "chat": (
        ("tools", "*", "function", "parameters"),
        ("functions", "*", "parameters"),
        ("response_format", "json_schema", "schema"),
    ),
    "responses": (
        ("tools", "*", "parameters"),
        ("tools", "*", "tools", "*", "parameters"),  # a namespace's functions
        ("text", "format", "schema"),
    ),
    "gemini": (
        *(("tools", "*", declarations, "*", key)
          for declarations in ("functionDeclarations", "function_declarations")
          for key in _SCHEMA_KEYS),
        *(("contents", "*", "parts", "*", call, "args")
          for call in ("functionCall", "function_call")),
        # A function's own result (a Struct Gemini reads as JSON); its `parts` are walked.
        *(("contents", "*", "parts", "*", result, "response")
          for result in ("functionResponse", "function_response")),
        *((config, schema) for config in ("generationConfig", "generation_config")
          for schema in ("responseSchema", "response_schema", "responseJsonSchema",
                         "response_json_schema")),
    ),
}


def _program_data(api: str, body: dict[str, Any]) -> set[int]:
    """The ids of the values at this shape's program-data places (a fresh copy: no value is
    shared, so an id names one place)."""
    found: set[int] = set()
    roots = [body]
    if api == "gemini":
        roots += [body[key] for key in ("generateContentRequest", "generate_content_request")
                  if isinstance(body.get(key), dict)]
    for root in roots:
        for place in _PROGRAM_DATA_PLACES.get(api, ()):
            nodes: list[Any] = [root]
            for step in place:
                nodes = _step(nodes, step)
            found.update(id(node) for node in nodes if isinstance(node, (dict, list)))
    return found


def _step(nodes: list[Any], step: str) -> list[Any]:
    if step == "*":
        return [entry for node in nodes if isinstance(node, list) for entry in node]
    key, equals, value = step.partition("=")
    if equals:  # a filter: keep the dicts whose `key` (default `type`) is exactly value
        field = key or "type"
        return [node for node in nodes if isinstance(node, dict) and node.get(field) == value]
    return [node[step] for node in nodes if isinstance(node, dict) and step in node]


def _refuse_fetched_urls(api: str, body: dict[str, Any]) -> None:
    skipped = _program_data(api, body)
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        if id(node) in skipped:
            continue
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        _refuse_url_in(node)
        _refuse_stored_file_in(node)
        stack.extend(node.values())


# --- the account's stored state, named by id (issue 27, item 7) ---

# The key is added outside the sandbox, so an id in a body opens whatever the person's account
# holds under it: a response, a conversation or a file made by another program, another
# sandbox or the person. The verb cannot tell an id this sandbox's own calls made from one
# that reached it some other way (a log, a shared file), and the calls that make such state
# (the Files API, /v1/conversations, GET /v1/responses/{id}) are refused by the router, so
# every such reference is refused, whatever `server_tools` says: it is not a tool. The state
# a hosted tool itself names (a vector store, a code container) goes with the tool: removed
# unless `server_tools`. Stored state that is written and never read back (`store`) passes.
# Top-level fields of a Responses body (OpenAI, OpenRouter, a local runtime's /v1/responses).
_RESPONSES_STATE_FIELDS: dict[str, str] = {
    "previous_response_id": "it continues a response stored at the provider, which this "
                            "sandbox may not have made; send the whole conversation in input",
    "conversation": "it reads and extends a conversation stored at the provider, which this "
                    "sandbox may not have made; send the whole conversation in input",
}


def _refuse_stored_state(api: str, body: dict[str, Any]) -> None:
    if api != "responses":
        return
    for field, why in _RESPONSES_STATE_FIELDS.items():
        if field in body:
            raise ModelRequestError(400, f"{field} is refused: {why}")
    if "background" in body and body["background"] is not False:
        raise ModelRequestError(400, "background is refused: the response would run on at the "
                                     "provider after this call, and only a stored-response "
                                     "call (refused) reads it")


def _refuse_stored_file_in(node: dict[str, Any]) -> None:
    # Any file id, in every shape: chat's file part, Responses' input_file and input_image
    # (also inside tool outputs), Anthropic's file source and container_upload block, a
    # code interpreter's file_ids; program data (schemas, replayed tool input) is skipped.
    for key in ("file_id", "file_ids"):
        if key in node:
            raise ModelRequestError(400, f"{key} is refused: it reads a file stored at the "
                                         "provider, which this sandbox did not upload (the "
                                         "Files API is refused); send the content inline")
    source = node.get("source")
    if isinstance(source, dict) and source.get("type") == "file":
        raise ModelRequestError(400, "a file source (source.type \"file\") is refused: it "
                                     "reads a file stored at the provider; send the content "
                                     "as base64")
    kind = node.get("type")
    if kind == "container_upload":
        raise ModelRequestError(400, "container_upload is refused: it puts a file stored at "
                                     "the provider into a code execution container")
    if kind == "item_reference":
        raise ModelRequestError(400, "an item_reference is refused: it reads an item stored "
                                     "at the provider by id; send the item itself")


# Inline file data in the forms the providers document (docs/facts/providers.md §2.1, §4): a base64
# data: URL (`data:application/pdf;base64,...`) or bare base64. Nothing else: a WHATWG URL
# parser reads `https:evil/f`, `https:/evil/f` and `https:\\evil/f` as https://evil/f, so a
# deny-list of URL shapes cannot be complete (issue 27, item 3). Neither form holds a ':'
# outside the data: scheme, so neither can be read as another scheme's URL.
_MEDIA_TYPE_PART = r"[A-Za-z0-9!#$&^_.+-]{1,127}"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_INLINE_FILE_DATA = re.compile(
    rf"(?:[dD][aA][tT][aA]:{_MEDIA_TYPE_PART}/{_MEDIA_TYPE_PART}"
    rf"(?:;[A-Za-z0-9!#$&^_.+=-]{{1,127}})*;base64,)?{_BASE64}")


def _is_data_url(value: str) -> bool:
    return value[:5].lower() == "data:"


def _refuse_url_in(node: dict[str, Any]) -> None:
    # Anthropic (and OpenRouter's messages): image/document source {type: "url"} anywhere.
    source = node.get("source")
    if isinstance(source, dict) and source.get("type") == "url":
        raise ModelRequestError(400, "a URL source (source.type \"url\") is refused: the "
                                     "provider would fetch it; send the content as base64")
    # OpenAI and OpenRouter: image_url must be inline data (chat: {url}, responses: a string).
    image_url = node.get("image_url")
    if isinstance(image_url, dict):
        image_url = image_url.get("url")
    if isinstance(image_url, str) and not _is_data_url(image_url):
        raise ModelRequestError(400, "an image_url that is not a data: URL is refused: the "
                                     "provider would fetch it")
    if isinstance(node.get("file_url"), str):
        raise ModelRequestError(400, "input_file.file_url is refused: the provider would "
                                     "fetch it; send file_data")
    file_data = node.get("file_data")
    if isinstance(file_data, str) and not _INLINE_FILE_DATA.fullmatch(file_data):
        raise ModelRequestError(400, "a file_data that is not a base64 data: URL or bare "
                                     "base64 is refused: the provider may fetch it as a URL")
    # Gemini: fileData.fileUri never. Any other URI is fetched; the Files API's own form
    # (files/<id>) reads a file stored at the provider, which this sandbox did not upload
    # (issue 27, item 7: the Files API is refused), so it is refused too.
    for key in ("fileData", "file_data"):
        data = node.get(key)
        if not isinstance(data, dict):
            continue
        for uri_key in ("fileUri", "file_uri"):
            uri = data.get(uri_key)
            if uri is None:
                continue
            if isinstance(uri, str) and _GEMINI_FILES_URI.fullmatch(uri):
                raise ModelRequestError(400, "a fileData.fileUri of the Files API is refused: "
                                             "it reads a file stored at the provider, which "
                                             "this sandbox did not upload; send inlineData")
            raise ModelRequestError(400, "a fileData.fileUri other than the Files API's "
                                         "is refused: the provider would fetch it")
