"""The secret verb's body check read as Telegram reads a body (lnk_proxy/secret_rules.py,
check_body): the rule's `not_urls` in the query, a form, JSON (nested, and JSON inside a
parameter) and multipart, each refusal naming its parameter; the multipart forms whose
readings can differ, each refused with its reason; and a Hypothesis test that what the
check accepts, a model of tdlib's HttpReader (tdlib/td tdnet/td/net/HttpReader.cpp
@d963044, 2024, transcribed below, and its 2020 form @04667e8) reads the same parts from.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lnk_proxy import secret_rules as s
from lnk_proxy.secret_rules import SecretRuleError
from tests.conftest import fuzz

T = TypeVar("T")
ROOT = Path(__file__).parent.parent
RULE = s.parse_rule((ROOT / "examples" / "telegram-rule.json").read_bytes())
PLACEHOLDER = b"123456:PLACEHOLDERPLACEHOLDER0000"
FORM = b"application/x-www-form-urlencoded"
JSON = b"application/json"
MP = b"multipart/form-data; boundary=XX"


def url_refusal(where: str, name: str) -> str:
    return (f"{where} parameter {name}: Telegram fetches a URL given there, and this secret's "
            "rule (not_urls) takes only a file_id, attach://<part> or an upload")


def part(name: str, value: bytes, extra: bytes = b"") -> bytes:
    return (b'--XX\r\nContent-Disposition: form-data; name="' + name.encode() + b'"' + extra
            + b"\r\n\r\n" + value + b"\r\n")


def multipart(*parts: bytes) -> bytes:
    return b"".join(parts) + b"--XX--\r\n"


def reason_of(content_type: bytes, body: bytes) -> str | None:
    try:
        s.check_body(RULE, content_type, body)
    except SecretRuleError as error:
        return error.reason
    return None


URL = b"https://evil.example/a.jpg"
FILE_ID = b"AgACAgIAAxkBAAIBZ2V-file_id_0123"
MEDIA = json.dumps([{"type": "photo", "media": "attach://p1"},
                    {"type": "photo", "media": URL.decode()}]).encode()

NOT_URLS: list[tuple[bytes, bytes, str | None]] = [
    # A file_id, attach://, an empty value (the upload of that name), an upload: pass.
    (FORM, b"chat_id=1&photo=" + FILE_ID, None),
    (FORM, b"chat_id=1&photo=attach%3A%2F%2Fp1", None),
    (FORM, b"chat_id=1&photo=", None),
    (MP, multipart(part("chat_id", b"1"), part("photo", b"\x89PNG", b'; filename="a.png"')),
     None),
    (MP, multipart(part("photo", FILE_ID)), None),
    (JSON, json.dumps({"chat_id": 1, "photo": FILE_ID.decode()}).encode(), None),
    (JSON, json.dumps({"chat_id": 1, "text": "see https://example.org"}).encode(), None),
    (FORM, b"chat_id=1&caption=https%3A%2F%2Fevil.example", None),
    (FORM, b"chat_id=1&text=%5Bdraft%5D+hello", None),
    (JSON, json.dumps({"media": [{"type": "photo", "media": "attach://p1",
                                  "caption": "https://fine.example"}]}).encode(), None),
    # A URL in each coding, named; Telegram's own spellings of one.
    (FORM, b"chat_id=1&photo=https%3A%2F%2Fevil.example%2Fa.jpg", url_refusal("form", "photo")),
    (FORM, b"chat_id=1&document=evil.example/a.pdf", url_refusal("form", "document")),
    (FORM, b"chat_id=1&video=HTTP://evil.example", url_refusal("form", "video")),
    (FORM, b"chat_id=1&audio=ftp:x", url_refusal("form", "audio")),
    (FORM, b"chat_id=1&voice=1.2", url_refusal("form", "voice")),
    (FORM, b"chat_id=1&animation=+attach://p", url_refusal("form", "animation")),
    (FORM, b"chat_id=1&sticker=attach://a.b", url_refusal("form", "sticker")),
    (FORM, b"chat_id=1&Photo=evil.example", url_refusal("form", "photo")),
    (MP, multipart(part("chat_id", b"1"), part("photo", URL)), url_refusal("multipart", "photo")),
    (MP, multipart(part("video_note", URL, b"\r\nContent-Type: text/plain")),
     url_refusal("multipart", "video_note")),
    (JSON, json.dumps({"chat_id": 1, "photo": URL.decode()}).encode(),
     url_refusal("JSON", "photo")),
    (JSON, b'{"chat_id": 1, "\\u0070hoto": "evil.example/a"}', url_refusal("JSON", "photo")),
    (JSON, b'{"photo": "AgAD", "photo": "evil.example/a"}', url_refusal("JSON", "photo")),
    (JSON, b'{"photo": 1.5}', url_refusal("JSON", "photo")),
    # sendMediaGroup's media: nested JSON, as JSON, as a JSON string, in a form, multipart.
    (JSON, b'{"chat_id": 1, "media": ' + MEDIA + b"}", url_refusal("JSON", "media")),
    (JSON, json.dumps({"chat_id": 1, "media": MEDIA.decode()}).encode(),
     url_refusal("JSON", "media")),
    (FORM, b"chat_id=1&media=" + MEDIA.replace(b" ", b"+").replace(b'"', b"%22"),
     url_refusal("form", "media")),
    (MP, multipart(part("media", MEDIA), part("p1", b"x", b'; filename="a"')),
     url_refusal("multipart", "media")),
    (JSON, json.dumps({"media": [{"type": "video", "media": "attach://v",
                                  "cover": URL.decode()}]}).encode(),
     url_refusal("JSON", "cover")),
    (JSON, json.dumps({"media": {"type": "photo", "media": "attach://p",
                                 "thumbnail": "x.y"}}).encode(),
     url_refusal("JSON", "thumbnail")),
    # A parameter not named that holds them: createNewStickerSet's stickers, inline results.
    (FORM, b"stickers=" + json.dumps([{"sticker": URL.decode(), "format": "static"}]
                                     ).encode().replace(b" ", b""),
     url_refusal("form", "sticker")),
    (JSON, json.dumps({"results": json.dumps([{"type": "photo", "id": "1",
                                               "photo_url": URL.decode()}])}).encode(),
     url_refusal("JSON", "photo_url")),
    # JSON that tdlib reads and RFC 8259 does not (a raw control byte in a string).
    (FORM, b'media=[{"type":"photo","media":"attach://p","caption":"\x01"}]',
     "a form parameter that Telegram may read as JSON is not valid JSON, and holds a name "
     "this secret's rule keeps from URLs (not_urls) or a backslash"),
    (FORM, b"text=[draft] hello", None),
    # The query: the same decision (match reads it).
]


@pytest.mark.parametrize(("content_type", "body", "reason"), NOT_URLS)
def test_file_parameters_take_no_url(content_type: bytes, body: bytes,
                                     reason: str | None) -> None:
    assert reason_of(content_type, body) == reason


@pytest.mark.parametrize(("query", "reason"), [
    (b"chat_id=1&photo=" + FILE_ID, None),
    (b"chat_id=1&photo=https%3A%2F%2Fevil.example%2Fa.jpg", url_refusal("query", "photo")),
    (b"chat_id=1&photo=evil.example", url_refusal("query", "photo")),
    (b"media=%5B%7B%22type%22%3A%22photo%22%2C%22media%22%3A%22x.y%22%7D%5D",
     url_refusal("query", "media")),
])
def test_file_parameters_in_the_query_take_no_url(query: bytes, reason: str | None) -> None:
    target = b"/bot" + PLACEHOLDER + b"/sendPhoto?" + query
    try:
        s.match(RULE, b"GET", target, PLACEHOLDER)
    except SecretRuleError as error:
        assert error.reason == reason
        assert error.status == 403
        return
    assert reason is None


def test_a_rule_without_not_urls_lets_urls_pass() -> None:
    rule = s.parse_rule(b'{"host": "a.example", "paths": ["/bot{secret}/{name}"]}')
    s.check_body(rule, FORM, b"photo=https%3A%2F%2Fevil.example")
    assert rule.not_urls == frozenset()


@pytest.mark.parametrize(("value", "reason"), [
    ("photo", "not_urls: a list of parameter names"),
    (["Photo"], "not_urls: each name is 1 to 64 lower-case ASCII letters, digits and '_'"),
    (["a-b"], "not_urls: each name is 1 to 64 lower-case ASCII letters, digits and '_'"),
    (["x" * 65], "not_urls: each name is 1 to 64 lower-case ASCII letters, digits and '_'"),
    (["photo", "photo"], "not_urls: a name given twice"),
    ([f"n{index}" for index in range(s.MAX_NOT_URLS + 1)],
     f"not_urls: at most {s.MAX_NOT_URLS} names"),
])
def test_not_urls_refused_with_its_reason(value: object, reason: str) -> None:
    document = {"host": "a.example", "paths": ["/bot{secret}/{name}"], "not_urls": value}
    with pytest.raises(SecretRuleError) as raised:
        s.parse_rule(json.dumps(document).encode())
    assert raised.value.reason == reason


def test_not_urls_at_its_limit_parses() -> None:
    names = [f"n{index}" for index in range(s.MAX_NOT_URLS)]
    document = {"host": "a.example", "paths": ["/bot{secret}/{name}"], "not_urls": names}
    assert len(s.parse_rule(json.dumps(document).encode()).not_urls) == s.MAX_NOT_URLS


@pytest.mark.parametrize(("content_type", "prefix", "suffix"), [
    (JSON, b'{"a": ', b"}"), (FORM, b"media=", b""), (FORM, b"text=", b"")])
def test_json_nested_deep_raises_only_secret_rule_error(content_type: bytes, prefix: bytes,
                                                        suffix: bytes) -> None:
    for depth in (100, 1000, 1023, 1024, 1025, 5000):
        body = prefix + b"[" * depth + b"]" * depth + suffix
        try:
            s.check_body(RULE, content_type, body)
        except SecretRuleError as error:
            assert error.status in (400, 403), error


def test_parameters_past_tdlib_bound_are_refused() -> None:
    at_limit = b"text=" + b"a" * (s.MAX_PARAMETER_BYTES - 5)
    s.check_body(RULE, FORM, at_limit)
    with pytest.raises(SecretRuleError) as raised:
        s.check_body(RULE, FORM, at_limit + b"a")
    assert raised.value.status == 413


# --- multipart forms where readings differ ---

TWO_NAMES = "a multipart Content-Disposition gives name or filename twice (readers differ on " \
            "which one counts)"
HEADER_SHAPE = "a multipart header is 'Name: value', the name a token right before its ':' " \
               "(no space before the colon)"
CT_NAMES_BOUNDARY = "a multipart Content-Type names its boundary once, as 'boundary=', and the " \
                    "word nowhere else (Telegram takes the first 'boundary' anywhere in it)"
PLAIN_NAME = "a multipart field's name is 1 to 64 letters, digits, '_', '-', '.', never " \
             "encoded or escaped"
DISPOSITION_SHAPE = "a multipart Content-Disposition's parameters are 'name=value' (a token, " \
                    "or a quoted string without ';' or '\\'), one space at most before each"
SIMPLE = b"--XX\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n1\r\n--XX--\r\n"

AMBIGUOUS: list[tuple[str, bytes, bytes, str]] = [
    ("a second name=", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"; name="method"\r\n\r\nclose\r\n--XX--\r\n',
     TWO_NAMES),
    ("a second filename=", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"; filename="a"; filename="b"\r\n\r\n'
     b"v\r\n--XX--\r\n", TWO_NAMES),
    ("a space before the colon", MP,
     b'--XX\r\nContent-Disposition : form-data; name="method"\r\n\r\nclose\r\n--XX--\r\n',
     HEADER_SHAPE),
    ("a tab before the colon", MP,
     b'--XX\r\nContent-Disposition\t: form-data; name="method"\r\n\r\nclose\r\n--XX--\r\n',
     HEADER_SHAPE),
    ("a header line without a colon", MP,
     b'--XX\r\nContent-Disposition form-data; name="x"\r\n\r\nv\r\n--XX--\r\n', HEADER_SHAPE),
    ("a folded header", MP,
     b'--XX\r\nContent-Disposition: form-data;\r\n name="method"\r\n\r\nclose\r\n--XX--\r\n',
     "a folded multipart header line is refused"),
    ("a bare LF in a header", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"\nX: y\r\n\r\nv\r\n--XX--\r\n',
     "a multipart header holds a control byte or a bare line end"),
    ("xboundary= first", b"multipart/form-data; xboundary=AA; boundary=XX", SIMPLE,
     CT_NAMES_BOUNDARY),
    ("boundary twice", b"multipart/form-data; boundary=AA; boundary=XX", SIMPLE,
     CT_NAMES_BOUNDARY),
    ("boundary in another parameter's value", b'multipart/form-data; boundary=XX; a="boundary"',
     SIMPLE, CT_NAMES_BOUNDARY),
    ("a space around boundary's =", b"multipart/form-data; boundary =XX", SIMPLE,
     "a multipart Content-Type's parameters are '; name=value' (a token or a quoted string "
     "without ';', '\\' or spaces around '=')"),
    ("no boundary", b"multipart/form-data", SIMPLE,
     "a multipart body without a boundary is refused"),
    ("a boundary longer than 70", b"multipart/form-data; boundary=" + b"B" * 71, SIMPLE,
     "a multipart boundary is 1 to 70 of RFC 2046's characters"),
    ("another type naming multipart", b'text/plain; x="multipart/form-data"; boundary=XX',
     SIMPLE, "a Content-Type that names another body type than its own is refused (Telegram "
     "looks for multipart/form-data, application/x-www-form-urlencoded and application/json "
     "anywhere in it)"),
    ("a %-encoded name", MP,
     b'--XX\r\nContent-Disposition: form-data; name="%6Dethod"\r\n\r\nclose\r\n--XX--\r\n',
     PLAIN_NAME),
    ("an escaped name", MP,
     b'--XX\r\nContent-Disposition: form-data; name="m\\ethod"\r\n\r\nclose\r\n--XX--\r\n',
     DISPOSITION_SHAPE),
    ("a ';' in a quoted filename", MP,
     b'--XX\r\nContent-Disposition: form-data; filename="a;name=method"; name="x"\r\n\r\n'
     b"v\r\n--XX--\r\n", DISPOSITION_SHAPE),
    ("spaces around =", MP,
     b'--XX\r\nContent-Disposition: form-data; name = "method"\r\n\r\nclose\r\n--XX--\r\n',
     DISPOSITION_SHAPE),
    ("Name= in another case", MP,
     b'--XX\r\nContent-Disposition: form-data; Name="method"; name="x"\r\n\r\nv\r\n--XX--\r\n',
     "a multipart Content-Disposition takes name and filename only (in lower case)"),
    ("form-data in another case", MP,
     b'--XX\r\nContent-Disposition: Form-Data; name="x"\r\n\r\nv\r\n--XX--\r\n',
     "a multipart part's Content-Disposition is 'form-data; name=…' exactly"),
    ("a space before form-data's ';'", MP,
     b'--XX\r\nContent-Disposition: form-data ; name="x"\r\n\r\nv\r\n--XX--\r\n',
     "a multipart part's Content-Disposition is 'form-data; name=…' exactly"),
    ("two Content-Disposition", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"\r\nContent-Disposition: form-data; '
     b'name="method"\r\n\r\nclose\r\n--XX--\r\n',
     "a multipart part with two Content-Disposition headers is refused"),
    ("two Content-Type", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"\r\nContent-Type: text/plain\r\n'
     b"Content-Type: application/x-www-form-urlencoded\r\n\r\nmethod=close\r\n--XX--\r\n",
     "a multipart part with two Content-Type headers is refused"),
    ("a field sent as a form", MP,
     b'--XX\r\nContent-Disposition: form-data; name="caption"\r\n'
     b"Content-Type: application/x-www-form-urlencoded\r\n\r\nmethod=close\r\n--XX--\r\n",
     "a multipart field's own Content-Type is text/plain, application/json or "
     "application/octet-stream (Telegram reads a field sent as a form as more parameters)"),
    ("a name given twice", MP, part("x", b"1") + part("x", b"2") + b"--XX--\r\n",
     "a multipart field name given twice is refused (readers differ on which one counts)"),
    ("a preamble", MP, b"hello\r\n" + SIMPLE,
     "a multipart body starts with its boundary and a line end (no preamble)"),
    ("an epilogue", MP, SIMPLE + b"--XX\r\nContent-Disposition: form-data; name=method\r\n\r\n",
     "after a multipart body's closing boundary comes at most a line end"),
    ("the boundary inside a value", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"\r\n\r\nv\r\n--XXmore\r\n--XX--\r\n',
     "a multipart boundary is followed by a line end or '--' (the boundary inside a value is "
     "refused)"),
    ("no closing boundary", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x"\r\n\r\nv',
     "a multipart body ends with its closing boundary"),
    ("a part without headers", MP, b"--XX\r\n\r\nv\r\n--XX--\r\n",
     "a multipart part has headers, then an empty line"),
    ("no Content-Disposition", MP, b"--XX\r\nContent-Type: text/plain\r\n\r\nv\r\n--XX--\r\n",
     "a multipart part without Content-Disposition is refused"),
    ("name*=", MP,
     b"--XX\r\nContent-Disposition: form-data; name*=utf-8''method\r\n\r\nclose\r\n--XX--\r\n",
     "a multipart field name in the encoded form (name*=) is refused"),
    ("a trailing ';'", MP,
     b'--XX\r\nContent-Disposition: form-data; name="x";\r\n\r\nv\r\n--XX--\r\n',
     "a multipart Content-Disposition ends with its last parameter, not ';'"),
    ("form in a JSON type's parameter", b'text/plain; x="application/x-www-form-urlencoded"',
     b"method=close", "a Content-Type that names another body type than its own is refused "
     "(Telegram looks for multipart/form-data, application/x-www-form-urlencoded and "
     "application/json anywhere in it)"),
]


@pytest.mark.parametrize(("label", "content_type", "body", "reason"), AMBIGUOUS,
                         ids=[row[0] for row in AMBIGUOUS])
def test_multipart_forms_read_otherwise_are_refused(label: str, content_type: bytes,
                                                    body: bytes, reason: str) -> None:
    assert reason_of(content_type, body) == reason, label


# --- a model of tdlib's reading (HttpReader.cpp), for the differential test ---


class TdError(Exception):
    pass


def td_boundary(content_type: bytes) -> bytes:
    lowered = content_type.lower()
    at = lowered.find(b"boundary")
    if at < 0:
        raise TdError("boundary not found")
    equals = content_type.find(b"=", at + 8)
    if equals < 0:
        raise TdError("boundary value not found")
    start = equals + 1
    end = content_type.find(b";", start)
    end = len(content_type) if end < 0 else end
    if (content_type[start:start + 1] == b'"' and start + 1 < end
            and content_type[end - 1:end] == b'"'):
        start, end = start + 1, end - 1
    boundary = content_type[start:end]
    if not boundary or len(boundary) > 70:
        raise TdError("boundary too big or empty")
    return boundary


TD_SPACE = b" \t\r\n\0\x0b\x0c"
HEX = frozenset(b"0123456789abcdefABCDEF")


def td_url_decode(value: bytes) -> bytes:
    out = bytearray()
    index = 0
    while index < len(value):
        digits = value[index + 1:index + 3]
        if value[index:index + 1] == b"%" and index + 2 < len(value) and all(
                byte in HEX for byte in digits):
            out.append(int(digits, 16))
            index += 3
            continue
        out.append(value[index])
        index += 1
    return bytes(out)


def td_disposition(value: bytes, *, year: int) -> tuple[bytes, bool]:
    if value[:10] != b"form-data;":
        raise TdError("expected form-data content disposition")
    value = value[10:]
    name = b""
    has_file = False
    while True:
        value = value.strip(TD_SPACE)
        equals = value.find(b"=")
        if equals < 0:
            break
        key = value[:equals].strip(TD_SPACE)
        value = value[equals + 1:]
        if year == 2020:
            semicolon = value.find(b";")
            size = len(value) if semicolon < 0 else semicolon
            found = value[:size].strip(TD_SPACE)
            if len(found) > 1 and found[:1] == b'"' and found[-1:] == b'"':
                found = found[1:-1]
            value = value[size + (1 if len(value) > size else 0):]
        else:
            value = value.lstrip(TD_SPACE)
            if value[:1] == b'"':
                out = bytearray()
                position = 1
                while True:
                    if position >= len(value):
                        raise TdError("unclosed quoted string")
                    char = value[position]
                    position += 1
                    if char == ord('"'):
                        break
                    if char == ord("\\"):
                        if position >= len(value):
                            raise TdError("wrong escape")
                        char = value[position]
                        position += 1
                    out.append(char)
                found = bytes(out)
                value = value[position:].lstrip(TD_SPACE)
                if value:
                    if value[:1] != b";":
                        raise TdError("expected ';'")
                    value = value[1:]
            else:
                semicolon = value.find(b";")
                if semicolon >= 0:
                    found = value[:semicolon].strip(TD_SPACE)
                    value = value[semicolon + 1:]
                else:
                    found = value.strip(TD_SPACE)
                    value = b""
            found = td_url_decode(found)
        if key == b"name":
            name = found
        elif key == b"filename":
            has_file = True
    return name, has_file


def td_multipart(content_type: bytes, body: bytes, *, year: int) -> list[tuple[bytes, bool, bytes]]:
    """(name, is a file, value) of each part as tdlib reads them, or TdError."""
    boundary = td_boundary(content_type)
    delimiter = b"\r\n--" + boundary
    first = body.find(delimiter[2:])
    if first < 0:
        raise TdError("no boundary")
    position = first + len(delimiter) - 2
    parts = []
    while True:
        head_end = body.find(b"\r\n\r\n", position)
        if head_end < 0:
            raise TdError("unexpected end")
        if head_end == position:
            raise TdError("headers in multipart/form-data are empty")
        head = body[position + 2:head_end + 2]
        name = b""
        has_file = False
        field_type = b"application/octet-stream"
        lines = []
        rest = head
        while rest:
            colon = rest.find(b":")
            if colon < 0:
                raise TdError("can't parse form data headers")
            header_name = rest[:colon]
            rest = rest[colon + 1:]
            value = b""
            while True:
                line_end = rest.find(b"\r")
                if line_end < 0:
                    raise TdError("can't parse form data headers")
                value += rest[:line_end]
                rest = rest[line_end + 2:]
                if rest[:1] not in (b" ", b"\t") or not rest:
                    break
            lines.append((header_name.strip(TD_SPACE).lower(), value.strip(TD_SPACE)))
        for header_name, value in lines:
            if header_name == b"content-disposition":
                name, has_file = td_disposition(value, year=year)
            elif header_name == b"content-type":
                field_type = value
        if not name:
            raise TdError("field name not found")
        value_end = body.find(delimiter, head_end + 4)
        if value_end < 0:
            raise TdError("unexpected end")
        value = body[head_end + 4:value_end]
        if not has_file and field_type.startswith(b"application/x-www-form-urlencoded"):
            raise TdError("a field read as more parameters (the check refuses these)")
        parts.append((name, has_file, value))
        after = value_end + len(delimiter)
        if len(body) - after < 2:
            raise TdError("unexpected end")
        if body[after:after + 2] == b"--":
            return parts
        position = after


def test_the_model_reads_the_clients_bodies() -> None:
    body = multipart(part("chat_id", b"1"), part("photo", b"\x89PNG", b'; filename="a.png"'))
    assert td_multipart(MP, body, year=2024) == [(b"chat_id", False, b"1"),
                                                 (b"photo", True, b"\x89PNG")]
    assert td_multipart(b"multipart/form-data; xboundary=YY; boundary=XX",
                        body.replace(b"--XX", b"--YY"), year=2024)[0][0] == b"chat_id"
    spelled = b'--XX\r\nContent-Disposition: form-data; name="%6Dethod"\r\n\r\nv\r\n--XX--\r\n'
    assert td_multipart(MP, spelled, year=2024)[0][0] == b"method"
    assert td_multipart(MP, spelled, year=2020)[0][0] == b"%6Dethod"


def mostly(good: T, *others: T) -> st.SearchStrategy[T]:
    """`good` most of the time, one of `others` now and then: most bodies are well formed,
    so that both what is accepted and each near miss are drawn."""
    return st.sampled_from([good] * (8 * len(others) + 1) + list(others))


NAMES = mostly("photo", "chat_id", "method", "%6Dethod", "m\\ethod", "a;b", "a b", "",
               "p1")
QUOTES = mostly('"{}"', "{}", '"{}', ' "{}" ', "{} ")
HEADER_NAMES = mostly("Content-Type", "content-type", "Content-Type ", " Content-Type", "X-A")
BOUNDARIES = mostly(b"XX", b"X", b"a b", b"XX ", b"x=y")
CONTENT_TYPES = mostly(
    "multipart/form-data; boundary={b}", 'multipart/form-data; boundary="{b}"',
    "multipart/form-data; xboundary=YY; boundary={b}", "multipart/form-data;boundary={b}",
    "multipart/form-data; boundary={b}; charset=utf-8", "Multipart/Form-Data; Boundary={b}",
    "multipart/form-data; boundary= {b}", "multipart/form-data; a=boundary; boundary={b}")
SEPARATORS = mostly(b"\r\n", b"--", b"\n", b"  \r\n", b"XY")


@st.composite
def disposition(draw: st.DrawFn) -> bytes:
    parameters = [f"{draw(mostly('name', 'Name', 'name*', 'name ', 'filename'))}="
                  f"{draw(QUOTES).format(draw(NAMES))}"]
    for _ in range(draw(st.integers(0, 2))):
        key = draw(mostly("filename", "name", "Name", "name*", " filename"))
        value = draw(QUOTES).format(draw(mostly("a.png", "a;name=method", "x")))
        parameters.append(f"{key}={value}")
    start = draw(mostly("form-data; ", "form-data;", "Form-Data; ", "form-data ; "))
    return (start + draw(mostly("; ", ";", " ; ")).join(parameters)).encode()


@st.composite
def multipart_bodies(draw: st.DrawFn) -> tuple[bytes, bytes]:
    boundary = draw(BOUNDARIES)
    content_type = draw(CONTENT_TYPES).format(b=boundary.decode()).encode()
    out = [draw(mostly(b"", b"pre\r\n", b"--" + boundary + b"\r\n"))]
    for _ in range(draw(st.integers(1, 3))):
        out.append(b"--" + boundary + draw(SEPARATORS))
        headers = [draw(mostly(b"Content-Disposition", b"content-disposition",
                               b"Content-Disposition ", b"Content-Disposition\t"))
                   + b":" + draw(mostly(b" ", b"", b"\t")) + draw(disposition())
                   + draw(mostly(b"\r\n", b"\r\n ", b"\n"))]
        for _ in range(draw(st.integers(0, 2))):
            headers.insert(draw(st.integers(0, len(headers))),
                           draw(HEADER_NAMES).encode() + b": "
                           + draw(mostly(b"text/plain", b"application/x-www-form-urlencoded",
                                         b"application/json; x=1", b"form-data; name=method"))
                           + draw(mostly(b"\r\n", b"\r\n ", b"\n")))
        out.extend(headers)
        out.append(b"\r\n" + draw(mostly(b"v", b"method=close&photo=x.y", b"--" + boundary,
                                         b"", b"\r\n--" + boundary + b"x", b"a\r\n\r\nb"))
                   + b"\r\n")
    out.append(b"--" + boundary + b"--" + draw(mostly(b"", b"\r\n", b"tail", b"\r\n--"
                                                      + boundary)))
    return content_type, b"".join(out)


@settings(fuzz(30), suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(multipart_bodies())
def test_what_the_check_accepts_tdlib_reads_the_same(case: tuple[bytes, bytes]) -> None:
    """Whatever multipart body the check accepts, both tdlib versions read the same parts
    from it (names, file or not, values); what one of them would read otherwise is refused."""
    content_type, body = case
    try:
        ours = s._read_multipart(content_type, body)
    except SecretRuleError:
        return
    read = [(item.name, item.upload, item.value) for item in ours]
    assert td_multipart(content_type, body, year=2024) == read
    assert td_multipart(content_type, body, year=2020) == read


@fuzz(9)
@given(st.binary(max_size=300), st.sampled_from([MP, b'multipart/form-data; boundary="a b"']))
def test_random_multipart_bytes_raise_only_secret_rule_error(body: bytes,
                                                             content_type: bytes) -> None:
    for candidate in (body, b"--XX\r\n" + body, SIMPLE[:40] + body):
        with contextlib.suppress(SecretRuleError):
            s.check_body(RULE, content_type, candidate)
