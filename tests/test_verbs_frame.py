"""The verbs' frame on the proxy's one listener: `/_link/<verb>/…`, each off unless named,
through the same gate as any call, one line on the wire's log with no path, query, key or
body. The real proxy process (`lnk-sandbox-proxy --listen`), real sockets; the calls here
are refused before anything leaves (the SDK tests, tests/test_verbs_model.py, go on to a
fake provider over TLS).

The splitter (lnk_proxy.verbs) is fuzzed: whatever the target, it answers a verb only for
the exact `/_link/<verb>` of an enabled one, and otherwise a VerbError.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common import wirestate
from lnk_proxy.verbs import (
    VERBS,
    VerbError,
    asked_line,
    is_verb_target,
    split_local,
    split_url_secret,
    split_verb,
)
from tests.conftest import LNK_SANDBOX, fuzz

PROXY = str(Path(sys.executable).parent / "lnk-sandbox-proxy")
PLACEHOLDER = "lnk-" + "ab" * 20
WIRE = "frame"
MODEL_OFF = ('the model verb is off in this sandbox: [verbs] model = "anthropic" (or a list '
             "of providers) turns it on")
NO_SUCH_VERB = "no such verb (the verbs, by exact name: model, s, secret)"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RunningProxy:
    def __init__(self, settings: Path, port: int, process: subprocess.Popen[bytes]) -> None:
        self.settings = settings
        self.port = port
        self.process = process

    def ask(self, head: str, body: bytes = b"") -> tuple[str, str]:
        """(status line, the one-line reason of the body) for a raw request."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as conn:
            conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
            answer = b""
            while True:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        status, _, rest = answer.partition(b"\r\n")
        fields, _, answered = rest.partition(b"\r\n\r\n")
        # A verb's refusal is one line of JSON, the reason its error's message (the shape
        # the providers' SDKs read); it is the one line and the one message.
        assert b"content-type: application/json" in fields.lower(), answer
        assert answered.count(b"\n") == 1 and answered.endswith(b"\n"), answered
        error = json.loads(answered)["error"]
        assert error["code"] == int(status.split()[1]), error
        return status.decode(), error["message"]

    def log(self) -> str:
        path = self.settings / "sandbox" / "wires" / WIRE / "log"
        return path.read_text() if path.exists() else ""


StartProxy = Callable[..., RunningProxy]


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[StartProxy]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*options: str, placeholder: str | None = PLACEHOLDER) -> RunningProxy:
        settings = tmp_path / f"settings{len(started)}"
        settings.mkdir()
        port = _free_port()
        env = {key: value for key, value in os.environ.items() if key != "LNK_PLACEHOLDER"}
        if placeholder is not None:
            env["LNK_PLACEHOLDER"] = placeholder
        process = subprocess.Popen(
            [PROXY, "--settings", str(settings), "--wire", WIRE, *options,
             "--listen", f"127.0.0.1:{port}"], env=env, stderr=subprocess.PIPE)
        started.append(process)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        return RunningProxy(settings, port, process)

    yield start
    for process in started:
        process.terminate()
        process.wait(timeout=10)


def _set_secret(settings: Path, name: str, value: bytes) -> None:
    subprocess.run([LNK_SANDBOX, "secret", "set", name], input=value, check=True,
                   capture_output=True, env={**os.environ, "LNK_HOME": str(settings)})


def _messages(path: str = "/_link/model/anthropic/v1/messages", *, key: str = PLACEHOLDER,
              extra: str = "", body: bytes = b'{"model":"m","max_tokens":1,"messages":[]}'
              ) -> tuple[str, bytes]:
    head = (f"POST {path} HTTP/1.1\nHost: 127.0.0.1:3128\nx-api-key: {key}\n"
            f"content-type: application/json\ncontent-length: {len(body)}\n{extra}")
    return head, body


# -- the frame ----------------------------------------------------------------------------


@pytest.mark.parametrize(("target", "reason"), [
    ("/_link/model/anthropic/v1/messages", MODEL_OFF),
    ("/_link/Model/anthropic/v1/messages", NO_SUCH_VERB),
    ("/_link/%6dodel/anthropic/v1/messages", NO_SUCH_VERB),
    ("/_link//model/anthropic/v1/messages", NO_SUCH_VERB),
    ("/_link/../model/anthropic/v1/messages", NO_SUCH_VERB),
    ("/_link/open/x", NO_SUCH_VERB),
    ("/_link", "/_link/ holds the verbs: model, s, secret"),
    ("/_link/secret/telegram/bot1/getMe",
     "the secret verb is off in this sandbox: [verbs] secrets = [\"NAME\"] (secrets of "
     "Link's store, each with its rule) turns it on"),
    ("http://127.0.0.1:3128/_link/model/anthropic/v1/messages", MODEL_OFF),
    ("http://localhost:3128/_link/x", NO_SUCH_VERB),
])
def test_a_verb_not_named_or_unknown_is_404_naming_the_key(
    start_proxy: StartProxy, target: str, reason: str
) -> None:
    proxy = start_proxy()
    # The program is told the shape of what it sent (asked_line, pinned below); the log
    # keeps the reason alone.
    got = asked_line(b"GET", target.encode()).removeprefix("GET ")
    assert proxy.ask(f"GET {target} HTTP/1.1\nHost: 127.0.0.1:3128\n") == (
        "HTTP/1.1 404 Not Found", f"{reason}; got GET {got}")
    assert f"refused\t-\treason={reason}\n" in proxy.log()
    assert "/_link" not in proxy.log().replace("/_link/ holds", "")


@pytest.mark.parametrize(("path", "status", "reason"), [
    ("/_link/model/gemini/v1beta/models", "404",
     "gemini is not among this sandbox's model providers ([verbs] model names them)"),
    ("/_link/model/Anthropic/v1/messages", "404",
     "unknown model provider (known: anthropic, gemini, openai, openrouter; names are "
     "lowercase)"),
    ("/_link/model/anthropic", "404",
     "the model verb's path is /_link/model/<provider>/<the provider's own path>"),
    ("/_link/model/anthropic/v1/../v1/messages", "404",
     "a '.' or '..' segment in a model path is refused"),
    ("/_link/model/anthropic/v1/%2e%2e/messages", "404",
     "an encoded model path is refused (no '%' is decoded)"),
    ("/_link/model/anthropic//v1/messages", "404",
     "an empty segment ('//') in a model path is refused"),
    ("/_link/model/anthropic/v1/files", "404",
     "the Files API is refused (stores data at the provider, outside the sandbox); the "
     "model verb passes only anthropic's inference calls"),
    ("/_link/model/openai/v1/fine_tuning/jobs", "404",
     "fine-tuning is refused (trains on uploaded data); the model verb passes only "
     "openai's inference calls"),
    ("/_link/model/anthropic/v1/messages/batches", "404",
     "batches are refused (run later, outside this call and its rules); the model verb "
     "passes only anthropic's inference calls"),
])
def test_model_paths_that_are_not_inference_calls_are_refused(
    start_proxy: StartProxy, path: str, status: str, reason: str
) -> None:
    proxy = start_proxy("--model", "anthropic", "--model", "openai")
    head, body = _messages(path)
    answer = proxy.ask(head, body)
    assert answer[0].split()[1] == status and answer[1].startswith(
        f"{reason}; got {asked_line(b'POST', path.encode())}"), answer
    assert path not in proxy.log()


@pytest.mark.parametrize(("credentials", "reason"), [
    ("x-api-key: sk-ant-guess\n", "the call carried a key that is not this sandbox's "
                                  "placeholder"),
    ("", "the call carried no key; use the placeholder key this sandbox was given"),
    (f"x-api-key: {PLACEHOLDER}\nauthorization: Bearer sk-ant-other\n",
     "the call carried a key that is not this sandbox's placeholder"),
    (f"x-api-key: {PLACEHOLDER}\napi-key: sk-azure\n",
     "the call carried a key that is not this sandbox's placeholder"),
    (f"x-api-key: {PLACEHOLDER}\nx-goog-api-key: AIza-other\n",
     "the call carried a key that is not this sandbox's placeholder"),
    (f"x_api_key: {PLACEHOLDER}x\n",
     "the call carried a key that is not this sandbox's placeholder"),
    ("authorization: Basic dXNlcjpwYXNz\n",
     "the call carried a key that is not this sandbox's placeholder"),
    (f"x-api-key: {PLACEHOLDER.upper()}\n",
     "the call carried a key that is not this sandbox's placeholder"),
])
def test_a_call_without_the_placeholder_alone_is_refused_401(
    start_proxy: StartProxy, credentials: str, reason: str
) -> None:
    proxy = start_proxy("--model", "anthropic")
    body = b'{"model":"m","max_tokens":1,"messages":[]}'
    head = (f"POST /_link/model/anthropic/v1/messages HTTP/1.1\nHost: x\n{credentials}"
            f"content-length: {len(body)}\n")
    assert proxy.ask(head, body) == ("HTTP/1.1 401 Unauthorized", reason)
    assert "sk-ant" not in proxy.log() and PLACEHOLDER not in proxy.log()


def test_a_key_in_the_query_must_be_the_placeholder_and_is_never_logged(
    start_proxy: StartProxy,
) -> None:
    proxy = start_proxy("--model", "gemini")
    target = "/_link/model/gemini/v1beta/models/gemini-x:generateContent?key=AIzaSECRETGUESS"
    body = b'{"contents":[]}'
    head = f"POST {target} HTTP/1.1\nHost: x\ncontent-length: {len(body)}\n"
    assert proxy.ask(head, body) == (
        "HTTP/1.1 401 Unauthorized",
        "the call carried a key that is not this sandbox's placeholder")
    assert "SECRETGUESS" not in proxy.log() and "generateContent" not in proxy.log()
    assert "refused\tgenerativelanguage.googleapis.com:443\treason=" in proxy.log()


def test_an_admitted_call_with_no_key_set_says_which_secret_and_is_not_counted(
    start_proxy: StartProxy,
) -> None:
    proxy = start_proxy("--model", "anthropic", "--pause", "1,1,60")
    answer = proxy.ask(*_messages())
    assert answer == ("HTTP/1.1 403 Forbidden",
                      "no usable key for anthropic: no secret named anthropic (set it with: "
                      "lnk-sandbox secret set anthropic)")
    # Not the program's doing: a pause at one refusal did not trip.
    assert wirestate.paused(str(proxy.settings), WIRE) is None


def test_bodies_the_verb_cannot_read_are_refused_before_being_read(
    start_proxy: StartProxy,
) -> None:
    proxy = start_proxy("--model", "anthropic")
    head, _ = _messages(body=b"")
    huge = head.replace("content-length: 0", f"content-length: {33 * 1024 * 1024}")
    assert proxy.ask(huge) == ("HTTP/1.1 413 Content Too Large",
                               "the body is over 32 MiB (the verb's limit)")
    head, body = _messages(extra="content-encoding: gzip\n")
    assert proxy.ask(head, body) == (
        "HTTP/1.1 415 Unsupported Media Type",
        "a compressed request body cannot be checked; send it uncompressed")
    head, body = _messages(body=b'{"model": "m", "messages": [')
    assert proxy.ask(head, body) == ("HTTP/1.1 400 Bad Request",
                                     "the body is not JSON (UTF-8)")


def test_a_search_model_is_refused_by_name(start_proxy: StartProxy) -> None:
    proxy = start_proxy("--model", "openai")
    body = b'{"model":"gpt-4o-search-preview","messages":[]}'
    head = (f"POST /_link/model/openai/v1/chat/completions HTTP/1.1\nHost: x\n"
            f"authorization: Bearer {PLACEHOLDER}\ncontent-length: {len(body)}\n")
    status, reason = proxy.ask(head, body)
    assert status == "HTTP/1.1 400 Bad Request" and "search" in reason, reason
    assert "gpt-4o" not in proxy.log()


# -- the gate: a verb call is a call ------------------------------------------------------


def test_the_kill_switch_and_a_pause_refuse_verb_calls(start_proxy: StartProxy) -> None:
    proxy = start_proxy("--model", "anthropic")
    wirestate.stop(str(proxy.settings))
    status, reason = proxy.ask(*_messages())
    assert status == "HTTP/1.1 403 Forbidden" and reason.startswith("the kill switch is on")
    wirestate.clear_stop(str(proxy.settings))
    wirestate.pause(str(proxy.settings), WIRE, "a test")
    status, reason = proxy.ask(*_messages())
    assert status == "HTTP/1.1 403 Forbidden" and f"this wire ({WIRE}) is paused" in reason


def test_calls_a_minute_count_verb_calls(start_proxy: StartProxy) -> None:
    proxy = start_proxy("--model", "anthropic", "--calls-per-minute", "2")
    for _ in range(2):
        assert proxy.ask(*_messages())[0] == "HTTP/1.1 403 Forbidden"
    status, reason = proxy.ask(*_messages())
    assert status == "HTTP/1.1 429 Too Many Requests"
    assert reason.startswith("more than 2 calls in a minute on this wire")


def test_verb_refusals_count_toward_a_pause(start_proxy: StartProxy) -> None:
    proxy = start_proxy("--model", "anthropic", "--pause", "3,100,60")
    for _ in range(3):
        assert proxy.ask(*_messages(key="sk-ant-guess"))[0] == "HTTP/1.1 401 Unauthorized"
    assert wirestate.paused(str(proxy.settings), WIRE) is not None
    status, reason = proxy.ask(*_messages())
    assert status == "HTTP/1.1 403 Forbidden" and "is paused" in reason


def test_the_log_keeps_no_path_query_key_or_body_of_a_verb_call(
    start_proxy: StartProxy,
) -> None:
    proxy = start_proxy("--model", "anthropic")
    _set_secret(proxy.settings, "anthropic", b"sk-ant-REALKEY-frame")
    for key in (PLACEHOLDER, "sk-ant-GUESSKEY"):
        proxy.ask(*_messages("/_link/model/anthropic/v1/messages?beta=true", key=key,
                             body=b'{"model":"claude-SECRETMODEL","messages":[]}'))
    log = proxy.log()
    for text in ("REALKEY", "GUESSKEY", PLACEHOLDER, "/v1/messages", "beta=true",
                 "SECRETMODEL", "_link"):
        assert text not in log, (text, log)
    assert "api.anthropic.com:443" in log


def test_the_proxy_will_not_start_a_model_verb_without_a_placeholder(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "LNK_PLACEHOLDER"}
    for options, said in (
        (["--model", "anthropic"], "--model needs the sandbox's placeholder in "
                                   "LNK_PLACEHOLDER"),
        (["--model", "claude"], "--model 'claude': one of anthropic, openai, gemini, openrouter"),
        (["--model", "openai", "--model", "openai"], "--model names a provider twice"),
        (["--server-tools", "--server-tools"], "--server-tools given twice"),
        (["--server-tools", "no"], "unknown option 'no'"),
    ):
        result = subprocess.run(
            [PROXY, "--settings", str(tmp_path), "--wire", WIRE, *options, "--listen",
             "127.0.0.1:1"], env=env, capture_output=True, text=True, timeout=20,
            check=False)
        assert (result.returncode, result.stderr) == (2, f"lnk-sandbox-proxy: {said}\n")


def test_the_proxy_takes_dns_later_only_from_the_launcher_s_sockets(tmp_path: Path) -> None:
    """`--dns later` (the sandbox's resolv.conf names 127.0.0.1, where the proxy serves
    DNS once an endpoint is added) needs the sockets made inside: never with --listen,
    whose socket is this machine's (joining its network would bind this machine's
    port 53), and no other value."""
    said = ("--dns takes `later`, once, with --socket-fd (the sandbox's resolv.conf names "
            "127.0.0.1, where this proxy serves DNS once an endpoint is added)")
    for options in (["--dns", "later"], ["--dns", "now"], ["--dns", "later", "--dns", "later"]):
        result = subprocess.run(
            [PROXY, "--settings", str(tmp_path), "--wire", WIRE, *options, "--listen",
             "127.0.0.1:1"], capture_output=True, text=True, timeout=20, check=False)
        assert (result.returncode, result.stderr) == (2, f"lnk-sandbox-proxy: {said}\n")


# -- the splitter, fuzzed -----------------------------------------------------------------


def test_split_verb_table() -> None:
    on = frozenset({"model"})
    assert split_verb("/_link/model/anthropic/v1/messages", on) == (
        "model", "/anthropic/v1/messages")
    assert split_verb("/_link/model", on) == ("model", "")
    assert split_verb("/_link/model?x=1", on) == ("model", "?x=1")
    for target in ("/_link/MODEL/x", "/_link/model%2f/x", "/_link/ model/x", "/_link/"):
        with pytest.raises(VerbError):
            split_verb(target, on)
    assert is_verb_target("/_link") and is_verb_target("/_link/x")
    assert is_verb_target("/_link?x") and not is_verb_target("/_linkx")


@given(st.text(alphabet=st.sampled_from("/_linkmode%?.aA2F"), max_size=30),
       st.sets(st.sampled_from(sorted(VERBS))))
def test_split_verb_answers_only_an_enabled_verb_by_its_exact_name(
    tail: str, enabled: set[str]
) -> None:
    target = "/_link" + tail
    try:
        verb, rest = split_verb(target, frozenset(enabled))
    except VerbError as error:
        # One of three fixed lines: none quotes the target (a verb's path may carry a
        # secret).
        assert error.status == 404 and (
            error.reason in (NO_SUCH_VERB, "/_link/ holds the verbs: model, s, secret")
            or error.reason.split(" verb is off in this sandbox: ")[1] in VERBS.values())
        return
    assert verb in enabled
    assert target in (f"/_link/{verb}{rest}", f"/_link/{verb}/{rest}")
    assert target.startswith(f"/_link/{verb}") and target[len(f"/_link/{verb}"):][:1] in (
        "", "/", "?")


# -- URL secrets: /_link/s/<secret>/<part>/… ----------------------------------------------

URL_SECRET_VALUE = "f" * 43


def test_a_url_secret_differing_in_any_one_byte_gets_the_same_refusal() -> None:
    secret = URL_SECRET_VALUE.encode()
    on = frozenset({"local"})
    assert split_url_secret(f"/{URL_SECRET_VALUE}/local/11434/api/chat", secret, on) == (
        "local", "/11434/api/chat")
    wrong = {URL_SECRET_VALUE[:at] + "e" + URL_SECRET_VALUE[at + 1:]
             for at in range(len(URL_SECRET_VALUE))}
    wrong |= {URL_SECRET_VALUE[:-1], URL_SECRET_VALUE + "f", "", URL_SECRET_VALUE.upper(),
              "%66" + URL_SECRET_VALUE[1:]}
    for other in wrong:
        with pytest.raises(VerbError) as raised:
            split_url_secret(f"/{other}/local/11434/api/chat", secret, on)
        assert (raised.value.status, raised.value.reason) == (
            403, "the URL secret is not this sandbox's")


def test_url_secret_parts_and_local_ports() -> None:
    secret = URL_SECRET_VALUE.encode()
    with pytest.raises(VerbError, match="mcp is off in this sandbox: \\[verbs\\] tools"):
        split_url_secret(f"/{URL_SECRET_VALUE}/mcp/github", secret, frozenset({"local"}))
    with pytest.raises(VerbError, match="the URL secret's path is"):
        split_url_secret(f"/{URL_SECRET_VALUE}/Local/1/x", secret, frozenset({"local"}))
    with pytest.raises(VerbError, match="not this sandbox's"):  # no secret set: none passes
        split_url_secret("//local/1/x", b"", frozenset({"local"}))
    assert split_local("/11434/api/chat?x=1", frozenset({11434})) == (11434, "/api/chat?x=1")
    for rest in ("/011434/api/chat", "/+11434/x", "/11434", "/65536/x", "/0/x", "/١١٤٣٤/x",
                 "/11434%2f/x", "//11434/x"):
        with pytest.raises(VerbError, match="the local form is"):
            split_local(rest, frozenset({11434}))
    with pytest.raises(VerbError, match="port 8080 is not among this sandbox's"):
        split_local("/8080/api/chat", frozenset({11434}))


@given(st.text(max_size=60))
def test_only_the_exact_url_secret_passes(given_secret: str) -> None:
    secret = URL_SECRET_VALUE.encode()
    try:
        split_url_secret(f"/{given_secret}/local/1/x", secret, frozenset({"local"}))
    except VerbError as error:
        assert given_secret != URL_SECRET_VALUE or error.status == 404
        # One of the fixed lines, never what was given.
        assert error.reason in ("the URL secret is not this sandbox's",
                                "the URL secret's path is /_link/s/<secret>/<local|mcp|open>/…")
        return
    assert given_secret == URL_SECRET_VALUE


# -- answers an SDK stops on (issue 28, item 3) -------------------------------------------


def _fields(proxy: RunningProxy, head: str, body: bytes = b"") -> tuple[str, dict[str, str]]:
    """(status line, the response's header fields by lowercase name) for a raw request."""
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = conn.recv(65536)
            if not chunk:
                break
            answer += chunk
    status, _, rest = answer.partition(b"\r\n")
    lines = rest.partition(b"\r\n\r\n")[0].decode().split("\r\n")
    return status.decode(), {name.lower(): value.strip() for name, _, value in
                             (line.partition(":") for line in lines)}


def test_a_refusal_no_retry_changes_says_so_and_a_limit_of_the_moment_does_not(
    start_proxy: StartProxy,
) -> None:
    """A key not set yet (403), a refused path (404), a made-up key (401) and a pause
    (403) carry `x-should-retry: false`, which the Anthropic and OpenAI SDKs read before
    the status; the calls a minute's 429 carries Retry-After and no such field."""
    proxy = start_proxy("--model", "anthropic", "--calls-per-minute", "4")
    for head, body, status in [
        (*_messages(), "403"),
        (*_messages("/_link/model/anthropic/messages"), "404"),
        (*_messages(key="sk-ant-guess"), "401"),
    ]:
        line, fields = _fields(proxy, head, body)
        assert line.split()[1] == status and fields.get("x-should-retry") == "false", fields
    for _ in range(2):
        _fields(proxy, *_messages())
    line, fields = _fields(proxy, *_messages())
    assert line == "HTTP/1.1 429 Too Many Requests", line
    assert "x-should-retry" not in fields and int(fields["retry-after"]) >= 1, fields


def test_the_sdks_stop_at_once_on_a_key_not_set(start_proxy: StartProxy) -> None:
    """The real Anthropic and OpenAI SDKs, with their default retries (2), call once and
    raise: no key set is no reason to try again (a 503 was retried, and Claude Code sat
    silent for minutes). Counted on the wire's log: one refusal a client."""
    import anthropic
    import openai

    proxy = start_proxy("--model", "anthropic", "--model", "openai")
    base = f"http://127.0.0.1:{proxy.port}/_link/model"
    with pytest.raises(anthropic.PermissionDeniedError) as caught:
        anthropic.Anthropic(base_url=f"{base}/anthropic", api_key=PLACEHOLDER).messages.create(
            model="claude-x", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    assert "no usable key for anthropic" in str(caught.value)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        openai.OpenAI(base_url=f"{base}/openai/v1", api_key=PLACEHOLDER).chat.completions.create(
            model="gpt-x", messages=[{"role": "user", "content": "hi"}])
    assert "no usable key for openai" in str(refused.value)
    assert proxy.log().count("\trefused\t") == 2, proxy.log()


def test_a_refused_path_tells_the_program_what_it_sent_and_the_shape(
    start_proxy: StartProxy,
) -> None:
    """An SDK whose base URL lacks /v1 (opencode's) learns the method and path it sent
    and one call that would go; the log keeps neither path."""
    proxy = start_proxy("--model", "anthropic")
    status, reason = proxy.ask(*_messages("/_link/model/anthropic/messages"))
    assert status == "HTTP/1.1 404 Not Found"
    assert reason == ("not one of anthropic's inference calls (method and path compared "
                      "exactly, case included); got POST /_link/model/anthropic/messages "
                      "(one that goes: POST /_link/model/anthropic/v1/messages)")
    assert "messages" not in proxy.log() and "_link" not in proxy.log()


@pytest.mark.parametrize(("target", "shown"), [
    (b"/_link/s/SECRETVALUE/mcp/x", "GET /_link/s/…/mcp/…"),
    (b"/_link/s/SECRETVALUE", "GET /_link/s/…"),
    (b"http://127.0.0.1:3128/_link/model/x?key=AIzaKEY", "GET /_link/model/…?…"),
    (b"/_link/model/gemini/x", "GET /_link/model/gemini/… (one that goes: POST "
                               "/_link/model/gemini/v1beta/models/<model>:generateContent)"),
    (b"/_link/model/openai/chat/completions", "GET /_link/model/openai/chat/completions "
     "(one that goes: POST /_link/model/openai/v1/chat/completions)"),
    (b"/_link/model/anthropic/v1//messages", "GET /_link/model/anthropic/v1//messages "
     "(one that goes: POST /_link/model/anthropic/v1/messages)"),
    (b"/_link/model/anthropic/v1/../v1/messages", "GET /_link/model/anthropic/v1/../v1/"
     "messages (one that goes: POST /_link/model/anthropic/v1/messages)"),
    (b"/_link/local/11434/api/tags", "GET /_link/local/…/api/tags"),
    (b"/_link/\xff\x00 /x", "GET /_link/…/…"),
    (b"/_link/MARKc0ffee/v1/messages", "GET /_link/…/v1/messages"),
    (b"/_link/" + b"v1/" * 100, "GET " + ("/_link/" + "v1/" * 100)[:160] + "…"),
])
def test_what_a_404_shows_of_the_path_never_a_secret_or_a_query(
    target: bytes, shown: str
) -> None:
    from lnk_proxy.verbs import asked_line

    assert asked_line(b"GET", target) == shown


@fuzz(2)
@given(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=6),
       st.binary(max_size=8))
def test_a_404_shows_no_segment_the_program_chose(segments: list[bytes], method: bytes) -> None:
    """Whatever bytes the path holds, the line shows only the verbs' and routes' own words,
    `…`, `/` and the method if it is a word: no byte the program chose reaches it."""
    from lnk_proxy.verbs import asked_line, path_words

    line = asked_line(method, b"/_link/model/" + b"/".join(segments) + b"?q=1")
    shown = line.split(" (one that goes: ")[0]
    verb, _, path = shown.partition(" ")
    assert verb == "…" or (verb.isalpha() and verb.encode() == method)
    for part in path.removesuffix("?…").split("/"):
        assert part in path_words() or part in ("", "…") or part.endswith("…"), line
