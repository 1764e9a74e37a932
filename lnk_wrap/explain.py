"""lnk-sandbox explain: what a spec opens, in plain words, grouped.

Job: say before a run what a policy opens (files, programs, every way out by verb, the
wire's controls) and what every sandbox closes whatever the spec says. The same words
are what `guest add` shows and asks (lnk_wrap.guests_view) and what a spec's first run
with `write_dot_files` shows (lnk_wrap.launch.notice_first_run): one function, `opens`.

The words for each field of the policy are one table, FIELD_WORDS, keyed by the field's
name in lnk_common.policy.FIELDS: a row says which group its lines go in and renders
them from the policy and the facts. A field that opens nothing (where the settings are
named from, the spec's path) has a row too, with the reason it says nothing: a test
holds the table's keys equal to FIELDS, so a field added without words fails.
EVERY_SANDBOX holds the lines that are no field's: what every sandbox reads or closes.

Sans IO but for `gather` (the secrets' rules and the tools' definitions, read from
Link's settings, which the rules' hosts and the tools' asking come from) and `main`.
Trust: the spec's words (paths, hosts) are the spec writer's; the text printed is made
plain ASCII (lnk_ask.text.plain) so a path cannot rewrite the person's terminal.
"""

from __future__ import annotations

import json
import sys

from lnk_common.policy import FIELDS, Policy
from lnk_wrap.dotfiles import TOP_NAMES
from lnk_wrap.system import SYSTEM_FOLDERS

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    Render = Callable[[Policy, "Facts"], list["Said"]]

__all__ = ["EVERY_SANDBOX", "FIELD_WORDS", "GROUPS", "Facts", "Said", "Words", "as_json",
           "explain", "gather", "main", "opens", "plain_line", "text"]

# The groups, in the order shown, and their titles.
GROUPS: dict[str, str] = {
    "files": "files",
    "programs": "programs",
    "ways out": "ways out (each call on the wire's log)",
    "controls": "the wire's controls",
    "closed": "closed, whatever the spec says",
}
# A line of explain's text is cut past this many characters (a spec's list of paths or
# hosts may be long; the cut is said, with a digest of the whole, by lnk_ask.text.plain).
MAX_LINE_CHARS = 16 * 1024


class Said:
    """One line of what a policy opens: its group, the field it comes from (None for a
    line of every sandbox), the words, and the values it names (for --json)."""

    __slots__ = ("field", "group", "text", "values")

    def __init__(self, group: str, text: str, values: tuple[object, ...] = (), *,
                 field: str | None = None) -> None:
        if group not in GROUPS:
            raise ValueError(f"no group {group!r}")
        self.group = group
        self.text = text
        self.values = values
        self.field = field


class Facts:
    """What explain needs besides the policy, read outside (`gather`): each secret's
    rule's host ("" when its rule cannot be read, with why), each tool's asking, and the
    guest's own folder when the policy is a guest's sessions' ("" for any other)."""

    __slots__ = ("added", "guest_home", "secret_hosts", "tool_asks")

    def __init__(self, *, secret_hosts: dict[str, str] | None = None,
                 tool_asks: dict[str, str] | None = None, guest_home: str = "",
                 added: tuple[str, ...] = ()) -> None:
        self.secret_hosts = secret_hosts or {}
        self.tool_asks = tool_asks or {}
        self.guest_home = guest_home
        # What the person added to the wire (`lnk-sandbox allow`), apart from the spec:
        # hosts, endpoints as "tcp:NAME:PORT", or the one line saying why none is taken.
        self.added = added


class Words:
    """A field's words: its group and how its lines are made, or (group "") why it says
    nothing."""

    __slots__ = ("group", "render", "silent")

    def __init__(self, group: str, render: Render | None = None, silent: str = "") -> None:
        if (render is None) == (not silent):
            raise ValueError("a field's words render its lines or say why there are none")
        self.group = group
        self.render = render
        self.silent = silent


def _listing(items: tuple[object, ...]) -> str:
    return ", ".join(str(item) for item in items) if items else "nothing"


def _line(group: str, field: str, label: str, items: tuple[object, ...]) -> list[Said]:
    """`label: a, b, c` when there are items; nothing when there are none."""
    return [Said(group, f"{label}: {_listing(items)}", items, field=field)] if items else []


def _silent(why: str) -> Words:
    return Words("", silent=why)


# -- the fields' words ------------------------------------------------------------------

_HELD_NAMES = ", ".join(name for name, _kind, _placeholder, _why in TOP_NAMES)


def _read(policy: Policy, facts: Facts) -> list[Said]:
    label = "reads" if policy.commands else "reads (and runs programs from)"
    return _line("files", "read", label, policy.read)


def _write(policy: Policy, facts: Facts) -> list[Said]:
    written = tuple(path for path in policy.write if path != facts.guest_home)
    return _line("files", "write", "reads and writes", written)


def _write_dot_files(policy: Policy, facts: Facts) -> list[Said]:
    """Which written folders have their top-level dot files held, which have them open."""
    opened = tuple(path for path in policy.write_dot_files
                   if path not in (facts.guest_home, policy.home))
    held = tuple(path for path in policy.write
                 if path not in policy.write_dot_files and path != facts.guest_home)
    found = _line("files", "write_dot_files",
                  f"dot files held read only at the top ({_HELD_NAMES}, git's hooks and "
                  "settings, a hook manager's settings), so nothing written there runs as "
                  "you outside", held)
    return found + _line("files", "write_dot_files",
                         "dot files writable (.git, hooks, .envrc ...) in", opened)


def _home(policy: Policy, facts: Facts) -> list[Said]:
    if policy.home:
        return [Said("files", f"its HOME: {policy.home} (written, its dot files open)",
                     (policy.home,), field="home")]
    if facts.guest_home:
        return []
    return [Said("files", "its HOME: yours when it writes yours, else a folder of the "
                 "wire's own in Link's settings, or one in its private /tmp that ends with "
                 "the run", field="home")]


def _hide(policy: Policy, facts: Facts) -> list[Said]:
    return _line("files", "hide", "hidden, whatever grants them", policy.hide)


def _reopen(policy: Policy, facts: Facts) -> list[Said]:
    return _line("files", "reopen", "given back inside hidden folders", policy.reopen)


def _agent(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.agent:
        return []
    return [Said("files", f"an agent's sandbox ({policy.agent}): its own folder is its "
                 "HOME; every other agent's folder is hidden; its model key's placeholder "
                 "is kept across runs", (policy.agent,), field="agent")]


def _commands(policy: Policy, facts: Facts) -> list[Said]:
    if policy.commands:
        return _line("programs", "commands", "only these may start (and the loader they "
                     "name); the exec watch names what is refused", policy.commands)
    return [Said("programs", "any program it can read may start", field="commands")]


def _network(policy: Policy, facts: Facts) -> list[Said]:
    listed = policy.needs_proxy() or policy.has_proxy_port() or policy.localhost_ports
    words = {
        "none": "network: no host by HTTP(S); only the ways listed below" if listed
                else "network: none (no host, no lookup)",
        "proxy": "network: through the filtering proxy, to the hosts below only",
        "host": "network: this machine's network as it is (every host, this machine's "
                "ports, the local network); no wire, no log, no verb",
    }
    return [Said("ways out", words[policy.network], (policy.network,), field="network")]


def _hosts(policy: Policy, facts: Facts) -> list[Said]:
    if policy.network != "proxy":
        return []
    added = _line("ways out", "hosts", "added by you to the wire, apart from the spec "
                  "(lnk-sandbox allow; each taken at the next call, disallow takes it "
                  "away)", facts.added)
    if not policy.hosts:
        return [Said("ways out", "hosts: none (every call is refused, and on the log)",
                     field="hosts"), *added]
    wild = "; *.x is every name under x, not x itself" if any(
        host.startswith("*.") for host in policy.hosts) else ""
    return _line("ways out", "hosts", "hosts, by name, HTTP and HTTPS (ports 80 and 443 "
                 f"unless one is named{wild})", policy.hosts) + added


def _endpoints(policy: Policy, facts: Facts) -> list[Said]:
    return _line("ways out", "endpoints", "plain TCP endpoints, by name through the "
                 "sandbox's own DNS", policy.endpoints)


def _lan(policy: Policy, facts: Facts) -> list[Said]:
    return _line("ways out", "lan", "machines of the local network ([lan])", policy.lan)


def _localhost_ports(policy: Policy, facts: Facts) -> list[Said]:
    return _line("ways out", "localhost_ports", "this machine's loopback ports, relayed in",
                 policy.localhost_ports)


def _local_models(policy: Policy, facts: Facts) -> list[Said]:
    return _line("ways out", "local_models", "local models on this machine's ports, "
                 "through the inference filter", policy.local_models)


def _models(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.models:
        return []
    from lnk_proxy.model_rules import PROVIDER_HOSTS

    shown = tuple(f"{provider} ({PROVIDER_HOSTS[provider]})" for provider in policy.models)
    return [Said("ways out", "hosted models through /_link/model/ (the key kept outside; "
                 f"the program holds a placeholder): {_listing(shown)}", policy.models,
                 field="models")]


def _server_tools(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.models:
        return []
    if policy.server_tools:
        return [Said("ways out", "a hosted model's server-side tools (its web search, "
                     "fetch, code run by the provider): KEPT", (True,), field="server_tools")]
    return [Said("ways out", "a hosted model's server-side tools: removed from every call",
                 (False,), field="server_tools")]


def _secrets(policy: Policy, facts: Facts) -> list[Said]:
    shown = tuple(f"{name} (to {facts.secret_hosts[name]})" if facts.secret_hosts.get(name)
                  else f"{name} (no rule read: a run refuses to start)"
                  for name in policy.secrets)
    return [Said("ways out", "secrets through /_link/secret/ (kept outside, added by their "
                 f"rule, only to its host): {_listing(shown)}", policy.secrets,
                 field="secrets")] if policy.secrets else []


def _tools(policy: Policy, facts: Facts) -> list[Said]:
    undefined = "not defined: a run refuses to start"
    shown = tuple(f"{name} ({facts.tool_asks.get(name) or undefined})" for name in policy.tools)
    return [Said("ways out", f"tools that run outside, as you: {_listing(shown)}",
                 policy.tools, field="tools")] if policy.tools else []


def _open_pages(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.open_pages:
        return []
    return [Said("ways out", "open: it may ask to open a page in your browser (each page "
                 "asks you first); a login's callback to a loopback port comes back in",
                 (True,), field="open_pages")]


def _name(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.has_wire():
        return []
    if policy.name:
        return [Said("controls", f"the wire: {policy.name} (its log: lnk-sandbox log "
                     f"{policy.name}; its pause outlives its runs)", (policy.name,),
                     field="name")]
    return [Said("controls", "the wire: each run's own (run-…), unless run with --wire",
                 field="name")]


def _calls_per_minute(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.has_wire():
        return []
    limit = policy.calls_per_minute
    text = (f"calls a minute: at most {limit} on the wire (the next is refused, 429)"
            if limit else "calls a minute: no limit ([network] calls_per_minute sets one)")
    return [Said("controls", text, (limit,), field="calls_per_minute")]


def _pause(policy: Policy, facts: Facts) -> list[Said]:
    if not policy.has_wire():
        return []
    refusals, targets, window = policy.pause
    return [Said("controls", f"pause: the wire closes after {refusals} refusals or "
                 f"{targets} different refused targets within {window} s, and at once on "
                 "any attempt at a cloud metadata service; `lnk-sandbox resume` lifts it",
                 policy.pause, field="pause")]


def _settings(policy: Policy, facts: Facts) -> list[Said]:
    return [Said("closed", f"Link's settings folder {policy.settings} (secrets, tools, "
                 "logs, the kill switch, pauses, questions, other agents' folders): "
                 "neither read nor written", (policy.settings,), field="settings")]


# Every field of lnk_common.policy.FIELDS, in the order its lines are shown within a group.
FIELD_WORDS: dict[str, Words] = {
    "read": Words("files", _read),
    "write": Words("files", _write),
    "write_dot_files": Words("files", _write_dot_files),
    "home": Words("files", _home),
    "hide": Words("files", _hide),
    "reopen": Words("files", _reopen),
    "agent": Words("files", _agent),
    "commands": Words("programs", _commands),
    "network": Words("ways out", _network),
    "hosts": Words("ways out", _hosts),
    "endpoints": Words("ways out", _endpoints),
    "lan": Words("ways out", _lan),
    "localhost_ports": Words("ways out", _localhost_ports),
    "local_models": Words("ways out", _local_models),
    "models": Words("ways out", _models),
    "server_tools": Words("ways out", _server_tools),
    "secrets": Words("ways out", _secrets),
    "tools": Words("ways out", _tools),
    "open_pages": Words("ways out", _open_pages),
    "name": Words("controls", _name),
    "calls_per_minute": Words("controls", _calls_per_minute),
    "pause": Words("controls", _pause),
    "settings": Words("closed", _settings),
    "settings_via": _silent("the path the settings folder is named by; the launcher "
                            "refuses a run that could change it"),
    "spec": _silent("the spec's file, for messages"),
    "learn": _silent("`lnk-sandbox learn` only, which says so itself"),
    "site_packages": _silent("where the proxy's libraries are installed, outside"),
    "keep_session": _silent("a guest's terminal session: opens no file and no way out"),
}


# -- what every sandbox reads and closes (no field's) --------------------------------------


def _system(policy: Policy, facts: Facts) -> list[Said]:
    return [Said("files", f"reads, as every sandbox: the system's folders "
                 f"({', '.join(SYSTEM_FOLDERS[:4])} ...), never /etc/shadow, sudoers, SSH "
                 "host keys or TLS private keys")]


def _guest(policy: Policy, facts: Facts) -> list[Said]:
    if not facts.guest_home:
        return []
    return [Said("files", f"its own folder, written, dot files open: {facts.guest_home}",
                 (facts.guest_home,)),
            Said("programs", "over SSH: a shell, a command, scp and sftp, all inside; no "
                 "forwarding of ports, agent or X11")]


def _machine(policy: Policy, facts: Facts) -> list[Said]:
    if policy.network == "host":
        return [Said("closed", "this machine and its networks: NOT closed (network "
                     "\"host\"); unix sockets by name are refused")]
    ports = " (but the ports above)" if policy.localhost_ports or policy.local_models else ""
    lan = " (but the machines above)" if policy.lan else ""
    return [Said("closed", f"this machine: its addresses and loopback ports{ports}, and "
                 "unix sockets not made inside the sandbox"),
            Said("closed", "the networks this machine sits on (a router's page, a printer), "
                 f"link-local and multicast addresses{lan}"),
            Said("closed", "cloud metadata services (169.254.169.254 and the like)"
                 + (": refused, and the wire paused at once" if policy.has_wire() else ""))]


def _kernel(policy: Policy, facts: Facts) -> list[Said]:
    return [Said("closed", "every capability; other processes (its own pid namespace); "
                 "refused system calls (the seccomp filter)")]


EVERY_SANDBOX: dict[str, Render] = {
    "system": _system,
    "guest": _guest,
    "machine": _machine,
    "kernel": _kernel,
}


def explain(policy: Policy, facts: Facts) -> list[Said]:
    """Every line of what `policy` opens and closes, in GROUPS' order; within a group,
    the fields' lines in FIELD_WORDS' order, then those of every sandbox."""
    found: list[Said] = []
    for words in FIELD_WORDS.values():
        if words.render is not None:
            found += words.render(policy, facts)
    for render in EVERY_SANDBOX.values():
        found += render(policy, facts)
    order = list(GROUPS)
    return sorted(found, key=lambda said: order.index(said.group))


def opens(policy: Policy, facts: Facts) -> list[str]:
    """The lines alone, in order (what `guest add` shows and asks, one a line)."""
    return [said.text for said in explain(policy, facts)]


def plain_line(line: str) -> str:
    """The line as a terminal is given it: printable ASCII as it is, anything else
    escaped (a path from a spec could hold an escape sequence)."""
    if len(line) <= MAX_LINE_CHARS and all(" " <= character <= "~" for character in line):
        return line
    from lnk_ask.text import printable

    return printable(line, MAX_LINE_CHARS)


def text(policy: Policy, facts: Facts) -> str:
    """explain's text: a heading, then each group's title and its lines, indented."""
    lines = [f"what {policy.spec or 'this policy'} opens, and what it closes:"]
    group = ""
    for said in explain(policy, facts):
        if said.group != group:
            group = said.group
            lines.append(GROUPS[group])
        lines.append(f"  {said.text}")
    return "\n".join(plain_line(line) for line in lines) + "\n"


def as_json(policy: Policy, facts: Facts) -> dict[str, object]:
    """The same facts as the text (docs/decisions/0043-explain-and-status.md):
    {"spec", "groups": [{"group", "title", "lines": [{"field", "key", "text",
    "values"}]}]}; `field` and `key` are null on a line of every sandbox."""
    keys = {field.name: field.spec_key or None for field in FIELDS}
    groups: list[dict[str, object]] = []
    for said in explain(policy, facts):
        if not groups or groups[-1]["group"] != said.group:
            groups.append({"group": said.group, "title": GROUPS[said.group], "lines": []})
        lines = groups[-1]["lines"]
        assert isinstance(lines, list)
        lines.append({"field": said.field, "key": keys.get(said.field or ""),
                      "text": said.text, "values": list(said.values)})
    return {"spec": policy.spec or None, "groups": groups}


# -- the shell: the facts read from Link's settings, and the verb --------------------------


def gather(policy: Policy, *, guest_home: str = "") -> Facts:
    """Each secret's rule's host and each tool's asking, read from Link's settings as a
    run reads them; what cannot be read is left out (the line says a run refuses)."""
    hosts: dict[str, str] = {}
    if policy.secrets:
        from lnk_common.secrets import SecretError, read_rule
        from lnk_proxy.secret_rules import SecretRuleError, parse_rule

        for name in policy.secrets:
            try:
                hosts[name] = parse_rule(read_rule(policy.settings, name)).host
            except (SecretError, SecretRuleError):
                continue
    asks: dict[str, str] = {}
    if policy.tools:
        from lnk_proxy.tools import ToolError, read_tool

        for name in policy.tools:
            try:
                tool = read_tool(policy.settings, name)
            except ToolError:
                continue
            asks[name] = ("no call asks you" if tool.ask == "none" else
                          f"every call asks you but {_listing(tuple(sorted(tool.allow)))}"
                          if tool.allow else "every call asks you")
    return Facts(secret_hosts=hosts, tool_asks=asks, guest_home=guest_home,
                 added=_additions(policy))


def _additions(policy: Policy) -> tuple[str, ...]:
    """The wire's additions (lnk_common.additions), endpoints as "tcp:NAME:PORT"; a file
    that cannot be taken is one entry saying so (the proxy then takes none)."""
    if policy.network != "proxy" or not policy.name:
        return ()
    from lnk_common.additions import AdditionsError, read_entries

    try:
        return tuple(("tcp:" if entry.tcp else "") + entry.host
                     for entry in read_entries(policy.settings, policy.name))
    except AdditionsError as error:
        return (f"none taken: {error}",)


def main(policy: Policy, *, as_json_output: bool) -> int:
    """`lnk-sandbox explain --spec FILE [--json]`: writes nothing, runs nothing."""
    facts = gather(policy)
    if as_json_output:
        document = json.dumps(as_json(policy, facts), ensure_ascii=True, indent=2)
        sys.stdout.write(document.replace("\x7f", "\\u007f") + "\n")
    else:
        sys.stdout.write(text(policy, facts))
    return 0
