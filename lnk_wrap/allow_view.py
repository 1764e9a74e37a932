"""lnk-sandbox allow / disallow / allowed: the person adds hosts to a running wire.

`allow WIRE HOST` adds HOST to the wire's additions (lnk_common.additions), which its
proxy takes at the next call (lnk_proxy.added) with every check a listed host gets;
`disallow WIRE HOST` takes one away (an open call to it is closed within a second),
`disallow WIRE --clear` all; `allowed WIRE` shows them. They are kept per wire name
across its starts. With `--tcp`, HOST is an endpoint of `[tcp] endpoints`, taken at
each start (lnk_wrap.launch.with_additions) and by a running sandbox at the name's next
lookup (lnk_proxy.added_endpoints: its socket inside made then; one that started
without DNS of its own gets it first, within the watch's quarter second:
lnk_proxy.dns_server.DnsOnAddition);
`disallow --tcp` closes its open connections within a second. Each change is one
`changed` line on the wire's log: what, by whom (this user, outside), when.

Order, and nothing is written until all hold: the wire's name (a name, and a wire that
has run here: its folder in Link's settings) → the host by the spec's own rule for
`[network] hosts` or `[tcp] endpoints` (lnk_common.hostentry), never `*`, never an
address that is no host (lnk_common.addresses) nor one of this machine's or its
networks' (lnk_proxy.machine), never a provider's API host (that is `[verbs] model`'s)
→ the change, under the wire's lock → its line on the log. AllowError is the only exception
that leaves here: one line, and nothing changed.
"""

from __future__ import annotations

import os
import sys

from lnk_common import additions
from lnk_common.additions import AdditionsError, Entry

__all__ = ["AllowError", "added_endpoints", "allow", "allowed", "checked_host", "disallow",
           "start_note"]


class AllowError(Exception):
    """What `allow`, `disallow` or `allowed` cannot do, in one line; nothing changed."""


def _wire_folder(settings: str, wire: str) -> str:
    """The wire's folder in Link's settings: AllowError for a name that is none, or a
    wire that never ran here (a mistyped name must not add to a wire that is not)."""
    from lnk_common.policy import is_name

    if not is_name(wire):
        raise AllowError(f"{wire!r} is not a wire's name (letters, digits, '.', '_' and '-'); "
                         "nothing changed")
    folder = os.path.join(settings, "sandbox", "wires", wire)
    if not os.path.isdir(folder):
        raise AllowError(f"no wire named {wire!r} has run here (`lnk-sandbox log` lists "
                         "the wires); nothing changed")
    return folder


def _provider_of(entry: str) -> tuple[str, str]:
    """The provider whose API host `entry` names or covers (`*.domain`), and that host;
    ("", "") for none."""
    from lnk_proxy.decide import parse_hosts
    from lnk_proxy.model_rules import PROVIDER_HOSTS

    rule = parse_hosts((entry,))[0]
    return next(((provider, host) for provider, host in PROVIDER_HOSTS.items()
                 if rule.matches_name(host)), ("", ""))


def checked_host(text: str, *, tcp: bool = False) -> str:
    """HOST as `allow` takes it (normalised; `tcp`: an endpoint), or AllowError saying
    why not."""
    entry = _normal(text, tcp=tcp)
    name = entry.rpartition(":")[0] if ":" in entry else entry
    if not tcp and name.replace(".", "").isdigit():
        import ipaddress

        from lnk_proxy.decide import address_refusal
        from lnk_proxy.machine import Machine

        why = address_refusal(ipaddress.ip_address(name), Machine.gather())
        if why:
            raise AllowError(f"{text!r}: {why}; nothing changed")
    provider, api = _provider_of(name if tcp else entry)
    if provider:
        raise AllowError(f"{text!r} {'covers' if entry.startswith('*.') else 'is'} "
                         f"{provider}'s API host ({api}): a sandbox reaches it through the "
                         f"model verb, with its key kept outside: name \"{provider}\" in the "
                         "spec's [verbs] model instead; nothing changed")
    return entry


def _who() -> tuple[str, int]:
    import pwd

    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name, uid
    except KeyError:
        return str(uid), uid


def _log_change(settings: str, wire: str, change: str, target: str) -> None:
    from lnk_common.wirelog import WireLog

    name, uid = _who()
    log = WireLog(settings, wire)
    try:
        log.write("changed", target, f"change={change} by={name} uid={uid}")
    finally:
        log.close()


def _now() -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _listed_in_hosts(endpoint: str) -> str:
    """The endpoint's name when this machine's /etc/hosts lists it (a sandbox without DNS
    of its own keeps that file, which answers before the DNS its proxy serves), else ""
    (a `*.domain` one too: its names are not known)."""
    from lnk_common.endpoints import split_host_port
    from lnk_proxy.resolver import HOSTS_FILE, MAX_HOSTS_FILE_BYTES, hosts_file_addresses

    name = split_host_port(endpoint)[0]
    try:
        with open(HOSTS_FILE, encoding="utf-8", errors="replace") as handle:
            text = handle.read(MAX_HOSTS_FILE_BYTES)
    except OSError:
        return ""
    return name if not name.startswith("*.") and hosts_file_addresses(text, name) else ""


def allow(settings: str, wire: str, host: str, *, tcp: bool = False) -> int:
    """Add HOST to the wire's additions (`tcp`: to its endpoints)."""
    _wire_folder(settings, wire)
    entry = checked_host(host, tcp=tcp)
    try:
        additions.read_entries(settings, wire)
    except AdditionsError as error:  # never written over: it may hold the person's own
        raise AllowError(f"{error}; nothing changed (`lnk-sandbox disallow {wire} --clear` "
                         "replaces it)") from None
    name, uid = _who()
    before: list[tuple[Entry, ...]] = []

    def add(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        before.append(entries)
        if any(found.host == entry and found.tcp == tcp for found in entries):
            return entries
        return (*entries, Entry(entry, _now(), f"{name} (uid {uid})", tcp=tcp))

    try:
        after = additions.update_additions(settings, wire, add)
    except (AdditionsError, OSError) as error:
        raise AllowError(f"the wire {wire}'s additions: {error}; nothing changed") from None
    if after == before[0]:
        print(f"{entry} is among the wire {wire}'s additions already; nothing changed")
        return 0
    _log_change(settings, wire, "allow-tcp" if tcp else "allow", entry)
    if tcp:
        print(f"the wire {wire} gets the endpoint {entry} from its next call (a running "
              "sandbox has its socket made at the name's next lookup; one that started "
              "without DNS of its own, whose spec names no [tcp] endpoint nor [lan] host by "
              "name, is given its DNS first, within a second; "
              f"`lnk-sandbox disallow --tcp {wire} {entry}` takes it away)")
        listed = _listed_in_hosts(entry)
        if listed:
            print(f"this machine's /etc/hosts names {listed}: a running sandbox that started "
                  "without DNS of its own reads that file before its DNS (nsswitch's "
                  "`files`), and gets the name inside from its next start")
        return 0
    print(f"the wire {wire} may reach {entry} from its next call "
          f"(`lnk-sandbox disallow {wire} {entry}` takes it away)")
    return 0


def disallow(settings: str, wire: str, host: str | None, *, tcp: bool = False) -> int:
    """Take HOST away from the wire's additions (`tcp`: its endpoints; None: all of
    them, `--clear`)."""
    _wire_folder(settings, wire)
    entry = None if host is None else _normal(host, tcp=tcp)
    taken: list[str] = []

    def take(entries: tuple[Entry, ...]) -> tuple[Entry, ...]:
        kept = tuple(found for found in entries
                     if entry is not None and (found.host, found.tcp) != (entry, tcp))
        taken.extend(found.host for found in entries if found not in kept)
        if entry is not None and not taken:
            named = ", ".join(found.host for found in entries if found.tcp == tcp) or "none"
            raise AdditionsError(f"{entry} is not among its additions (they are: {named}); "
                                 "a host of the spec itself is taken away in the spec")
        return kept

    try:
        additions.update_additions(settings, wire, take, replace_broken=entry is None)
    except (AdditionsError, OSError) as error:
        raise AllowError(f"the wire {wire}: {error}; nothing changed") from None
    if entry is None:
        _log_change(settings, wire, "clear", "-")
        print(f"the wire {wire} has no additions now ({len(taken)} taken away)")
        return 0
    _log_change(settings, wire, "disallow-tcp" if tcp else "disallow", entry)
    if tcp:
        print(f"the wire {wire} loses the endpoint {entry}: refused from its next call, "
              "and its open connections closed within a second")
        return 0
    print(f"the wire {wire} may no longer reach {entry}: refused from its next call, and "
          "its open calls to it closed within a second")
    return 0


def _normal(host: str, *, tcp: bool) -> str:
    try:
        return (additions.check_endpoint if tcp else additions.check_host)(host)
    except AdditionsError as error:  # said once, with the words as given
        said = str(error)
        raise AllowError(f"{said if said.startswith(repr(host)) else f'{host!r}: {said}'}; "
                         "nothing changed") from None


def allowed(settings: str, wire: str, *, as_json: bool) -> int:
    _wire_folder(settings, wire)
    try:
        entries = additions.read_entries(settings, wire)
    except AdditionsError as error:
        raise AllowError(str(error)) from None
    if as_json:
        import orjson

        sys.stdout.buffer.write(orjson.dumps(
            {"wire": wire, "hosts": [entry.as_json() for entry in entries if not entry.tcp],
             "endpoints": [entry.as_json() for entry in entries if entry.tcp]},
            option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    for entry in entries:
        kind = "endpoint, " if entry.tcp else ""
        print(f"{entry.host}\t{kind}added {entry.added} by {entry.by}")
    if not entries:  # on stderr: stdout stays a line an addition
        print(f"lnk-sandbox: the wire {wire} has no additions (its spec's hosts only)",
              file=sys.stderr)
    return 0


def _shown(names: list[str]) -> str:
    """The first few of `names`, and how many more (a start's line stays one line)."""
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def start_note(settings: str, wire: str) -> str:
    """What a start (lnk_wrap.launch) and `wrap` say when the wire has additions, or ""."""
    try:
        entries = additions.read_entries(settings, wire)
    except AdditionsError as error:
        return f"the wire {wire}'s additions cannot be taken ({error}); none is taken"
    if not entries:
        return ""
    hosts = [entry.host for entry in entries if not entry.tcp]
    ends = [entry.host for entry in entries if entry.tcp]
    parts = ([_shown(hosts)] if hosts else []) + ([f"the endpoints {_shown(ends)}"]
                                                  if ends else [])
    return (f"the wire {wire} may also reach what `lnk-sandbox allow` added: "
            f"{'; '.join(parts)} (`lnk-sandbox allowed {wire}` shows them, `disallow` "
            "takes one away)")


def added_endpoints(settings: str, wire: str) -> tuple[str, ...]:
    """The wire's endpoint additions (none from a file that cannot be taken: `start_note`
    says why)."""
    try:
        return tuple(entry.host for entry in additions.read_entries(settings, wire)
                     if entry.tcp)
    except AdditionsError:
        return ()
