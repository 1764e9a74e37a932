"""DNS messages for the sandbox's resolver: bytes in, checked queries out; replies back to bytes.

The proxy answers every DNS query made inside a sandbox. The bytes it reads come from a
program the sandbox does not trust (and, for outside queries, from a network it does not
trust either), so everything here is sans-IO and strict: no sockets, no clock, no files.
DNS's message format itself is dnslib's; this module wraps it so that a caller handles exactly
one error type, `DnsFormatError`, whatever dnslib raises on hostile bytes, and so that
names always travel as raw label bytes (never through dnslib's text escapes or IDNA).
"""

from __future__ import annotations

import os
import struct
from typing import Any

from dnslib import CLASS, EDNS0, QTYPE, RCODE, RR, DNSHeader, DNSLabel, DNSQuestion, DNSRecord

__all__ = [
    "EDNS_PAYLOAD_SIZE",
    "MAX_MESSAGE_BYTES",
    "MAX_NAME_CHARS",
    "MAX_QUERY_BYTES",
    "MAX_TTL_SECONDS",
    "MIN_MESSAGE_BYTES",
    "RCODES",
    "UDP_MIN_PAYLOAD",
    "DnsFormatError",
    "Query",
    "Record",
    "answer_key",
    "error_reply",
    "header_id",
    "outside_query",
    "parse_outside_reply",
    "parse_query",
    "reply",
    "reply_for_size",
    "tcp_frame",
    "tcp_frame_length",
    "tcp_frames",
]

# A DNS message's length is a 16-bit field over TCP; nothing longer is a DNS message.
MAX_MESSAGE_BYTES = 65535
# The longest query a sandbox may send, over UDP and TCP alike. What a stub resolver sends
# is the header (12), one question (a name of at most 255 bytes as sent, its type and
# class: 4) and at most one OPT record (11, and its options: a cookie is 8-40 bytes); 512 is
# also RFC 1035's UDP message size, which EDNS raises only for replies. A longer "query" is
# padding (extra records, long EDNS options), which a sandbox could use to make its proxy
# read and hold more: it gets FORMERR, unread.
MAX_QUERY_BYTES = 512
# The fixed header alone is 12 bytes; anything shorter cannot even say what it is.
MIN_MESSAGE_BYTES = 12
# RFC 1035's limit on a name in text form without the trailing dot (255 as sent).
MAX_NAME_CHARS = 253
# RFC 1035's limit on one label; dnslib reads longer "labels" (length bytes 64-191) if sent.
MAX_LABEL_BYTES = 63
# Every DNS client must accept a UDP reply of this size; the floor for a query's EDNS size.
UDP_MIN_PAYLOAD = 512
# The DNS Flag Day 2020 size: big enough for most replies, small enough never to fragment.
# The ceiling for a query's EDNS size, and the size offered in our own EDNS records.
EDNS_PAYLOAD_SIZE = 1232
# A sandbox's answers should not outlive a policy change by long: an outside TTL is cut to this.
MAX_TTL_SECONDS = 300

# The rcodes this resolver sends (its whole vocabulary; anything else is a bug in the caller).
RCODES = frozenset({"NOERROR", "NXDOMAIN", "REFUSED", "SERVFAIL", "FORMERR", "NOTIMP"})

# Bytes a label may hold: printable ASCII without space and without the dot that separates
# labels. Anything else (a control character, a dot inside a label, UTF-8) is refused: no
# program inside a sandbox has a reason to ask for it, and it could mislead a log or a match.
_LABEL_BYTES = frozenset(range(0x21, 0x7F)) - {ord(".")}

_HEADER = struct.Struct("!HHHHHH")
_LENGTH = struct.Struct("!H")
_QR_BIT = 0x8000
_OPCODE_SHIFT = 11
_OPCODE_MASK = 0xF
_OPT = 41
# A question's type and class, after its name.
_QUESTION_TAIL_BYTES = 4
# An OPT record's name (the root, 1), type (2), class (2), TTL (4) and RDLENGTH (2).
_OPT_FIXED_BYTES = 11
_CLASS_IN = 1
_CNAME = "CNAME"


class DnsFormatError(Exception):
    """Bytes that are not a DNS message this resolver accepts; the message is a one-line reason."""


class Record:
    """One answer record: a name, a type name ("A", "SRV", ...), a TTL and dnslib's RD object."""

    __slots__ = ("name", "rdata", "rtype", "ttl")

    def __init__(self, name: str, rtype: str, ttl: int, rdata: object) -> None:
        self.name = name
        self.rtype = rtype
        self.ttl = ttl
        self.rdata = rdata

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {self.rtype!r}, {self.ttl}, {self.rdata!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.name, self.rtype, self.ttl, self.rdata) == (
            other.name,
            other.rtype,
            other.ttl,
            other.rdata,
        )


class Query:
    """A query from inside a sandbox that passed every check in `parse_query`."""

    __slots__ = ("_record", "id", "name", "qclass", "qtype", "recursion_desired", "udp_size")

    def __init__(
        self,
        *,
        id: int,
        name: str,
        qtype: str,
        qclass: str,
        recursion_desired: bool,
        udp_size: int,
        record: Any,
    ) -> None:
        self.id = id
        self.name = name
        self.qtype = qtype
        self.qclass = qclass
        self.recursion_desired = recursion_desired
        self.udp_size = udp_size
        # The parsed dnslib message: its question is echoed byte for byte in the reply, and
        # whether it carried EDNS decides whether the reply does.
        self._record = record

    def __repr__(self) -> str:
        return (
            f"Query(id={self.id}, name={self.name!r}, qtype={self.qtype!r}, "
            f"qclass={self.qclass!r}, rd={self.recursion_desired}, udp_size={self.udp_size})"
        )


def header_id(data: bytes) -> int | None:
    """The message id (its first two bytes), or None when there are not two bytes to read."""
    if len(data) < 2:
        return None
    return int(_LENGTH.unpack_from(data)[0])


def parse_query(data: bytes) -> Query:
    """Check and parse one query from inside a sandbox; DnsFormatError says why not."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise DnsFormatError(f"{len(data)} bytes is longer than any DNS message")
    if len(data) < MIN_MESSAGE_BYTES:
        raise DnsFormatError(f"{len(data)} bytes is shorter than a DNS header")
    query_id, flags, qdcount, ancount, nscount, _arcount = _HEADER.unpack_from(data)
    if flags & _QR_BIT:
        raise DnsFormatError("the QR bit is set: a response, not a query")
    opcode = (flags >> _OPCODE_SHIFT) & _OPCODE_MASK
    if opcode != 0:
        raise DnsFormatError(f"opcode {opcode} is not QUERY")
    if qdcount != 1:
        raise DnsFormatError(f"{qdcount} questions; a query asks exactly one")
    if len(data) > MAX_QUERY_BYTES:
        raise DnsFormatError(
            f"a query of {len(data)} bytes (a stub resolver's is at most {MAX_QUERY_BYTES})")
    if ancount or nscount:
        raise DnsFormatError("a query with answer or authority records")
    record = _parse(data)
    question = record.questions[0]
    name = _name(question.qname, "the question's name")
    opts = [rr for rr in record.ar if int(rr.rtype) == _OPT]
    if len(record.ar) > 1 or len(opts) != len(record.ar):
        # Default deny: a stub resolver's additional section is its one OPT record; other
        # records (TSIG, SIG(0)) are nothing this resolver reads.
        raise DnsFormatError("a query's additional section holds more than its one OPT record")
    udp_size = UDP_MIN_PAYLOAD
    if opts:
        udp_size = min(max(int(opts[0].rclass), UDP_MIN_PAYLOAD), EDNS_PAYLOAD_SIZE)
    return Query(
        id=int(query_id),
        name=name,
        qtype=_type_name(int(question.qtype)),
        qclass=_class_name(int(question.qclass)),
        recursion_desired=bool(record.header.rd),
        udp_size=udp_size,
        record=record,
    )


def answer_key(data: bytes) -> bytes | None:
    """What the reply to the query `data` depends on, but its id: the flags, the question
    as sent (its name's case is echoed), and whether it has an OPT record and that record's
    fixed fields (the UDP size decides truncation), never the OPT's options. So that a reply
    kept for a query serves every query that differs only in id or options (a cookie, or
    padding), and a kept key is at most some 270 bytes whatever was sent.

    None when `data` is not in the one shape a stub resolver sends (header, one question
    with an uncompressed name, nothing else or one OPT record, nothing after): such a query
    is parsed in full (and refused by `parse_query` when it must be) and its reply not kept.
    """
    if not MIN_MESSAGE_BYTES <= len(data) <= MAX_QUERY_BYTES:
        return None
    _, _flags, qdcount, ancount, nscount, arcount = _HEADER.unpack_from(data)
    if qdcount != 1 or ancount or nscount or arcount > 1:
        return None
    offset = _HEADER.size
    while True:
        if offset >= len(data):
            return None
        length = data[offset]
        offset += 1
        if length == 0:
            break
        if length > MAX_LABEL_BYTES:
            return None  # a compression pointer or an extended label: not a stub's shape
        offset += length
    question_end = offset + _QUESTION_TAIL_BYTES
    if arcount == 0:
        return data[2:question_end] + b"-" if question_end == len(data) else None
    # The OPT record: the root name (one zero byte), type 41, then CLASS (the UDP size),
    # TTL (extended rcode, version, flags), RDLENGTH and the options.
    fixed_end = question_end + _OPT_FIXED_BYTES
    if fixed_end > len(data) or data[question_end : question_end + 3] != b"\x00\x00\x29":
        return None
    (rdlength,) = _LENGTH.unpack_from(data, fixed_end - _LENGTH.size)
    if fixed_end + rdlength != len(data):
        return None
    return data[2:question_end] + b"+" + data[question_end + 3 : fixed_end - _LENGTH.size]


def reply(query: Query, rcode: str, records: list[Record]) -> bytes:
    """The reply to `query`: its id, RD and question, with QR and RA set, and `records`."""
    return bytes(_reply(query, rcode, records, truncated=False).pack())


def reply_for_size(query: Query, rcode: str, records: list[Record], limit: int) -> bytes:
    """`reply`, or when that is longer than `limit` bytes the same reply with no records and TC.

    A client that sees TC asks again over TCP, where `reply` is sent whole.
    """
    packed = reply(query, rcode, records)
    if len(packed) <= limit:
        return packed
    return bytes(_reply(query, rcode, [], truncated=True).pack())


def error_reply(query_id: int, rcode: str) -> bytes:
    """A header-only reply, for a query whose header could be read but whose question not."""
    header = DNSHeader(id=query_id, bitmap=0, qr=1, ra=1, rcode=_rcode_code(rcode))
    return bytes(DNSRecord(header).pack())


def tcp_frames(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Split DNS-over-TCP bytes (each message after a 2-byte length) into messages and the rest.

    The rest is an incomplete frame (or nothing): the caller keeps it and adds what it reads
    next. A zero-length frame comes out as an empty message, for the caller to refuse.
    """
    messages: list[bytes] = []
    offset = 0
    while len(buffer) - offset >= _LENGTH.size:
        (length,) = _LENGTH.unpack_from(buffer, offset)
        end = offset + _LENGTH.size + length
        if end > len(buffer):
            break
        messages.append(bytes(buffer[offset + _LENGTH.size : end]))
        offset = end
    return messages, bytes(buffer[offset:])


def tcp_frame_length(buffer: bytes | bytearray | memoryview) -> int | None:
    """The length a DNS-over-TCP frame at the start of `buffer` announces, or None when
    its two length bytes are not all there yet."""
    if len(buffer) < _LENGTH.size:
        return None
    return int(_LENGTH.unpack_from(buffer)[0])


def tcp_frame(message: bytes) -> bytes:
    """One DNS message framed for TCP: its 2-byte length, then the message."""
    if len(message) > MAX_MESSAGE_BYTES:
        raise ValueError(f"a DNS message of {len(message)} bytes cannot be framed")
    return _LENGTH.pack(len(message)) + message


def outside_query(name: str, qtype: str) -> tuple[int, bytes]:
    """A query for the real DNS outside: (its random id, its bytes), with RD and EDNS set."""
    query_id = int.from_bytes(os.urandom(2), "big")
    header = DNSHeader(id=query_id, bitmap=0, rd=1)
    question = DNSQuestion(_label(name), _type_code(qtype), _CLASS_IN)
    record = DNSRecord(header, questions=[question], ar=[EDNS0(udp_len=EDNS_PAYLOAD_SIZE)])
    return query_id, bytes(record.pack())


def parse_outside_reply(
    data: bytes, query_id: int, name: str, qtype: str
) -> tuple[str, list[Record], bool]:
    """Check the outside DNS's reply to `outside_query(name, qtype)`.

    Returns (rcode name, the answer's records of type `qtype` or CNAME in class IN with
    their TTLs cut to MAX_TTL_SECONDS, whether TC was set). DnsFormatError when the bytes do
    not parse, are not a response, carry another id or answer another question.
    """
    if len(data) > MAX_MESSAGE_BYTES:
        raise DnsFormatError(f"{len(data)} bytes is longer than any DNS message")
    if len(data) < MIN_MESSAGE_BYTES:
        raise DnsFormatError(f"{len(data)} bytes is shorter than a DNS header")
    record = _parse(data)
    header = record.header
    if not header.qr:
        raise DnsFormatError("the QR bit is clear: a query, not a response")
    if int(header.id) != query_id:
        raise DnsFormatError(f"id {int(header.id)} is not the id asked with ({query_id})")
    if len(record.questions) != 1:
        raise DnsFormatError(f"{len(record.questions)} questions in the reply; expected 1")
    question = record.questions[0]
    asked = _name(question.qname, "the reply's question")
    if (
        asked != name.lower()
        or _type_name(int(question.qtype)) != qtype
        or int(question.qclass) != _CLASS_IN
    ):
        raise DnsFormatError(
            f"the reply answers {asked!r} {_type_name(int(question.qtype))}, not {name!r} {qtype}"
        )
    records: list[Record] = []
    for rr in record.rr:
        rtype = _type_name(int(rr.rtype))
        if int(rr.rclass) != _CLASS_IN or rtype not in (qtype, _CNAME):
            continue
        ttl = min(int(rr.ttl), MAX_TTL_SECONDS)
        records.append(Record(_name(rr.rname, "an answer record's name"), rtype, ttl, rr.rdata))
    return _rcode_name(int(header.rcode)), records, bool(header.tc)


def _parse(data: bytes) -> Any:
    """dnslib's parse, with whatever it raises turned into DnsFormatError."""
    try:
        return DNSRecord.parse(data)
    # dnslib raises many types on hostile bytes (DNSError, BufferError, struct.error,
    # ValueError, IndexError, UnicodeError, RecursionError on long pointer chains, ...), and
    # which ones is an implementation detail of its version: all of them mean "not DNS".
    except Exception as exc:
        # Its type only, never its text: dnslib's messages may quote the bytes it refused,
        # which are the program's, and the reason goes to the wire's log (issue 27).
        raise DnsFormatError(f"does not parse as DNS ({type(exc).__name__})") from exc


def _name(label: Any, what: str) -> str:
    """A dnslib name as lower-case text without the trailing dot, or DnsFormatError."""
    parts: list[str] = []
    for part in label.label:
        raw = bytes(part)
        if not raw:
            raise DnsFormatError(f"{what} has an empty label")
        if len(raw) > MAX_LABEL_BYTES:
            raise DnsFormatError(f"{what} has a label of {len(raw)} bytes (at most 63)")
        if not _LABEL_BYTES.issuperset(raw):
            raise DnsFormatError(
                f"{what} has a label with a byte outside printable ASCII, a space or a dot"
            )
        parts.append(raw.decode("ascii").lower())
    name = ".".join(parts)
    if len(name) > MAX_NAME_CHARS:
        raise DnsFormatError(f"{what} is {len(name)} characters long (at most 253)")
    return name


def _label(name: str) -> Any:
    """A dnslib name built from label bytes, so that no text escape or IDNA changes it.

    The names here come from `parse_query` or from the caller's own records; one that could
    not have come from there is a bug in the caller, hence ValueError.
    """
    text = name.rstrip(".") if name != "." else ""
    if not text:
        return DNSLabel(())
    if len(text) > MAX_NAME_CHARS:
        raise ValueError(f"name of {len(text)} characters: {text[:40]!r}...")
    parts: list[bytes] = []
    for part in text.split("."):
        raw = part.encode("ascii")
        if not raw or len(raw) > MAX_LABEL_BYTES or not _LABEL_BYTES.issuperset(raw):
            raise ValueError(f"not a name this resolver sends: {name!r}")
        parts.append(raw)
    return DNSLabel(tuple(parts))


def _reply(query: Query, rcode: str, records: list[Record], *, truncated: bool) -> Any:
    header = DNSHeader(
        id=query.id,
        bitmap=0,
        qr=1,
        ra=1,
        rd=int(query.recursion_desired),
        tc=int(truncated),
        rcode=_rcode_code(rcode),
    )
    asked = query._record
    answers = [RR(_label(r.name), _type_code(r.rtype), _CLASS_IN, r.ttl, r.rdata) for r in records]
    # A query that spoke EDNS gets EDNS back (RFC 6891), so that it keeps using it.
    extra = [EDNS0(udp_len=EDNS_PAYLOAD_SIZE)] if _has_opt(asked) else []
    return DNSRecord(header, questions=[asked.questions[0]], rr=answers, ar=extra)


def _has_opt(record: Any) -> bool:
    return any(int(rr.rtype) == _OPT for rr in record.ar)


def _rcode_code(rcode: str) -> int:
    if rcode not in RCODES:
        raise ValueError(f"not an rcode this resolver sends: {rcode!r}")
    return int(getattr(RCODE, rcode))


def _rcode_name(code: int) -> str:
    return str(RCODE.forward.get(code, f"RCODE{code}"))


def _type_name(code: int) -> str:
    # QTYPE's fallback gives "TYPE1234" (RFC 3597's spelling) for a type it does not know.
    return str(QTYPE[code])


def _type_code(rtype: str) -> int:
    try:
        return int(getattr(QTYPE, rtype))
    except Exception as exc:  # dnslib's Bimap raises its own DNSError for unknown names
        raise ValueError(f"not a DNS type: {rtype!r}") from exc


def _class_name(code: int) -> str:
    return str(CLASS.forward.get(code, f"CLASS{code}"))
