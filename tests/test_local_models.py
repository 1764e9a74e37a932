"""The local model's inference filter (`[localhost] models`): the sans-IO core
(lnk_proxy.local_models) by table, with the exact reason of each refusal, and fuzzed
(nothing outside the allow-list passes; nothing but LocalModelError escapes); then the real
relay process (`lnk-sandbox-relay --listen … --local-model PORT`) in front of a fake runtime
on 127.0.0.1 that records what reached it, with the `ollama` client and the `openai` SDK
as a program uses them, each refused path of the acceptance script (never reaching the
runtime), and streams that arrive piece by piece.

No model weights: the fake runtime answers in Ollama's and the OpenAI-compatible shapes.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common import wirestate
from lnk_proxy import local_models as lm
from lnk_proxy import model_rules
from lnk_proxy.local_models import LocalModelError
from tests.conftest import fuzz

RELAY = str(Path(sys.executable).parent / "lnk-sandbox-relay")
WIRE = "models"

CLOUD = ("a model that runs off this machine is refused (Ollama's ':cloud' and '-cloud' "
         "tags go to ollama.com)")
ENCODED = "an encoded path is refused (no '%' is decoded)"
DOTS = "a '.' or '..' segment in the path is refused"
EMPTY_SEGMENT = "an empty segment ('//') in the path is refused"
UNKNOWN = ("not one of the local runtimes' inference calls (method and path compared "
           "exactly, case included; an unknown endpoint is refused until it is known)")
OTHER_METHOD = ("this inference path takes another method (the method and path are compared "
                "exactly)")
OTHER_CASE = ("a path that differs from an inference call in letter case is refused "
              "(compared exactly)")
PULL = "pulling a model is refused (Ollama downloads it from a registry: outward)"
CODING = ("a Content-Encoding other than identity is refused (a compressed body cannot be "
          "checked)")
QUERY = "a query is refused (the local runtimes' inference calls take none)"

# The acceptance script's refused paths (../shared/acceptance/secrets-local), each with
# the status and reason the filter gives.
ACCEPTANCE_REFUSED = [
    ("/api/pull", 403, PULL),
    ("/api/delete", 403, "deleting a model is refused (admin)"),
    ("/api/create", 403, "creating a model is refused (admin: writes models, and a model "
                         "can point at a remote host)"),
    ("/api/push", 403, "pushing a model is refused (Ollama uploads it to a registry: "
                       "outward)"),
    ("/api/copy", 403, "copying a model is refused (admin: writes models)"),
    ("/api/blobs/sha256:00", 403, "Ollama's blobs are refused (admin: writes model files)"),
    ("/api/experimental/web_search", 403, "Ollama's web search is refused (it searches the "
                                          "web through ollama.com: outward)"),
    ("/api/%70ull", 400, ENCODED),
    ("/api/chat/../pull", 400, DOTS),
    ("/api//pull", 400, EMPTY_SEGMENT),
    ("/API/PULL", 403, PULL),
    ("/admin", 403, "admin paths are refused"),
]


# -- the core: routes ----------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), sorted(lm.ALLOWED_ROUTES))
def test_each_allowed_route_is_admitted_as_it_is(method: str, path: str) -> None:
    admitted = lm.route(method, path)
    assert (admitted.method, admitted.target) == (method, path)
    assert admitted.body == lm.ALLOWED_ROUTES[(method, path)][0]
    if method == "GET":
        assert lm.route("HEAD", path).body == "none"


def test_the_allowed_routes_are_inference_or_listings_and_never_a_refused_surface() -> None:
    """The union of the families' routes is sound only if no route of one family is an
    admin or outward route of another: no allowed path is a refused surface, but for the
    three whose other methods are refused (llama.cpp's POST /props and router POST
    /models, a stored response under /v1/responses)."""
    split = {"/props", "/models", "/v1/responses"}
    for (method, path), (body, why, families) in lm.ALLOWED_ROUTES.items():
        assert why and families
        assert (body == "none") == (method == "GET")
        for marker, _ in lm.REFUSED_SURFACES:
            if path.lower() == marker or path.lower().startswith(marker + "/"):
                assert marker in split and path == marker, (method, path, marker)


@pytest.mark.parametrize(("method", "target", "status", "reason"), [
    *[("POST", path, status, reason) for path, status, reason in ACCEPTANCE_REFUSED],
    ("DELETE", "/api/delete", 403, "deleting a model is refused (admin)"),
    ("HEAD", "/api/blobs/sha256:00", 403, "Ollama's blobs are refused (admin: writes model "
                                          "files)"),
    ("POST", "/api/experimental/web_fetch", 403, "Ollama's web fetch is refused (it fetches "
                                                 "any URL through ollama.com: outward)"),
    ("POST", "/api/me", 403, "Ollama's account endpoints are refused (ollama.com sign-in: "
                             "outward)"),
    ("GET", "/cors-proxy", 403, "llama.cpp's CORS proxy is refused (it fetches any URL: "
                                "outward)"),
    ("POST", "/tools", 403, "llama.cpp's built-in tools are refused (they run on this "
                            "machine)"),
    ("POST", "/slots/0?action=save", 403, "llama.cpp's slots are refused (save, restore and "
                                          "erase touch files; the listing shows other "
                                          "callers' prompts)"),
    ("GET", "/slots", 403, "llama.cpp's slots are refused (save, restore and erase touch "
                           "files; the listing shows other callers' prompts)"),
    ("POST", "/props", 403, "changing llama.cpp's settings is refused (admin)"),
    ("POST", "/models/load", 403, "loading a model is refused (admin)"),
    ("POST", "/models", 403, "changing the router's models is refused (admin); their "
                             "listing is allowed"),
    ("POST", "/v1/load_lora_adapter", 403, "adapters are refused (admin: loads weights)"),
    ("POST", "/sleep", 403, "vLLM's sleep is refused (admin)"),
    ("POST", "/wake_up", 403, "vLLM's wake-up is refused (admin)"),
    ("POST", "/collective_rpc", 403, "vLLM's collective RPC is refused (admin: runs code in "
                                     "its workers)"),
    ("POST", "/api/v1/models/download", 403, "downloading a model is refused (outward)"),
    ("POST", "/api/v1/chat", 403, "LM Studio's native chat is refused (its remote MCP "
                                  "integrations are not read by this filter); its "
                                  "OpenAI-compatible chat is allowed"),
    ("GET", "/v1/responses/resp_1", 403, "stored responses are refused (other callers' "
                                         "state); a new response is allowed"),
    ("GET", "/metrics", 403, "metrics are refused (not inference; they describe other "
                             "callers' use)"),
    ("POST", "/v1/audio/transcriptions", 403, "audio endpoints are refused (their multipart "
                                              "bodies cannot be checked here)"),
    ("GET", "/api/chat", 405, OTHER_METHOD),
    ("post", "/api/chat", 405, OTHER_METHOD),
    ("DELETE", "/v1/models/llama3", 405, OTHER_METHOD),
    ("POST", "/Api/Chat", 404, OTHER_CASE),
    ("POST", "/api/chat/", 404, UNKNOWN),
    ("POST", "/api/chat.", 404, UNKNOWN),
    ("POST", "/api/status", 404, UNKNOWN),
    ("GET", "/api/experimental-x", 404, UNKNOWN),
    ("POST", "/api/new-admin-endpoint", 404, UNKNOWN),
    ("GET", "/v1/models/x/y", 404, UNKNOWN),
    ("POST", "/api/%63hat", 400, ENCODED),
    ("POST", "/api/chat%2f..%2fpull", 400, ENCODED),
    ("POST", "/api/./chat", 400, DOTS),
    ("POST", "/api/chat/..", 400, DOTS),
    ("POST", "//api/chat", 400, EMPTY_SEGMENT),
    ("POST", "/api\\pull", 400, "a backslash in the path is refused"),
    ("POST", "/api/chat#x", 400, "a fragment in the path is refused"),
    ("POST", "api/chat", 400, "the path must start with '/' (origin form)"),
    ("POST", "http://localhost:11434/api/pull", 400, "the path must start with '/' (origin "
                                                     "form)"),
    ("POST", "*", 400, "the path must start with '/' (origin form)"),
    ("POST", "/api/chat;x", 400, "the path may hold only letters, digits and -._~:/"),
    ("POST", "/api/chat x", 400, "the path may hold only letters, digits and -._~:/"),
    ("POST", "/api/ch\u00e4t", 400, "the path may hold only letters, digits and -._~:/"),
    ("POST", "/api/chat?stream=true", 400, QUERY),
    ("POST", "/api/chat?", 400, QUERY),
    ("POST", "/v1/messages?beta=false", 400, QUERY),
    ("GET", "/v1/models/llama3:cloud", 403, CLOUD),
    ("GET", "/v1/models/gpt-oss:120b-CLOUD", 403, CLOUD),
    ("POST", "/" + "a" * 3000, 414, "the path and query are over 2048 bytes "
                                    "(MAX_TARGET_BYTES)"),
    ("P\u00d6ST", "/api/chat", 400, "the method is not ASCII"),
])
def test_refused_targets_say_why(method: str, target: str, status: int, reason: str) -> None:
    with pytest.raises(LocalModelError) as refused:
        lm.route(method, target)
    assert (refused.value.status, refused.value.reason) == (status, reason)


def test_the_one_query_is_the_anthropic_sdks_beta() -> None:
    assert lm.route("POST", "/v1/messages?beta=true").target == "/v1/messages?beta=true"
    assert lm.route("GET", "/v1/models/llama3:8b").model == "llama3:8b"


_PATH_ALPHABET = "/.%\\:-_~?#;= aApPiIlLuUcChH0123"
_SEGMENTS = ["api", "API", "pull", "chat", "v1", "models", "..", ".", "", "%2f", "%2e",
             "slots", "props", "blobs", "sha256:00", "messages", "completions", "x-cloud"]


def _admitted_exactly(method: str, target: str, admitted: lm.LocalRoute) -> bool:
    path = target.partition("?")[0]
    looked_up = "GET" if method == "HEAD" else method
    return admitted.target == target and (
        (looked_up, path) in lm.ALLOWED_ROUTES
        or (looked_up == "GET" and path.startswith("/v1/models/")
            and "/" not in path[len("/v1/models/"):]))


@fuzz(10)
@given(method=st.sampled_from(["GET", "HEAD", "POST", "DELETE", "PUT", "get", "OPTIONS"]),
       target=st.text(alphabet=_PATH_ALPHABET, max_size=40)
       | st.lists(st.sampled_from(_SEGMENTS), max_size=5).map(lambda parts: "/" + "/".join(parts))
       | st.sampled_from([path for _, path in lm.ALLOWED_ROUTES]).flatmap(
           lambda path: st.tuples(st.just(path), st.text(alphabet=_PATH_ALPHABET, max_size=4))
           .map(lambda pair: pair[0] + pair[1])))
def test_fuzzed_targets_pass_only_the_allow_list(method: str, target: str) -> None:
    try:
        admitted = lm.route(method, target)
    except LocalModelError as error:
        assert error.status in (400, 403, 404, 405, 414) and "\n" not in error.reason
        path = target.partition("?")[0]
        assert len(path) < 8 or path not in error.reason  # never the program's path
        return
    assert _admitted_exactly(method, target, admitted)
    assert "%" not in target and "\\" not in target and "//" not in target
    assert not any(part in (".", "..") for part in target.partition("?")[0].split("/"))


@fuzz(2)
@given(method=st.binary(max_size=8), target=st.binary(max_size=64))
def test_fuzzed_bytes_raise_only_the_filters_error(method: bytes, target: bytes) -> None:
    try:
        admitted = lm.route(method, target)
    except LocalModelError:
        return
    assert _admitted_exactly(method.decode(), target.decode(), admitted)


# -- the core: headers -----------------------------------------------------------------------


@pytest.mark.parametrize("coding", [b"gzip", b"zstd", b"br", b"deflate", b"identity, gzip",
                                    b"GZIP", b"x-anything", b""])
def test_a_body_coding_other_than_identity_is_refused(coding: bytes) -> None:
    with pytest.raises(LocalModelError) as refused:
        lm.check_headers([(b"host", b"localhost"), (b"content-encoding", coding)])
    assert (refused.value.status, refused.value.reason) == (415, CODING)


@pytest.mark.parametrize("status", [400, 403, 404, 405, 413, 414, 415, 429, 431, 502, 503])
def test_a_refusal_reads_as_the_verbs_do_byte_for_byte(status: int) -> None:
    """The relay's refusal body is the proxy's (`/_link/s/…/local/<port>` gives that one),
    so a program reads one refusal whichever way it came; JSON with `error.message`, the
    one place the `openai` SDK shows a reason from."""
    from lnk_proxy.verbs import verb_refusal_body

    body = lm.refusal_body(status, CLOUD)
    assert body == verb_refusal_body(status, CLOUD)
    assert json.loads(body)["error"]["message"] == CLOUD and body.endswith(b"}\n")


def test_headers_sent_on_lose_hop_by_hop_and_framing() -> None:
    kept = lm.check_headers([
        (b"Host", b"localhost:11434"), (b"content-type", b"application/json"),
        (b"authorization", b"Bearer lm-studio"), (b"connection", b"keep-alive, upgrade"),
        (b"upgrade", b"websocket"), (b"keep-alive", b"timeout=5"), (b"te", b"trailers"),
        (b"transfer-encoding", b"chunked"), (b"content-length", b"5"),
        (b"expect", b"100-continue"), (b"content-encoding", b"identity"),
        (b"proxy-authorization", b"Basic x")])
    assert kept == [(b"host", b"localhost:11434"), (b"content-type", b"application/json"),
                    (b"authorization", b"Bearer lm-studio")]


def test_headers_that_change_the_method_or_path_at_the_runtime_are_dropped() -> None:
    """As toward every provider (issue 27, item 7): a runtime behind a framework that reads
    X-HTTP-Method-Override would run another method than the one this filter checked."""
    kept = lm.check_headers([
        (b"content-type", b"application/json"), (b"X-HTTP-Method-Override", b"DELETE"),
        (b"x-http-method", b"DELETE"), (b"X_Method_Override", b"PUT"),
        (b"x-original-url", b"/api/delete")])
    assert kept == [(b"content-type", b"application/json")]


# -- the core: bodies ------------------------------------------------------------------------

CHAT = lm.route("POST", "/api/chat")
OPENAI_CHAT = lm.route("POST", "/v1/chat/completions")
MESSAGES = lm.route("POST", "/v1/messages")
RESPONSES = lm.route("POST", "/v1/responses")


@pytest.mark.parametrize("name", [
    "gpt-oss:120b-cloud", "llama3:cloud", "LLAMA3:CLOUD", "qwen3-coder:480b-Cloud",
    " gpt-oss:120b-cloud ", "gpt-oss:120b-cloud\t", "library/x:cloud", "x:cloud:local",
    "x:local:cloud", "x: cloud", "ollama.com/library/deepseek:671b-cloud"])
def test_cloud_models_are_refused_by_name(name: str) -> None:
    assert lm.is_cloud_model(name)
    for where, body in ((CHAT, {"model": name, "messages": []}),
                        (CHAT, {"name": name}),
                        (MESSAGES, {"model": "m", "max_tokens": 1, "messages": [],
                                    "fallbacks": [{"model": name}]}),
                        (OPENAI_CHAT, {"model": "m", "models": [name]}),
                        (OPENAI_CHAT, {"model": "m", "messages": [{"role": "user",
                                                                    "model": name}]})):
        with pytest.raises(LocalModelError) as refused:
            lm.check_body(where, orjson.dumps(body))
        assert (refused.value.status, refused.value.reason) == (403, CLOUD)


@pytest.mark.parametrize("name", ["llama3", "llama3:latest", "gpt-oss:120b",
                                  "cloud", "cloud:latest", "mycloud:7b", "x:cloudy",
                                  "x-cloud", "namespace/cloud-model:q4"])
def test_local_model_names_pass(name: str) -> None:
    assert not lm.is_cloud_model(name)
    assert orjson.loads(lm.check_body(CHAT, orjson.dumps({"model": name})))["model"] == name


@pytest.mark.parametrize(("where", "raw", "status", "reason"), [
    (CHAT, b"", 400, "the body is not JSON (UTF-8)"),
    (CHAT, b"[1]", 400, "the body is not a JSON object"),
    (CHAT, b'{"model": 5}', 400, "model must be a string"),
    (CHAT, b'{"model": "gpt-oss:120b", "model": "gpt-oss:120b-cloud"}', 403, CLOUD),
    (CHAT, b'{"model": "\\u006cl:cl\\u006fud"}', 403, CLOUD),
    (CHAT, '{"model": "l\u0430ma"}'.encode(), 400, "a model name that is not ASCII is refused"),
    (CHAT, orjson.dumps({"model": "m" * 513}), 400, "a model name is over 512 bytes "
                                                    "(MAX_MODEL_NAME_BYTES)"),
    (CHAT, b"[" * 200 + b"]" * 200, 400, "the body is not a JSON object"),
    (CHAT, b'{"a":' * 130 + b"1" + b"}" * 130, 400,
     "the body nests deeper than 128 levels (MAX_NESTING_DEPTH)"),
    (lm.route("GET", "/api/tags"), b"{}", 400, "this call takes no body"),
    (OPENAI_CHAT, orjson.dumps({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://169.254.169.254/x.png"}}]}]}), 400,
     "an image_url that is not a data: URL is refused: the runtime would fetch it"),
    (MESSAGES, orjson.dumps({"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {
            "type": "url", "url": "https://example.invalid/a.png"}}]}]}), 400,
     'a URL source (source.type "url") is refused: the runtime would fetch it; send the '
     "content as base64"),
    (RESPONSES, orjson.dumps({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_file", "file_url": "https://example.invalid/a.pdf"}]}]}), 400,
     "input_file.file_url is refused: the runtime would fetch it; send file_data"),
])
def test_refused_bodies_say_why(where: lm.LocalRoute, raw: bytes, status: int,
                                reason: str) -> None:
    with pytest.raises(LocalModelError) as refused:
        lm.check_body(where, raw)
    assert (refused.value.status, refused.value.reason) == (status, reason)


# A runtime's stored state by id (issue 27, item 7): vLLM keeps responses (and runs them in
# the background) for whoever calls next, so an id reads another caller's state; refused as
# the model verb refuses it, and a stored response's own path is refused by the router.
STATE = [
    (RESPONSES, {"model": "m", "input": "hi", "previous_response_id": "resp_1"},
     "previous_response_id is refused: it continues a response stored at the runtime, which "
     "this sandbox may not have made; send the whole conversation in input"),
    (RESPONSES, {"model": "m", "input": "hi", "conversation": "conv_1"},
     "conversation is refused: it reads and extends a conversation stored at the runtime, "
     "which this sandbox may not have made; send the whole conversation in input"),
    (RESPONSES, {"model": "m", "input": "hi", "background": True},
     "background is refused: the response would run on at the runtime after this call, and "
     "only a stored-response call (refused) reads it"),
    (RESPONSES, {"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]},
     "an item_reference is refused: it reads an item stored at the runtime by id; send the "
     "item itself"),
    (RESPONSES, {"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-1"}]}]},
     "file_id is refused: it reads a file stored at the runtime, which this sandbox did not "
     "upload (the Files API is refused); send the content inline"),
    (OPENAI_CHAT, {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-1"}}]}]},
     "file_id is refused: it reads a file stored at the runtime, which this sandbox did not "
     "upload (the Files API is refused); send the content inline"),
    (MESSAGES, {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "file", "file_id": "file_1"}}]}]},
     'a file source (source.type "file") is refused: it reads a file stored at the runtime; '
     "send the content as base64"),
]


@pytest.mark.parametrize(("where", "body", "reason"), STATE)
@pytest.mark.parametrize("server_tools", [False, True])
def test_a_runtimes_stored_state_by_id_is_refused(where: lm.LocalRoute, body: dict[str, Any],
                                                  reason: str, server_tools: bool) -> None:
    with pytest.raises(LocalModelError) as refused:
        lm.check_body(where, orjson.dumps(body), server_tools=server_tools)
    assert (refused.value.status, refused.value.reason) == (400, reason)


@pytest.mark.parametrize(("target", "status", "why"), [
    ("/v1/responses/resp_1", 403, "stored responses are refused"),
    ("/v1/responses/resp_1/cancel", 403, "stored responses are refused"),
    ("/v1/responses/resp_1/input_items", 403, "stored responses are refused"),
    ("/v1/files", 403, "stored files are refused"),
    ("/v1/files/file-1/content", 403, "stored files are refused"),
    ("/v1/conversations", 404, "not one of the local runtimes' inference calls")])
def test_a_runtimes_stored_state_paths_are_refused(target: str, status: int, why: str) -> None:
    with pytest.raises(LocalModelError) as refused:
        lm.route("GET", target)
    assert refused.value.status == status and why in refused.value.reason


def test_a_folded_spelling_of_a_state_field_is_refused() -> None:
    """Ollama's Go reads `Previous_Response_ID` as previous_response_id; so is it refused."""
    for key in ("Previous_Response_Id", "CONVERSATION", "File_Ids"):
        with pytest.raises(LocalModelError) as refused:
            lm.check_body(RESPONSES, orjson.dumps({"model": "m", "input": "hi", key: "x"}))
        assert "folds to" in refused.value.reason


def test_a_runtimes_store_and_background_false_pass() -> None:
    body = {"model": "m", "input": "hi", "store": True, "background": False}
    assert orjson.loads(lm.check_body(RESPONSES, orjson.dumps(body))) == body


@pytest.mark.parametrize(("body", "reason"), [
    ({"model": "m", "prompt": "", "prompt_embeds": "UEsDBA=="},
     "prompt_embeds is refused: vLLM loads it with torch.load (a crafted tensor corrupted "
     "the runtime's memory before 0.11.1)"),
    ({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_embeds", "image_embeds": "UEsDBA=="}]}]},
     "image_embeds is refused: vLLM loads it with torch.load"),
    ({"model": "m", "messages": [], "chat_template": "{{ 7*7 }}"},
     "chat_template is refused: a template sent with the request runs in the runtime's "
     "template engine (the runtime's own is used)"),
    ({"model": "m", "prompt": "", "logits_processors": ["os.system"]},
     "logits_processors is refused: names code for the runtime to import and run (vLLM)"),
    ({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": "http://10.0.0.1/v.mp4"}}]}]},
     "video_url other than a data: URL is refused: the runtime would fetch it"),
    ({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "audio_url", "audio_url": "file:///etc/passwd"}]}]},
     "audio_url other than a data: URL is refused: the runtime would fetch it"),
])
def test_a_runtimes_own_dangerous_fields_are_refused(body: dict[str, Any],
                                                     reason: str) -> None:
    for where in (OPENAI_CHAT, lm.route("POST", "/v1/completions"), CHAT):
        with pytest.raises(LocalModelError) as refused:
            lm.check_body(where, orjson.dumps(body))
        assert (refused.value.status, refused.value.reason) == (400, reason)


def test_inline_audio_and_video_pass() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
        {"type": "audio_url", "audio_url": {"url": "DATA:audio/wav;base64,AAAA"}}]}]}
    assert orjson.loads(lm.check_body(OPENAI_CHAT, orjson.dumps(body))) == body


def test_a_body_at_the_limit_is_read_and_one_byte_over_is_refused() -> None:
    filler = lm.MAX_BODY_BYTES - len(b'{"model":"m","prompt":""}')
    at_limit = b'{"model":"m","prompt":"' + b"a" * filler + b'"}'
    assert len(at_limit) == lm.MAX_BODY_BYTES
    assert lm.check_body(lm.route("POST", "/api/generate"), at_limit) == at_limit
    with pytest.raises(LocalModelError) as refused:
        lm.check_body(lm.route("POST", "/api/generate"), at_limit + b" ")
    assert (refused.value.status, refused.value.reason) == (413, "the body is over 32 MiB "
                                                                 "(MAX_BODY_BYTES)")


def test_server_tools_are_removed_where_a_runtime_speaks_a_providers_api() -> None:
    """Ollama runs web_search_20250305 itself on /v1/messages (docs/facts/providers.md §7.1);
    vLLM's and LM Studio's responses take hosted and mcp tools."""
    function = {"name": "f", "input_schema": {"type": "object"}}
    out = orjson.loads(lm.check_body(MESSAGES, orjson.dumps({
        "model": "qwen3", "max_tokens": 5, "messages": [],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}, function],
        "mcp_servers": [{"type": "url", "url": "https://x.invalid", "name": "x"}]})))
    assert out == {"model": "qwen3", "max_tokens": 5, "messages": [], "tools": [function]}
    out = orjson.loads(lm.check_body(RESPONSES, orjson.dumps({
        "model": "m", "input": "hi", "tools": [
            {"type": "mcp", "server_label": "x", "server_url": "https://x.invalid"},
            {"type": "web_search"}, {"type": "function", "name": "g", "parameters": {}}]})))
    assert out["tools"] == [{"type": "function", "name": "g", "parameters": {}}]
    out = orjson.loads(lm.check_body(OPENAI_CHAT, orjson.dumps({
        "model": "m", "messages": [], "web_search_options": {}})))
    assert out == {"model": "m", "messages": []}
    kept = orjson.loads(lm.check_body(MESSAGES, orjson.dumps({
        "model": "qwen3", "max_tokens": 5, "messages": [],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
        server_tools=True))
    assert kept["tools"] == [{"type": "web_search_20250305", "name": "web_search"}]


def test_the_body_sent_on_is_the_filters_own_serialisation() -> None:
    raw = b'{ "model" : "llama3",\n "messages": [ ], "stream": true , "x": 1e2 }'
    assert lm.check_body(CHAT, raw) == b'{"model":"llama3","messages":[],"stream":true,"x":100.0}'


_json_leaf = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([
    "llama3", "x:cloud", "gpt-oss:120b-cloud", "http://169.254.169.254/", "data:,x",
    "web_search_20250305", "function", "url", "mcp", "\u0430"])
_json = st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["model", "name", "models", "fallbacks", "tools", "type", "source",
                     "image_url", "url", "messages", "content", "tool_choice", "file_url",
                     "mcp_servers", "web_search_options", "input", "video_url",
                     "audio_url", "prompt_embeds", "chat_template", "x"]), inner, max_size=4),
    max_leaves=20)


def _cloud_named(node: Any, top: bool = True) -> bool:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("model", "name") and isinstance(value, str) and (
                    key == "model" or top) and lm.is_cloud_model(value):
                return True
            if key in ("models", "fallbacks") and top and isinstance(value, list) and any(
                    isinstance(entry, str) and lm.is_cloud_model(entry) for entry in value):
                return True
            if _cloud_named(value, False):
                return True
    elif isinstance(node, list):
        return any(_cloud_named(entry, False) for entry in node)
    return False


def _runtime_fields(node: Any) -> bool:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in lm.REFUSED_FIELDS:
                return True
            if key in ("video_url", "audio_url"):
                url = value.get("url") if isinstance(value, dict) else value
                if not (isinstance(url, str) and url.lower().startswith("data:")):
                    return True
            if _runtime_fields(value):
                return True
    elif isinstance(node, list):
        return any(_runtime_fields(entry) for entry in node)
    return False


@fuzz(2)
@given(where=st.sampled_from([path for (method, path), (body, _, _) in lm.ALLOWED_ROUTES.items()
                              if method == "POST"]),
       body=st.dictionaries(st.sampled_from(["model", "name", "models", "fallbacks", "tools",
                                             "messages", "input", "prompt", "x"]),
                            _json, max_size=5))
def test_fuzzed_bodies_pass_no_cloud_model_and_raise_only_the_filters_error(
        where: str, body: dict[str, Any]) -> None:
    admitted = lm.route("POST", where)
    try:
        out = lm.check_body(admitted, orjson.dumps(body))
    except LocalModelError as error:
        assert error.status in (400, 403) and error.reason and "\n" not in error.reason
        return
    parsed = orjson.loads(out)
    assert out == orjson.dumps(parsed)
    assert not _cloud_named(parsed)
    assert not _runtime_fields(parsed)
    if admitted.body == "anthropic":
        assert all(tool.get("type", "custom") in ("custom",) or
                   str(tool.get("type")).startswith(("bash_", "text_editor_", "computer_",
                                                     "memory_"))
                   for tool in parsed.get("tools", []))


@fuzz(2)
@given(where=st.sampled_from(sorted(lm.ALLOWED_ROUTES)), raw=st.binary(max_size=64))
def test_fuzzed_raw_bodies_raise_only_the_filters_error(where: tuple[str, str],
                                                         raw: bytes) -> None:
    with contextlib.suppress(LocalModelError):
        lm.check_body(lm.route(*where), raw)


# -- keys as Go reads them (Ollama's encoding/json) ----------------------------------------

FOLDED = ("a key that folds to {!r} but is spelled otherwise is refused (Ollama's Go "
          "matches JSON keys to fields in any case, the last winning)")
COLLIDE = ("two keys that differ only in letter case are refused (Go reads them as one "
           "field, the last winning)")
KELVIN = "\u212a"
LONG_S = "\u017f"

# The issue's attacks, each read by Ollama as a cloud model or a server tool.
CASE_VARIANTS = [
    ("/api/chat", '{"model":"lnkmodel7b","Model":"gpt-oss:120b-cloud","messages":[]}',
     FOLDED.format("model")),
    ("/api/generate", '{"model":"lnkmodel7b","MODEL":"gpt-oss:120b-cloud","prompt":"hi"}',
     FOLDED.format("model")),
    ("/v1/chat/completions", '{"model":"lnkmodel7b","mOdel":"x:cloud","messages":[]}',
     FOLDED.format("model")),
    ("/v1/messages", '{"model":"lnkmodel7b","max_tokens":8,"messages":[],'
                     '"Tools":[{"type":"web_search_20250305","name":"web_search"}]}',
     FOLDED.format("tools")),
    ("/v1/messages", '{"model":"lnkmodel7b","max_tokens":8,"messages":[],'
                     '"tools":[{"Type":"web_search_20250305","name":"web_search"}]}',
     FOLDED.format("type")),
    ("/api/chat", '{"Model":"gpt-oss:120b-cloud","messages":[]}', FOLDED.format("model")),
    ("/api/chat", '{"model":"lnkmodel7b","Model":"lnkmodel7b"}', FOLDED.format("model")),
    ("/api/chat", '{"model":"lnkmodel7b","task":1,"tas' + KELVIN + '":2}', COLLIDE),
    ("/api/chat", '{"model":"lnkmodel7b","' + LONG_S + 'tream":true}',
     FOLDED.format("stream")),
    ("/api/chat", '{"model":"lnkmodel7b","' + KELVIN + 'eep_alive":-1}',
     FOLDED.format("keep_alive")),
    ("/api/chat", '{"model":"lnkmodel7b","messages":[{"role":"user","Content":"x"}]}',
     FOLDED.format("content")),
    ("/api/chat", '{"model":"lnkmodel7b","tone":1,"TONE":2}', COLLIDE),
    ("/api/chat", '{"model":"lnkmodel7b","options":{"x":{"ab":1,"aB":2}}}', COLLIDE),
]


@pytest.mark.parametrize(("where", "raw", "reason"), CASE_VARIANTS)
def test_a_key_go_reads_otherwise_than_python_is_refused(where: str, raw: str,
                                                         reason: str) -> None:
    with pytest.raises(LocalModelError) as refused:
        lm.check_body(lm.route("POST", where), raw.encode())
    assert (refused.value.status, refused.value.reason) == (400, reason)


@pytest.mark.parametrize("body", [
    {"model": "llama3", "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {
            "userId": {"type": "string"}, "caf\u00e9": {"anyOf": [{"type": "string"}]}}}}}]},
    {"model": "llama3", "messages": [{"role": "user", "content": "hi"}], "options": {
        "num_ctx": 2048}, "stream": False},
])
def test_keys_spelled_as_the_runtimes_read_them_pass(body: dict[str, Any]) -> None:
    assert orjson.loads(lm.check_body(CHAT, orjson.dumps(body))) == body


def test_every_known_field_folds_to_its_own_name() -> None:
    folds = [lm.go_fold_name(field) for field in lm.KNOWN_FIELDS]
    assert len(set(folds)) == len(folds)
    assert "model" in lm.OLLAMA_FIELDS and "keep_alive" in lm.OLLAMA_FIELDS


def test_the_filters_own_keys_are_known_fields() -> None:
    """Every key this filter or model_rules reads by name is one whose case variants are
    refused (a new key read there and not listed fails here)."""
    import ast
    import re

    names: set[str] = set()
    for module in (lm, model_rules):
        tree = ast.parse(Path(str(module.__file__)).read_text("utf-8"))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "pop") and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, str)):
                names.add(node.args[0].value)
            elif (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                  and isinstance(node.slice.value, str)):
                names.add(node.slice.value)
    keys = {name for name in names if re.fullmatch(r"[a-z_][a-z0-9_]*", name)}
    assert keys - lm.KNOWN_FIELDS <= {"contents", "generation_config", "tool_config",
                                      "system_instruction", "cached_content"}, (
        sorted(keys - lm.KNOWN_FIELDS))


# A model of Go's encoding/json key matching, written from the Go source, not from the
# filter: fold.go appendFoldedName works on the key's UTF-8 bytes, upper-casing ASCII a-z
# and mapping every other rune to foldRune(r), the smallest rune of its unicode.SimpleFold
# orbit (the orbits of the runes drawn below, from Go's unicode tables); decode.go
# unquoteBytes has made invalid UTF-8 U+FFFD first; object() matches byExactName, else
# byFoldedName, and every matching key sets the field (the last wins).
_GO_ORBIT_MINIMUM = {
    "\u017f": "S", "\u212a": "K",                # long s {S s U+017F}, Kelvin {K k U+212A}
    "\u00e9": "\u00c9", "\u00c9": "\u00c9",      # {U+00C9 U+00E9}
    "\u00b5": "\u00b5", "\u039c": "\u00b5", "\u03bc": "\u00b5",  # {U+00B5 U+039C U+03BC}
    "\u00df": "\u00df", "\u1e9e": "\u00df",      # {U+00DF U+1E9E}
}


def _go_fold_model(key: str) -> bytes:
    data = key.encode("utf-8", "surrogatepass")
    out = bytearray()
    index = 0
    while index < len(data):
        byte = data[index]
        if byte < 0x80:
            out.append(byte - 32 if 0x61 <= byte <= 0x7A else byte)
            index += 1
            continue
        width = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        try:
            rune = data[index:index + width].decode("utf-8")
        except UnicodeDecodeError:
            rune, width = "\ufffd", 1  # utf8.DecodeRune's RuneError, one byte on
        out += _GO_ORBIT_MINIMUM.get(rune, rune).encode("utf-8")
        index += width
    return bytes(out)


_GO_FIELDS_BY_FOLD = {_go_fold_model(field): field for field in lm.KNOWN_FIELDS}


def _go_reads(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The fields a Go struct with a field for each KNOWN_FIELDS name gets from `pairs`."""
    fields: dict[str, Any] = {}
    for key, value in pairs:
        field = key if key in lm.KNOWN_FIELDS else _GO_FIELDS_BY_FOLD.get(_go_fold_model(key))
        if field is not None:
            fields[field] = value
    return fields


def _go_may_differ(node: Any) -> bool:
    """Whether some object in `node` has two keys Go folds equal, or a key Go folds to a
    known field but spelled otherwise."""
    if isinstance(node, list):
        return any(_go_may_differ(entry) for entry in node)
    if not isinstance(node, dict):
        return False
    folds = [_go_fold_model(key) for key in node]
    if len(set(folds)) < len(folds):
        return True
    if any(fold in _GO_FIELDS_BY_FOLD and _GO_FIELDS_BY_FOLD[fold] != key
           for key, fold in zip(node, folds, strict=True)):
        return True
    return any(_go_may_differ(value) for value in node.values())


def _every_object_as_go_reads_it(raw: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Python's object, Go's fields) for every object of the JSON text `raw`."""
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        python = dict(pairs)
        seen.append((python, _go_reads(pairs)))
        return python

    json.loads(raw, object_pairs_hook=hook)
    return seen


_key_letters = st.sampled_from([*"moDELstrkK_pa", KELVIN, LONG_S, "\u00e9", "\u00c9",
                                "\u00b5", "\u039c", "\u03bc", "\u00df", "\u1e9e"])
_go_keys = (st.sampled_from(sorted(lm.KNOWN_FIELDS))
            | st.text(_key_letters, min_size=1, max_size=6)
            | st.sampled_from(["model", "tools", "stream", "keep_alive", "type"]).flatmap(
                lambda field: st.lists(st.booleans(), min_size=len(field),
                                       max_size=len(field)).map(
                    lambda upper: "".join(c.upper() if u else c
                                          for c, u in zip(field, upper, strict=True)))))
_go_values = st.integers(0, 3) | st.sampled_from(["lnkmodel7b", "x:cloud", "s"])


@fuzz(4)
@given(where=st.sampled_from(["/api/chat", "/api/generate", "/v1/chat/completions",
                              "/v1/messages", "/v1/responses", "/api/embed"]),
       top=st.lists(st.tuples(_go_keys, _go_values), max_size=5),
       nested=st.lists(st.tuples(_go_keys, _go_values), max_size=4))
def test_fuzzed_keys_what_passes_means_the_same_to_go_as_to_the_filter(
        where: str, top: list[tuple[str, Any]], nested: list[tuple[str, Any]]) -> None:
    # Written as JSON text by hand: the pairs' order and duplicates are the program's own.
    def text(pairs: list[tuple[str, Any]]) -> str:
        return "{" + ",".join(json.dumps(key) + ":" + json.dumps(value)
                              for key, value in pairs) + "}"

    raw = ("{" + '"model":"lnkmodel7b","options":' + text(nested)
           + ("," + text(top)[1:-1] if top else "") + "}").encode()
    # A key sent twice exactly is no disagreement (both readers keep the last): the model
    # looks at the distinct keys, as json.loads keeps them.
    may_differ = _go_may_differ(json.loads(raw))
    try:
        out = lm.check_body(lm.route("POST", where), raw)
    except LocalModelError as error:
        fold_refusal = error.reason == COLLIDE or error.reason.startswith("a key that folds")
        assert fold_refusal == may_differ, (raw, error.reason)
        return
    assert not may_differ, raw
    for python, go in _every_object_as_go_reads_it(out):
        for field, value in go.items():
            assert python[field] == value, (raw, out, field)


# -- null, and keep_alive ------------------------------------------------------------------

NULL_SHAPES = ["/api/chat", "/api/generate", "/v1/chat/completions", "/v1/messages",
               "/v1/responses", "/v1/completions", "/completion"]


@pytest.mark.parametrize("where", NULL_SHAPES)
def test_a_top_level_null_is_absent_for_every_field_as_an_empty_tools_list_is(
        where: str) -> None:
    admitted = lm.route("POST", where)
    base = {"model": "llama3", "max_tokens": 8, "messages": []}
    tools: list[Any] | None
    for tools in (None, []):
        out = orjson.loads(lm.check_body(admitted, orjson.dumps(
            {**base, "tools": tools, "tool_choice": None, "web_search_options": None,
             "mcp_servers": None, "stop": None})))
        assert out == base, (where, tools)
    wrong: Any
    for wrong in ("x", {}, 0, False, ["x"]):
        with pytest.raises(LocalModelError) as refused:
            lm.check_body(admitted, orjson.dumps({**base, "tools": wrong}))
        assert refused.value.status == 400 and "tools" in refused.value.reason


@pytest.mark.parametrize("keep_alive", [0, -1, "0", "-1m", "24h", 1e18, "5m", {"x": 1}])
@pytest.mark.parametrize("where", ["/api/chat", "/api/generate", "/api/embed",
                                   "/api/embeddings", "/v1/chat/completions"])
def test_keep_alive_is_dropped_the_persons_setting_holds(where: str, keep_alive: Any) -> None:
    body = {"model": "llama3", "prompt": "", "keep_alive": keep_alive}
    out = orjson.loads(lm.check_body(lm.route("POST", where), orjson.dumps(body)))
    assert out == {"model": "llama3", "prompt": ""}


# -- the real relay in front of a fake runtime ---------------------------------------------


class FakeRuntime(http.server.ThreadingHTTPServer):
    """Ollama's and the OpenAI-compatible shapes, each request recorded. A streamed answer
    sends its next piece only once the test says the last one arrived (`arrived`), so a
    stream held whole anywhere on the way stalls, and says so (`stalled`)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RuntimeHandler)
        self.seen: list[dict[str, Any]] = []
        self.arrived = threading.Semaphore(0)
        self.gated = False
        self.stalled = False
        self.client_closed = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def paths(self) -> list[str]:
        return [f"{seen['method']} {seen['path']}" for seen in self.seen]


TOKENS = ["Hel", "lo", ",", " wor", "ld"]


class _RuntimeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeRuntime

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": self.command, "path": self.path, "body": body,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}})
        asked = json.loads(body) if body else {}
        if self.path == "/api/chat" and asked.get("stream", True):
            self._stream("application/x-ndjson", [
                json.dumps({"model": asked["model"], "created_at": "2026-12-01T00:00:00Z",
                            "message": {"role": "assistant", "content": token},
                            "done": False}) + "\n" for token in TOKENS] + [
                json.dumps({"model": asked["model"], "created_at": "2026-12-01T00:00:00Z",
                            "message": {"role": "assistant", "content": ""}, "done": True,
                            "done_reason": "stop"}) + "\n"])
        elif self.path == "/v1/chat/completions" and asked.get("stream"):
            chunks = [{"id": "c1", "object": "chat.completion.chunk", "created": 0,
                       "model": asked["model"], "choices": [
                           {"index": 0, "delta": {"content": token}, "finish_reason": None}]}
                      for token in TOKENS]
            self._stream("text/event-stream",
                         [f"data: {json.dumps(chunk)}\n\n" for chunk in chunks]
                         + ["data: [DONE]\n\n"])
        elif self.path == "/api/generate" and asked.get("model") == "hold":
            # A long answer: held until the relay closes this connection.
            self.connection.settimeout(30)
            with contextlib.suppress(OSError):
                if not self.connection.recv(1):
                    self.server.client_closed.set()
        else:
            self._json(self._reply(asked))

    def _reply(self, asked: dict[str, Any]) -> Any:
        if self.path == "/api/tags":
            return {"models": [{"name": "llama3:latest", "model": "llama3:latest",
                                "modified_at": "2026-12-01T00:00:00Z", "size": 1,
                                "digest": "00", "details": {}}]}
        if self.path == "/api/chat":
            return {"model": asked["model"], "created_at": "2026-12-01T00:00:00Z",
                    "message": {"role": "assistant", "content": "hi"}, "done": True}
        if self.path == "/api/embed":
            return {"model": asked["model"], "embeddings": [[0.1, 0.2]]}
        if self.path == "/v1/models":
            return {"object": "list", "data": [{"id": "llama3", "object": "model",
                                                "created": 0, "owned_by": "library"}]}
        if self.path == "/v1/chat/completions":
            return {"id": "c1", "object": "chat.completion", "created": 0,
                    "model": asked["model"], "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hi"}}]}
        return {"ok": True}

    def _json(self, reply: Any) -> None:
        out = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    def _stream(self, kind: str, pieces: list[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, piece in enumerate(pieces):
            if index and self.server.gated and not self.server.arrived.acquire(timeout=20):
                self.server.stalled = True
            data = piece.encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")

    do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _answer


class RunningRelay:
    def __init__(self, settings: Path, port: int, runtime: FakeRuntime,
                 process: subprocess.Popen[bytes]) -> None:
        self.settings = settings
        self.port = port
        self.runtime = runtime
        self.process = process
        self.url = f"http://127.0.0.1:{port}"

    def ask(self, raw: bytes) -> tuple[str, dict[str, str], bytes]:
        """(status line, headers, body) for raw request bytes; the relay closes after."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=20) as conn:
            conn.sendall(raw)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        status, *lines = head.decode().split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers, body

    def log(self) -> str:
        path = self.settings / "sandbox" / "wires" / WIRE / "log"
        return path.read_text() if path.exists() else ""

    def log_lines(self, expected: int) -> list[str]:
        """The log once it holds `expected` lines (the relay writes the ended line as the
        call ends, a moment after the client has its answer)."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            lines = self.log().splitlines()
            if len(lines) >= expected:
                return lines
            time.sleep(0.02)
        return self.log().splitlines()


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[RunningRelay]:
    runtime = FakeRuntime()
    threading.Thread(target=runtime.serve_forever, daemon=True).start()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    settings = tmp_path / "settings"
    settings.mkdir()
    process = subprocess.Popen(
        [RELAY, "--settings", str(settings), "--wire", WIRE, "--to-port", str(runtime.port),
         "--local-model", str(runtime.port), "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield RunningRelay(settings, port, runtime, process)
    process.terminate()
    _, errors = process.communicate(timeout=10)
    runtime.shutdown()
    runtime.server_close()
    assert errors == b"", errors  # nothing went wrong that is not a call's ordinary end


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost:11434\r\nContent-Type: application/json"
            f"\r\nContent-Length: {len(body)}\r\n{extra}\r\n").encode() + body


def test_the_ollama_client_chats_lists_and_embeds_through_the_filter(
        relay: RunningRelay) -> None:
    import ollama

    client = ollama.Client(host=relay.url)
    assert [model.model for model in client.list().models] == ["llama3:latest"]
    answer = client.chat(model="llama3", messages=[{"role": "user", "content": "hi"}],
                         stream=False)
    assert answer.message.content == "hi"
    assert client.embed(model="llama3", input="hi").embeddings == [[0.1, 0.2]]
    assert relay.runtime.paths() == ["GET /api/tags", "POST /api/chat", "POST /api/embed"]
    # One request per connection: the relay said so, and each reached the runtime with
    # `connection: close` and the body as the filter wrote it.
    assert all(seen["headers"]["connection"] == "close" for seen in relay.runtime.seen)
    chat = relay.runtime.seen[1]
    assert chat["body"] == orjson.dumps(orjson.loads(chat["body"]))
    lines = relay.log_lines(6)
    assert [line.split("\t")[1:3] for line in lines] == [
        ["allowed", f"localhost:{relay.runtime.port}"],
        ["ended", f"localhost:{relay.runtime.port}"]] * 3
    assert all("kind=local-model" in line for line in lines[::2])


def test_an_ollama_stream_arrives_token_by_token(relay: RunningRelay) -> None:
    import ollama

    relay.runtime.gated = True
    pieces = []
    for part in ollama.Client(host=relay.url).chat(
            model="llama3", messages=[{"role": "user", "content": "hi"}], stream=True):
        pieces.append(part.message.content or "")
        relay.runtime.arrived.release()  # the runtime sends the next piece only now
    assert "".join(pieces) == "Hello, world"
    assert not relay.runtime.stalled


def test_the_openai_sdk_streams_and_lists_through_the_filter(relay: RunningRelay) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{relay.url}/v1", api_key="local", max_retries=0)
    assert [model.id for model in client.models.list()] == ["llama3"]
    relay.runtime.gated = True
    pieces = []
    for chunk in client.chat.completions.create(
            model="llama3", messages=[{"role": "user", "content": "hi"}], stream=True):
        pieces.append(chunk.choices[0].delta.content or "")
        relay.runtime.arrived.release()
    assert "".join(pieces) == "Hello, world"
    assert not relay.runtime.stalled
    assert relay.runtime.paths() == ["GET /v1/models", "POST /v1/chat/completions"]


def test_the_ollama_clients_admin_calls_and_cloud_models_are_refused(
        relay: RunningRelay) -> None:
    import ollama

    client = ollama.Client(host=relay.url)
    for call in (lambda: client.pull("llama3"), lambda: client.delete("llama3"),
                 lambda: client.copy("llama3", "mine"), lambda: client.push("me/llama3"),
                 lambda: client.create(model="mine", from_="llama3"),
                 lambda: client.chat(model="gpt-oss:120b-cloud", messages=[]),
                 lambda: client.generate(model="deepseek-v3.1:671b-cloud", prompt="x")):
        with pytest.raises(ollama.ResponseError) as refused:
            call()
        assert refused.value.status_code in (400, 403)
    assert relay.runtime.seen == []


@pytest.mark.parametrize(("path", "status", "reason"), ACCEPTANCE_REFUSED)
def test_each_refused_path_of_the_acceptance_script_never_reaches_the_runtime(
        relay: RunningRelay, path: str, status: int, reason: str) -> None:
    answer, headers, body = relay.ask(_post(path, b'{"model":"llama3"}'))
    assert answer.startswith(f"HTTP/1.1 {status} ")
    assert body == lm.refusal_body(status, reason)
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    assert relay.runtime.seen == []
    line, = relay.log_lines(1)
    assert line.split("\t")[1:] == ["refused", f"localhost:{relay.runtime.port}",
                                     f"reason={reason}"]
    assert path not in relay.log() and "llama3" not in relay.log()


def test_a_cloud_model_on_the_acceptance_scripts_chat_is_refused(relay: RunningRelay) -> None:
    answer, _, body = relay.ask(_post("/api/chat",
                                      b'{"model":"gpt-oss:120b-cloud","messages":[]}'))
    assert answer.startswith("HTTP/1.1 403 ") and body == lm.refusal_body(403, CLOUD)
    assert relay.runtime.seen == []
    assert "cloud" not in relay.log_lines(1)[0].split("reason=")[0]


def test_a_request_behind_an_allowed_one_on_its_connection_is_never_read(
        relay: RunningRelay) -> None:
    """One request a connection: what a program pipelines after an allowed request (a
    pull, here) is not read, not sent, not answered; the connection closes."""
    body = b'{"model":"llama3","messages":[],"stream":false}'
    answer, headers, _ = relay.ask(_post("/api/chat", body) + _post("/api/pull", b"{}"))
    assert answer.startswith("HTTP/1.1 200 ") and headers["connection"] == "close"
    assert relay.runtime.paths() == ["POST /api/chat"]


def test_the_runtime_gets_the_filters_bytes_not_the_programs(relay: RunningRelay) -> None:
    """A chunked body, spaced JSON, a duplicate key and a server tool: the runtime sees one
    Content-Length body, compact, the last key's value (as orjson read it), no tool."""
    raw = (b'{"model": "qwen3", "max_tokens": 5, "messages": [], "model": "llama3", '
           b'"tools": [{"type": "web_search_20250305", "name": "web_search"}]}')
    chunked = (b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: localhost\r\n"
               b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
               + b"%x\r\n%s\r\n0\r\n\r\n" % (len(raw), raw))
    answer, _, _ = relay.ask(chunked)
    assert answer.startswith("HTTP/1.1 200 ")
    seen, = relay.runtime.seen
    assert seen["path"] == "/v1/messages?beta=true"
    assert seen["body"] == b'{"model":"llama3","max_tokens":5,"messages":[]}'
    assert seen["headers"]["content-length"] == str(len(seen["body"]))
    assert "transfer-encoding" not in seen["headers"]
    assert seen["headers"]["connection"] == "close"


def test_the_runtime_is_told_the_body_is_json_and_an_http10_client_gets_a_host(
        relay: RunningRelay) -> None:
    body = b'{"model":"llama3","messages":[],"stream":false}'
    form = _post("/api/chat", body).replace(b"Content-Type: application/json",
                                            b"Content-Type: multipart/form-data; boundary=x")
    assert relay.ask(form)[0].startswith("HTTP/1.1 200 ")
    assert relay.ask(b"GET /api/tags HTTP/1.0\r\n\r\n")[0].startswith("HTTP/1.1 200 ")
    chat, tags = relay.runtime.seen
    assert chat["headers"]["content-type"] == "application/json"
    assert tags["headers"]["host"] == f"localhost:{relay.runtime.port}"
    assert "content-length" not in tags["headers"] and "content-type" not in tags["headers"]


@pytest.mark.parametrize(("raw", "status", "reason"), [
    (_post("/api/chat", b"{}", "Content-Encoding: gzip\r\n"), 415, CODING),
    (_post("/api/chat", b"{}", "Content-Encoding: zstd\r\n"), 415, CODING),
    (b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 33554433\r\n\r\n", 413,
     "the body is over 32 MiB (MAX_BODY_BYTES)"),
    (b"GET /api/tags HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n", 431,
     "the request is not HTTP/1.1 as h11 reads it (or its head is too large)"),
    (b"GET /api/tags HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n", 400,
     "the request is not HTTP/1.1 as h11 reads it (or its head is too large)"),
    (b"GET /api/tags HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 400,
     "this call takes no body"),
    (b"GET http://localhost:11434/api/pull HTTP/1.1\r\nHost: x\r\n\r\n", 400,
     "the path must start with '/' (origin form)"),
    (b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400,
     "the path must start with '/' (origin form)"),
])
def test_malformed_or_unreadable_requests_are_refused_before_the_runtime(
        relay: RunningRelay, raw: bytes, status: int, reason: str) -> None:
    answer, _, body = relay.ask(raw)
    assert answer.startswith(f"HTTP/1.1 {status} ")
    assert body == lm.refusal_body(status, reason)
    assert relay.runtime.seen == []


def test_the_relay_holds_at_most_its_limit_of_request_bodies_at_once(
        relay: RunningRelay) -> None:
    """Four calls that declared 32 MiB bodies are held (their heads sent, their bodies
    not); a fifth that declares one is refused (503) before a byte of it is read; once one
    of the four is gone, a fifth is read again."""
    from lnk_relay.relay import MAX_HELD_BODY_BYTES

    head = (b"POST /api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % lm.MAX_BODY_BYTES)
    held = []
    for _ in range(MAX_HELD_BODY_BYTES // lm.MAX_BODY_BYTES):
        conn = socket.create_connection(("127.0.0.1", relay.port), timeout=20)
        conn.sendall(head)
        held.append(conn)
    # A fifth, until the relay has read the four heads (a fifth read before them is
    # waiting for its body: closed, its share given back, and tried again).
    answer = b""
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", relay.port), timeout=1) as conn:
            conn.sendall(head)
            try:
                answer = conn.recv(65536)
            except TimeoutError:
                continue
        break
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert answer.endswith(b"\r\n\r\n" + lm.refusal_body(
        503, "the relay holds 128 MiB of request bodies already (MAX_HELD_BODY_BYTES); try "
             "again when a call has ended"))
    held.pop().close()
    deadline = time.monotonic() + 20
    status = ""
    while time.monotonic() < deadline:
        status, _, _ = relay.ask(_post("/api/chat", b'{"model":"llama3","messages":[]}'))
        if not status.startswith("HTTP/1.1 503 "):
            break
        time.sleep(0.05)
    assert status.startswith("HTTP/1.1 200 ")
    for conn in held:
        conn.close()
    assert relay.runtime.paths() == ["POST /api/chat"]


def test_a_large_body_to_a_refused_path_gets_its_refusal_not_a_reset(
        relay: RunningRelay) -> None:
    """Refused from its head, the body unread: the relay reads and drops what still comes
    (for a while) before it closes, so the program reads its 403 rather than a reset."""
    body = b'{"model":"llama3","pad":"' + b"a" * (8 * 1024 * 1024) + b'"}'
    answer, _, said = relay.ask(_post("/api/pull", body))
    assert answer.startswith("HTTP/1.1 403 ") and said == lm.refusal_body(403, PULL)
    assert relay.runtime.seen == []


def test_the_kill_switch_refuses_a_models_port_call(relay: RunningRelay) -> None:
    wirestate.stop(str(relay.settings))
    answer, _, body = relay.ask(_post("/api/chat", b'{"model":"llama3","messages":[]}'))
    assert answer.startswith("HTTP/1.1 403 ")
    assert json.loads(body)["error"]["message"].startswith("the kill switch is on")
    assert relay.runtime.seen == []


def test_a_client_that_goes_away_ends_the_runtimes_call(relay: RunningRelay) -> None:
    conn = socket.create_connection(("127.0.0.1", relay.port), timeout=20)
    conn.sendall(_post("/api/generate", b'{"model":"hold","prompt":"x"}'))
    deadline = time.monotonic() + 20
    while not relay.runtime.seen and time.monotonic() < deadline:
        time.sleep(0.02)
    conn.close()
    assert relay.runtime.client_closed.wait(20)  # the relay closed the runtime's socket
    ended = relay.log_lines(2)[1]
    assert ended.split("\t")[1] == "ended" and ended.endswith(" error=client-gone")


def test_the_relay_refuses_bad_local_model_options(tmp_path: Path) -> None:
    for options, said in ((["--local-model", "x"], "--local-model 'x': a port, 1 to 65535"),
                          (["--local-model", "0"], "--local-model '0': a port, 1 to 65535"),
                          (["--local-model", "5", "--local-model", "5"],
                           "--local-model names a port twice"),
                          (["--server-tools", "--server-tools"], "--server-tools given twice"),
                          (["--to-port", "0"], "--to-port takes a port (1-65535), not '0'")):
        done = subprocess.run([RELAY, "--settings", str(tmp_path), "--wire", WIRE, *options,
                               "--listen", "127.0.0.1:0"], capture_output=True, timeout=10)
        assert done.returncode == 2
        assert done.stderr.decode().strip() == f"lnk-sandbox-relay: {said}"
