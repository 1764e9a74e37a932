"""The model verb's sans-IO rules (lnk_proxy/model_rules.py): router, credentials, rewriter.

Golden bodies per API (tests/golden/model_*.json), a table of every route allowed and refused
and of the path attacks, and Hypothesis over random tool lists, nested content and targets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_proxy import model_rules as m
from lnk_proxy.model_rules import ModelRequestError
from tests.conftest import fuzz

GOLDEN = Path(__file__).parent / "golden"
SEARCH = m.read_search_models()


def _route(provider: str, method: str, target: str) -> m.Route:
    return m.route(provider, method.encode(), target.encode())


def _refusal(call: Any) -> ModelRequestError:
    with pytest.raises(ModelRequestError) as caught:
        call()
    error = caught.value
    assert error.reason and "\n" not in error.reason and "\r" not in error.reason
    return error


# --- golden bodies ---

@pytest.mark.parametrize("name", ["anthropic", "openai_chat", "openai_responses", "gemini",
                                  "openrouter"])
def test_golden_body_before_and_after(name: str) -> None:
    case = orjson.loads((GOLDEN / f"model_{name}.json").read_bytes())
    admitted = _route(case["provider"], case["method"], case["path"])
    raw = orjson.dumps(case["before"])
    out = m.rewrite_body(case["provider"], admitted, raw, server_tools=case["server_tools"],
                         search_models=SEARCH)
    assert orjson.loads(out) == case["after"]
    # server_tools on: tools and server fields pass untouched.
    kept = m.rewrite(case["provider"], admitted, case["before"], server_tools=True,
                     search_models=SEARCH)
    assert kept == case["before"]


# --- the router ---

ALLOWED = [
    ("anthropic", "POST", "/v1/messages", "messages"),
    ("anthropic", "POST", "/v1/messages?beta=true", "messages"),
    ("anthropic", "POST", "/v1/messages/count_tokens", "count_tokens"),
    ("anthropic", "GET", "/v1/models", "models.list"),
    ("anthropic", "GET", "/v1/models?limit=20&after_id=claude-3", "models.list"),
    ("anthropic", "GET", "/v1/models/claude-sonnet-4-5-20250929", "models.get"),
    ("openai", "POST", "/v1/chat/completions", "chat.completions"),
    ("openai", "POST", "/v1/responses", "responses"),
    ("openai", "POST", "/v1/embeddings", "embeddings"),
    ("openai", "GET", "/v1/models", "models.list"),
    ("openai", "GET", "/v1/models/ft:gpt-4o-mini:org:x:abc", "models.get"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:generateContent", "generateContent"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
     "streamGenerateContent"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:countTokens", "countTokens"),
    ("gemini", "POST", "/v1/models/gemini-2.5-flash:generateContent", "generateContent"),
    ("gemini", "POST", "/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
     "streamGenerateContent"),
    ("gemini", "GET", "/v1/models", "models.list"),
    ("gemini", "POST", "/v1beta/models/text-embedding-004:embedContent", "embedContent"),
    ("gemini", "POST", "/v1beta/models/text-embedding-004:batchEmbedContents",
     "batchEmbedContents"),
    ("gemini", "GET", "/v1beta/models", "models.list"),
    ("gemini", "GET", "/v1beta/models?pageSize=50", "models.list"),
    ("gemini", "GET", "/v1beta/models/gemini-2.5-flash", "models.get"),
    ("openrouter", "POST", "/api/v1/chat/completions", "chat.completions"),
    ("openrouter", "POST", "/api/v1/responses", "responses"),
    ("openrouter", "POST", "/api/v1/messages", "messages"),
    ("openrouter", "POST", "/api/v1/embeddings", "embeddings"),
    ("openrouter", "GET", "/api/v1/models", "models.list"),
]


@pytest.mark.parametrize(("provider", "method", "target", "name"), ALLOWED)
def test_route_allows_inference_paths(provider: str, method: str, target: str,
                                      name: str) -> None:
    admitted = _route(provider, method, target)
    assert admitted.name == name
    assert admitted.path == target.partition("?")[0]
    assert admitted.query == ("?" + target.partition("?")[2] if "?" in target else "")


REFUSED = [
    # not inference: files, batches, fine-tuning, admin, realtime/live, interactions, caches
    ("anthropic", "POST", "/v1/files", 404, "Files API"),
    ("anthropic", "POST", "/v1/messages/batches", 404, "batches"),
    ("anthropic", "GET", "/v1/organizations/api_keys", 404, "admin"),
    ("anthropic", "POST", "/v1/skills", 404, "skills"),
    ("openai", "POST", "/v1/files", 404, "Files API"),
    ("openai", "POST", "/v1/batches", 404, "batches"),
    ("openai", "POST", "/v1/fine_tuning/jobs", 404, "fine-tuning"),
    ("openai", "GET", "/v1/organization/admin_api_keys", 404, "admin"),
    ("openai", "GET", "/v1/realtime", 404, "realtime"),
    ("openai", "POST", "/v1/realtime/sessions", 404, "realtime"),
    ("openai", "POST", "/v1/vector_stores", 404, "vector stores"),
    ("openai", "POST", "/v1/assistants", 404, "assistants"),
    ("openai", "POST", "/v1/containers", 404, "containers"),
    ("openai", "POST", "/v1/completions", 404, "inference calls"),
    ("openai", "GET", "/v1/responses/resp_123", 404, "inference calls"),
    # stored state by id (issue 27, item 7): every path that reads or makes it
    ("openai", "GET", "/v1/responses/resp_123/input_items", 404, "inference calls"),
    ("openai", "DELETE", "/v1/responses/resp_123", 404, "inference calls"),
    ("openai", "POST", "/v1/responses/resp_123/cancel", 404, "inference calls"),
    ("openai", "POST", "/v1/conversations", 404, "inference calls"),
    ("openai", "GET", "/v1/conversations/conv_1/items", 404, "inference calls"),
    ("openai", "GET", "/v1/chat/completions/chatcmpl_1", 404, "inference calls"),
    ("openai", "GET", "/v1/chat/completions", 404, "inference calls"),
    ("openai", "GET", "/v1/files/file-abc/content", 404, "Files API"),
    ("anthropic", "GET", "/v1/files", 404, "Files API"),
    ("anthropic", "GET", "/v1/files/file_abc/content", 404, "Files API"),
    ("anthropic", "GET", "/v1/files/file_abc/content?beta=true", 404, "Files API"),
    ("gemini", "GET", "/v1beta/files/abc-123", 404, "Files API"),
    ("openrouter", "GET", "/api/v1/responses/resp_1", 404, "inference calls"),
    ("gemini", "POST", "/v1beta/interactions", 404, "Interactions"),
    ("gemini", "POST", "/v1beta/cachedContents", 404, "cachedContents"),
    ("gemini", "POST", "/upload/v1beta/files", 404, "Files API"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:batchGenerateContent", 404,
     "batches"),
    ("gemini", "POST", "/v1beta/tunedModels", 404, "tuned"),
    ("gemini", "GET",
     "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent", 404,
     "live"),
    ("gemini", "POST", "/v1beta/agents", 404, "agents"),
    ("gemini", "POST", "/v2/models/gemini-2.5-flash:generateContent", 404, "inference"),
    ("openrouter", "GET", "/api/v1/keys", 404, "admin"),
    ("openrouter", "GET", "/api/v1/credits", 404, "inference calls"),
    # method compared exactly
    ("anthropic", "GET", "/v1/messages", 404, "inference calls"),
    ("openai", "DELETE", "/v1/models/gpt-4o", 404, "inference calls"),
    ("gemini", "GET", "/v1beta/models/gemini-2.5-flash:generateContent", 404, "inference"),
    ("openai", "post", "/v1/chat/completions", 404, "case included"),
    # case: provider's path segments compared exactly
    ("openai", "POST", "/V1/chat/completions", 404, "case included"),
    ("openai", "POST", "/v1/Chat/completions", 404, "case included"),
    ("gemini", "POST", "/v1beta/models/gemini-2.5-flash:GenerateContent", 404, "inference"),
    ("anthropic", "POST", "/v1/messages/", 404, "inference calls"),
    # encoded, relative, odd paths: refused, never decoded
    ("anthropic", "POST", "/v1/%6dessages", 404, "encoded"),
    ("openai", "POST", "/v1/%2e%2e/v1/files", 404, "encoded"),
    ("openai", "POST", "/v1/chat%2fcompletions", 404, "encoded"),
    ("openai", "POST", "/v1/chat/completions/../../files", 404, "'..'"),
    ("openai", "POST", "/v1/../v1/files", 404, "'..'"),
    ("openai", "POST", "/v1/./chat/completions", 404, "'.'"),
    ("openai", "POST", "//v1/chat/completions", 404, "'//'"),
    ("openai", "POST", "/v1//chat/completions", 404, "'//'"),
    ("openai", "POST", "/v1\\chat\\completions", 404, "backslash"),
    ("openai", "POST", "v1/chat/completions", 404, "start with"),
    ("openai", "POST", "/v1/chat/completions#x", 404, "fragment"),
    ("openai", "POST", "/v1/chat/completions;x=1", 404, "only letters"),
    ("openai", "POST", "/v1/chat/completions\t", 404, "only letters"),
    ("gemini", "POST", "/v1beta/models/..:generateContent", 404, "inference"),
    ("gemini", "POST", "/v1beta/models/x%2F..%2Ffiles:generateContent", 404, "encoded"),
    ("anthropic", "GET", "/v1/models/..", 404, "'..'"),
    # providers: exact lowercase names
    ("Anthropic", "POST", "/v1/messages", 404, "unknown model provider"),
    ("OPENAI", "POST", "/v1/chat/completions", 404, "unknown model provider"),
    ("openai%2f", "POST", "/v1/chat/completions", 404, "unknown model provider"),
    ("azure", "POST", "/v1/chat/completions", 404, "unknown model provider"),
    # query: only the call's own keys, nothing encoded
    ("gemini", "POST", "/v1beta/models/g:streamGenerateContent?alt=json", 400, "takes only sse"),
    ("gemini", "POST", "/v1beta/models/g:generateContent?alt=sse", 400, "none"),
    ("gemini", "POST", "/v1beta/models/g:streamGenerateContent?alt=sse&alt=sse", 400, "twice"),
    ("gemini", "POST", "/v1beta/models/g:streamGenerateContent?alt=%73se", 400, "encoded"),
    ("openai", "POST", "/v1/chat/completions?api-version=1", 400, "none"),
    ("anthropic", "POST", "/v1/messages?beta=false", 400, "takes only true"),
    ("anthropic", "POST", "/v1/messages?beta", 400, "without a key and a value"),
    ("anthropic", "POST", "/v1/messages?key=a b", 400, "character"),
]


@pytest.mark.parametrize(("provider", "method", "target", "status", "why"), REFUSED)
def test_route_refuses(provider: str, method: str, target: str, status: int,
                       why: str) -> None:
    error = _refusal(lambda: _route(provider, method, target))
    assert error.status == status
    assert why in error.reason


def test_route_takes_key_query_out_as_a_credential() -> None:
    admitted = _route("gemini", "POST",
                      "/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=PLACE&alt=sse")
    assert admitted.query == "?alt=sse"
    assert admitted.query_credential == b"PLACE"
    assert "PLACE" not in repr(admitted)


def test_route_refusal_never_quotes_the_target() -> None:
    planted = "sk-ant-SECRET0123456789"
    for target in (f"/v1/files/{planted}", f"/v1/messages?key={planted}&x=1",
                   f"/v1/%2e/{planted}", f"/v1/messages?beta={planted}"):
        error = _refusal(lambda t=target: _route("anthropic", "POST", t))
        assert planted not in error.reason


def test_route_target_at_the_limit() -> None:
    name = "a" * 120
    assert _route("openai", "GET", f"/v1/models/{name}").name == "models.get"
    long_target = "/v1/models/" + "a" * m.MAX_TARGET_BYTES
    assert _refusal(lambda: _route("openai", "GET", long_target)).status == 414


@fuzz(10)
@given(provider=st.sampled_from([*sorted(m.PROVIDERS), "Gemini", "x"]),
       method=st.binary(max_size=8) | st.sampled_from([b"GET", b"POST"]),
       target=st.binary(max_size=80) | st.builds(
           lambda parts: b"/" + b"/".join(parts),
           st.lists(st.sampled_from([b"v1", b"v1beta", b"api", b"models", b"messages", b"..",
                                     b".", b"", b"%2e", b"chat", b"completions", b"g:countTokens",
                                     b"files", b"?alt=sse", b"?key=k", b"V1"]), max_size=6)))
def test_route_fuzzed_raises_only_its_error(provider: str, method: bytes,
                                            target: bytes) -> None:
    try:
        admitted = m.route(provider, method, target)
    except ModelRequestError as error:
        assert error.reason and "\n" not in error.reason
        return
    # Anything admitted is one of the exact shapes: no '%', '..', '//' or backslash.
    assert b"%" not in target and b"\\" not in target and b"//" not in target
    assert "/../" not in admitted.path + "/" and "/./" not in admitted.path + "/"
    assert "key=" not in admitted.query


# --- credentials ---

def test_strip_credentials_removes_every_inbound_form() -> None:
    headers = [
        (b"Host", b"127.0.0.1"), (b"X-Api-Key", b"P"), (b"Authorization", b"Bearer  P "),
        (b"api-key", b"P"), (b"X-Goog-Api-Key", b"P"), (b"Proxy-Authorization", b"Basic eA=="),
        (b"Cookie", b"s=1"), (b"x_api_key", b"P"), (b"OpenAI-Organization", b"org-x"),
        (b"anthropic-version", b"2023-06-01"), (b"content-type", b"application/json"),
    ]
    kept, carried = m.strip_credentials(headers)
    assert kept == [(b"Host", b"127.0.0.1"), (b"anthropic-version", b"2023-06-01"),
                    (b"content-type", b"application/json")]
    assert carried == [b"P", b"P", b"P", b"P", b"P"]
    m.check_placeholder(carried, b"P")


@pytest.mark.parametrize(("carried", "why"), [
    ([], "carried no key"),
    ([b"sk-real"], "not this sandbox's placeholder"),
    ([b"P", b"sk-real"], "not this sandbox's placeholder"),
    ([b"P", b""], "not this sandbox's placeholder"),
    ([b"p"], "not this sandbox's placeholder"),
])
def test_check_placeholder_refuses_missing_wrong_or_extra(carried: list[bytes],
                                                          why: str) -> None:
    error = _refusal(lambda: m.check_placeholder(carried, b"P"))
    assert error.status == 401 and why in error.reason
    assert "sk-real" not in error.reason


def test_basic_authorization_is_not_a_placeholder() -> None:
    _kept, carried = m.strip_credentials([(b"authorization", b"Basic UDo=")])
    assert _refusal(lambda: m.check_placeholder(carried, b"P")).status == 401


@pytest.mark.parametrize(("provider", "header"), [
    ("anthropic", (b"x-api-key", b"K-1")),
    ("openai", (b"authorization", b"Bearer K-1")),
    ("gemini", (b"x-goog-api-key", b"K-1")),
    ("openrouter", (b"authorization", b"Bearer K-1")),
])
def test_key_header_per_provider(provider: str, header: tuple[bytes, bytes]) -> None:
    assert m.key_header(provider, b"K-1") == header


@pytest.mark.parametrize("key", [b"", b"k\r\nx-evil: 1", b"k y", b"k\x00", "ké".encode()])
def test_key_header_refuses_a_key_that_is_not_a_header_value(key: bytes) -> None:
    error = _refusal(lambda: m.key_header("openai", key))
    assert error.status == 500 and "not a valid header value" in error.reason
    assert not key or key.decode("latin-1") not in error.reason


# --- the rewriter: refusals ---

def _rewrite(provider: str, target: str, body: dict[str, Any],
             server_tools: bool = False) -> dict[str, Any]:
    return m.rewrite(provider, _route(provider, "POST", target), body,
                     server_tools=server_tools, search_models=SEARCH)


MSG = "/v1/messages"
CHAT = "/v1/chat/completions"
RESP = "/v1/responses"
GEN = "/v1beta/models/gemini-2.5-flash:generateContent"
OR_CHAT = "/api/v1/chat/completions"

REFUSED_BODIES: list[tuple[str, str, dict[str, Any], str]] = [
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"}}]}]},
     "URL source"),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}]}]}]},
     "URL source"),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "content", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}}]}]},
     "URL source"),
    ("anthropic", MSG, {"system": [{"type": "text", "text": "x"}, {
        "type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}]},
     "URL source"),
    ("anthropic", MSG, {"tools": [{"type": "web_search_20250305", "name": "web_search"}],
                        "tool_choice": {"type": "tool", "name": "web_search"}}, "tool_choice"),
    ("anthropic", MSG, {"tools": [{"type": "web_search_20250305", "name": "web_search"}],
                        "tool_choice": {"type": "any"}}, "tool_choice"),
    ("anthropic", MSG, {"tools": [{"name": "f", "input_schema": {},
                                   "allowed_callers": ["code_execution_20250825"]}]},
     "allowed_callers"),
    ("anthropic", MSG, {"model": "claude-x", "fallbacks": ["o3-deep-research"]},
     "searches the web"),
    ("anthropic", MSG, {"tools": "web_search"}, "must be a list"),
    ("anthropic", MSG, {"tools": [{"name": "f"}] * (m.MAX_TOOLS + 1)}, "MAX_TOOLS"),
    ("openai", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}]}]},
     "image_url"),
    ("openai", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": " data:x"}}]}]}, "image_url"),
    ("openai", CHAT, {"model": "gpt-4o-search-preview"}, "searches the web"),
    ("openai", CHAT, {"model": "GPT-4o-Mini-Search-Preview-2025-03-11"}, "searches the web"),
    ("openai", CHAT, {"model": 5}, "model must be a string"),
    ("openai", CHAT, {"tools": [{"type": "web_search"}], "tool_choice": "required"},
     "tool_choice"),
    ("openai", CHAT, {"tools": [{"type": "function", "function": {"name": "f"}}],
                      "tool_choice": {"type": "function", "function": {"name": "g"}}},
     "tool_choice"),
    ("openai", RESP, {"input": [{"role": "user", "content": [
        {"type": "input_file", "file_url": "https://x.example/a.pdf"}]}]}, "file_url"),
    ("openai", RESP, {"input": [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_image", "image_url": "https://x.example/a.png"}]}]}, "image_url"),
    ("openai", RESP, {"input": [{"type": "computer_call_output", "call_id": "c", "output": {
        "type": "computer_screenshot", "image_url": "http://x.example/s.png"}}]}, "image_url"),
    ("openai", RESP, {"prompt": {"id": "pmpt_1"}}, "stored prompt"),
    ("openai", RESP, {"tools": [{"type": "web_search"}],
                      "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
    ("openai", RESP, {"tools": [{"type": "mcp", "server_label": "x"}],
                      "tool_choice": {"type": "mcp", "server_label": "x"}}, "tool_choice"),
    ("openai", RESP, {"model": "o4-mini-deep-research"}, "searches the web"),
    ("openai", RESP, {"tools": [{"type": "shell", "environment": {"type": "local"},
                                 "allowed_callers": ["programmatic"]}]}, "allowed_callers"),
    ("gemini", GEN, {"contents": [{"parts": [{"fileData": {
        "fileUri": "https://x.example/a.pdf"}}]}]}, "fileUri"),
    ("gemini", GEN, {"contents": [{"parts": [{"file_data": {
        "file_uri": "gs://bucket/a.pdf"}}]}]}, "fileUri"),
    ("gemini", GEN, {"contents": [{"parts": [{"fileData": {
        "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/a/../../x"}}]}]},
     "fileUri"),
    ("gemini", GEN, {"contents": [{"parts": [{"fileData": {
        "fileUri": "https://www.youtube.com/watch?v=x"}}]}]}, "fileUri"),
    ("gemini", GEN, {"contents": [{"parts": [{"functionResponse": {"name": "f", "parts": [
        {"fileData": {"fileUri": "https://x.example/a.png"}}]}}]}]}, "fileUri"),
    ("gemini", GEN, {"tools": [{"functionDeclarations": [], "function_declarations": []}]},
     "both"),
    ("gemini", GEN, {"cachedContent": "a", "cached_content": "b"}, "both"),
    ("gemini", "/v1beta/models/gemini-2.5-flash:countTokens", {"generateContentRequest": {
        "contents": [{"parts": [{"fileData": {"fileUri": "https://x.example/a"}}]}]}},
     "fileUri"),
    ("gemini", "/v1beta/models/deep-research-pro:generateContent", {}, "searches the web"),
    ("openrouter", OR_CHAT, {"model": "perplexity/sonar-pro"}, "searches the web"),
    ("openrouter", OR_CHAT, {"model": "openai/gpt-4.1",
                             "models": ["anthropic/claude-sonnet-4.5", "perplexity/sonar"]},
     "fallbacks"),
    ("openrouter", OR_CHAT, {"model": "openai/gpt-4.1:online"}, ":online"),
    ("openrouter", OR_CHAT, {"model": "openai/gpt-4.1:ONLINE:free "}, ":online"),
    ("openrouter", OR_CHAT, {"model": " Perplexity/Sonar-Pro "}, "searches the web"),
    ("openrouter", OR_CHAT, {"model": "x", "models": ["openai/gpt-4.1:online"]}, ":online"),
    ("openrouter", OR_CHAT, {"model": "x", "models": [{"weird": 1}]}, "entry of models"),
    ("openrouter", OR_CHAT, {"model": "x", "models": ["a"] * (m.MAX_FALLBACK_MODELS + 1)},
     "MAX_FALLBACK_MODELS"),
    ("openrouter", OR_CHAT, {"messages": [{"role": "user", "content": [{"type": "file", "file": {
        "filename": "a.pdf", "file_data": "https://x.example/a.pdf"}}]}]}, "file_data"),
    ("openrouter", OR_CHAT, {"tools": [{"type": "openrouter:web_search"}],
                             "tool_choice": {"type": "openrouter:web_search"}}, "tool_choice"),
]


# The account's stored state by id (issue 27, item 7): refused on every shape that has the
# field, whatever server_tools says (see test_stored_state_is_refused_even_with_server_tools).
OR_RESP = "/api/v1/responses"
OR_MSG = "/api/v1/messages"
STATE_BODIES: list[tuple[str, str, dict[str, Any], str]] = [
    *((p, t, {"model": "x", "input": "hi", "previous_response_id": "resp_1"},
       "previous_response_id is refused") for p, t in (("openai", RESP), ("openrouter", OR_RESP))),
    *((p, t, {"model": "x", "input": "hi", "conversation": c}, "conversation is refused")
      for p, t in (("openai", RESP), ("openrouter", OR_RESP))
      for c in ("conv_1", {"id": "conv_1"})),
    *((p, t, {"model": "x", "input": "hi", "background": b}, "background is refused")
      for p, t in (("openai", RESP), ("openrouter", OR_RESP)) for b in (True, 1, "true")),
    ("openai", RESP, {"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
    ("openai", RESP, {"input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-abc"}]}]}, "file_id is refused"),
    ("openai", RESP, {"input": [{"role": "user", "content": [
        {"type": "input_image", "file_id": "file-abc"}]}]}, "file_id is refused"),
    ("openai", RESP, {"input": [{"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_file", "file_id": "file-abc"}]}]}, "file_id is refused"),
    ("openai", RESP, {"input": "hi", "prompt": None, "tools": [
        {"type": "function", "name": "f", "parameters": {}}], "x": {"file_ids": ["f"]}},
     "file_ids is refused"),
    ("openai", CHAT, {"messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-abc"}}]}]}, "file_id is refused"),
    ("openrouter", OR_CHAT, {"messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-abc"}}]}]}, "file_id is refused"),
    *((p, t, {"messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "file", "file_id": "file_abc"}}]}]},
       'source.type "file"') for p, t in (("anthropic", MSG), ("openrouter", OR_MSG))),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "file"}}]}]}, 'source.type "file"'),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]}]},
     'source.type "file"'),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "container_upload", "file_id": "file_abc"}]}]}, "file_id is refused"),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "container_upload"}]}]}, "container_upload is refused"),
    ("gemini", GEN, {"contents": [{"parts": [{"fileData": {
        "fileUri": "https://generativelanguage.googleapis.com/v1beta/files/abc-123"}}]}]},
     "fileUri of the Files API is refused"),
    ("gemini", "/v1beta/models/gemini-2.5-flash:countTokens", {"generateContentRequest": {
        "contents": [{"parts": [{"file_data": {
            "file_uri": "https://generativelanguage.googleapis.com/v1beta/files/a"}}]}]}},
     "fileUri of the Files API is refused"),
]


@pytest.mark.parametrize(("provider", "target", "body", "why"), STATE_BODIES)
@pytest.mark.parametrize("server_tools", [False, True])
def test_stored_state_is_refused_even_with_server_tools(
        provider: str, target: str, body: dict[str, Any], why: str,
        server_tools: bool) -> None:
    error = _refusal(lambda: _rewrite(provider, target, body, server_tools=server_tools))
    assert error.status == 400
    assert why in error.reason


def test_stored_state_that_reads_nothing_back_passes() -> None:
    """store (written, never read: no route or field left reads it back), background false,
    and a file_id that is program data (a schema's property, a replayed tool call's input)."""
    body = {"model": "gpt-5", "input": "hi", "store": True, "background": False,
            "tools": [{"type": "function", "name": "open", "parameters": {
                "type": "object", "properties": {"file_id": {"type": "string"}}}}]}
    assert _rewrite("openai", RESP, body) == body
    chat = {"model": "gpt-5", "messages": [], "store": True}
    assert _rewrite("openai", CHAT, chat) == chat
    replayed = {"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "open", "input": {"file_id": "file-1"}}]}],
        "tools": [{"name": "open", "input_schema": {"type": "object", "properties": {
            "file_id": {"type": "string"}}}}]}
    assert _rewrite("anthropic", MSG, replayed) == replayed


def test_anthropic_container_is_dropped_unless_server_tools() -> None:
    """A container id is a hosted code execution tool's: removed with the tool (no server
    tool is left to use it), passed with server_tools (that tool's own continuity)."""
    body = {"messages": [], "container": "container_abc"}
    assert _rewrite("anthropic", MSG, body) == {"messages": []}
    assert _rewrite("anthropic", MSG, body, server_tools=True) == body


@pytest.mark.parametrize(("provider", "target", "body", "why"), REFUSED_BODIES)
def test_rewrite_refuses(provider: str, target: str, body: dict[str, Any], why: str) -> None:
    error = _refusal(lambda: _rewrite(provider, target, body))
    assert error.status == 400
    assert why in error.reason


@pytest.mark.parametrize(("provider", "target", "body"), [
    (p, t, b) for p, t, b, why in REFUSED_BODIES
    if why in ("URL source", "image_url", "file_url", "fileUri", "file_data",
               "searches the web", ":online")])
def test_urls_and_search_models_are_refused_even_with_server_tools(
        provider: str, target: str, body: dict[str, Any]) -> None:
    assert _refusal(lambda: _rewrite(provider, target, body, server_tools=True)).status == 400


def test_tool_choice_naming_a_kept_tool_passes() -> None:
    body = {"tools": [{"type": "web_search_20250305", "name": "web_search"},
                      {"name": "f", "input_schema": {}}],
            "tool_choice": {"type": "any"}}
    assert _rewrite("anthropic", MSG, body) == {"tools": [{"name": "f", "input_schema": {}}],
                                                "tool_choice": {"type": "any"}}


def test_all_tools_removed_drops_the_tools_key() -> None:
    body = {"tools": [{"type": "googleSearch"}, {"googleSearch": {}}], "contents": []}
    assert _rewrite("gemini", GEN, body) == {"contents": []}


def test_function_parameter_named_like_a_url_field_passes() -> None:
    body = {"tools": [{"type": "function", "name": "f", "parameters": {
        "type": "object", "properties": {"image_url": {"type": "string"},
                                         "file_url": {"type": "string"}}}}],
            "input": [{"type": "function_call", "call_id": "c", "name": "f",
                       "arguments": "{\"file_url\": \"https://x\"}"}]}
    assert _rewrite("openai", RESP, body) == body


# --- bodies: limits and parsing ---

def test_body_size_limit_413() -> None:
    admitted = _route("openai", "POST", CHAT)
    at_limit = b'{"a":"' + b"x" * (m.MAX_BODY_BYTES - 8) + b'"}'
    assert len(at_limit) == m.MAX_BODY_BYTES
    m.rewrite_body("openai", admitted, at_limit, server_tools=False, search_models=SEARCH)
    error = _refusal(lambda: m.rewrite_body("openai", admitted, at_limit + b" ",
                                            server_tools=False, search_models=SEARCH))
    assert error.status == 413 and "MAX_BODY_BYTES" in error.reason


def test_nesting_depth_limit() -> None:
    admitted = _route("openai", "POST", CHAT)

    def nested(depth: int) -> bytes:
        return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)

    m.rewrite_body("openai", admitted, nested(m.MAX_NESTING_DEPTH), server_tools=False,
                   search_models=SEARCH)
    error = _refusal(lambda: m.rewrite_body("openai", admitted, nested(m.MAX_NESTING_DEPTH + 1),
                                            server_tools=False, search_models=SEARCH))
    assert error.status == 400 and "MAX_NESTING_DEPTH" in error.reason
    assert _refusal(lambda: m.rewrite_body("openai", admitted, b"[" * 5000 + b"]" * 5000,
                                           server_tools=False,
                                           search_models=SEARCH)).status == 400


@pytest.mark.parametrize("raw", [b"", b"[]", b"{", b'{"a":1}x', b"\xff", b'"x"', b"null"])
def test_body_not_a_json_object(raw: bytes) -> None:
    admitted = _route("anthropic", "POST", MSG)
    assert _refusal(lambda: m.rewrite_body("anthropic", admitted, raw, server_tools=False,
                                           search_models=SEARCH)).status == 400


def test_duplicate_keys_are_resolved_by_reserialising() -> None:
    admitted = _route("anthropic", "POST", MSG)
    raw = (b'{"tools":[{"type":"web_search_20250305","name":"w"}],'
           b'"tools":[{"type":"web_fetch_20250910","name":"x"}],"model":"m"}')
    out = m.rewrite_body("anthropic", admitted, raw, server_tools=False, search_models=SEARCH)
    assert out == b'{"model":"m"}'


def test_get_route_takes_no_body() -> None:
    admitted = _route("openai", "GET", "/v1/models")
    assert m.rewrite_body("openai", admitted, b"", server_tools=False,
                          search_models=SEARCH) == b""
    assert _refusal(lambda: m.rewrite_body("openai", admitted, b"{}", server_tools=False,
                                           search_models=SEARCH)).status == 400


def test_search_model_list_file() -> None:
    patterns = SEARCH.patterns
    for pattern in ("*search-preview*", "*search-api*", "*deep-research*", "*sonar*"):
        assert pattern in patterns
    assert SEARCH.refuses("models/gemini-deep-research")
    assert SEARCH.refuses("gpt-5-search-api-2025-10-14")
    for sonar in ("perplexity/sonar", "sonar-pro", "perplexity/llama-3.1-sonar-large-128k-online",
                  "~perplexity/sonar-latest", "Perplexity/Sonar-Reasoning-Pro:free"):
        assert SEARCH.refuses(sonar), sonar
    assert not SEARCH.refuses("gpt-4.1")
    assert not SEARCH.refuses("claude-sonnet-4-5")
    assert _refusal(lambda: m.parse_search_models("# only comments\n")).status == 500


# --- Hypothesis: random tool lists and nested content ---

_ANTHROPIC_TYPES = [*m._ANTHROPIC_CLIENT_TOOLS, "web_search_20250305", "web_fetch_20260318",
                    "code_execution_20260521", "tool_search_tool_bm25", "advisor_20260301",
                    "mcp_toolset", "bash_20990101", "Custom", "", "function"]
_OPENAI_TYPES = [*m._RESPONSES_CLIENT_TOOLS, "web_search", "web_search_preview", "file_search",
                 "code_interpreter", "image_generation", "mcp", "tool_search",
                 "programmatic_tool_calling", "openrouter:web_search", "Function"]
_GEMINI_KEYS = [*m._GEMINI_CLIENT_KEYS, "googleSearch", "google_search", "urlContext",
                "url_context", "codeExecution", "googleMaps", "fileSearch", "mcpServers",
                "retrieval", "enterpriseWebSearch", "FunctionDeclarations"]

_tool_type = st.sampled_from(_ANTHROPIC_TYPES + _OPENAI_TYPES) | st.text(max_size=12)
_tool = st.fixed_dictionaries(
    {"name": st.sampled_from(["f", "g", "web_search", "bash"])},
    optional={"type": _tool_type,
              "environment": st.sampled_from([{"type": "local"}, {"type": "container_auto"}]),
              "tools": st.lists(st.fixed_dictionaries({"type": _tool_type}), max_size=3)})
_gemini_tool: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.sampled_from(_GEMINI_KEYS), st.just({}), max_size=4)

_URL = st.sampled_from(["https://x.example/a", "http://10.0.0.1/", "HTTPS://X/", "gs://b/o",
                        "ftp://x/", "//x.example/a", "file:///etc/passwd"])
_leaf = st.one_of(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), st.none(), _URL)
_url_node = st.one_of(
    st.builds(lambda u: {"type": "image", "source": {"type": "url", "url": u}}, _URL),
    st.builds(lambda u: {"type": "document", "source": {"type": "url", "url": u}}, _URL),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, _URL),
    st.builds(lambda u: {"type": "input_image", "image_url": u}, _URL),
    st.builds(lambda u: {"type": "input_file", "file_url": u}, _URL),
    st.builds(lambda u: {"fileData": {"fileUri": u}}, _URL),
    st.builds(lambda u: {"file_data": {"file_uri": u}}, _URL),
    st.builds(lambda u: {"type": "file", "file": {"file_data": u}}, _URL),
)
_FILES_URI = "https://generativelanguage.googleapis.com/v1beta/files/abc-123"
_state_node = st.sampled_from([
    {"type": "input_file", "file_id": "file-abc"},
    {"type": "input_image", "file_id": "file-abc"},
    {"type": "file", "file": {"file_id": "file-abc"}},
    {"type": "document", "source": {"type": "file", "file_id": "file_abc"}},
    {"type": "image", "source": {"type": "file"}},
    {"type": "container_upload", "file_id": "file_abc"},
    {"type": "item_reference", "id": "msg_1"},
    {"fileData": {"fileUri": _FILES_URI}},
    {"file_data": {"file_uri": _FILES_URI}},
])
_content = st.recursive(
    _leaf | _url_node | _state_node,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(
        st.sampled_from(["content", "parts", "messages", "input", "output", "source",
                         "text", "contents", "generateContentRequest", "type", "x"]),
        children, max_size=4),
    max_leaves=25)


def _fetched_urls(node: Any) -> list[str]:
    """Every URL the providers would fetch in `node`: an independent, simpler walker."""
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            source = item.get("source")
            if isinstance(source, dict) and source.get("type") == "url":
                found.append("source")
            image = item.get("image_url")
            image = image.get("url") if isinstance(image, dict) else image
            if isinstance(image, str) and not image.lower().startswith("data:"):
                found.append(image)
            if isinstance(item.get("file_url"), str):
                found.append(item["file_url"])
            data = item.get("file_data")
            if isinstance(data, str) and not _inline(data):
                found.append(data)
            for key in ("fileData", "file_data"):
                if isinstance(item.get(key), dict):
                    uri = item[key].get("fileUri", item[key].get("file_uri"))
                    if uri is not None:  # fetched, or a stored file (issue 27, item 7)
                        found.append(str(uri))
            stack.extend(item.values())  # the fuzzed bodies put nothing at a program-data place
    return found


def _stored_state(node: Any) -> list[str]:
    """Every reference to the account's stored state in `node`: an independent walker."""
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            found += [key for key in ("file_id", "file_ids", "previous_response_id",
                                      "conversation") if key in item]
            if item.get("type") in ("container_upload", "item_reference"):
                found.append(str(item["type"]))
            source = item.get("source")
            if isinstance(source, dict) and source.get("type") == "file":
                found.append("source file")
            stack.extend(item.values())
    return found


def _inline(data: str) -> bool:
    """Inline file data by construction: bare base64, or a data: URL holding only base64
    after its one comma; no other ':' or '\\', no whitespace, so no URL of another scheme."""
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
    head, comma, tail = data.partition(",")
    if not comma:
        return set(data) <= alphabet
    return (head[:5].lower() == "data:" and head.endswith(";base64") and ":" not in head[5:]
            and not any(c.isspace() or c == "\\" for c in head) and set(tail) <= alphabet)


def _server_tools_left(provider: str, api: str, body: dict[str, Any]) -> list[Any]:
    tools = body.get("tools", [])
    if api == "gemini":
        return [key for tool in tools for key in tool if key not in m._GEMINI_CLIENT_KEYS]
    if api == "anthropic":
        allowed = {"custom"} if provider == "openrouter" else set(m._ANTHROPIC_CLIENT_TOOLS)
        return [t for t in tools if t.get("type", "custom") not in allowed]
    allowed = (set(m._CHAT_CLIENT_TOOLS) if api == "chat" or provider == "openrouter"
               else set(m._RESPONSES_CLIENT_TOOLS))
    left = [t for t in tools if t.get("type") not in allowed]
    left += [t for t in tools if t.get("type") == "shell"
             and t.get("environment") != {"type": "local"}]
    left += [inner for t in tools if t.get("type") == "namespace"
             for inner in t.get("tools", []) if inner.get("type") not in m._CHAT_CLIENT_TOOLS]
    return left


_TARGETS = [("anthropic", MSG), ("openai", CHAT), ("openai", RESP), ("gemini", GEN),
            ("openrouter", OR_CHAT), ("openrouter", "/api/v1/messages"),
            ("openrouter", "/api/v1/responses")]


@fuzz(2)
@given(where=st.sampled_from(_TARGETS), tools=st.lists(_tool, max_size=8),
       gemini_tools=st.lists(_gemini_tool, max_size=4), content=_content,
       extra=st.dictionaries(st.sampled_from(["mcp_servers", "container", "web_search_options",
                                              "plugins", "cachedContent", "cached_content",
                                              "tool_choice", "model"]),
                             st.sampled_from(["auto", "x", {"type": "any"}, "gpt-4.1",
                                              "perplexity/sonar", {"type": "tool",
                                                                   "name": "f"}]),
                             max_size=3))
def test_rewrite_never_passes_a_server_tool_or_a_url(
        where: tuple[str, str], tools: list[dict[str, Any]],
        gemini_tools: list[dict[str, Any]], content: Any, extra: dict[str, Any]) -> None:
    provider, target = where
    admitted = _route(provider, "POST", target)
    body: dict[str, Any] = {"tools": gemini_tools if admitted.api == "gemini" else tools,
                            "content": content, **extra}
    try:
        out = m.rewrite(provider, admitted, body, server_tools=False, search_models=SEARCH)
    except ModelRequestError as error:
        assert error.status == 400 and error.reason and "\n" not in error.reason
        return
    assert _server_tools_left(provider, admitted.api, out) == []
    assert _fetched_urls(out) == []
    assert _stored_state(out) == []
    for field in ("mcp_servers", "container", "web_search_options", "cachedContent",
                  "cached_content"):
        if field in m._SERVER_FIELDS.get(admitted.api, {}):
            assert field not in out
    if provider == "openrouter":
        assert "plugins" not in out
    model = out.get("model")
    assert not (isinstance(model, str) and SEARCH.refuses(model))


@fuzz(2)
@given(where=st.sampled_from(_TARGETS), raw=st.binary(max_size=200) | st.builds(
    orjson.dumps, st.dictionaries(st.text(max_size=6), _content, max_size=4)))
def test_rewrite_body_fuzzed_raises_only_its_error(where: tuple[str, str], raw: bytes) -> None:
    provider, target = where
    admitted = _route(provider, "POST", target)
    try:
        out = m.rewrite_body(provider, admitted, raw, server_tools=False, search_models=SEARCH)
    except ModelRequestError as error:
        assert error.reason and "\n" not in error.reason
        return
    assert _fetched_urls(orjson.loads(out)) == []


# --- program data is skipped by its place, never by its shape (issue 27, item 2) ---

OR_RESP = "/api/v1/responses"
EVIL_IMAGE = {"type": "input_image", "image_url": "https://evil.example/i.png"}
EVIL_FILE = {"type": "input_file", "file_url": "https://evil.example/f.pdf"}


@pytest.mark.parametrize("where", [("openai", RESP), ("openrouter", OR_RESP)])
@pytest.mark.parametrize("part", [EVIL_IMAGE, EVIL_FILE], ids=["input_image", "input_file"])
@pytest.mark.parametrize("kind", ["tool_use", "server_tool_use", "mcp_tool_use"])
def test_a_call_block_type_at_the_top_does_not_hide_the_conversation(
        where: tuple[str, str], part: dict[str, Any], kind: str) -> None:
    provider, target = where
    body = {"type": kind, "model": "gpt-4.1",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "x"}, part]}]}
    error = _refusal(lambda: _rewrite(provider, target, body))
    assert error.status == 400 and ("image_url" in error.reason or "file_url" in error.reason)
    # Nor one level down, in an input item, nor with server_tools on.
    nested = {"input": [{"type": kind, "input": [part]}]}
    assert _refusal(lambda: _rewrite(provider, target, nested)).status == 400
    assert _refusal(lambda: _rewrite(provider, target, body, server_tools=True)).status == 400


@pytest.mark.parametrize(("provider", "target", "body"), [
    # Anthropic: a tool_use's input is program data only in an assistant message's content.
    ("anthropic", MSG, {"type": "tool_use", "input": {"content": [
        {"type": "image", "source": {"type": "url", "url": "https://evil/x.png"}}]}}),
    ("anthropic", MSG, {"messages": [{"role": "user", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {"source": {
            "type": "url", "url": "https://evil/x.png"}}}]}]}),
    ("openrouter", "/api/v1/messages", {"messages": [{"role": "user", "type": "tool_use",
                                                      "input": [EVIL_IMAGE]}]}),
    # A schema key or a call's arguments elsewhere than their place is walked.
    ("openai", RESP, {"parameters": {"input": [EVIL_IMAGE]}, "input": "hi"}),
    ("openai", RESP, {"input": [{"role": "user", "content": [], "arguments": [EVIL_FILE]}]}),
    ("openai", CHAT, {"messages": [{"role": "user", "schema": {"content": [
        {"type": "image_url", "image_url": {"url": "https://evil/x.png"}}]}}]}),
    # Gemini: a function's response is opaque only as functionResponse.response in a part.
    ("openai", RESP, {"name": "f", "id": "i", "response": {"input": [EVIL_IMAGE]}}),
    ("gemini", GEN, {"contents": [{"parts": [{"name": "f", "response": {
        "fileData": {"fileUri": "https://evil/x.pdf"}}}]}]}),
])
def test_program_data_shapes_outside_their_place_are_walked(
        provider: str, target: str, body: dict[str, Any]) -> None:
    assert _refusal(lambda: _rewrite(provider, target, body)).status == 400


@pytest.mark.parametrize(("provider", "target", "body"), [
    ("anthropic", MSG, {"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "fetch", "input": {
            "image_url": "https://x.example/a.png", "source": {"type": "url", "url": "u"}}}]}],
        "tools": [{"name": "fetch", "input_schema": {"type": "object", "properties": {
            "fileData": {"type": "object", "properties": {"fileUri": {"type": "string"}}}}}}]}),
    ("openrouter", "/api/v1/messages", {"messages": [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "f", "input": {"file_url": "https://x/a"}}]}]}),
    ("gemini", GEN, {"contents": [{"role": "model", "parts": [{"functionCall": {
        "name": "f", "args": {"image_url": "https://x/a.png"}}}]}, {"role": "user", "parts": [
        {"functionResponse": {"name": "f", "response": {"image_url": "https://x/b.png"}}}]}]}),
    ("openai", CHAT, {"messages": [], "response_format": {"type": "json_schema", "json_schema": {
        "name": "s", "schema": {"properties": {"file_url": {"const": "https://x"}}}}}}),
    ("openai", RESP, {"input": "hi", "text": {"format": {"type": "json_schema", "schema": {
        "properties": {"file_url": {"default": "https://x"}}}}}}),
])
def test_program_data_at_its_place_passes(provider: str, target: str,
                                          body: dict[str, Any]) -> None:
    assert _rewrite(provider, target, body) == body


# --- file_data: an allow-list, read as a WHATWG URL parser would (issue 27, item 3) ---

def _file_part(data: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": [
        {"type": "file", "file": {"filename": "f.pdf", "file_data": data}}]}]}


def _responses_file(data: str) -> dict[str, Any]:
    return {"input": [{"role": "user", "content": [
        {"type": "input_file", "filename": "f.pdf", "file_data": data}]}]}


FILE_DATA_WHERE = [("openai", CHAT, _file_part), ("openrouter", OR_CHAT, _file_part),
                   ("openai", RESP, _responses_file), ("openrouter", OR_RESP, _responses_file)]


@pytest.mark.parametrize(("provider", "target", "shape"), FILE_DATA_WHERE)
@pytest.mark.parametrize("data", [
    "https:evil/f.pdf", "https:/evil/f.pdf", "https:\\\\evil/f.pdf", "https:\\evil/f.pdf",
    "HTTPS://evil/f.pdf", " https://evil/f.pdf", "\thttps://evil/f.pdf", "\nhttps://evil/f.pdf",
    "ht\ntps://evil/f.pdf", "//evil/f.pdf", "evil.example/f.pdf", "ftp:evil/f.pdf",
    "file:///etc/passwd", "blob:https://evil/x", " data:application/pdf;base64,AA==",
    "data:application/pdf,https://evil/f.pdf", "data:;base64,AA==",
    "data:application/pdf;base64,https://evil/f", "QUFB\nQUFB", "QUFB QUFB", "\u0435vil:x"])
def test_file_data_that_is_not_inline_is_refused(provider: str, target: str, shape: Any,
                                                 data: str) -> None:
    error = _refusal(lambda: _rewrite(provider, target, shape(data)))
    assert error.status == 400 and "file_data" in error.reason


@pytest.mark.parametrize(("provider", "target", "shape"), FILE_DATA_WHERE)
@pytest.mark.parametrize("data", ["data:application/pdf;base64,JVBERi0xLjQK",
                                  "DATA:application/pdf;base64,JVBERi0xLjQ=",
                                  "data:application/pdf;name=f.pdf;base64,JVBERi0=",
                                  "JVBERi0xLjQK", "JVBERi0xLjQ=", ""])
def test_inline_file_data_passes(provider: str, target: str, shape: Any, data: str) -> None:
    assert _rewrite(provider, target, shape(data)) == shape(data)


_URLISH = st.lists(st.sampled_from(
    ["h", "t", "p", "s", ":", "/", "\\", "\t", "\n", " ", "\x00", "\x1f", "e", "v", ".", "@",
     "data:", "application/pdf", ";base64,", ";", ",", "A", "Q", "=", "+", "%", "D", "\u017f"]),
    max_size=12).map("".join)


@fuzz(10)
@given(where=st.sampled_from(FILE_DATA_WHERE), data=st.text(max_size=40) | _URLISH)
def test_file_data_accepted_only_if_inline_by_construction(where: tuple[str, str, Any],
                                                           data: str) -> None:
    """Differential: whatever the rule accepts is bare base64 or a base64 data: URL, read by
    the independent `_inline` (no ':' outside the scheme, no '\\', no whitespace): nothing a
    WHATWG parser, which drops tabs and newlines and reads '\\' as '/', can make a URL of."""
    provider, target, shape = where
    try:
        _rewrite(provider, target, shape(data))
    except ModelRequestError as error:
        assert "file_data" in error.reason
        return
    assert _inline(data), data


# --- receiver overrides and OpenRouter's search (issue 27, item 7) ---

def test_headers_that_change_the_method_or_path_at_the_receiver_are_dropped() -> None:
    headers = [(b"X-HTTP-Method-Override", b"DELETE"), (b"x-http-method", b"PUT"),
               (b"X-Method-Override", b"GET"), (b"x_http_method_override", b"DELETE"),
               (b"X-HTTP-METHOD-OVERRIDE", b"DELETE"), (b"X-Original-URL", b"/v1/files"),
               (b"x-rewrite-url", b"/api/v1/keys"), (b"anthropic-version", b"2023-06-01"),
               (b"X-Method", b"x"), (b"content-type", b"application/json")]
    assert m.drop_receiver_overrides(headers) == [
        (b"anthropic-version", b"2023-06-01"), (b"X-Method", b"x"),
        (b"content-type", b"application/json")]


@pytest.mark.parametrize("target", [OR_CHAT, OR_RESP, "/api/v1/messages"])
def test_openrouter_web_search_options_removed_on_every_shape(target: str) -> None:
    body = {"model": "openai/gpt-4.1", "web_search_options": {"search_context_size": "high"}}
    assert _rewrite("openrouter", target, body) == {"model": "openai/gpt-4.1"}


@pytest.mark.parametrize("target", [OR_CHAT, OR_RESP, "/api/v1/messages", "/api/v1/embeddings"])
@pytest.mark.parametrize(("body", "why"), [
    ({"model": "perplexity/llama-3.1-sonar-large-128k-online"}, "searches the web"),
    ({"model": "vendor/model-online"}, "-online"),
    ({"model": "vendor/model-ONLINE:free"}, "-online"),
    ({"model": "openai/gpt-4.1:free:online"}, ":online"),
    ({"model": "perplexity/sonar-reasoning-pro"}, "searches the web"),
    ({"model": "x", "models": ["SONAR"]}, "searches the web"),
    ({"model": "@preset/mine"}, "@preset/"),
    ({"model": "@PRESET/mine"}, "@preset/"),
    ({"model": "openai/gpt-4.1@preset/mine"}, "@preset/"),
    ({"model": "x", "models": ["openai/gpt-4.1@preset/mine"]}, "@preset/"),
    ({"model": "openai/gpt-4.1", "preset": "mine"}, "preset"),
])
def test_openrouter_search_and_preset_names_refused(target: str, body: dict[str, Any],
                                                    why: str) -> None:
    for server_tools in (False, True):
        error = _refusal(lambda s=server_tools: _rewrite("openrouter", target, body, s))
        assert error.status == 400 and why in error.reason


@pytest.mark.parametrize(("provider", "target", "model"), [
    ("anthropic", "/v1/messages", "claude-sonnet-4-5"),
    ("openai", "/v1/chat/completions", "gpt-4o"),
    ("openai", "/v1/responses", "gpt-4o"),
    ("openrouter", "/api/v1/chat/completions", "openai/gpt-4o"),
])
def test_tools_null_goes_as_no_tools_and_any_other_non_list_is_refused(
        provider: str, target: str, model: str) -> None:
    """One rule for every type (issue 27, item 7): a top-level null is the field's absence
    and is dropped, as `[]` is; `"x"`, `{}`, `0` are refused. Before, `"tools": null`
    passed through as it was sent."""
    absent: list[object] | None
    for absent in (None, []):
        kept = _rewrite(provider, target, {"model": model, "tools": absent, "stop": None})
        assert "tools" not in kept and "stop" not in kept, kept
    wrong: object
    for wrong in ("x", {}, 0):
        assert _refusal(lambda wrong=wrong: _rewrite(
            provider, target, {"model": model, "tools": wrong})).status == 400
