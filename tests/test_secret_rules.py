"""The secret verb's sans-IO rules (lnk_proxy/secret_rules.py): the rule's parser, the
placeholder, the matcher, the body check and fill.

Tables with the exact reason of each refusal, a golden of the Telegram rule's accepted and
refused calls (tests/golden/secret_telegram.json), limits tested at the limit, and
Hypothesis: random rules parse or raise SecretRuleError; random targets never match into a
refused name, a relative or encoded segment; a refusal never quotes the placeholder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_proxy import secret_rules as s
from lnk_proxy.secret_rules import SecretRuleError
from tests.conftest import fuzz

ROOT = Path(__file__).parent.parent
GOLDEN = Path(__file__).parent / "golden" / "secret_telegram.json"
TELEGRAM = (ROOT / "examples" / "telegram-rule.json").read_bytes()
TG_RULE = s.parse_rule(TELEGRAM)
PLACEHOLDER = b"123456:PLACEHOLDERPLACEHOLDER0000"
SECRET = b"123456:AAH-real_token-DO-NOT-LEAK"
# The placeholder as urllib.parse.quote spells it (python-telegram-bot's file URLs).
ENCODED = PLACEHOLDER.replace(b":", b"%3A")


def rule(**fields: Any) -> s.Rule:
    document: dict[str, Any] = {"host": "api.example.com", "paths": ["/x/{secret}/{name}"]}
    document.update(fields)
    return s.parse_rule(orjson.dumps(document))


def refusal(call: Any) -> SecretRuleError:
    with pytest.raises(SecretRuleError) as caught:
        call()
    error = caught.value
    assert error.reason and "\n" not in error.reason and "\r" not in error.reason
    return error


def parse_refusal(document: Any) -> str:
    raw = document if isinstance(document, bytes) else orjson.dumps(document)
    return refusal(lambda: s.parse_rule(raw)).reason


TG = s.parse_rule(TELEGRAM)


def tg_match(target: bytes, method: bytes = b"GET", placeholder: bytes = PLACEHOLDER
             ) -> s.Matched:
    return s.match(TG, method, target, placeholder)


# --- the example rule ---


def test_telegram_rule_parses_as_documented() -> None:
    assert TG.host == "api.telegram.org"
    assert TG.port == s.UPSTREAM_PORT == 443
    assert TG.header is None
    assert TG.refused == {b"setwebhook", b"deletewebhook", b"logout", b"close",
                          b"getmanagedbottoken", b"replacemanagedbottoken"}
    assert TG.placeholder == "{id}:{random}"
    assert TG.methods == {b"GET", b"POST"}
    assert [[part.kind for part in shape] for shape in TG.shapes] == [
        ["secret", "name"], ["literal", "secret", "path"]]


def test_the_spec_example_rule_parses_too() -> None:
    spec = (ROOT / "docs" / "SPEC.md").read_text()
    found = re.search(r"## Secret rules.*?```json\n(.*?)```", spec, re.S)
    assert found is not None
    parsed = s.parse_rule(found.group(1).encode())
    assert parsed.host == "api.telegram.org"


# --- the golden table of Telegram's calls ---

# (method, the target after /_link/secret/telegram with {P} for the placeholder)
TELEGRAM_CALLS: list[tuple[str, str]] = [
    ("GET", "/bot{P}/getMe"),
    ("POST", "/bot{P}/sendMessage"),
    ("GET", "/bot{P}/getUpdates?offset=10&timeout=30"),
    ("GET", "/bot{P}/sendMessage?chat_id=42&text=hello%20world%21"),
    ("GET", "/file/bot{P}/photos/file_0.jpg"),
    ("GET", "/file/bot{P}/documents/a.b.c.pdf"),
    ("POST", "/bot{P}/getFile"),
    ("HEAD", "/bot{P}/getMe"),
    ("PUT", "/bot{P}/getMe"),
    ("CONNECT", "/bot{P}/getMe"),
    ("GET", "/bot{P}/setWebhook"),
    ("GET", "/bot{P}/setwebhook"),
    ("GET", "/bot{P}/SETWEBHOOK"),
    ("GET", "/bot{P}/setWebhook/"),
    ("GET", "/bot{P}/setWebhook."),
    ("GET", "/bot{P}/set%57ebhook"),
    ("GET", "/bot{P}/setWebhook%2f"),
    ("GET", "/bot{P}/logOut"),
    ("GET", "/bot{P}/close"),
    ("GET", "/bot{P}/Close"),
    ("GET", "/bot{P}/deleteWebhook"),
    ("GET", "/bot{P}/getManagedBotToken"),
    ("GET", "/bot{P}/REPLACEMANAGEDBOTTOKEN"),
    ("GET", "/bot{P}/"),
    ("GET", "/bot{P}/.."),
    ("GET", "/bot{P}/."),
    ("GET", "/bot{P}/getMe/../setWebhook"),
    ("GET", "/bot{P}/getMe%2f..%2fsetWebhook"),
    ("GET", "/bot{P}//getMe"),
    ("GET", "/bot{P}/get\\Me"),
    ("GET", "/bot{P}/getMe;x"),
    ("GET", "/bot{P}/get-Me"),
    ("GET", "/bot{P}/getMe?method=setWebhook"),
    ("GET", "/bot{P}/getMe?METHOD=setWebhook"),
    ("GET", "/bot{P}/getMe?%6Dethod=setWebhook"),
    ("GET", "/bot{P}/getMe?a=1;method=setWebhook"),
    ("GET", "/bot{P}/getMe?a=%zz"),
    ("GET", "/bot{P}/getMe?"),
    ("GET", "/bot{P}/getMe?a=1&&b=2"),
    ("GET", "/bot{P}/getMe#x"),
    ("GET", "/bot{P}?method=setWebhook"),
    ("GET", "/bot{P}/?method=setWebhook"),
    ("GET", "/bot123456:guess/getMe"),
    ("GET", "/bot/getMe"),
    ("GET", "/BOT{P}/getMe"),
    ("GET", "/bot{P}x/getMe"),
    ("GET", "/bot{P}/getMe/extra"),
    ("GET", "/file/bot{P}/"),
    ("GET", "/file/bot{P}/photos/../../setWebhook"),
    ("GET", "/file/bot{P}/photos/%2e%2e/x"),
    ("GET", "/file/bot{P}/close"),
    ("GET", "/file/bot{P}/photos/setWebhook.json"),
    ("GET", "/File/bot{P}/photos/a.jpg"),
    ("GET", "bot{P}/getMe"),
    ("GET", ""),
    ("GET", "/"),
    ("GET", "/file/bot{E}/photos/file_0.jpg"),
    ("GET", "/bot{E}/getMe"),
    ("GET", "/bot{E}/set%57ebhook"),
    ("GET", "/file/bot{E}/photos/a%3Ab"),
    ("GET", "/file/bot{P}/photos/a%3Ab"),
    ("GET", "/file/bot{P}/a%3A/b"),
    ("GET", "/file/bot{E}x/photos/a.jpg"),
    ("GET", "/file/bot123456%3aPLACEHOLDERPLACEHOLDER0000/photos/a.jpg"),
    ("GET", "/file/bot123456%253APLACEHOLDERPLACEHOLDER0000/photos/a.jpg"),
    ("GET", "/bot{P}/getMe\x00"),
    ("GET", "/bot{P}/g\u00e9tMe"),
]


def telegram_outcomes() -> list[dict[str, str]]:
    outcomes = []
    for method, shown in TELEGRAM_CALLS:
        target = shown.replace("{P}", PLACEHOLDER.decode()).replace(
            "{E}", ENCODED.decode()).encode()
        try:
            upstream = s.fill(tg_match(target, method.encode()), SECRET)
        except SecretRuleError as error:
            outcome = f"{error.status} {error.reason}"
        else:
            outcome = "upstream " + upstream.target.decode().replace(SECRET.decode(), "{SECRET}")
        outcomes.append({"method": method, "target": shown, "outcome": outcome})
    return outcomes


def test_golden_telegram_calls_accepted_and_refused() -> None:
    found = telegram_outcomes()
    if os.environ.get("LNK_GOLDEN_WRITE") == "1":
        GOLDEN.write_bytes(orjson.dumps(found, option=orjson.OPT_INDENT_2) + b"\n")
    assert found == orjson.loads(GOLDEN.read_bytes())


def test_every_acceptance_spelling_is_refused() -> None:
    # ../shared/acceptance/secrets-local's list, as curl --path-as-is sends it.
    for spelling in ["setWebhook", "setwebhook", "SETWEBHOOK", "setWebhook/", "setWebhook.",
                     "set%57ebhook", "setWebhook%2f", "logOut", "close", "Close",
                     "deleteWebhook", "", "..", "getMe/../setWebhook",
                     "getMe%2f..%2fsetWebhook"]:
        target = b"/bot" + PLACEHOLDER + b"/" + spelling.encode()
        error = refusal(lambda target=target: tg_match(target))
        assert 400 <= error.status < 500
    refusal(lambda: tg_match(b"/bot123456:guess/getMe"))


def test_ordinary_calls_reach_the_service_with_the_real_token() -> None:
    upstream = s.fill(tg_match(b"/bot" + PLACEHOLDER + b"/getMe"), SECRET)
    assert (upstream.host, upstream.port, upstream.authority) == (
        "api.telegram.org", 443, "api.telegram.org:443")
    assert upstream.target == b"/bot" + SECRET + b"/getMe"
    assert upstream.header is None
    upstream = s.fill(tg_match(b"/file/bot" + PLACEHOLDER + b"/photos/a.jpg?x=1"), SECRET)
    assert upstream.target == b"/file/bot" + SECRET + b"/photos/a.jpg?x=1"
    matched = tg_match(b"/bot" + PLACEHOLDER + b"/sendMessage", b"POST")
    assert matched.name == b"sendMessage" and matched.method == b"POST"
    assert SECRET.decode() not in repr(matched)
    assert SECRET.decode() not in repr(upstream) and "photos" not in repr(upstream)


# --- the placeholder ---


def test_placeholder_of_telegram_keeps_the_bot_id_and_is_random() -> None:
    first = s.make_placeholder(TG, SECRET)
    second = s.make_placeholder(TG, SECRET)
    assert re.fullmatch(rb"123456:[0-9a-f]{32}", first)
    assert first != second
    # aiogram's token check (utils/token.py): no spaces, `<digits>:<non-empty>`.
    left, _, right = first.partition(b":")
    assert left.isdigit() and right and b" " not in first
    assert SECRET.split(b":")[1] not in first


def test_placeholder_shapes() -> None:
    random_only = rule(placeholder="{random}")
    assert re.fullmatch(rb"[0-9a-f]{32}", s.make_placeholder(random_only, SECRET))
    by_default = rule()
    assert by_default.placeholder is None
    assert s.make_placeholder(by_default, SECRET).startswith(b"123456:")
    assert re.fullmatch(rb"[0-9a-f]{32}", s.make_placeholder(by_default, b"sk-abc:def"))
    assert re.fullmatch(rb"[0-9a-f]{32}", s.make_placeholder(by_default, b"tokenonly"))
    with_id = rule(placeholder="{id}:{random}")
    error = refusal(lambda: s.make_placeholder(with_id, b"tokenonly"))
    assert error.reason == ("the rule's placeholder is {id}:{random}, and the secret does not "
                            "start with ASCII digits and a ':'")
    assert b"tokenonly" not in error.reason.encode()


def test_placeholder_differing_in_one_byte_anywhere_gets_one_refusal() -> None:
    reasons = set()
    for at in range(len(PLACEHOLDER)):
        for byte in (b"0", b"z", b"A"):
            changed = PLACEHOLDER[:at] + byte + PLACEHOLDER[at + 1:]
            if changed == PLACEHOLDER:
                continue
            error = refusal(lambda changed=changed: tg_match(b"/bot" + changed + b"/getMe"))
            reasons.add((error.status, error.reason))
    for wrong in (PLACEHOLDER[:-1], PLACEHOLDER + b"0", b"123456:", b"x"):
        error = refusal(lambda wrong=wrong: tg_match(b"/bot" + wrong + b"/getMe"))
        reasons.add((error.status, error.reason))
    assert reasons == {(403, "the call does not carry the placeholder this sandbox was given "
                             "where the rule puts the secret")}


def test_no_placeholder_given_to_the_matcher_is_refused() -> None:
    error = refusal(lambda: s.match(TG, b"GET", b"/bot/getMe", b""))
    assert error.status == 500


# --- rules refused, each with its field named ---

BAD_RULES: list[tuple[Any, str]] = [
    (b"", "a rule is one JSON object (this is not valid JSON)"),
    (b"{", "a rule is one JSON object (this is not valid JSON)"),
    ([], "a rule is one JSON object"),
    ({"paths": ["/x{secret}"]}, "host: missing (the one host the secret may go to)"),
    ({"host": "a.b"}, "paths: missing (the path shapes a call may take)"),
    ({"host": "a.b", "paths": ["/x{secret}"], "hosts": ["c.d"]},
     "unknown key in a rule (known: header, host, methods, not_urls, paths, placeholder, "
     "refuse); a key not known is refused, never ignored"),
    ({"host": "api.telegram.org/{path}", "paths": ["/x{secret}"]},
     "host: no placeholder ({secret}, {name}, {path}) may stand in the host; the rule fixes "
     "the one host"),
    ({"host": "{secret}.example.com", "paths": ["/x{secret}"]},
     "host: no placeholder ({secret}, {name}, {path}) may stand in the host; the rule fixes "
     "the one host"),
    ({"host": "user@a.b", "paths": ["/x{secret}"]},
     "host: no user part ('@'); a secret goes where the rule says"),
    ({"host": "a.b/x", "paths": ["/x{secret}"]}, "host: a name only, no scheme, path or query"),
    ({"host": "https://a.b", "paths": ["/x{secret}"]},
     "host: a name only, no scheme, path or query"),
    ({"host": "a.b:443", "paths": ["/x{secret}"]},
     "host: a name only, no port (the secret goes over TLS to port 443)"),
    ({"host": "A.b", "paths": ["/x{secret}"]}, "host: in lower case (one plain form)"),
    ({"host": "a.b.", "paths": ["/x{secret}"]},
     "host: a DNS name of two or more labels (letters, digits, '-'; no trailing dot)"),
    ({"host": "localhost", "paths": ["/x{secret}"]},
     "host: a DNS name of two or more labels (letters, digits, '-'; no trailing dot)"),
    ({"host": "-a.b", "paths": ["/x{secret}"]},
     "host: a DNS name of two or more labels (letters, digits, '-'; no trailing dot)"),
    ({"host": "10.0.0.1", "paths": ["/x{secret}"]}, "host: a name, not an address"),
    ({"host": "*.b.c", "paths": ["/x{secret}"]},
     "host: a DNS name of two or more labels (letters, digits, '-'; no trailing dot)"),
    ({"host": 5, "paths": ["/x{secret}"]}, "host: a DNS name, as a string"),
    ({"host": "a.b", "paths": []}, "paths: a non-empty list of path shapes"),
    ({"host": "a.b", "paths": "/x{secret}"}, "paths: a non-empty list of path shapes"),
    ({"host": "a.b", "paths": ["x{secret}"]},
     "paths[0]: a path shape is a string starting with '/'"),
    ({"host": "a.b", "paths": ["/x?token={secret}"]},
     "paths[0]: a shape is a path only: no query, so no secret in a query (a query is logged "
     "and cached where a path segment is not)"),
    ({"host": "a.b", "paths": ["/x/{name}"]},
     "paths[0]: {secret} stands nowhere (put it in the path shape or give a header)"),
    ({"host": "a.b", "paths": ["/x{secret}/{name}", "/y/{name}"]},
     "paths[1]: {secret} stands nowhere (put it in the path shape or give a header)"),
    ({"host": "a.b", "paths": ["/{secret}/{path}"]},
     "paths[0]: a literal segment must come before {path} (else {path} reaches every method)"),
    ({"host": "a.b", "paths": ["/bot{secret}/{path}"]},
     "paths[0]: a literal segment must come before {path} (else {path} reaches every method)"),
    ({"host": "a.b", "paths": ["/x/{path}/{secret}"]},
     "paths[0]: {path} stands only as the last part of a shape"),
    ({"host": "a.b", "paths": ["/x/{path}/y{secret}"]},
     "paths[0]: {path} stands only as the last part of a shape"),
    ({"host": "a.b", "paths": ["/x{secret}/{name}/{name}"]}, "paths[0]: {name} stands twice"),
    ({"host": "a.b", "paths": ["/x{secret}/y/{path}/{path}"]},
     "paths[0]: {path} stands twice"),
    ({"host": "a.b", "paths": ["/x{secret}/y{secret}"]}, "paths[0]: {secret} stands twice"),
    ({"host": "a.b", "paths": ["/x{secret}{secret}"]},
     "paths[0]: beside {secret} stand only letters, digits, '-', '.', '_', '~'"),
    ({"host": "a.b", "paths": ["/x{secret}/a{name}"]},
     "paths[0]: the placeholders are {secret}, {name} and {path} ({name} and {path} as a "
     "whole segment)"),
    ({"host": "a.b", "paths": ["/x{secret}/{token}"]},
     "paths[0]: the placeholders are {secret}, {name} and {path} ({name} and {path} as a "
     "whole segment)"),
    ({"host": "a.b", "paths": ["/x{secret}//{name}"]},
     "paths[0]: an empty segment ('//' or a trailing '/')"),
    ({"host": "a.b", "paths": ["/x{secret}/"]},
     "paths[0]: an empty segment ('//' or a trailing '/')"),
    ({"host": "a.b", "paths": ["/x{secret}/../{name}"]},
     "paths[0]: a literal segment is letters, digits, '-', '.', '_', '~' and not '.' or '..'"),
    ({"host": "a.b", "paths": ["/x{secret}/a%2fb"]},
     "paths[0]: a literal segment is letters, digits, '-', '.', '_', '~' and not '.' or '..'"),
    ({"host": "a.b", "paths": ["/x{secret}/a\\b"]},
     "paths[0]: a literal segment is letters, digits, '-', '.', '_', '~' and not '.' or '..'"),
    ({"host": "a.b", "paths": ["/x{secret}/close"], "refuse": ["Close"]},
     "paths[0]: a literal segment is a refused name"),
    ({"host": "a.b", "paths": ["/x{secret}/{name}", "/x{secret}/{name}"]},
     "paths[1]: the same shape twice"),
    ({"host": "a.b", "paths": ["/x{secret}"] * (s.MAX_PATHS + 1)},
     f"paths: at most {s.MAX_PATHS} shapes"),
    ({"host": "a.b", "paths": ["/" + "x" * s.MAX_SHAPE_BYTES + "{secret}"]},
     f"paths[0]: a shape is at most {s.MAX_SHAPE_BYTES} bytes"),
    ({"host": "a.b", "paths": ["/x{secret}"], "refuse": "close"}, "refuse: a list of names"),
    ({"host": "a.b", "paths": ["/x{secret}"], "refuse": ["set.Webhook"]},
     f"refuse: each name is 1 to {s.MAX_NAME_BYTES} ASCII letters and digits, as a {{name}} is"),
    ({"host": "a.b", "paths": ["/x{secret}"], "refuse": [""]},
     f"refuse: each name is 1 to {s.MAX_NAME_BYTES} ASCII letters and digits, as a {{name}} is"),
    ({"host": "a.b", "paths": ["/x{secret}"], "refuse": ["close", "CLOSE"]},
     "refuse: a name given twice (names are compared whatever their case)"),
    ({"host": "a.b", "paths": ["/x{secret}"],
      "refuse": [f"n{i}" for i in range(s.MAX_REFUSED_NAMES + 1)]},
     f"refuse: at most {s.MAX_REFUSED_NAMES} names (a longer list is an allow-list turned "
     "inside out)"),
    ({"host": "a.b", "paths": ["/x{secret}"], "placeholder": "{random}{random}"},
     "placeholder: one of {id}:{random}, {random} ({id} is the secret's digits before its "
     "first ':')"),
    ({"host": "a.b", "paths": ["/x{secret}"], "placeholder": None},
     "placeholder: one of {id}:{random}, {random} ({id} is the secret's digits before its "
     "first ':')"),
    ({"host": "a.b", "paths": ["/x{secret}"], "methods": ["get"]},
     "methods: each one of DELETE, GET, HEAD, PATCH, POST, PUT (upper case)"),
    ({"host": "a.b", "paths": ["/x{secret}"], "methods": ["CONNECT"]},
     "methods: each one of DELETE, GET, HEAD, PATCH, POST, PUT (upper case)"),
    ({"host": "a.b", "paths": ["/x{secret}"], "methods": []},
     "methods: a non-empty list of HTTP methods"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Cookie: s={secret}"},
     "header: the header is one of api-key, authorization, private-token, x-api-key, "
     "x-auth-token ('Name: text with {secret}')"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Host: {secret}"},
     "header: the header is one of api-key, authorization, private-token, x-api-key, "
     "x-auth-token ('Name: text with {secret}')"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Authorization Bearer {secret}"},
     "header: the header is one of api-key, authorization, private-token, x-api-key, "
     "x-auth-token ('Name: text with {secret}')"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Authorization: Bearer"},
     "header: {secret} stands exactly once in the header's value"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Authorization: {secret}{secret}"},
     "header: {secret} stands exactly once in the header's value"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Authorization: {name} {secret}"},
     "header: only {secret} may stand in the header's value"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Authorization: Bearer {secret}\r\nX: y"},
     "header: 'Name: text with {secret}', printable ASCII on one line"),
    ({"host": "a.b", "paths": ["/x/{name}"], "header": "Authorization: Bearer {secret} "},
     "header: no trailing space in the header's value"),
    ({"host": "a.b", "paths": ["/x{secret}/{name}"], "header": "Authorization: Bearer {secret}"},
     "paths[0]: the secret goes in the header; {secret} cannot also stand in a path"),
]


@pytest.mark.parametrize(("document", "reason"), BAD_RULES)
def test_rule_refused_with_the_field_named(document: Any, reason: str) -> None:
    assert parse_refusal(document) == reason


def test_rule_at_its_limits_parses() -> None:
    rule(paths=[f"/x{i}{{secret}}" for i in range(s.MAX_PATHS)])
    rule(refuse=[f"n{i}" for i in range(s.MAX_REFUSED_NAMES)])
    rule(refuse=["n" * s.MAX_NAME_BYTES])
    rule(paths=["/" + "x" * (s.MAX_SHAPE_BYTES - len("/{secret}")) + "{secret}"])
    body = orjson.dumps({"host": "a.b", "paths": ["/x{secret}"]})
    padded = body[:-1] + b" " * (s.MAX_RULE_BYTES - len(body)) + b"}"
    assert len(padded) == s.MAX_RULE_BYTES
    s.parse_rule(padded)
    assert parse_refusal(padded + b" ") == f"a rule is at most {s.MAX_RULE_BYTES} bytes"


def test_rule_fed_whole_in_every_prefix_and_with_trailing_data() -> None:
    for cut in range(len(TELEGRAM)):
        try:
            s.parse_rule(TELEGRAM[:cut])
        except SecretRuleError:
            continue
    assert parse_refusal(TELEGRAM + b"{}") == "a rule is one JSON object (this is not valid JSON)"


def test_target_fed_in_every_prefix_and_with_trailing_data() -> None:
    whole = b"/file/bot" + PLACEHOLDER + b"/photos/a.jpg?x=1"
    passed = []
    for cut in range(len(whole) + 1):
        try:
            tg_match(whole[:cut])
        except SecretRuleError:
            continue
        passed.append(whole[:cut])
    # Every prefix from the first byte of {path} on is a plain path, but those ending in
    # an empty segment or an empty query.
    start = len(b"/file/bot" + PLACEHOLDER + b"/p")
    assert passed == [whole[:cut] for cut in range(start, len(whole) + 1)
                      if whole[cut - 1:cut] not in (b"/", b"?")]
    for tail in (b"\x00", b"#", b"&", b"%", b";", b" ", b"\\"):
        refusal(lambda tail=tail: tg_match(whole + tail))


def test_the_store_bounds_a_rule_as_the_parser_does() -> None:
    from lnk_common.secrets import MAX_RULE_FILE_BYTES

    assert MAX_RULE_FILE_BYTES == s.MAX_RULE_BYTES


# --- header rules ---

BEARER = rule(paths=["/v1/{name}", "/files/{path}"], header="Authorization: Bearer {secret}",
              methods=["GET", "POST", "DELETE"])


def test_header_rule_takes_the_placeholder_from_its_header() -> None:
    assert BEARER.header == (b"authorization", b"Bearer ", b"")
    headers = [(b"Authorization", b"Bearer " + PLACEHOLDER), (b"Accept", b"*/*")]
    matched = s.match(BEARER, b"DELETE", b"/v1/things?x=1", PLACEHOLDER, headers)
    upstream = s.fill(matched, b"real-key")
    assert upstream.target == b"/v1/things?x=1"
    assert upstream.header == (b"authorization", b"Bearer real-key")
    assert b"real-key" not in repr(upstream).encode()
    matched = s.match(BEARER, b"GET", b"/files/a/b.txt", PLACEHOLDER, headers)
    assert s.fill(matched, b"k").target == b"/files/a/b.txt"


@pytest.mark.parametrize("headers", [
    [],
    [(b"Authorization", b"Bearer wrong")],
    [(b"Authorization", PLACEHOLDER)],
    [(b"X-Api-Key", b"Bearer " + PLACEHOLDER)],
    [(b"Authorization", b"Bearer " + PLACEHOLDER), (b"authorization", b"Bearer " + PLACEHOLDER)],
])
def test_header_rule_refuses_a_missing_wrong_or_doubled_placeholder(
        headers: list[tuple[bytes, bytes]]) -> None:
    error = refusal(lambda: s.match(BEARER, b"GET", b"/v1/x", PLACEHOLDER, headers))
    assert (error.status, error.reason) == (403, "the call does not carry the placeholder this "
                                                 "sandbox was given where the rule puts the "
                                                 "secret")


@pytest.mark.parametrize("secret", [b"a\r\nX-Evil: 1", b" padded", b"tab\there\x7f", b""])
def test_header_secret_that_cannot_stand_in_a_header_is_refused(secret: bytes) -> None:
    matched = s.match(BEARER, b"GET", b"/v1/x", PLACEHOLDER,
                      [(b"authorization", b"Bearer " + PLACEHOLDER)])
    error = refusal(lambda: s.fill(matched, secret))
    assert error.status == 403
    assert error.reason == ("the secret cannot stand in a header as it is (printable ASCII, one "
                            "line, no space at its ends)")


@pytest.mark.parametrize("secret", [b"a/b", b"a%2fb", b"a?b", b"..", b".", b"a b", b"", b"\xff"])
def test_path_secret_that_cannot_stand_in_a_segment_is_refused(secret: bytes) -> None:
    matched = tg_match(b"/bot" + PLACEHOLDER + b"/getMe")
    error = refusal(lambda: s.fill(matched, secret))
    assert error.status in (400, 403)
    assert secret.decode("latin-1") not in error.reason or not secret


# --- calls refused, by reason ---

CALLS: list[tuple[bytes, bytes, int, str]] = [
    (b"GET", b"/bot{P}/setWebhook", 403,
     "this name is refused by the secret's rule (whatever its case)"),
    (b"GET", b"/bot{P}/getMe.", 400,
     "a name in the path is 1 to 64 ASCII letters and digits, nothing else"),
    (b"GET", b"/bot{P}/get_me", 400,
     "a name in the path is 1 to 64 ASCII letters and digits, nothing else"),
    (b"GET", b"/bot{P}/" + b"a" * (s.MAX_NAME_BYTES + 1), 400,
     "a name in the path is 1 to 64 ASCII letters and digits, nothing else"),
    (b"GET", b"/bot{P}/a%41", 400, "an encoded byte ('%') in the path is refused, never decoded"),
    (b"GET", b"/bot{P}/a\\b", 400, "a backslash in the path is refused"),
    (b"GET", b"/bot{P}/a;b", 400, "a byte outside the path's plain alphabet (letters, digits, "
                                  "'-', '.', '_', '~', ':') is refused"),
    (b"GET", b"/bot{P}/a b", 400, "a byte outside the path's plain alphabet (letters, digits, "
                                  "'-', '.', '_', '~', ':') is refused"),
    (b"GET", b"/bot{P}//getMe", 400,
     "an empty path segment ('//' or a trailing '/') is refused, never folded"),
    (b"GET", b"/bot{P}/./getMe", 400,
     "a relative segment ('.' or '..') is refused, never resolved"),
    (b"GET", b"/bot{P}", 404, "the path has none of the shapes this secret's rule allows"),
    (b"GET", b"", 404,
     "the secret verb's path is /_link/secret/<name>/<the service's own path>"),
    (b"GET", b"?x=1", 404,
     "the secret verb's path is /_link/secret/<name>/<the service's own path>"),
    (b"OPTIONS", b"/bot{P}/getMe", 405,
     "this method is not allowed for this secret (allowed: GET, POST)"),
    (b"get", b"/bot{P}/getMe", 405,
     "this method is not allowed for this secret (allowed: GET, POST)"),
    (b"GET", b"/bot{P}/getMe?method=x", 403, "a query parameter named method is refused (the "
                                             "method goes in the path, where the rule checks it)"),
    (b"GET", b"/bot{P}/getMe?Method", 403, "a query parameter named method is refused (the "
                                           "method goes in the path, where the rule checks it)"),
    (b"GET", b"/bot{P}/getMe?m%65thod=x", 400, "a query parameter's name is 1 to 64 letters, "
                                               "digits, '_', '-', '.', never encoded"),
    (b"GET", b"/bot{P}/getMe?=x", 400, "a query parameter's name is 1 to 64 letters, digits, "
                                       "'_', '-', '.', never encoded"),
    (b"GET", b"/bot{P}/getMe?a=1&", 400, "a query parameter's name is 1 to 64 letters, digits, "
                                         "'_', '-', '.', never encoded"),
    (b"GET", b"/bot{P}/getMe?a=b;method=c", 400,
     "a query value holds a byte that is not plain (';', '#', a '%' not before two hex digits, "
     "or one to be encoded)"),
    (b"GET", b"/bot{P}/getMe?a=%4", 400,
     "a query value holds a byte that is not plain (';', '#', a '%' not before two hex digits, "
     "or one to be encoded)"),
    (b"GET", b"/bot{P}/getMe?a=\"x\"", 400,
     "a query value holds a byte that is not plain (';', '#', a '%' not before two hex digits, "
     "or one to be encoded)"),
    (b"GET", b"/bot{P}/getMe?", 400, "an empty query ('?' with nothing after) is refused"),
    (b"GET", b"/bot{P}/getMe?" + b"&".join([b"a=1"] * (s.MAX_QUERY_PARAMETERS + 1)), 400,
     f"at most {s.MAX_QUERY_PARAMETERS} query parameters"),
    (b"GET", b"/bot{P}/getMe?a=" + b"x" * s.MAX_TARGET_BYTES, 414,
     f"the target is longer than {s.MAX_TARGET_BYTES} bytes"),
    (b"GET", b"/file/bot{P}/photos/close", 403,
     "a segment of the path is a name the secret's rule refuses (whatever its case)"),
    (b"GET", b"/file/bot{P}/LOGOUT.txt", 403,
     "a segment of the path is a name the secret's rule refuses (whatever its case)"),
]


@pytest.mark.parametrize(("method", "shown", "status", "reason"), CALLS)
def test_call_refused_with_its_reason(method: bytes, shown: bytes, status: int,
                                      reason: str) -> None:
    target = shown.replace(b"{P}", PLACEHOLDER)
    error = refusal(lambda: tg_match(target, method))
    assert (error.status, error.reason) == (status, reason)
    assert PLACEHOLDER.decode() not in error.reason


def test_calls_at_their_limits_pass() -> None:
    tg_match(b"/bot" + PLACEHOLDER + b"/" + b"a" * s.MAX_NAME_BYTES)
    tg_match(b"/bot" + PLACEHOLDER + b"/getMe?" + b"&".join([b"a=1"] * s.MAX_QUERY_PARAMETERS))
    head = b"/bot" + PLACEHOLDER + b"/getMe?a="
    tg_match(head + b"x" * (s.MAX_TARGET_BYTES - len(head)))


def test_query_passes_as_it_came() -> None:
    query = b"chat_id=-100123&text=%D0%BF%D1%80%D0%B8%D0%B2%D0%B5%D1%82+you&parse_mode=HTML" \
            b"&reply_markup=%7B%22a%22%3A1%7D&flag&x.y-z=a:b@c/d?e'f(g)*h!i$j,k~l"
    upstream = s.fill(tg_match(b"/bot" + PLACEHOLDER + b"/sendMessage?" + query), SECRET)
    assert upstream.target == b"/bot" + SECRET + b"/sendMessage?" + query


# --- bodies naming a method ---

BODIES: list[tuple[bytes, bytes, str | None]] = [
    (b"application/x-www-form-urlencoded", b"chat_id=1&text=hi", None),
    (b"application/x-www-form-urlencoded", b"", None),
    (b"application/x-www-form-urlencoded", b"chat_id=1&method=setWebhook",
     "a form parameter named method is refused (the method goes in the path, where the rule "
     "checks it)"),
    (b"Application/X-WWW-Form-Urlencoded; charset=utf-8", b"METHOD=close",
     "a form parameter named method is refused (the method goes in the path, where the rule "
     "checks it)"),
    (b"application/x-www-form-urlencoded", b"%6Dethod=close",
     "a form parameter's name is 1 to 64 letters, digits, '_', '-', '.', never encoded"),
    (b"application/json", b'{"chat_id": 1, "text": "method"}', None),
    (b"application/json", b'{"Method": "setWebhook"}',
     "a body field named method is refused (the method goes in the path, where the rule checks "
     "it)"),
    (b"application/json", b'{"\\u006dethod": "setWebhook"}',
     "a body field named method is refused (the method goes in the path, where the rule checks "
     "it)"),
    (b"application/json", b'{"a": {"method": "nested is a value"}}', None),
    (b"application/json", b"[1]", None),
    (b"application/json", b"{", "the JSON body is not valid JSON"),
    (b"text/plain", b"method=setWebhook", None),
    (b"multipart/form-data; boundary=XX",
     b'--XX\r\nContent-Disposition: form-data; name="chat_id"\r\n\r\n1\r\n--XX\r\n'
     b'Content-Disposition: form-data; name="photo"; filename="method"\r\n\r\nmethod\r\n--XX--\r\n',
     None),
    (b"multipart/form-data; boundary=XX",
     b'--XX\r\nContent-Disposition: form-data; name="Method"\r\n\r\nclose\r\n--XX--\r\n',
     "a multipart field named method is refused (the method goes in the path)"),
    (b'multipart/form-data; boundary="a b"',
     b'--a b\r\ncontent-disposition: form-data; name=method\r\n\r\nclose\r\n--a b--\r\n',
     "a multipart field named method is refused (the method goes in the path)"),
    (b"multipart/form-data; boundary=XX",
     b"--XX\r\nContent-Disposition: form-data; name*=utf-8''method\r\n\r\nclose\r\n--XX--\r\n",
     "a multipart field name in the encoded form (name*=) is refused"),
    (b"multipart/form-data", b"", "a multipart body without a boundary is refused"),
]


@pytest.mark.parametrize(("content_type", "body", "reason"), BODIES)
def test_body_naming_a_method_is_refused(content_type: bytes, body: bytes,
                                         reason: str | None) -> None:
    if reason is None:
        s.check_body(TG_RULE, content_type, body)
    else:
        assert refusal(lambda: s.check_body(TG_RULE, content_type, body)).reason == reason


# --- the program's environment ---


def test_environment_variables_of_each_secret() -> None:
    assert s.environment_variables(["telegram", "github-work"]) == {
        "telegram": ("LNK_SECRET_TELEGRAM_URL", "LNK_SECRET_TELEGRAM"),
        "github-work": ("LNK_SECRET_GITHUB_WORK_URL", "LNK_SECRET_GITHUB_WORK")}
    assert s.environment_variables([]) == {}


@pytest.mark.parametrize("names", [["a-b", "a_b"], ["a", "a_url"], ["a", "A-URL"]])
def test_environment_variables_that_would_collide_are_refused(names: list[str]) -> None:
    assert refusal(lambda: s.environment_variables(names)).reason == (
        "two secrets' names give the same environment variable (a '-' and a '_', or a name "
        "ending in _url); rename one")


# --- Hypothesis ---

ALPHABET = st.sampled_from([b"/", b".", b"%", b"a", b"Z", b"0", b"{", b"}", b":", b"?", b"=",
                            b"&", b"\\", b"bot", b"file", b"close", b"Close", b"setWebhook",
                            b"..", b"%2e", b"%2f", b"%3A", b"%3a", b"method", b"getMe",
                            PLACEHOLDER, ENCODED])


@fuzz(15)
@given(st.lists(ALPHABET, max_size=16).map(b"".join),
       st.sampled_from([b"GET", b"POST", b"DELETE"]))
def test_random_targets_never_match_into_a_refused_name_or_a_relative_path(
        target: bytes, method: bytes) -> None:
    try:
        matched = s.match(TG, method, target, PLACEHOLDER)
    except SecretRuleError as error:
        assert PLACEHOLDER.decode() not in error.reason
        return
    upstream = s.fill(matched, SECRET)
    path, _, query = upstream.target.partition(b"?")
    assert upstream.target.count(SECRET) == 1
    assert upstream.target in (target.replace(PLACEHOLDER, SECRET, 1),
                               target.replace(ENCODED, SECRET, 1))
    segments = path.split(b"/")[1:]
    assert all(segment and segment not in (b".", b"..") for segment in segments)
    assert b"%" not in path and b"\\" not in path
    for segment in segments:
        assert segment.lower() not in TG.refused
        assert segment.split(b".")[0].lower() not in TG.refused
    if query:
        assert all(pair.partition(b"=")[0].lower() != b"method" for pair in query.split(b"&"))
    assert matched.name is None or matched.name.lower() not in TG.refused


@fuzz(9)
@given(st.binary(max_size=64), st.sampled_from([b"GET", b"POST", b"HEAD"]))
def test_random_bytes_as_a_target_raise_only_secret_rule_error(target: bytes,
                                                               method: bytes) -> None:
    for candidate in (target, b"/bot" + PLACEHOLDER + b"/" + target,
                      b"/file/bot" + PLACEHOLDER + b"/" + target):
        try:
            matched = s.match(TG, method, candidate, PLACEHOLDER)
        except SecretRuleError:
            continue
        assert s.fill(matched, SECRET).target.count(SECRET) == 1


SHAPE_PIECES = st.sampled_from(["/", "x", "bot", "{secret}", "{name}", "{path}", "{token}",
                                "..", ".", "%2f", "?", "=", "{", "}", "\\", "close", "A"])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=8)


@st.composite
def random_rules(draw: st.DrawFn) -> dict[str, Any]:
    document: dict[str, Any] = {
        "host": draw(st.sampled_from(["api.telegram.org", "a.b", "A.b", "a.b:443", "{path}.b",
                                      "x", "1.2.3.4", ""]) | st.text(max_size=12)),
        "paths": draw(st.lists(st.lists(SHAPE_PIECES, max_size=8).map("".join), max_size=3)),
    }
    if draw(st.booleans()):
        document["refuse"] = draw(st.lists(st.sampled_from(["close", "Close", "a.b", "", "x"])
                                           | st.text(max_size=6), max_size=4))
    if draw(st.booleans()):
        document["header"] = draw(st.sampled_from(["Authorization: Bearer {secret}",
                                                   "Cookie: {secret}", "X-Api-Key:{secret}"])
                                  | st.text(max_size=12))
    if draw(st.booleans()):
        document["placeholder"] = draw(st.sampled_from(["{random}", "{id}:{random}", "{id}"]))
    if draw(st.booleans()):
        document[draw(st.text(max_size=6))] = draw(JSON_VALUES)
    return document


@fuzz(15)
@given(random_rules(), st.lists(ALPHABET, max_size=10).map(b"".join))
def test_random_rules_parse_or_raise_and_what_parses_holds(document: dict[str, Any],
                                                           target: bytes) -> None:
    try:
        parsed = s.parse_rule(orjson.dumps(document))
    except SecretRuleError as error:
        assert error.reason and "\n" not in error.reason
        return
    assert "{" not in parsed.host and ":" not in parsed.host
    for shape in parsed.shapes:
        kinds = [part.kind for part in shape]
        assert (kinds.count("secret") == 1) == (parsed.header is None)
        assert kinds.count("name") <= 1 and kinds.count("path") <= 1
        if "path" in kinds:
            assert kinds[-1] == "path" and "literal" in kinds[:-1]
    headers = [(b"authorization", b"Bearer " + PLACEHOLDER)]
    try:
        matched = s.match(parsed, b"GET", target, PLACEHOLDER, headers)
    except SecretRuleError:
        return
    segments = matched.before.partition(b"?")[0].split(b"/")[1:]
    assert b".." not in segments and b"%" not in matched.before + matched.after
    assert matched.name is None or matched.name.lower() not in parsed.refused


@fuzz(9)
@given(st.binary(max_size=200) | JSON_VALUES.map(orjson.dumps))
def test_random_bytes_as_a_rule_raise_only_secret_rule_error(raw: bytes) -> None:
    try:
        s.parse_rule(raw)
    except SecretRuleError as error:
        assert error.reason


@fuzz(3)
@given(st.sampled_from([b"application/json", b"application/x-www-form-urlencoded",
                        b"multipart/form-data; boundary=b", b"multipart/form-data", b"x/y"]),
       st.binary(max_size=120))
def test_random_bodies_raise_only_secret_rule_error(content_type: bytes, body: bytes) -> None:
    try:
        s.check_body(TG_RULE, content_type, body)
    except SecretRuleError as error:
        assert error.reason
