"""What every process on a wire shares: its controls and how it relays.

The proxy (lnk_proxy.server) and the loopback relay (lnk_relay) are each a `Wire`: every
call passes `gate()` first (the kill switch, the wire's pause, the calls a minute; each
file looked at on every call), a refusal may pause the wire (lnk_proxy.controls), open
calls end when the switch or a pause says so (`closed()`, looked at by the process's
watch), and an allowed connection is relayed by splice(2), in the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable

from lnk_common import wirestate
from lnk_common.policy import DEFAULT_PAUSE
from lnk_common.wirelog import WireLog
from lnk_proxy.controls import Controls, SharedControls

__all__ = ["Refused", "Wire", "no_delay", "notify_desktop"]

# shutdown(2) called with the GIL held (PyDLL): `sever` shuts hundreds of sockets in one
# sweep rather than waiting for the GIL again after each.
_SHUTDOWN = ctypes.PyDLL(None).shutdown
_SHUTDOWN.argtypes = (ctypes.c_int, ctypes.c_int)

# A pipe this large lets one splice move a whole read of a fast connection.
PIPE_BYTES = 1024 * 1024
_F_SETPIPE_SZ = 1031


def _splice_thread(loop: asyncio.AbstractEventLoop, done: asyncio.Future[int], source: int,
                   sink: int, held: bytes) -> None:
    total = 0
    try:
        if held:
            os.write(sink, held)
            total += len(held)
        total += _splice(source, sink)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            socket.socket(fileno=os.dup(sink)).shutdown(socket.SHUT_WR)
        loop.call_soon_threadsafe(_settle, done, total)


def _settle(done: asyncio.Future[int], total: int) -> None:
    if not done.done():
        done.set_result(total)


def _splice(source: int, sink: int) -> int:
    import fcntl

    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_end, _F_SETPIPE_SZ, PIPE_BYTES)
    moved = 0
    try:
        while True:
            count = os.splice(source, write_end, PIPE_BYTES, flags=os.SPLICE_F_MOVE)
            if count == 0:
                return moved
            while count:
                out = os.splice(read_end, sink, count, flags=os.SPLICE_F_MOVE)
                count -= out
                moved += out
    finally:
        os.close(read_end)
        os.close(write_end)


def notify_desktop(title: str, body: str) -> None:
    """A desktop notification where there is a desktop (notify-send), never waited on."""
    import shutil
    import subprocess

    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return
    program = shutil.which("notify-send")
    if program:
        with contextlib.suppress(OSError):
            subprocess.Popen([program, title, body], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def no_delay(writer: asyncio.StreamWriter) -> None:
    """Small writes (a response head, then its body) go at once: with Nagle's algorithm
    and a delayed ACK on the other side, a kept-alive connection waited 40 ms each."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)



class Refused(Exception):
    """A call refused: its status, the reason (one line), and how the wire's controls
    take it: `counts` toward a pause (not the kill switch's, a pause's or the limit's
    own), `metadata` pauses at once, `retry_after` for a 429."""

    def __init__(self, status: int, reason: str, *, counts: bool = True,
                 metadata: bool = False, retry_after: float | None = None) -> None:
        self.status = status
        self.reason = reason
        self.counts = counts
        self.metadata = metadata
        self.retry_after = retry_after
        super().__init__(reason)


class Wire:
    """A process's share of a wire: its log, its controls and its open calls."""

    def __init__(self, *, log: WireLog, settings: str = "", wire: str = "",
                 controls: Controls | SharedControls | None = None,
                 say: Callable[[str], None] | None = None) -> None:
        self.log = log
        self.settings = settings
        self.wire = wire
        self.controls = controls or Controls(calls_per_minute=0, pause=DEFAULT_PAUSE)
        self.say = say or (lambda _message: None)
        self.ids = itertools.count(1)
        self.open: set[asyncio.Task[None]] = set()
        # The sockets of open tunnels, for `sever` (under the lock: a descriptor is
        # closed, and its number maybe reused, only once it is out of the set).
        self.tunnel_fds: set[int] = set()
        self.tunnel_lock = threading.Lock()

    # -- the wire's controls ------------------------------------------------------------

    def gate(self, *, counted: bool = True) -> None:
        """Before anything of a call: the kill switch, the wire's pause, the calls a
        minute (each file looked at on every call; a malformed one stops all the same).
        `counted` False: not a call that goes out (a DNS answer given here)."""
        if not self.settings:
            return
        if wirestate.is_stopped(self.settings):
            raise Refused(403, "the kill switch is on (lnk-sandbox stop): no call goes out; "
                               "`lnk-sandbox stop --clear` lifts it", counts=False)
        pause = wirestate.paused(self.settings, self.wire)
        if pause is not None:
            raise Refused(403, f"this wire ({self.wire}) is paused since "
                               f"{pause.get('since', 'unknown')}: "
                               f"{pause.get('reason', 'unreadable pause')}; "
                               f"`lnk-sandbox resume {self.wire}` lifts it", counts=False)
        if not counted:
            return
        wait = self.controls.admit(time.time())
        if wait is not None:
            raise Refused(429, f"more than {self.controls.calls_per_minute} calls in a minute "
                               f"on this wire; try again in {int(wait)} s", counts=False,
                          retry_after=wait)

    def closed(self) -> bool:
        """Whether open calls must end now (the kill switch, or the wire paused)."""
        return bool(self.settings) and (
            wirestate.is_stopped(self.settings)
            or wirestate.paused(self.settings, self.wire) is not None)

    def close_all(self) -> None:
        for task in list(self.open):
            task.cancel()

    def sever(self) -> None:
        """Shut every open tunnel's sockets down at once, from any thread: the program
        sees each closed and the splice threads end, before the event loop (which may
        wait for the GIL among hundreds of busy splice threads) cancels their tasks.
        shutdown(2) through a ctypes.PyDLL keeps the GIL for the whole sweep."""
        with self.tunnel_lock:
            for fd in self.tunnel_fds:
                _SHUTDOWN(fd, socket.SHUT_RDWR)

    def _pause_now(self, reason: str) -> None:
        if not self.settings or wirestate.paused(self.settings, self.wire) is not None:
            return
        wirestate.pause(self.settings, self.wire, reason)
        self.log.write("paused", "-", f"reason={reason}")
        self.say(f"lnk-sandbox: the wire {self.wire} is paused: {reason}; the program keeps "
                 f"running with no way out; `lnk-sandbox resume {self.wire}` lifts it")
        notify_desktop(f"Link paused the wire {self.wire}", reason)
        self.sever()
        self.close_all()

    async def drain(self, seconds: float) -> None:
        """Let open calls finish (the sandbox is gone, so their sockets are closing)
        and write their ended lines; cancel what is left after `seconds`."""
        if self.open:
            _, pending = await asyncio.wait(set(self.open), timeout=seconds)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=seconds)

    def count_refusal(self, target: str, refusal: Refused) -> None:
        """A refusal that may pause the wire: at once for a metadata service, else when
        refusals or refused targets pile up (not the controls' own refusals)."""
        if refusal.metadata:
            self._pause_now(f"an attempt at a cloud metadata service ({target})")
        elif refusal.counts:
            why = self.controls.refusal(time.time(), target)
            if why:
                self._pause_now(why)

    def count_dns_refusal(self, name: str) -> None:
        """A name the sandbox's DNS refused: pauses the wire when too many distinct
        names were (a threshold of its own, looser than a call's: lnk_proxy.controls)."""
        why = self.controls.dns_refusal(time.time(), name)
        if why:
            self._pause_now(why)

    async def hold(self, writer: asyncio.StreamWriter, work: Awaitable[None]) -> None:
        """Serve one client connection (`work`) as an open call: counted among the open
        calls, which close_all cancels; its socket closed at the end, whatever happens."""
        task = asyncio.current_task()
        if task is not None:
            self.open.add(task)
        no_delay(writer)
        try:
            await work
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()
            if task is not None:
                self.open.discard(task)

    async def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter
                     ) -> tuple[int, int]:
        """Both directions of a tunnel, each by splice(2) in a thread of its own: the bytes
        go socket → pipe → socket inside the kernel, never through Python (asyncio streams
        managed a third of a direct connection's throughput here). The streams' transports
        are paused first; what their buffers already hold is sent on first."""
        loop = asyncio.get_running_loop()
        ends = []
        for stream_reader, stream_writer in ((reader, writer), (up_reader, up_writer)):
            stream_writer.transport.pause_reading()  # type: ignore[attr-defined]
            await stream_writer.drain()
            held = bytes(stream_reader._buffer)  # type: ignore[attr-defined]
            stream_reader._buffer.clear()  # type: ignore[attr-defined]
            fd = os.dup(stream_writer.get_extra_info("socket").fileno())
            os.set_blocking(fd, True)
            ends.append((fd, held))
        (client_fd, client_held), (upstream_fd, upstream_held) = ends
        with self.tunnel_lock:
            self.tunnel_fds.update((client_fd, upstream_fd))
        done: list[asyncio.Future[int]] = [loop.create_future(), loop.create_future()]
        for index, (source, sink, held) in enumerate(
            ((client_fd, upstream_fd, client_held), (upstream_fd, client_fd, upstream_held))
        ):
            threading.Thread(target=_splice_thread, daemon=True,
                             args=(loop, done[index], source, sink, held)).start()
        try:
            sent, received = await asyncio.gather(*done)
        finally:
            for fd in (client_fd, upstream_fd):
                with contextlib.suppress(OSError):
                    socket.socket(fileno=os.dup(fd)).shutdown(socket.SHUT_RDWR)
            if not all(future.done() for future in done):
                await asyncio.wait(done)
            with self.tunnel_lock:
                self.tunnel_fds.difference_update((client_fd, upstream_fd))
                os.close(client_fd)
                os.close(upstream_fd)
            up_writer.close()
        return sent, received
