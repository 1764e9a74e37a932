"""Sans IO: what a learning run tried on its wire and was refused, as `[network] hosts`
to list, and the names it looked up for `[tcp] endpoints`.

Job: `lnk-sandbox learn` runs the command once with its wire open and logged
(lnk_wrap.learn); this reads that run's lines of the wire's log (lnk_common.wirelog,
between the run's `started` and `exited` lines) and says what to add. It writes nothing:
the person adds the lines, so what a spec opens is still what they wrote.

Trust: the log is written by our proxy and launcher only (Link's settings are hidden in
every sandbox), but the names in it are what the program asked for, so each is checked
as the spec loader checks a host (lnk_wrap.spec's host entry) before it is offered, and
printed quoted as TOML quotes it. Default deny: only a refusal by name ("… is not in this
sandbox's hosts", "… is not a name this sandbox may reach") offers anything; every other
refusal (a metadata service, this machine, a pause, calls a minute) is said, with its
reason, and never offered, since no entry would open it, or one must not.

Never offered, with the reason: a model provider's API host (lnk_proxy.model_rules.
PROVIDER_HOSTS): listing it would open a tunnel around the model verb, its rules and the
key it adds outside, so the line says to use `[verbs] model` instead; a wildcard is never
made over a provider's host either. Names are grouped under `*.domain` when
WILDCARD_AFTER of them share one parent domain (not a public suffix, as far as a short
list tells: COMMON_SECOND_LEVELS), marked, since a wildcard opens more than was seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lnk_common.wirelog import parse_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["COMMON_SECOND_LEVELS", "WILDCARD_AFTER", "Offer", "Seen", "format_network",
           "group", "run_lines", "seen_on_wire"]

# Names under one parent domain before they are offered as `*.parent`: two is "several";
# one name is offered as itself (a wildcard for one name opens more for nothing).
WILDCARD_AFTER = 2
# Second-level labels under a two-letter country code that are a registry's, not a
# site's (co.uk, com.au, ac.jp …): `*.co.uk` would open every company in the UK. A short
# list, not the public suffix list: a name this misses is still marked as a wildcard.
COMMON_SECOND_LEVELS = frozenset({"ac", "co", "com", "edu", "go", "gov", "ne", "net",
                                  "or", "org"})
# What the proxy's name refusal and the DNS's say (lnk_proxy.server.check_name,
# lnk_dns.answer): the refusals an entry in the spec would lift.
_NOT_IN_HOSTS = " is not in this sandbox's hosts"
_NOT_A_NAME = " is not a name this sandbox may reach"
# Names that are this machine's, whatever a spec says: the proxy resolves them to
# loopback and refuses them; [localhost] ports is the way.
_THIS_MACHINE = ("localhost", "localhost.localdomain", "ip6-localhost")


def _provider_hosts() -> dict[str, str]:
    from lnk_proxy.model_rules import PROVIDER_HOSTS

    return {host: provider for provider, host in PROVIDER_HOSTS.items()}


@dataclass(frozen=True)
class Offer:
    """One entry to add to `hosts`: the entry, and the names tried that it covers (more
    than one: a wildcard)."""

    entry: str
    names: tuple[str, ...]

    @property
    def wildcard(self) -> bool:
        return self.entry.startswith("*.")


@dataclass
class Seen:
    """What one learning run's lines show. `hosts`: each refused name's entry (`name`
    for 80 and 443, else `name:port`); `looked_up`: names refused at the sandbox's DNS
    and never called through the proxy (for `[tcp] endpoints`, whose port a lookup does
    not show); `not_offered`: (target, why); `folded`: refusals the log counted, not
    wrote (their names are not known); `paused`: the pause's reason, if the wire paused."""

    hosts: list[str] = field(default_factory=list)
    looked_up: list[str] = field(default_factory=list)
    not_offered: list[tuple[str, str]] = field(default_factory=list)
    folded: int = 0
    paused: str = ""


def run_lines(lines: Iterable[str], run: str) -> list[dict[str, str]]:
    """The parsed lines of the run `run` (its id on the `started` and `exited` lines).
    Another run of the wire meanwhile would mix in its lines: a learning run's wire is
    its own unless the spec names one (lnk_wrap.learn)."""
    found: list[dict[str, str]] = []
    inside = False
    for line in lines:
        parsed = parse_line(line)
        if parsed is None:
            continue
        if parsed["event"] in ("started", "exited") and parsed.get("run") == run:
            if parsed["event"] == "exited":
                break
            inside = True
            continue
        if inside:
            found.append(parsed)
    return found


def _host_entry(name: str, port: str) -> str:
    return name if port in ("80", "443") else f"{name}:{port}"


def _why_never(name: str) -> str:
    """Why no hosts entry may name `name` (a provider's API host, this machine, an
    address never a host), or ""."""
    provider = _provider_hosts().get(name)
    if provider:
        return (f"the {provider} model provider's API: use [verbs] model = [\"{provider}\"] "
                "instead (a hosts entry would open a tunnel around the verb, its rules and "
                "the key it adds outside)")
    if name in _THIS_MACHINE or name.endswith(".localhost"):
        return "this machine: the proxy never reaches it; [localhost] ports relays a port in"
    import ipaddress

    try:
        address = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return ""
    from lnk_common.addresses import never_a_host

    return never_a_host(address) or ""


def _is_host_entry(entry: str) -> bool:
    from lnk_wrap.spec import is_host_entry

    return is_host_entry(entry)


def seen_on_wire(lines: list[dict[str, str]], *, hosts: tuple[str, ...] = (),
                 endpoints: tuple[str, ...] = (), ignore: tuple[str, ...] = ()) -> Seen:
    """What a run's parsed lines (run_lines) show, apart from what the spec lists
    already (`hosts`, `endpoints`); names in `ignore` (learn's own) are left out. A name
    looked up and never called through the proxy is one for `[tcp] endpoints`, even if
    `hosts` lists it (the program went round the proxy: an ssh to a forge)."""
    seen = Seen()
    called: set[str] = set()
    looked_up: list[str] = []
    for line in lines:
        event, target, reason = line["event"], line["target"], line.get("reason", "")
        if event == "paused":
            seen.paused = seen.paused or reason
            continue
        if event in ("allowed", "ended"):
            if line.get("kind") != "dns":
                called.add(target.rpartition(":")[0].lower())
            continue
        if event != "refused":
            continue
        if target == "*":
            more = line.get("more", "")
            seen.folded += int(more) if more.isdigit() else 0
            continue
        _refusal(seen, line, called, looked_up, ignore)
    by_endpoint = {entry.rpartition(":")[0] for entry in endpoints}
    seen.looked_up = [name for name in dict.fromkeys(looked_up)
                      if name not in called and name not in by_endpoint]
    seen.hosts = [entry for entry in seen.hosts if entry not in hosts]
    return seen


def _refusal(seen: Seen, line: dict[str, str], called: set[str], looked_up: list[str],
             ignore: tuple[str, ...]) -> None:
    """One refused line: an entry to offer, a name looked up, or a reason not to."""
    target, reason = line["target"], line.get("reason", "")
    # The log's reason may go on with advice after "; " (the `lnk-sandbox allow` command
    # that would let it through: lnk_proxy.added); the refusal's own words come first.
    reason = reason.partition("; ")[0]
    if line.get("kind") == "dns":
        name = target.lower().rstrip(".")
        if not reason.endswith(_NOT_A_NAME) or name in ignore or name.endswith(".arpa"):
            return  # learn's own name, a reverse lookup, or a pause's refusal (said once)
        why = _why_never(name)
        if why:
            _not_offered(seen, name, why)
        elif _is_host_entry(name):
            looked_up.append(name)
        return
    name, _, port = target.rpartition(":")
    name = name.lower().rstrip(".")
    called.add(name)
    if name in ignore:
        return
    if not reason.endswith(_NOT_IN_HOSTS):
        _not_offered(seen, target, reason or "refused")
        return
    why = _why_never(name)
    entry = _host_entry(name, port)
    if why:
        _not_offered(seen, target, why)
    elif not _is_host_entry(entry):
        _not_offered(seen, target, "not a host name the spec takes")
    elif entry not in seen.hosts:
        seen.hosts.append(entry)


def _not_offered(seen: Seen, target: str, why: str) -> None:
    if all(known != target for known, _ in seen.not_offered):
        seen.not_offered.append((target, why))


def _parent(name: str) -> str:
    """The domain `*.parent` would stand for, or "" where none may (a name of fewer
    than three labels, an address, a parent that is a registry's suffix)."""
    labels = name.split(".")
    if len(labels) < 3 or labels[-1].isdigit():
        return ""
    parent = labels[1:]
    if len(parent) == 2 and len(parent[1]) == 2 and parent[0] in COMMON_SECOND_LEVELS:
        return ""
    return ".".join(parent)


def group(entries: list[str]) -> list[Offer]:
    """The entries to offer, names under one parent domain (WILDCARD_AFTER or more, the
    same port) as one `*.parent` entry; never a wildcard over a provider's API host."""
    providers = _provider_hosts()
    by_parent: dict[tuple[str, str], list[str]] = {}
    for entry in entries:
        name, _, port = entry.partition(":")
        parent = _parent(name)
        if parent and not any(host.endswith("." + parent) for host in providers):
            by_parent.setdefault((parent, port), []).append(name)
    offers: list[Offer] = []
    grouped: set[tuple[str, str]] = set()
    for entry in entries:
        name, _, port = entry.partition(":")
        key = (_parent(name), port)
        names = by_parent.get(key, [])
        if len(names) < WILDCARD_AFTER:
            offers.append(Offer(entry, (name,)))
        elif key not in grouped:
            grouped.add(key)
            offers.append(Offer("*." + key[0] + (f":{port}" if port else ""), tuple(names)))
    return offers


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '",'


def format_network(listed: tuple[str, ...], offers: list[Offer], looked_up: list[str], *,
                   mode: str) -> str:
    """The `[network]` table with the hosts listed and those to add, each marked (a
    wildcard says what it covers; no table when neither), and the names looked up for
    `[tcp] endpoints` as comments (no port is known). `mode`: the spec's network mode."""
    lines: list[str] = []
    if offers or listed:
        width = max(len(_quoted(text)) for text in (*listed, *(o.entry for o in offers))) + 2
        lines += ["[network]", 'mode = "proxy"' + ("" if mode == "proxy" else
                                                    f"   # was {mode!r}: hosts need the proxy"),
                  "hosts = ["]
        lines += [f"    {_quoted(host):{width}} # listed" for host in listed]
        for offer in offers:
            note = "new" if not offer.wildcard else (
                f"new; a wildcard: opens every name under {offer.entry[2:].partition(':')[0]}, "
                f"more than the run tried ({', '.join(offer.names)})")
            lines.append(f"    {_quoted(offer.entry):{width}} # {note}")
        lines.append("]")
    if not offers:
        lines.append("# [network]: the run was refused no host an entry would open")
    if looked_up:
        lines += ["# [tcp] endpoints: names the run looked up and was refused, and never "
                  "called through the proxy;", "# an endpoint names its port, which a "
                  "lookup does not show: add each as \"NAME:PORT\"", *(
                      f"#   {name}" for name in looked_up)]
    return "\n".join(lines)
