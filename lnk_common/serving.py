"""What the proxy and the relay share as programs: their options, the listening sockets
they are handed, and the loop that serves them until SIGTERM.

Kept light: a helper imports this at every sandbox start, and the heavy imports
(asyncio, the serving code) come only once the first connection or query is waiting in a
listening socket's queue (`wait_for_first`), not while the sandbox starts.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import asyncio
    import threading
    from collections.abc import Awaitable, Callable

    from lnk_common.controls import SharedControls
    from lnk_common.wire import Wire

    Closer = Callable[[], None]

__all__ = ["DRAIN_SECONDS", "SWITCH_SECONDS", "controls_from", "parse_options",
           "receive_listeners", "run_wire", "say", "start_helper", "wait_for_first"]

_PR_SET_PDEATHSIG = 1
_SIGTERM = 15
# When the sandbox has ended, its calls' sockets are closing: this long is given to
# write their ended lines before the process exits.
DRAIN_SECONDS = 1.0
# How often open calls look at the kill switch and the wire's pause: the seed asks every
# second while one is open; four times a second keeps every close well under a second
# (a stat of two files, a few microseconds each time).
SWITCH_SECONDS = 0.25
# How often at most a helper writes its open calls for `lnk-sandbox status` (only when
# the count changed): a person reads it at a glance, and a burst of calls must not become
# a burst of writes to Link's settings.
OPEN_CALLS_SECONDS = 1.0
# The options both serving helpers take besides their fields of the policy.
_OWN = ("--wire", "--socket-fd", "--listen")


def parse_options(program: str, argv: list[str] | None, helper: str,
                  own: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """The helper's options, by option: its fields of the policy, spelt and checked as
    the policy's table says (lnk_common.policy.parse_helper_argv; a flag given is
    ["yes"]), and its `own` and _OWN (each takes a value and may repeat), or exit 2 with
    one line."""
    from lnk_common.policy import PolicyArgvError, parse_helper_argv

    arguments = sys.argv[1:] if argv is None else argv
    try:
        options = parse_helper_argv(helper, arguments, (*_OWN, *own))
        for single in ("--settings", "--wire"):
            if len(options[single]) != 1:
                raise PolicyArgvError(f"{single} is required, once")
        if len(options["--socket-fd"]) + len(options["--listen"]) != 1:
            raise PolicyArgvError("one of --socket-fd or --listen is required")
    except PolicyArgvError as error:
        print(f"{program}: {error}", file=sys.stderr)
        sys.exit(2)
    return options


def start_helper() -> None:
    """A helper ends with the launcher that started it, and may hold as many descriptors
    as the machine lets this user: a tunnel holds six (two sockets, two splice pipes), and
    an ordinary user's soft limit of 1,024 ran out at some 170 tunnels (accepts and
    upstream connections then failed with EMFILE), where root's 20,000 did not."""
    import resource

    from lnk_common.syscalls import prctl

    prctl(_PR_SET_PDEATHSIG, _SIGTERM)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def receive_listeners(options: dict[str, list[str]], label: str) -> list[tuple[int, str]]:
    """The labelled listening sockets from --socket-fd (until the launcher closes it),
    or one bound here at --listen IP:PORT and labelled `label`."""
    listeners: list[tuple[int, str]] = []
    if options["--socket-fd"]:
        from lnk_common.fdpass import receive_labelled

        channel = int(options["--socket-fd"][0])
        _end_if_orphaned(channel)
        while (received := receive_labelled(channel)) is not None:
            listeners.append((received[0], received[1].decode("ascii", "replace")))
        os.close(channel)
    else:
        import socket

        host, _, port = options["--listen"][0].rpartition(":")
        listeners.append((socket.create_server((host.strip("[]"), int(port))).detach(), label))
    return listeners


def _end_if_orphaned(channel: int) -> None:
    """End now if the launcher died before start_helper's PDEATHSIG was set (this
    interpreter's start is some 20 ms, and a launcher killed meanwhile sends no signal):
    the launcher made `channel` (a socket pair), so the kernel names it (SO_PEERCRED),
    and it must still be this process's parent. Else the helper waited forever on
    listeners no one would use, holding the launcher's standard error."""
    import _socket

    sock = _socket.socket(fileno=channel)
    try:
        creds = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    finally:
        sock.detach()
    launcher = int.from_bytes(creds[:4], sys.byteorder)
    if launcher > 0 and os.getppid() != launcher:
        sys.exit(0)


def wait_for_first(listeners: list[tuple[int, str]]) -> None:
    import select

    select.select([fd for fd, _ in listeners], [], [])


def controls_from(options: dict[str, list[str]]) -> SharedControls:
    from lnk_common.controls import Controls, SharedControls
    from lnk_common.policy import DEFAULT_PAUSE, parse_pause

    settings, wire = options["--settings"][0], options["--wire"][0]
    return SharedControls(
        Controls(calls_per_minute=int((options["--calls-per-minute"] or ["0"])[0]),
                 pause=parse_pause(options["--pause"][0]) if options["--pause"]
                 else DEFAULT_PAUSE),
        os.path.join(settings, "sandbox", "wires", wire, "window"))


def say(message: str) -> None:
    os.write(2, (message + "\n").encode("utf-8", "replace"))


def run_wire(wire: Wire, start: Callable[[], Awaitable[Closer]]) -> None:
    """Serve until SIGTERM: `start` begins serving and returns what stops it; open calls
    end when the kill switch or a pause says so; at the end they get DRAIN_SECONDS to
    write their ended lines. Never returns."""
    import asyncio
    import threading

    threading.excepthook = lambda hook: _report_thread_error(wire, hook)
    try:
        asyncio.run(_serve(wire, start))
    except KeyboardInterrupt:
        pass
    finally:
        try:
            wire.flush_reports(every=True)
            wire.log.close()  # writes the counts still held: nothing folded goes unsaid
            if wire.settings:
                from lnk_common.wirestate import write_open_calls

                write_open_calls(wire.settings, wire.wire, None)
        finally:
            os._exit(0)


async def _serve(wire: Wire, start: Callable[[], Awaitable[Closer]]) -> None:
    """Serve, with the switches watched, until SIGTERM; then stop and drain."""
    import asyncio
    import signal
    import threading

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(
        lambda loop, context: _report_loop_error(wire, context))
    stop_serving = await start()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    threading.Thread(target=_watch_switches, args=(wire, loop), daemon=True).start()
    await stopping.wait()
    stop_serving()
    await wire.drain(DRAIN_SECONDS)


def _watch_switches(wire: Wire, loop: asyncio.AbstractEventLoop) -> None:
    """A thread of its own, not a task: the event loop may wait long for the GIL
    among hundreds of busy splice threads; this shuts the tunnels down itself, then
    has the loop cancel every open call."""
    import contextlib
    import time

    from lnk_common.wirestate import sweep_open_calls, write_open_calls

    if wire.settings:
        sweep_open_calls(wire.settings, wire.wire)
    shown, shown_at = 0, 0.0  # the open calls last written for `lnk-sandbox status`
    while True:
        time.sleep(SWITCH_SECONDS)
        now = time.monotonic()
        open_calls = max(0, len(wire.open) - len(wire.unasked))
        if wire.settings and open_calls != shown and now - shown_at >= OPEN_CALLS_SECONDS:
            write_open_calls(wire.settings, wire.wire, open_calls)
            shown, shown_at = open_calls, now
        # The log's folded counts are written by the loop (which writes every line),
        # once their window has ended even if no line follows.
        try:
            loop.call_soon_threadsafe(wire.log.flush_due)
        except RuntimeError:
            return  # the loop has ended: the process is ending
        wire.flush_reports()
        if wire.made_listeners():  # a listener made for an addition taken away: closed
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wire.close_taken_away_listeners)
        if wire.dns_wanted():  # an endpoint added to a sandbox that started without DNS
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wire.open_dns)
        if not wire.open:
            wire.log.closing = ""  # every call it closed has its ended line
            continue
        try:
            closing = wire.closing_reason()
        except Exception as error:  # fails closed, and says so
            wire.report_error("the switches could not be read, open calls closed",
                              error)
            closing = "switches-unreadable"
        wire.log.closing = closing
        if closing:
            wire.sever()
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wire.close_all)
            continue
        _end_taken_away(wire, loop)


def _end_taken_away(wire: Wire, loop: asyncio.AbstractEventLoop) -> None:
    """The calls whose way out was taken away (a host `disallow` took): their tunnels
    shut down here, as the kill switch's are, then the calls cancelled on the loop;
    when that cannot be told, every open call (fails closed, and says so)."""
    import contextlib

    try:
        tasks = wire.taken_away()
    except Exception as error:
        wire.report_error("the additions could not be read, open calls closed", error)
        tasks = list(wire.open)
    if tasks:
        wire.sever_calls(tasks)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(wire.end_calls, tasks)


def _report_loop_error(wire: Wire, context: dict[str, object]) -> None:
    """asyncio's report of what no task handled: a cancelled or severed call is
    ordinary work and says nothing; anything else is one line, folded (asyncio's
    own handler printed some 20 lines of traceback for each)."""
    # Both loaded already (the loop runs; the wire is a Wire): no file is opened here,
    # which matters when the error is that none can be.
    import asyncio

    from lnk_common.wire import is_out_of_descriptors

    error = context.get("exception")
    if isinstance(error, (asyncio.CancelledError, ConnectionError)):
        return
    if isinstance(error, OSError) and is_out_of_descriptors(error):
        wire.report("out of descriptors", "out of descriptors: a connection waits in "
                    "the listening queue until one is free (the open-file limit is "
                    "reached)")
        return
    message = str(context.get("message", "error"))
    if isinstance(error, BaseException):
        wire.report_error(message, error)
    else:
        wire.report(message[:80], message[:300].replace("\n", " "))


def _report_thread_error(wire: Wire, hook: threading.ExceptHookArgs) -> None:
    """A thread's error no one caught (a tunnel's splice thread): one line on the wire's
    log, but for a connection ended by its other side."""
    if hook.exc_value is None or isinstance(hook.exc_value, ConnectionError):
        return
    name = hook.thread.name if hook.thread is not None else "a thread"
    wire.report_error(f"{name.split(' ')[0]} ended on an error", hook.exc_value)
