"""lnk-sandbox-relay: [localhost] ports, relayed into a sandbox, each call on its wire.

    lnk-sandbox-relay --settings DIR --wire NAME [--calls-per-minute N] [--pause R,T,W]
                      [--to-port PORT] [--local-model PORT]… [--server-tools]
                      (--socket-fd N | --listen IP:PORT)

A sandbox's network has loopback only. For each port a spec names, the DNS helper
(lnk_dns.helper) listens on 127.0.0.1 and [::1] at that port inside the sandbox and
hands the sockets here, over --socket-fd; a connection to one is carried to the same
port on this machine's loopback, [::1] first for a connection that came to [::1] and
127.0.0.1 first for one that came to 127.0.0.1 (a server listens on one or both), so the
program keeps `localhost:<port>` as its address and no harness needs a setting of
Link's. --listen: one socket bound here, relayed to the same port of this machine's
loopback (an administrator's or CI's standalone run; bind it elsewhere than the port).

Only the ports named are relayed: `"*"` is refused by the spec loader, since on this
machine's loopback listen other sandboxes' proxies, each another agent's way out.

--local-model PORT (repeatable; `[localhost] models`): a connection for that port of this
machine's loopback is read as HTTP and passes the local model's inference filter
(lnk_proxy.local_models): one request a connection, only a local runtime's inference
calls and read-only listings, the body checked and re-serialised, the response streamed
back; each call `allowed localhost:PORT … kind=local-model`, each refusal one line to the
program and one `refused localhost:PORT reason=…` on the log. --server-tools: keep a
runtime's own server-side tools on its provider-compatible APIs ([network] server_tools).

Each call passes the wire's controls (the kill switch, a pause, calls a minute) and is
on the wire's log: `allowed localhost:PORT … kind=relay`, then `ended`. The relay runs
outside the sandbox, apart from the proxy: the proxy refuses this machine by every
address, and the relay reaches nothing but the named ports of its loopback.

The options that carry the policy (all but --wire, --to-port, --socket-fd and --listen)
are its fields' own, spelt and checked as the launcher's are (lnk_common.policy.FIELDS).
"""

from __future__ import annotations

from lnk_common import serving

__all__ = ["main", "parse_options"]


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv)
    problem = _check_options(options)
    if problem:
        serving.say(f"lnk-sandbox-relay: {problem}")
        raise SystemExit(2)
    serving.start_helper()
    listeners = serving.receive_listeners(options, "relay tcp")
    if not listeners:
        return
    serving.wait_for_first(listeners)
    serve(listeners, options)


def parse_options(argv: list[str] | None) -> dict[str, list[str]]:
    """The relay's options (its fields of the policy's table, and --to-port), or exit 2."""
    return serving.parse_options("lnk-sandbox-relay", argv, "relay", ("--to-port",))


def _check_options(options: dict[str, list[str]]) -> str:
    """What is wrong with the relay's own options (its fields' are checked by the
    policy's table), in one line, or ""."""
    for value in options["--to-port"]:
        if not (value.isascii() and value.isdigit() and 1 <= int(value) <= 65535):
            return f"--to-port takes a port (1-65535), not {value!r}"
    if len(options["--to-port"]) > 1:
        return "--to-port is given once"
    return ""


def serve(listeners: list[tuple[int, str]], options: dict[str, list[str]]) -> None:
    import asyncio
    import socket

    from lnk_common.wirelog import WireLog
    from lnk_relay.relay import Relay

    settings, wire = options["--settings"][0], options["--wire"][0]
    to_port = int(options["--to-port"][0]) if options["--to-port"] else None
    relay = Relay(log=WireLog(settings, wire), settings=settings, wire=wire,
                  controls=serving.controls_from(options), say=serving.say, to_port=to_port,
                  model_ports=frozenset(int(port) for port in options["--local-model"]),
                  server_tools=bool(options["--server-tools"]))

    async def start() -> serving.Closer:
        servers = []
        for fd, _label in listeners:
            sock = socket.socket(fileno=fd)
            sock.setblocking(False)
            servers.append(await asyncio.start_server(relay.handle, sock=sock))

        def stop() -> None:
            for server in servers:
                server.close()

        return stop

    serving.run_wire(relay, start)


if __name__ == "__main__":
    main()
