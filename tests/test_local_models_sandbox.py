"""The local model's inference filter and URL secrets inside real sandboxes.

Every test runs `lnk-sandbox run` with `[localhost] models = [PORT]` and the venv readable
(so the `ollama` client and the `openai` SDK import), against the fake runtime of
tests/test_local_models.py on this machine's 127.0.0.1, which records what reached it. A
program reaches the runtime in the two forms a harness is given: the relayed port
(`http://localhost:PORT`, the relay's inference filter) and the proxy's
(`$LNK_SANDBOX_URL/local/PORT`, the same filter behind the URL secret). What is shown, in
both: chat, listings and embeddings work; a stream reaches the program piece by piece (the
runtime sends its next piece only once the test has read the last one from the program's
output: a stream held whole anywhere stalls); each refused path of
../shared/acceptance/secrets-local, the `ollama` client's own admin calls and the cloud
models are refused with their reason and never reach the runtime; the wire's log keeps
`localhost:PORT` or `local:PORT` and never a path, a model or a body. With `[network]
mode = "proxy"` too, where every HTTP client is told of the proxy and `localhost` must not
be sent to it.

URL secrets: a wrong one, another agent's, the last run's, and one differing in a single
byte at every position (each position twice) all get the one same refusal; guessing pauses
the wire; the secret is never in the log, a refusal body, the argv of any process of the
run, or the settings folder of a plain run; an agent's is kept (0600) across runs, a plain
spec's changes; the caller's own variables of ours never reach the program as given.

No test network: the runtime and the sandbox's wire are on this machine's loopback.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lnk_proxy.local_models import refusal_body
from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    VENV,
    VENV_PYTHON,
    WriteSpec,
    end_run,
    run_out_script,
    toml_list,
    wire_log_of,
)
from tests.test_local_models import (
    ACCEPTANCE_REFUSED,
    CASE_VARIANTS,
    CLOUD,
    TOKENS,
    FakeRuntime,
)

WIRE = "localsb"
FORMS = ("relay", "proxy")
# Names of our own, so the log can be searched for them.
MODEL = "lnkmodel7b"
CLOUD_MODELS = ("gpt-oss:120b-cloud", "lnkmodel:cloud", "lnkmodel:7B-CLOUD")
URL_SECRET = re.compile(r"/_link/s/([0-9a-f]{64})$")
WRONG_SECRET = "the URL secret is not this sandbox's"  # noqa: S105  (a refusal)
# Many refusals in one run are the point of these tests; the pause has its own test.
NO_PAUSE = "[pause]\nrefusals = 1000000\ntargets = 1000000\n"

# Run first in every script inside: BASE is the runtime's base in the form asked for.
PRELUDE = r'''
import http.client, json, os, sys, urllib.parse
FORM, PORT = sys.argv[1], int(sys.argv[2])
SANDBOX_URL = os.environ.get("LNK_SANDBOX_URL", "")
if FORM == "relay":
    BASE = f"http://localhost:{PORT}"
else:
    BASE = f"{SANDBOX_URL}/local/{PORT}"
PREFIX = urllib.parse.urlsplit(BASE).path  # what goes before the runtime's own path
out = {}

def ask(method, path, body=b"", whole=False):
    """(status, body text) of one request sent as it is written (http.client neither
    decodes nor normalises a path)."""
    where = urllib.parse.urlsplit(BASE)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=20)
    conn.request(method, path if whole else PREFIX + path, body=body,
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    answer = [response.status, response.read().decode("utf-8", "replace")]
    conn.close()
    return answer

def refused(call):
    try:
        call()
    except Exception as error:
        return [getattr(error, "status_code", None), str(error)]
    return [200, "not refused"]
'''


@pytest.fixture
def runtime() -> Iterator[FakeRuntime]:
    served = FakeRuntime()
    threading.Thread(target=served.serve_forever, daemon=True).start()
    yield served
    served.shutdown()
    served.server_close()


def models_spec(write_spec: WriteSpec, tmp_path: Path, port: int, *, extra: str = "",
                proxy_mode: bool = False) -> Path:
    network = '[network]\nmode = "proxy"\nhosts = ["example.com"]\n' if proxy_mode else ""
    return write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(tmp_path, VENV)}\n'
                      f"{network}[localhost]\nmodels = [{port}]\n{extra}")


def run_script(spec: Path, env: dict[str, str], tmp_path: Path, body: str,
               *args: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """PRELUDE + body run by the venv's Python inside; its `out` and the completed run."""
    out, done = run_out_script(spec, env, tmp_path, PRELUDE + body, *args)
    assert isinstance(out, dict), done
    return out, done

def wire_log(env: dict[str, str]) -> str:
    return wire_log_of(env, WIRE)


def reason_of(body: str) -> str:
    """The refusal's one line, from the JSON every SDK reads (`error.message`): the relay's
    refusals and the proxy's are one body (local_models.refusal_body)."""
    return str(json.loads(body)["error"]["message"])


def refusals_logged(log: str) -> int:
    """Refusals on the log, a folded line (`refused * more=N … and N more like this`, the
    log's bound on repeated lines) counted as the N it stands for."""
    count = 0
    for line in log.splitlines():
        fields = line.split("\t")
        if fields[1] == "refused":
            more = re.match(r"more=([0-9]+) ", fields[3])
            count += int(more.group(1)) if more else 1
    return count


def assert_log_keeps_only_the_target(log: str, port: int, form: str) -> None:
    target = f"localhost:{port}" if form == "relay" else f"local:{port}"
    lines = log.splitlines()
    assert any(line.split("\t")[2] == target for line in lines), log
    for line in lines:
        assert line.split("\t")[2] in (target, "-", "*"), line  # "*": a folded line
    for word in ("/api", "/v1", "/admin", MODEL, "gpt-oss", "lnkmodel", "messages", '"', "{"):
        assert word not in log, (word, log)
    assert not re.search(r"[0-9a-f]{64}", log), log  # no URL secret


# -- the clients, by both forms --------------------------------------------------------------

CLIENTS = r'''
import ollama, openai
chat = [{"role": "user", "content": "hi"}]
llama = ollama.Client(host=BASE)
out["tags"] = [model.model for model in llama.list().models]
out["chat"] = llama.chat(model=MODEL, messages=chat, stream=False).message.content
out["embed"] = llama.embed(model=MODEL, input="hi").embeddings
gpt = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0)
out["models"] = [model.id for model in gpt.models.list().data]
out["completion"] = gpt.chat.completions.create(model=MODEL, messages=chat
                                                ).choices[0].message.content
'''


@pytest.mark.parametrize("proxy_mode", [False, True], ids=["no-network", "network-proxy"])
@pytest.mark.parametrize("form", FORMS)
def test_the_clients_chat_list_and_embed_by_both_forms(
        form: str, proxy_mode: bool, runtime: FakeRuntime, write_spec: WriteSpec,
        sandbox_env: dict[str, str], tmp_path: Path) -> None:
    """With `[network] mode = "proxy"` the program's HTTP clients are told of the proxy:
    `localhost` and the proxy's own address are still reached directly (NO_PROXY), not
    sent to the proxy as a host it refuses."""
    spec = models_spec(write_spec, tmp_path, runtime.port, proxy_mode=proxy_mode)
    out, _ = run_script(spec, sandbox_env, tmp_path, f"MODEL = {MODEL!r}\n" + CLIENTS,
                        form, str(runtime.port))
    assert out == {"tags": ["llama3:latest"], "chat": "hi", "embed": [[0.1, 0.2]],
                   "models": ["llama3"], "completion": "hi"}
    assert runtime.paths() == ["GET /api/tags", "POST /api/chat", "POST /api/embed",
                               "GET /v1/models", "POST /v1/chat/completions"]
    for seen in runtime.seen:
        # The runtime sees its own name and our JSON, never the proxy's path or secret.
        assert seen["headers"]["host"] == f"localhost:{runtime.port}", seen
        assert "_link" not in json.dumps(seen["headers"]) + seen["path"], seen
    assert_log_keeps_only_the_target(wire_log(sandbox_env), runtime.port, form)


STREAM = r'''
import ollama, openai
chat = [{"role": "user", "content": "hi"}]
if CLIENT == "ollama":
    for part in ollama.Client(host=BASE).chat(model=MODEL, messages=chat, stream=True):
        print("chunk", json.dumps(part.message.content), flush=True)
else:
    gpt = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0)
    for part in gpt.chat.completions.create(model=MODEL, messages=chat, stream=True):
        print("chunk", json.dumps(part.choices[0].delta.content), flush=True)
'''


@pytest.mark.parametrize("client", ["ollama", "openai"])
@pytest.mark.parametrize("form", FORMS)
def test_a_stream_reaches_the_program_token_by_token(
        form: str, client: str, runtime: FakeRuntime, write_spec: WriteSpec,
        sandbox_env: dict[str, str], tmp_path: Path) -> None:
    """The runtime sends each piece only once the program inside has printed the last
    (this test reads its output and tells the runtime): every piece arrives while the
    runtime is still sending; one held anywhere on the way stalls the stream."""
    runtime.gated = True
    spec = models_spec(write_spec, tmp_path, runtime.port)
    script = tmp_path / "stream.py"
    script.write_text(PRELUDE + f"MODEL = {MODEL!r}\nCLIENT = {client!r}\n" + STREAM)
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON,
                            str(script), form, str(runtime.port)], cwd=str(tmp_path),
                           env=sandbox_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    got = []
    try:
        assert run.stdout is not None
        for line in run.stdout:
            if line.startswith("chunk "):
                got.append(json.loads(line[6:]))
                runtime.arrived.release()
        assert run.wait(timeout=SANDBOX_TIMEOUT_SECONDS) == 0, run.stderr
    finally:
        end_run(run)
    assert not runtime.stalled, "a piece was held until the next was sent"
    assert got == ([*TOKENS, ""] if client == "ollama" else TOKENS)
    assert_log_keeps_only_the_target(wire_log(sandbox_env), runtime.port, form)


# -- refused: the acceptance script's paths, the client's admin calls, cloud models ----------

REFUSED = r'''
import ollama, openai
out["paths"] = [ask("POST", path, b'{"model": "%s"}' % MODEL.encode()) for path in PATHS]
llama = ollama.Client(host=BASE)
chat = [{"role": "user", "content": "hi"}]
out["admin"] = {
    "pull": refused(lambda: llama.pull(MODEL)),
    "delete": refused(lambda: llama.delete(MODEL)),
    "copy": refused(lambda: llama.copy(MODEL, MODEL + "b")),
    "push": refused(lambda: llama.push(MODEL)),
    "create": refused(lambda: llama.create(model=MODEL + "c", from_=MODEL)),
}
gpt = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0)
out["cloud"] = [[refused(lambda: llama.chat(model=name, messages=chat, stream=False)),
                 refused(lambda: gpt.chat.completions.create(model=name, messages=chat))]
                for name in CLOUD_MODELS]
'''

ADMIN_REASONS = {
    "pull": "pulling a model is refused (Ollama downloads it from a registry: outward)",
    "delete": "deleting a model is refused (admin)",
    "copy": "copying a model is refused (admin: writes models)",
    "push": "pushing a model is refused (Ollama uploads it to a registry: outward)",
    "create": "creating a model is refused (admin: writes models, and a model can point at "
              "a remote host)",
}


@pytest.mark.parametrize("form", FORMS)
def test_each_refused_path_and_cloud_model_says_why_and_never_reaches_the_runtime(
        form: str, runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    spec = models_spec(write_spec, tmp_path, runtime.port, extra=NO_PAUSE)
    paths = [path for path, _, _ in ACCEPTANCE_REFUSED]
    out, _ = run_script(spec, sandbox_env, tmp_path,
                        f"MODEL = {MODEL!r}\nPATHS = {paths!r}\nCLOUD_MODELS = "
                        f"{list(CLOUD_MODELS)!r}\n" + REFUSED, form, str(runtime.port))
    assert runtime.seen == [], runtime.paths()
    for (path, status, reason), (got_status, body) in zip(ACCEPTANCE_REFUSED, out["paths"],
                                                          strict=True):
        assert (got_status, reason_of(body)) == (status, reason), path
        assert body.encode() == refusal_body(status, reason), path
    for call, (status, text) in out["admin"].items():
        assert status in (403, 405), (call, status, text)
        assert ADMIN_REASONS[call] in text, (call, text)
    for name, answers in zip(CLOUD_MODELS, out["cloud"], strict=True):
        for status, text in answers:
            assert status == 403 and CLOUD in text, (name, status, text)
    log = wire_log(sandbox_env)
    assert_log_keeps_only_the_target(log, runtime.port, form)
    assert refusals_logged(log) == len(ACCEPTANCE_REFUSED) + len(ADMIN_REASONS) + 2 * len(
        CLOUD_MODELS), log


LARGE = r'''
# Python's http.client sends the whole body before it reads a byte of the answer.
out["answers"] = [ask("POST", "/api/pull", b'{"model": "' + b"a" * (8 << 20) + b'"}')
                  for _ in range(3)]
'''


@pytest.mark.parametrize("form", FORMS)
def test_a_large_body_to_a_refused_path_gets_its_refusal_not_a_reset(
        form: str, runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    """Refused from its head, the body unread: the relay, and the proxy after a verb's
    refusal, read and drop what still comes (for a while) before they close. The proxy
    did not: http.client saw "connection reset" instead of its 403."""
    spec = models_spec(write_spec, tmp_path, runtime.port)
    out, _ = run_script(spec, sandbox_env, tmp_path, LARGE, form, str(runtime.port))
    reason = ADMIN_REASONS["pull"]
    assert out["answers"] == 3 * [[403, refusal_body(403, reason).decode()]]
    assert runtime.seen == []


GONE = r'''
import socket
where = urllib.parse.urlsplit(BASE)
conn = socket.create_connection((where.hostname, where.port), timeout=20)
body = b'{"model": "hold", "prompt": "x"}'
conn.sendall(b"POST %s/api/generate HTTP/1.1\r\nHost: %s\r\n"
             b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
             % (PREFIX.encode(), where.netloc.encode(), len(body), body))
print("sent", flush=True)
sys.stdin.readline()  # until the test has seen the runtime get it; then the program ends
'''


@pytest.mark.parametrize("form", FORMS)
def test_a_program_that_goes_away_ends_the_runtimes_call(
        form: str, runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    """A runtime thinking for a program that has gone is closed at once (its work and
    socket not held for nobody), by the relay and by the proxy."""
    spec = models_spec(write_spec, tmp_path, runtime.port)
    script = tmp_path / "gone.py"
    script.write_text(PRELUDE + GONE)
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON,
                            str(script), form, str(runtime.port)], cwd=str(tmp_path),
                           env=sandbox_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdin is not None and run.stdout is not None
        assert run.stdout.readline() == "sent\n"
        deadline = time.monotonic() + 20
        while not runtime.seen and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runtime.paths() == ["POST /api/generate"]
        assert not runtime.client_closed.is_set()
        run.stdin.write("\n")
        run.stdin.flush()
        assert run.wait(timeout=SANDBOX_TIMEOUT_SECONDS) == 0
        assert runtime.client_closed.wait(20)  # the runtime's socket closed for it
    finally:
        end_run(run)
    ended = [line for line in wire_log(sandbox_env).splitlines() if "\tended\t" in line]
    assert len(ended) == 1 and "error=" in ended[0], ended


PROXY_PREFIX = r'''
secret = SANDBOX_URL.rsplit("/", 1)[1]
base = f"/_link/s/{secret}"
out["answers"] = [ask("GET", base + tail, whole=True) for tail in TAILS]
'''


def test_the_proxy_forms_own_prefix_is_read_exactly(
        runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    """What stands between the URL secret and the runtime's path: a port not among the
    models, in another spelling, encoded, or with nothing after it; a part that is off; a
    path that climbs back out of `local/<port>`."""
    spec = models_spec(write_spec, tmp_path, runtime.port, extra=NO_PAUSE)
    port = runtime.port
    shape = "the local form is /_link/s/<secret>/local/<port>/<the runtime's own path>"
    tails = [
        (f"/local/{port + 1}/api/tags", 404,
         f"port {port + 1} is not among this sandbox's [localhost] models"),
        (f"/local/0{port}/api/tags", 404, shape),
        (f"/local/+{port}/api/tags", 404, shape),
        (f"/local/%3{str(port)[0]}{str(port)[1:]}/api/tags", 404, shape),
        (f"/local/{port}", 404, shape),
        ("/local/", 404, shape),
        (f"/local/{port}/../{port}/api/tags", 400,
         "a '.' or '..' segment in the path is refused"),
        (f"/local/{port}/%2e%2e/api/pull", 400, "an encoded path is refused (no '%' is "
                                                 "decoded)"),
        ("/mcp/x", 404, None),
        ("/LOCAL/1/api/tags", 404, None),
    ]
    out, _ = run_script(spec, sandbox_env, tmp_path,
                        f"TAILS = {[tail for tail, _, _ in tails]!r}\n" + PROXY_PREFIX,
                        "proxy", str(port))
    assert runtime.seen == []
    for (tail, status, reason), (got_status, body) in zip(tails, out["answers"], strict=True):
        assert got_status == status, (tail, got_status, body)
        if reason is not None:
            # A 404 adds the shape of what was sent ("; got GET /_link/s/…/local/…").
            assert reason_of(body).split("; got ", 1)[0] == reason, (tail, body)
    assert not re.search(r"[0-9a-f]{64}", wire_log(sandbox_env))


# -- URL secrets -------------------------------------------------------------------------------

GUESSES = r'''
import string
secret = SANDBOX_URL.rsplit("/", 1)[1]
hexdigits = "0123456789abcdef"
tail = f"/local/{PORT}/api/tags"
wrong = []
for index, char in enumerate(secret):
    # Each position twice: the next hex digit, and a byte no secret holds.
    wrong.append(secret[:index] + hexdigits[(hexdigits.index(char) + 1) % 16] + secret[index + 1:])
    wrong.append(secret[:index] + "G" + secret[index + 1:])
wrong += ["", secret[:-1], secret + "0", secret.upper(), "0" * 64, OTHER, LAST,
          f"%{ord(secret[0]):02x}" + secret[1:], secret + "%2F"]
out["positions"] = len(secret)
out["right"] = ask("GET", f"/_link/s/{secret}{tail}", whole=True)
answers = []
for guess in wrong:
    where = urllib.parse.urlsplit(SANDBOX_URL)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=20)
    conn.request("GET", f"/_link/s/{guess}{tail}")
    response = conn.getresponse()
    head = sorted((name.lower(), value) for name, value in response.getheaders()
                  if name.lower() != "date")
    answers.append([response.status, head, response.read().decode("utf-8", "replace")])
    conn.close()
# A wrong secret learns nothing of what follows it either.
for other_tail in ("", "/", "/local", "/mcp/x", f"/local/{PORT}/api/pull", "/nothing"):
    answers.append([*ask("GET", f"/_link/s/{secret[:-1]}x{other_tail}", whole=True)])
out["answers"] = answers
out["secret"] = secret
'''


@pytest.fixture
def agent_specs(write_spec: WriteSpec, tmp_path: Path, lnk_home: Path,
                runtime: FakeRuntime) -> dict[str, Path]:
    """Two agents' specs (their folders made, as `lnk agent` would) and a plain one."""
    specs = {}
    for name in ("alpha", "beta"):
        (lnk_home / "agents" / name).mkdir(parents=True)
        specs[name] = write_spec(
            f'name = "{WIRE}"\n[agent]\nname = "{name}"\n[files]\nread = '
            f'{toml_list(tmp_path, VENV)}\n[localhost]\nmodels = [{runtime.port}]\n{NO_PAUSE}')
    specs["plain"] = models_spec(write_spec, tmp_path, runtime.port, extra=NO_PAUSE)
    return specs


def sandbox_url(spec: Path, env: dict[str, str], tmp_path: Path) -> str:
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", "printenv",
                           "LNK_SANDBOX_URL"], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert done.returncode == 0, done
    match = URL_SECRET.search(done.stdout.strip())
    assert match, done.stdout
    assert done.stdout.strip() == f"http://127.0.0.1:3128/_link/s/{match.group(1)}"
    return match.group(1)


def test_every_wrong_url_secret_gets_the_one_same_refusal(
        agent_specs: dict[str, Path], runtime: FakeRuntime, sandbox_env: dict[str, str],
        lnk_home: Path, tmp_path: Path) -> None:
    """In agent alpha's sandbox: all 64 positions, each changed two ways, plus the empty,
    short, long, upper-case and encoded ones, agent beta's, and a plain run's now over: one
    status, one head, one body."""
    other = sandbox_url(agent_specs["beta"], sandbox_env, tmp_path)
    last = sandbox_url(agent_specs["plain"], sandbox_env, tmp_path)  # a run's, now over
    out, done = run_script(agent_specs["alpha"], sandbox_env, tmp_path,
                           f"OTHER = {other!r}\nLAST = {last!r}\n" + GUESSES, "proxy",
                           str(runtime.port))
    secret = out["secret"]
    assert secret not in (other, last)
    assert out["positions"] == 64
    assert out["right"][0] == 200, out["right"]
    first = out["answers"][0]
    assert first[0] == 403 and reason_of(first[2]) == WRONG_SECRET, first
    assert len(out["answers"]) == 2 * 64 + 9 + 6
    for answer in out["answers"][:2 * 64 + 9]:
        assert answer == first, answer
    for status, body in out["answers"][2 * 64 + 9:]:
        assert (status, reason_of(body)) == (403, WRONG_SECRET), body
    for answer in out["answers"]:
        assert secret not in json.dumps(answer)
    assert runtime.paths() == ["GET /api/tags"]  # the right one only
    log = wire_log(sandbox_env)
    assert secret not in log and other not in log and last not in log
    assert refusals_logged(log) == len(out["answers"]), log
    for line in log.splitlines():
        if "\trefused\t" in line:
            assert line.endswith(WRONG_SECRET) and line.split("\t")[2] in "-*", line
    assert secret not in done.stderr


MALFORMED = r'''
import socket
where = urllib.parse.urlsplit(SANDBOX_URL)
secret = where.path.rsplit("/", 1)[1]
base = f"{where.path}/local/{PORT}"
close = "Connection: close\r\n"
heads = [
    f"GET {base}/api/tags HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
    f"GET {base}/api/tags\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
    f"GET {base}/api/tags HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    f"GET {base}/api/tags HTTP/9.9\r\nHost: x\r\n\r\n",
    f"GET {base}/" + "a" * 70000 + " HTTP/1.1\r\nHost: x\r\n\r\n",
    f"GET {base}/api/tags HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
    f"GET http://evil.example{base}/api/tags HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    f"GET {base}/api/tags?{secret} HTTP/1.1\r\nHost: x\r\n{close}\r\n",
    f"GET {base}/api/%{secret} HTTP/1.1\r\nHost: x\r\n{close}\r\n",
    f"GET {base}/api/{secret} HTTP/1.1\r\nHost: x\r\n{close}\r\n",
    f"GET {base}/api/tags HTTP/1.1\r\nHost: {secret}\r\n{close}\r\n",
    f"GET http://127.0.0.1:3128{base}/api/{secret} HTTP/1.1\r\nHost: 127.0.0.1:3128\r\n"
    f"{close}\r\n",
    f"POST {base}/api/chat HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{{\"model\":",
]
answers = []
for head in heads:
    conn = socket.create_connection((where.hostname, where.port), timeout=20)
    conn.sendall(head.encode())
    if head.startswith("POST"):
        conn.shutdown(socket.SHUT_WR)  # a body cut short
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    conn.close()
    answers.append([data.split(b" ")[1].decode(), secret.encode() in data])
out["answers"] = answers
out["secret"] = secret
'''


def test_malformed_calls_that_carry_the_url_secret_never_echo_or_log_it(
        runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    """The secret in the target of heads the proxy refuses before it reads the path (a
    bad header, a control character, two lengths, another version, a head too large,
    another coding, another host), in a query, an encoded path, an unknown path and a
    Host, and a body cut short: no answer and no log line holds it."""
    spec = models_spec(write_spec, tmp_path, runtime.port, extra=NO_PAUSE)
    out, done = run_script(spec, sandbox_env, tmp_path, MALFORMED, "proxy", str(runtime.port))
    statuses = [status for status, _ in out["answers"]]
    assert statuses == ["400", "400", "400", "400", "400", "400", "403", "400", "400", "404",
                        "200", "404", "400"], out
    assert not any(echoed for _, echoed in out["answers"]), out
    assert out["secret"] not in wire_log(sandbox_env) + done.stderr
    # The one call the filter passed reached the runtime with its own name as the Host.
    assert [(seen["path"], seen["headers"]["host"]) for seen in runtime.seen] == [
        ("/api/tags", f"localhost:{runtime.port}")]


def test_an_agents_url_secret_is_kept_and_a_plain_specs_changes(
        agent_specs: dict[str, Path], sandbox_env: dict[str, str], lnk_home: Path,
        tmp_path: Path) -> None:
    first = sandbox_url(agent_specs["alpha"], sandbox_env, tmp_path)
    assert sandbox_url(agent_specs["alpha"], sandbox_env, tmp_path) == first
    kept = lnk_home / "sandbox" / "agents" / "alpha" / "url-secret"
    assert kept.read_text() == first
    assert kept.stat().st_mode & 0o777 == 0o600
    for folder in (kept.parent, kept.parent.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    other = sandbox_url(agent_specs["beta"], sandbox_env, tmp_path)
    assert other != first
    plain = {sandbox_url(agent_specs["plain"], sandbox_env, tmp_path) for _ in range(2)}
    assert len(plain) == 2 and not plain & {first, other}
    # A plain run keeps its secret nowhere in Link's settings; an agent's only in its file.
    for path in lnk_home.rglob("*"):
        if path.is_file():
            held = path.read_bytes()
            assert not any(value.encode() in held for value in plain), path
            assert first.encode() not in held or path == kept, path
    # The agent's sandbox cannot read or change where it is kept.
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(agent_specs["alpha"]), "--",
                           "sh", "-c", f'cat "{kept}" 2>/dev/null && echo READ; '
                                       f'echo 0 > "{kept}" 2>/dev/null && echo WROTE; :'],
                          cwd=str(tmp_path), env=sandbox_env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert done.returncode == 0 and "READ" not in done.stdout and "WROTE" not in done.stdout
    assert kept.read_text() == first


def test_guessing_the_url_secret_pauses_the_wire(
        runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        lnk_home: Path, tmp_path: Path) -> None:
    """At the default pause (30 refusals in a minute) a guesser gets 30 tries, then the
    wire is paused: every call, the right secret's too, is refused."""
    spec = models_spec(write_spec, tmp_path, runtime.port)
    body = r'''
secret = SANDBOX_URL.rsplit("/", 1)[1]
out["guesses"] = [ask("GET", f"/_link/s/{index:064x}/local/{PORT}/api/tags", whole=True)[0]
                  for index in range(40)]
out["right"] = ask("GET", f"/_link/s/{secret}/local/{PORT}/api/tags", whole=True)
'''
    out, _ = run_script(spec, sandbox_env, tmp_path, body, "proxy", str(runtime.port))
    assert out["guesses"][:30] == [403] * 30
    assert out["right"][0] != 200, out["right"]
    assert runtime.seen == []
    assert (lnk_home / "sandbox" / "wires" / WIRE / "paused").exists()


def test_the_url_secret_is_in_no_process_argv_of_the_run(
        runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    """While a sandbox runs: every process whose argv names this test's settings folder
    (the launcher, the proxy, the relay) or runs inside, read from outside as any user of
    the machine can (/proc/PID/cmdline is world-readable)."""
    spec = models_spec(write_spec, tmp_path, runtime.port)
    go = tmp_path / "go"
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", "sh", "-c",
                            f'echo "$LNK_SANDBOX_URL"; while [ ! -e "{go}" ]; do sleep 0.05; '
                            f'done'], cwd=str(tmp_path), env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None
        match = URL_SECRET.search(run.stdout.readline().strip())
        assert match
        secret = match.group(1).encode()
        home = sandbox_env["LNK_HOME"].encode()
        ours = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            assert secret not in argv, argv
            if home in argv:
                ours += 1
        assert ours >= 2, "the proxy and the relay were not found"  # the proxy, the relay
        go.touch()
        assert run.wait(timeout=SANDBOX_TIMEOUT_SECONDS) == 0, run.stderr.read()  # type: ignore[union-attr]
    finally:
        end_run(run)


def test_the_callers_own_variables_of_ours_never_reach_the_program(
        runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    spec = models_spec(write_spec, tmp_path, runtime.port)
    given = "f" * 64
    env = {**sandbox_env, "LNK_SANDBOX_URL": f"http://127.0.0.1:3128/_link/s/{given}",
           "LNK_URL_SECRET": given, "LNK_SECRET_TELEGRAM": "123:given",
           "LNK_SECRET_TELEGRAM_URL": "http://evil.example/", "LNK_SECRET_PLACEHOLDERS":
           "telegram=123:given\n"}
    body = r'''
out["env"] = {name: value for name, value in os.environ.items()
              if name.startswith(("LNK_SECRET", "LNK_URL", "LNK_SANDBOX"))}
secret = SANDBOX_URL.rsplit("/", 1)[1]
out["ours"] = ask("GET", f"/_link/s/{secret}/local/{PORT}/api/tags", whole=True)[0]
out["given"] = ask("GET", f"/_link/s/{GIVEN}/local/{PORT}/api/tags", whole=True)[0]
'''
    out, _ = run_script(spec, env, tmp_path, f"GIVEN = {given!r}\n" + body, "proxy",
                        str(runtime.port))
    assert list(out["env"]) == ["LNK_SANDBOX_URL"], out["env"]
    assert given not in out["env"]["LNK_SANDBOX_URL"]
    assert URL_SECRET.search(out["env"]["LNK_SANDBOX_URL"])
    assert (out["ours"], out["given"]) == (200, 403)


# -- keys as Go reads them (issue 27 item 1), null and keep_alive (item 7) -----------------

CASE_VARIANT_CALLS = r'''
def answer(path, raw):
    try:
        return ask("POST", path, raw.encode())
    except OSError as error:  # a call the fake runtime could not answer: it got there
        return [None, type(error).__name__]

out["answers"] = [answer(path, raw) for path, raw, _ in VARIANTS]
# The same program's allowed call, with what the runtime must not be told.
out["kept"] = ask("POST", "/api/chat", json.dumps({
    "model": MODEL, "messages": [], "stream": False, "tools": None,
    "keep_alive": -1}).encode())
out["unload"] = ask("POST", "/api/generate", json.dumps({
    "model": MODEL, "prompt": "", "stream": False, "keep_alive": 0}).encode())
'''


@pytest.mark.parametrize("form", FORMS)
def test_case_variant_keys_never_reach_the_runtime_and_keep_alive_is_the_persons(
        form: str, runtime: FakeRuntime, write_spec: WriteSpec, sandbox_env: dict[str, str],
        tmp_path: Path) -> None:
    """`{"model": local, "Model": cloud}` is a cloud model to Ollama (Go's encoding/json
    folds keys, the last match winning); each such body is refused before the runtime, and
    `keep_alive` (unload at 0, pin at -1) and a null `tools` never reach it."""
    variants = [(path, raw, reason) for path, raw, reason in CASE_VARIANTS]
    spec = models_spec(write_spec, tmp_path, runtime.port, extra=NO_PAUSE)
    out, _ = run_script(spec, sandbox_env, tmp_path,
                        f"MODEL = {MODEL!r}\nVARIANTS = {variants!r}\n" + CASE_VARIANT_CALLS,
                        form, str(runtime.port))
    assert runtime.paths() == ["POST /api/chat", "POST /api/generate"], runtime.seen
    for (path, raw, reason), (status, body) in zip(variants, out["answers"], strict=True):
        assert status == 400 and reason_of(body) == reason, (path, raw, status, body)
    assert out["kept"][0] == 200 and out["unload"][0] == 200, out
    assert [json.loads(seen["body"]) for seen in runtime.seen] == [
        {"model": MODEL, "messages": [], "stream": False},
        {"model": MODEL, "prompt": "", "stream": False}]
    log = wire_log(sandbox_env)
    assert_log_keeps_only_the_target(log, runtime.port, form)
    assert refusals_logged(log) == len(variants), log
