"""lnk-sandbox-proxy: a sandbox's one way out, outside it, in the host's network.

    lnk-sandbox-proxy --settings DIR --wire NAME [--host H]… (--socket-fd N | --listen IP:PORT)

--socket-fd: the launcher's end of a socket pair over which the listening socket comes,
made by the launcher's helper inside the sandbox's own network namespace (so only the
sandbox can connect to it; it keeps that namespace while served here). --listen: bind
one itself (an administrator's or CI's standalone run).

Heavy imports (asyncio, ssl, h11) come only once the first connection is waiting in the
listening socket's backlog, not while the sandbox starts.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1
_SIGTERM = 15
# When the sandbox has ended, its calls' sockets are closing: this long is given to
# write their ended lines before the proxy exits.
DRAIN_SECONDS = 1.0
# How often open calls look at the kill switch and the wire's pause: the seed asks every
# second while one is open; four times a second keeps every close well under a second
# (a stat of two files, a few microseconds each time).
SWITCH_SECONDS = 0.25


def _parse(argv: list[str]) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {name: [] for name in (
        "--settings", "--wire", "--host", "--socket-fd", "--listen", "--calls-per-minute",
        "--pause")}
    index = 0
    while index < len(argv):
        option = argv[index]
        if option not in options or index + 1 >= len(argv):
            raise ValueError(f"unknown option or missing value: {option!r}")
        options[option].append(argv[index + 1])
        index += 2
    for single in ("--settings", "--wire"):
        if len(options[single]) != 1:
            raise ValueError(f"{single} is required, once")
    if len(options["--socket-fd"]) + len(options["--listen"]) != 1:
        raise ValueError("one of --socket-fd or --listen is required")
    return options


def main(argv: list[str] | None = None) -> None:
    try:
        options = _parse(sys.argv[1:] if argv is None else argv)
    except ValueError as error:
        print(f"lnk-sandbox-proxy: {error}", file=sys.stderr)
        sys.exit(2)
    from lnk_common.syscalls import prctl

    prctl(_PR_SET_PDEATHSIG, _SIGTERM)
    if options["--socket-fd"]:
        from lnk_common.fdpass import receive_fd

        channel = int(options["--socket-fd"][0])
        listener = receive_fd(channel)
        os.close(channel)
        if listener is None:
            return  # the sandbox was never made: nothing to serve
    else:
        import socket

        host, _, port = options["--listen"][0].rpartition(":")
        sock = socket.create_server((host, int(port)))
        listener = sock.detach()
    serve(listener, options)


def serve(listener: int, options: dict[str, list[str]]) -> None:
    # Nothing heavy is imported before the first connection: asyncio and ssl cost some
    # 60 ms of CPU here, which a sandbox that starts, runs and ends without a call (and
    # every sandbox while it starts) would otherwise share two cores with.
    import select

    select.select([listener], [], [])
    import asyncio
    import socket

    from lnk_common.policy import DEFAULT_PAUSE, parse_pause
    from lnk_common.wirelog import WireLog
    from lnk_proxy.controls import Controls, SharedControls
    from lnk_proxy.decide import parse_hosts
    from lnk_proxy.machine import Machine
    from lnk_proxy.resolver import dns_resolver, from_environment
    from lnk_proxy.server import Proxy, system_resolver

    server_address = from_environment()
    settings, wire = options["--settings"][0], options["--wire"][0]
    controls = SharedControls(
        Controls(calls_per_minute=int((options["--calls-per-minute"] or ["0"])[0]),
                 pause=parse_pause(options["--pause"][0]) if options["--pause"]
                 else DEFAULT_PAUSE),
        os.path.join(settings, "sandbox", "wires", wire, "window"))

    def say(message: str) -> None:
        os.write(2, (message + "\n").encode("utf-8", "replace"))

    proxy = Proxy(rules=parse_hosts(tuple(options["--host"])), machine=Machine.gather(),
                  log=WireLog(settings, wire), settings=settings, wire=wire,
                  controls=controls, say=say,
                  resolver=dns_resolver(server_address) if server_address else system_resolver)

    async def watch_switches() -> None:
        """Every second while a call is open: the kill switch or a pause ends them all."""
        while True:
            await asyncio.sleep(SWITCH_SECONDS)
            if proxy.open and proxy.closed():
                proxy.close_all()

    async def run() -> None:
        import signal

        sock = socket.socket(fileno=listener)
        sock.setblocking(False)
        server = await asyncio.start_server(proxy.handle, sock=sock, limit=1 << 20)
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        watcher = asyncio.create_task(watch_switches())
        await stopping.wait()
        watcher.cancel()
        server.close()
        await proxy.drain(DRAIN_SECONDS)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
