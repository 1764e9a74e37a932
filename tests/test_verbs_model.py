"""The model verb with the real clients: the official SDKs and curl, inside a real sandbox.

Every test runs `lnk-sandbox run` with `[verbs] model = [...]` and a Python script (the
venv's interpreter, the venv readable so `anthropic`, `openai` and `google-genai` import) or
curl, against the fake providers of the test network (tests/fakeproviders.py, at 10.212.0.3,
HTTPS for the providers' real names). The proxy finds them as it finds any name: the test
network's DNS (LNK_SANDBOX_DNS in the environment of `lnk-sandbox run`), and trusts their
test CA through SSL_CERT_FILE in that same environment, the harness's, never the sandbox's:
the program speaks plain HTTP to the verb and holds no CA of ours.

The real keys are set with `lnk-sandbox secret set NAME` (standard input) in this test's
own LNK_HOME, and are unique to the test, so the fake providers' request log
(STATE/providers/requests.jsonl, shared by every test on the network) is read from the
offset where this test began and then by key. What is shown: the provider receives the
real key in its own form and never the placeholder; the SDKs parse what comes back,
streams included, delta by delta (the first delta reaches the program before the provider
sent the last: each delta carries the provider's send time, so no timed threshold is
needed); the program never holds the key (environment, /proc, its files, the wire's log,
refusal bodies); a server-side tool never reaches the provider; a URL source, a wrong
placeholder and each provider's admin paths are refused with a reason the SDK surfaces,
and nothing of them reaches the provider.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    VENV,
    VENV_PYTHON,
    WriteSpec,
    run_out_script,
    toml_list,
    wire_log_of,
)
from tests.fakeproviders import (
    GATE_SECONDS,
    ca_file,
    calls_abandoned,
    log_offset,
    requests_seen,
)
from tests.testservers import DNS_SERVER

WIRE = "models"
PROVIDERS = ("anthropic", "openai", "gemini", "openrouter")
VERB = "http://127.0.0.1:3128/_link/model"
BASE_URLS = {
    "ANTHROPIC_BASE_URL": f"{VERB}/anthropic",
    "OPENAI_BASE_URL": f"{VERB}/openai/v1",
    "GOOGLE_GEMINI_BASE_URL": f"{VERB}/gemini",
    "OPENROUTER_BASE_URL": f"{VERB}/openrouter/api/v1",
}
KEY_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")
PLACEHOLDER = re.compile(r"lnk-[0-9a-f]{40}")
# The real key's form at each provider (model_rules._KEY_FORMS).
KEY_FORMS = {"anthropic": ("x-api-key", ""), "openai": ("authorization", "Bearer "),
             "gemini": ("x-goog-api-key", ""), "openrouter": ("authorization", "Bearer ")}
HOSTS = {"anthropic": "api.anthropic.com", "openai": "api.openai.com",
         "gemini": "generativelanguage.googleapis.com", "openrouter": "openrouter.ai"}
# Every credential form a program could send (model_rules strips them all).
CREDENTIAL_HEADERS = ("x-api-key", "authorization", "api-key", "x-goog-api-key",
                      "proxy-authorization", "cookie")

# Run at the start of every script inside: the clients, built from the environment the
# sandbox gave (base URL and placeholder), never retrying (a refusal is final).
PRELUDE = r'''
import json, os, sys, time
import anthropic, openai
from google import genai
from google.genai import types as gtypes
ENV = os.environ
# The harness's SSL_CERT_FILE (the test CA, for the proxy) comes through to the program, naming
# a file no sandbox here may read; httpx loads it whenever a client is built, even for plain
# HTTP, and the verb is plain HTTP: the program needs no CA of ours, so it drops it.
CA_SEEN = [ENV.get("SSL_CERT_FILE"), os.access(ENV.get("SSL_CERT_FILE") or "/", os.R_OK)]
ENV.pop("SSL_CERT_FILE", None)
claude = anthropic.Anthropic(max_retries=0)
gpt = openai.OpenAI(max_retries=0)
router = openai.OpenAI(base_url=ENV["OPENROUTER_BASE_URL"], api_key=ENV["OPENROUTER_API_KEY"],
                       max_retries=0)
# google-genai 3.x calls /v1/ unless told; the verb takes /v1beta/ (docs/facts/providers.md §3).
gemini = genai.Client(http_options=gtypes.HttpOptions(api_version="v1beta"))
USER = [{"role": "user", "content": "hi"}]
out = {}
def refused(call):
    """(status, the text the SDK's error shows, the body) of a call that must fail."""
    try:
        call()
    except Exception as error:
        status = getattr(error, "status_code", None) or getattr(error, "code", None)
        response = getattr(error, "response", None)
        return [status, str(error), getattr(response, "text", "")]
    return [200, "not refused", ""]
'''


# What every test's real keys look like (the `keys` fixture), for a search that does not
# need the keys themselves.
KEY_SHAPE = r"(?:sk-ant-real-|sk-proj-real-|AIzaReal|sk-or-v1-real-)[0-9a-f]{16}"


@pytest.fixture
def keys() -> dict[str, str]:
    """Real keys for this test alone (the fake providers' log is shared)."""
    tag = secrets.token_hex(8)
    return {"anthropic": f"sk-ant-real-{tag}", "openai": f"sk-proj-real-{tag}",
            "gemini": f"AIzaReal{tag}", "openrouter": f"sk-or-v1-real-{tag}"}


@pytest.fixture
def model_env(testnet: Path, sandbox_env: dict[str, str], keys: dict[str, str]
              ) -> dict[str, str]:
    """The harness's environment: LNK_HOME with the four keys set from standard input, the
    proxy pointed at the test DNS and trusting the test CA; and, as a careless harness
    would, the real Anthropic key in ANTHROPIC_API_KEY (the sandbox must get the
    placeholder instead)."""
    for name, value in keys.items():
        done = subprocess.run([LNK_SANDBOX, "secret", "set", name], input=value,
                              env=sandbox_env, capture_output=True, text=True, check=False,
                              timeout=SANDBOX_TIMEOUT_SECONDS)
        assert done.returncode == 0, done
        assert value not in done.stdout + done.stderr
    return {**sandbox_env, "LNK_SANDBOX_DNS": DNS_SERVER, "SSL_CERT_FILE": str(ca_file(testnet)),
            "ANTHROPIC_API_KEY": keys["anthropic"]}


@pytest.fixture
def spec(write_spec: WriteSpec, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(tmp_path, VENV)}\n'
                      f'write = {toml_list(work)}\n'
                      f'[verbs]\nmodel = {json.dumps(list(PROVIDERS))}\n')


@pytest.fixture
def seen(testnet: Path) -> Iterator[Any]:
    """seen() → what the fake providers received since the test began."""
    start = log_offset(testnet)
    yield lambda: requests_seen(testnet, start)


def run_script(spec: Path, env: dict[str, str], tmp_path: Path, body: str,
               *args: str, timeout: float = SANDBOX_TIMEOUT_SECONDS,
               ) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """PRELUDE + body run by the venv's Python inside; its `out` and the completed run."""
    out, done = run_out_script(spec, env, tmp_path, PRELUDE + body, *args, timeout=timeout)
    assert isinstance(out, dict), done
    return out, done

def run_command(spec: Path, env: dict[str, str], tmp_path: Path, *command: str
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", *command],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


def wire_log(env: dict[str, str]) -> str:
    return wire_log_of(env, WIRE)


def mine(records: list[dict[str, Any]], keys: dict[str, str]) -> list[dict[str, Any]]:
    """The requests that carried one of this test's keys, in any header."""
    return [record for record in records
            if any(key in json.dumps(record["headers"]) for key in keys.values())]


def assert_real_key_only(records: list[dict[str, Any]], keys: dict[str, str],
                         placeholder: str) -> None:
    """Each request carries its provider's real key in that provider's form, no other
    credential, and the placeholder nowhere (headers, path, query, body)."""
    for record in records:
        assert placeholder not in json.dumps(record), record
        provider = next(name for name, host in HOSTS.items()
                        if record["host"].split(":")[0] == host)
        header, prefix = KEY_FORMS[provider]
        assert record["sni"] == HOSTS[provider], record  # TLS asked for the provider's name
        assert record["headers"].get(header) == prefix + keys[provider], record
        others = [name for name in CREDENTIAL_HEADERS
                  if name != header and name in record["headers"]]
        assert others == [], record
        assert "key=" not in record["query"], record
        for other, value in keys.items():
            if other != provider:
                assert value not in json.dumps(record), record


# The OpenAI SDK's error text holds a refusal's reason only when the body is JSON with
# `error.message` (openai/_base_client.py _make_status_error_from_response); Anthropic's holds
# the body whatever it is; google-genai's a JSON body's whole, or the text as `message`.
SURFACED = ("the SDK's error does not show the verb's reason: the OpenAI SDK shows only a JSON "
            'body\'s error.message, so a refusal answers {"error": {"message": REASON}}')


def test_the_sdks_reach_each_provider_with_the_real_key(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """Every inference call of each SDK, through the verb: the SDK parses the answer; the
    provider gets the real key in its own form, never the placeholder; the program holds
    the placeholder in every key variable and the verb's base URLs."""
    out, done = run_script(spec, model_env, tmp_path, r'''
out["env"] = {name: ENV.get(name) for name in (
    "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OPENROUTER_BASE_URL",
    "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY",
    "ANTHROPIC_AUTH_TOKEN", "GOOGLE_API_KEY")}
out["ca"] = CA_SEEN
out["anthropic"] = [
    claude.messages.create(model="claude-fake", max_tokens=8, messages=USER).content[0].text,
    claude.messages.count_tokens(model="claude-fake", messages=USER).input_tokens > 0,
    [model.id for model in claude.models.list()],
]
out["openai"] = [
    gpt.chat.completions.create(model="gpt-fake", messages=USER).choices[0].message.content,
    gpt.responses.create(model="gpt-fake", input="hi").output_text,
    gpt.embeddings.create(model="emb-fake", input="hi").data[0].embedding,
    [model.id for model in gpt.models.list()],
]
out["gemini"] = [
    gemini.models.generate_content(model="gemini-fake", contents="hi").text,
    gemini.models.count_tokens(model="gemini-fake", contents="hi").total_tokens,
]
out["openrouter"] = [
    router.chat.completions.create(model="vendor/model-fake", messages=USER)
    .choices[0].message.content,
]
''')
    # The harness's real ANTHROPIC_API_KEY was replaced, and said so, without its value.
    assert "ANTHROPIC_API_KEY looked like real keys" in done.stderr, done.stderr
    assert all(key not in done.stdout + done.stderr for key in keys.values())
    env = out["env"]
    placeholder = env["ANTHROPIC_API_KEY"]
    assert PLACEHOLDER.fullmatch(placeholder), env
    assert [env[name] for name in KEY_VARIABLES] == [placeholder] * 4, env
    assert {name: env[name] for name in BASE_URLS} == BASE_URLS, env
    assert env["ANTHROPIC_AUTH_TOKEN"] is None and env["GOOGLE_API_KEY"] is None, env
    # The test CA the proxy trusts is not the program's to read, so its variable is not
    # passed in (lnk_wrap.launch: it made every SDK fail to build its client), and said.
    assert out["ca"][0] is None, out["ca"]
    assert "SSL_CERT_FILE names a file the sandbox cannot read; not passed in" in done.stderr
    assert out["anthropic"] == ["hello from the fake anthropic", True, ["claude-fake"]]
    assert out["openai"] == ["hello from the fake openai", "hello from the fake responses",
                             [0.25, -0.5, 1.0], ["gpt-fake"]]
    assert out["gemini"] == ["hello from the fake gemini", 7]
    assert out["openrouter"] == ["hello from the fake openai"]
    records = mine(seen(), keys)
    assert [(record["host"], record["method"], record["path"]) for record in records] == [
        ("api.anthropic.com", "POST", "/v1/messages"),
        ("api.anthropic.com", "POST", "/v1/messages/count_tokens"),
        ("api.anthropic.com", "GET", "/v1/models"),
        ("api.openai.com", "POST", "/v1/chat/completions"),
        ("api.openai.com", "POST", "/v1/responses"),
        ("api.openai.com", "POST", "/v1/embeddings"),
        ("api.openai.com", "GET", "/v1/models"),
        ("generativelanguage.googleapis.com", "POST",
         "/v1beta/models/gemini-fake:generateContent"),
        ("generativelanguage.googleapis.com", "POST", "/v1beta/models/gemini-fake:countTokens"),
        ("openrouter.ai", "POST", "/api/v1/chat/completions"),
    ]
    assert_real_key_only(records, keys, placeholder)
    # Nothing else reached the providers with this test's placeholder or without a key.
    assert all(placeholder not in json.dumps(record) for record in seen())


def test_gemini_sdk_at_its_default_api_version(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """google-genai as a harness uses it, configured by the environment alone: 3.x calls
    `/v1/models/…` by default (GOOGLE_AI_API_DEFAULT_VERSION), not `/v1beta/`. The verb must
    pass it (or the sandbox must set GOOGLE_GENAI_API_VERSION=beta): either way the call
    reaches the provider with the real key."""
    out, _ = run_script(spec, model_env, tmp_path, r'''
plain = genai.Client()
out["text"] = plain.models.generate_content(model="gemini-fake", contents="hi").text
out["placeholder"] = ENV["GEMINI_API_KEY"]
''')
    assert out["text"] == "hello from the fake gemini"
    records = mine(seen(), keys)
    assert len(records) == 1, records
    assert records[0]["path"].endswith("/models/gemini-fake:generateContent"), records
    assert_real_key_only(records, keys, out["placeholder"])


STREAMS = r'''
import secrets
def gated(model):
    """The model's name with a gate of this stream's own (tests/fakeproviders: the provider
    sends the first delta, then holds the rest until the gate is released), and its token."""
    token = secrets.token_hex(8)
    return f"{model}-gate-{token}", token
def timed(deltas, token):
    """(arrival time, text) of each text delta, as the program receives it; on the first,
    the program releases the stream's gate (a call of its own through the verb)."""
    got = []
    for text in deltas:
        if text:
            got.append([time.time(), text])
            if len(got) == 1:
                claude.messages.create(model=f"claude-fake-release-{token}", max_tokens=1,
                                       messages=USER)
    return got
def anthropic_texts(model):
    with claude.messages.stream(model=model, max_tokens=8, messages=USER) as s:
        yield from s.text_stream
def chat_texts(model):
    for chunk in gpt.chat.completions.create(model=model, messages=USER, stream=True):
        if chunk.choices:
            yield chunk.choices[0].delta.content
def responses_texts(model):
    for event in gpt.responses.create(model=model, input="hi", stream=True):
        if event.type == "response.output_text.delta":
            yield event.delta
def gemini_texts(model):
    for chunk in gemini.models.generate_content_stream(model=model, contents="hi"):
        yield chunk.text
def openrouter_texts(model):
    for chunk in router.chat.completions.create(model=model, messages=USER, stream=True):
        if chunk.choices:
            yield chunk.choices[0].delta.content
STREAMED = {"anthropic": (anthropic_texts, "claude-fake"), "chat": (chat_texts, "gpt-fake"),
            "responses": (responses_texts, "gpt-fake"), "gemini": (gemini_texts, "gemini-fake"),
            "openrouter": (openrouter_texts, "vendor/fake")}
# Each stream read once first, neither paced nor gated: an SDK builds what parses its
# events at the first one (the OpenAI SDK's Responses events took 0.35 s here, seconds on
# a busy machine), the program's own work, not the relay's, and not to be timed.
for texts, name in STREAMED.values():
    list(texts(name))
for what, (texts, name) in STREAMED.items():
    model, token = gated(f"{name}-5x500ms")
    out[what] = timed(texts(model), token)
    if any("unreleased" in text for _, text in out[what]):
        break  # held back: said by assert_relayed, without waiting out the others too
'''
# The streams script's bound: the three SDKs' imports, five streams read first, five
# paced over 2 s each (and gated, each released at once when relayed): 17 to 21 s on two
# busy cores here, too near one sandbox run's SANDBOX_TIMEOUT_SECONDS. A stream held back
# ends the script after its GATE_SECONDS, well inside this.
STREAMS_TIMEOUT_SECONDS = 90


def assert_relayed(deltas: list[list[Any]], what: str) -> None:
    """Five deltas in order, the first in the program's hands while the provider still held
    the others, whatever the machine's speed: the provider sends the first and waits until
    the program, having it, releases the stream's gate; each later delta says `released`,
    or `unreleased` if the provider gave up waiting (GATE_SECONDS: the stream was held
    back)."""
    sent = []
    for _, text in deltas:
        index, _, rest = text.strip().partition("@")
        at, _, note = rest.partition(" ")
        sent.append((index, float(at), note))
    assert [index for index, _, _ in sent] == ["t0", "t1", "t2", "t3", "t4"], (what, deltas)
    notes = [note for _, _, note in sent]
    assert notes == ["", "released", "released", "released", "released"], (
        f"{what}: the provider waited {GATE_SECONDS:g} s after the first delta for the "
        "program to have it: the stream was held back (or the test network's fake "
        "providers predate gates: start it again)", deltas)
    arrivals = [arrived for arrived, _ in deltas]
    assert arrivals == sorted(arrivals), (what, deltas)


def streams_only(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gated streams' requests (neither the calls that released them nor the streams
    read before to warm the SDKs up); Gemini's model is in its path."""
    return [record for record in records if "-gate-" in record["body"] + record["path"]]


def test_streams_reach_the_program_delta_by_delta(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """Anthropic's SSE, OpenAI's chat and responses streams, Gemini's alt=sse and
    OpenRouter's, each parsed by its SDK: every delta comes as the provider sends it."""
    out, _ = run_script(spec, model_env, tmp_path, STREAMS, timeout=STREAMS_TIMEOUT_SECONDS)
    for what in ("anthropic", "chat", "responses", "gemini", "openrouter"):
        assert what in out, out  # the script stops at a stream held back
        assert_relayed(out[what], what)
    records = streams_only(mine(seen(), keys))
    assert len(records) == 5, records
    assert records[3]["query"] == "alt=sse", records[3]
    assert all(json.loads(record["body"]).get("stream", True) for record in records)


def test_curl_through_the_verb(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """curl, as a shell script of a harness would call it: a plain call and an SSE stream
    (-N), each line timed as it arrives; on the first delta the script releases the
    stream's gate (assert_relayed)."""
    token = secrets.token_hex(8)
    body = json.dumps({"model": f"claude-fake-5x500ms-gate-{token}", "max_tokens": 8,
                       "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    release = json.dumps({"model": f"claude-fake-release-{token}", "max_tokens": 1,
                          "messages": [{"role": "user", "content": "hi"}]})
    call = ('curl -sS -m 20 "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY"'
            ' -H "anthropic-version: 2023-06-01" -H "content-type: application/json"')
    done = run_command(spec, model_env, tmp_path, "sh", "-c", (
        f'{call} -d \'{{"model":"claude-fake","max_tokens":8,"messages":[{{"role":"user",'
        f'"content":"hi"}}]}}\' && echo && {call} -N -d "$0" | {{ released=;'
        ' while IFS= read -r line; do case "$line" in *text_delta*)'
        ' echo "$(date +%s.%N) $line";'
        f' [ "$released" ] || {{ released=1; {call} -d "$1" >/dev/null; }};; esac; done; }}'),
        body, release)
    assert done.returncode == 0, done
    first, *stream = done.stdout.splitlines()
    assert json.loads(first)["content"][0]["text"] == "hello from the fake anthropic", done
    deltas = []
    for line in stream:
        arrived, _, event = line.partition(" ")
        text = json.loads(event.removeprefix("data: "))["delta"]["text"]
        deltas.append([float(arrived), text])
    assert_relayed(deltas, "curl")
    records = [record for record in mine(seen(), keys) if "-release-" not in record["body"]]
    assert [record["path"] for record in records] == ["/v1/messages", "/v1/messages"]


def test_server_side_tools_never_reach_the_provider(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """The SDKs send client tools, server tools (search, fetch, code execution, MCP) and
    server fields; the providers receive the client tools only."""
    out, _ = run_script(spec, model_env, tmp_path, r'''
fn = {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}
out["anthropic"] = claude.messages.create(
    model="claude-fake", max_tokens=8, messages=USER,
    tools=[fn, {"type": "web_search_20250305", "name": "web_search"},
           {"type": "bash_20250124", "name": "bash"},
           {"type": "code_execution_20250825", "name": "code_execution"}],
    extra_body={"mcp_servers": [{"type": "url", "url": "https://example.org/mcp",
                                 "name": "m"}]}).content[0].text
function = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
out["responses"] = gpt.responses.create(
    model="gpt-fake", input="hi",
    tools=[function, {"type": "web_search"}, {"type": "code_interpreter",
                                              "container": {"type": "auto"}},
           {"type": "mcp", "server_label": "m", "server_url": "https://example.org/mcp"}]
).output_text
out["chat"] = gpt.chat.completions.create(
    model="gpt-fake", messages=USER, web_search_options={},
    tools=[{"type": "function", "function": {"name": "lookup",
                                             "parameters": {"type": "object"}}}]
).choices[0].message.content
declaration = gtypes.FunctionDeclaration(name="lookup", parameters=gtypes.Schema(type="OBJECT"))
out["gemini"] = gemini.models.generate_content(
    model="gemini-fake", contents="hi", config=gtypes.GenerateContentConfig(tools=[
        gtypes.Tool(function_declarations=[declaration]),
        gtypes.Tool(google_search=gtypes.GoogleSearch()),
        gtypes.Tool(url_context=gtypes.UrlContext()),
        gtypes.Tool(code_execution=gtypes.ToolCodeExecution())])).text
out["openrouter"] = router.chat.completions.create(
    model="vendor/model-fake", messages=USER,
    extra_body={"plugins": [{"id": "web"}]}).choices[0].message.content
''')
    assert out == {"anthropic": "hello from the fake anthropic",
                   "responses": "hello from the fake responses",
                   "chat": "hello from the fake openai", "gemini": "hello from the fake gemini",
                   "openrouter": "hello from the fake openai"}
    anthropic, responses, chat, gemini, router = (
        json.loads(record["body"]) for record in mine(seen(), keys))
    assert [(tool.get("type", "custom"), tool["name"]) for tool in anthropic["tools"]] == [
        ("custom", "lookup"), ("bash_20250124", "bash")]
    assert "mcp_servers" not in anthropic
    assert [tool["type"] for tool in responses["tools"]] == ["function"]
    assert "web_search_options" not in chat and len(chat["tools"]) == 1
    assert [list(tool) for tool in gemini["tools"]] == [["functionDeclarations"]]
    assert "plugins" not in router


def test_a_url_source_is_refused_with_a_reason_the_sdk_shows(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """An image the provider would fetch by URL, from each SDK: 400, the SDK's error carries
    the verb's one line, and nothing reaches the provider."""
    out, _ = run_script(spec, model_env, tmp_path, r'''
url = "https://example.org/cat.png"
out["anthropic"] = refused(lambda: claude.messages.create(
    model="claude-fake", max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": [
            {"type": "image", "source": {"type": "url", "url": url}}]}]}]))
out["chat"] = refused(lambda: gpt.chat.completions.create(
    model="gpt-fake", messages=[{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}]))
out["responses"] = refused(lambda: gpt.responses.create(
    model="gpt-fake", input=[{"role": "user", "content": [
        {"type": "input_file", "file_url": "https://example.org/a.pdf"}]}]))
out["gemini"] = refused(lambda: gemini.models.generate_content(
    model="gemini-fake", contents=[gtypes.Part.from_uri(file_uri=url, mime_type="image/png")]))
out["placeholder"] = ENV["ANTHROPIC_API_KEY"]
''')
    for what, reason in (("anthropic", 'source.type "url"'), ("chat", "image_url"),
                         ("responses", "file_url"), ("gemini", "fileUri")):
        status, shown, body = out[what]
        # One line of JSON whose error message is the reason (the shape the SDKs read).
        assert status == 400 and reason in json.loads(body)["error"]["message"], (
            what, out[what])
        assert reason in shown, (SURFACED, what, out[what])
        assert out["placeholder"] not in shown + body
        assert all(key not in shown + body for key in keys.values())
    assert mine(seen(), keys) == []  # the providers are shared: this test's calls


def test_a_wrong_or_missing_placeholder_is_refused(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """A made-up key of the placeholder's shape, a real-looking key, no key, and the right
    placeholder beside a second credential: 401 with the verb's reason; nothing reaches the
    provider."""
    out, _ = run_script(spec, model_env, tmp_path, r'''
other = "lnk-" + "0" * 40
out["guess"] = refused(lambda: anthropic.Anthropic(api_key=other, max_retries=0)
                       .messages.create(model="claude-fake", max_tokens=8, messages=USER))
out["openai"] = refused(lambda: openai.OpenAI(api_key="sk-proj-guess", max_retries=0)
                        .chat.completions.create(model="gpt-fake", messages=USER))
guessing = genai.Client(api_key=other, http_options=gtypes.HttpOptions(api_version="v1beta"))
out["gemini"] = refused(lambda: guessing.models.generate_content(model="gemini-fake",
                                                                 contents="hi"))
out["second"] = refused(lambda: claude.messages.create(
    model="claude-fake", max_tokens=8, messages=USER,
    extra_headers={"Authorization": "Bearer sk-ant-guess"}))
import urllib.request, urllib.error
request = urllib.request.Request(ENV["ANTHROPIC_BASE_URL"] + "/v1/messages", method="POST",
    data=b'{"model":"claude-fake","max_tokens":8,"messages":[]}',
    headers={"content-type": "application/json", "anthropic-version": "2023-06-01"})
try:
    urllib.request.urlopen(request, timeout=20)
    out["none"] = [200, ""]
except urllib.error.HTTPError as error:
    out["none"] = [error.code, error.read().decode()]
''')
    for what in ("guess", "openai", "gemini", "second"):
        status, shown, body = out[what]
        assert status == 401 and "not this sandbox's placeholder" in body, (what, out[what])
        assert "not this sandbox's placeholder" in shown, (SURFACED, what, out[what])
    assert out["none"][0] == 401 and "carried no key" in out["none"][1], out
    for refusal in out.values():
        assert all(key not in "".join(refusal[1:]) for key in keys.values())
    assert mine(seen(), keys) == []  # the providers are shared: this test's calls
    assert [record for record in seen() if "guess" in json.dumps(record["headers"])
            or "lnk-" + "0" * 40 in json.dumps(record)] == []  # and its guesses


def test_each_providers_admin_paths_are_refused(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """Files, batches and fine-tuning, from the SDKs' own methods and by hand: 404 with the
    verb's reason, nothing reaches the provider."""
    out, _ = run_script(spec, model_env, tmp_path, r'''
import urllib.request, urllib.error
def raw(method, url, header):
    request = urllib.request.Request(url, method=method, headers=header,
                                     data=b"{}" if method == "POST" else None)
    try:
        urllib.request.urlopen(request, timeout=20)
        return [200, "", ""]
    except urllib.error.HTTPError as error:
        text = error.read().decode()
        return [error.code, text, text]
P = ENV["ANTHROPIC_API_KEY"]
out["openai.files"] = refused(lambda: gpt.files.list())
out["openai.fine_tuning"] = refused(lambda: gpt.fine_tuning.jobs.list())
out["openai.batches"] = refused(lambda: gpt.batches.list())
out["anthropic.batches"] = refused(lambda: claude.messages.batches.list())
out["anthropic.files"] = refused(lambda: claude.beta.files.list())
out["gemini.files"] = refused(lambda: list(gemini.files.list()))
out["gemini.batches"] = refused(lambda: list(gemini.batches.list()))
out["gemini.tuning"] = raw("GET", ENV["GOOGLE_GEMINI_BASE_URL"] + "/v1beta/tunedModels",
                           {"x-goog-api-key": P})
out["gemini.caches"] = refused(lambda: list(gemini.caches.list()))
out["openrouter.keys"] = raw("GET", ENV["OPENROUTER_BASE_URL"] + "/keys",
                             {"Authorization": "Bearer " + P})
out["openrouter.files"] = raw("GET", ENV["OPENROUTER_BASE_URL"] + "/files",
                              {"Authorization": "Bearer " + P})
out["anthropic.admin"] = raw("GET", ENV["ANTHROPIC_BASE_URL"]
                             + "/v1/organizations/api_keys", {"x-api-key": P})
''')
    for what, (status, shown, body) in out.items():
        assert status == 404 and "refused" in body, (what, out[what])
        assert all(key not in shown + body for key in keys.values()), (what, out[what])
    assert "fine-tuning is refused" in out["openai.fine_tuning"][2]
    assert "Files API is refused" in out["openai.files"][2]
    assert "batches are refused" in out["anthropic.batches"][2]
    assert "tuned models are refused" in out["gemini.tuning"][2]
    assert "cachedContents is refused" in out["gemini.caches"][2]
    for what, (_, shown, _) in out.items():
        assert "refused" in shown, (SURFACED, what, out[what])
    assert mine(seen(), keys) == []  # the providers are shared: this test's calls


def test_the_sandbox_never_holds_a_real_key(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """After calls to every provider (the keys in use), the program looks everywhere it can:
    its environment, every /proc/*/environ and cmdline it can read, the files it can write
    or made, and the secrets' files by their path (Link's settings are hidden). No key
    anywhere. Outside, the wire's log keeps host:port and kind=model, never a key, a
    path or a body, and the harness's own output holds no key."""
    secrets_folder = Path(model_env["LNK_HOME"]) / "sandbox" / "secrets"
    out, done = run_script(spec, model_env, tmp_path, r'''
import glob, pathlib
claude.messages.create(model="claude-fake", max_tokens=8, messages=USER)
gpt.chat.completions.create(model="gpt-fake", messages=USER)
gemini.models.generate_content(model="gemini-fake", contents="hi")
router.chat.completions.create(model="vendor/model-fake", messages=USER)
with claude.messages.stream(model="claude-fake", max_tokens=8, messages=USER) as s:
    list(s.text_stream)
import re
# The keys' shape, not the keys: the program must not be handed them to look for them.
wanted = re.compile(sys.argv[1])
texts = {"environ": json.dumps(dict(ENV))}
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        texts[path] = open(path, "rb").read().decode("latin-1")
    except OSError:
        pass
roots = [sys.argv[2], "/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd()]
for root in roots:
    for count, (folder, _, names) in enumerate(os.walk(root)):
        if count > 2000:
            break  # a large home: its first folders are enough (the keys were never there)
        for name in names:
            try:
                texts[os.path.join(folder, name)] = open(os.path.join(folder, name), "rb"
                                                         ).read(1 << 20).decode("latin-1")
            except OSError:
                pass
out["found"] = sorted(path for path, text in texts.items() if wanted.search(text))
out["read"] = len(texts)
out["proc"] = sum(path.startswith("/proc/") for path in texts)
out["secrets"] = {}
for name in ("anthropic", "openai", "gemini", "openrouter"):
    path = os.path.join(sys.argv[3], name)
    try:
        out["secrets"][name] = open(path).read()
    except OSError as error:
        out["secrets"][name] = type(error).__name__
out["placeholder"] = ENV["ANTHROPIC_API_KEY"]
''', KEY_SHAPE, str(tmp_path / "work"), str(secrets_folder))
    assert out["found"] == [], out
    assert out["proc"] >= 2, out  # at least its own environ and cmdline were read
    assert set(out["secrets"].values()) <= {"FileNotFoundError", "PermissionError"}, out
    assert all(key not in done.stdout + done.stderr for key in keys.values())
    records = mine(seen(), keys)
    assert len(records) == 5, records
    log = wire_log(model_env)
    lines = log.splitlines()
    for host in HOSTS.values():
        assert any("allowed" in line and f"{host}:443" in line and "kind=model" in line
                   for line in lines), (host, log)
    for forbidden in (*keys.values(), out["placeholder"], "/v1/messages", "chat/completions",
                      "generateContent", "_link", "claude-fake", "gpt-fake", "hello from"):
        assert forbidden not in log, (forbidden, log)


def test_a_rotated_key_is_used_at_the_next_call(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """One sandbox, two calls; between them the key is set again outside: the second call
    carries the new key (the verb reads the secret at each call, on a kept connection)."""
    work = tmp_path / "work"
    script = tmp_path / "rotate.py"
    script.write_text(PRELUDE + r'''
claude.messages.create(model="claude-fake", max_tokens=8, messages=USER)
for _ in range(400):
    if os.path.exists(sys.argv[1]):
        break
    time.sleep(0.05)
out["second"] = claude.messages.create(model="claude-fake", max_tokens=8,
                                       messages=USER).content[0].text
print(json.dumps(out))
''')
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON,
                            str(script), str(work / "go")], cwd=str(tmp_path), env=model_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while not mine(seen(), keys) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        rotated = f"sk-ant-real-{secrets.token_hex(8)}"
        done = subprocess.run([LNK_SANDBOX, "secret", "set", "anthropic"], input=rotated,
                              env=model_env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done
        (work / "go").write_text("")
        output, errors = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, (output, errors)
    assert json.loads(output.splitlines()[-1]) == {"second": "hello from the fake anthropic"}
    first, second = mine(seen(), {**keys, "rotated": rotated})
    assert first["headers"]["x-api-key"] == keys["anthropic"], first
    assert second["headers"]["x-api-key"] == rotated, second


def test_a_program_that_leaves_a_stream_ends_it_at_the_provider(
    spec: Path, model_env: dict[str, str], testnet: Path, tmp_path: Path,
    keys: dict[str, str], seen: Any,
) -> None:
    """The program reads two deltas of a stream of fifty (200 ms apart) and closes it: the
    proxy ends the upstream call, so the provider's next write fails (the fake logs the
    call as abandoned, with the deltas it had sent), long before it would have sent all."""
    start = log_offset(testnet)
    out, _ = run_script(spec, model_env, tmp_path, r'''
with claude.messages.stream(model="claude-fake-50x200ms", max_tokens=8, messages=USER) as s:
    out["read"] = [text for _, text in zip(range(2), s.text_stream)]
''')
    assert len(out["read"]) == 2, out
    deadline = time.monotonic() + 20  # the whole stream would take 10 s
    gone: list[dict[str, Any]] = []
    while time.monotonic() < deadline and not gone:
        gone = [record for record in calls_abandoned(testnet, start)
                if record["key"]["x-api-key"] == keys["anthropic"]]
        time.sleep(0.1)
    assert len(gone) == 1, calls_abandoned(testnet, start)
    assert 2 <= gone[0]["deltas_sent"] < 50, gone


def test_a_call_block_type_at_the_top_does_not_switch_the_url_check_off(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """Issue 27, items 2, 3 and 7: a Responses body typed "tool_use" at its top, whose
    conversation (`input`) holds an image and a file by URL, is refused on OpenAI and
    OpenRouter and never reaches them; so is a file_data a WHATWG parser reads as a URL;
    and on a call that passes, the headers that change the method at the receiver, a preset
    and OpenRouter's web_search_options do not reach the provider."""
    # The fake providers' log is shared (other modules' workers, other runs): the host is
    # this test's own, so that finding it there means this test's call got through.
    evil_host = f"evil-{secrets.token_hex(6)}.example"
    out, _ = run_script(spec, model_env, tmp_path, r'''
evil = [{"role": "user", "content": [
    {"type": "input_text", "text": "describe"},
    {"type": "input_image", "image_url": "https://evil.example/i.png"},
    {"type": "input_file", "file_url": "https://evil.example/f.pdf"}]}]
for name, client in (("openai", gpt), ("openrouter", router)):
    out[name] = refused(lambda c=client: c.responses.create(
        model="gpt-fake", input=evil, extra_body={"type": "tool_use"}))
    out[name + " file_data"] = refused(lambda c=client: c.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": [{"type": "file", "file": {
            "filename": "f.pdf", "file_data": "https:\\\\evil.example/f.pdf"}}]}]))
out["preset"] = refused(lambda: router.responses.create(model="@preset/mine", input="hi"))
overrides = {"X-HTTP-Method-Override": "DELETE", "x-http-method": "DELETE",
             "X-Method-Override": "DELETE"}
out["passed"] = router.responses.create(
    model="vendor/model-fake", input="hi", extra_headers=overrides,
    extra_body={"web_search_options": {"search_context_size": "high"}}).output_text
out["placeholder"] = ENV["OPENROUTER_API_KEY"]
'''.replace("evil.example", evil_host))
    for name in ("openai", "openrouter"):
        status, shown, body = out[name]
        assert status == 400, out[name]
        reason = json.loads(body)["error"]["message"]
        assert "_url" in reason and "would fetch it" in reason, out[name]
        assert reason in shown and out["placeholder"] not in shown + body, out[name]
        status, _shown, body = out[name + " file_data"]
        assert status == 400 and "file_data" in json.loads(body)["error"]["message"], out
    status, _shown, body = out["preset"]
    assert status == 400 and "@preset/" in json.loads(body)["error"]["message"], out
    assert out["passed"] == "hello from the fake responses"
    records = mine(seen(), keys)
    assert [record["path"] for record in records] == ["/api/v1/responses"]
    (record,) = records
    assert_real_key_only(records, keys, out["placeholder"])
    assert not {"x-http-method-override", "x-http-method", "x-method-override"} & set(
        record["headers"]), record
    assert "web_search_options" not in json.loads(record["body"])
    assert evil_host not in json.dumps(seen())


def test_the_accounts_stored_state_by_id_is_refused(
    spec: Path, model_env: dict[str, str], tmp_path: Path, keys: dict[str, str], seen: Any,
) -> None:
    """Issue 27, item 7: from the SDKs' own arguments, a stored response, a conversation, a
    background run, files by id (OpenAI's input_file and chat file part, Anthropic's files
    beta source and container_upload, Gemini's Files API URI) and the SDKs' own calls that
    read stored state by path are refused and reach no provider; a call with `store: true`
    passes, and the provider receives it as sent."""
    # The ids are this test's own (the fake providers' log is shared: another module's
    # harness prompt says "another"), so that finding one there means a call got through.
    stored = f"other{secrets.token_hex(6)}"
    out, _ = run_script(spec, model_env, tmp_path, r'''
def doc(source):
    return [{"role": "user", "content": [{"type": "document", "source": source}]}]
files_beta = ["files-api-2025-04-14"]
out["previous_response_id"] = refused(lambda: gpt.responses.create(
    model="gpt-fake", input="hi", previous_response_id="resp_other"))
out["conversation"] = refused(lambda: gpt.responses.create(
    model="gpt-fake", input="hi", conversation="conv_other"))
out["background"] = refused(lambda: gpt.responses.create(
    model="gpt-fake", input="hi", background=True))
out["input_file"] = refused(lambda: gpt.responses.create(
    model="gpt-fake", input=[{"role": "user", "content": [
        {"type": "input_file", "file_id": "file-other"}]}]))
out["chat file"] = refused(lambda: gpt.chat.completions.create(
    model="gpt-fake", messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-other"}}]}]))
out["router file"] = refused(lambda: router.chat.completions.create(
    model="vendor/model-fake", messages=[{"role": "user", "content": [
        {"type": "file", "file": {"file_id": "file-other"}}]}]))
out["anthropic file"] = refused(lambda: claude.beta.messages.create(
    model="claude-fake", max_tokens=8, betas=files_beta,
    messages=doc({"type": "file", "file_id": "file_other"})))
out["container_upload"] = refused(lambda: claude.beta.messages.create(
    model="claude-fake", max_tokens=8, betas=files_beta, messages=[{"role": "user", "content": [
        {"type": "container_upload", "file_id": "file_other"}]}]))
out["gemini file"] = refused(lambda: gemini.models.generate_content(
    model="gemini-fake", contents=[gtypes.Part.from_uri(
        file_uri="https://generativelanguage.googleapis.com/v1beta/files/other",
        mime_type="application/pdf")]))
out["responses.retrieve"] = refused(lambda: gpt.responses.retrieve("resp_other"))
out["conversations.create"] = refused(lambda: gpt.conversations.create())
out["anthropic files"] = refused(lambda: claude.beta.files.retrieve_metadata("file_other"))
out["passed"] = gpt.responses.create(model="gpt-fake", input="hi", store=True).output_text
out["placeholder"] = ENV["OPENAI_API_KEY"]
'''.replace("other", stored))
    reasons = {"previous_response_id": "previous_response_id is refused",
               "conversation": "conversation is refused", "background": "background is refused",
               "input_file": "file_id is refused", "chat file": "file_id is refused",
               "router file": "file_id is refused",
               "anthropic file": 'source.type "file"',
               "container_upload": "file_id is refused",
               "gemini file": "fileUri of the Files API is refused"}
    for what, reason in reasons.items():
        status, shown, body = out[what]
        assert status == 400 and reason in json.loads(body)["error"]["message"], (what, out)
        assert reason in shown, (SURFACED, what, out[what])
        assert out["placeholder"] not in shown + body
        assert all(key not in shown + body for key in keys.values())
    for what in ("responses.retrieve", "conversations.create", "anthropic files"):
        status, _shown, body = out[what]
        assert status == 404 and "refused" in body, (what, out[what])
    assert "Files API is refused" in out["anthropic files"][2]
    assert out["passed"] == "hello from the fake responses"
    records = mine(seen(), keys)
    assert [record["path"] for record in records] == ["/v1/responses"], records
    assert json.loads(records[0]["body"])["store"] is True
    assert stored not in json.dumps(seen())
