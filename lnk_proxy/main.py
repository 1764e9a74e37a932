"""lnk-sandbox-proxy: a sandbox's one way out, outside it, in the host's network.

    lnk-sandbox-proxy --settings DIR --wire NAME [--host H]… [--endpoint E]… [--lan L]…
                      [--model PROVIDER]… [--server-tools] [--secret NAME]…
                      [--local-model PORT]… [--tool NAME]… [--open-pages] [--guest NAME]
                      [--calls-per-minute N] [--pause R,T,W] [--dns later]
                      (--socket-fd N | --listen IP:PORT)

The options that carry the policy (all but --wire, --guest, --dns, --socket-fd and --listen)
are its fields' own, spelt and checked as the launcher's are (lnk_common.policy.FIELDS).

--model: the model verb for that provider (anthropic, openai, gemini, openrouter), its key
read from Link's secrets at each call; the placeholder the program holds comes in this
process's environment as LNK_PLACEHOLDER (never an argument). --server-tools: keep a
hosted model's server-side tools ([network] server_tools = true).
--secret: the secret verb for that secret of Link's store (its rule kept with it); the
program's placeholder for each comes in LNK_SECRET_PLACEHOLDERS, one `NAME=PLACEHOLDER`
a line. --local-model: a [localhost] models port, reached as
`/_link/s/<URL secret>/local/<port>/…` through the inference filter; the URL secret comes in
LNK_URL_SECRET. --open-pages: `/_link/s/<URL secret>/open`, a page opened in the person's
browser outside (asked every time), and login callbacks passed in over the sockets
labelled `callback` (lnk_proxy.open_verb). --guest: the sandbox is a guest's session
(lnk_wrap.enter): every question names the guest. The launcher starts a guest's proxy in
a session of its own (no controlling terminal), so its questions go to the queue, never
to the guest's terminal (lnk_wrap.outside).

--socket-fd: the launcher's end of a socket pair over which the listening sockets come,
each labelled (proxy, dns udp, dns tcp, endpoint), made by the DNS helper
(lnk_dns.helper) inside the sandbox's own network namespace (so only the sandbox can
connect to them; they keep that namespace while served here). --listen: bind the
proxy's port itself (an administrator's or CI's standalone run). --dns later (only with
--socket-fd): the sandbox has no DNS of its own, and its resolv.conf names 127.0.0.1,
where nothing listens; once the wire's additions have an endpoint (`lnk-sandbox allow
--tcp`), this proxy has the DNS helper bind 127.0.0.1:53 inside and serves it
(lnk_proxy.dns_server.DnsOnAddition); until its first call it looks at the additions
four times a second while it waits.

Heavy imports (asyncio, ssl, h11) come only once the first connection is waiting in a
listening socket's queue, not while the sandbox starts.
"""

from __future__ import annotations

from lnk_common import serving

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from collections.abc import Callable

    from lnk_proxy.decide import HostRule
    from lnk_proxy.mcp_verb import Asker
    from lnk_proxy.server import Proxy
    from lnk_proxy.tools import Tool
    from lnk_proxy.verb_call import Verb

__all__ = ["PLACEHOLDER_VARIABLE", "SECRET_PLACEHOLDERS_VARIABLE", "URL_SECRET_VARIABLE", "main",
           "parse_options", "secret_placeholders"]

# Where the placeholder the sandbox's program holds comes from: this process's environment
# (set by the launcher), never its arguments.
PLACEHOLDER_VARIABLE = "LNK_PLACEHOLDER"
SECRET_PLACEHOLDERS_VARIABLE = "LNK_SECRET_PLACEHOLDERS"  # noqa: S105  (a variable's name)
URL_SECRET_VARIABLE = "LNK_URL_SECRET"  # noqa: S105  (a variable's name)


def secret_placeholders(text: str) -> dict[str, bytes]:
    """`NAME=PLACEHOLDER` lines as a mapping (a line without `=` is skipped)."""
    found: dict[str, bytes] = {}
    for line in text.splitlines():
        name, equals, placeholder = line.partition("=")
        if equals:
            found[name] = placeholder.encode()
    return found


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv)
    _check_verbs(options)
    serving.start_helper()
    listeners = serving.receive_listeners(options, "proxy tcp")
    if not listeners:
        return  # the sandbox was never made: nothing to serve
    # Nothing heavy is imported before the first connection: asyncio and ssl cost some
    # 60 ms of CPU here, which a sandbox that starts, runs and ends without a call (and
    # every sandbox while it starts) would otherwise share two cores with.
    # The login callbacks' sockets are not listening: only the others wake the proxy.
    waking = [item for item in listeners if item[1] != "callback tcp"]
    if options["--dns"]:
        _wait_for_first_or_endpoint(waking, options)
    else:
        serving.wait_for_first(waking)
    serve(listeners, options)


def _wait_for_first_or_endpoint(listeners: list[tuple[int, str]],
                                options: dict[str, list[str]]) -> None:
    """`--dns later`: until the first connection, or until the wire's additions have an
    endpoint (`lnk-sandbox allow --tcp`), whose name the sandbox can only look up once
    this proxy serves its DNS: looked at as the watch looks at the switches (a stat
    while the file is unchanged), the first look a quarter second after the start, not
    during it."""
    import select

    settings, wire = options["--settings"][0], options["--wire"][0]
    while not select.select([fd for fd, _ in listeners], [], [], serving.SWITCH_SECONDS)[0]:
        from lnk_common.additions import added_hosts  # imported at the first look only

        if added_hosts(settings, wire).endpoints:
            return


def parse_options(argv: list[str] | None) -> dict[str, list[str]]:
    """The proxy's options (its fields of the policy's table, and --guest), or exit 2."""
    return serving.parse_options("lnk-sandbox-proxy", argv, "proxy", ("--guest", "--dns"))


def _check_verbs(options: dict[str, list[str]]) -> None:
    """Refuse to start on verb options that could not be served (nothing fails open):
    what each verb needs from this process's environment, and --guest. (The verbs'
    options themselves were checked by the policy's table.)"""
    import os
    import sys

    from lnk_common.policy import is_name

    problem = ""
    if options["--model"] and not os.environ.get(PLACEHOLDER_VARIABLE):
        problem = f"--model needs the sandbox's placeholder in {PLACEHOLDER_VARIABLE}"
    elif any(not secret_placeholders(os.environ.get(SECRET_PLACEHOLDERS_VARIABLE, "")).get(name)
             for name in options["--secret"]):
        problem = f"--secret needs each secret's placeholder in {SECRET_PLACEHOLDERS_VARIABLE}"
    elif (options["--local-model"] or options["--tool"] or options["--open-pages"]) and len(
            os.environ.get(URL_SECRET_VARIABLE, "")) < 32:
        problem = (f"--local-model, --tool and --open-pages need the sandbox's URL secret in "
                   f"{URL_SECRET_VARIABLE}")
    elif len(options["--guest"]) > 1 or not all(map(is_name, options["--guest"])):
        problem = "--guest takes a guest's name, once"
    elif options["--dns"] not in ([], ["later"]) or (options["--dns"] and options["--listen"]):
        problem = ("--dns takes `later`, once, with --socket-fd (the sandbox's resolv.conf "
                   "names 127.0.0.1, where this proxy serves DNS once an endpoint is added)")
    if problem:
        print(f"lnk-sandbox-proxy: {problem}", file=sys.stderr)
        sys.exit(2)


def _asker(settings: str, wire: str, guest: str, *, whole: bool = False) -> Asker:
    """How the MCP verb asks the person before a tools/call, and the open verb before a
    page opens (`whole`: the URL shown whole): lnk_ask in a child process (a dialog, the
    terminal, the queue: the first answer wins; silence or any error is no). `guest`: a
    guest's session, named in the title and the question."""
    from lnk_ask import AskUsageError, ask_async

    async def ask(title: str, question: str, allows: str) -> tuple[bool, str]:
        if guest:
            title = f"guest {guest}: {title}"
            question = f"For the guest {guest}, over SSH: {question}"
            allows = f"guest {guest}: {allows}"
        try:
            answer = await ask_async(settings, wire, title, question, whole=whole,
                                     allows=allows)
        except AskUsageError as error:  # ours to get right: said, and no
            return False, f"error: {error}"
        return answer.yes, answer.how

    return ask


def _verbs(options: dict[str, list[str]], listeners: list[tuple[int, str]],
           where: tuple[str, str, str]) -> tuple[dict[str, Verb], list[tuple[int, str]]]:
    """The verbs the policy turned on, by their path segment (lnk_proxy.verbs), each
    made only when on (every other answers 404); and the listeners left once the open
    verb has taken its callbacks' sockets. `where`: the settings, the wire and the
    guest's name."""
    import os
    import socket

    from lnk_proxy.verbs import MODEL, SECRET, URL_SECRET

    settings, wire, guest = where
    verbs: dict[str, Verb] = {}
    if options["--model"]:
        from lnk_proxy.model_verb import ModelVerb

        verbs[MODEL] = ModelVerb(providers=frozenset(options["--model"]), settings=settings,
                                 placeholder=os.environ[PLACEHOLDER_VARIABLE].encode(),
                                 server_tools=options["--server-tools"] == ["yes"])
    if options["--secret"]:
        from lnk_proxy.secret_verb import SecretVerb

        given = secret_placeholders(os.environ.get(SECRET_PLACEHOLDERS_VARIABLE, ""))
        verbs[SECRET] = SecretVerb(settings=settings, placeholders={
            name: given[name] for name in options["--secret"]})
    parts: dict[str, Verb] = {}
    if options["--local-model"]:
        from lnk_proxy.local_verb import LocalVerb

        parts["local"] = LocalVerb(frozenset(int(port) for port in options["--local-model"]),
                                   server_tools=options["--server-tools"] == ["yes"])
    tools = _tools(settings, options["--tool"])
    if tools:  # none left to serve: the part is off
        from lnk_proxy.mcp_verb import McpVerb

        parts["mcp"] = McpVerb(tools, ask=_asker(settings, wire, guest), settings=settings,
                               wire=wire)
    if options["--open-pages"]:
        from lnk_proxy.open_verb import CallbackSockets, OpenVerb

        callbacks = CallbackSockets([socket.socket(fileno=fd) for fd, label in listeners
                                     if label == "callback tcp"])
        listeners = [item for item in listeners if item[1] != "callback tcp"]
        parts["open"] = OpenVerb(callbacks, ask=_asker(settings, wire, guest, whole=True),
                                 environ=None, wire=wire)
    if parts:
        from lnk_proxy.url_secret_verb import UrlSecretVerb

        verbs[URL_SECRET] = UrlSecretVerb(os.environ[URL_SECRET_VARIABLE].encode(), parts)
    return verbs, listeners


def _tools(settings: str, names: list[str]) -> dict[str, Tool]:
    """The tools the policy names, read from Link's settings; one removed since the run
    began is said, and its calls are 404."""
    from lnk_proxy.tools import ToolError, read_tool

    tools = {}
    for name in names:
        try:
            tools[name] = read_tool(settings, name)
        except ToolError as error:
            serving.say(f"lnk-sandbox-proxy: the tool {name} is not served: {error}")
    return tools


def _made_places(listeners: list[tuple[int, str]]) -> set[tuple[str, int]]:
    """The places the launcher's helper made for endpoints (each socket's address), which
    `allow --tcp`'s endpoints, taken at the next call, need not make again."""
    import socket

    made = set()
    for fd, label in listeners:
        if label == "endpoint tcp":
            probe = socket.socket(fileno=fd)
            try:
                made.add(probe.getsockname()[:2])
            finally:
                probe.detach()
    return made


def _dns_on_addition(proxy: Proxy, inside: socket.socket, listeners: list[tuple[int, str]],
                     looked_up: tuple[HostRule, ...], server: tuple[str, int] | None
                     ) -> Callable[[], None]:
    """`--dns later` (a sandbox of the proxy's network that started without DNS): its
    DNS made inside once an endpoint is added (lnk_proxy.dns_server.DnsOnAddition), the
    network joined from `inside`, the proxy's own socket made there; at once if one is
    added already (what woke this proxy). What closes it."""
    from lnk_common import endpoints
    from lnk_proxy.dns_server import DnsOnAddition

    late = proxy.dns_on_addition = DnsOnAddition(
        proxy, inside, _made_places(listeners),
        rules=tuple(rule for rule in looked_up if not endpoints.is_address(rule.name)),
        server=server)
    late.open()
    return late.close


def serve(listeners: list[tuple[int, str]], options: dict[str, list[str]]) -> None:
    # concurrent.futures.thread: the lookups' threads, imported now rather than by the
    # first lookup, which may run with no descriptor left to read the module with.
    import asyncio
    import concurrent.futures.thread  # noqa: F401
    import socket

    from lnk_common import endpoints
    from lnk_common.wirelog import WireLog
    from lnk_proxy.decide import parse_hosts
    from lnk_proxy.lane import lane_server
    from lnk_proxy.machine import Machine
    from lnk_proxy.resolver import dns_resolver, from_environment, system_resolver
    from lnk_proxy.server import Proxy

    server_address = from_environment()
    settings, wire = options["--settings"][0], options["--wire"][0]
    guest = options["--guest"][0] if options["--guest"] else ""
    named = (tuple(options["--endpoint"]), tuple(options["--lan"]))
    # The names the sandbox's DNS gives addresses to: endpoints and [lan] hosts by name
    # (not [network] hosts: a program that uses the proxy variables looks nothing up).
    looked_up = (*parse_hosts(named[0]), *parse_hosts(named[1], lan=True))
    rules = (*parse_hosts(tuple(options["--host"])), *looked_up)
    book = endpoints.AddressBook(endpoints.fixed_names(endpoints.entries(*named)))
    verbs, listeners = _verbs(options, listeners, (settings, wire, guest))
    proxy = Proxy(rules=rules, machine=Machine.gather(), book=book, verbs=verbs,
                  log=WireLog(settings, wire), settings=settings, wire=wire,
                  controls=serving.controls_from(options), say=serving.say,
                  resolver=dns_resolver(server_address) if server_address else system_resolver)

    async def start() -> serving.Closer:
        servers: list[asyncio.Server] = []
        closers = []
        dns = None
        for fd, label in listeners:
            role, _, kind = label.partition(" ")
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            if role == "dns":
                if dns is None:
                    from lnk_proxy.dns_server import DnsService

                    dns = DnsService(proxy, rules=tuple(
                        rule for rule in looked_up if not endpoints.is_address(rule.name)),
                        server=server_address)
                    closers.append(dns.close)
                if kind == "tcp":  # made inside: the sandbox's network, for `allow --tcp`
                    from lnk_proxy.added_endpoints import AddedEndpoints

                    dns.added = proxy.added_endpoints = AddedEndpoints(
                        proxy, sock, _made_places(listeners))
                await dns.serve(sock, udp=kind == "udp")
                continue
            handler = proxy.handle_endpoint if role == "endpoint" else proxy.handle
            servers.append(await lane_server(handler, sock))
            if role == "proxy" and dns is None and options["--dns"]:
                closers.append(_dns_on_addition(proxy, sock, listeners, looked_up,
                                                server_address))
        closers += [server.close for server in servers]
        closers.append(proxy.close_verbs)

        def stop() -> None:
            for close in closers:
                close()

        return stop

    serving.run_wire(proxy, start)


if __name__ == "__main__":
    main()
