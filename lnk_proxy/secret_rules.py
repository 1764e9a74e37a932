"""The secret verb's rules: where a service's secret may go, and for which calls (sans IO).

Job: a secret (a bot's token, an API key) is kept with a rule given by the plugin that owns
the service (`lnk-telegram rule --json`). The rule names one host, the path shapes a call
may take, where the secret goes (in the path or in one header), the names refused whatever
their case, and the shape of the placeholder the program holds instead of the secret. This
module (1) parses a rule strictly (`parse_rule`), refusing one too weak to hold, (2) makes a
placeholder (`make_placeholder`), (3) matches a call to `/_link/secret/<name>/…` against the
rule (`match`, `check_body`), and (4) puts the real secret where the rule says (`fill`), apart,
so the matcher never holds a secret and nothing here ever logs one.

Trust: the rule is the person's (the plugin's, passed on by the person at `secret set`), and
is still parsed default-deny: an unknown key, placeholder or header is refused with the field
named. The call is the sandboxed program's and is hostile: its target is matched as it came,
never decoded or normalised. A `%`, a `.` or `..` segment, an empty segment, a backslash, a
byte outside the plain path alphabet is refused, not cleaned, so what the rule checked is
byte for byte what the service receives (an upstream that decodes `%2e%2e` or folds `//`
cannot be shown a path we did not check).

Bodies are read as Telegram's Bot API server reads them (tdlib's HttpReader, with sources
below): a form, JSON, multipart; where two readings can differ the body is refused. A rule's
`not_urls` names the parameters Telegram would fetch a URL given in (photo, media …): their
value, at any depth, is a file_id, attach://<part> or an upload, and a refusal names the
parameter. This is a step beyond the seed, which let the bot's calls pass but for three: a
URL given there is egress around the hosts list (Telegram fetches the host and path the
program names, and getFile hands back what it fetched), as a URL source to a model is.

Order of a call (the shell's): match(rule, method, target, placeholder, headers) → the body
read, check_body(rule, content type, body) → fill(matched, secret read now) → the upstream request
to rule.host:rule.port over TLS (every address check of the gate applies), inbound
credential headers (INBOUND_CREDENTIAL_HEADERS) dropped, Filled.header added.

SecretRuleError is the only exception that leaves this module. Its reason is one line that
never quotes the secret, the placeholder or the incoming path or query, so a refusal can be
sent to the program and logged as it is.
"""

from __future__ import annotations

import hmac
import json
import re
import secrets as _random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from lnk_proxy.refusal import StatusError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ALLOWED_METHODS",
    "DEFAULT_METHODS",
    "HEADER_NAMES",
    "INBOUND_CREDENTIAL_HEADERS",
    "MAX_NAME_BYTES",
    "MAX_NOT_URLS",
    "MAX_PARAMETER_BYTES",
    "MAX_PATHS",
    "MAX_QUERY_PARAMETERS",
    "MAX_REFUSED_NAMES",
    "MAX_RULE_BYTES",
    "MAX_SHAPE_BYTES",
    "MAX_TARGET_BYTES",
    "PLACEHOLDER_SHAPES",
    "RANDOM_BYTES",
    "UPSTREAM_PORT",
    "Filled",
    "FormPart",
    "Matched",
    "Part",
    "Rule",
    "SecretRuleError",
    "check_body",
    "check_secret",
    "environment_variables",
    "fill",
    "make_placeholder",
    "match",
    "parse_rule",
]

# ---------------------------------------------------------------------------------------------
# Limits (each a named constant with its reason)

# A rule is a host, a few shapes and a list of refused names: Telegram's is under 300 bytes.
# A bound far above any real rule keeps a mistaken file (a log, a binary) from being parsed
# and stored, and bounds the work of reading it back at every call.
MAX_RULE_BYTES = 16 * 1024
# Telegram needs two shapes; a service with many more is better served by a rule per secret
# than by a wide rule. Each shape is tried in turn for every call.
MAX_PATHS = 16
# Telegram has 185 methods in all; a refused list longer than that is an allow-list turned
# inside out, and each entry is a set look-up per call anyway.
MAX_REFUSED_NAMES = 256
# A shape is a handful of segments (`/file/bot{secret}/{path}` is 24 bytes).
MAX_SHAPE_BYTES = 256
# A `{name}` is a method: Telegram's longest (getBusinessAccountStarBalance …) are under 40.
MAX_NAME_BYTES = 64
# Under the request head's own bound (lnk_proxy.head.MAX_HEAD_BYTES, 32 KiB): Telegram takes
# parameters in the query, and its longest text (4096 characters) percent-encoded as UTF-8
# can reach 24 KiB; more is not a call any client makes.
MAX_TARGET_BYTES = 30 * 1024
# Telegram's richest method (sendPaidMedia, sendInvoice) takes under 40 parameters.
MAX_QUERY_PARAMETERS = 100
# Telegram's file parameters are about 30 names (photo, document, media, thumbnail …); a
# rule naming more is listing what it should not.
MAX_NOT_URLS = 64
# tdlib's own bound on a call's parameters, files apart (HttpReader.h,
# MAX_TOTAL_PARAMETERS_LENGTH = 1 << 20): Telegram refuses more, and it bounds what is read
# here as JSON.
MAX_PARAMETER_BYTES = 1 << 20
# 16 random bytes (32 hex digits, 128 bits) in a placeholder: not guessable from inside the
# sandbox, and a placeholder is only ever compared, never a credential anywhere else.
RANDOM_BYTES = 16
# The secret verb speaks TLS to the rule's one host on the one HTTPS port; a rule names no
# port (a service on another port is not what a plugin's rule is for).
UPSTREAM_PORT = 443

# ---------------------------------------------------------------------------------------------
# Tables (default deny: what is not here is refused)

# Methods a call may use unless the rule narrows them ("methods"). CONNECT, TRACE, OPTIONS
# and anything unknown never reach a service through a secret.
ALLOWED_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
# Telegram's Bot API takes GET and POST (docs/facts/providers.md §5): a rule's default "methods".
DEFAULT_METHODS = frozenset({"GET", "POST"})
# The headers a rule may put a secret in: the credential headers services document. A rule
# cannot make the proxy set Host, Cookie, a hop-by-hop field or anything that changes how
# the request is framed or routed.
HEADER_NAMES = frozenset({"authorization", "x-api-key", "api-key", "x-auth-token",
                          "private-token"})
# Credential headers a program may send; never passed on (the secret verb adds the one the
# rule names itself). The shell drops these from every call, whatever the rule.
INBOUND_CREDENTIAL_HEADERS = frozenset({b"authorization", b"proxy-authorization", b"cookie",
                                        b"x-api-key", b"api-key", b"x-auth-token",
                                        b"private-token", b"x-goog-api-key"})
# The placeholder shapes a rule may name. `{id}` is the secret's part before its first ':',
# which must be ASCII digits (Telegram's bot id, public: it is the bot's user id); nothing
# else of a secret ever goes into a placeholder. `{random}` is RANDOM_BYTES as hex.
PLACEHOLDER_SHAPES = frozenset({"{random}", "{id}:{random}"})
# A parameter naming a method, refused in a query or a body whatever its case: Telegram
# answers a webhook's reply carrying `method` as a call, and a method must be in the path,
# where the rule checks it (docs/facts/providers.md §5).
_METHOD_PARAMETER = "method"

_RULE_KEYS = frozenset({"host", "paths", "header", "refuse", "placeholder", "methods",
                        "not_urls"})
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")
# Literal text of a shape: RFC 3986 unreserved characters (letters, digits, - . _ ~).
_LITERAL = re.compile(r"[A-Za-z0-9._~-]*\Z")
_NAME = re.compile(rb"[A-Za-z0-9]+\Z")
_REFUSED_NAME = re.compile(rf"[A-Za-z0-9]{{1,{MAX_NAME_BYTES}}}\Z")
_NOT_URL_NAME = re.compile(r"[a-z0-9_]{1,64}\Z")
_HEADER_TEXT = re.compile(r"[\x20-\x7e]*\Z")
# The plain path alphabet of a call: unreserved characters, ':' (Telegram's token and its
# placeholder hold one) and '/'. No '%' (never decoded), no '\' (a separator to some
# servers), no ';' (path parameters to some), nothing that needs quoting.
_PATH_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                        b"-._~:/")
# A query parameter's key: letters, digits, '_', '-', '.'; never encoded, so a key is
# what it reads as (`%6Dethod` is refused, not decoded into `method`).
_QUERY_KEY = re.compile(rb"[A-Za-z0-9_.-]{1,64}\Z")
# A query value: RFC 3986 query characters but the separators '&' and ';' (some servers
# split on ';'), with '%' only before two hex digits.
_QUERY_VALUE = re.compile(rb"(?:[A-Za-z0-9._~!$'()*+,=:@/?-]|%[0-9A-Fa-f]{2})*\Z")
# What a secret put in a path may hold: the path alphabet but '/', so it is one segment's
# text and cannot add a segment, a query or an encoded byte.
_SECRET_IN_PATH = re.compile(rb"[A-Za-z0-9._~:-]+\Z")
_SECRET_ID = re.compile(rb"([0-9]{1,20}):")


class SecretRuleError(StatusError):
    """A rule or a call refused: an HTTP status and one line that never quotes a secret, a
    placeholder or the call's path."""


def _rule_error(reason: str) -> SecretRuleError:
    return SecretRuleError(400, reason)


# ---------------------------------------------------------------------------------------------
# The rule


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """One segment of a shape: a literal, the secret (with literal text around it), a
    name (one segment of letters and digits) or a path (the rest)."""

    kind: str           # "literal", "secret", "name", "path"
    text: bytes = b""   # the literal, or the text before the secret
    suffix: bytes = b""  # the text after the secret


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A parsed rule; only parse_rule makes one that holds."""

    host: str
    port: int
    shapes: tuple[tuple[Part, ...], ...]
    header: tuple[bytes, bytes, bytes] | None  # (name, text before, text after the secret)
    refused: frozenset[bytes]                   # lower case
    placeholder: str | None                     # a PLACEHOLDER_SHAPES entry, None: default
    methods: frozenset[bytes]
    not_urls: frozenset[bytes] = frozenset()    # lower case; see check_body


def parse_rule(raw: bytes) -> Rule:
    """The rule in `raw` (JSON), or SecretRuleError naming the field and why."""
    if len(raw) > MAX_RULE_BYTES:
        raise _rule_error(f"a rule is at most {MAX_RULE_BYTES} bytes")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _rule_error("a rule is one JSON object (this is not valid JSON)") from None
    if not isinstance(document, dict):
        raise _rule_error("a rule is one JSON object")
    unknown = sorted(key for key in document if key not in _RULE_KEYS)
    if unknown:
        raise _rule_error("unknown key in a rule (known: " + ", ".join(sorted(_RULE_KEYS))
                          + "); a key not known is refused, never ignored")
    if "host" not in document:
        raise _rule_error("host: missing (the one host the secret may go to)")
    if "paths" not in document:
        raise _rule_error("paths: missing (the path shapes a call may take)")
    host = _parse_host(document["host"])
    header = _parse_header(document["header"]) if "header" in document else None
    refused = _parse_refused(document.get("refuse", []))
    shapes = _parse_shapes(document["paths"], header_holds_secret=header is not None,
                           refused=refused)
    placeholder = document.get("placeholder")
    if "placeholder" in document and (not isinstance(placeholder, str)
                                      or placeholder not in PLACEHOLDER_SHAPES):
        raise _rule_error("placeholder: one of " + ", ".join(sorted(PLACEHOLDER_SHAPES))
                          + " ({id} is the secret's digits before its first ':')")
    methods = _parse_methods(document.get("methods", sorted(DEFAULT_METHODS)))
    not_urls = _parse_not_urls(document.get("not_urls", []))
    return Rule(host=host, port=UPSTREAM_PORT, shapes=shapes, header=header, refused=refused,
                placeholder=placeholder, methods=methods, not_urls=not_urls)


def _parse_host(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _rule_error("host: a DNS name, as a string")
    if "{" in value or "}" in value:
        raise _rule_error("host: no placeholder ({secret}, {name}, {path}) may stand in the "
                          "host; the rule fixes the one host")
    if "@" in value:
        raise _rule_error("host: no user part ('@'); a secret goes where the rule says")
    if "/" in value or "?" in value or "#" in value:
        raise _rule_error("host: a name only, no scheme, path or query")
    if ":" in value:
        raise _rule_error(f"host: a name only, no port (the secret goes over TLS to port "
                          f"{UPSTREAM_PORT})")
    if len(value) > 253:
        raise _rule_error("host: a DNS name is at most 253 bytes")
    if value != value.lower():
        raise _rule_error("host: in lower case (one plain form)")
    labels = value.split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        raise _rule_error("host: a DNS name of two or more labels (letters, digits, '-'; no "
                          "trailing dot)")
    if labels[-1].isdigit():
        raise _rule_error("host: a name, not an address")
    return value


def _parse_header(value: Any) -> tuple[bytes, bytes, bytes]:
    if not isinstance(value, str) or not _HEADER_TEXT.match(value):
        raise _rule_error("header: 'Name: text with {secret}', printable ASCII on one line")
    name, colon, text = value.partition(":")
    if not colon or name.lower() not in HEADER_NAMES:
        raise _rule_error("header: the header is one of " + ", ".join(sorted(HEADER_NAMES))
                          + " ('Name: text with {secret}')")
    text = text.lstrip(" ")
    if text.count("{secret}") != 1:
        raise _rule_error("header: {secret} stands exactly once in the header's value")
    before, _, after = text.partition("{secret}")
    if "{" in before + after or "}" in before + after:
        raise _rule_error("header: only {secret} may stand in the header's value")
    if after.endswith((" ", "\t")):
        raise _rule_error("header: no trailing space in the header's value")
    return name.lower().encode("ascii"), before.encode("ascii"), after.encode("ascii")


def _parse_refused(value: Any) -> frozenset[bytes]:
    if not isinstance(value, list):
        raise _rule_error("refuse: a list of names")
    if len(value) > MAX_REFUSED_NAMES:
        raise _rule_error(f"refuse: at most {MAX_REFUSED_NAMES} names (a longer list is an "
                          "allow-list turned inside out)")
    refused: set[bytes] = set()
    for item in value:
        if not isinstance(item, str) or not _REFUSED_NAME.match(item):
            raise _rule_error(f"refuse: each name is 1 to {MAX_NAME_BYTES} ASCII letters and "
                              "digits, as a {name} is")
        folded = item.lower().encode("ascii")
        if folded in refused:
            raise _rule_error("refuse: a name given twice (names are compared whatever their "
                              "case)")
        refused.add(folded)
    return frozenset(refused)


def _parse_not_urls(value: Any) -> frozenset[bytes]:
    if not isinstance(value, list):
        raise _rule_error("not_urls: a list of parameter names")
    if len(value) > MAX_NOT_URLS:
        raise _rule_error(f"not_urls: at most {MAX_NOT_URLS} names")
    names: set[bytes] = set()
    for item in value:
        if not isinstance(item, str) or not _NOT_URL_NAME.match(item):
            raise _rule_error("not_urls: each name is 1 to 64 lower-case ASCII letters, digits "
                              "and '_'")
        if item.encode("ascii") in names:
            raise _rule_error("not_urls: a name given twice")
        names.add(item.encode("ascii"))
    return frozenset(names)


def _parse_methods(value: Any) -> frozenset[bytes]:
    if not isinstance(value, list) or not value:
        raise _rule_error("methods: a non-empty list of HTTP methods")
    for item in value:
        if not isinstance(item, str) or item not in ALLOWED_METHODS:
            raise _rule_error("methods: each one of " + ", ".join(sorted(ALLOWED_METHODS))
                              + " (upper case)")
    return frozenset(item.encode("ascii") for item in value)


def _parse_shapes(value: Any, *, header_holds_secret: bool,
                  refused: frozenset[bytes]) -> tuple[tuple[Part, ...], ...]:
    if not isinstance(value, list) or not value:
        raise _rule_error("paths: a non-empty list of path shapes")
    if len(value) > MAX_PATHS:
        raise _rule_error(f"paths: at most {MAX_PATHS} shapes")
    shapes = []
    for index, shape in enumerate(value):
        parsed = _parse_shape(shape, f"paths[{index}]", refused)
        has_secret = any(part.kind == "secret" for part in parsed)
        if header_holds_secret and has_secret:
            raise _rule_error(f"paths[{index}]: the secret goes in the header; {{secret}} "
                              "cannot also stand in a path")
        if not header_holds_secret and not has_secret:
            raise _rule_error(f"paths[{index}]: {{secret}} stands nowhere (put it in the path "
                              "shape or give a header)")
        if parsed in shapes:
            raise _rule_error(f"paths[{index}]: the same shape twice")
        shapes.append(parsed)
    return tuple(shapes)


def _parse_shape(shape: Any, field: str, refused: frozenset[bytes]) -> tuple[Part, ...]:
    if not isinstance(shape, str) or not shape.startswith("/"):
        raise _rule_error(f"{field}: a path shape is a string starting with '/'")
    if len(shape) > MAX_SHAPE_BYTES:
        raise _rule_error(f"{field}: a shape is at most {MAX_SHAPE_BYTES} bytes")
    if "?" in shape or "#" in shape or "=" in shape or "&" in shape:
        raise _rule_error(f"{field}: a shape is a path only: no query, so no secret in a query "
                          "(a query is logged and cached where a path segment is not)")
    parts: list[Part] = []
    seen: set[str] = set()
    for segment in shape[1:].split("/"):
        if not segment:
            raise _rule_error(f"{field}: an empty segment ('//' or a trailing '/')")
        if segment in ("{name}", "{path}"):
            kind = segment[1:-1]
            part = Part(kind=kind)
        elif "{secret}" in segment:
            kind = "secret"
            before, _, after = segment.partition("{secret}")
            if not _LITERAL.match(before) or not _LITERAL.match(after):
                raise _rule_error(f"{field}: beside {{secret}} stand only letters, digits, "
                                  "'-', '.', '_', '~'")
            part = Part(kind=kind, text=before.encode("ascii"), suffix=after.encode("ascii"))
        elif "{" in segment or "}" in segment:
            raise _rule_error(f"{field}: the placeholders are {{secret}}, {{name}} and {{path}} "
                              "({name} and {path} as a whole segment)")
        else:
            kind = "literal"
            if not _LITERAL.match(segment) or segment in (".", ".."):
                raise _rule_error(f"{field}: a literal segment is letters, digits, '-', '.', "
                                  "'_', '~' and not '.' or '..'")
            if segment.lower().encode("ascii") in refused:
                raise _rule_error(f"{field}: a literal segment is a refused name")
            part = Part(kind=kind, text=segment.encode("ascii"))
        if kind != "literal":
            if kind in seen:
                raise _rule_error(f"{field}: {{{kind}}} stands twice")
            seen.add(kind)
        if parts and parts[-1].kind == "path":
            raise _rule_error(f"{field}: {{path}} stands only as the last part of a shape")
        if kind == "path" and not any(earlier.kind == "literal" for earlier in parts):
            raise _rule_error(f"{field}: a literal segment must come before {{path}} (else "
                              "{path} reaches every method)")
        parts.append(part)
    return tuple(parts)


# ---------------------------------------------------------------------------------------------
# The placeholder and the secret


def make_placeholder(rule: Rule, secret: bytes) -> bytes:
    """A new placeholder of the rule's shape for `secret`: `{random}` is RANDOM_BYTES of
    secrets.token_hex; `{id}` the secret's digits before its first ':'. With no
    "placeholder" in the rule: `{id}:{random}` when the secret starts with digits and ':'
    (Telegram's `<bot id>:<token>`, which aiogram's token check needs), else `{random}`."""
    random = _random.token_hex(RANDOM_BYTES).encode("ascii")
    found = _SECRET_ID.match(secret)
    if rule.placeholder == "{random}" or (rule.placeholder is None and found is None):
        return random
    if found is None:
        raise SecretRuleError(400, "the rule's placeholder is {id}:{random}, and the secret "
                                   "does not start with ASCII digits and a ':'")
    return found.group(1) + b":" + random


def check_secret(rule: Rule, secret: bytes) -> None:
    """SecretRuleError unless `secret` can stand where the rule puts it as it is: in a
    path, one segment's plain text (no '/', '%', '?', nothing encoded); in a header,
    printable ASCII with no line break. Never quotes the secret."""
    if rule.placeholder == "{id}:{random}" and _SECRET_ID.match(secret) is None:
        raise SecretRuleError(400, "the rule's placeholder is {id}:{random}, and the secret "
                                   "does not start with ASCII digits and a ':'")
    if rule.header is not None:
        if not secret or not _HEADER_TEXT.fullmatch(secret.decode("latin-1")) \
                or secret != secret.strip(b" "):
            raise SecretRuleError(403, "the secret cannot stand in a header as it is "
                                       "(printable ASCII, one line, no space at its ends)")
        return
    if not _SECRET_IN_PATH.match(secret) or secret.strip(b".") == b"":
        raise SecretRuleError(403, "the secret cannot stand in a path as it is (letters, "
                                   "digits, '-', '.', '_', '~', ':' only)")


# ---------------------------------------------------------------------------------------------
# A call


@dataclass(frozen=True, slots=True, kw_only=True)
class Matched:
    """A call the rule admits, before the secret is put in: the target is `before`, the
    secret, `after` (path mode), or `before` whole with the header added (header mode)."""

    rule: Rule
    method: bytes
    before: bytes
    after: bytes
    name: bytes | None   # the {name} matched, for the shell's own use (never logged)


@dataclass(frozen=True, slots=True, kw_only=True)
class Filled:
    """The request to send: target and header hold the real secret (repr hides them)."""

    host: str
    port: int
    method: bytes
    target: bytes = b""
    header: tuple[bytes, bytes] | None = None

    def __repr__(self) -> str:
        return f"Filled(host={self.host!r}, port={self.port}, <target and header hidden>)"

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"


_WRONG_PLACEHOLDER = "the call does not carry the placeholder this sandbox was given where " \
                     "the rule puts the secret"


def match(rule: Rule, method: bytes, target: bytes, placeholder: bytes,
          headers: Sequence[tuple[bytes, bytes]] = ()) -> Matched:
    """The call `method target` (the target after `/_link/secret/<name>`, query included,
    as it came) admitted by `rule` with the sandbox's `placeholder`, or SecretRuleError."""
    if not placeholder:
        raise SecretRuleError(500, "the secret verb has no placeholder for this secret")
    if len(target) > MAX_TARGET_BYTES:
        raise SecretRuleError(414, f"the target is longer than {MAX_TARGET_BYTES} bytes")
    if method not in rule.methods:
        raise SecretRuleError(405, "this method is not allowed for this secret (allowed: "
                              + ", ".join(sorted(m.decode() for m in rule.methods)) + ")")
    path, question, query = target.partition(b"?")
    path, spelled = _secret_colon_spelled_encoded(path)
    _refuse_unclean_path(path)
    segments = path[1:].split(b"/")
    shape = _shape_of(rule, segments)
    if spelled is not None and (spelled >= len(shape) or shape[spelled].kind != "secret"):
        raise SecretRuleError(400, _ENCODED)
    before: list[bytes] = []
    after: list[bytes] = []
    found_secret = False
    name: bytes | None = None
    for index, part in enumerate(shape):
        segment = segments[index] if part.kind != "path" else b"/".join(segments[index:])
        if part.kind == "secret":
            carried = segment[len(part.text):len(segment) - len(part.suffix)]
            if not hmac.compare_digest(carried, placeholder):
                raise SecretRuleError(403, _WRONG_PLACEHOLDER)
            before.append(b"/" + part.text)
            after.append(part.suffix)
            found_secret = True
            continue
        if part.kind == "name":
            _check_name(rule, segment)
            name = segment
        elif part.kind == "path":
            for piece in segments[index:]:
                _check_path_segment(rule, piece)
        (after if found_secret else before).append(b"/" + segment)
    if question:
        for key, value in _check_query(query):
            _check_parameter(rule, "query", key, _url_decode(value))
        (after if found_secret else before).append(b"?" + query)
    if rule.header is not None:
        _check_header_placeholder(rule.header, headers, placeholder)
    return Matched(rule=rule, method=method, before=b"".join(before), after=b"".join(after),
                   name=name)


_ENCODED = "an encoded byte ('%') in the path is refused, never decoded"
# The one spelling of an encoded byte accepted, and only in the secret's own segment, which
# the proxy replaces whole (so what it decoded never goes upstream): ':' as '%3A', as
# urllib.parse.quote writes it. python-telegram-bot quotes its file URLs so, and a
# Telegram placeholder (`<bot id>:<random>`) holds a ':'.
_ENCODED_COLON = b"%3A"


def _secret_colon_spelled_encoded(path: bytes) -> tuple[bytes, int | None]:
    """(path, None) when it has no '%'; else the path with '%3A' read as ':' in the one
    segment that holds a '%', and that segment's index among the shape's parts (the
    caller refuses it unless it is the secret's). Any other '%' is left for
    _refuse_unclean_path to refuse."""
    if b"%" not in path:
        return path, None
    segments = path.split(b"/")
    encoded = [index for index, segment in enumerate(segments) if b"%" in segment]
    plain = segments[encoded[0]].replace(_ENCODED_COLON, b":")
    if len(encoded) != 1 or encoded[0] == 0 or b"%" in plain:
        return path, None
    segments[encoded[0]] = plain
    return b"/".join(segments), encoded[0] - 1


def _refuse_unclean_path(path: bytes) -> None:
    if not path.startswith(b"/"):
        raise SecretRuleError(404, "the secret verb's path is /_link/secret/<name>/<the "
                                   "service's own path>")
    if b"%" in path:
        raise SecretRuleError(400, _ENCODED)
    if b"\\" in path:
        raise SecretRuleError(400, "a backslash in the path is refused")
    if not _PATH_BYTES.issuperset(path):
        raise SecretRuleError(400, "a byte outside the path's plain alphabet (letters, digits, "
                                   "'-', '.', '_', '~', ':') is refused")
    for segment in path[1:].split(b"/"):
        if not segment:
            raise SecretRuleError(400, "an empty path segment ('//' or a trailing '/') is "
                                       "refused, never folded")
        if segment in (b".", b".."):
            raise SecretRuleError(400, "a relative segment ('.' or '..') is refused, never "
                                       "resolved")


def _shape_of(rule: Rule, segments: list[bytes]) -> tuple[Part, ...]:
    """The first shape whose literal structure the segments have (the secret, name and
    path are checked after, by the caller)."""
    for shape in rule.shapes:
        if _fits(shape, segments):
            return shape
    raise SecretRuleError(404, "the path has none of the shapes this secret's rule allows")


def _fits(shape: tuple[Part, ...], segments: list[bytes]) -> bool:
    if shape[-1].kind == "path":
        if len(segments) < len(shape):
            return False
    elif len(segments) != len(shape):
        return False
    for part, segment in zip(shape, segments, strict=False):
        if part.kind == "literal" and segment != part.text:
            return False
        if part.kind == "secret" and not (
                len(segment) > len(part.text) + len(part.suffix)
                and segment.startswith(part.text) and segment.endswith(part.suffix)):
            return False
    return True


def _check_name(rule: Rule, segment: bytes) -> None:
    if len(segment) > MAX_NAME_BYTES or not _NAME.match(segment):
        raise SecretRuleError(400, f"a name in the path is 1 to {MAX_NAME_BYTES} ASCII letters "
                                   "and digits, nothing else")
    if segment.lower() in rule.refused:
        raise SecretRuleError(403, "this name is refused by the secret's rule (whatever its "
                                   "case)")


def _check_path_segment(rule: Rule, segment: bytes) -> None:
    # A server that drops an extension (`close.json` → `close`) must not reach a refused
    # name either: the stem before the first '.' is compared too.
    if segment.lower() in rule.refused or segment.split(b".")[0].lower() in rule.refused:
        raise SecretRuleError(403, "a segment of the path is a name the secret's rule refuses "
                                   "(whatever its case)")


def _check_query(query: bytes) -> list[tuple[bytes, bytes]]:
    """A query is passed on as it came, after each parameter is read plainly: keys are
    never encoded (so `method` cannot hide as `%6Dethod`), values may be percent-encoded
    (a text message needs it; a value is never a path or a method)."""
    if not query:
        raise SecretRuleError(400, "an empty query ('?' with nothing after) is refused")
    pairs = query.split(b"&")
    if len(pairs) > MAX_QUERY_PARAMETERS:
        raise SecretRuleError(400, f"at most {MAX_QUERY_PARAMETERS} query parameters")
    read = []
    for pair in pairs:
        key, _, value = pair.partition(b"=")
        _check_parameter_key(key, where="query")
        if not _QUERY_VALUE.match(value):
            raise SecretRuleError(400, "a query value holds a byte that is not plain (';', '#', "
                                       "a '%' not before two hex digits, or one to be encoded)")
        read.append((key, value))
    return read


def _check_parameter_key(key: bytes, *, where: str) -> None:
    if not _QUERY_KEY.match(key):
        raise SecretRuleError(400, f"a {where} parameter's name is 1 to 64 letters, digits, "
                                   "'_', '-', '.', never encoded")
    if key.lower() == _METHOD_PARAMETER.encode():
        raise SecretRuleError(403, f"a {where} parameter named method is refused (the method "
                                   "goes in the path, where the rule checks it)")


def _check_header_placeholder(header: tuple[bytes, bytes, bytes],
                              headers: Sequence[tuple[bytes, bytes]],
                              placeholder: bytes) -> None:
    name, before, after = header
    values = [value for field, value in headers if field.lower() == name]
    if len(values) != 1:
        raise SecretRuleError(403, _WRONG_PLACEHOLDER)
    if not hmac.compare_digest(values[0].strip(b" \t"), before + placeholder + after):
        raise SecretRuleError(403, _WRONG_PLACEHOLDER)


def check_body(rule: Rule, content_type: bytes, body: bytes) -> None:
    """SecretRuleError when a body, read as Telegram's Bot API server reads it (tdlib's
    HttpReader: see _body_kind, _read_multipart), names a method as a parameter (`method`,
    any case: a form's field, a JSON object's top-level key, a multipart part's name), or
    gives a URL where the rule's `not_urls` takes only a file (_check_parameter). A body of
    another type is not read here: Telegram reads no parameter from it."""
    kind = _body_kind(content_type)
    if kind == "form":
        _refuse_too_many_parameter_bytes(len(body))
        if body:
            for pair in body.split(b"&"):
                key, _, value = pair.partition(b"=")
                _check_parameter_key(key, where="form")
                _check_parameter(rule, "form", key, _url_decode(value))
    elif kind == "json":
        _refuse_too_many_parameter_bytes(len(body))
        document = _json_pairs(body) if body else None
        if document is None and body:
            raise SecretRuleError(400, "the JSON body is not valid JSON")
        if isinstance(document, _Pairs):
            for key, value in document:
                if key.lower() == _METHOD_PARAMETER:
                    raise SecretRuleError(403, "a body field named method is refused (the "
                                               "method goes in the path, where the rule checks "
                                               "it)")
                _check_json_parameter(rule, key, value)
        elif isinstance(document, str):
            # tdlib reads a JSON body that is one string as the parameter `content`.
            _check_parameter(rule, "JSON", b"content", document.encode("utf-8", "surrogatepass"))
    elif kind == "multipart":
        parts = _read_multipart(content_type, body)
        _refuse_too_many_parameter_bytes(sum(len(part.value) for part in parts
                                             if not part.upload))
        for part in parts:
            if part.name.lower() == _METHOD_PARAMETER.encode():
                raise SecretRuleError(403, "a multipart field named method is refused (the method "
                                           "goes in the path)")
            if not part.upload:
                _check_parameter(rule, "multipart", part.name, part.value)


def _refuse_too_many_parameter_bytes(size: int) -> None:
    if size > MAX_PARAMETER_BYTES:
        raise SecretRuleError(413, f"more than {MAX_PARAMETER_BYTES} bytes of parameters (files "
                                   "apart): Telegram refuses them too")


# ---------------------------------------------------------------------------------------------
# How Telegram reads a body (tdlib/td tdnet/td/net/HttpReader.cpp @d963044, 2024, and the
# older @04667e8, 2020; tdlib/telegram-bot-api Client.cpp @01a3679, Bot API 10.0). Where the
# two tdlib versions, or tdlib and RFC 7578, could read a body otherwise, it is refused.


def _body_kind(content_type: bytes) -> str:
    """"multipart", "form", "json" or "other": the media type read strictly, refused when
    tdlib would read another kind (it looks for each type's name anywhere in the field, in
    this order, so `text/plain; x="application/json"` is JSON to Telegram)."""
    lowered = content_type.lower()
    if b"multipart/form-data" in lowered:
        telegram = "multipart"
    elif b"application/x-www-form-urlencoded" in lowered:
        telegram = "form"
    elif b"application/json" in lowered:
        telegram = "json"
    else:
        telegram = "other"
    ours = _BODY_KINDS.get(lowered.split(b";")[0].strip(b" \t"), "other")
    if ours != telegram:
        raise SecretRuleError(400, "a Content-Type that names another body type than its own is "
                                   "refused (Telegram looks for multipart/form-data, "
                                   "application/x-www-form-urlencoded and application/json "
                                   "anywhere in it)")
    return ours


_BODY_KINDS = {b"multipart/form-data": "multipart",
               b"application/x-www-form-urlencoded": "form", b"application/json": "json"}


def _url_decode(value: bytes) -> bytes:
    """A query's or form's value as tdlib decodes it (url_decode, '+' as a space): '%'
    before two hex digits is that byte, any other '%' stays."""
    return _URL_ESCAPE.sub(lambda found: b" " if found.group(0) == b"+"
                           else bytes([int(found.group(0)[1:], 16)]), value)


_URL_ESCAPE = re.compile(rb"%[0-9A-Fa-f]{2}|\+")


class _Pairs(list):  # type: ignore[type-arg]
    """A JSON object as (key, value) pairs in order, duplicates kept: tdlib keeps them all
    and reads the first, other readers the last; every one is checked."""


def _json_pairs(raw: bytes) -> Any:
    """The JSON document in `raw` with objects as _Pairs, or None when it is not JSON
    (orjson decides validity, RFC 8259 strictly; the stdlib keeps duplicate keys)."""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    try:
        return json.loads(raw, object_pairs_hook=_Pairs)
    except RecursionError:
        # orjson takes 1024 levels, the stdlib fewer; tdlib refuses past 100 itself.
        raise SecretRuleError(400, "JSON nested this deep is refused (Telegram reads 100 "
                                   "levels)") from None


# A file given by reference, as Telegram takes it for a file parameter: a file_id (tdlib's
# base64url persistent id; empty: the upload of that name is used) or `attach://<part>`.
# Anything else is refused, not only `http(s)://`: tdlib reads any id holding a '.' as a URL
# (FileManager::from_persistent_id → parse_url, which takes `evil.example/x.jpg` without a
# scheme), so only an allow-list holds.
_FILE_REFERENCE = re.compile(rb"(?:[A-Za-z0-9_-]*|attach://[A-Za-z0-9_-]{1,64})\Z")
_JSON_START = frozenset(b"[{")


def _not_url_refusal(where: str, name: str) -> SecretRuleError:
    return SecretRuleError(403, f"{where} parameter {name}: Telegram fetches a URL given there, "
                                "and this secret's rule (not_urls) takes only a file_id, "
                                "attach://<part> or an upload")


def _check_parameter(rule: Rule, where: str, name: bytes, value: bytes) -> None:
    """A top-level parameter as Telegram reads it: named by `not_urls`, a file reference or
    JSON (an InputMedia, InputProfilePhoto … whose fields are checked in turn); any other
    parameter may be JSON Telegram reads (sendMediaGroup's `media`, createNewStickerSet's
    `stickers`), whose fields named by `not_urls` are checked at every depth."""
    if not rule.not_urls:
        return
    folded = name.lower()
    if folded in rule.not_urls and _FILE_REFERENCE.match(value):
        return
    tree = _json_container(rule, where, value)
    if tree is None:
        if folded in rule.not_urls:
            raise _not_url_refusal(where, folded.decode("ascii"))
        return
    _check_tree(rule, where, tree)


def _check_json_parameter(rule: Rule, key: str, value: Any) -> None:
    """A JSON body's top-level field: a string is a parameter as in a form (Telegram may
    read it as JSON in turn); any other value is JSON text to Telegram, checked as a tree."""
    if isinstance(value, str):
        _check_parameter(rule, "JSON", key.encode("utf-8", "surrogatepass"),
                         value.encode("utf-8", "surrogatepass"))
    elif rule.not_urls:
        _check_tree(rule, "JSON", _Pairs([(key, value)]))


def _json_container(rule: Rule, where: str, value: bytes) -> Any:
    """`value` as the JSON array or object Telegram would read it as, or None when it is
    not one. tdlib's JSON reader is laxer than RFC 8259 (control characters in strings,
    `+1`, `.5`, unknown escapes), so a value that starts as JSON and is not valid JSON is
    refused when it holds a name of `not_urls` or a backslash (which could spell one)."""
    start = value.lstrip(b" \t\r\n")[:1]
    if not start or start[0] not in _JSON_START:
        return None
    tree = _json_pairs(value)
    if tree is not None:
        return tree
    lowered = value.lower()
    if b"\\" in value or any(name in lowered for name in rule.not_urls):
        raise SecretRuleError(400, f"a {where} parameter that Telegram may read as JSON is not "
                                   "valid JSON, and holds a name this secret's rule keeps from "
                                   "URLs (not_urls) or a backslash")
    return None


def _check_tree(rule: Rule, where: str, tree: Any) -> None:
    """Every field named by `not_urls` in a JSON tree, at any depth (iteratively: depth is
    the program's): a file reference, null, or JSON in turn; never a URL, number or
    boolean (tdlib reads a number's text, and `1.5` holds a '.')."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, _Pairs):
            for key, value in node:
                folded = key.lower().encode("utf-8", "surrogatepass")
                if folded not in rule.not_urls or isinstance(value, list):
                    stack.append(value)
                elif value is not None and not (
                        isinstance(value, str)
                        and _FILE_REFERENCE.match(value.encode("utf-8", "surrogatepass"))):
                    raise _not_url_refusal(where, folded.decode("ascii"))
        elif isinstance(node, list):
            stack.extend(node)


@dataclass(frozen=True, slots=True, kw_only=True)
class FormPart:
    """One part of a multipart body as Telegram reads it: its name, its value (its bytes
    as sent) and whether it is an upload (it has a filename: tdlib keeps it as a file)."""

    name: bytes
    value: bytes
    upload: bool


# RFC 9110 token characters (a header's name, a parameter's name or unquoted value).
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_CONTENT_TYPE_PARAMETER = re.compile(rb"; ?(" + _TOKEN + rb')=(' + _TOKEN
                                     + rb'|"[^"\\;\x00-\x1f\x7f]*")')
# RFC 2046 5.1.1: 1 to 70 bchars, not ending in a space; a space only when quoted.
_BOUNDARY_VALUE = re.compile(rb"[0-9A-Za-z'()+_,./:=? -]{0,69}[0-9A-Za-z'()+_,./:=?-]\Z")
_HEADER_NAME = re.compile(_TOKEN + rb"\Z")
_DISPOSITION_PARAMETER = re.compile(rb" ?(" + _TOKEN + rb')=(' + _TOKEN
                                    + rb'|"[^"\\;\x00-\x1f\x7f]*")(;|\Z)')
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
# A part's own Content-Type when it is not an upload: tdlib reads a part typed
# application/x-www-form-urlencoded as more parameters (HttpReader: begins_with), which no
# client sends; what clients send is here.
_FIELD_TYPES = frozenset({b"text/plain", b"application/json", b"application/octet-stream"})


def _boundary_of(content_type: bytes) -> bytes:
    """The boundary of `multipart/form-data; …`, read so that tdlib reads the same: it takes
    the first `boundary` anywhere in the field (so `xboundary=` would be it), then up to ';'
    with no space trimmed. One strict form: parameters `; name=value`, exactly one named
    boundary, the word nowhere else."""
    lowered = content_type.lower()
    if b"boundary" not in lowered:
        raise SecretRuleError(400, "a multipart body without a boundary is refused")
    rest = content_type[len(b"multipart/form-data"):]
    found = []
    position = 0
    while position < len(rest):
        parameter = _CONTENT_TYPE_PARAMETER.match(rest, position)
        if parameter is None:
            raise SecretRuleError(400, "a multipart Content-Type's parameters are '; name=value' "
                                       "(a token or a quoted string without ';', '\\' or "
                                       "spaces around '=')")
        if parameter.group(1).lower() == b"boundary":
            found.append(parameter.group(2))
        position = parameter.end()
    if len(found) != 1 or lowered.count(b"boundary") != 1:
        raise SecretRuleError(400, "a multipart Content-Type names its boundary once, as "
                                   "'boundary=', and the word nowhere else (Telegram takes the "
                                   "first 'boundary' anywhere in it)")
    boundary = found[0][1:-1] if found[0].startswith(b'"') else found[0]
    if not _BOUNDARY_VALUE.match(boundary):
        raise SecretRuleError(400, "a multipart boundary is 1 to 70 of RFC 2046's characters")
    return boundary


def _read_multipart(content_type: bytes, body: bytes) -> list[FormPart]:
    """The parts of a multipart body as tdlib reads them, or SecretRuleError where another
    reading is possible: a preamble, a delimiter not followed by a line end or '--', an
    epilogue but a line end, a part without headers, and every form _read_part_head
    refuses. tdlib ends a part at the first CRLF '--' boundary and skips the two bytes
    after it unread; here they must be CRLF."""
    boundary = _boundary_of(content_type)
    first = b"--" + boundary
    delimiter = b"\r\n" + first
    if not body.startswith(first + b"\r\n"):
        raise SecretRuleError(400, "a multipart body starts with its boundary and a line end (no "
                                   "preamble)")
    parts: list[FormPart] = []
    names: set[bytes] = set()
    position = len(first)
    while True:
        head_end = body.find(b"\r\n\r\n", position)
        if head_end <= position:
            raise SecretRuleError(400, "a multipart part has headers, then an empty line")
        name, upload = _read_part_head(body[position + 2:head_end])
        value_end = body.find(delimiter, head_end + 4)
        if value_end < 0:
            raise SecretRuleError(400, "a multipart body ends with its closing boundary")
        if name in names:
            raise SecretRuleError(400, "a multipart field name given twice is refused (readers "
                                       "differ on which one counts)")
        names.add(name)
        parts.append(FormPart(name=name, value=body[head_end + 4:value_end], upload=upload))
        after = value_end + len(delimiter)
        if body[after:after + 2] == b"--":
            if body[after + 2:] not in (b"", b"\r\n"):
                raise SecretRuleError(400, "after a multipart body's closing boundary comes "
                                           "at most a line end")
            return parts
        if body[after:after + 2] != b"\r\n":
            raise SecretRuleError(400, "a multipart boundary is followed by a line end or '--' "
                                       "(the boundary inside a value is refused)")
        position = after


def _read_part_head(head: bytes) -> tuple[bytes, bool]:
    """(name, upload) of a part's headers. Refused: a header line folded, with a bare CR or
    LF, a control byte, no ':' or space before it (tdlib trims the name, others do not);
    Content-Disposition or Content-Type twice (tdlib takes the last); a disposition not
    `form-data; name=…` exactly; a parameter other than name and filename, or one twice;
    a quoted value with ';' or '\\' (tdlib 2020 splits at ';', 2024 unescapes '\\'); a name
    that is not plain (tdlib 2024 %-decodes it: `%6Dethod` is method); a field's own
    Content-Type that tdlib would read as more parameters."""
    disposition: bytes | None = None
    field_type: bytes | None = None
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            raise SecretRuleError(400, "a folded multipart header line is refused")
        name, colon, value = line.partition(b":")
        if not colon or not _HEADER_NAME.match(name):
            raise SecretRuleError(400, "a multipart header is 'Name: value', the name a token "
                                       "right before its ':' (no space before the colon)")
        value = value.strip(b" \t")
        if _CONTROL.search(value):
            raise SecretRuleError(400, "a multipart header holds a control byte or a bare line "
                                       "end")
        lowered = name.lower()
        if lowered == b"content-disposition":
            if disposition is not None:
                raise SecretRuleError(400, "a multipart part with two Content-Disposition "
                                           "headers is refused")
            disposition = value
        elif lowered == b"content-type":
            if field_type is not None:
                raise SecretRuleError(400, "a multipart part with two Content-Type headers is "
                                           "refused")
            field_type = value
    if disposition is None:
        raise SecretRuleError(400, "a multipart part without Content-Disposition is refused")
    parameters = _disposition_parameters(disposition)
    if b"name" not in parameters:
        raise SecretRuleError(400, "a multipart part's Content-Disposition names it (name=)")
    name = parameters[b"name"]
    if not _QUERY_KEY.match(name):
        raise SecretRuleError(400, "a multipart field's name is 1 to 64 letters, digits, '_', "
                                   "'-', '.', never encoded or escaped")
    upload = b"filename" in parameters
    if not upload and field_type is not None and \
            field_type.split(b";")[0].strip(b" \t").lower() not in _FIELD_TYPES:
        raise SecretRuleError(400, "a multipart field's own Content-Type is text/plain, "
                                   "application/json or application/octet-stream (Telegram reads "
                                   "a field sent as a form as more parameters)")
    return name, upload


def _disposition_parameters(value: bytes) -> dict[bytes, bytes]:
    if not value.startswith(b"form-data;"):
        raise SecretRuleError(400, "a multipart part's Content-Disposition is 'form-data; "
                                   "name=…' exactly")
    parameters: dict[bytes, bytes] = {}
    position = len(b"form-data;")
    while position < len(value):
        parameter = _DISPOSITION_PARAMETER.match(value, position)
        if parameter is None:
            raise SecretRuleError(400, "a multipart Content-Disposition's parameters are "
                                       "'name=value' (a token, or a quoted string without ';' or "
                                       "'\\'), one space at most before each")
        key = parameter.group(1)
        if key.lower() == b"name*":
            # RFC 7578 4.2: senders do not use the RFC 2231 form; a server that reads it
            # would decode a name this check did not see.
            raise SecretRuleError(400, "a multipart field name in the encoded form (name*=) is "
                                       "refused")
        if key not in (b"name", b"filename"):
            raise SecretRuleError(400, "a multipart Content-Disposition takes name and filename "
                                       "only (in lower case)")
        if key in parameters:
            raise SecretRuleError(400, "a multipart Content-Disposition gives name or filename "
                                       "twice (readers differ on which one counts)")
        found = parameter.group(2)
        parameters[key] = found[1:-1] if found.startswith(b'"') else found
        position = parameter.end()
        if parameter.group(3) == b";" and position == len(value):
            raise SecretRuleError(400, "a multipart Content-Disposition ends with its last "
                                       "parameter, not ';'")
    return parameters


def fill(matched: Matched, secret: bytes) -> Filled:
    """The upstream request of `matched` with the real `secret` where the rule puts it;
    SecretRuleError (403, final: the person's to fix) when the secret cannot stand there as is."""
    rule = matched.rule
    check_secret(rule, secret)
    if rule.header is not None:
        name, before, after = rule.header
        return Filled(host=rule.host, port=rule.port, method=matched.method,
                        target=matched.before + matched.after,
                        header=(name, before + secret + after))
    return Filled(host=rule.host, port=rule.port, method=matched.method,
                    target=matched.before + secret + matched.after)


# ---------------------------------------------------------------------------------------------
# The program's environment


def environment_variables(names: Iterable[str]) -> dict[str, tuple[str, str]]:
    """name → (its base URL's variable, its placeholder's variable) for each secret a
    sandbox names: `LNK_SECRET_<NAME>_URL` and `LNK_SECRET_<NAME>`, upper case, '-' as '_'.
    SecretRuleError when two names would share a variable (`a-b` and `a_b`; `a` and
    `a_url`, whose placeholder's variable is a's URL's): the spec naming both is refused
    rather than one program's variable silently holding another secret's value."""
    variables: dict[str, tuple[str, str]] = {}
    taken: set[str] = set()
    for name in sorted(set(names)):
        stem = "LNK_SECRET_" + name.upper().replace("-", "_")
        pair = (stem + "_URL", stem)
        if taken & set(pair):
            raise SecretRuleError(400, "two secrets' names give the same environment variable "
                                       "(a '-' and a '_', or a name ending in _url); rename one")
        taken.update(pair)
        variables[name] = pair
    return variables
