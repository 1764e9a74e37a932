"""The secret verb's shell (lnk_proxy/secret_verb.py) over a real store of secrets in a
temp settings folder: the order secret → rule → admit → request, what reaches the upstream
request (the real secret where the rule puts it, never the placeholder, no inbound
credential), a rotated secret or rule taking effect at once, and how each refusal counts.
The proxy's wiring (the gate, TLS out, the log) is tested where it is wired.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import h11
import orjson
import pytest

from lnk_common.secrets import remove_secret, write_rule, write_secret
from lnk_common.wire import Refused
from lnk_proxy import secret_rules as s
from lnk_proxy.secret_verb import MAX_BODY_BYTES, SecretVerb, split_secret

RULE = (Path(__file__).parent.parent / "examples" / "telegram-rule.json").read_bytes()
SECRET = b"123456:AAH-real_bot-token-MARKER"
PLACEHOLDER = b"123456:0123456789abcdef0123456789abcdef"


@pytest.fixture
def settings(tmp_path: Path) -> str:
    root = tmp_path / "settings"
    root.mkdir(mode=0o700)
    write_rule(str(root), "telegram", RULE)
    write_secret(str(root), "telegram", SECRET)
    return str(root)


@pytest.fixture
def verb(settings: str) -> SecretVerb:
    return SecretVerb(placeholders={"telegram": PLACEHOLDER}, settings=settings)


def refused(call: Callable[[], object]) -> Refused:
    with pytest.raises(Refused) as caught:
        call()
    assert "\n" not in caught.value.reason
    assert PLACEHOLDER.decode() not in caught.value.reason
    assert SECRET.decode() not in caught.value.reason
    return caught.value


def call(verb: SecretVerb, method: bytes, rest: str, headers: list[tuple[bytes, bytes]],
         body: bytes = b"") -> tuple[h11.Request, bytes, str]:
    name, target = verb.secret(rest)
    rule = verb.rule(name)
    admitted = verb.admit(name, rule, method, target, headers)
    request, sent = verb.request(admitted, body)
    return request, sent, admitted.authority


def test_a_call_goes_upstream_with_the_real_token_and_no_inbound_credential(
        verb: SecretVerb) -> None:
    body = orjson.dumps({"chat_id": 42, "text": "hi"})
    request, sent, authority = call(verb, b"POST", f"/telegram/bot{PLACEHOLDER.decode()}"
                                    "/sendMessage", [
        (b"Host", b"127.0.0.1:3128"), (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(body)).encode()), (b"Authorization", b"Bearer x"),
        (b"Cookie", b"a=b"), (b"Connection", b"keep-alive"), (b"User-Agent", b"ptb")], body)
    assert authority == "api.telegram.org:443"
    assert sent == body
    assert request.method == b"POST"
    assert request.target == b"/bot" + SECRET + b"/sendMessage"
    assert list(request.headers) == [
        (b"host", b"api.telegram.org"), (b"content-type", b"application/json"),
        (b"user-agent", b"ptb"), (b"content-length", str(len(body)).encode())]
    everything = repr(request).encode() + sent
    assert PLACEHOLDER not in everything


def test_a_file_download_and_a_get_with_a_query(verb: SecretVerb) -> None:
    request, _, _ = call(verb, b"GET", f"/telegram/file/bot{PLACEHOLDER.decode()}"
                         "/photos/file_0.jpg", [])
    assert request.target == b"/file/bot" + SECRET + b"/photos/file_0.jpg"
    request, _, _ = call(verb, b"GET", f"/telegram/bot{PLACEHOLDER.decode()}"
                         "/getUpdates?offset=3", [])
    assert request.target == b"/bot" + SECRET + b"/getUpdates?offset=3"
    assert (b"content-length", b"0") not in request.headers


@pytest.mark.parametrize(("rest", "status"), [
    ("", 404), ("/", 404), ("/telegram", 404), ("/telegram?x", 404), ("/Telegram/bot/getMe", 404),
    ("/other/bot/getMe", 404), ("/tele.gram/x", 404), ("/%74elegram/x", 404),
])
def test_a_name_not_named_is_404_and_not_echoed(verb: SecretVerb, rest: str,
                                                status: int) -> None:
    error = refused(lambda: verb.secret(rest))
    assert error.status == status
    assert "Telegram" not in error.reason and "other" not in error.reason


def test_split_secret() -> None:
    assert split_secret("/telegram/bot1/getMe") == ("telegram", "/bot1/getMe")
    assert split_secret("/telegram/") == ("telegram", "/")


@pytest.mark.parametrize(("method", "target", "headers", "status"), [
    (b"GET", "/bot{P}/setWebhook", [], 403),
    (b"GET", "/bot{P}/SetWebhook", [], 403),
    (b"GET", "/bot{P}/getMe?method=close", [], 403),
    (b"GET", "/bot123456:guess/getMe", [], 403),
    (b"GET", "/bot{P}/get%4De", [], 400),
    (b"GET", "/bot{P}/g\u00e9tMe", [], 400),
    (b"GET", "/bot{P}/g\u20acMe", [], 400),
    (b"DELETE", "/bot{P}/getMe", [], 405),
    (b"POST", "/bot{P}/getMe", [(b"Content-Encoding", b"gzip")], 415),
    (b"POST", "/bot{P}/sendPhoto", [(b"Content-Type", b"text/plain"),
                                    (b"content-type", b"application/json")], 400),
])
def test_a_call_refused_before_its_body_counts(
        verb: SecretVerb, method: bytes, target: str, headers: list[tuple[bytes, bytes]],
        status: int) -> None:
    rule = verb.rule("telegram")
    error = refused(lambda: verb.admit("telegram", rule, method,
                                       target.replace("{P}", PLACEHOLDER.decode()), headers))
    assert (error.status, error.counts) == (status, True)


def test_a_body_naming_a_method_is_refused(verb: SecretVerb) -> None:
    rule = verb.rule("telegram")
    admitted = verb.admit("telegram", rule, b"POST", f"/bot{PLACEHOLDER.decode()}/getMe",
                          [(b"content-type", b"application/x-www-form-urlencoded")])
    error = refused(lambda: verb.request(admitted, b"method=setWebhook&url=x"))
    assert (error.status, error.counts) == (403, True)


def test_a_missing_or_bad_secret_or_rule_is_403_final_not_counted(verb: SecretVerb,
                                                            settings: str) -> None:
    write_rule(settings, "telegram", b'{"host": "api.telegram.org", "paths": ["/x"]}')
    error = refused(lambda: verb.rule("telegram"))
    assert (error.status, error.counts, error.final) == (403, False, True)
    assert error.reason == ("the rule kept with the secret telegram is refused: paths[0]: "
                            "{secret} stands nowhere (put it in the path shape or give a header)")
    write_rule(settings, "telegram", RULE)
    rule = verb.rule("telegram")
    admitted = verb.admit("telegram", rule, b"GET", f"/bot{PLACEHOLDER.decode()}/getMe", [])
    write_secret(settings, "telegram", b"123456:has/slash")
    error = refused(lambda: verb.request(admitted, b""))
    assert (error.status, error.counts, error.final) == (403, False, True)
    assert remove_secret(settings, "telegram")
    error = refused(lambda: verb.rule("telegram"))
    assert (error.status, error.counts, error.final) == (403, False, True)
    assert error.reason.startswith("no usable rule for the secret telegram: no rule is kept")


def test_a_rotated_secret_and_a_new_rule_take_effect_at_once(verb: SecretVerb,
                                                             settings: str) -> None:
    write_secret(settings, "telegram", b"123456:ROTATED")
    request, _, _ = call(verb, b"GET", f"/telegram/bot{PLACEHOLDER.decode()}/getMe", [])
    assert request.target == b"/bot123456:ROTATED/getMe"
    moved = orjson.loads(RULE)
    moved["host"] = "api.example.org"
    write_rule(settings, "telegram", orjson.dumps(moved))
    request, _, authority = call(verb, b"GET", f"/telegram/bot{PLACEHOLDER.decode()}/getMe", [])
    assert authority == "api.example.org:443"
    assert (b"host", b"api.example.org") in request.headers
    assert verb.pool("api.example.org:443") is not verb.pool("api.telegram.org:443")
    assert verb.pool("api.example.org:443") is verb.pool("api.example.org:443")


def test_a_header_rule_adds_its_header_and_drops_the_placeholder(settings: str) -> None:
    write_rule(settings, "service", orjson.dumps({
        "host": "api.service.example", "paths": ["/v1/{name}"],
        "header": "Authorization: Bearer {secret}"}))
    write_secret(settings, "service", b"sk-real-MARKER")
    verb = SecretVerb(placeholders={"service": b"ph-123"}, settings=settings)
    request, _, _ = call(verb, b"GET", "/service/v1/things",
                         [(b"Authorization", b"Bearer ph-123"), (b"X-Api-Key", b"other")])
    assert request.target == b"/v1/things"
    assert list(request.headers) == [
        (b"host", b"api.service.example"), (b"authorization", b"Bearer sk-real-MARKER")]
    rule = verb.rule("service")
    error = refused(lambda: verb.admit("service", rule, b"GET", "/v1/things",
                                       [(b"Authorization", b"Bearer wrong")]))
    assert error.status == 403


def test_headers_that_change_the_method_or_path_at_the_service_are_dropped(
        settings: str) -> None:
    """As toward every provider (issue 27, item 7): a service that reads
    X-HTTP-Method-Override would run another method than the one the rule checked."""
    write_rule(settings, "service", orjson.dumps({
        "host": "api.service.example", "paths": ["/v1/{name}"],
        "header": "Authorization: Bearer {secret}"}))
    write_secret(settings, "service", b"sk-real")
    verb = SecretVerb(placeholders={"service": b"ph-123"}, settings=settings)
    request, _, _ = call(verb, b"GET", "/service/v1/things", [
        (b"Authorization", b"Bearer ph-123"), (b"X-HTTP-Method-Override", b"DELETE"),
        (b"x_method_override", b"PUT"), (b"X-Original-URL", b"/v1/delete")])
    assert list(request.headers) == [
        (b"host", b"api.service.example"), (b"authorization", b"Bearer sk-real")]


def test_the_body_limit_is_telegrams_upload_limit() -> None:
    assert MAX_BODY_BYTES == 50 * 1024 * 1024
    assert s.MAX_TARGET_BYTES < 32 * 1024


def test_a_verb_needs_a_placeholder_for_each_name(settings: str) -> None:
    with pytest.raises(ValueError, match="needs a placeholder"):
        SecretVerb(placeholders={"telegram": b""}, settings=settings)
    with pytest.raises(ValueError, match="name"):
        SecretVerb(placeholders={"a.b": b"x"}, settings=settings)


def test_a_photo_by_url_is_refused_naming_the_parameter(verb: SecretVerb) -> None:
    rule = verb.rule("telegram")
    admitted = verb.admit("telegram", rule, b"POST", f"/bot{PLACEHOLDER.decode()}/sendPhoto",
                          [(b"content-type", b"application/x-www-form-urlencoded")])
    error = refused(lambda: verb.request(admitted, b"chat_id=1&photo=evil.example%2Fa.jpg"))
    assert (error.status, error.counts) == (403, True)
    assert error.reason.startswith("form parameter photo: Telegram fetches a URL given there")
