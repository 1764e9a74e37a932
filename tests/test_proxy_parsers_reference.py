"""The head check and the target parsers against their forms before issue 18: the same
verdict (admitted with the same fields, or refused with the same reason) for every
input. The old forms judged a head byte by byte and a name label by label in Python;
they are kept here, as they were, as the reference.

Hypothesis runs the fuzz profile of tests/conftest.py (`LNK_FUZZ=deep` for many more).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lnk_proxy import head as head_module
from lnk_proxy import target as target_module
from lnk_proxy.head import MAX_HEAD_BYTES, MAX_HEADERS, HeadError, check_head, head_end
from lnk_proxy.target import MAX_NAME_LENGTH, TargetError, parse_absolute, parse_connect
from tests.conftest import fuzz

T = TypeVar("T")


# -- the reference: lnk_proxy/head.py and lnk_proxy/target.py before issue 18 ---------------

_TCHAR = frozenset(b"!#$%&'*+-.^_`|~0123456789"
                   b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_VERSIONS = (b"HTTP/1.1", b"HTTP/1.0")


def old_head_end(buffer: bytes) -> int:
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if b"\n\n" in buffer or b"\n\r\n" in buffer.replace(b"\r\n\r\n", b""):
            raise HeadError("a line of the request head ends in a bare LF")
        if len(buffer) > MAX_HEAD_BYTES:
            raise HeadError(f"the request head is larger than {MAX_HEAD_BYTES} bytes")
        return -1
    if end + 4 > MAX_HEAD_BYTES:
        raise HeadError(f"the request head is larger than {MAX_HEAD_BYTES} bytes")
    return end + 4


def _old_is_token(value: bytes) -> bool:
    return bool(value) and all(byte in _TCHAR for byte in value)


def old_check_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    if len(head) > MAX_HEAD_BYTES:
        raise HeadError(f"the request head is larger than {MAX_HEAD_BYTES} bytes")
    if not head.endswith(b"\r\n\r\n"):
        raise HeadError("the request head does not end with a blank line (CRLF CRLF)")
    body = head[:-4]
    for index, byte in enumerate(body):
        if byte == 0x0A and (index == 0 or body[index - 1] != 0x0D):
            raise HeadError("the request head has a bare LF")
        if byte == 0x0D and (index + 1 >= len(body) or body[index + 1] != 0x0A):
            raise HeadError("the request head has a bare CR")
        if (byte < 0x20 and byte not in (0x09, 0x0A, 0x0D)) or byte == 0x7F:
            raise HeadError(f"the request head has a control character (0x{byte:02x})")
    lines = body.split(b"\r\n")
    method, target, version = _old_request_line(lines[0])
    if len(lines) - 1 > MAX_HEADERS:
        raise HeadError(f"more than {MAX_HEADERS} header fields")
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            raise HeadError("an empty line inside the request head")
        if line[0] in b" \t":
            raise HeadError("a header line is folded (obs-fold)")
        name, colon, value = line.partition(b":")
        if not colon:
            raise HeadError("a header line has no colon")
        if not _old_is_token(name):
            raise HeadError("a header name is not a token (or has space before the colon)")
        if b"\t" in value.strip(b" \t"):
            raise HeadError("a header value has a tab inside it")
        fields.append((name.decode("ascii").lower(),
                       value.strip(b" \t").decode("latin-1")))
    head_module._check_framing(fields, version)  # unchanged
    return method, target, version, fields


def _old_request_line(line: bytes) -> tuple[str, str, str]:
    parts = line.split(b" ")
    if len(parts) != 3:
        raise HeadError("the request line is not METHOD SP TARGET SP VERSION")
    method, target, version = parts
    if not _old_is_token(method):
        raise HeadError("the method is not a token")
    if not target or any(byte <= 0x20 or byte >= 0x7F for byte in target):
        raise HeadError("the request target has a character outside visible ASCII")
    if version not in _VERSIONS:
        raise HeadError("the version is not HTTP/1.1 or HTTP/1.0")
    return method.decode("ascii"), target.decode("ascii"), version.decode("ascii")


_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")
Found = tuple[str, int, object]


def _old_host(text: str) -> Found:
    if text.startswith("["):
        if not text.endswith("]"):
            raise TargetError("an IPv6 literal without its closing bracket")
        inner = text[1:-1]
        if "%" in inner:
            raise TargetError("an IPv6 literal with a zone")
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise TargetError("the bracketed host is not an IPv6 address") from None
        return (str(address), 0, address)
    name = text.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > MAX_NAME_LENGTH:
        raise TargetError("an empty or over-long host name")
    labels = name.split(".")
    if any(not label or len(label) > 63 or not set(label) <= _LABEL_CHARS
           or label.startswith("-") or label.endswith("-") for label in labels):
        raise TargetError("the host is not a name of labels of a-z 0-9 - _ joined by dots")
    try:
        literal = ipaddress.IPv4Address(name)
    except ValueError:
        return (name, 0, None)
    return (str(literal), 0, literal)


def old_parse_connect(target: str) -> Found:
    if "@" in target or "/" in target:
        raise TargetError("a CONNECT target is host:port, nothing else")
    host, colon, port = target.rpartition(":")
    if not colon or not host:
        raise TargetError("a CONNECT target needs host:port")
    if ":" in host and not host.startswith("["):
        raise TargetError("an IPv6 address must be in brackets")
    found = _old_host(host)
    return (found[0], target_module._port(port), found[2])  # _port unchanged


def old_parse_absolute(target: str) -> tuple[Found, str]:
    if not target.lower().startswith("http://"):
        raise TargetError("an absolute-form request must be http:// (https goes by CONNECT)")
    rest = target[len("http://"):]
    slash = min((index for index in (rest.find("/"), rest.find("?")) if index >= 0),
                default=len(rest))
    authority, path = rest[:slash], rest[slash:]
    if "@" in authority:
        raise TargetError("a URL with userinfo (user@host) is refused")
    if "#" in target:
        raise TargetError("a request target with a fragment")
    if authority.startswith("["):
        end = authority.find("]")
        host_text, port_text = authority[:end + 1], authority[end + 1:]
        if port_text and not port_text.startswith(":"):
            raise TargetError("garbage after an IPv6 literal")
        port_text = port_text[1:]
    else:
        host_text, _, port_text = authority.partition(":")
    found = _old_host(host_text)
    port = target_module._port(port_text) if port_text else 80
    if not path:
        path = "/"
    elif path.startswith("?"):
        path = "/" + path
    return (found[0], port, found[2]), path


# -- the same verdicts -------------------------------------------------------------------


def _verdict(judge: Callable[[T], object], data: T) -> tuple[str, object]:
    """("admitted", what) or ("refused", the reason); any other exception propagates."""
    try:
        return "admitted", judge(data)
    except (HeadError, TargetError) as error:
        return "refused", str(error)


def _checked(data: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    found = check_head(data)
    return found.method, found.target, found.version, found.fields


def _connect(text: str) -> Found:
    found = parse_connect(text)
    return found.host, found.port, found.address


def _absolute(text: str) -> tuple[Found, str]:
    found, path = parse_absolute(text)
    return (found.host, found.port, found.address), path


def _same_head_verdicts(data: bytes) -> None:
    assert _verdict(_checked, data) == _verdict(old_check_head, data), data
    assert _verdict(head_end, data) == _verdict(old_head_end, data), data


def _head(request_line: bytes, fields: list[bytes]) -> bytes:
    return b"\r\n".join([request_line, *fields]) + b"\r\n\r\n"


_TOKENISH = st.text("!#$%&'*+-.^_`|~09azAZ ():@\t", min_size=0, max_size=8).map(
    lambda text: text.encode())
_VALUE = st.binary(max_size=10) | st.sampled_from(
    [b" a", b"a ", b" a b ", b"\ta", b"a\t", b"a\tb", b" \t ", b"", b"5", b"05", b"chunked",
     b"x\xff", b"\x80"])
_NAMES = st.sampled_from([b"Host", b"Content-Length", b"Transfer-Encoding", b"X", b"A-B",
                          b"host", b"X y", b"", b" X", b"\tX", b"X(", b"X\x00"]) | _TOKENISH
_FIELD = st.one_of(
    st.builds(lambda name, sep, value: name + sep + value, _NAMES,
              st.sampled_from([b":", b": ", b":\t", b" :", b""]), _VALUE),
    st.sampled_from([b"", b" folded", b"\tfolded", b"Host: a.example", b"Host: a", b"no colon"]))
_REQUEST_LINE = st.one_of(
    st.builds(lambda method, target, version: b" ".join([method, target, version]),
              st.sampled_from([b"GET", b"POST", b"CONNECT", b"G(T", b"", b"G\x7fT"]),
              st.sampled_from([b"http://a.example/x", b"a.example:443", b"/", b"",
                               b"http://a/\xff", b"http://a/ b", b"http://a/\x7f"]),
              st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b"http/1.1", b""])),
    st.binary(max_size=20))
_VALID_HEADS = st.builds(_head, st.just(b"GET http://a.example/x HTTP/1.1"),
                         st.lists(st.sampled_from([b"Host: a.example", b"X: y",
                                                   b"Accept:  */* ", b"A-B:c\td"]),
                                  max_size=5))
# Bytes put anywhere in a head: bare line endings, controls, blanks, a fold, a colon.
_STRAY = st.sampled_from([b"\r", b"\n", b"\r\n", b"\n\r", b"\r\r\n", b"\x00", b"\x01",
                          b"\x7f", b"\x1b", b"\x0b", b"\x0c", b"\t", b" ", b"\r\n ",
                          b"\r\n\t", b":", b"\xff", b"\r\n\r\n"])


def _with_strays(data: bytes, strays: list[tuple[int, bytes]]) -> bytes:
    for place, stray in strays:
        at = place % (len(data) + 1)
        data = data[:at] + stray + data[at:]
    return data


@fuzz(15)
@given(st.builds(_head, _REQUEST_LINE, st.lists(_FIELD, max_size=6)))
@example(b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n")
@example(b"\r\r\n\r\n")
@example(b"\n\r\n\r\n")
@example(b"GET http://a/ HTTP/1.1\r\nHost: a\r\r\n\r\n")
@example(b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\nX: y\r\n\r\n")
def test_fuzz_heads_assembled_from_parts_get_the_old_verdict(data: bytes) -> None:
    _same_head_verdicts(data)


@fuzz(15)
@given(_VALID_HEADS, st.lists(st.tuples(st.integers(0, 200), _STRAY), max_size=3))
def test_fuzz_valid_heads_with_stray_bytes_get_the_old_verdict(
        data: bytes, strays: list[tuple[int, bytes]]) -> None:
    _same_head_verdicts(_with_strays(data, strays))


@fuzz(15)
@given(st.binary(max_size=60))
def test_fuzz_any_bytes_get_the_old_verdict(data: bytes) -> None:
    _same_head_verdicts(data)
    _same_head_verdicts(data + b"\r\n\r\n")


def test_heads_at_the_limits_get_the_old_verdict() -> None:
    many = [b"Host: a", *(b"X-%d: y" % number for number in range(MAX_HEADERS))]
    for fields in (many, many[:-1]):
        _same_head_verdicts(_head(b"GET http://a/ HTTP/1.1", fields))
    for size in (MAX_HEAD_BYTES - 1, MAX_HEAD_BYTES, MAX_HEAD_BYTES + 1):
        padded = _head(b"GET http://a/ HTTP/1.1", [b"Host: a", b"X: "])
        padded = padded[:-4] + b"y" * (size - len(padded)) + b"\r\n\r\n"
        assert len(padded) == size
        _same_head_verdicts(padded)
        _same_head_verdicts(padded[:-4])
        _same_head_verdicts(padded[:-4] + b"\n\n")


@pytest.mark.parametrize("byte", range(256))
def test_every_byte_anywhere_in_a_head_gets_the_old_verdict(byte: int) -> None:
    valid = _head(b"GET http://a.example/x HTTP/1.1", [b"Host: a.example", b"X: y z"])
    for at in range(len(valid) + 1):
        _same_head_verdicts(valid[:at] + bytes([byte]) + valid[at:])


def _same_target_verdicts(text: str) -> None:
    assert _verdict(_connect, text) == _verdict(old_parse_connect, text), text
    assert _verdict(_absolute, text) == _verdict(old_parse_absolute, text), text


_HOSTS = st.one_of(
    st.text("abz09-_.", min_size=0, max_size=12),
    st.sampled_from(["a.example", "A.Example.", "10.0.0.1", "10.0.0.01", "1.2.3", "1.2.3.4.",
                     "999.1.1.1", "[::1]", "[::1%eth0]", "[::1", "[fe80::1]x", "-a", "a-",
                     "a..b", "a" * 63, "a" * 64, ".".join(["a" * 63] * 4),
                     "b." + "a" * 251, "İ", "\u212a.example", "٣.٣.٣.٣", "xn--a", "_srv",
                     "1-2", "a_b", "0x7f.1", "127.1", ""]),
    st.text(max_size=8))
_PORTS = st.sampled_from(["", ":", ":80", ":443", ":0", ":65535", ":65536", ":a", ": 1",
                          ":٣", ":00080", "::1"])
_PATHS = st.sampled_from(["", "/", "/x?y", "?q", "/#f", "#f", "/a@b", "/?", "//"])
_SCHEMES = st.sampled_from(["http://", "HTTP://", "hTtP://", "https://", "http:/", "",
                            "http://user@", "İttp://", "ftp://"])


@fuzz(15)
@given(_SCHEMES, _HOSTS, _PORTS, _PATHS)
def test_fuzz_urls_and_connect_targets_get_the_old_verdict(
        scheme: str, host: str, port: str, path: str) -> None:
    _same_target_verdicts(scheme + host + port + path)
    _same_target_verdicts(host + port)


@fuzz(15)
@given(st.text(max_size=40))
def test_fuzz_any_text_gets_the_old_verdict(text: str) -> None:
    _same_target_verdicts(text)
    _same_target_verdicts("http://" + text)
    _same_target_verdicts(text + ":443")
