"""The local model's inference filter: which calls reach a model runtime on this machine's
loopback (`[localhost] models = [11434]`), and in what form (sans IO).

Job: for one HTTP request to a models port decide, from bytes and dicts only, (1) whether
its method and path are one of the local runtimes' inference calls or read-only listings
(`route`), (2) which of its headers are sent on and whether its body is in a form this
filter can read (`check_headers`), (3) what its JSON body becomes (`check_body`): parsed,
every key read as Ollama's Go reads it (a case variant of a known field, or two keys that
fold equal, refused), a top-level null and `keep_alive` dropped, server-side tools
removed and URL media refused where the runtime speaks a provider's API
(lnk_proxy.model_rules' own rewrite, reused, not copied), models that leave the machine
refused by name, the runtimes' own dangerous fields refused (tensors loaded with
torch.load, request templates, audio and video URLs), and re-serialised.

Trust: the request comes from the sandboxed program and is hostile; the runtime is this
machine's, the user's, and may be any of Ollama, llama.cpp's llama-server, vLLM or LM Studio
(facts in docs/facts/providers.md §7). The port's runtime is not known in advance, so
the union of the families' inference routes is allowed on every models port. That is sound
because each route in the union is inference or a read-only listing on every runtime that
serves it, and a runtime that does not serve one answers 404: no route of one family is an
admin or outward route of another (the table below was checked against each family's
refused list, and a test checks the two lists never meet).

Every rule is an allow-list: a runtime's new admin endpoint is refused until it is known.
A path is compared exactly, never decoded or normalised: an encoded (`%`), relative (`.`,
`..`), doubled-slash, backslash or differently cased path is refused as it is.

Order of operations (the relay's, lnk_relay.relay): route -> check_headers -> the body read
whole (at most MAX_BODY_BYTES) -> check_body -> the request sent on as our own
re-serialisation (orjson.dumps), never the program's bytes: a duplicate key or an odd
encoding cannot mean one thing to this filter and another to the runtime, and a key Go
would match to a field in another spelling never passes (see "Keys as Go reads them").

LocalModelError is the only exception that leaves this module; its reason is one line, safe
to send to the program and to write to the wire's log: it never quotes the path, the query,
a header or the body.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

import orjson

from lnk_proxy import model_rules
from lnk_proxy.model_rules import ModelRequestError
from lnk_proxy.refusal import StatusError, odd_path
from lnk_proxy.refusal import refusal_body as _refusal_body

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "ALLOWED_ROUTES",
    "KNOWN_FIELDS",
    "MAX_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "MAX_MODEL_NAME_BYTES",
    "MAX_TARGET_BYTES",
    "OLLAMA_FIELDS",
    "REFUSED_FIELDS",
    "REFUSED_SURFACES",
    "LocalModelError",
    "LocalRoute",
    "check_body",
    "check_headers",
    "go_fold_name",
    "is_cloud_model",
    "refusal_body",
    "route",
]

# ---------------------------------------------------------------------------------------------
# Limits (each a named constant with its reason)

# A body is parsed whole and held once in the relay's memory: the model verb's own limit
# (model_rules.MAX_BODY_BYTES: base64 images make real bodies large, 32 MiB holds them),
# refused (413) from the Content-Length before a byte is read, else as it passes.
MAX_BODY_BYTES = model_rules.MAX_BODY_BYTES
# A request head of an inference call is a few hundred bytes (the SDKs add a dozen
# headers); h11's own default is 16 KiB. Beyond this the head is a probe: 431.
MAX_HEAD_BYTES = 32 * 1024
# A path and query of an inference call is short; a long one is a probe or a payload.
MAX_TARGET_BYTES = model_rules.MAX_TARGET_BYTES
# Ollama's model names are at most some 350 bytes (host/namespace/model:tag); a longer name
# names no local model, and bounds the cloud check's work.
MAX_MODEL_NAME_BYTES = 512


class LocalModelError(StatusError):
    """A call the local filter refuses: an HTTP status and one line the program may read
    and the wire's log may keep (never the path, query, a header or the body)."""


def refusal_body(status: int, reason: str) -> bytes:
    """A refusal of the filter as the program reads it: the verbs' one line of JSON
    (lnk_proxy.refusal.refusal_body), so a refusal reads the same by the relayed port and
    by `/_link/s/<secret>/local/<port>`."""
    return _refusal_body(status, reason)


# ---------------------------------------------------------------------------------------------
# Routes

# How a route's body is checked (each through model_rules.rewrite, as the model verb does):
# - "none": no body at all (a listing);
# - "plain": a JSON object with no tools to take out (Ollama's native API, completions,
#   embeddings, tokenize, rerank): every model it names checked, every URL the runtime
#   would fetch refused (model_rules' embeddings shape does exactly that);
# - "chat": OpenAI chat completions: tools other than functions removed,
#   web_search_options removed, URL images refused;
# - "responses": OpenAI responses: hosted tools (web search, file search, mcp, code
#   interpreter…) removed, URL files and images refused, a stored prompt refused, and the
#   runtime's stored state by id refused (previous_response_id, conversation, background,
#   item_reference, file_id: vLLM keeps responses for other callers; issue 27, item 7);
# - "anthropic": Anthropic messages (Ollama, llama.cpp, vLLM and LM Studio speak it; Ollama
#   runs web_search_20250305 itself there): server tools and mcp_servers removed, URL
#   sources refused.
_BODY_SHAPES: dict[str, tuple[str, str, str]] = {
    # shape -> (model_rules provider, its route's method and path whose rewrite applies)
    "plain": ("openai", "POST", "/v1/embeddings"),
    "chat": ("openai", "POST", "/v1/chat/completions"),
    "responses": ("openai", "POST", "/v1/responses"),
    "anthropic": ("anthropic", "POST", "/v1/messages"),
    "anthropic_count": ("anthropic", "POST", "/v1/messages/count_tokens"),
}

_OLLAMA = "Ollama"
_LLAMA_CPP = "llama.cpp"
_VLLM = "vLLM"
_LM_STUDIO = "LM Studio"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LocalRoute:
    """One admitted call: the exact method and target sent on, its body's shape."""

    method: str
    path: str
    query: str          # "" or the exact query allowed for the route ("?beta=true")
    body: str           # a key of _BODY_SHAPES, or "none"
    model: str | None   # the model named in the path (`/v1/models/<model>`), else None

    @property
    def target(self) -> str:
        return self.path + self.query

    def __repr__(self) -> str:
        return f"LocalRoute({self.method} {self.target} as {self.body})"


# The exact paths: (method, path) -> (body shape, why it is allowed, the families that
# serve it). HEAD is allowed wherever GET is (a GET without its body). Anything absent is
# refused. Sources: docs/facts/providers.md §7.1 (Ollama server/routes.go), §7.2 (llama.cpp
# tools/server/server.cpp), §7.3 (vLLM docs/usage/security.md), §7.4 (LM Studio's docs).
ALLOWED_ROUTES: dict[tuple[str, str], tuple[str, str, tuple[str, ...]]] = {
    # Ollama's native API.
    ("POST", "/api/generate"): ("plain", "inference", (_OLLAMA,)),
    ("POST", "/api/chat"): ("plain", "inference", (_OLLAMA,)),
    ("POST", "/api/embed"): ("plain", "inference", (_OLLAMA,)),
    ("POST", "/api/embeddings"): ("plain", "inference (the older form)", (_OLLAMA,)),
    ("GET", "/api/tags"): ("none", "the local models' listing", (_OLLAMA,)),
    ("GET", "/api/ps"): ("none", "the loaded models' listing", (_OLLAMA,)),
    ("POST", "/api/show"): ("plain", "one local model's details, read only", (_OLLAMA,)),
    ("GET", "/api/version"): ("none", "the runtime's version", (_OLLAMA,)),
    ("GET", "/"): ("none", "the liveness probe ('Ollama is running')", (_OLLAMA,)),
    # The OpenAI-compatible API (every family speaks it).
    ("POST", "/v1/chat/completions"): ("chat", "inference",
                                       (_OLLAMA, _LLAMA_CPP, _VLLM, _LM_STUDIO)),
    ("POST", "/v1/completions"): ("plain", "inference",
                                  (_OLLAMA, _LLAMA_CPP, _VLLM, _LM_STUDIO)),
    ("POST", "/v1/embeddings"): ("plain", "inference",
                                 (_OLLAMA, _LLAMA_CPP, _VLLM, _LM_STUDIO)),
    ("POST", "/v1/responses"): ("responses", "inference",
                                (_OLLAMA, _LLAMA_CPP, _VLLM, _LM_STUDIO)),
    ("GET", "/v1/models"): ("none", "the models' listing",
                            (_OLLAMA, _LLAMA_CPP, _VLLM, _LM_STUDIO)),
    # The Anthropic-compatible API.
    ("POST", "/v1/messages"): ("anthropic", "inference",
                               (_OLLAMA, _LLAMA_CPP, _VLLM, _LM_STUDIO)),
    ("POST", "/v1/messages/count_tokens"): ("anthropic_count", "a token count",
                                            (_LLAMA_CPP, _VLLM)),
    # llama.cpp's own and unprefixed aliases.
    ("POST", "/completion"): ("plain", "inference", (_LLAMA_CPP,)),
    ("POST", "/completions"): ("plain", "inference", (_LLAMA_CPP,)),
    ("POST", "/chat/completions"): ("chat", "inference", (_LLAMA_CPP,)),
    ("POST", "/responses"): ("responses", "inference", (_LLAMA_CPP,)),
    ("POST", "/infill"): ("plain", "inference (code infill)", (_LLAMA_CPP,)),
    ("POST", "/embedding"): ("plain", "inference", (_LLAMA_CPP,)),
    ("POST", "/embeddings"): ("plain", "inference", (_LLAMA_CPP,)),
    ("POST", "/rerank"): ("plain", "inference (rerank)", (_LLAMA_CPP, _VLLM)),
    ("POST", "/reranking"): ("plain", "inference (rerank)", (_LLAMA_CPP,)),
    ("POST", "/v1/rerank"): ("plain", "inference (rerank)", (_LLAMA_CPP, _VLLM)),
    ("POST", "/v1/reranking"): ("plain", "inference (rerank)", (_LLAMA_CPP,)),
    ("POST", "/tokenize"): ("plain", "the tokenizer, no state", (_LLAMA_CPP, _VLLM)),
    ("POST", "/detokenize"): ("plain", "the tokenizer, no state", (_LLAMA_CPP, _VLLM)),
    ("POST", "/apply-template"): ("plain", "the chat template, no state", (_LLAMA_CPP,)),
    ("GET", "/health"): ("none", "the liveness probe", (_LLAMA_CPP, _VLLM)),
    ("GET", "/v1/health"): ("none", "the liveness probe", (_LLAMA_CPP,)),
    ("GET", "/props"): ("none", "the server's settings, read only (clients read the "
                                "chat template there)", (_LLAMA_CPP,)),
    ("GET", "/models"): ("none", "the models' listing", (_LLAMA_CPP,)),
    # vLLM's own.
    ("POST", "/v1/score"): ("plain", "inference (scoring)", (_VLLM,)),
    ("POST", "/score"): ("plain", "inference (scoring)", (_VLLM,)),
    ("POST", "/pooling"): ("plain", "inference (pooling)", (_VLLM,)),
    ("POST", "/classify"): ("plain", "inference (classification)", (_VLLM,)),
    ("POST", "/v2/embed"): ("plain", "inference", (_VLLM,)),
    ("POST", "/v2/rerank"): ("plain", "inference (rerank)", (_VLLM,)),
    ("POST", "/inference/v1/generate"): ("plain", "inference", (_VLLM,)),
    ("GET", "/ping"): ("none", "the liveness probe", (_VLLM,)),
    ("GET", "/version"): ("none", "the runtime's version", (_VLLM,)),
    # LM Studio's legacy REST API (its native /api/v1/chat is refused below).
    ("POST", "/api/v0/chat/completions"): ("chat", "inference", (_LM_STUDIO,)),
    ("POST", "/api/v0/completions"): ("plain", "inference", (_LM_STUDIO,)),
    ("POST", "/api/v0/embeddings"): ("plain", "inference", (_LM_STUDIO,)),
    ("GET", "/api/v0/models"): ("none", "the models' listing", (_LM_STUDIO,)),
    ("GET", "/api/v1/models"): ("none", "the models' listing", (_LM_STUDIO,)),
}
# `GET /v1/models/<model>` (Ollama, OpenAI-compatible): one model's entry, read only.
_MODEL_PREFIXES = ("/v1/models/",)
# The one query an inference call here takes: the Anthropic SDK posts its beta calls to
# /v1/messages?beta=true. Any other query is refused (none of these routes reads one; a
# runtime that did could read it as an action, as llama.cpp's /slots?action= does).
_ALLOWED_QUERIES: dict[str, frozenset[str]] = {
    "/v1/messages": frozenset({"beta=true"}),
    "/v1/messages/count_tokens": frozenset({"beta=true"}),
}

# Known non-inference surfaces, each with the one line that says why it is refused
# (matched on the lowercased path, whole or as a prefix of segments, first match wins).
# Only used to word the refusal: anything not in ALLOWED_ROUTES is refused all the same.
# The reasons name what a path does, never the path itself (the log keeps no path).
REFUSED_SURFACES: tuple[tuple[str, str], ...] = (
    ("/api/pull", "pulling a model is refused (Ollama downloads it from a registry: "
                  "outward)"),
    ("/api/push", "pushing a model is refused (Ollama uploads it to a registry: outward)"),
    ("/api/create", "creating a model is refused (admin: writes models, and a model can "
                    "point at a remote host)"),
    ("/api/copy", "copying a model is refused (admin: writes models)"),
    ("/api/delete", "deleting a model is refused (admin)"),
    ("/api/blobs", "Ollama's blobs are refused (admin: writes model files)"),
    ("/api/experimental/web_search", "Ollama's web search is refused (it searches the web "
                                     "through ollama.com: outward)"),
    ("/api/experimental/web_fetch", "Ollama's web fetch is refused (it fetches any URL "
                                    "through ollama.com: outward)"),
    ("/api/experimental", "Ollama's experimental endpoints are refused (some reach the "
                          "web)"),
    ("/api/me", "Ollama's account endpoints are refused (ollama.com sign-in: outward)"),
    ("/api/signout", "Ollama's account endpoints are refused (ollama.com sign-in: outward)"),
    ("/api/user", "Ollama's account endpoints are refused (ollama.com keys: outward)"),
    ("/api/v1/chat", "LM Studio's native chat is refused (its remote MCP integrations are "
                     "not read by this filter); its OpenAI-compatible chat is allowed"),
    ("/api/v1/models/load", "loading a model is refused (admin)"),
    ("/api/v1/models/unload", "unloading a model is refused (admin)"),
    ("/api/v1/models/download", "downloading a model is refused (outward)"),
    ("/cors-proxy", "llama.cpp's CORS proxy is refused (it fetches any URL: outward)"),
    ("/tools", "llama.cpp's built-in tools are refused (they run on this machine)"),
    ("/slots", "llama.cpp's slots are refused (save, restore and erase touch files; the "
               "listing shows other callers' prompts)"),
    ("/props", "changing llama.cpp's settings is refused (admin)"),
    ("/lora-adapters", "adapters are refused (admin: loads weights)"),
    ("/v1/load_lora_adapter", "adapters are refused (admin: loads weights)"),
    ("/v1/unload_lora_adapter", "adapters are refused (admin: unloads weights)"),
    ("/v1/chat/completions/control", "llama.cpp's control endpoint is refused (admin)"),
    ("/v1/stream", "stored streams are refused (other callers' streams)"),
    ("/models/load", "loading a model is refused (admin)"),
    ("/models/unload", "unloading a model is refused (admin)"),
    ("/models", "changing the router's models is refused (admin); their listing is "
                "allowed"),
    ("/v1/responses", "stored responses are refused (other callers' state); a new "
                      "response is allowed"),
    ("/sleep", "vLLM's sleep is refused (admin)"),
    ("/wake_up", "vLLM's wake-up is refused (admin)"),
    ("/is_sleeping", "vLLM's admin endpoints are refused"),
    ("/pause", "vLLM's pause is refused (admin)"),
    ("/resume", "vLLM's resume is refused (admin)"),
    ("/is_paused", "vLLM's admin endpoints are refused"),
    ("/collective_rpc", "vLLM's collective RPC is refused (admin: runs code in its "
                        "workers)"),
    ("/update_weights", "vLLM's weight updates are refused (admin)"),
    ("/init_weight_transfer_engine", "vLLM's weight updates are refused (admin)"),
    ("/scale_elastic_ep", "vLLM's scaling is refused (admin)"),
    ("/is_scaling_elastic_ep", "vLLM's admin endpoints are refused"),
    ("/reset_prefix_cache", "vLLM's cache resets are refused (admin)"),
    ("/reset_mm_cache", "vLLM's cache resets are refused (admin)"),
    ("/reset_encoder_cache", "vLLM's cache resets are refused (admin)"),
    ("/start_profile", "vLLM's profiler is refused (admin: writes files)"),
    ("/stop_profile", "vLLM's profiler is refused (admin: writes files)"),
    ("/abort_requests", "aborting requests is refused (admin: other callers' requests)"),
    ("/server_info", "vLLM's admin endpoints are refused"),
    ("/get_world_size", "vLLM's admin endpoints are refused"),
    ("/tokenizer_info", "vLLM's admin endpoints are refused"),
    ("/metrics", "metrics are refused (not inference; they describe other callers' use)"),
    ("/v1/audio", "audio endpoints are refused (their multipart bodies cannot be checked "
                  "here)"),
    ("/audio", "audio endpoints are refused (their multipart bodies cannot be checked "
               "here)"),
    ("/v1/files", "stored files are refused (state kept in the runtime)"),
    ("/v1/batches", "batches are refused (run later, outside this call and its rules)"),
    ("/admin", "admin paths are refused"),
)

# Bytes a path may hold at all: RFC 3986 pchar minus '%' (nothing is decoded, so nothing
# encoded can pass), minus sub-delims no inference path uses. A backslash, space, control
# byte or non-ASCII byte is out.
_PATH_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                        b"-._~:/")
# A model id in `/v1/models/<model>`: Ollama's names hold ':' (tag) and '/' is not taken
# (a namespaced name there is refused: no SDK asks for one by path).
_MODEL_ID_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                            b"-._:")


def route(method: bytes | str, target: bytes | str) -> LocalRoute:
    """The call `method target` as an admitted LocalRoute, or LocalModelError.

    `target` is the request target as the program sent it (origin form). It is compared,
    never decoded or normalised.
    """
    method_s = _ascii(method, "method")
    target_b = target.encode("utf-8", "surrogateescape") if isinstance(target, str) else target
    if len(target_b) > MAX_TARGET_BYTES:
        raise LocalModelError(414, f"the path and query are over {MAX_TARGET_BYTES} bytes "
                                   "(MAX_TARGET_BYTES)")
    path_b, has_query, query_b = target_b.partition(b"?")
    _refuse_odd_path(path_b)
    path = path_b.decode("ascii")
    looked_up = "GET" if method_s == "HEAD" else method_s
    allowed = ALLOWED_ROUTES.get((looked_up, path))
    model: str | None = None
    if allowed is not None:
        body = allowed[0]
    elif looked_up == "GET" and (model := _model_in_path(path)) is not None:
        body = "none"
    else:
        raise LocalModelError(*_why_not(method_s, path))
    query = ""
    if has_query:
        query_s = query_b.decode("latin-1")
        if query_s not in _ALLOWED_QUERIES.get(path, frozenset()):
            raise LocalModelError(400, "a query is refused (the local runtimes' inference "
                                       "calls take none)")
        query = "?" + query_s
    if model is not None and is_cloud_model(model):
        raise _cloud_refused()
    return LocalRoute(method=method_s, path=path, query=query, body=body, model=model)


def _ascii(value: bytes | str, what: str) -> str:
    try:
        return value.decode("ascii") if isinstance(value, bytes) else value.encode(
            "ascii").decode("ascii")
    except UnicodeError:
        raise LocalModelError(400, f"the {what} is not ASCII") from None


def _refuse_odd_path(path: bytes) -> None:
    # Go's net/http (Ollama) cleans paths and redirects; others decode '%'.
    why = odd_path(path, _PATH_CHARS, encoded="path", named="the path",
                   start="the path must start with '/' (origin form)")
    if why is not None:
        raise LocalModelError(400, why)


def _model_in_path(path: str) -> str | None:
    for prefix in _MODEL_PREFIXES:
        if path.startswith(prefix):
            model = path[len(prefix):]
            if (model and len(model) <= MAX_MODEL_NAME_BYTES and model[0].isalnum()
                    and set(model.encode("ascii")) <= _MODEL_ID_CHARS):
                return model
    return None


def _why_not(method: str, path: str) -> tuple[int, str]:
    folded = path.lower()
    for marker, why in REFUSED_SURFACES:
        if folded == marker or folded.startswith(marker + "/"):
            return 403, why
    if any(path == known for _, known in ALLOWED_ROUTES) or _model_in_path(path):
        return 405, ("this inference path takes another method (the method and path are "
                     "compared exactly)")
    if any(folded == known.lower() for _, known in ALLOWED_ROUTES):
        return 404, ("a path that differs from an inference call in letter case is refused "
                     "(compared exactly)")
    return 404, ("not one of the local runtimes' inference calls (method and path compared "
                 "exactly, case included; an unknown endpoint is refused until it is known)")


# ---------------------------------------------------------------------------------------------
# Headers

# Not sent on, whatever else is: hop-by-hop fields (RFC 9110 7.6.1; `upgrade` too: no call
# here switches protocols), the framing this filter sets itself (the body is its own
# re-serialisation, and `connection: close` is added: one request per connection), and
# `expect` (the relay takes the body itself).
_DROPPED = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"te", b"trailer",
                      b"upgrade", b"proxy-authorization", b"content-length",
                      b"transfer-encoding", b"expect", b"content-encoding"})
# Content codings this filter can read: none. A compressed body (Ollama decodes zstd,
# docs/facts/providers.md §7.1) cannot be checked for server tools, URLs or cloud models: 415.
_READABLE_CODINGS = frozenset({b"identity"})


def check_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's headers to send on (as given, names lowercased by h11), or
    LocalModelError: a body in a coding this filter cannot read is refused (415)."""
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"content-encoding":
            codings = [coding.strip(b" \t").lower() for coding in value.split(b",")]
            if any(coding not in _READABLE_CODINGS for coding in codings):
                raise LocalModelError(415, "a Content-Encoding other than identity is "
                                           "refused (a compressed body cannot be checked)")
            continue
        if lowered in _DROPPED:
            continue
        kept.append((lowered, value))
    # A header that changes the method or path at the receiver: as toward every provider.
    return model_rules.drop_receiver_overrides(kept)


# ---------------------------------------------------------------------------------------------
# Models that leave the machine

def is_cloud_model(name: str) -> bool:
    """Whether Ollama would send a call naming `name` to ollama.com: a tag `cloud`, or one
    ending in `-cloud` (internal/modelref/modelref.go parseSourceSuffix: the text after
    the last ':', trimmed, lowercased). Read more widely than Ollama does: every ':' part
    after the first is looked at, so no nesting or spacing slips by."""
    folded = name.strip().lower()
    return any(tag.strip() == "cloud" or tag.strip().endswith("-cloud")
               for tag in folded.split(":")[1:])


def _cloud_refused() -> LocalModelError:
    return LocalModelError(403, "a model that runs off this machine is refused (Ollama's "
                                "':cloud' and '-cloud' tags go to ollama.com)")


# Keys that name a model: `model` anywhere in a body (Ollama and the OpenAI- and
# Anthropic-compatible APIs), `name` at the top (Ollama's older alias of `model`), and the
# entries of `models` and `fallbacks` at the top (model_rules checks their form).
_MODEL_KEYS = frozenset({"model"})
_TOP_MODEL_KEYS = frozenset({"model", "name"})
_TOP_MODEL_LISTS = frozenset({"models", "fallbacks"})


def _refuse_cloud_models(body: dict[str, Any]) -> None:
    named: list[Any] = [body[key] for key in _TOP_MODEL_KEYS if key in body]
    for key in _TOP_MODEL_LISTS:
        entries = body.get(key)
        if isinstance(entries, list):
            named.extend(entry.get("model") if isinstance(entry, dict) else entry
                         for entry in entries)
    for name in named:
        if not isinstance(name, str):
            continue  # model_rules refused a `model` that is not a string; Ollama a `name`
        if len(name.encode("utf-8", "surrogatepass")) > MAX_MODEL_NAME_BYTES:
            raise LocalModelError(400, f"a model name is over {MAX_MODEL_NAME_BYTES} bytes "
                                       "(MAX_MODEL_NAME_BYTES)")
        if not name.isascii():
            # Case folding differs between Go and Python outside ASCII: a name that could
            # fold to 'cloud' in one and not the other is not guessed at.
            raise LocalModelError(400, "a model name that is not ASCII is refused")
        if is_cloud_model(name):
            raise _cloud_refused()
    # Deeper: a `model` anywhere (no runtime reads one there today; one that did would
    # find no cloud model).
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in _MODEL_KEYS and isinstance(value, str) and is_cloud_model(value):
                    raise _cloud_refused()
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


# ---------------------------------------------------------------------------------------------
# Keys as Go reads them (Ollama is Go: its handlers bind a body with gin's ShouldBindJSON,
# that is encoding/json's Unmarshal into a struct)
#
# Go's encoding/json (src/encoding/json/decode.go, `(*decodeState).object`) matches each
# object key to a struct field first exactly (`fields.byExactName`), else by its fold
# (`fields.byFoldedName[string(foldName(key))]`), and every key that matches sets the field,
# so the LAST match wins. `foldName` (src/encoding/json/fold.go, `appendFoldedName`)
# upper-cases ASCII a-z and maps every other rune to the smallest rune of its
# `unicode.SimpleFold` orbit (`foldRune`). Every field tag in Ollama is ASCII, and the only
# non-ASCII runes whose orbit holds an ASCII letter are U+017F (long s) and U+212A
# (the Kelvin sign, k): so `{"model": "a", "Model": "b"}`, `"MODEL"`, `"mOdel"` and
# `"\u017ftream"` all set Ollama's field, while Python (and this filter until now) read
# only the exact key.
# Keys are unquoted first (decode.go `unquoteBytes`): invalid UTF-8 and a lone surrogate
# escape become U+FFFD, which folds to no ASCII letter; orjson refuses both anyway.
#
# The rule, at every object level of a body (a Go map's keys are exact, a struct's are
# not, and which is which depends on the runtime: every level is read as a struct's):
# a key that folds as Go folds to a field a runtime or this filter reads (KNOWN_FIELDS)
# but is not spelled exactly so is refused, and two keys of one object that fold equal are
# refused. What passes then means one field, spelled one way, to Go and to Python.

# Every JSON field name of Ollama's request and response types: the json tags of api/types.go,
# openai/openai.go, openai/responses.go, anthropic/anthropic.go and middleware/*.go
# (ollama/ollama fb30760, August 2026). A field Ollama adds later is caught by the collision
# rule whenever the exact spelling is also sent; a case variant alone of a field not listed
# here is read by Ollama and by no check here (no check reads a field it does not know).
OLLAMA_FIELDS: frozenset[str] = frozenset({
    "$defs", "_debug_info", "_debug_render_only", "action", "adapters", "annotations",
    "anyOf", "arguments", "avatarurl", "background", "bio", "budget_tokens", "bytes",
    "cached_tokens", "call_id", "capabilities", "choices", "citations", "cited_text",
    "cloud", "code", "completed", "completed_at", "completion_tokens", "content",
    "content_block", "context", "context_length", "conversation", "created", "created_at",
    "data", "delta", "description", "destination", "detail", "details", "digest",
    "dimensions", "disable_parallel_tool_use", "disabled", "done", "done_reason",
    "draft_files", "draft_num_predict", "draft_quantize", "effort", "email", "embedding",
    "embedding_length", "embeddings", "encoding_format", "encrypted_content",
    "encrypted_index", "enum", "error", "error_code", "eval_count", "eval_duration",
    "expires_at", "families", "family", "file_data", "file_id", "file_url", "filename",
    "files", "finish_reason", "firstname", "format", "frequency_penalty", "from",
    "function", "generate_summary", "id", "image_count", "image_url", "images", "include",
    "include_usage", "incomplete_details", "index", "info", "input", "input_schema",
    "input_tokens", "input_tokens_details", "insecure", "instructions", "is_error", "items",
    "json_schema", "keep_alive", "lastname", "license", "links", "load_duration", "logprob",
    "logprobs", "main_gpu", "max_output_tokens", "max_results", "max_tokens",
    "max_tool_calls", "max_uses", "media_type", "message", "messages", "metadata", "min_p",
    "model", "model_info", "modelfile", "models", "modified_at", "name", "num_batch",
    "num_ctx", "num_gpu", "num_keep", "num_predict", "num_thread", "object", "options",
    "output", "output_config", "output_tokens", "output_tokens_details", "owned_by",
    "page_age", "parallel_tool_calls", "param", "parameter_size", "parameters",
    "parent_model", "parser", "partial_json", "password", "plan", "presence_penalty",
    "previous_response_id", "projector_info", "prompt", "prompt_cache_key",
    "prompt_eval_count", "prompt_eval_duration", "prompt_tokens", "properties",
    "quantization", "quantization_level", "quantize", "query", "raw", "reason", "reasoning",
    "reasoning_effort", "reasoning_tokens", "recommendations", "remote_host",
    "remote_model", "rendered_template", "renderer", "repeat_last_n", "repeat_penalty",
    "request_id", "required", "required_plan", "requires", "response", "response_format",
    "results", "role", "safety_identifier", "schema", "seed", "service_tier", "shape",
    "shift", "signature", "signin_url", "size", "size_vram", "source", "status", "stop",
    "stop_reason", "stop_sequence", "stop_sequences", "store", "stream", "stream_options",
    "strict", "suffix", "summary", "system", "system_fingerprint", "temperature",
    "template", "tensors", "text", "think", "thinking", "title", "token", "tool_call_id",
    "tool_calls", "tool_choice", "tool_name", "tool_use_id", "tools", "top_k",
    "top_logprobs", "top_p", "total", "total_duration", "total_tokens", "truncate",
    "truncation", "type", "typical_p", "url", "usage", "use_mmap", "user_id", "username",
    "verbose", "vram_bytes",
})
# The keys this filter and model_rules read or remove that Ollama has no field for (the
# other runtimes' and the hosted APIs' fields; llama.cpp, vLLM and LM Studio match keys
# exactly, so their fields matter only where Ollama would also fold to them).
_FILTER_FIELDS: frozenset[str] = frozenset({
    "allowed_callers", "allowed_tools", "audio_embeds", "audio_url", "chat_template",
    "container", "environment", "fallbacks", "file_ids", "image_embeds", "input_image",
    "logits_processors", "mcp_servers", "mcp_tool_use", "plugins", "prompt_embeds",
    "requests", "server_tool_use", "tool_use", "video_url", "web_search_options",
})
KNOWN_FIELDS: frozenset[str] = OLLAMA_FIELDS | _FILTER_FIELDS

# The runes other than ASCII letters that Go folds to an ASCII letter (foldRune: the
# smallest rune of the SimpleFold orbit): U+017F (long s) -> 'S', U+212A (Kelvin) -> 'K'.
_GO_FOLDS_TO_ASCII = {"\u017f": "S", "\u212a": "K"}


def go_fold_name(key: str) -> str:
    """`key` as Go's encoding/json folds it to match a struct field (fold.go foldName):
    exact for ASCII (a-z upper-cased) and for the two runes that fold to ASCII (U+017F and
    U+212A to 'S' and 'K'); a surrogate (Python's stand-in for what Go reads as invalid
    UTF-8, which orjson refuses before this) is U+FFFD. Any other rune is folded through
    Python's one-character case mappings (its lowercase's uppercase): that can only join
    runes Go keeps apart (U+0131, dotless i, reads as 'I' here and not in Go), never, for
    the cased letters tried by the tests, part runes Go folds together. So where the two
    differ this refuses more, never less."""
    if key.isascii():
        return key.upper()  # Python's upper-casing of ASCII is Go's: a-z only
    return "".join(_go_fold_rune(char) for char in key)


@functools.lru_cache(maxsize=4096)
def _go_fold_rune(char: str) -> str:
    if char < "\x80":
        return chr(ord(char) - 32) if "a" <= char <= "z" else char
    if "\ud800" <= char <= "\udfff":
        return "\ufffd"
    special = _GO_FOLDS_TO_ASCII.get(char)
    if special is not None:
        return special
    lower = char.lower()
    lower = lower if len(lower) == 1 else char
    upper = lower.upper()
    return upper if len(upper) == 1 else lower


_KNOWN_BY_FOLD: dict[str, str] = {go_fold_name(field): field for field in KNOWN_FIELDS}


def _objects(tree: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in `tree`, at any depth (no recursion: depth is the program's)."""
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            yield node
            stack.extend(node.values())


def _refuse_folded_keys(body: dict[str, Any]) -> None:
    for node in _objects(body):
        seen: set[str] = set()
        for key in node:
            folded = go_fold_name(key)
            known = _KNOWN_BY_FOLD.get(folded)
            if known is not None and key != known:
                raise LocalModelError(400, f"a key that folds to {known!r} but is spelled "
                                           "otherwise is refused (Ollama's Go matches JSON "
                                           "keys to fields in any case, the last winning)")
            if folded in seen:
                raise LocalModelError(400, "two keys that differ only in letter case are "
                                           "refused (Go reads them as one field, the last "
                                           "winning)")
            seen.add(folded)


# ---------------------------------------------------------------------------------------------
# What a local runtime reads that a hosted provider's API does not have

# Fields a local runtime acts on with this machine's code or network, refused wherever they
# are in a body (400), with the reason. model_rules' rewrite knows the hosted providers'
# forms; these are the runtimes' own (docs/facts/providers.md §7.3 and vLLM's docs).
REFUSED_FIELDS: dict[str, str] = {
    "prompt_embeds": "vLLM loads it with torch.load (a crafted tensor corrupted the "
                     "runtime's memory before 0.11.1)",
    "image_embeds": "vLLM loads it with torch.load",
    "audio_embeds": "vLLM loads it with torch.load",
    "chat_template": "a template sent with the request runs in the runtime's template "
                     "engine (the runtime's own is used)",
    "logits_processors": "names code for the runtime to import and run (vLLM)",
}
# Media a runtime fetches by URL beside model_rules' image_url (vLLM fetches audio and video
# URLs itself): only inline `data:` URLs pass.
_MEDIA_URL_KEYS = ("audio_url", "video_url")


def _refuse_runtime_fields(body: dict[str, Any]) -> None:
    # The whole tree, schemas and replayed tool calls included: a function that merely
    # takes a parameter of one of these names is refused too, which no real client sends;
    # stricter than model_rules' walk, and nothing to keep in step with it.
    for node in _objects(body):
        for key, why in REFUSED_FIELDS.items():
            if key in node:
                raise LocalModelError(400, f"{key} is refused: {why}")
        for key in _MEDIA_URL_KEYS:
            if key not in node:
                continue
            value = node[key]
            if isinstance(value, dict):
                value = value.get("url")
            if not (isinstance(value, str) and value[:5].lower() == "data:"):
                raise LocalModelError(400, f"{key} other than a data: URL is refused: the "
                                           "runtime would fetch it")


# ---------------------------------------------------------------------------------------------
# Null, and the model's time in memory

# A top-level `null` means the field is absent to every runtime (Go: "unmarshaling a JSON
# null into any other Go type has no effect", a slice or pointer set to nil; llama.cpp's
# json_value and vLLM's optional fields: the default). So it is dropped before any check,
# for every field alike: `"tools": null` is what no `tools` is, as `[]` is (model_rules
# drops an empty list, and so does this on every route), and `"tools": "x"` is refused on
# every route. Dropping it also means no check below has to tell null from absent.
#
# `keep_alive` (Ollama's GenerateRequest, ChatRequest, EmbedRequest, EmbeddingRequest: how
# long the model stays loaded after the call; api/types.go Duration.UnmarshalJSON: a number
# is seconds, a string is Go's time.ParseDuration, anything negative is forever, and `0`
# unloads the model at once) is dropped on every route: how long the person's models stay
# in this machine's memory is the person's (OLLAMA_KEEP_ALIVE, 5 minutes by default), not
# the program's, which could otherwise unload the person's model or pin one (`-1`, `1e18`).
# Dropped rather than bounded: a bound would have to read both forms exactly as Go does,
# and a dropped field cannot be misread. Only the top level: no runtime reads it deeper.
_RUNTIME_STATE_FIELDS = frozenset({"keep_alive"})


def _without_absent_or_runtime_state(body: dict[str, Any]) -> dict[str, Any]:
    kept = {key: value for key, value in body.items()
            if value is not None and key not in _RUNTIME_STATE_FIELDS}
    # `tools` reads one way on every route, Ollama's native ones included (where
    # model_rules' shape does not look at it): a list of objects, an empty one dropped.
    tools = kept.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            raise LocalModelError(400, "tools must be a list of objects")
        if not tools:
            del kept["tools"]
    return kept


# ---------------------------------------------------------------------------------------------
# Bodies

# No model here searches by nature: the model verb's list (lnk_proxy/data/search_models.txt)
# names hosted models, and would refuse a local model that merely shares a name.
_NO_SEARCH_MODELS = model_rules.SearchModels(())


def check_body(admitted: LocalRoute, raw: bytes, *, server_tools: bool = False) -> bytes:
    """The bytes to send on for `raw`: parsed, rewritten, re-serialised, or
    LocalModelError. `server_tools` is `[network] server_tools` (the runtime's own web
    search on its Anthropic-compatible API is such a tool); cloud models and URL media are
    refused whatever it says: those leave the machine by nature."""
    if admitted.body == "none":
        if raw:
            raise LocalModelError(400, "this call takes no body")
        return b""
    if len(raw) > MAX_BODY_BYTES:
        raise LocalModelError(413, f"the body is over {MAX_BODY_BYTES // (1024 * 1024)} MiB "
                                   "(MAX_BODY_BYTES)")
    provider, method, path = _BODY_SHAPES[admitted.body]
    try:
        body = model_rules.parse_body(raw)
    except ModelRequestError as error:
        raise LocalModelError(error.status, error.reason.replace("the provider", "the runtime")
                              ) from None
    _refuse_folded_keys(body)
    body = _without_absent_or_runtime_state(body)
    try:
        shape = model_rules.route(provider, method, path)
        out = model_rules.rewrite(provider, shape, body, server_tools=server_tools,
                                  search_models=_NO_SEARCH_MODELS)
    except ModelRequestError as error:
        raise LocalModelError(error.status, error.reason.replace("the provider", "the runtime")
                              ) from None
    _refuse_cloud_models(out)
    _refuse_runtime_fields(out)
    try:
        return orjson.dumps(out)
    except orjson.JSONEncodeError:
        raise LocalModelError(400, "the body holds a value JSON cannot carry") from None
