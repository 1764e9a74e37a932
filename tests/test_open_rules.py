"""The open verb's URL rules (lnk_proxy/open_rules.py): what is refused and why, the one
ASCII form shown and opened, a login's callback port. Sans IO: no proxy, no opener."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_proxy.open_rules import (
    MAX_URL_BYTES,
    OpenRuleError,
    OpenUrl,
    callback_port,
    check_url,
    display,
)
from tests.conftest import fuzz

NOT_HTTP = "only http and https URLs are opened"
RELATIVE = "a relative URL is refused: http:// or https:// only"
USERINFO = "a URL with userinfo ('@' before the host) is refused"
NO_SLASHES = "after the scheme must come '//' and the host"
NO_HOST = "a URL without a host is refused"
BACKSLASH = "a backslash in the URL is refused (a browser reads it as '/')"
TOO_LONG = f"a URL longer than {MAX_URL_BYTES} bytes is refused"
CONTROL = "a control character in the URL is refused"
NUMERIC = "a numeric host must be a dotted IPv4 address (a.b.c.d)"
PORT = "a port must be 1 to 65535 in decimal digits"
IDNA_BAD = "a host IDNA cannot encode or decode is refused"
IDNA_REWRITE = "a host IDNA would rewrite is refused (it would open another name)"

REFUSED = [
    (b"", "an empty URL is refused"),
    (b"javascript:alert(1)", NOT_HTTP),
    (b"JavaScript:alert(document.cookie)", NOT_HTTP),
    (b"file:///etc/passwd", NOT_HTTP),
    (b"data:text/html,<script>x</script>", NOT_HTTP),
    (b"ftp://ftp.example.org/", NOT_HTTP),
    (b"mailto:a@example.org", NOT_HTTP),
    (b"//evil.example/", "a scheme-relative URL ('//host') is refused: http:// or https:// only"),
    (b"/relative/path", RELATIVE),
    (b"evil.example/x", RELATIVE),
    (b" https://example.org/", RELATIVE),
    (b"1http://example.org/", RELATIVE),
    (b"https:evil.example", NO_SLASHES),
    (b"https:/evil.example", NO_SLASHES),
    (b"https://user@evil.example/", USERINFO),
    (b"https://user:pass@evil.example/", USERINFO),
    (b"https://good.example@evil.example/", USERINFO),
    (b"https://@evil.example/", USERINFO),
    (b"https://evil.example@/", USERINFO),
    (b"https://good.example\\@evil.example/", BACKSLASH),
    (b"https://example.org/a\\b", BACKSLASH),
    (b"https:///path", NO_HOST),
    (b"https://", NO_HOST),
    (b"https://?q", NO_HOST),
    (b"https://:443/", NO_HOST),
    (b"https://a..b/", NO_HOST),
    (b"https://.example.org/", NO_HOST),
    (b"java\tscript:alert(1)", CONTROL),
    (b"https://example.org/\nx", CONTROL),
    (b"https://example.org/\rx", CONTROL),
    (b"https://example.org/\x00", CONTROL),
    (b"https://example.org/\x7f", CONTROL),
    (b"https://example.org/\xff", "a URL that is not UTF-8 is refused"),
    (b"https://example.org:0/", PORT),
    (b"https://example.org:65536/", PORT),
    (b"https://example.org:080/", PORT),
    (b"https://example.org:/", PORT),
    (b"https://example.org:+80/", PORT),
    (b"https://example.org:http/", PORT),
    (b"https://%65vil.example/", "a '%' in the host is refused (a browser decodes it)"),
    (b"https://[fe80::1%25eth0]/", "a '%' in the host is refused (a browser decodes it)"),
    (b"https://2130706433/", NUMERIC),
    (b"https://0x7f.1/", NUMERIC),
    (b"https://127.1/", NUMERIC),
    (b"https://0177.0.0.1/", NUMERIC),
    (b"https://example.123/", NUMERIC),
    (b"https://[::1/", "an IPv6 host must be in brackets"),
    (b"https://[not:an:address]/", "the IPv6 host is not an IPv6 address"),
    (b"https://a[b]c/", "a bracket in the host is refused"),
    (b"https://evil.example<x/", "a host may hold only letters, digits, '-', '.' and '_'"),
    (b"https://ev il.example/", "a host may hold only letters, digits, '-', '.' and '_'"),
    (b"https://" + b"a" * 64 + b".example/", IDNA_BAD),
    (b"https://xn--zz.example/", IDNA_BAD),
    ("https://app\u200ble.com/".encode(), IDNA_REWRITE),
    ("https://stra\u00dfe.de/".encode(), IDNA_REWRITE),
    ("https://\uff41pple.com/".encode(), IDNA_REWRITE),
    (b"https://example.org/" + b"a" * MAX_URL_BYTES, TOO_LONG),
    (b"https://example.org/" + "\u00e9".encode() * 3000,
     f"a URL longer than {MAX_URL_BYTES} bytes once escaped is refused"),
]


@pytest.mark.parametrize(("raw", "reason"), REFUSED)
def test_refused_with_its_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(OpenRuleError) as caught:
        check_url(raw)
    assert caught.value.status == 400
    assert caught.value.reason == reason


SHOWN = [
    (b"https://docs.example.org/page?a=1", "https://docs.example.org/page?a=1"),
    (b"HTTPS://Docs.Example.ORG/Page?A=1#Frag", "https://docs.example.org/Page?A=1#Frag"),
    (b"http://example.org", "http://example.org"),
    (b"https://example.org:8443/x", "https://example.org:8443/x"),
    (b"https://example.org./", "https://example.org./"),
    (b"https://my_host.example/", "https://my_host.example/"),
    (b"https://127.0.0.1:8080/", "https://127.0.0.1:8080/"),
    (b"https://[::1]:8080/", "https://[::1]:8080/"),
    (b"https://[2001:DB8::1]/", "https://[2001:db8::1]/"),
    # The homograph: a Cyrillic a (U+0430) shows as punycode.
    ("https://\u0430pple.com".encode(), "https://xn--pple-43d.com"),
    ("https://\u0410pple.com/".encode(), "https://xn--pple-43d.com/"),
    (b"https://xn--pple-43d.com/", "https://xn--pple-43d.com/"),
    ("https://b\u00fccher.example/b\u00fccher".encode(), "https://xn--bcher-kva.example/b%C3%BCcher"),
    # A bidi override in the path: escaped, so the text after it is not shown reversed.
    ("https://example.org/\u202egpj.exe".encode(), "https://example.org/%E2%80%AEgpj.exe"),
    ("https://example.org/?q=\u2066x\u2069\u200e\u200f".encode(),
     "https://example.org/?q=%E2%81%A6x%E2%81%A9%E2%80%8E%E2%80%8F"),
    # Invisible characters: zero-width space, joiners, word joiner, BOM, soft hyphen.
    ("https://example.org/a\u200bb".encode(), "https://example.org/a%E2%80%8Bb"),
    ("https://example.org/\u200c\u200d\u2060\ufeff\u00ad".encode(),
     "https://example.org/%E2%80%8C%E2%80%8D%E2%81%A0%EF%BB%BF%C2%AD"),
    ("https://example.org/\u0085".encode(), "https://example.org/%C2%85"),
    (b"https://example.org/a b", "https://example.org/a%20b"),
    (b"https://example.org/a%20b%zz", "https://example.org/a%20b%zz"),
    (b"https://example.org/@user", "https://example.org/@user"),
    (b"https://example.org?next=https://x@evil.example", "https://example.org?next=https://x@evil.example"),
    (b"https://example.org#@evil.example", "https://example.org#@evil.example"),
]


@pytest.mark.parametrize(("raw", "shown"), SHOWN)
def test_shown_as_it_opens(raw: bytes, shown: str) -> None:
    url = check_url(raw)
    assert display(url) == shown
    assert url.opened == shown


def test_hosts_kept_for_the_log() -> None:
    url = check_url("https://\u0430pple.com:444/secret?token=x".encode())
    assert (url.scheme, url.host, url.port) == ("https", "xn--pple-43d.com", 444)


def test_an_8_kib_url_is_shown_whole() -> None:
    raw = b"https://example.org/?q=" + b"x" * (8 * 1024)
    assert display(check_url(raw)) == raw.decode()


def test_at_the_limit() -> None:
    raw = b"https://example.org/" + b"a" * (MAX_URL_BYTES - len(b"https://example.org/"))
    assert len(raw) == MAX_URL_BYTES
    assert display(check_url(raw)) == raw.decode()
    with pytest.raises(OpenRuleError):
        check_url(raw + b"a")


def test_reasons_never_quote_the_url() -> None:
    for raw, _ in REFUSED:
        with pytest.raises(OpenRuleError) as caught:
            check_url(raw)
        for part in (b"evil", b"passwd", b"alert", b"pass@", b"2130706433"):
            if part in raw:
                assert part.decode() not in caught.value.reason


def test_an_open_url_cannot_be_made_invalid() -> None:
    with pytest.raises(ValueError):
        OpenUrl(scheme="javascript", host="x", port=None, opened="javascript:x")
    with pytest.raises(ValueError):
        OpenUrl(scheme="https", host="x", port=None, opened="https://x/\u202e")


def _port(raw: str) -> int | None:
    return callback_port(check_url(raw.encode()))


CALLBACKS = [
    ("https://auth.example.org/authorize?client_id=c&redirect_uri=http%3A%2F%2Flocalhost%3A8123%2Fcb&state=s",
     8123),
    ("https://auth.example.org/a?redirect_url=http%3A%2F%2F127.0.0.1%3A9000", 9000),
    ("https://auth.example.org/a?redirect_uri=http://localhost:1/", 1),
    ("https://auth.example.org/a?redirect_uri=http://localhost:65535?x=1", 65535),
    ("https://auth.example.org/a?redirect%5Furi=http://localhost:4000", 4000),
    ("https://auth.example.org/a?redirect_uri=http://localhost:4000&redirect_url=http://localhost:4000",
     4000),
    ("https://auth.example.org/a?x=1", None),
    ("https://auth.example.org/a", None),
    ("https://auth.example.org/a?redirect_uri=https://localhost:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://evil.example:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost.:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://127.1:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://[::1]:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://0.0.0.0:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://u@localhost:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost@evil.example:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost:8123@evil.example/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost/cb", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost:0/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost:65536/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost:08123/", None),
    ("https://auth.example.org/a?redirect_uri=HTTP://LOCALHOST:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http%253A%252F%252Flocalhost%253A8123", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost:8123%2F", 8123),
    ("https://auth.example.org/a?redirect_uri=http://localhost.evil.example:8123/", None),
    ("https://auth.example.org/a?redirect_uri=http://localhost:8123.evil.example/", None),
    ("https://auth.example.org/a#redirect_uri=http://localhost:8123/", None),
    ("https://auth.example.org/a?other_redirect_uri=http://localhost:8123/", None),
]


@pytest.mark.parametrize(("raw", "port"), CALLBACKS)
def test_callback_port(raw: str, port: int | None) -> None:
    assert _port(raw) == port


@pytest.mark.parametrize("raw", [
    "https://auth.example.org/a?redirect_uri=http://localhost:4000&redirect_url=http://localhost:4001",
    "https://auth.example.org/a?redirect_uri=http://localhost:4000&redirect_uri=https://evil.example/",
])
def test_redirects_that_disagree_are_refused(raw: str) -> None:
    with pytest.raises(OpenRuleError) as caught:
        _port(raw)
    assert caught.value.reason == "the URL names more than one redirect"


# Properties. Any bytes: either a checked URL or OpenRuleError, nothing else; a checked
# URL is shown as printable ASCII and opened exactly as shown.
def _shown_is_opened(url: OpenUrl) -> None:
    shown = display(url)
    assert shown == url.opened
    assert shown.isascii() and shown.isprintable() and " " not in shown
    assert len(shown) <= MAX_URL_BYTES


@fuzz(9)
@given(st.binary(max_size=200))
def test_any_bytes_check_or_refuse(raw: bytes) -> None:
    try:
        url = check_url(raw)
    except OpenRuleError:
        return
    _shown_is_opened(url)


_LETTERS = st.characters(codec="utf-8", categories=("Ll", "Lu", "Lo", "Nd"))
_HOST_LABEL = st.text(alphabet=_LETTERS, min_size=1, max_size=12).filter(
    lambda label: not label.lower().startswith("xn--"))


@fuzz(9)
@given(st.lists(_HOST_LABEL, min_size=1, max_size=3), st.text(max_size=80))
def test_any_tail_is_shown_as_printable_ascii(labels: list[str], tail: str) -> None:
    raw = ("https://" + ".".join(labels) + ".example/" + tail).encode("utf-8", "surrogatepass")
    try:
        url = check_url(raw)
    except OpenRuleError:
        return
    _shown_is_opened(url)


@fuzz(9)
@given(_HOST_LABEL, _HOST_LABEL, st.text(max_size=20))
def test_different_hosts_show_differently(first: str, second: str, tail: str) -> None:
    if first.lower() == second.lower():
        return
    path = "/" + tail
    try:
        one = check_url(f"https://{first}.example{path}".encode("utf-8", "surrogatepass"))
        other = check_url(f"https://{second}.example{path}".encode("utf-8", "surrogatepass"))
    except OpenRuleError:
        return
    assert one.host != other.host
    assert display(one) != display(other)
