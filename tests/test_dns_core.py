"""The sandbox resolver's sans-IO core: lnk_dns.message (DNS's message format) and
lnk_dns.answer (policy).

Queries are built with dnslib, as a client would send them, or byte by byte where dnslib
will not build the hostile thing. The Hypothesis tests hold the one promise the proxy relies
on: whatever bytes arrive, parsing returns a value or raises DnsFormatError, nothing else.
Their examples are the fuzz profile's (tests/conftest.py; `LNK_FUZZ=deep` for many more).
"""

from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Callable
from typing import Any

import pytest
from dnslib import (
    AAAA,
    CLASS,
    CNAME,
    EDNS0,
    MX,
    QTYPE,
    RR,
    SRV,
    TXT,
    A,
    DNSHeader,
    DNSQuestion,
    DNSRecord,
)
from hypothesis import given
from hypothesis import strategies as st

from lnk_dns.answer import OWN_TTL_SECONDS, Local, Outside, Refuse, decide, service_host
from lnk_dns.message import (
    EDNS_PAYLOAD_SIZE,
    MAX_QUERY_BYTES,
    MAX_TTL_SECONDS,
    DnsFormatError,
    Query,
    Record,
    answer_key,
    error_reply,
    header_id,
    outside_query,
    parse_outside_reply,
    parse_query,
    reply,
    reply_for_size,
    tcp_frame,
    tcp_frames,
)
from lnk_proxy.resolver import absolute, hosts_file_addresses
from tests.conftest import fuzz

OWN_ADDRESS = "127.53.0.1"
LOCAL_REASON = (
    "SRV and TXT for a local network's names (.local, one label) are refused: this"
    " machine's resolver would answer them from a network the sandbox never reaches"
)


def query_bytes(
    name: str,
    qtype: str = "A",
    qclass: str = "IN",
    *,
    query_id: int = 0x1234,
    rd: bool = True,
    edns: int | None = None,
) -> bytes:
    record = DNSRecord(
        DNSHeader(id=query_id, bitmap=0, rd=int(rd)),
        q=DNSQuestion(name, getattr(QTYPE, qtype), getattr(CLASS, qclass)),
    )
    if edns is not None:
        record.add_ar(EDNS0(udp_len=edns))
    return bytes(record.pack())


def raw_query(labels: list[bytes], *, qtype: int = 1, flags: int = 0x0100) -> bytes:
    """A query written byte by byte, for names dnslib would not encode."""
    name = b"".join(bytes([len(label)]) + label for label in labels) + b"\x00"
    return struct.pack("!HHHHHH", 0x4242, flags, 1, 0, 0, 0) + name + struct.pack("!HH", qtype, 1)


def make(name: str, qtype: str = "A", qclass: str = "IN", **kwargs: Any) -> Query:
    return parse_query(query_bytes(name, qtype, qclass, **kwargs))


class Policy:
    """An `allowed` that allows some names and remembers what it was asked."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.asked: list[str] = []

    def __call__(self, name: str) -> bool:
        self.asked.append(name)
        return name in self.names


class Pool:
    """A `give` with a fixed answer that remembers what it was asked."""

    def __init__(self, address: str | None = OWN_ADDRESS) -> None:
        self.address = address
        self.asked: list[str] = []

    def __call__(self, name: str) -> str | None:
        self.asked.append(name)
        return self.address


def allow_all(name: str) -> bool:
    return True


def never_give(name: str) -> str | None:
    raise AssertionError(f"give({name!r}) should not be called")


def decide_for(
    name: str,
    qtype: str = "A",
    qclass: str = "IN",
    *,
    allowed: Callable[[str], bool] = allow_all,
    give: Callable[[str], str | None] = never_give,
) -> Local | Outside | Refuse:
    return decide(make(name, qtype, qclass), allowed=allowed, give=give)


# --- answer.decide, rule by rule -------------------------------------------------------------


@pytest.mark.parametrize("qclass", ["CH", "Hesiod", "*"])
def test_a_class_other_than_in_is_refused(qclass: str) -> None:
    policy = Policy("version.bind")
    result = decide_for("version.bind", "TXT", qclass, allowed=policy)
    assert result == Refuse("REFUSED", "only class IN is answered")
    assert policy.asked == []


@pytest.mark.parametrize(
    "name",
    [
        "printer.local",
        "local",
        "_ipp._tcp.local",
        "_ipp._tcp.printer.local",
        "printer",
        "_ipp._tcp.printer",
        "_only._underscores",
        "",
    ],
)
@pytest.mark.parametrize("qtype", ["SRV", "TXT"])
@pytest.mark.parametrize("allowed", [True, False])
def test_srv_and_txt_for_local_network_names_are_refused(
    name: str, qtype: str, allowed: bool
) -> None:
    result = decide_for(name, qtype, allowed=lambda _name: allowed)
    assert result == Refuse("REFUSED", LOCAL_REASON)


@pytest.mark.parametrize("name", ["localhost.example.com", "mylocal", "notlocal.example"])
def test_names_that_merely_contain_local_are_not_local(name: str) -> None:
    result = decide_for(name, "TXT", allowed=Policy(name))
    if "." in name:
        assert result == Outside(name, "TXT")
    else:
        assert result == Refuse("REFUSED", LOCAL_REASON)


def test_a_for_a_local_name_is_not_refused_by_the_local_rule() -> None:
    pool = Pool()
    result = decide_for("printer.local", "A", allowed=Policy("printer.local"), give=pool)
    assert isinstance(result, Local)
    assert pool.asked == ["printer.local"]


def test_the_allow_check_strips_leading_underscore_labels() -> None:
    policy = Policy("cluster0.example.net")
    result = decide_for("_mongodb._tcp.cluster0.example.net", "SRV", allowed=policy)
    assert result == Outside("_mongodb._tcp.cluster0.example.net", "SRV")
    assert policy.asked == ["cluster0.example.net"]


def test_only_leading_underscore_labels_are_stripped() -> None:
    policy = Policy("example.com")
    result = decide_for("a._b.example.com", "TXT", allowed=policy)
    assert result == Refuse("NXDOMAIN", "a._b.example.com is not a name this sandbox may reach")
    assert policy.asked == ["a._b.example.com"]


def test_a_name_of_only_underscore_labels_is_not_allowed_and_not_asked() -> None:
    policy = Policy("")
    result = decide_for("_a._b", "A", allowed=policy)
    assert result == Refuse("NXDOMAIN", "_a._b is not a name this sandbox may reach")
    assert policy.asked == []


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("_mongodb._tcp.cluster0.example.net", "cluster0.example.net"),
        ("_dmarc.example.com", "example.com"),
        ("example.com", "example.com"),
        ("a._b.example.com", "a._b.example.com"),
        ("_a._b", ""),
        ("", ""),
    ],
)
def test_service_host(name: str, host: str) -> None:
    assert service_host(name) == host


@pytest.mark.parametrize("qtype", ["A", "AAAA", "SRV", "TXT", "MX", "ANY", "HTTPS"])
def test_a_name_not_allowed_does_not_exist(qtype: str) -> None:
    policy = Policy("example.com")
    result = decide_for("evil.example.org", qtype, allowed=policy)
    assert result == Refuse("NXDOMAIN", "evil.example.org is not a name this sandbox may reach")
    assert policy.asked == ["evil.example.org"]


def test_the_allow_check_sees_the_lower_cased_name() -> None:
    policy = Policy("api.example.com")
    pool = Pool()
    result = decide_for("API.Example.COM", "A", allowed=policy, give=pool)
    assert result == Local(
        "NOERROR",
        [Record("api.example.com", "A", OWN_TTL_SECONDS, A(OWN_ADDRESS))],
        note=f"answer={OWN_ADDRESS}",
    )
    assert policy.asked == ["api.example.com"]
    assert pool.asked == ["api.example.com"]


def test_an_allowed_name_gets_an_address_of_the_sandboxs_own() -> None:
    pool = Pool("127.53.0.9")
    result = decide_for("api.example.com", "A", allowed=Policy("api.example.com"), give=pool)
    assert result == Local(
        "NOERROR",
        [Record("api.example.com", "A", 60, A("127.53.0.9"))],
        note="answer=127.53.0.9",
    )
    assert pool.asked == ["api.example.com"]


def test_an_a_query_for_a_service_name_gets_no_address() -> None:
    result = decide_for("_acme-challenge.example.com", "A", allowed=Policy("example.com"))
    assert result == Local("NOERROR", [], note="no address for a service name")


def test_no_more_addresses_is_servfail() -> None:
    result = decide_for("api.example.com", "A", allowed=allow_all, give=Pool(None))
    assert result == Refuse(
        "SERVFAIL", "no more addresses of the sandbox's own to give (limit reached)"
    )


def test_aaaa_is_nodata() -> None:
    result = decide_for("api.example.com", "AAAA")
    assert result == Local("NOERROR", [], "no IPv6 address: the sandbox's own addresses are IPv4")


@pytest.mark.parametrize("qtype", ["SRV", "TXT"])
def test_srv_and_txt_for_an_allowed_name_are_asked_outside(qtype: str) -> None:
    result = decide_for("_sip._tcp.Example.COM", qtype, allowed=Policy("example.com"))
    assert result == Outside("_sip._tcp.example.com", qtype)


def test_any_is_not_implemented() -> None:
    assert decide_for("example.com", "ANY") == Refuse("NOTIMP", "ANY is not answered")


@pytest.mark.parametrize("qtype", ["MX", "NS", "HTTPS", "SVCB", "CAA", "PTR", "SOA", "CNAME"])
def test_other_types_are_nodata(qtype: str) -> None:
    assert decide_for("example.com", qtype) == Local("NOERROR", [], f"no {qtype} records here")


def test_an_unknown_type_is_nodata() -> None:
    query = parse_query(raw_query([b"example", b"com"], qtype=1234))
    assert query.qtype == "TYPE1234"
    result = decide(query, allowed=allow_all, give=never_give)
    assert result == Local("NOERROR", [], "no TYPE1234 records here")


def test_decisions_build_replies() -> None:
    query = make("api.example.com", "A")
    result = decide(query, allowed=allow_all, give=Pool())
    assert isinstance(result, Local)
    parsed = DNSRecord.parse(reply(query, result.rcode, result.records))
    assert [str(rr.rdata) for rr in parsed.rr] == [OWN_ADDRESS]
    assert parsed.rr[0].ttl == OWN_TTL_SECONDS


# --- message.parse_query ---------------------------------------------------------------------


def test_parse_query_round_trip() -> None:
    query = make("WWW.Example.Com", "AAAA", query_id=4321, rd=True)
    assert query.id == 4321
    assert query.name == "www.example.com"
    assert query.qtype == "AAAA"
    assert query.qclass == "IN"
    assert query.recursion_desired is True
    assert query.udp_size == 512


def test_parse_query_without_rd() -> None:
    assert make("example.com", rd=False).recursion_desired is False


@pytest.mark.parametrize("qtype", ["A", "AAAA", "SRV", "TXT", "HTTPS", "MX", "ANY", "CAA"])
def test_parse_query_type_names(qtype: str) -> None:
    assert make("example.com", qtype).qtype == qtype


def test_parse_query_trailing_dot_and_root() -> None:
    assert make("example.com.").name == "example.com"
    root = make(".", "NS")
    assert root.name == ""
    assert root.qtype == "NS"


def test_parse_query_unknown_class_has_a_name() -> None:
    data = bytearray(query_bytes("example.com"))
    data[-2:] = struct.pack("!H", 42)
    assert parse_query(bytes(data)).qclass == "CLASS42"


@pytest.mark.parametrize(
    ("edns", "size"),
    [(None, 512), (0, 512), (100, 512), (512, 512), (1000, 1000), (1232, 1232), (4096, 1232)],
)
def test_parse_query_udp_size_from_edns(edns: int | None, size: int) -> None:
    assert make("example.com", edns=edns).udp_size == size


def test_parse_query_underscores_and_hyphens() -> None:
    query = make("_mongodb._tcp.cluster-0.example.net", "SRV")
    assert query.name == "_mongodb._tcp.cluster-0.example.net"


def test_parse_query_label_bytes_are_not_unescaped() -> None:
    # A backslash is printable ASCII; the name is its bytes, never dnslib's text escapes.
    query = parse_query(raw_query([b"a\\046b", b"example", b"com"]))
    assert query.name == "a\\046b.example.com"


def test_header_id() -> None:
    assert header_id(b"") is None
    assert header_id(b"\x12") is None
    assert header_id(b"\x12\x34") == 0x1234
    assert header_id(query_bytes("example.com", query_id=999)) == 999


def refusal(data: bytes) -> str:
    with pytest.raises(DnsFormatError) as caught:
        parse_query(data)
    reason = str(caught.value)
    assert reason
    assert "\n" not in reason
    return reason


def test_parse_query_refuses_short_and_long_messages() -> None:
    assert "shorter" in refusal(b"")
    assert "shorter" in refusal(query_bytes("example.com")[:11])
    assert "longer" in refusal(query_bytes("example.com") + b"\x00" * 65536)


def test_parse_query_refuses_a_response() -> None:
    data = bytearray(query_bytes("example.com"))
    data[2] |= 0x80
    assert "response" in refusal(bytes(data))


@pytest.mark.parametrize("opcode", [1, 2, 4, 5, 15])
def test_parse_query_refuses_other_opcodes(opcode: int) -> None:
    record = DNSRecord.parse(query_bytes("example.com"))
    record.header.opcode = opcode
    assert "opcode" in refusal(bytes(record.pack()))


@pytest.mark.parametrize("count", [0, 2])
def test_parse_query_refuses_other_question_counts(count: int) -> None:
    record = DNSRecord.parse(query_bytes("example.com"))
    record.questions = [DNSQuestion(f"q{i}.example.com") for i in range(count)]
    assert "question" in refusal(bytes(record.pack()))


def test_parse_query_refuses_answer_and_authority_records() -> None:
    with_answer = DNSRecord.parse(query_bytes("example.com"))
    with_answer.add_answer(RR("example.com", QTYPE.A, rdata=A("1.2.3.4")))
    assert "answer" in refusal(bytes(with_answer.pack()))
    with_auth = DNSRecord.parse(query_bytes("example.com"))
    with_auth.add_auth(RR("example.com", QTYPE.A, rdata=A("1.2.3.4")))
    assert "authority" in refusal(bytes(with_auth.pack()))


def test_parse_query_refuses_two_opt_records() -> None:
    record = DNSRecord.parse(query_bytes("example.com", edns=1232))
    record.add_ar(EDNS0(udp_len=4096))
    assert "OPT" in refusal(bytes(record.pack()))


def test_parse_query_refuses_a_long_name() -> None:
    labels = [b"a" * 63, b"b" * 63, b"c" * 63, b"d" * 61]  # 253 characters with the dots
    assert parse_query(raw_query(labels)).name.count(".") == 3
    assert "253" in refusal(raw_query([*labels[:3], b"d" * 62]))


def test_parse_query_refuses_a_label_over_63_bytes() -> None:
    # A length byte of 64..191 is not a label as sent; dnslib would read it as one.
    assert "63" in refusal(raw_query([b"x" * 64, b"com"]))


@pytest.mark.parametrize(
    "label",
    [b"a\x00b", b"a\x01b", b"a\nb", b"\x7f", b"a.b", b"a b", "caf\u00e9".encode(), b"\xff"],
)
def test_parse_query_refuses_a_label_outside_printable_ascii(label: bytes) -> None:
    reason = refusal(raw_query([label, b"example", b"com"]))
    assert "printable ASCII" in reason or "parse" in reason


def test_parse_query_refuses_a_truncated_body() -> None:
    data = query_bytes("example.com")
    for end in range(12, len(data)):
        assert refusal(data[:end])


def test_parse_query_refuses_a_pointer_loop() -> None:
    header = struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 0)
    assert refusal(header + b"\xc0\x0c" + struct.pack("!HH", 1, 1))


def pointer_chain(header: bytes, links: int) -> bytes:
    """A message whose last record's name is a chain of `links` compression pointers.

    The chain sits in the first record's data (dnslib reads any offset a pointer names);
    each pointer names the one before it, so dnslib follows them recursively.
    """
    question = b"\x01a\x00" + struct.pack("!HH", QTYPE.TXT, 1)
    first_head = b"\x00" + struct.pack("!HHIH", QTYPE.NULL, 1, 5, 2 * links)
    base = len(header) + len(question) + len(first_head)
    chain = bytearray()
    previous = len(header)
    for _ in range(links):
        here = base + len(chain)
        chain += struct.pack("!H", 0xC000 | previous)
        previous = here
    last = struct.pack("!H", 0xC000 | previous) + struct.pack("!HHIH", QTYPE.TXT, 1, 5, 2)
    return header + question + first_head + bytes(chain) + last + b"\x01x"


def test_parse_query_refuses_a_long_pointer_chain() -> None:
    header = struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 2)
    # Records beside the OPT are refused, and so is a query longer than MAX_QUERY_BYTES,
    # before dnslib reads any of it.
    assert "additional section" in refusal(pointer_chain(header, 10))
    assert "a query of 6" in refusal(pointer_chain(header, 3000))
    # dnslib's recursion on a long chain is still one error type (in a reply, which may
    # be long).
    reply_header = struct.pack("!HHHHHH", 1, 0x8100, 1, 0, 0, 2)
    with pytest.raises(DnsFormatError, match="parse"):
        parse_outside_reply(pointer_chain(reply_header, 3000), 1, "a", "TXT")


# --- message.reply, reply_for_size, error_reply ---------------------------------------------


@pytest.mark.parametrize("rd", [True, False])
def test_reply_echoes_id_question_and_rd(rd: bool) -> None:
    data = query_bytes("MiXeD.Example.com", "A", query_id=0xBEEF, rd=rd)
    query = parse_query(data)
    packed = reply(query, "NOERROR", [Record(query.name, "A", 60, A(OWN_ADDRESS))])
    parsed = DNSRecord.parse(packed)
    assert parsed.header.id == 0xBEEF
    assert parsed.header.qr == 1
    assert parsed.header.ra == 1
    assert parsed.header.rd == int(rd)
    assert parsed.header.tc == 0
    assert parsed.header.opcode == 0
    # The question goes back byte for byte, letter case included (0x20 randomisation).
    assert packed[12 : 12 + len(data) - 12] == data[12:]
    assert parsed.questions == DNSRecord.parse(data).questions
    assert [(str(rr.rname), rr.ttl, str(rr.rdata)) for rr in parsed.rr] == [
        ("mixed.example.com.", 60, OWN_ADDRESS)
    ]


@pytest.mark.parametrize(
    ("rcode", "code"),
    [
        ("NOERROR", 0),
        ("FORMERR", 1),
        ("SERVFAIL", 2),
        ("NXDOMAIN", 3),
        ("NOTIMP", 4),
        ("REFUSED", 5),
    ],
)
def test_reply_rcodes(rcode: str, code: int) -> None:
    parsed = DNSRecord.parse(reply(make("example.com"), rcode, []))
    assert parsed.header.rcode == code
    assert parsed.rr == []


def test_reply_refuses_an_unknown_rcode() -> None:
    with pytest.raises(ValueError, match="rcode"):
        reply(make("example.com"), "YXDOMAIN", [])


def test_reply_speaks_edns_only_to_a_query_that_did() -> None:
    plain = DNSRecord.parse(reply(make("example.com"), "NOERROR", []))
    assert plain.ar == []
    edns = DNSRecord.parse(reply(make("example.com", edns=4096), "NOERROR", []))
    assert [(rr.rtype, rr.rclass) for rr in edns.ar] == [(QTYPE.OPT, EDNS_PAYLOAD_SIZE)]


def test_reply_carries_srv_and_txt_records() -> None:
    query = make("_x._tcp.example.com", "SRV")
    records = [
        Record(query.name, "SRV", 30, SRV(10, 5, 27017, "db1.example.com")),
        Record(query.name, "SRV", 30, SRV(10, 5, 27017, "db2.example.com")),
    ]
    parsed = DNSRecord.parse(reply(query, "NOERROR", records))
    assert [str(rr.rdata.target) for rr in parsed.rr] == ["db1.example.com.", "db2.example.com."]
    assert all(rr.rtype == QTYPE.SRV for rr in parsed.rr)


def big_txt(query: Query) -> list[Record]:
    return [Record(query.name, "TXT", 60, TXT("x" * 200)) for _ in range(4)]


def test_reply_for_size_truncates_a_big_reply_over_512() -> None:
    query = make("example.com", "TXT", query_id=77)
    records = big_txt(query)
    assert len(reply(query, "NOERROR", records)) > 512
    packed = reply_for_size(query, "NOERROR", records, 512)
    assert len(packed) <= 512
    parsed = DNSRecord.parse(packed)
    assert parsed.header.tc == 1
    assert parsed.header.id == 77
    assert parsed.header.rcode == 0
    assert parsed.rr == []
    assert str(parsed.questions[0].qname) == "example.com."


def test_reply_for_size_sends_what_fits_whole() -> None:
    query = make("example.com", "TXT", edns=1232)
    records = big_txt(query)
    whole = reply(query, "NOERROR", records)
    assert 512 < len(whole) <= query.udp_size
    assert reply_for_size(query, "NOERROR", records, query.udp_size) == whole
    assert DNSRecord.parse(whole).header.tc == 0
    small = make("example.com")
    assert reply_for_size(small, "NXDOMAIN", [], 512) == reply(small, "NXDOMAIN", [])


def test_reply_refuses_a_record_name_it_could_not_send() -> None:
    query = make("example.com")
    with pytest.raises(ValueError):
        reply(query, "NOERROR", [Record("a..b", "A", 60, A(OWN_ADDRESS))])
    with pytest.raises(ValueError):
        reply(query, "NOERROR", [Record("x" * 64 + ".com", "A", 60, A(OWN_ADDRESS))])


def test_error_reply_is_header_only() -> None:
    packed = error_reply(0x0A0B, "FORMERR")
    assert len(packed) == 12
    parsed = DNSRecord.parse(packed)
    assert parsed.header.id == 0x0A0B
    assert parsed.header.qr == 1
    assert parsed.header.rcode == 1
    assert parsed.questions == []


def test_formerr_for_a_header_that_parsed_but_a_body_that_did_not() -> None:
    data = query_bytes("example.com", query_id=555)[:-3]
    with pytest.raises(DnsFormatError):
        parse_query(data)
    query_id = header_id(data)
    assert query_id == 555
    assert DNSRecord.parse(error_reply(query_id, "FORMERR")).header.id == 555


# --- message.tcp_frames, tcp_frame -----------------------------------------------------------


def test_tcp_frame_round_trip() -> None:
    one = query_bytes("one.example.com")
    two = query_bytes("two.example.com")
    stream = tcp_frame(one) + tcp_frame(two)
    assert tcp_frame(one)[:2] == struct.pack("!H", len(one))
    assert tcp_frames(stream) == ([one, two], b"")


def test_tcp_frames_keeps_a_partial_frame() -> None:
    one = query_bytes("one.example.com")
    two = query_bytes("two.example.com")
    stream = tcp_frame(one) + tcp_frame(two)
    assert tcp_frames(stream[:-1]) == ([one], tcp_frame(two)[:-1])
    assert tcp_frames(stream[:1]) == ([], stream[:1])
    assert tcp_frames(b"") == ([], b"")


def test_tcp_frames_byte_by_byte() -> None:
    messages = [query_bytes(f"m{i}.example.com") for i in range(3)]
    stream = b"".join(tcp_frame(m) for m in messages)
    got: list[bytes] = []
    rest = b""
    for byte in stream:
        frames, rest = tcp_frames(rest + bytes([byte]))
        got.extend(frames)
    assert got == messages
    assert rest == b""


def test_tcp_frames_zero_length_frame() -> None:
    assert tcp_frames(b"\x00\x00\x00\x01x") == ([b"", b"x"], b"")


def test_tcp_frame_refuses_a_message_too_long() -> None:
    with pytest.raises(ValueError):
        tcp_frame(b"\x00" * 65536)
    assert len(tcp_frame(b"\x00" * 65535)) == 65537


# --- message.outside_query, parse_outside_reply ----------------------------------------------


def test_outside_query() -> None:
    query_id, data = outside_query("_mongodb._tcp.cluster0.example.net", "SRV")
    parsed = DNSRecord.parse(data)
    assert parsed.header.id == query_id
    assert parsed.header.qr == 0
    assert parsed.header.rd == 1
    assert str(parsed.questions[0].qname) == "_mongodb._tcp.cluster0.example.net."
    assert parsed.questions[0].qtype == QTYPE.SRV
    assert parsed.questions[0].qclass == 1
    assert [(rr.rtype, rr.rclass) for rr in parsed.ar] == [(QTYPE.OPT, 1232)]


def test_outside_query_ids_are_random() -> None:
    ids = {outside_query("example.com", "TXT")[0] for _ in range(32)}
    assert len(ids) > 1


def test_outside_query_sends_label_bytes_not_escapes() -> None:
    _query_id, data = outside_query("a\\046b.example.com", "TXT")
    assert DNSRecord.parse(data).questions[0].qname.label == (b"a\\046b", b"example", b"com")


@pytest.mark.parametrize("name", ["a..b", "x" * 64 + ".com", "caf\u00e9.com", "a b.com"])
def test_outside_query_refuses_a_name_it_could_not_have_been_given(name: str) -> None:
    with pytest.raises(ValueError):
        outside_query(name, "TXT")


def outside_answer(
    data: bytes, answers: list[Any], *, rcode: int = 0, tc: bool = False, **header: int
) -> bytes:
    """The real DNS's reply to the outside query `data`."""
    answer = DNSRecord.parse(data).reply()
    answer.header.rcode = rcode
    answer.header.tc = int(tc)
    for key, value in header.items():
        setattr(answer.header, key, value)
    for rr in answers:
        answer.add_answer(rr)
    return bytes(answer.pack())


def test_parse_outside_reply_keeps_cname_and_the_type_asked() -> None:
    query_id, data = outside_query("www.example.com", "A")
    answer = outside_answer(
        data,
        [
            RR("www.example.com", QTYPE.CNAME, rdata=CNAME("edge.example.net"), ttl=30),
            RR("edge.example.net", QTYPE.A, rdata=A("93.184.216.34"), ttl=20),
            RR("edge.example.net", QTYPE.AAAA, rdata=AAAA("2001:db8::1"), ttl=20),
            RR("edge.example.net", QTYPE.MX, rdata=MX("mail.example.net"), ttl=20),
        ],
    )
    rcode, records, truncated = parse_outside_reply(answer, query_id, "www.example.com", "A")
    assert rcode == "NOERROR"
    assert truncated is False
    assert records == [
        Record("www.example.com", "CNAME", 30, CNAME("edge.example.net")),
        Record("edge.example.net", "A", 20, A("93.184.216.34")),
    ]


def test_parse_outside_reply_caps_ttls() -> None:
    query_id, data = outside_query("_x._tcp.example.com", "SRV")
    answer = outside_answer(
        data,
        [
            RR("_x._tcp.example.com", QTYPE.SRV, rdata=SRV(1, 1, 443, "a.example.com"), ttl=86400),
            RR("_x._tcp.example.com", QTYPE.SRV, rdata=SRV(1, 1, 443, "b.example.com"), ttl=0),
            RR("_x._tcp.example.com", QTYPE.SRV, rdata=SRV(1, 1, 443, "c.example.com"), ttl=300),
        ],
    )
    _rcode, records, _tc = parse_outside_reply(answer, query_id, "_x._tcp.example.com", "SRV")
    assert [r.ttl for r in records] == [MAX_TTL_SECONDS, 0, 300]
    assert MAX_TTL_SECONDS == 300


def test_parse_outside_reply_passes_rcode_and_tc() -> None:
    query_id, data = outside_query("example.com", "TXT")
    answer = outside_answer(data, [], rcode=3, tc=True)
    assert parse_outside_reply(answer, query_id, "example.com", "TXT") == ("NXDOMAIN", [], True)
    odd = outside_answer(data, [], rcode=11)
    assert parse_outside_reply(odd, query_id, "example.com", "TXT")[0] == "RCODE11"


def test_parse_outside_reply_question_case_does_not_matter() -> None:
    query_id, data = outside_query("example.com", "TXT")
    answer = DNSRecord.parse(outside_answer(data, []))
    answer.questions = [DNSQuestion("ExAmPlE.CoM", QTYPE.TXT)]
    assert parse_outside_reply(bytes(answer.pack()), query_id, "example.com", "TXT")[0] == "NOERROR"


def outside_refusal(data: bytes, query_id: int, name: str, qtype: str) -> str:
    with pytest.raises(DnsFormatError) as caught:
        parse_outside_reply(data, query_id, name, qtype)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_parse_outside_reply_refuses_another_id() -> None:
    query_id, data = outside_query("example.com", "TXT")
    answer = outside_answer(data, [])
    assert "id" in outside_refusal(answer, (query_id + 1) % 65536, "example.com", "TXT")


def test_parse_outside_reply_refuses_another_question() -> None:
    query_id, data = outside_query("example.com", "TXT")
    answer = outside_answer(data, [])
    assert "answers" in outside_refusal(answer, query_id, "example.org", "TXT")
    assert "answers" in outside_refusal(answer, query_id, "example.com", "SRV")
    no_question = DNSRecord.parse(answer)
    no_question.questions = []
    assert "question" in outside_refusal(bytes(no_question.pack()), query_id, "example.com", "TXT")


def test_parse_outside_reply_refuses_a_query() -> None:
    query_id, data = outside_query("example.com", "TXT")
    assert "response" in outside_refusal(data, query_id, "example.com", "TXT")


def test_parse_outside_reply_refuses_garbage() -> None:
    query_id, data = outside_query("example.com", "TXT")
    answer = outside_answer(data, [RR("example.com", QTYPE.TXT, rdata=TXT("hello"), ttl=5)])
    assert outside_refusal(b"", query_id, "example.com", "TXT")
    assert outside_refusal(answer[:-3], query_id, "example.com", "TXT")
    assert outside_refusal(b"\x00" * 70000, query_id, "example.com", "TXT")


def test_parse_outside_reply_refuses_a_long_pointer_chain() -> None:
    header = struct.pack("!HHHHHH", 7, 0x8180, 1, 2, 0, 0)
    rcode, records, _tc = parse_outside_reply(pointer_chain(header, 10), 7, "a", "TXT")
    assert (rcode, [r.name for r in records]) == ("NOERROR", ["a"])
    assert "parse" in outside_refusal(pointer_chain(header, 3000), 7, "a", "TXT")


def test_parse_outside_reply_refuses_a_hostile_record_name() -> None:
    query_id, data = outside_query("example.com", "TXT")
    answer = outside_answer(data, [RR([b"ex\x07", b"com"], QTYPE.TXT, rdata=TXT("x"), ttl=5)])
    assert "printable ASCII" in outside_refusal(answer, query_id, "example.com", "TXT")


def test_srv_from_outside_reaches_the_sandbox() -> None:
    """The whole path of an SRV query: decide, ask outside, parse its reply, answer."""
    query = make("_mongodb._tcp.Cluster0.example.net", "SRV", query_id=31337, edns=1232)
    decision = decide(query, allowed=Policy("cluster0.example.net"), give=never_give)
    assert decision == Outside("_mongodb._tcp.cluster0.example.net", "SRV")
    assert isinstance(decision, Outside)
    query_id, data = outside_query(decision.name, decision.qtype)
    answer = outside_answer(
        data,
        [
            RR(decision.name, QTYPE.SRV, rdata=SRV(0, 0, 27017, "shard-0.example.net"), ttl=60),
            RR(decision.name, QTYPE.SRV, rdata=SRV(0, 0, 27017, "shard-1.example.net"), ttl=9000),
        ],
    )
    rcode, records, truncated = parse_outside_reply(answer, query_id, decision.name, "SRV")
    assert not truncated
    parsed = DNSRecord.parse(reply_for_size(query, rcode, records, query.udp_size))
    assert parsed.header.id == 31337
    assert [(rr.ttl, str(rr.rdata.target)) for rr in parsed.rr] == [
        (60, "shard-0.example.net."),
        (300, "shard-1.example.net."),
    ]


# --- Hypothesis: nothing but a Query or DnsFormatError ---------------------------------------


def parse_or_format_error(data: bytes) -> Query | None:
    """parse_query's result, None for DnsFormatError; anything else fails the test."""
    try:
        query = parse_query(data)
    except DnsFormatError as error:
        assert "\n" not in str(error)
        return None
    assert isinstance(query, Query)
    assert 512 <= query.udp_size <= 1232
    assert len(query.name) <= 253
    # Whatever is accepted can be answered and decided on without another error.
    DNSRecord.parse(reply(query, "NOERROR", []))
    DNSRecord.parse(reply_for_size(query, "REFUSED", [], 512))
    decide(query, allowed=allow_all, give=Pool())
    return query


def outside_or_format_error(data: bytes, query_id: int, name: str, qtype: str) -> None:
    try:
        rcode, records, truncated = parse_outside_reply(data, query_id, name, qtype)
    except DnsFormatError as error:
        assert "\n" not in str(error)
        return
    assert isinstance(rcode, str)
    assert isinstance(truncated, bool)
    for record in records:
        assert record.rtype in (qtype, "CNAME")
        assert 0 <= record.ttl <= MAX_TTL_SECONDS


query_headers = st.builds(
    lambda query_id, flags, arcount: struct.pack("!HHHHHH", query_id, flags, 1, 0, 0, arcount),
    st.integers(0, 0xFFFF),
    st.sampled_from([0x0000, 0x0100, 0x0110, 0x0130]),
    st.integers(0, 3),
)


@fuzz(3)
@given(st.binary(max_size=600))
def test_fuzz_parse_query_arbitrary_bytes(data: bytes) -> None:
    parse_or_format_error(data)


@fuzz(3)
@given(query_headers, st.binary(max_size=600))
def test_fuzz_parse_query_after_a_good_header(header: bytes, body: bytes) -> None:
    parse_or_format_error(header + body)


OUTSIDE_ID = 0x5A5A
OUTSIDE_NAME = "example.com"


@fuzz(3)
@given(st.binary(max_size=600))
def test_fuzz_parse_outside_reply_arbitrary_bytes(data: bytes) -> None:
    outside_or_format_error(data, OUTSIDE_ID, OUTSIDE_NAME, "TXT")


@fuzz(3)
@given(
    st.builds(
        lambda flags, qd, an, ns, ar: struct.pack("!HHHHHH", OUTSIDE_ID, flags, qd, an, ns, ar),
        st.sampled_from([0x8180, 0x8380, 0x8183, 0x818B]),
        st.integers(0, 2),
        st.integers(0, 4),
        st.integers(0, 2),
        st.integers(0, 2),
    ),
    st.binary(max_size=600),
)
def test_fuzz_parse_outside_reply_after_a_good_header(header: bytes, body: bytes) -> None:
    outside_or_format_error(header + body, OUTSIDE_ID, OUTSIDE_NAME, "TXT")


# An edit to a message: ("flip", index, bits), ("insert", index, byte) or ("delete", index, _).
Edit = tuple[str, int, int]
edits = st.lists(
    st.tuples(
        st.sampled_from(["flip", "insert", "delete"]),
        st.integers(0, 1 << 16),
        st.integers(1, 255),
    ),
    min_size=1,
    max_size=8,
)


def mutate(data: bytes, changes: list[Edit]) -> bytes:
    out = bytearray(data)
    for kind, where, value in changes:
        if kind == "insert":
            out.insert(where % (len(out) + 1), value)
        elif not out:
            continue
        elif kind == "flip":
            out[where % len(out)] ^= value
        else:
            del out[where % len(out)]
    return bytes(out)


def seed_queries() -> list[bytes]:
    with_answer = DNSRecord.parse(query_bytes("example.com"))
    with_answer.add_answer(RR("example.com", QTYPE.A, rdata=A("1.2.3.4")))
    return [
        query_bytes("www.example.com"),
        query_bytes("_mongodb._tcp.cluster0.example.net", "SRV", edns=4096),
        query_bytes("Printer.Local", "TXT", rd=False),
        query_bytes(".", "NS"),
        query_bytes("a.b.c.d.e.f.example.com", "HTTPS", edns=1232),
        bytes(with_answer.pack()),
    ]


SEED_QUERIES = seed_queries()


@fuzz(3)
@given(st.sampled_from(SEED_QUERIES), edits)
def test_fuzz_parse_query_mutated_queries(seed: bytes, changes: list[Edit]) -> None:
    parse_or_format_error(mutate(seed, changes))


def seed_outside_replies() -> list[tuple[int, str, str, bytes]]:
    seeds: list[tuple[int, str, str, bytes]] = []
    for name, qtype, answers in [
        ("example.com", "TXT", [RR("example.com", QTYPE.TXT, rdata=TXT(["a", "bc"]), ttl=9)]),
        (
            "_x._tcp.example.com",
            "SRV",
            [RR("_x._tcp.example.com", QTYPE.SRV, rdata=SRV(1, 2, 3, "t.example.com"), ttl=9)],
        ),
        (
            "www.example.com",
            "A",
            [
                RR("www.example.com", QTYPE.CNAME, rdata=CNAME("e.example.net"), ttl=9),
                RR("e.example.net", QTYPE.A, rdata=A("192.0.2.1"), ttl=9),
            ],
        ),
    ]:
        query_id, data = outside_query(name, qtype)
        seeds.append((query_id, name, qtype, outside_answer(data, answers)))
    return seeds


SEED_REPLIES = seed_outside_replies()


@fuzz(3)
@given(st.sampled_from(SEED_REPLIES), edits)
def test_fuzz_parse_outside_reply_mutated_replies(
    seed: tuple[int, str, str, bytes], changes: list[Edit]
) -> None:
    query_id, name, qtype, data = seed
    outside_or_format_error(mutate(data, changes), query_id, name, qtype)


def test_seeds_parse_unmutated() -> None:
    assert [parse_or_format_error(seed) is not None for seed in SEED_QUERIES] == [
        True,
        True,
        True,
        True,
        True,
        False,
    ]
    for query_id, name, qtype, data in SEED_REPLIES:
        assert parse_outside_reply(data, query_id, name, qtype)[1]


# --- message.answer_key, MAX_QUERY_BYTES (issue 19, item 3) ----------------------------------


def with_option(data: bytes, code: int, value: bytes) -> bytes:
    """`data` (a query with an OPT record last) with one more EDNS option."""
    (rdlength,) = struct.unpack_from("!H", data, len(data) - 2)
    assert rdlength == 0, "only for a query whose OPT has no options yet"
    option = struct.pack("!HH", code, len(value)) + value
    return data[:-2] + struct.pack("!H", len(option)) + option


def test_answer_key_leaves_out_the_id_and_the_edns_options() -> None:
    plain = query_bytes("db.example.com", edns=1232)
    key = answer_key(plain)
    assert key is not None and len(key) < 300
    assert answer_key(query_bytes("db.example.com", edns=1232, query_id=7)) == key
    assert answer_key(with_option(plain, 10, os.urandom(8))) == key  # a cookie
    assert answer_key(with_option(plain, 12, bytes(300))) == key  # padding (RFC 7830)


def test_answer_key_keeps_what_the_reply_depends_on() -> None:
    keys = {answer_key(data) for data in (
        query_bytes("db.example.com"),
        query_bytes("DB.example.com"),  # the question is echoed as asked
        query_bytes("db.example.com", "AAAA"),
        query_bytes("db.example.com", rd=False),
        query_bytes("db.example.com", edns=512),
        query_bytes("db.example.com", edns=1232),  # truncation depends on the size
    )}
    assert None not in keys and len(keys) == 6


def test_answer_key_is_none_for_any_other_shape() -> None:
    plain = query_bytes("db.example.com", edns=1232)
    assert answer_key(plain + b"x") is None  # trailing bytes
    assert answer_key(plain[:-1]) is None
    pointer = struct.pack("!HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + bytes(4)
    assert answer_key(pointer) is None
    extra = bytearray(query_bytes("db.example.com"))
    extra[11] = 1  # ARCOUNT 1 with a TXT record, not an OPT
    extra += b"\x00" + struct.pack("!HHIH", 16, 1, 0, 2) + b"\x01x"
    assert answer_key(bytes(extra)) is None
    assert "additional section" in refusal(bytes(extra))


def test_a_query_is_refused_past_max_query_bytes_exactly() -> None:
    plain = query_bytes("db.example.com", edns=1232)
    at_limit = with_option(plain, 12, bytes(MAX_QUERY_BYTES - len(plain) - 4))
    assert len(at_limit) == MAX_QUERY_BYTES
    assert parse_query(at_limit).name == "db.example.com"
    assert answer_key(at_limit) == answer_key(plain)
    over = with_option(plain, 12, bytes(MAX_QUERY_BYTES - len(plain) - 3))
    assert refusal(over) == (f"a query of {MAX_QUERY_BYTES + 1} bytes"
                             " (a stub resolver's is at most 512)")
    assert answer_key(over) is None


# --- lnk_proxy.resolver: absolute lookups (issue 19, item 6) --------------------------------


def test_a_name_is_looked_up_absolute() -> None:
    assert absolute("db.example.com") == "db.example.com."
    assert absolute("db.example.com.") == "db.example.com."
    assert absolute("single") == "single."
    for spelling in ("127.1", "0x7f000001", "2130706433", "10.0.0.1"):
        assert absolute(spelling) == spelling  # an address, never a name


def test_hosts_file_is_read_by_the_name_without_its_dot() -> None:
    text = ("127.0.0.1 localhost\n"
            "10.0.0.5  NAS.example.lan nas  # the person's own\n"
            "# 10.0.0.6 nas.example.lan\n"
            "fe80::1%eth0 nas.example.lan\n"
            "not-an-address nas.example.lan\n"
            "10.0.0.5 nas.example.lan.\n")
    assert hosts_file_addresses(text, "nas.example.lan") == [
        ipaddress.ip_address("10.0.0.5"), ipaddress.ip_address("fe80::1")]
    assert hosts_file_addresses(text, "nas.example.lan.") == hosts_file_addresses(
        text, "nas.example.lan")
    assert hosts_file_addresses(text, "example.lan") == []
    assert hosts_file_addresses(text, "") == []
