"""A wire's additions: hosts the person let a running wire reach, beside its spec's.

    sandbox/wires/<wire>/allowed

Written only by `lnk-sandbox allow` / `disallow` (lnk_wrap.allow_view), outside, in
Link's settings, which no sandbox can read or write; read by the wire's proxy when a
call's name is in none of its spec's rules, and four times a second by its watch while
a call they let through is open (lnk_proxy.added). Kept across the wire's starts until
`disallow` takes a host away or `disallow --clear` all.

The file is JSON, whole, replaced atomically (a new file renamed over, under the
folder's lock so that two commands at once lose neither's change):

    {"version": 1, "hosts": [{"host": "docs.example.com", "added": "2026-12-04T23:40:00Z",
                              "by": "alice (uid 1000)"}],
     "endpoints": [{"host": "db.example.com:5432", "added": "…", "by": "…"}]}

"endpoints" (`allow --tcp`: additions to `[tcp] endpoints`) are taken at each start
(the launcher adds them to the plan, lnk_wrap.launch) and, by a running sandbox, at the
next call: the proxy has a socket made inside for the name when it is looked up
(lnk_proxy.added_endpoints; a sandbox that started without DNS of its own is given it
first, lnk_proxy.dns_server.DnsOnAddition), and takes it away as it takes a host.

Every host is read by the spec's own rule for `[network] hosts` and every endpoint by
its rule for `[tcp] endpoints` (lnk_common.hostentry); a host may not be an address that
is never a host (lnk_common.addresses), nor either a name of this machine.
`parse_additions` (sans IO) either returns the entries or raises AdditionsError; a
reader that cannot read or parse the file takes no additions at all (fails closed) and
says why (`Added.problem`).
"""

from __future__ import annotations

import contextlib
import os
import time

from lnk_common.hostentry import HostEntryError, normal_endpoint_entry, normal_host_entry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FORMAT_VERSION", "MAX_ADDITIONS", "MAX_ADDITIONS_BYTES", "MAX_FIELD_CHARACTERS",
           "SETTLE_NS", "Added", "AdditionsError", "Entry", "added_hosts", "additions_path",
           "check_endpoint", "check_host", "encode_additions", "parse_additions", "read_entries",
           "update_additions"]

# The file's format; a reader refuses any other (a newer writer's file is not guessed at).
FORMAT_VERSION = 1
# As many additions as a spec may list hosts (lnk_wrap.spec.MAX_PATHS_PER_KEY): each is
# a rule every refused call of the wire is held to.
MAX_ADDITIONS = 256
# 256 entries of a 260-character host and their two short fields fit in well under
# this; a larger file is no file of ours, and is not read further.
MAX_ADDITIONS_BYTES = 128 * 1024
# `added` and `by` are a time and a user's name with a uid: anything longer is no field
# of ours.
MAX_FIELD_CHARACTERS = 128
# A file changed less than this before it was read is read again at the next call (a
# change within the clock's tick, at the same size, on an inode number used again,
# would leave the stat as it was: git's "racy" rule, as lnk_common.wirestate keeps a
# pause).
SETTLE_NS = 2_000_000_000


class AdditionsError(Exception):
    """An additions file, or a host given to `allow`, that cannot be taken: one line."""


class Entry:
    """One addition: the host (normalised), when it was added and by whom; `tcp`: an
    endpoint (`allow --tcp`, in the file's "endpoints"), not a host of [network] hosts."""

    __slots__ = ("added", "by", "host", "tcp")

    def __init__(self, host: str, added: str, by: str, *, tcp: bool = False) -> None:
        self.host = host
        self.added = added
        self.by = by
        self.tcp = tcp

    def as_json(self) -> dict[str, str]:
        return {"host": self.host, "added": self.added, "by": self.by}


def additions_path(settings: str, wire: str) -> str:
    return os.path.join(settings, "sandbox", "wires", wire, "allowed")


def check_host(text: str) -> str:
    """A host as `allow` takes it: the spec's rule for `[network] hosts`, and never an
    address that is no host on any machine (this machine's loopback, link-local, a
    metadata service, such an address inside IPv6). The normalised entry, or
    AdditionsError."""
    try:
        entry = normal_host_entry(text)
    except HostEntryError as error:
        raise AdditionsError(str(error)) from None
    name = entry.rpartition(":")[0] if ":" in entry else entry
    if name == "localhost" or name.endswith(".localhost"):
        raise AdditionsError(f"{name} is this machine (loopback)")
    if name.replace(".", "").isdigit():
        import ipaddress

        from lnk_common.addresses import never_a_host

        try:
            why = never_a_host(ipaddress.ip_address(name))
        except ValueError:
            raise AdditionsError(f"{name!r} is neither a host name nor an address") from None
        if why:
            raise AdditionsError(why)
    return entry


def check_endpoint(text: str) -> str:
    """An endpoint as `allow --tcp` takes it: the spec's rule for `[tcp] endpoints`
    (a name and a port, never an address), and never a name of this machine. The
    normalised entry, or AdditionsError."""
    try:
        entry = normal_endpoint_entry(text)
    except HostEntryError as error:
        raise AdditionsError(str(error)) from None
    name = entry.rpartition(":")[0]
    if name.endswith(".localhost"):
        raise AdditionsError(f"{name} is this machine (loopback)")
    return entry


def _field(item: dict[str, object], key: str) -> str:
    value = item.get(key, "")
    if not isinstance(value, str) or len(value) > MAX_FIELD_CHARACTERS:
        raise AdditionsError(f"an entry's {key!r} is not a short string")
    return value


def parse_additions(data: bytes) -> tuple[Entry, ...]:
    """The file's entries (each host checked by `check_host`, named once), or
    AdditionsError saying what is wrong with it."""
    import orjson

    if len(data) > MAX_ADDITIONS_BYTES:
        raise AdditionsError(f"larger than {MAX_ADDITIONS_BYTES} bytes")
    try:
        document = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise AdditionsError("not JSON") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise AdditionsError(f"not an object with \"version\": {FORMAT_VERSION}")
    hosts, endpoints = document.get("hosts"), document.get("endpoints", [])
    if not isinstance(hosts, list) or not isinstance(endpoints, list):
        raise AdditionsError("\"hosts\" or \"endpoints\" is not a list")
    if len(hosts) + len(endpoints) > MAX_ADDITIONS:
        raise AdditionsError(f"more than {MAX_ADDITIONS} hosts and endpoints")
    entries: dict[tuple[bool, str], Entry] = {}
    for tcp, items in ((False, hosts), (True, endpoints)):
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("host"), str):
                raise AdditionsError("an entry is not an object with a \"host\"")
            host = (check_endpoint if tcp else check_host)(item["host"])
            entries.setdefault((tcp, host), Entry(host, _field(item, "added"),
                                                  _field(item, "by"), tcp=tcp))
    return tuple(entries.values())


def encode_additions(entries: tuple[Entry, ...]) -> bytes:
    import orjson

    return orjson.dumps(
        {"version": FORMAT_VERSION,
         "hosts": [entry.as_json() for entry in entries if not entry.tcp],
         "endpoints": [entry.as_json() for entry in entries if entry.tcp]},
        option=orjson.OPT_INDENT_2) + b"\n"


class Added:
    """What a reader takes from the file: the hosts and the endpoints (empty when there
    is none, or when it cannot be taken), and why it could not be (`problem`, "" when
    it could)."""

    __slots__ = ("endpoints", "hosts", "problem")

    def __init__(self, hosts: tuple[str, ...], problem: str = "", *,
                 endpoints: tuple[str, ...] = ()) -> None:
        self.hosts = hosts
        self.endpoints = endpoints
        self.problem = problem


_NONE = Added(())
# The file as last read, by path: its stat identity and what it gave (a reader asks at
# every call its spec refused, and its watch four times a second; a stat, not a read,
# while the file is unchanged and had settled when read).
_KEPT: dict[str, tuple[tuple[int, ...], Added]] = {}
# Paths kept at most (a proxy reads its own wire's; a test many).
_MAX_KEPT = 64
# A file read before it had settled, by path: its bytes and what they gave. The next
# look reads it again (its stat cannot tell a change then) but parses it again only when
# its bytes changed: a look in those SETTLE_NS costs a read (some 20 µs), not a parse
# (some 1 ms for MAX_ADDITIONS entries), which a sandbox's DNS queries, which look at
# every query, could ask for as fast as it sends them. At most _MAX_KEPT paths, each at
# most MAX_ADDITIONS_BYTES and one.
_UNSETTLED: dict[str, tuple[bytes, Added]] = {}


def _identity(status: os.stat_result) -> tuple[int, ...]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
            status.st_ctime_ns)


def _read_whole(path: str) -> tuple[bytes, os.stat_result]:
    """The file's bytes (at most MAX_ADDITIONS_BYTES and one more: enough to tell it is
    too large) and its stat. Never through a link (O_NOFOLLOW: ELOOP), never waiting on
    a FIFO (O_NONBLOCK, then AdditionsError for anything but a regular file); OSError
    as the open's (FileNotFoundError: no file)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise AdditionsError("not a regular file")
        from lnk_common.filewrite import read_whole

        return read_whole(fd, MAX_ADDITIONS_BYTES), status
    finally:
        os.close(fd)


def added_hosts(settings: str, wire: str) -> Added:
    """The wire's additions now. No file: none. A file that cannot be read or parsed:
    none, and the problem said (a hand-made or broken file lets nothing more through)."""
    path = additions_path(settings, wire)
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return _NONE
    except OSError as error:
        return Added((), f"the wire's additions cannot be looked at ({error.strerror})")
    kept = _KEPT.get(path)
    if kept is not None and kept[0] == _identity(status):
        return kept[1]
    try:
        data, read_status = _read_whole(path)
    except FileNotFoundError:
        return _NONE
    except OSError as error:
        return Added((), f"the wire's additions cannot be read ({error.strerror})")
    except AdditionsError as error:
        return Added((), f"the wire's additions cannot be read ({error})")
    unsettled = _UNSETTLED.get(path)
    found = unsettled[1] if unsettled is not None and unsettled[0] == data else _taken(data)
    if time.time_ns() - max(read_status.st_mtime_ns, read_status.st_ctime_ns) > SETTLE_NS:
        if len(_KEPT) >= _MAX_KEPT:
            _KEPT.clear()
        _KEPT[path] = (_identity(read_status), found)
        _UNSETTLED.pop(path, None)
    else:
        _KEPT.pop(path, None)
        if len(_UNSETTLED) >= _MAX_KEPT:
            _UNSETTLED.clear()
        _UNSETTLED[path] = (data, found)
    return found


def _taken(data: bytes) -> Added:
    """What a reader takes from the file's bytes: its hosts and endpoints, or none and
    why."""
    try:
        entries = parse_additions(data)
    except AdditionsError as error:
        return Added((), f"the wire's additions cannot be taken: {error}")
    return Added(tuple(entry.host for entry in entries if not entry.tcp),
                 endpoints=tuple(entry.host for entry in entries if entry.tcp))


def read_entries(settings: str, wire: str) -> tuple[Entry, ...]:
    """The wire's additions whole, for the person's commands: AdditionsError when the
    file cannot be read or taken."""
    path = additions_path(settings, wire)
    try:
        data, _ = _read_whole(path)
        return parse_additions(data)
    except FileNotFoundError:
        return ()
    except OSError as error:
        raise AdditionsError(f"{path}: {error.strerror}") from None
    except AdditionsError as error:
        raise AdditionsError(f"{path}: {error}") from None


def update_additions(settings: str, wire: str,
                     change: Callable[[tuple[Entry, ...]], tuple[Entry, ...]], *,
                     replace_broken: bool = False) -> tuple[Entry, ...]:
    """Read the wire's additions, give them to `change` (a callable: entries in, entries
    out, or AdditionsError: then nothing is written) and write what it returns, all
    under the wire's lock; the entries written. A file that cannot be read or taken is
    AdditionsError, unless `replace_broken` (`disallow --clear`, which replaces it
    whole): then it reads as none."""
    import fcntl

    from lnk_common.filewrite import write_synced

    path = additions_path(settings, wire)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    lock = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            found = read_entries(settings, wire)
        except AdditionsError:
            if not replace_broken:
                raise
            found = ()
        entries = change(found)
        if len(entries) > MAX_ADDITIONS:
            raise AdditionsError(f"the wire has {MAX_ADDITIONS} additions already, the most "
                                 "it keeps: take one away first")
        temporary = f"{path}.{os.getpid()}.tmp"
        try:
            write_synced(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC
                                 | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600),
                         encode_additions(entries), 0o600)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
        return entries
    finally:
        os.close(lock)
