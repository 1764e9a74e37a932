"""One entry of `[network] hosts` or of `[tcp] endpoints`, checked and normalised: the one
rule of each read by the spec loader (lnk_wrap.spec, at load) and by a wire's additions
(lnk_common.additions: at `lnk-sandbox allow`, and again at every read of the file).

Sans IO. An entry is a name (labels of letters, digits, '-' and '_'), or `*.` and a
domain, with an optional `:port`; lower-cased, a trailing dot dropped, the port written
without leading zeros. `*` alone is the whole network: refused. What a name may not be
on this machine (an address of its own, a provider's API host) is the caller's to add:
this rule reads the text alone. HostEntryError is the only exception that leaves here.
"""

from __future__ import annotations

__all__ = ["MAX_ENDPOINT_NAME_CHARACTERS", "MAX_ENTRY_CHARACTERS", "HostEntryError",
           "is_host_entry", "normal_endpoint_entry", "normal_host_entry"]

# A DNS name is at most 253 characters; with `*.` and `:65535` an entry is at most 260.
# Longer is no host, and the regular expression is never run on it.
MAX_ENTRY_CHARACTERS = 260

# An endpoint's name (before its port): a DNS name's 253 characters and a trailing dot.
MAX_ENDPOINT_NAME_CHARACTERS = 254

# Compiled when an entry is read (`re` costs 6 ms of a start that names no host).
_HOST_ENTRY = (
    r"(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?"
    r"(:[0-9]{1,5})?"
)


class HostEntryError(Exception):
    """An entry that is no host: the reason, in one line (the caller adds where)."""


def is_host_entry(text: str) -> bool:
    """Whether lower-cased `text` has an entry's shape (the spec's [tcp] endpoints read
    their names by it too)."""
    import re

    return re.fullmatch(_HOST_ENTRY, text) is not None


def normal_host_entry(entry: str) -> str:
    """`entry` normalised (`name`, `*.domain`, either with `:port`), or HostEntryError."""
    text = entry.lower()
    if text in ("*", "*.") or text.startswith("*:"):
        raise HostEntryError("\"*\" is every host: the network itself, not a list; name "
                             "the hosts, or `*.domain` for the names under one")
    if len(text) > MAX_ENTRY_CHARACTERS or not is_host_entry(text):
        raise HostEntryError(f"{entry!r} is not a host name, `*.domain`, or either with :port")
    name, _, port = text.partition(":")
    if port and not 1 <= int(port) <= 65535:
        raise HostEntryError(f"port {port} out of range")
    name = name.rstrip(".")
    return f"{name}:{int(port)}" if port else name


def normal_endpoint_entry(entry: str) -> str:
    """An entry of `[tcp] endpoints` normalised (`name:port`, `*.domain:port`), or
    HostEntryError: a name (it gets DNS inside), never an address, always a port."""
    import ipaddress

    from lnk_common.endpoints import EndpointError, split_host_port

    text = entry.lower()
    if text in ("*", "*.") or text.startswith("*:"):
        raise HostEntryError("\"*\" is every host: the network itself, not a list; name "
                             "the hosts, or `*.domain:port`")
    try:
        host, port = split_host_port(text)
    except EndpointError as error:
        raise HostEntryError(str(error)) from None
    if port and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise HostEntryError(f"{entry!r}: the port must be 1 to 65535")
    if not port:
        raise HostEntryError(f"{entry!r}: an endpoint names its port, as \"db.example.com:5432\"")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        raise HostEntryError(f"{entry!r}: an endpoint is a name (it gets DNS); a machine of "
                             "the local network by address goes in [lan] hosts")
    if len(host) > MAX_ENDPOINT_NAME_CHARACTERS or not is_host_entry(host) \
            or host == "localhost":
        raise HostEntryError(f"{entry!r} is not a host name or `*.domain` with :port")
    return f"{host.rstrip('.')}:{int(port)}"
