"""The wire's additions as its proxy holds them: `lnk-sandbox allow`'s hosts and
endpoints (lnk_common.additions), taken at the next call, and the open calls they let
through. (An added endpoint's socket inside a running sandbox: lnk_proxy.added_endpoints.)

Order: a call's name is held to the spec's rules first (lnk_proxy.server.check_name);
only a name none of them lets by is held to the additions, read then (a stat while the
file is unchanged), so an `allow` is taken at the very next call and a `disallow` too.
A host let by here gets every check that follows for a listed host (the lookup, every
address, the ClientHello on 443). A call it let through is held here until it ends;
the process's watch (lnk_common.serving) asks `taken_away` four times a second, and
the calls whose host is no longer added are cancelled, as the kill switch's are.

A name let by by neither is refused as before, and the log's line says the command
that would let it through (`lnk-sandbox allow WIRE HOST`), or, for a provider's API
host, that `[verbs] model` is the way. A file that cannot be taken lets nothing more
through, and the refusal's line says why.
"""

from __future__ import annotations

import asyncio
import threading

from lnk_common.additions import AdditionsError, added_hosts, check_host
from lnk_common.wire import Refused
from lnk_proxy.decide import HostRule, MachineFacts, address_refusal, matching_rule, parse_hosts
from lnk_proxy.target import Target

__all__ = ["AddedHosts", "allow_advice"]


def allow_advice(wire: str, target: Target, machine: MachineFacts) -> str:
    """What lets `target` through: the exact `allow` command, the model verb for a
    provider's API host, or "" when no addition could (an address that is never a host
    or is this machine's, an IPv6 literal, an address on 443, whose ClientHello names
    no host; no wire)."""
    from lnk_proxy.model_rules import PROVIDER_HOSTS

    if not wire or (target.address is not None and (
            target.port == 443 or address_refusal(target.address, machine))):
        return ""
    host = str(target.address) if target.address is not None else target.host
    if any(host == name for name in PROVIDER_HOSTS.values()):
        return ("a provider's API is reached through the model verb: name the provider "
                "in [verbs] model")
    entry = host if target.port in (80, 443) else f"{host}:{target.port}"
    try:
        check_host(entry)
    except AdditionsError:
        return ""
    return f"`lnk-sandbox allow {wire} {entry}` lets it through"


class AddedHosts:
    """The additions of one wire (`settings`, `wire`; none without them) and the open
    calls they let through, by their task (from the loop) for the watch (its thread)."""

    def __init__(self, settings: str, wire: str, machine: MachineFacts) -> None:
        self.settings = settings
        self.wire = wire
        self.machine = machine  # an address of this machine's gets no advice
        # The hosts and endpoints last read and their rules (one tuple, replaced whole).
        self.kept: tuple[tuple[str, ...], tuple[HostRule, ...], tuple[HostRule, ...]] = (
            (), (), ())
        self.held: dict[asyncio.Task[None], tuple[str, int]] = {}
        self.lock = threading.Lock()

    def rules(self) -> tuple[tuple[HostRule, ...], str]:
        """The additions' rules now (hosts and endpoints: a call through the proxy's port
        to an added endpoint goes as to one of the spec's), and why the file could not
        be taken ("" if it was)."""
        rules, _, problem = self.read()
        return rules, problem

    def endpoint_rules(self) -> tuple[HostRule, ...]:
        """The added endpoints' rules now (none when the file cannot be taken)."""
        return self.read()[1]

    def read(self) -> tuple[tuple[HostRule, ...], tuple[HostRule, ...], str]:
        """Every addition's rule, the endpoints' alone, and the file's problem."""
        if not (self.settings and self.wire):
            return (), (), ""
        added = added_hosts(self.settings, self.wire)
        entries, rules, endpoint_rules = self.kept
        if (*added.hosts, "", *added.endpoints) != entries:
            endpoint_rules = parse_hosts(added.endpoints)
            rules = (*parse_hosts(added.hosts), *endpoint_rules)
            self.kept = ((*added.hosts, "", *added.endpoints), rules, endpoint_rules)
        return rules, endpoint_rules, added.problem

    def admit(self, target: Target, refusal: Refused) -> HostRule:
        """The addition that lets `target` by (the call then held until it ends), or
        `refusal` raised, its logged line with the advice of `allow_advice`."""
        rules, problem = self.rules()
        rule = matching_rule(rules, target.host, target.port)
        if rule is not None:
            self._hold(target)
            return rule
        advice = allow_advice(self.wire, target, self.machine)
        refusal.logged = "; ".join(part for part in (refusal.logged, problem, advice) if part)
        raise refusal

    def _hold(self, target: Target) -> None:
        task = asyncio.current_task()
        if task is None:
            return
        with self.lock:
            known = task in self.held
            self.held[task] = (target.host, target.port)
        if not known:
            task.add_done_callback(self._let_go)

    def _let_go(self, task: asyncio.Task[None]) -> None:
        with self.lock:
            self.held.pop(task, None)

    def taken_away(self) -> list[asyncio.Task[None]]:
        """The open calls whose host is no longer among the additions (from any thread)."""
        with self.lock:
            held = list(self.held.items())
        if not held:
            return []
        rules, _ = self.rules()
        return [task for task, (host, port) in held if matching_rule(rules, host, port) is None]
