"""The command line of lnk-sandbox-mcp-remote, judged before any connection (sans-IO).

    lnk-sandbox-mcp-remote URL [--header "Name: value"]…

Trust: the argv is the person's (a tool's definition in Link's settings), but a header's
value is a secret, so no error here ever repeats a value, nor an argument that may be
one (a `--header` without a colon is named by its position only). The environment is
passed in explicitly. `${VAR}` in a value is filled from it only for a VAR it names in
LNK_TOOL_SECRETS, the tool's own secrets the proxy gives it (lnk_proxy.tools): never
another variable, whatever the environment holds. `lnk-sandbox tool add` runs this same
check on a definition's command before keeping it (the URL's rule at once, not at a
first call), and moves each literal value into the tool's secrets
(keep_literal_values_out), so no value of a header sits in argv, which every process of
the same user reads in /proc.

Order: the URL first (https, or http to this machine's loopback only: a token must
never cross the network in the clear), then each header (its name, its value's bytes,
its `${VAR}`s, the names ours to set), then the count.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_VALUE_BYTES",
    "MAX_URL_BYTES",
    "TOOL_SECRETS_VARIABLE",
    "ArgumentError",
    "Arguments",
    "Target",
    "keep_literal_values_out",
    "parse_arguments",
    "parse_header",
    "parse_target",
]

# A tool's definition names a token or two, not a dump: more is a mistake, refused.
MAX_HEADERS = 32
# Common servers refuse a header line over 8 KiB (nginx's large_client_header_buffers);
# a value longer than that would only earn a 4xx far away, so it is refused here.
MAX_HEADER_VALUE_BYTES = 8192
# Browsers and servers cap a request target near 8 KiB; an endpoint is far shorter.
MAX_URL_BYTES = 4096

# mcp-remote's rule for a header's name (docs/facts/providers.md §6.3), narrower than RFC 9110's.
_HEADER_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# What a value may hold once filled: visible ASCII, space and tab (no obs-text: a
# server's reading of bytes above 0x7F differs from one to the next).
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
# A host name as DNS spells it; anything else (IDNA, underscores, a trailing dot) is refused.
_HOST_NAME = re.compile(r"(?=.{1,253}\Z)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                        r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# Headers this program sets itself (the transport's and MCP's): a `--header` naming one
# would let a definition forge the session, the revision or the framing.
_RESERVED_NAMES = frozenset({
    "host", "content-length", "content-type", "transfer-encoding", "connection",
    "keep-alive", "te", "trailer", "upgrade", "expect", "accept", "accept-encoding",
    "proxy-authorization", "proxy-connection", "last-event-id",
    "mcp-session-id", "mcp-protocol-version", "mcp-method", "mcp-name",
})
_RESERVED_PREFIXES = ("mcp-param-",)
_LOOPBACK_NAME = "localhost"
# The names (comma-separated) of the variables that hold the tool's own secrets, set by the
# proxy when it starts the tool (lnk_proxy.tools): the only ones `${VAR}` may name.
TOOL_SECRETS_VARIABLE = "LNK_TOOL_SECRETS"


class ArgumentError(Exception):
    """The command line is refused; the message is one line and holds no header value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """Where the remote server is. `connect_host` is the address dialled (for
    http://localhost: 127.0.0.1, never a name /etc/hosts could point elsewhere);
    `host_header` is what the Host header says."""

    scheme: str
    host: str
    port: int
    path: str
    connect_host: str
    host_header: str

    @property
    def tls(self) -> bool:
        return self.scheme == "https"


@dataclass(frozen=True, slots=True, kw_only=True)
class Arguments:
    target: Target
    headers: tuple[tuple[str, str], ...]


def _is_loopback_literal(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    # ::ffff:127.0.0.1 is not taken: Python versions disagree on whether it is loopback.
    return address.is_loopback and not (
        isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None)


def parse_target(url: str) -> Target:
    """The URL, or ArgumentError: https to any host, http only to this machine's loopback
    (127.0.0.0/8, ::1, `localhost`), no credentials, no fragment."""
    if len(url.encode("utf-8", "surrogatepass")) > MAX_URL_BYTES:
        raise ArgumentError(f"the URL is longer than {MAX_URL_BYTES} bytes")
    if not url.isascii() or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in url):
        raise ArgumentError("the URL holds a space, a control or a non-ASCII character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ArgumentError(f"the URL does not parse ({error})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise ArgumentError("only https:// URLs are taken (or http:// to this machine's loopback)")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ArgumentError("the URL holds credentials: give them with --header instead")
    if parts.fragment or url.endswith("#"):
        raise ArgumentError("the URL holds a fragment (#…)")
    host = parts.hostname or ""
    literal = host.strip("[]") if parts.netloc.startswith("[") else host
    is_address = True
    try:
        ipaddress.ip_address(literal)
    except ValueError:
        is_address = False
    if not is_address and not _HOST_NAME.fullmatch(host):
        raise ArgumentError("the URL's host is not a host name or an IP address")
    if scheme == "http" and not (host == _LOOPBACK_NAME or _is_loopback_literal(literal)):
        # Before any connection: a token must never go over plain http off this machine.
        raise ArgumentError(f"plain http:// is refused to {host} (not this machine's loopback):"
                            " use https://")
    if port is None:
        port = 443 if scheme == "https" else 80
    if not 0 < port < 65536:
        raise ArgumentError("the URL's port is out of range")
    default_port = 443 if scheme == "https" else 80
    bracketed = f"[{literal}]" if ":" in literal else literal
    host_header = bracketed if port == default_port else f"{bracketed}:{port}"
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    # Plain http to `localhost` dials 127.0.0.1 itself; over TLS the name is resolved as
    # any other, since the certificate, checked against it, is what is trusted.
    connect_host = "127.0.0.1" if scheme == "http" and host == _LOOPBACK_NAME else literal
    return Target(scheme=scheme, host=literal, port=port, path=path,
                  connect_host=connect_host, host_header=host_header)


def tool_secret_names(environment: Mapping[str, str]) -> frozenset[str]:
    """The variables `${VAR}` may name: those TOOL_SECRETS_VARIABLE lists."""
    return frozenset(name for name in environment.get(TOOL_SECRETS_VARIABLE, "").split(",")
                     if name)


def parse_header(argument: str, position: int, environment: Mapping[str, str]) -> tuple[str, str]:
    """One `--header "Name: value"` (position counts from 1, for errors that must not
    repeat the argument), `${VAR}` filled from `environment` for a VAR among the tool's
    secrets only."""
    where = f"--header #{position}"
    if any(c in argument for c in "\r\n\0"):
        raise ArgumentError(f"{where}: a CR, LF or NUL is refused")
    name, colon, value = argument.partition(":")
    if not colon:
        raise ArgumentError(f'{where}: not "Name: value" (no colon)')
    name = name.strip()
    if not _HEADER_NAME.fullmatch(name):
        raise ArgumentError(f"{where}: a header's name is letters, digits, '-' and '_' only")
    if name.lower() in _RESERVED_NAMES or name.lower().startswith(_RESERVED_PREFIXES):
        raise ArgumentError(f"{where}: {name} is set by lnk-sandbox-mcp-remote itself")

    secrets = tool_secret_names(environment)

    def fill(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in secrets:
            raise ArgumentError(f"{where} ({name}): ${{{variable}}} is not one of the tool's "
                                f"secrets (lnk-sandbox tool add NAME --secret {variable}); "
                                "no other variable is filled")
        if variable not in environment:
            # Refused, not emptied: an empty token would only fail later, far away.
            raise ArgumentError(f"{where} ({name}): ${{{variable}}} is not in the environment")
        return environment[variable]

    value = _VARIABLE.sub(fill, value.strip(" \t"))
    if any(c in value for c in "\r\n\0"):
        raise ArgumentError(f"{where} ({name}): its value, filled, holds a CR, LF or NUL")
    if not _HEADER_VALUE.fullmatch(value):
        raise ArgumentError(f"{where} ({name}): its value holds a control or non-ASCII character")
    if len(value) > MAX_HEADER_VALUE_BYTES:
        raise ArgumentError(f"{where} ({name}): its value is longer than {MAX_HEADER_VALUE_BYTES}"
                            " bytes")
    return name, value


def parse_arguments(argv: list[str], environment: Mapping[str, str]) -> Arguments:
    """argv without the program's name: URL and `--header` pairs, in any order."""
    url: str | None = None
    raw_headers: list[str] = []
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--header":
            if index + 1 >= len(argv):
                raise ArgumentError("--header wants a value")
            raw_headers.append(argv[index + 1])
            index += 2
            continue
        if word.startswith("--header="):
            raw_headers.append(word.removeprefix("--header="))
        elif word.startswith("-"):
            # Its text is not repeated: a mistyped option could be a token.
            raise ArgumentError(f"argument #{index + 1}: an option not known")
        elif url is None:
            url = word
        else:
            raise ArgumentError("one URL only")
        index += 1
    if url is None:
        raise ArgumentError("no URL given")
    target = parse_target(url)
    if len(raw_headers) > MAX_HEADERS:
        raise ArgumentError(f"more than {MAX_HEADERS} --header")
    headers: list[tuple[str, str]] = []
    seen: set[str] = set()
    for position, raw in enumerate(raw_headers, start=1):
        name, value = parse_header(raw, position, environment)
        if name.lower() in seen:
            raise ArgumentError(f"--header #{position}: {name} is given twice")
        seen.add(name.lower())
        headers.append((name, value))
    return Arguments(target=target, headers=tuple(headers))


def _header_words(argv: list[str]) -> list[tuple[int, str, str]]:
    """(the index in argv of each `--header`'s word, what comes before its text in that
    word, its text), in order, as parse_arguments reads them."""
    found: list[tuple[int, str, str]] = []
    index = 0
    while index < len(argv):
        if argv[index] == "--header" and index + 1 < len(argv):
            found.append((index + 1, "", argv[index + 1]))
            index += 2
            continue
        if argv[index].startswith("--header="):
            found.append((index, "--header=", argv[index].removeprefix("--header=")))
        index += 1
    return found


def keep_literal_values_out(argv: list[str], variable_for: Callable[[int], str]
                            ) -> tuple[list[str], dict[str, str], list[str]]:
    """argv (one parse_arguments took) with each header whose value names no `${VAR}`
    written as `Name: ${V}`, V = variable_for(its position); the values so taken out, by
    V; and the names of those headers. A value that names a `${VAR}` is left as the person
    wrote it: they chose which part is the secret."""
    words = list(argv)
    moved: dict[str, str] = {}
    names: list[str] = []
    for position, (index, prefix, text) in enumerate(_header_words(argv), start=1):
        name, _colon, value = text.partition(":")
        value = value.strip(" \t")
        if not value or _VARIABLE.search(value):
            continue
        variable = variable_for(position)
        moved[variable] = value
        names.append(name.strip())
        words[index] = f"{prefix}{name.strip()}: ${{{variable}}}"
    return words, moved, names
