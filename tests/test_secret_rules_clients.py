"""The Telegram rule against the real clients a bot is written with: python-telegram-bot (its
`base_url`, `base_file_url`) and aiogram (`TelegramAPIServer.from_base`), holding only the
placeholder make_placeholder gives, against a fake Bot API on loopback that decides each
call with secret_rules as the proxy will (match, check_body, fill) and records what would go
upstream.

This shows that the shapes the clients build are the rule's shapes, that their bodies pass
check_body, that aiogram's token check accepts the placeholder, and that every refused
method reaches the client as an error. The proxy's own wiring (TLS out, the gate, the log)
is tested where it is wired.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

# The two clients (test dependencies, pyproject.toml) are imported in the tests that use
# them, not here: importing aiogram takes about 3 s of CPU, which every pytest-xdist worker
# paid at collection (CI's eight), whichever ran these tests. Missing, those tests fail on
# their import, never skip.
import orjson
import pytest

from lnk_proxy import secret_rules as s

RULE = s.parse_rule((Path(__file__).parent.parent / "examples" / "telegram-rule.json")
                    .read_bytes())
SECRET = b"123456:AAH-real_bot-token-MARKER"
PREFIX = "/_link/secret/telegram"
USER = {"id": 123456, "is_bot": True, "first_name": "b", "username": "b_bot"}
MESSAGE = {"message_id": 1, "date": 0, "chat": {"id": 42, "type": "private"}, "text": "hi"}
FILE = {"file_id": "abc", "file_unique_id": "u", "file_size": 3,
        "file_path": "photos/file_0.jpg"}
RESULTS: dict[str, object] = {"getme": USER, "sendmessage": MESSAGE, "sendphoto": MESSAGE,
                              "getupdates": [],
                              "getfile": FILE, "close": True, "logout": True,
                              "setwebhook": True, "deletewebhook": True}


class FakeBotApi(http.server.ThreadingHTTPServer):
    """Decides each call under PREFIX with the rule; records (upstream target, body) of
    what passed and the refusals' reasons."""

    def __init__(self, placeholder: bytes) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.placeholder = placeholder
        self.passed: list[tuple[bytes, bytes]] = []
        self.refused: list[str] = []


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeBotApi

    def log_message(self, *_: object) -> None:
        pass

    def handle_any(self) -> None:
        body = self.read_body()
        target = self.path.encode("latin-1")
        assert target.startswith(PREFIX.encode())
        headers = [(name.encode(), value.encode()) for name, value in self.headers.items()]
        try:
            matched = s.match(RULE, self.command.encode(), target[len(PREFIX):],
                              self.server.placeholder, headers)
            s.check_body(RULE, self.headers.get("Content-Type", "").encode(), body)
            upstream = s.fill(matched, SECRET)
        except s.SecretRuleError as error:
            self.server.refused.append(error.reason)
            self.answer(error.status, {"ok": False, "error_code": error.status,
                                       "description": error.reason})
            return
        self.server.passed.append((upstream.target, body))
        if upstream.target.startswith(b"/file/"):
            self.answer(200, None, raw=b"JPG")
        else:
            assert matched.name is not None
            self.answer(200, {"ok": True, "result": RESULTS[matched.name.decode().lower()]})

    do_GET = do_POST = handle_any

    def read_body(self) -> bytes:
        """The body whole, by Content-Length or chunked (aiohttp sends multipart so)."""
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";")[0], 16)
            chunk = self.rfile.read(size)
            self.rfile.readline()
            if not size:
                return b"".join(chunks)
            chunks.append(chunk)

    def answer(self, status: int, document: object, raw: bytes | None = None) -> None:
        out = raw if raw is not None else orjson.dumps(document)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


@pytest.fixture
def bot_api() -> Iterator[FakeBotApi]:
    server = FakeBotApi(s.make_placeholder(RULE, SECRET))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def base_of(server: FakeBotApi) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{PREFIX}"


def test_aiogram_calls_pass_with_the_placeholder_and_refused_methods_fail(
        bot_api: FakeBotApi) -> None:
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.exceptions import TelegramAPIError
    from aiogram.types import BufferedInputFile
    from aiogram.utils.token import validate_token

    placeholder = bot_api.placeholder.decode()
    assert validate_token(placeholder)  # aiogram's own token check takes the placeholder

    async def calls() -> list[str]:
        session = AiohttpSession(api=TelegramAPIServer.from_base(base_of(bot_api)))
        bot = Bot(token=placeholder, session=session)
        failed = []
        try:
            assert (await bot.get_me()).id == 123456
            assert (await bot.send_message(chat_id=42, text="hi & method=close")).text == "hi"
            await bot.send_photo(chat_id=42, photo=BufferedInputFile(b"JPG", "a.jpg"),
                                 caption="method")
            assert await bot.get_updates(offset=10, timeout=0) == []
            found = await bot.get_file("abc")
            assert found.file_path is not None
            downloaded = await bot.download_file(found.file_path)
            assert downloaded is not None and downloaded.read() == b"JPG"
            for refused in (bot.set_webhook("https://example.com/hook"), bot.delete_webhook(),
                            bot.log_out(), bot.close()):
                try:
                    await refused
                except TelegramAPIError as error:
                    failed.append(type(error).__name__)
        finally:
            await session.close()
        return failed

    failed = asyncio.run(calls())
    assert len(failed) == 4
    targets = [target for target, _ in bot_api.passed]
    assert targets == [b"/bot" + SECRET + b"/getMe", b"/bot" + SECRET + b"/sendMessage",
                       b"/bot" + SECRET + b"/sendPhoto", b"/bot" + SECRET + b"/getUpdates",
                       b"/bot" + SECRET + b"/getFile",
                       b"/file/bot" + SECRET + b"/photos/file_0.jpg"]
    assert bot_api.refused == ["this name is refused by the secret's rule (whatever its case)"] * 4
    assert all(bot_api.placeholder not in body for _, body in bot_api.passed)


def test_python_telegram_bot_calls_pass_with_the_placeholder_and_refused_methods_fail(
        bot_api: FakeBotApi) -> None:
    from telegram import Bot
    from telegram.error import TelegramError

    placeholder = bot_api.placeholder.decode()

    async def calls() -> list[str]:
        bot = Bot(token=placeholder, base_url=base_of(bot_api) + "/bot",
                  base_file_url=base_of(bot_api) + "/file/bot")
        failed = []
        async with bot:
            assert (await bot.get_me()).id == 123456
            assert (await bot.send_message(chat_id=42, text="hi")).text == "hi"
            await bot.send_photo(chat_id=42, photo=b"JPG", caption="method")
            assert await bot.get_updates(offset=10, timeout=0) == ()
            found = await bot.get_file("abc")
            assert bytes(await found.download_as_bytearray()) == b"JPG"
            for refused in (bot.set_webhook("https://example.com/hook"), bot.delete_webhook(),
                            bot.log_out(), bot.close()):
                try:
                    await refused
                except TelegramError as error:
                    failed.append(type(error).__name__)
        return failed

    failed = asyncio.run(calls())
    assert len(failed) == 4
    targets = [target for target, _ in bot_api.passed]
    assert b"/bot" + SECRET + b"/getMe" in targets
    assert b"/bot" + SECRET + b"/sendMessage" in targets
    assert b"/bot" + SECRET + b"/sendPhoto" in targets
    assert b"/file/bot" + SECRET + b"/photos/file_0.jpg" in targets
    assert set(bot_api.refused) == {
        "this name is refused by the secret's rule (whatever its case)"}
    assert all(bot_api.placeholder not in body for _, body in bot_api.passed)


URL_REFUSED = ("parameter photo: Telegram fetches a URL given there, and this secret's rule "
               "(not_urls) takes only a file_id, attach://<part> or an upload")
MEDIA_REFUSED = ("parameter media: Telegram fetches a URL given there, and this secret's rule "
                 "(not_urls) takes only a file_id, attach://<part> or an upload")


def test_python_telegram_bot_media_by_url_is_refused_by_upload_and_file_id_passes(
        bot_api: FakeBotApi) -> None:
    """sendPhoto with a URL (which Telegram would fetch) and sendMediaGroup with one are
    refused, the reason naming the parameter; the same photo uploaded or by file_id passes."""
    from telegram import Bot, InputMediaPhoto
    from telegram.error import TelegramError

    async def calls() -> list[str]:
        bot = Bot(token=bot_api.placeholder.decode(), base_url=base_of(bot_api) + "/bot",
                  base_file_url=base_of(bot_api) + "/file/bot")
        shown = []
        async with bot:
            for refused in (bot.send_photo(chat_id=42, photo="https://evil.example/a.jpg"),
                            bot.send_media_group(chat_id=42, media=[
                                InputMediaPhoto(b"JPG"),
                                InputMediaPhoto("https://evil.example/b.jpg")])):
                try:
                    await refused
                except TelegramError as error:
                    shown.append(str(error))
            await bot.send_photo(chat_id=42, photo=b"JPG")
            await bot.send_photo(chat_id=42, photo="AgACAgIAAxkBAAIBZ2V-file_id")
        return shown

    shown = asyncio.run(calls())
    assert len(shown) == 2 and URL_REFUSED in shown[0] and MEDIA_REFUSED in shown[1], shown
    assert [target for target, _ in bot_api.passed][-2:] == [b"/bot" + SECRET + b"/sendPhoto"] * 2
    assert all(b"evil.example" not in body for _, body in bot_api.passed)


def test_aiogram_media_by_url_is_refused_by_upload_and_file_id_passes(
        bot_api: FakeBotApi) -> None:
    from aiogram import Bot
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.exceptions import TelegramAPIError
    from aiogram.types import BufferedInputFile, InputMediaPhoto

    async def calls() -> list[str]:
        session = AiohttpSession(api=TelegramAPIServer.from_base(base_of(bot_api)))
        bot = Bot(token=bot_api.placeholder.decode(), session=session)
        shown = []
        try:
            for refused in (bot.send_photo(chat_id=42, photo="https://evil.example/a.jpg"),
                            bot.send_media_group(chat_id=42, media=[
                                InputMediaPhoto(media=BufferedInputFile(b"JPG", "a.jpg")),
                                InputMediaPhoto(media="https://evil.example/b.jpg")])):
                try:
                    await refused
                except TelegramAPIError as error:
                    shown.append(str(error))
            await bot.send_photo(chat_id=42, photo=BufferedInputFile(b"JPG", "a.jpg"))
            await bot.send_photo(chat_id=42, photo="AgACAgIAAxkBAAIBZ2V-file_id")
        finally:
            await session.close()
        return shown

    shown = asyncio.run(calls())
    assert len(shown) == 2 and URL_REFUSED in shown[0] and MEDIA_REFUSED in shown[1], shown
    assert [target for target, _ in bot_api.passed][-2:] == [b"/bot" + SECRET + b"/sendPhoto"] * 2
    assert all(b"evil.example" not in body for _, body in bot_api.passed)
