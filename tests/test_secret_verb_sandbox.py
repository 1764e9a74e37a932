"""The secret verb with the real Telegram clients, inside a real sandbox.

Every test runs `lnk-sandbox run` with `[verbs] secrets = ["telegram"]` and a Python script
(the venv's interpreter, the venv readable so `telegram` and `aiogram` import) against the
fake Bot API of the test network (tests/fakeproviders.py: api.telegram.org at 10.212.0.3,
HTTPS with the test CA). The proxy finds it as it finds any name (the test network's DNS,
LNK_SANDBOX_DNS in the environment of `lnk-sandbox run`) and trusts the test CA through
SSL_CERT_FILE in that same environment, the harness's, never the sandbox's: the program
speaks plain HTTP to the verb.

The bot's token is set with `lnk-sandbox secret set telegram --rule
examples/telegram-rule.json` (standard input) in this test's own LNK_HOME. Its bot id is
unique to the test, so the fake's request log (shared by every test on the network) is
read from the offset where the test began and then by that id. What is shown: the Bot API
receives the real token in the path and never the placeholder; python-telegram-bot
(`base_url`, `base_file_url`) and aiogram (`TelegramAPIServer.from_base`) parse what comes
back, a file download included; each refused method in every spelling, a `method`
parameter, a made-up placeholder are refused with their reason (which the clients show)
and nothing of them reaches the Bot API; the token is nowhere the program can look, nor in
the wire's log, stderr or a refusal; a rotated token is used at the next call; a spec
naming a secret that is not set refuses the run and nothing runs.
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
    ROOT,
    SANDBOX_TIMEOUT_SECONDS,
    VENV,
    VENV_PYTHON,
    WriteSpec,
    run_out_script,
    toml_list,
    wire_log_of,
)
from tests.fakeproviders import (
    FILE_PREFIX,
    TELEGRAM_FILE_PATH,
    TELEGRAM_HOST,
    ca_file,
    log_offset,
    requests_seen,
)
from tests.testservers import DNS_SERVER

WIRE = "telegram"
RULE = ROOT / "examples" / "telegram-rule.json"
REFUSED = ("setWebhook", "deleteWebhook", "logOut", "close", "getManagedBotToken",
           "replaceManagedBotToken")
# Every test's token: its own bot id, then a marker and 32 hex digits (Telegram's are 35
# characters of [A-Za-z0-9_-]); the placeholder is `<bot id>:<32 hex>`, without the marker,
# so a search for TOKEN_SHAPE finds tokens and never the placeholder.
TOKEN_SHAPE = r"[0-9]{9,10}:AAtg[0-9a-f]{32}"  # noqa: S105  (a shape, not a token)
PLACEHOLDER_SHAPE = re.compile(r"([0-9]{9,10}):[0-9a-f]{32}")

# The verb's reasons (lnk_proxy.secret_rules, lnk_proxy.secret_verb), exact.
NAME_REFUSED = (403, "this name is refused by the secret's rule (whatever its case)")
NOT_A_NAME = (400, "a name in the path is 1 to 64 ASCII letters and digits, nothing else")
EMPTY_SEGMENT = (400, "an empty path segment ('//' or a trailing '/') is refused, never folded")
ENCODED = (400, "an encoded byte ('%') in the path is refused, never decoded")
RELATIVE = (400, "a relative segment ('.' or '..') is refused, never resolved")
NO_SHAPE = (404, "the path has none of the shapes this secret's rule allows")
SEGMENT_REFUSED = (403, "a segment of the path is a name the secret's rule refuses (whatever "
                        "its case)")
METHOD_REFUSED = (405, "this method is not allowed for this secret (allowed: GET, POST)")
WRONG_PLACEHOLDER = (403, "the call does not carry the placeholder this sandbox was given "
                          "where the rule puts the secret")
IN_PATH = "(the method goes in the path, where the rule checks it)"

# Run at the start of every script inside: the base URL and placeholder the sandbox gave,
# both clients built from them, and a raw sender (http.client sends a target as written:
# no client of ours normalises what an attack spells).
PRELUDE = r'''
import asyncio, http.client, json, os, sys, urllib.parse
ENV = os.environ
ENV.pop("SSL_CERT_FILE", None)  # the harness's CA file, which the sandbox cannot read
URL = ENV["LNK_SECRET_TELEGRAM_URL"]
P = ENV["LNK_SECRET_TELEGRAM"]
SPLIT = urllib.parse.urlsplit(URL)
out = {}

def raw(method, target, body=None, headers=None, *, whole=False):
    """[status, body] of one request to the verb (`whole`: to the proxy), its target sent
    as written."""
    connection = http.client.HTTPConnection(SPLIT.hostname, SPLIT.port, timeout=20)
    try:
        connection.request(method, target if whole else SPLIT.path + target, body=body,
                           headers=headers or {})
        response = connection.getresponse()
        return [response.status, response.read().decode("utf-8", "replace")]
    finally:
        connection.close()

def ptb(token=None):
    import telegram
    return telegram.Bot(token=token or P, base_url=URL + "/bot",
                        base_file_url=URL + "/file/bot")

def aio(token=None):
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    return Bot(token or P, session=AiohttpSession(api=TelegramAPIServer.from_base(URL)))

async def refused(call):
    """[the error's type, the text it shows] of a client call that must fail."""
    try:
        await call
    except Exception as error:
        return [type(error).__name__, str(error)]
    return ["not refused", ""]
'''


@pytest.fixture
def bot_id() -> str:
    """A bot id for this test alone (the fake's log is shared)."""
    return str(1_000_000_000 + secrets.randbelow(8_999_999_999))


def new_token(bot_id: str) -> str:
    return f"{bot_id}:AAtg{secrets.token_hex(16)}"


@pytest.fixture
def token(bot_id: str) -> str:
    return new_token(bot_id)


def set_secret(env: dict[str, str], value: str, *rule: str) -> None:
    done = subprocess.run([LNK_SANDBOX, "secret", "set", "telegram", *rule], input=value,
                          env=env, capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert done.returncode == 0, done
    assert value not in done.stdout + done.stderr


@pytest.fixture
def harness_env(testnet: Path, sandbox_env: dict[str, str]) -> dict[str, str]:
    """The harness's environment without the secret: LNK_HOME, the proxy pointed at the
    test DNS and trusting the test CA."""
    return {**sandbox_env, "LNK_SANDBOX_DNS": DNS_SERVER, "SSL_CERT_FILE": str(ca_file(testnet))}


@pytest.fixture
def tg_env(harness_env: dict[str, str], token: str) -> dict[str, str]:
    """The harness's environment with the bot's token set with its rule."""
    set_secret(harness_env, token, f"--rule={RULE}")
    return harness_env


@pytest.fixture
def spec(write_spec: WriteSpec, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return write_spec(f'name = "{WIRE}"\n[files]\nread = {toml_list(tmp_path, VENV)}\n'
                      f'write = {toml_list(work)}\n[verbs]\nsecrets = ["telegram"]\n'
                      # The attacks are refused by the hundred: the wire must not pause
                      # (the pause is the frame's, tested there).
                      '[pause]\nrefusals = 100000\ntargets = 100000\n')


@pytest.fixture
def seen(testnet: Path, bot_id: str) -> Iterator[Any]:
    """seen() → what the fake Bot API received since the test began, of this test's bot
    (its id in the path: the token's, or the placeholder's had one got through)."""
    start = log_offset(testnet)
    yield lambda: [record for record in requests_seen(testnet, start)
                   if f"bot{bot_id}" in record["path"]]


def run_script(spec: Path, env: dict[str, str], tmp_path: Path, body: str,
               *args: str) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    """PRELUDE + body run by the venv's Python inside; its `out` and the completed run."""
    out, done = run_out_script(spec, env, tmp_path, PRELUDE + body, *args)
    assert isinstance(out, dict), done
    return out, done

def wire_log(env: dict[str, str]) -> str:
    return wire_log_of(env, WIRE)


def assert_real_token_only(records: list[dict[str, Any]], token: str,
                           placeholder: str) -> None:
    """Each request went to api.telegram.org by TLS for that name, with the real token in
    its path, no credential header, and the placeholder nowhere."""
    for record in records:
        assert placeholder not in json.dumps(record), record
        assert record["sni"] == TELEGRAM_HOST, record
        assert record["host"] == TELEGRAM_HOST, record
        assert record["path"].startswith((f"/bot{token}/", f"/file/bot{token}/")), record
        assert not {"authorization", "cookie", "proxy-authorization"} & set(record["headers"])


ORDINARY_PTB = r'''
async def main():
    bot = ptb()
    async with bot:  # initialize: getMe
        me = await bot.get_me()
        sent = await bot.send_message(chat_id=4242, text="héllo & bye?")
        updates = await bot.get_updates(timeout=0)
        found = await bot.get_file("file-7")
        data = await found.download_as_bytearray()
        photo = await bot.send_photo(chat_id=4242, photo=b"\x89PNG fake bytes",
                                     caption="a photo")
        out["ptb"] = [me.username, me.id, sent.text, [u.message.text for u in updates],
                      found.file_path.startswith(URL + "/file/bot"), bytes(data).decode(),
                      photo.photo[0].file_id]
asyncio.run(main())
out["env"] = [URL, P]
'''

ORDINARY_AIOGRAM = r'''
async def main():
    from aiogram.types import BufferedInputFile
    bot = aio()
    try:
        me = await bot.get_me()
        sent = await bot.send_message(4242, "héllo & bye?")
        updates = await bot.get_updates(timeout=0)
        found = await bot.get_file("file-7")
        data = await bot.download_file(found.file_path)
        photo = await bot.send_photo(4242, BufferedInputFile(b"\x89PNG fake", "a.png"),
                                     caption="a photo")
        out["aiogram"] = [me.username, me.id, sent.text, [u.message.text for u in updates],
                          found.file_path, data.read().decode(), photo.photo[0].file_id]
    finally:
        await bot.session.close()
asyncio.run(main())
out["env"] = [URL, P]
'''


def test_python_telegram_bot_calls_reach_the_bot_api_with_the_real_token(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, bot_id: str, seen: Any,
) -> None:
    """python-telegram-bot built from LNK_SECRET_TELEGRAM_URL and LNK_SECRET_TELEGRAM:
    getMe, sendMessage, getUpdates, getFile, the file's download (which the client
    %-encodes the placeholder's ':' in) and a multipart sendPhoto all work; the Bot API
    gets the real token in each path, never the placeholder."""
    out, done = run_script(spec, tg_env, tmp_path, ORDINARY_PTB)
    url, placeholder = out["env"]
    assert url == "http://127.0.0.1:3128/_link/secret/telegram", out
    found = PLACEHOLDER_SHAPE.fullmatch(placeholder)
    assert found is not None and found.group(1) == bot_id, out  # the bot's id, public
    assert placeholder != token
    file_text = (FILE_PREFIX + TELEGRAM_FILE_PATH.encode()).decode()
    assert out["ptb"] == ["fake_bot", int(bot_id), "héllo & bye?", ["hello bot"], True,
                          file_text, "photo-7"], out
    records = seen()
    assert [(record["method"], record["path"].replace(token, "T")) for record in records] == [
        ("POST", "/botT/getMe"), ("POST", "/botT/getMe"), ("POST", "/botT/sendMessage"),
        ("POST", "/botT/getUpdates"), ("POST", "/botT/getFile"),
        ("GET", f"/file/botT/{TELEGRAM_FILE_PATH}"), ("POST", "/botT/sendPhoto")], records
    assert_real_token_only(records, token, placeholder)
    assert "chat_id=4242" in records[2]["body"], records[2]
    assert "multipart/form-data" in records[6]["headers"]["content-type"], records[6]
    assert token not in done.stdout + done.stderr


def test_aiogram_calls_reach_the_bot_api_with_the_real_token(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, bot_id: str, seen: Any,
) -> None:
    """aiogram with TelegramAPIServer.from_base(LNK_SECRET_TELEGRAM_URL) and the
    placeholder (which its token check accepts): the same calls work, the same way."""
    out, done = run_script(spec, tg_env, tmp_path, ORDINARY_AIOGRAM)
    _, placeholder = out["env"]
    file_text = (FILE_PREFIX + TELEGRAM_FILE_PATH.encode()).decode()
    assert out["aiogram"] == ["fake_bot", int(bot_id), "héllo & bye?", ["hello bot"],
                              TELEGRAM_FILE_PATH, file_text, "photo-7"], out
    records = seen()
    assert [(record["method"], record["path"].replace(token, "T")) for record in records] == [
        ("POST", "/botT/getMe"), ("POST", "/botT/sendMessage"), ("POST", "/botT/getUpdates"),
        ("POST", "/botT/getFile"), ("GET", f"/file/botT/{TELEGRAM_FILE_PATH}"),
        ("POST", "/botT/sendPhoto")], records
    assert_real_token_only(records, token, placeholder)
    assert token not in done.stdout + done.stderr


def attacks() -> list[tuple[str, str, str, str, dict[str, str], tuple[int, str]]]:
    """(label, method, target with P for the placeholder, Q for it with its ':' as '%3A',
    body, headers, (status, reason)) of every refused spelling."""
    found: list[tuple[str, str, str, str, dict[str, str], tuple[int, str]]] = []
    for name in REFUSED:
        for spelled in (name, name.lower(), name.upper(), name.swapcase(),
                        name[0].upper() + name[1:]):
            found.append((f"{spelled} by POST", "POST", f"/botP/{spelled}", "", {},
                          NAME_REFUSED))
            found.append((f"{spelled} by GET", "GET", f"/botP/{spelled}", "", {},
                          NAME_REFUSED))
        found += [
            (f"{name}.", "POST", f"/botP/{name}.", "", {}, NOT_A_NAME),
            (f"{name}.json", "POST", f"/botP/{name}.json", "", {}, NOT_A_NAME),
            (f"{name}/", "POST", f"/botP/{name}/", "", {}, EMPTY_SEGMENT),
            (f"{name} %-encoded letter", "POST", f"/botP/%{ord(name[0]):02X}{name[1:]}", "",
             {}, ENCODED),
            (f"{name} %-encoded lower hex", "POST", f"/botP/%{ord(name[0]):02x}{name[1:]}", "",
             {}, ENCODED),
            (f"{name} wholly %-encoded", "POST",
             "/botP/" + "".join(f"%{ord(c):02X}" for c in name), "", {}, ENCODED),
            # python-telegram-bot's spelling of the placeholder ('%3A'), with a refused name.
            (f"{name} with P's ':' encoded", "POST", f"/botQ/{name}", "", {}, NAME_REFUSED),
            (f"{name} under file", "GET", f"/file/botP/{name}", "", {}, SEGMENT_REFUSED),
            (f"{name}.json under file", "GET", f"/file/botP/x/{name}.json", "", {},
             SEGMENT_REFUSED),
            (f"{name} after ..", "POST", f"/botP/getMe/../{name}", "", {}, RELATIVE),
            (f"{name} after .", "POST", f"/botP/./{name}", "", {}, RELATIVE),
            (f"{name} by the test env", "POST", f"/botP/test/{name}", "", {}, NO_SHAPE),
            (f"{name} in the query", "POST", f"/botP/getMe?method={name}", "", {},
             (403, f"a query parameter named method is refused {IN_PATH}")),
            (f"{name} in the query, METHOD", "GET", f"/botP/getMe?x=1&METHOD={name}", "", {},
             (403, f"a query parameter named method is refused {IN_PATH}")),
            (f"{name} in a form", "POST", "/botP/getMe", f"method={name}",
             {"Content-Type": "application/x-www-form-urlencoded"},
             (403, f"a form parameter named method is refused {IN_PATH}")),
            (f"{name} in JSON", "POST", "/botP/sendMessage",
             json.dumps({"chat_id": 1, "Method": name}), {"Content-Type": "application/json"},
             (403, f"a body field named method is refused {IN_PATH}")),
            (f"{name} in multipart", "POST", "/botP/getMe",
             f'--b\r\nContent-Disposition: form-data; name="method"\r\n\r\n{name}\r\n--b--\r\n',
             {"Content-Type": "multipart/form-data; boundary=b"},
             (403, "a multipart field named method is refused (the method goes in the path)")),
        ]
    found += [
        ("PUT", "PUT", "/botP/getMe", "", {}, METHOD_REFUSED),
        ("DELETE", "DELETE", "/botP/getMe", "", {}, METHOD_REFUSED),
        ("HEAD", "HEAD", "/botP/getMe", "", {}, METHOD_REFUSED),
        ("empty method", "POST", "/botP/", "", {}, EMPTY_SEGMENT),
        ("empty method, GET", "GET", "/botP/", "", {}, EMPTY_SEGMENT),
        ("no method", "POST", "/botP", "", {}, NO_SHAPE),
        ("double slash", "POST", "/botP//getMe", "", {}, EMPTY_SEGMENT),
        ("empty file path", "GET", "/file/botP/", "", {}, EMPTY_SEGMENT),
        # `method` hidden in a body's other spellings.
        ("form, second pair", "POST", "/botP/sendMessage", "chat_id=1&Method=logOut",
         {"Content-Type": "Application/X-WWW-Form-Urlencoded; charset=utf-8"},
         (403, f"a form parameter named method is refused {IN_PATH}")),
        ("JSON escape", "POST", "/botP/sendMessage", '{"chat_id": 1, "\\u006dethod": "close"}',
         {"Content-Type": "application/json"},
         (403, f"a body field named method is refused {IN_PATH}")),
        ("multipart, unquoted", "POST", "/botP/getMe",
         '--b\r\nContent-Disposition: form-data; name=METHOD\r\n\r\nclose\r\n--b--\r\n',
         {"Content-Type": 'multipart/form-data; boundary="b"'},
         (403, "a multipart field named method is refused (the method goes in the path)")),
        ("multipart, name*=", "POST", "/botP/getMe",
         "--b\r\nContent-Disposition: form-data; name*=utf-8''method\r\n\r\nclose\r\n"
         "--b--\r\n", {"Content-Type": "multipart/form-data; boundary=b"},
         (400, "a multipart field name in the encoded form (name*=) is refused")),
    ]
    return found


def test_refused_methods_in_every_spelling_never_reach_the_bot_api(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, seen: Any,
) -> None:
    """Each refused method in any case, with a trailing dot, '.json' or slash, %-encoded,
    under the file path, after '.' or '..', by the test environment's path; an empty
    method; `method` as a query, form, JSON or multipart parameter: refused with its
    reason (in the Bot API's error shape, so the clients show it), never reaching the Bot
    API. The clients' own methods for them are refused the same way."""
    cases = attacks()
    plan = [[method, target, body, headers] for _, method, target, body, headers, _ in cases]
    out, done = run_script(spec, tg_env, tmp_path, r'''
plan = json.loads(open(sys.argv[1]).read())
Q = P.replace(":", "%3A")  # python-telegram-bot's spelling, in its file URLs
out["raw"] = [raw(method, target.replace("botP", "bot" + P).replace("botQ", "bot" + Q),
                  body.encode() or None, headers)
              for method, target, body, headers in plan]
async def main():
    bot = ptb()
    out["ptb"] = {
        "setWebhook": await refused(bot.set_webhook("https://example.org/hook")),
        "deleteWebhook": await refused(bot.delete_webhook()),
        "logOut": await refused(bot.log_out()),
        "close": await refused(bot.close()),
    }
    bot = aio()
    try:
        out["aiogram"] = {
            "setWebhook": await refused(bot.set_webhook("https://example.org/hook")),
            "deleteWebhook": await refused(bot.delete_webhook()),
            "logOut": await refused(bot.log_out()),
            "close": await refused(bot.close()),
            "getManagedBotToken": await refused(bot.get_managed_bot_token(user_id=1)),
            "replaceManagedBotToken": await refused(bot.replace_managed_bot_token(user_id=1)),
        }
    finally:
        await bot.session.close()
asyncio.run(main())
import gzip
# A body the verb cannot read for a `method` field; the name's case; straight to the host.
out["gzip"] = raw("POST", "/bot" + P + "/getMe", gzip.compress(b"method=logOut"),
                  {"Content-Type": "application/x-www-form-urlencoded",
                   "Content-Encoding": "gzip"})
out["name case"] = raw("POST", "/_link/secret/Telegram/bot" + P + "/getMe", whole=True)
out["direct"] = raw("POST", "http://api.telegram.org/bot" + P + "/logOut",
                    headers={"Host": "api.telegram.org"}, whole=True)
out["connect"] = raw("CONNECT", "api.telegram.org:443", whole=True)
out["placeholder"] = P
''', str(write_json(tmp_path / "plan.json", plan)))
    placeholder = out["placeholder"]
    for (label, method, *_, (status, reason)), (got, body) in zip(cases, out["raw"],
                                                                  strict=True):
        assert got == status, (label, got, body)
        if method == "HEAD":
            continue  # its answer has no body: the status says it
        answer = json.loads(body)
        assert answer["ok"] is False and answer["error_code"] == status, (label, body)
        # A 404 or 405 adds the shape of what was sent ("; got POST /_link/secret/…/…").
        said = answer["description"].split("; got ", 1)[0]
        assert said == reason, (label, body)
        assert answer["error"]["message"] == answer["description"], (label, body)
        assert placeholder not in body and token not in body, (label, body)
    assert out["gzip"][0] == 415, out["gzip"]
    assert json.loads(out["gzip"][1])["description"] == (
        "a compressed request body cannot be checked; send it uncompressed"), out["gzip"]
    assert out["name case"][0] == 404 and "names are compared exactly" in out["name case"][1]
    for way in ("direct", "connect"):
        assert out[way][0] == 403, out[way]
        assert "api.telegram.org:" in out[way][1] and "not in this sandbox's hosts" in (
            out[way][1]), out[way]
    for client in ("ptb", "aiogram"):
        for name, (kind, shown) in out[client].items():
            assert NAME_REFUSED[1] in shown, (client, name, kind, shown)
            assert placeholder not in shown and token not in shown, (client, name, shown)
    assert seen() == []
    assert token not in done.stdout + done.stderr


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_a_made_up_placeholder_is_refused(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, seen: Any,
) -> None:
    """Another bot's id with the placeholder's random part, the placeholder with one byte
    changed at each position, a placeholder of the right shape made up, the bare id, and
    the clients given a made-up token: 403 with the same reason each time, nothing reaches
    the Bot API."""
    out, _ = run_script(spec, tg_env, tmp_path, r'''
bot_id, _, random = P.partition(":")
other = str(int(bot_id) + 1) + ":" + random
changed = []
for index, byte in enumerate(P):
    swap = "0" if byte != "0" else "1"
    if byte == ":":
        swap = "x"
    changed.append(P[:index] + swap + P[index + 1:])
made_up = bot_id + ":" + "0" * 32
guesses = [other, made_up, bot_id, bot_id + ":", P + "0", P[:-1], *changed]
out["raw"] = [raw("POST", "/bot" + guess + "/getMe") for guess in guesses]
out["file"] = raw("GET", "/file/bot" + other + "/photos/file_7.jpg")
async def main():
    out["ptb"] = await refused(ptb(made_up).get_me())
    bot = aio(other)
    try:
        out["aiogram"] = await refused(bot.get_me())
    finally:
        await bot.session.close()
asyncio.run(main())
out["count"] = len(guesses)
out["placeholder"] = P
''')
    assert out["count"] == 6 + len(out["placeholder"])
    for status, body in [*out["raw"], out["file"]]:
        assert status == WRONG_PLACEHOLDER[0], body
        assert json.loads(body)["description"] == WRONG_PLACEHOLDER[1], body
        assert out["placeholder"] not in body and token not in body
    for client in ("ptb", "aiogram"):
        assert WRONG_PLACEHOLDER[1] in out[client][1], out[client]
    assert seen() == []


def test_the_sandbox_never_holds_the_token(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, seen: Any,
) -> None:
    """After calls with both clients (the token in use, a connection kept), the program
    looks everywhere it can: its environment, every /proc/*/environ and cmdline it can
    read, the files it can write or made, the secret's file by its path. No token. Outside,
    the wire's log keeps api.telegram.org:443 and kind=secret, never the token, the
    placeholder, a path or a method; the harness's output holds no token."""
    secret_file = Path(tg_env["LNK_HOME"]) / "sandbox" / "secrets" / "telegram"
    out, done = run_script(spec, tg_env, tmp_path, ORDINARY_PTB + ORDINARY_AIOGRAM + r'''
import glob, re
out["refusal"] = raw("POST", "/bot" + P + "/logOut")
wanted = re.compile(sys.argv[1])
texts = {"environ": json.dumps(dict(ENV))}
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        texts[path] = open(path, "rb").read().decode("latin-1")
    except OSError:
        pass
for root in [sys.argv[2], "/tmp", "/dev/shm", os.path.expanduser("~"), os.getcwd()]:
    for count, (folder, _, names) in enumerate(os.walk(root)):
        if count > 2000:
            break  # a large home: its first folders are enough (the token was never there)
        for name in names:
            try:
                texts[os.path.join(folder, name)] = open(os.path.join(folder, name), "rb"
                                                         ).read(1 << 20).decode("latin-1")
            except OSError:
                pass
out["found"] = sorted(path for path, text in texts.items() if wanted.search(text))
out["proc"] = sum(path.startswith("/proc/") for path in texts)
try:
    out["secret"] = open(sys.argv[3]).read()
except OSError as error:
    out["secret"] = type(error).__name__
out["placeholder"] = P
''', TOKEN_SHAPE, str(tmp_path / "work"), str(secret_file))
    assert out["found"] == [], out
    assert out["proc"] >= 2, out
    assert out["secret"] in ("FileNotFoundError", "PermissionError"), out
    assert out["refusal"][0] == NAME_REFUSED[0] and token not in out["refusal"][1], out
    assert token not in done.stdout + done.stderr
    assert len(seen()) == 13, seen()
    log = wire_log(tg_env)
    lines = log.splitlines()
    assert any("allowed" in line and f"{TELEGRAM_HOST}:443" in line and "kind=secret" in line
               for line in lines), log
    assert any("refused" in line and f"{TELEGRAM_HOST}:443" in line for line in lines), log
    for forbidden in (token, token.partition(":")[2], out["placeholder"],
                      out["placeholder"].partition(":")[2], "/bot", "getMe", "logOut",
                      "sendMessage", "_link", "photos/"):
        assert forbidden not in log, (forbidden, log)


def test_a_rotated_token_is_used_at_the_next_call(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, bot_id: str, seen: Any,
) -> None:
    """One sandbox, two getMe calls on one client (a kept connection); between them the
    token is set again outside (`secret set telegram`, its rule kept): the second call
    carries the new token, the placeholder unchanged."""
    work = tmp_path / "work"
    script = tmp_path / "rotate.py"
    script.write_text(PRELUDE + r'''
import time
async def main():
    bot = aio()
    try:
        await bot.get_me()
        for _ in range(400):
            if os.path.exists(sys.argv[1]):
                break
            await asyncio.sleep(0.05)
        out["second"] = (await bot.get_me()).username
    finally:
        await bot.session.close()
asyncio.run(main())
print(json.dumps(out))
''')
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON,
                            str(script), str(work / "go")], cwd=str(tmp_path), env=tg_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rotated = new_token(bot_id)
    try:
        deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
        while not seen() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        set_secret(tg_env, rotated)
        (work / "go").write_text("")
        output, errors = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 0, (output, errors)
    assert json.loads(output.splitlines()[-1]) == {"second": "fake_bot"}
    first, second = seen()
    assert first["path"] == f"/bot{token}/getMe", first
    assert second["path"] == f"/bot{rotated}/getMe", second
    assert token not in output + errors and rotated not in output + errors


@pytest.mark.parametrize("stored", ["nothing", "no rule"])
def test_a_secret_not_set_refuses_the_run(
    spec: Path, harness_env: dict[str, str], tmp_path: Path, stored: str,
) -> None:
    """A spec naming a secret the store does not hold (or holds without a rule): the run
    is refused with one line naming the secret and the fix, and nothing runs."""
    if stored == "no rule":
        set_secret(harness_env, new_token("123456789"))
    marker = tmp_path / "work" / "ran"
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", "touch", str(marker)],
                          cwd=str(tmp_path), env=harness_env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)
    assert done.returncode != 0, done
    assert not marker.exists()
    # One line (the harness's SSL_CERT_FILE, which the sandbox could not read, is not
    # noted before it: the run is refused first), the fix said once.
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    what = {"nothing": "which is not set", "no rule": "which has no rule kept with it"}[stored]
    assert lines[0].startswith(f"lnk-sandbox: [verbs] secrets names telegram, {what} "), lines
    assert lines[0].count("lnk-sandbox secret set telegram --rule FILE") == 1, lines
    assert done.stdout == ""


NOT_URL = ("parameter {}: Telegram fetches a URL given there, and this secret's rule "
           "(not_urls) takes only a file_id, attach://<part> or an upload")


def test_media_by_url_is_refused_naming_the_parameter_and_uploads_pass(
    spec: Path, tg_env: dict[str, str], tmp_path: Path, token: str, seen: Any,
) -> None:
    """sendPhoto with a URL (Telegram would fetch any host the program names: egress around
    the hosts list) by python-telegram-bot and aiogram, sendMediaGroup with a URL among its
    media, and the same by raw form, JSON and a multipart body spelled as Telegram's reader
    would read otherwise (a space before the colon, a second name=, xboundary=): each
    refused with the parameter named, none reaching the Bot API. The same photo uploaded
    and by file_id passes with both clients."""
    out, done = run_script(spec, tg_env, tmp_path, r'''
async def main():
    import telegram
    bot = ptb()
    async with bot:
        out["ptb url"] = await refused(bot.send_photo(4242, "https://evil.example/a.jpg"))
        out["ptb group"] = await refused(bot.send_media_group(4242, [
            telegram.InputMediaPhoto(b"\x89PNG"),
            telegram.InputMediaPhoto("https://evil.example/b.jpg")]))
        out["ptb upload"] = (await bot.send_photo(4242, b"\x89PNG fake")).photo[0].file_id
        out["ptb file_id"] = (await bot.send_photo(4242, "AgACAgIAAxkBAAIB-file_id")).message_id
    from aiogram.types import BufferedInputFile, InputMediaPhoto
    bot = aio()
    try:
        out["aiogram url"] = await refused(bot.send_photo(4242, "evil.example/a.jpg"))
        out["aiogram group"] = await refused(bot.send_media_group(4242, [
            InputMediaPhoto(media=BufferedInputFile(b"\x89PNG", "a.png")),
            InputMediaPhoto(media="https://evil.example/b.jpg")]))
        out["aiogram upload"] = (await bot.send_photo(
            4242, BufferedInputFile(b"\x89PNG", "a.png"))).photo[0].file_id
        out["aiogram file_id"] = (await bot.send_photo(4242, "AgACAgIAAxkBAAIB-id")).message_id
    finally:
        await bot.session.close()
asyncio.run(main())
path = "/bot" + P + "/sendPhoto"
out["form"] = raw("POST", path, b"chat_id=1&photo=https%3A%2F%2Fevil.example%2Fa.jpg",
                  {"Content-Type": "application/x-www-form-urlencoded"})
out["json"] = raw("POST", path, json.dumps({"chat_id": 1, "photo": "evil.example/a"}).encode(),
                  {"Content-Type": "application/json"})
out["query"] = raw("GET", path + "?chat_id=1&photo=http%3A%2F%2Fevil.example%2Fa")
part = b'--b\r\nContent-Disposition : form-data; name="photo"\r\n\r\nhttps://evil.example/\r\n--b--\r\n'
out["colon"] = raw("POST", path, part, {"Content-Type": "multipart/form-data; boundary=b"})
part = (b'--b\r\nContent-Disposition: form-data; name="caption"; name="photo"\r\n\r\n'
        b'https://evil.example/\r\n--b--\r\n')
out["two names"] = raw("POST", path, part, {"Content-Type": "multipart/form-data; boundary=b"})
part = (b'--a\r\nContent-Disposition: form-data; name="photo"\r\n\r\nhttps://evil.example/\r\n'
        b'--a--\r\n')
out["xboundary"] = raw("POST", path, part,
                       {"Content-Type": "multipart/form-data; xboundary=a; boundary=b"})
''')
    records = seen()
    assert all("evil.example" not in json.dumps(record) for record in records), records
    assert [record["path"].replace(token, "T") for record in records] == [
        "/botT/getMe", "/botT/sendPhoto", "/botT/sendPhoto", "/botT/sendPhoto",
        "/botT/sendPhoto"], records
    assert out["ptb upload"] == out["aiogram upload"] == "photo-7", out
    for client in ("ptb", "aiogram"):
        assert NOT_URL.format("photo") in out[f"{client} url"][1], out
        assert NOT_URL.format("media") in out[f"{client} group"][1], out
    for way, where in (("form", "form"), ("json", "JSON"), ("query", "query")):
        status, body = out[way]
        assert status == 403, (way, body)
        assert json.loads(body)["description"] == f"{where} {NOT_URL.format('photo')}", body
    assert out["colon"][0] == 400 and "no space before the colon" in out["colon"][1], out
    assert out["two names"][0] == 400 and "name or filename twice" in out["two names"][1], out
    assert out["xboundary"][0] == 400 and "names its boundary once" in out["xboundary"][1], out
    assert token not in done.stdout + done.stderr
