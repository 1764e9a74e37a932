"""The proxy's refusals of what it cannot read, and its memory for verb bodies, inside a
real sandbox.

Every test runs `lnk-sandbox run` with the model verb, the secret verb (`telegram`, the
shipped rule) and a `[localhost] models` port behind the URL secret, and a Python script
(the venv's interpreter) that speaks raw bytes to the proxy at 127.0.0.1:3128. No call
reaches a network: every request here is refused before an upstream is asked for.

What is shown: (1) every refusal path the program can drive with malformed bytes (a chunked
body h11 refuses, a head, a target, JSON, multipart, an oversized body, a path, a query, a
header) carrying a unique marker, the URL secret and both placeholders, leaves none of them
in the wire's log, the proxy's stderr or the refusal (the reasons are fixed text:
lnk_proxy.server's UNREADABLE_* and lnk_proxy.target's); (2) verb bodies held at once are
bounded by MAX_HELD_BODY_BYTES: slow connections with large declared bodies grow the
proxy's memory (VmRSS) by no more than the budget and a margin, the call past it is
refused (503, its reason, logged), and once they end calls are served again.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from lnk_proxy.server import HELD_BODIES_FULL, MAX_HELD_BODY_BYTES
from tests.conftest import (
    LNK_SANDBOX,
    ROOT,
    SANDBOX_TIMEOUT_SECONDS,
    VENV,
    VENV_PYTHON,
    WriteSpec,
    run_out_script,
    toml_list,
    wire_log_of,
)

WIRE = "refusals"
RULE = ROOT / "examples" / "telegram-rule.json"
# A [localhost] models port: listed, never reached (every call to it here is refused first).
LOCAL_PORT = 11434
MIB = 1024 * 1024
# What a held connection declares (under the model verb's 32 MiB limit), and sends of it.
DECLARED = 31 * MIB
SENT = DECLARED - MIB
# Held connections asked for: twice what the budget holds.
HELD_ASKED = 2 * (MAX_HELD_BODY_BYTES // DECLARED)
# The proxy's own growth beside the bodies it holds (buffers, the loop's objects).
MARGIN = 48 * MIB

HOST = "api.anthropic.com:443"  # where a model call's refusal is logged
NO_PAUSE = "[pause]\nrefusals = 1000000\ntargets = 1000000\n"


def _set(env: dict[str, str], name: str, value: str, *rule: str) -> None:
    done = subprocess.run([LNK_SANDBOX, "secret", "set", name, *rule], input=value, env=env,
                          capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert done.returncode == 0, done


@pytest.fixture
def verbs_spec(write_spec: WriteSpec, tmp_path: Path, sandbox_env: dict[str, str],
               ) -> tuple[Path, Path]:
    """(the spec, a folder the script writes its signs in)."""
    _set(sandbox_env, "anthropic", f"sk-ant-real-{secrets.token_hex(8)}")
    _set(sandbox_env, "telegram", f"{1_000_000_000 + secrets.randbelow(10 ** 8)}:AAtg"
                                  f"{secrets.token_hex(16)}", "--rule", str(RULE))
    gates = tmp_path / "gates"
    gates.mkdir()
    spec = write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(tmp_path, VENV)}\n'
                      f"write = {toml_list(gates)}\n"
                      '[network]\nmode = "proxy"\nhosts = ["example.com"]\n'
                      f'[verbs]\nmodel = ["anthropic"]\nsecrets = ["telegram"]\n'
                      f"[localhost]\nmodels = [{LOCAL_PORT}]\n{NO_PAUSE}")
    return spec, gates


# Run first in every script: the proxy's address, what the sandbox was given, and a raw
# sender (a request sent as written, its answer read to the close).
PRELUDE = r'''
import json, os, socket, sys, time, urllib.parse
ENV = os.environ
PROXY = ("127.0.0.1", 3128)
URL_PATH = urllib.parse.urlsplit(ENV["LNK_SANDBOX_URL"]).path  # /_link/s/<URL secret>
URL_SECRET = URL_PATH.rsplit("/", 1)[1]
MODEL_PLACEHOLDER = ENV["ANTHROPIC_API_KEY"]
SECRET_PLACEHOLDER = ENV["LNK_SECRET_TELEGRAM"]
TELEGRAM = urllib.parse.urlsplit(ENV["LNK_SECRET_TELEGRAM_URL"]).path
MODEL = "/_link/model/anthropic/v1/messages"
out = {"url_secret": URL_SECRET, "placeholders": [MODEL_PLACEHOLDER, SECRET_PLACEHOLDER]}

def exchange(data):
    """What the proxy answers to `data` (sent whole, then our side closed), to its close."""
    sock = socket.create_connection(PROXY, timeout=20)
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return answer.decode("latin-1")
            answer += chunk
    except ConnectionError as error:
        return answer.decode("latin-1") or type(error).__name__
    finally:
        sock.close()
'''

REFUSAL_PATHS = PRELUDE + r'''
MARK = sys.argv[1]
HOST = "Host: 127.0.0.1:3128\r\n"
KEY = f"x-api-key: {MODEL_PLACEHOLDER}\r\n"
JSON_TYPE = "content-type: application/json\r\n"
LOCAL = f"{URL_PATH}/local/''' + str(LOCAL_PORT) + r'''/api/chat"
SEND = f"{TELEGRAM}/bot{SECRET_PLACEHOLDER}/sendMessage"

def junk(case):
    return f"{MARK}{case}-{URL_SECRET}-{MODEL_PLACEHOLDER}-{SECRET_PLACEHOLDER}"

def post(path, fields, body, *, chunked=False):
    framing = ("transfer-encoding: chunked\r\n" if chunked
               else f"content-length: {len(body)}\r\n")
    return (f"POST {path} HTTP/1.1\r\n{HOST}{fields}{framing}\r\n").encode() + body

answers = {}
def case(name, data):
    answers[name] = exchange(data)

# A chunked body h11 refuses (its chunk size is the program's text), to each verb.
for verb, path, fields in (("model", MODEL, KEY + JSON_TYPE), ("secret", SEND, JSON_TYPE),
                           ("local", LOCAL, JSON_TYPE)):
    case(f"chunked-{verb}", post(path, fields, f"{junk(verb)}\r\n".encode(), chunked=True))
    case(f"chunk-data-{verb}", post(path, fields, f"3\r\n{junk(verb)}\r\n0\r\n\r\n".encode(),
                                    chunked=True))
    case(f"json-{verb}", post(path, fields, ('{"' + junk(verb) + '",}').encode()))
    case(f"oversized-{verb}", (f"POST {path} HTTP/1.1\r\n{HOST}{fields}content-length: "
                               f"{60 * 1024 * 1024}\r\n\r\n{junk(verb)}").encode())
case("multipart-secret", post(SEND, "content-type: multipart/form-data; boundary=XYZ\r\n",
                              (f"--XYZ\r\nContent-Disposition: form-data; name*=utf-8''"
                               f"{junk('multipart')}\r\n\r\nv\r\n--XYZ--\r\n").encode()))
case("form-method-secret", post(SEND, "content-type: application/x-www-form-urlencoded\r\n",
                                f"method={junk('form')}&{junk('form')}=1".encode()))
# Heads: the head check's refusals, the target's, h11's.
case("control-character", (f"GET http://example.com/ HTTP/1.1\r\n{HOST}"
                           f"x-a: {junk('control')}\x01\r\n\r\n").encode())
case("folded", f"GET http://example.com/ HTTP/1.1\r\n{HOST} {junk('fold')}\r\n\r\n".encode())
case("host-name", f"GET http://{MARK}h!{junk('host')}/ HTTP/1.1\r\n{HOST}\r\n".encode())
case("port", f"GET http://example.com:{MARK}p/ HTTP/1.1\r\n{HOST}\r\n".encode())
case("ipv6", f"GET http://[{MARK}v6]/ HTTP/1.1\r\n{HOST}\r\n".encode())
case("connect", f"CONNECT {MARK}c!x:443 HTTP/1.1\r\nHost: {MARK}c!x:443\r\n\r\n".encode())
case("connect-port", f"CONNECT example.com:{MARK}cp HTTP/1.1\r\n{HOST}\r\n".encode())
case("content-length", (f"POST {MODEL} HTTP/1.1\r\n{HOST}{KEY}"
                        f"content-length: {MARK}cl\r\n\r\n").encode())
case("version", f"GET http://example.com/ {MARK}/1.1\r\n{HOST}\r\n".encode())
# The verbs' paths, query and headers.
case("provider", post(f"/_link/model/{junk('provider')}/v1/messages", KEY, b"{}"))
case("query", post(f"{MODEL}?{MARK}q={junk('query')}", KEY + JSON_TYPE, b"{}"))
case("placeholder", post(MODEL, f"x-api-key: {junk('key')}\r\n{JSON_TYPE}", b"{}"))
case("secret-name", post(f"/_link/secret/{junk('name')}/bot1/getMe", "", b""))
case("secret-path", post(f"{TELEGRAM}/bot{SECRET_PLACEHOLDER}/{junk('method')}", "", b""))
case("url-secret", post(f"/_link/s/{junk('url')}/local/1/api/chat", JSON_TYPE, b"{}"))
case("local-path", post(f"{URL_PATH}/local/''' + str(LOCAL_PORT) + r'''/{junk('lpath')}",
                        JSON_TYPE, b"{}"))
out["answers"] = answers
'''


def test_no_byte_of_a_refused_request_reaches_the_log_stderr_or_the_refusal(
        verbs_spec: tuple[Path, Path], sandbox_env: dict[str, str], tmp_path: Path) -> None:
    spec, _gates = verbs_spec
    mark = f"MARK{secrets.token_hex(6)}"
    out, done = run_out_script(spec, sandbox_env, tmp_path, REFUSAL_PATHS, mark)
    assert isinstance(out, dict), done
    answers: dict[str, str] = out["answers"]
    statuses = {name: answer.split(" ", 2)[1] if answer.startswith("HTTP/1.1 ") else answer
                for name, answer in answers.items()}
    # Each a refusal, of the program's doing (4xx; 503 is the budget's and is not here).
    assert all(status[:1] == "4" for status in statuses.values()), statuses
    log = wire_log_of(sandbox_env, WIRE)
    assert "\trefused\t" in log, log
    said = [out["url_secret"], *out["placeholders"]]
    for where, text in (("the wire's log", log), ("stderr", done.stderr)):
        assert mark not in text, (where, [line for line in text.splitlines() if mark in line])
        for given in said:
            assert given not in text, (where, given)
    quoting = {name: answer for name, answer in answers.items()
               if mark in answer.partition("\r\n\r\n")[2]}
    assert not quoting, quoting


HELD_BODIES = PRELUDE + r'''
GATES, ASKED, DECLARED, SENT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def sign(name, value=""):
    with open(os.path.join(GATES, name + ".tmp"), "w") as file:
        file.write(value)
    os.rename(os.path.join(GATES, name + ".tmp"), os.path.join(GATES, name))

def wait_for(name):
    path = os.path.join(GATES, name)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert time.monotonic() < deadline, name
        time.sleep(0.02)

def head(length, expect):
    return (f"POST {MODEL} HTTP/1.1\r\nHost: 127.0.0.1:3128\r\nx-api-key: {MODEL_PLACEHOLDER}"
            f"\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n"
            + ("expect: 100-continue\r\n" if expect else "") + "\r\n").encode()

def answer_head(sock):
    """(status, the rest of the answer read so far) of the proxy's first answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    line, _, rest = data.partition(b"\r\n")
    return int(line.split(b" ")[1]), rest

def whole(sock, rest):
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return rest.decode("latin-1")
        rest += chunk

sign("ready")
wait_for("measured")
held, statuses, reasons = [], [], []
piece = b"x" * (1024 * 1024)
for _ in range(ASKED):
    sock = socket.create_connection(PROXY, timeout=30)
    sock.sendall(head(DECLARED, True))
    status, rest = answer_head(sock)
    statuses.append(status)
    if status == 100:  # the body's share taken: sent slowly, its last MiB held back
        for _ in range(SENT // len(piece)):
            sock.sendall(piece)
        held.append(sock)
    else:
        reasons.append(whole(sock, rest).partition("\r\n\r\n")[2])
        sock.close()
def small_call():
    """The status of a call with a body of two bytes, read and refused as not JSON (400)."""
    sock = socket.create_connection(PROXY, timeout=30)
    sock.sendall(head(2, False) + b"{,")
    status, rest = answer_head(sock)
    whole(sock, rest)
    sock.close()
    return status

# What fits beside the held bodies is served as ever, while they are held.
beside = small_call()
sign("held", json.dumps(statuses))
wait_for("go")
for sock in held:
    sock.close()
# Served again once the held calls have ended: a large body's share is taken again (its
# 100), no longer 503. Polled: the proxy learns of each close as it reads.
after = []
deadline = time.monotonic() + 30
while not after or after[-1] == 503:
    assert time.monotonic() < deadline, after
    sock = socket.create_connection(PROXY, timeout=30)
    sock.sendall(head(DECLARED, True))
    status, rest = answer_head(sock)
    if status != 100:
        whole(sock, rest)
    sock.close()
    after.append(status)
out.update(statuses=statuses, reasons=reasons, beside=beside, after=after)
'''


def _find_child(parent: int, word: bytes) -> int:
    deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                words = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if word in words and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                return int(entry)
        time.sleep(0.01)
    raise AssertionError(f"no child {word!r} of {parent}")


def _resident(pid: int) -> int:
    """The process's resident memory in bytes (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _wait_for(path: Path, run: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 2 * SANDBOX_TIMEOUT_SECONDS
    while not path.exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, path
        time.sleep(0.02)


def test_verb_bodies_held_at_once_are_bounded_and_the_call_past_the_budget_is_refused(
        verbs_spec: tuple[Path, Path], sandbox_env: dict[str, str], tmp_path: Path) -> None:
    spec, gates = verbs_spec
    script = tmp_path / "held.py"
    script.write_text(HELD_BODIES + "\nprint(json.dumps(out))\n")
    run = subprocess.Popen(
        [LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON, str(script), str(gates),
         str(HELD_ASKED), str(DECLARED), str(SENT)],
        cwd=str(tmp_path), env=sandbox_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        _wait_for(gates / "ready", run)
        proxy = _find_child(run.pid, b"proxy")
        before = _resident(proxy)
        (gates / "measured").touch()
        _wait_for(gates / "held", run)
        statuses = json.loads((gates / "held").read_text())
        taken = statuses.count(100) * SENT
        # Polled until the proxy has read what it took (within a margin), or has grown past
        # the bound: either is the answer.
        bound = MAX_HELD_BODY_BYTES + MARGIN
        deadline = time.monotonic() + 2 * SANDBOX_TIMEOUT_SECONDS
        grown = _resident(proxy) - before
        while grown < min(taken - MARGIN, bound + 1):
            assert time.monotonic() < deadline, (grown, taken, statuses)
            time.sleep(0.05)
            grown = _resident(proxy) - before
        assert grown <= bound, (f"the proxy grew by {grown // MIB} MiB holding "
                                f"{taken // MIB} MiB of bodies", statuses)
        (gates / "go").touch()
        stdout, stderr = run.communicate(timeout=2 * SANDBOX_TIMEOUT_SECONDS)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, (stdout, stderr)
    out: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    allowed = MAX_HELD_BODY_BYTES // DECLARED
    assert out["statuses"] == [100] * allowed + [503] * (HELD_ASKED - allowed), out
    assert all(json.loads(text)["error"]["message"] == HELD_BODIES_FULL
               for text in out["reasons"]), out["reasons"]
    assert out["beside"] == 400, out
    assert out["after"][-1] == 100, out
    log = wire_log_of(sandbox_env, WIRE)
    assert f"\trefused\t{HOST}\treason={HELD_BODIES_FULL}" in log, log


def test_an_unexpected_errors_line_never_quotes_its_message(tmp_path: Path) -> None:
    """A bug's line on stderr (`Wire.report_error`) names its type and place; of its text
    only an OSError's strerror and the text of RuntimeError and AssertionError, which our
    code alone raises: a parser's message quotes the program's bytes."""
    from lnk_common.wire import Wire
    from lnk_common.wirelog import WireLog

    said: list[str] = []
    wire = Wire(log=WireLog(str(tmp_path), "w"), say=said.append)
    for error in (ValueError("invalid literal for int() with base 10: 'MARK1'"),
                  KeyError("MARK2"), UnicodeDecodeError("utf-8", b"MARK3\xff", 5, 6, "MARK4"),
                  json.JSONDecodeError("MARK5", "MARK6", 0),
                  FileNotFoundError(2, "No such file or directory", "MARK7"),
                  RuntimeError("a fault of ours")):
        wire.report_error("a call ended on an unexpected error", error)
    assert said and not [line for line in said if "MARK" in line], said
    assert any(line.endswith(": No such file or directory") for line in said), said
    assert any(line.endswith(": a fault of ours") for line in said), said
