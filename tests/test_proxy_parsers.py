"""The proxy's sans-IO pieces: the head check, the target parsers, the decision, SNI.

Hypothesis runs the fuzz profile of tests/conftest.py (`LNK_FUZZ=deep` for many more).
"""

from __future__ import annotations

import ipaddress
import ssl

import h11
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_proxy.decide import (
    MachineFacts,
    address_refusal,
    name_allowed,
    parse_hosts,
)
from lnk_proxy.head import MAX_HEAD_BYTES, MAX_HEADERS, HeadError, check_head, head_end
from lnk_proxy.sni import NEED_MORE, server_name
from lnk_proxy.target import TargetError, parse_absolute, parse_connect
from tests.conftest import fuzz


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# -- the head check (N4) ------------------------------------------------------------------


def test_a_plain_request_is_admitted() -> None:
    found = check_head(head("GET http://a.example/x?y HTTP/1.1", "Host: a.example",
                            "User-Agent: curl/8", "Accept: */*"))
    assert (found.method, found.target, found.version) == ("GET", "http://a.example/x?y",
                                                           "HTTP/1.1")
    assert found.get("host") == ["a.example"]


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"GET http://a/ HTTP/1.1\nHost: a\r\n\r\n", "bare LF"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\n\r\n", "does not end with a blank line"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\rX: y\r\n\r\n", "bare CR"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\x00\r\n\r\n", "control character (0x00)"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n", "control character"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\r\nX: \x7f\r\n\r\n", "control character"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\r\nX: y\r\n z\r\n\r\n", "folded"),
        (b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n", "both Content-Length and Transfer-Encoding"),
        (b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
         "more than one Content-Length"),
        (b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", "not a number"),
        (b"POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
         "other than one `chunked`"),
        (b"GET http://a/ HTTP/1.1\r\nHost : a\r\n\r\n", "not a token"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "more than one Host"),
        (b"GET http://a/ HTTP/1.1\r\n\r\n", "without Host"),
        (b"GET  http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", "METHOD SP TARGET SP VERSION"),
        (b"GET http://a/ HTTP/2\r\nHost: a\r\n\r\n", "version"),
        (b"G(T http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", "method is not a token"),
        (b"GET http://a/\xff HTTP/1.1\r\nHost: a\r\n\r\n", "outside visible ASCII"),
        (b"GET http://a/ HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", "no colon"),
    ],
)
def test_N4_smuggling_heads_are_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(HeadError) as caught:
        check_head(raw)
    assert reason in str(caught.value)


def test_limits_on_size_and_fields() -> None:
    many = ["GET http://a/ HTTP/1.1", "Host: a", *(f"X-{n}: y" for n in range(MAX_HEADERS))]
    with pytest.raises(HeadError, match="more than 100 header fields"):
        check_head(head(*many))
    check_head(head(*many[:-1]))  # exactly at the limit
    big = head("GET http://a/ HTTP/1.1", "Host: a", "X: " + "y" * MAX_HEAD_BYTES)
    with pytest.raises(HeadError, match="larger than"):
        check_head(big)
    with pytest.raises(HeadError, match="larger than"):
        head_end(big[:-4])


def test_head_end_finds_the_end_and_refuses_a_bare_lf_end() -> None:
    assert head_end(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nbody") == 27
    assert head_end(b"GET / HTTP/1.1\r\nHost: a\r\n") == -1
    with pytest.raises(HeadError, match="bare LF"):
        head_end(b"GET / HTTP/1.1\nHost: a\n\n")


_PIECES = st.sampled_from([
    b"GET", b"POST", b"CONNECT", b" ", b"\t", b"http://a.example/x", b"a.example:443",
    b"HTTP/1.1", b"HTTP/1.0", b"\r\n", b"\n", b"\r", b"Host: a.example", b"Host:",
    b"Content-Length: 5", b"Content-Length: 05", b"Transfer-Encoding: chunked",
    b"X: y", b" z", b"\x00", b"\x01", b"\x7f", b"\xff", b":", b"\r\n\r\n",
])


# Bytes put into a valid head: the bare line endings (as likely as all the rest together,
# since they are what smuggling is made of), other control characters, blanks.
_STRAY = st.one_of(st.sampled_from([b"\r", b"\n"]),
                   st.sampled_from([b"\r\n", b"\n\r", b"\x00", b"\x01", b"\x7f", b"\x1b",
                                    b"\t", b" "]))


def _with_strays(fields: list[bytes], strays: list[tuple[int, int, bytes]]) -> bytes:
    """A head that is admitted as it is (a request line, Host, `fields`), with stray bytes
    put into its lines: (which line, where in it, what)."""
    lines = [b"GET http://a.example/x HTTP/1.1", b"Host: a.example", *fields]
    for which, place, stray in strays:
        line = lines[which % len(lines)]
        at = place % (len(line) + 1)
        lines[which % len(lines)] = line[:at] + stray + line[at:]
    return b"\r\n".join(lines) + b"\r\n\r\n"


# Heads near valid ones: a valid head with a few bytes put in, so the fuzzer is not left to
# assemble a request line from pieces before any stray byte is judged at all.
_NEAR_VALID = st.builds(
    _with_strays,
    st.lists(st.sampled_from([b"X: y", b"Content-Length: 5", b"Accept: */*", b"A-B: c d"]),
             max_size=4),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40), _STRAY), min_size=1,
             max_size=3))


@fuzz(3)
@given(st.lists(_PIECES, max_size=16).map(b"".join))
def test_fuzz_the_head_check_admits_or_raises_its_own_error(data: bytes) -> None:
    _admitted_heads_have_no_stray_byte(data)


@fuzz(3)
@given(_NEAR_VALID)
def test_fuzz_a_valid_head_with_stray_bytes_is_refused_or_still_clean(data: bytes) -> None:
    _admitted_heads_have_no_stray_byte(data)


def _admitted_heads_have_no_stray_byte(data: bytes) -> None:
    try:
        found = check_head(data)
    except HeadError:
        return
    # Admitted: no bare line ending (every CR begins a CRLF, every LF ends one), and no
    # control character anywhere but a tab.
    assert data.endswith(b"\r\n\r\n")
    unpaired = data[:-4].replace(b"\r\n", b"")
    assert b"\r" not in unpaired and b"\n" not in unpaired, data
    assert not any((byte < 0x20 and byte != 0x09) or byte == 0x7F for byte in unpaired), data
    assert found.method


def _lenient_server_reads(data: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]]:
    """How a server that ends a line at a bare LF (Go's, Node's) reads a head."""
    lines = [line.rstrip(b"\r") for line in data.split(b"\n")]
    method, target, _version = lines[0].split(b" ", 2)
    fields = []
    for line in lines[1:]:
        if not line:
            break
        name, _, value = line.partition(b":")
        fields.append((name.strip().lower(), value.strip()))
    return method, target, fields


@fuzz(3)
@given(st.lists(st.tuples(st.from_regex(rb"[A-Za-z][A-Za-z0-9-]{0,10}", fullmatch=True),
                          st.binary(max_size=12)), max_size=6),
       st.sampled_from([b"GET", b"POST", b"PUT"]))
def test_fuzz_what_the_proxy_forwards_a_lenient_server_reads_as_judged(
    fields: list[tuple[bytes, bytes]], method: bytes
) -> None:
    """The seed's property: whatever the proxy forwards, a server that ends lines at a
    bare LF reads the same request the proxy judged."""
    raw = (method + b" http://a.example/p?q HTTP/1.1\r\nHost: a.example\r\n"
           + b"".join(name + b": " + value + b"\r\n" for name, value in fields) + b"\r\n")
    try:
        judged = check_head(raw)
    except HeadError:
        return
    client = h11.Connection(h11.SERVER)
    try:
        client.receive_data(raw)
        request = client.next_event()
    except h11.RemoteProtocolError:
        return  # h11 refusing what we admitted refuses it too: nothing is forwarded
    assert isinstance(request, h11.Request)
    upstream = h11.Connection(h11.CLIENT)
    forwarded = upstream.send(h11.Request(method=request.method, target=b"/p?q",
                                          headers=list(request.headers)))
    method_read, target_read, fields_read = _lenient_server_reads(forwarded)
    assert method_read.decode() == judged.method
    assert target_read == b"/p?q"
    assert [(name.decode(), value.decode("latin-1")) for name, value in fields_read] == [
        (name, value) for name, value in judged.fields]


# -- the target parsers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [("a.example:443", "a.example", 443), ("A.Example.:8443", "a.example", 8443),
     ("[::1]:443", "::1", 443), ("10.0.0.1:80", "10.0.0.1", 80)],
)
def test_connect_targets(text: str, host: str, port: int) -> None:
    found = parse_connect(text)
    assert (found.host, found.port) == (host, port)


@pytest.mark.parametrize("text", ["/", "a:b", "a:99999", "user@a:1", "*", "a", ":443",
                                  "::1:443", "[::1%eth0]:443", "a..b:443", "-a:443",
                                  "a/b:443", "a:0", "a: 443", "[::1:443"])
def test_connect_targets_refused(text: str) -> None:
    with pytest.raises(TargetError):
        parse_connect(text)


@pytest.mark.parametrize(
    ("url", "authority", "path"),
    [("http://a.example/x?y", "a.example:80", "/x?y"), ("http://a.example", "a.example:80", "/"),
     ("http://a.example:8080?q", "a.example:8080", "/?q"), ("HTTP://[::1]:81/", "[::1]:81", "/")],
)
def test_absolute_urls(url: str, authority: str, path: str) -> None:
    found, sent = parse_absolute(url)
    assert (found.authority, sent) == (authority, path)


@pytest.mark.parametrize("url", ["https://a/", "http://user@a/", "http://a@b/", "http://a:x/",
                                 "http://a/#f", "ftp://a/", "http://[::1/", "http:///x"])
def test_absolute_urls_refused(url: str) -> None:
    with pytest.raises(TargetError):
        parse_absolute(url)


@fuzz(3)
@given(st.text(max_size=40))
def test_fuzz_the_connect_parser_parses_or_raises_its_own_error(text: str) -> None:
    try:
        found = parse_connect(text)
    except TargetError:
        return
    assert 1 <= found.port <= 65535
    assert "@" not in found.host and "/" not in found.host


# -- the decision ---------------------------------------------------------------------------


def test_names_against_hosts() -> None:
    rules = parse_hosts(("api.example.com", "*.example.org", "example.net:8443"))
    assert name_allowed(rules, "api.example.com", 443)
    assert name_allowed(rules, "api.example.com", 80)
    assert not name_allowed(rules, "api.example.com", 22)
    assert name_allowed(rules, "x.example.org", 443)
    assert name_allowed(rules, "a.b.example.org", 443)
    assert not name_allowed(rules, "example.org", 443)  # *.x covers names under x only
    assert not name_allowed(rules, "badexample.org", 443)
    assert name_allowed(rules, "example.net", 8443)
    assert not name_allowed(rules, "example.net", 443)


class _Machine(MachineFacts):
    def is_local(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return str(address) in ("192.0.2.10", "2001:db8::10", "203.0.113.7")

    def on_network(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return address in ipaddress.ip_network("192.0.2.0/24") if address.version == 4 \
            else False


@pytest.mark.parametrize("text", [
    "127.0.0.1", "127.1.2.3", "0.0.0.0", "::1", "::", "::ffff:127.0.0.1", "::ffff:7f00:1",  # noqa: S104
    "169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192", "169.254.1.1",
    "fe80::1", "192.0.2.10", "192.0.2.99", "203.0.113.7", "2001:db8::10", "224.0.0.1",
    "64:ff9b::7f00:1", "2002:7f00:1::1", "255.255.255.255",
])
def test_N3_this_machine_and_metadata_are_refused(text: str) -> None:
    assert address_refusal(ipaddress.ip_address(text), _Machine()) is not None


@pytest.mark.parametrize("text", ["93.184.215.14", "10.201.0.2", "2606:2800:21f:cb07::1"])
def test_other_hosts_pass(text: str) -> None:
    assert address_refusal(ipaddress.ip_address(text), _Machine()) is None


def test_the_real_machine_knows_its_own_addresses() -> None:
    from lnk_proxy.machine import Machine

    machine = Machine.gather()
    assert machine.is_local(ipaddress.ip_address("127.0.0.1"))
    assert not machine.is_local(ipaddress.ip_address("192.0.2.123"))  # TEST-NET-1


# -- SNI ---------------------------------------------------------------------------------------


def _hello(name: str | None) -> bytes:
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_sni_read_whole_in_pieces_or_absent() -> None:
    hello = _hello("Allowed.Example")
    assert server_name(hello) == "allowed.example"
    assert server_name(hello[:40]) is NEED_MORE
    assert server_name(_hello(None)) is None
    assert server_name(b"GET / HTTP/1.1\r\n\r\n") is None
