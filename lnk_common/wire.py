"""What every process on a wire shares: its controls and how it relays.

The proxy (lnk_proxy.server) and the loopback relay (lnk_relay) are each a `Wire`: every
call passes `gate()` first (the kill switch, the wire's pause, the calls a minute; each
file looked at on every call), a refusal may pause the wire (lnk_common.controls), open
calls end when the switch or a pause says so (`closed()`, looked at by the process's
watch), and an allowed connection is relayed by splice(2), in the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import functools
import itertools
import math
import os
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from lnk_common import wirestate
from lnk_common.boundedlog import FOLD_SECONDS, Folds
from lnk_common.controls import Controls, SharedControls
from lnk_common.policy import DEFAULT_PAUSE
from lnk_common.wirelog import WireLog

__all__ = ["LINGER_SECONDS", "OUT_OF_DESCRIPTORS", "RETRYABLE_STATUSES", "ByteReader",
           "ByteWriter", "Refused", "Wire", "is_out_of_descriptors", "linger", "no_delay",
           "notify_desktop", "refusal_head"]


class ByteReader(Protocol):
    """A connection's receiving side as the wire uses it: asyncio's StreamReader (the
    relay's) and lnk_proxy.streams.Inbox (the proxy's, on asyncio's protocols) alike."""

    def exception(self) -> BaseException | None: ...

    def at_eof(self) -> bool: ...

    def feed_eof(self) -> None: ...

    async def read(self, n: int = ...) -> bytes: ...


class ByteWriter(Protocol):
    """A connection's sending side as the wire uses it: asyncio's StreamWriter and
    lnk_proxy.streams.Outbox alike."""

    @property
    def transport(self) -> asyncio.WriteTransport: ...

    def write(self, data: bytes) -> None: ...

    def can_write_eof(self) -> bool: ...

    def write_eof(self) -> None: ...

    def close(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = ...) -> Any: ...

    async def drain(self) -> None: ...

# shutdown(2) called with the GIL held (PyDLL): `sever` shuts hundreds of sockets in one
# sweep rather than waiting for the GIL again after each.
_SHUTDOWN = ctypes.PyDLL(None).shutdown
_SHUTDOWN.argtypes = (ctypes.c_int, ctypes.c_int)

# A pipe this large lets one splice move a whole read of a fast connection.
PIPE_BYTES = 1024 * 1024
_F_SETPIPE_SZ = 1031
# What one read takes of a stream's bytes held before a splice: any size would do (the
# bytes are there, each read returns at once); a client's reader holds up to 1 MiB.
_EMPTIED_READ_BYTES = 65536
# A splice thread whose tunnel ended waits this long for the next tunnel's direction
# before it ends: a new thread cost some 300 µs to start here (threading's start waits
# until the thread runs), two a tunnel, more than the rest of a tunnel's setup.
IDLE_THREAD_SECONDS = 30.0
# Idle splice threads kept at most: past a burst (500 tunnels are 1,000 threads) the
# rest end at once, rather than hold the machine's tasks for IDLE_THREAD_SECONDS; a
# sandbox's steady work (a package manager's tens of tunnels at once) stays under it.
MAX_IDLE_THREADS = 128


class _Workers:
    """Threads that each run one blocking job at a time (a direction of a tunnel), kept
    for the next job while idle, up to IDLE_THREAD_SECONDS. Never a bound on the jobs:
    one that finds no idle thread gets a new one (a bounded pool would hold a tunnel
    back behind open ones). A job that raises ends its thread (threading's excepthook
    says so, as it did with a thread a job): the pool starts another when needed."""

    __slots__ = ("idle", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[queue.SimpleQueue[Callable[[], None]]] = []

    def run(self, job: Callable[[], None]) -> None:
        with self.lock:
            inbox = self.idle.pop() if self.idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(inbox,), daemon=True,
                             name="splice").start()
        inbox.put(job)

    def _work(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        job = inbox.get()
        while True:
            job()
            with self.lock:
                if len(self.idle) >= MAX_IDLE_THREADS:
                    return
                self.idle.append(inbox)
            try:
                job = inbox.get(timeout=IDLE_THREAD_SECONDS)
            except queue.Empty:
                with self.lock:
                    if inbox in self.idle:
                        self.idle.remove(inbox)
                        return
                job = inbox.get()  # taken just now: its job is being put


_WORKERS = _Workers()


def _splice_thread(loop: asyncio.AbstractEventLoop, done: asyncio.Future[int], source: int,
                   sink: int, held: bytes, pipe: tuple[int, int]) -> None:
    total = 0
    try:
        if held:
            os.write(sink, held)
            total += len(held)
        total += _splice(source, sink, pipe)
    except OSError:
        pass  # a socket shut down or reset: the normal end of a tunnel
    finally:
        _SHUTDOWN(sink, socket.SHUT_WR)  # no descriptor needed, even when none is left
        _ENDED.put(loop, done, total)


def _settle(done: asyncio.Future[int], total: int) -> None:
    if not done.done():
        done.set_result(total)


class _Ended:
    """Splice threads' ends, handed to their loop in batches: one wake-up of the loop
    for all the ends that come while it is busy, not one each.

    `call_soon_threadsafe` writes a byte to the loop's self-pipe, which is also the
    signal wake-up descriptor. A pause or the kill switch ends every tunnel at once
    (two threads each: 2,000 for 1,000 calls), and a unix socket's buffer counts each
    one-byte write at its full buffer cost, so a few hundred fill it. A signal's byte
    (SIGTERM, the end) is then dropped (Python prints "Exception ignored when trying to
    write to the signal wakeup fd"), and the helper would not stop when told."""

    __slots__ = ("lock", "waiting")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # Per loop: the ends not yet settled; a loop is in it while a wake-up is due.
        self.waiting: dict[asyncio.AbstractEventLoop,
                           list[tuple[asyncio.Future[int], int]]] = {}

    def put(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[int],
            total: int) -> None:
        with self.lock:
            batch = self.waiting.get(loop)
            if batch is not None:  # a wake-up is already due: it takes this one too
                batch.append((done, total))
                return
            self.waiting[loop] = [(done, total)]
        try:
            loop.call_soon_threadsafe(self.settle_all, loop)
        except RuntimeError:  # the loop has ended: the process is ending
            with self.lock:
                self.waiting.pop(loop, None)

    def settle_all(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: every end handed over since its wake-up was asked for."""
        with self.lock:
            batch = self.waiting.pop(loop, [])
        for done, total in batch:
            _settle(done, total)


_ENDED = _Ended()


def _splice(source: int, sink: int, pipe: tuple[int, int]) -> int:
    """source → pipe → sink until the source ends; the pipe (made by the loop before
    the call was allowed, so that no call on the log lacks one) is closed here."""
    read_end, write_end = pipe
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


# The reason a call is refused when the process has no descriptor left for it (its
# open-file limit, or the machine's): said as such, never as the target's fault.
OUT_OF_DESCRIPTORS = "out of descriptors (the wire's open-file limit is reached)"


def is_out_of_descriptors(error: OSError) -> bool:
    return error.errno in (errno.EMFILE, errno.ENFILE)


async def _emptied(reader: ByteReader) -> bytes:
    """What `reader` holds that nothing has read, taken out by its public methods only
    (asyncio's buffer is private, and may change without notice). Its transport's reading
    is paused, so nothing more comes to it: its end is marked (`feed_eof`), and each read
    then returns at once, until it is empty. The reader is never read again: the rest of
    its connection's bytes go by splice(2). A reader whose connection failed (reset) gives
    nothing: its bytes go nowhere, and the splice finds its socket ended, so the call is
    on the log as allowed and ended as before (its first bytes may have gone upstream
    already: a tunnel's ClientHello)."""
    if reader.exception() is not None:
        return b""
    reader.feed_eof()
    held = []
    while chunk := await reader.read(_EMPTIED_READ_BYTES):
        held.append(chunk)
    return b"".join(held)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Splice:
    """What a tunnel's two splice threads need, made before the call is allowed: a
    blocking duplicate of each socket and a pipe each way. Made whole or not at all."""

    __slots__ = ("client_fd", "client_held", "pipes", "upstream_fd", "upstream_held")

    def __init__(self, client_fd: int, client_held: bytes, upstream_fd: int,
                 upstream_held: bytes, pipes: tuple[tuple[int, int], tuple[int, int]]) -> None:
        self.client_fd = client_fd
        self.client_held = client_held
        self.upstream_fd = upstream_fd
        self.upstream_held = upstream_held
        self.pipes = pipes


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


def no_delay(writer: ByteWriter) -> None:
    """Small writes (a response head, then its body) go at once: with Nagle's algorithm
    and a delayed ACK on the other side, a kept-alive connection waited 40 ms each."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)



class Refused(Exception):
    """A call refused: its status, the reason (one line), and how the wire's controls
    take it: `counts` toward a pause (not the kill switch's, a pause's or the limit's
    own), `ordinary` counts once per window for its target (lnk_common.controls: a host
    not listed, which harnesses retry, and an upstream out of reach), `metadata` pauses
    at once, `retry_after` for a 429. `logged`: what the wire's log keeps of it, when
    that must differ from what the program is told (a verb's path may carry a secret:
    the log never quotes one). `final`: no retry can change the answer (the default for
    every status but RETRYABLE_STATUSES'); its head then says so to the SDKs
    (refusal_head)."""

    def __init__(self, status: int, reason: str, *, counts: bool = True,
                 metadata: bool = False, retry_after: float | None = None,
                 logged: str | None = None, ordinary: bool = False,
                 final: bool | None = None) -> None:
        self.status = status
        self.final = status not in RETRYABLE_STATUSES if final is None else final
        self.ordinary = ordinary
        self.reason = reason
        self.logged = reason if logged is None else logged
        self.counts = counts
        self.metadata = metadata
        self.retry_after = retry_after
        super().__init__(reason)


# The statuses of a refusal that a later try may not get: a stalled body (408), the calls
# a minute (429, with Retry-After), an upstream out of reach (502) and this helper's own
# limits of the moment (503: files, held bodies). Every other refusal is final: the kill
# switch, a pause, a host not listed, a refused path or model, a key not set yet.
RETRYABLE_STATUSES = frozenset({408, 429, 502, 503})

# What the providers' SDKs read to stop retrying: the Anthropic and OpenAI SDKs (and so
# Claude Code, Codex's and opencode's clients) honour `x-should-retry: false` before the
# status; Gemini CLI and google-genai retry 408, 429 and 5xx whatever the header says,
# which is why a final refusal is a 4xx other than those (a key not set is 403, not 503).
_FINAL_HEADER = "x-should-retry: false\r\n"

_PHRASES = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict",
            413: "Content Too Large", 414: "URI Too Long", 415: "Unsupported Media Type",
            429: "Too Many Requests", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


def refusal_head(refusal: Refused, kind: str, length: int) -> bytes:
    """The response head of a refusal of ours (the proxy's, the relay's): its status,
    Retry-After for a limit of the moment, `x-should-retry: false` when no retry can
    change it, and Connection: close."""
    retry = (f"Retry-After: {math.ceil(refusal.retry_after)}\r\n"
             if refusal.retry_after is not None else "")
    final = _FINAL_HEADER if refusal.final else ""
    return (f"HTTP/1.1 {refusal.status} {_PHRASES.get(refusal.status, 'Refused')}\r\n"
            f"Content-Type: {kind}\r\n{retry}{final}Content-Length: {length}\r\n"
            "Connection: close\r\n\r\n").encode()


# After a refusal that ends a connection, what the program still sends (a head over the
# limit, a body not read) is read and dropped for at most this long before the close: a
# socket closed with unread data is reset by the kernel, and the reset can reach the
# program before the refusal does (Python's http.client, which sends a whole body before
# it reads, saw "connection reset", not its 403, for an 8 MiB body to a refused path).
LINGER_SECONDS = 2.0
# What one read of what follows a refusal takes.
_LINGER_READ_BYTES = 65536


async def linger(reader: ByteReader, writer: ByteWriter) -> None:
    """After a refusal that ends the connection (the proxy's and the relay's): our side
    closed for writing, then what the program still sends dropped until it closes, for
    at most LINGER_SECONDS, so that it reads its refusal rather than a reset."""
    with contextlib.suppress(OSError, TimeoutError):
        if writer.can_write_eof():
            writer.write_eof()
        await asyncio.wait_for(_drop_until_closed(reader), LINGER_SECONDS)


async def _drop_until_closed(reader: ByteReader) -> None:
    while await reader.read(_LINGER_READ_BYTES):
        pass


def _error_text(error: BaseException) -> str:
    """What an unexpected error's line says of it besides its type and place: an
    OSError's strerror, the text of the errors only our code raises (RuntimeError,
    AssertionError), nothing of any other. Default deny: a parser's message quotes the
    bytes it refused (h11's, a ValueError of int() or of a decoder, a KeyError's key),
    and those are the program's, which never go to stderr or a log (issue 27)."""
    if isinstance(error, OSError):
        return error.strerror or ""
    if type(error) in (RuntimeError, AssertionError):
        return str(error)
    return ""


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
        # Open connections whose first head is not read yet: no call yet (nothing
        # decided, nothing outside), so the switches leave them be; the gate refuses
        # their head when it comes, with its answer and its line on the log.
        self.unasked: set[asyncio.Task[None]] = set()
        # The sockets of open tunnels, for `sever` (under the lock: a descriptor is
        # closed, and its number maybe reused, only once it is out of the set).
        self.tunnel_fds: set[int] = set()
        # The same sockets by the call (task) whose tunnel they are, for `sever_calls`.
        self.call_fds: dict[asyncio.Task[None], tuple[int, int]] = {}
        self.tunnel_lock = threading.Lock()
        # What went wrong that is not a call's ordinary end, said on stderr one line a
        # kind, folded as the log folds (from any thread: the loop's and the splices').
        self.faults = Folds()
        self.fault_lock = threading.Lock()

    # -- what is not ordinary work --------------------------------------------------------

    def report(self, kind: str, message: str) -> None:
        """One line on stderr for what is not a call's ordinary end (a bug, a resource
        gone): the first lines of a kind whole, the rest counted (`flush_reports`)."""
        now = time.time()
        with self.fault_lock:
            due = self.faults.due(now)
            admitted = self.faults.admit(kind, now)
        self._say_counts(due)
        if admitted:
            self.say(f"lnk-sandbox: wire {self.wire or '-'}: {message}")

    def flush_reports(self, *, every: bool = False) -> None:
        """Say the counts of folded reports whose window ended (`every`: all, at exit)."""
        with self.fault_lock:
            due = self.faults.all() if every else self.faults.due(time.time())
        self._say_counts(due)

    def _say_counts(self, counts: list[tuple[str, int]]) -> None:
        for kind, count in counts:
            self.say(f"lnk-sandbox: wire {self.wire or '-'}: … and {count} more like this "
                     f"within {FOLD_SECONDS:g} s: {kind}")

    def report_error(self, where: str, error: BaseException) -> None:
        """An exception nothing expected: one line (its type, text and where it was
        raised), folded by type and place; never a traceback, never silent."""
        frame = error.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        place = (f" at {os.path.basename(frame.tb_frame.f_code.co_filename)}:{frame.tb_lineno}"
                 if frame is not None else "")
        kind = f"{where}: {type(error).__name__}{place}"
        text = _error_text(error).replace("\n", " ")[:200]
        self.report(kind, f"{kind}: {text}" if text else kind)

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
        try:
            wait = self.controls.admit(time.time())
        except OSError as error:  # the wire's window could not be opened: no call goes
            raise Refused(503, OUT_OF_DESCRIPTORS if is_out_of_descriptors(error) else
                          f"the wire's window of calls cannot be read ({error.strerror})",
                          counts=False) from None
        if wait is not None:
            raise Refused(429, f"more than {self.controls.calls_per_minute} calls in a minute "
                               f"on this wire; try again in {int(wait)} s", counts=False,
                          retry_after=wait)

    def closed(self) -> bool:
        """Whether open calls must end now (the kill switch, or the wire paused)."""
        return bool(self.closing_reason())

    def closing_reason(self) -> str:
        """What ends open calls now: "kill-switch", "pause", or "" (nothing); the word
        their ended lines carry (`WireLog.closing`)."""
        if not self.settings:
            return ""
        if wirestate.is_stopped(self.settings):
            return "kill-switch"
        return "pause" if wirestate.paused(self.settings, self.wire) is not None else ""

    def taken_away(self) -> list[asyncio.Task[None]]:
        """The open calls whose way out was taken away since they were allowed (a
        proxy's: a host `lnk-sandbox disallow` took from the wire's additions); asked
        by the process's watch, from its thread. None here."""
        return []

    def made_listeners(self) -> bool:
        """Whether this process made listeners inside while it ran (a proxy's, for the
        endpoints `lnk-sandbox allow --tcp` added), which the watch has the loop look
        at (`close_taken_away_listeners`). None here."""
        return False

    def close_taken_away_listeners(self) -> None:
        """Close the listeners made for additions taken away since (on the loop)."""

    def dns_wanted(self) -> bool:
        """Whether the sandbox's DNS must be made now (a proxy's whose sandbox started
        without one, once `lnk-sandbox allow --tcp` added an endpoint), which the watch
        has the loop do (`open_dns`). Never here."""
        return False

    def open_dns(self) -> None:
        """Make and serve the sandbox's DNS (on the loop)."""

    def sever_calls(self, tasks: list[asyncio.Task[None]]) -> None:
        """`sever`, for the tunnels of `tasks` only (a host taken away), from any thread:
        their sockets shut down before the loop cancels the calls. Each is marked first:
        a relay that sees its socket shut writes its ended line at once, maybe before
        the loop runs `end_calls`, and that line must say `closed=taken-away` too."""
        for task in tasks:
            if task in self.open:
                self.log.closed_calls[task] = "taken-away"
        with self.tunnel_lock:
            for task in tasks:
                for fd in self.call_fds.get(task, ()):
                    _SHUTDOWN(fd, socket.SHUT_RDWR)

    def end_calls(self, tasks: list[asyncio.Task[None]]) -> None:
        """Cancel those of `tasks` still open (on the loop), as close_all does; their
        ended lines say `closed=taken-away` (`sever_calls` marked them). A task that ended
        between that mark and now leaves no mark behind."""
        for task in tasks:
            if task in self.open:
                task.cancel()
            else:
                self.log.closed_calls.pop(task, None)

    def close_all(self) -> None:
        for task in list(self.open):
            if task not in self.unasked:
                task.cancel()

    def asked(self) -> None:
        """The current connection's first head is read: from now on it is a call, which
        the kill switch and a pause close."""
        task = asyncio.current_task()
        if task is not None:
            self.unasked.discard(task)

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
        self.log.closing = "pause"
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
            try:
                why = self.controls.refusal(time.time(), target, ordinary=refusal.ordinary)
            except OSError as error:  # the window file could not be opened: said, once
                self.report("refusal not counted", "a refusal could not be counted toward a "
                            f"pause: the wire's window cannot be opened ({error.strerror})")
                return
            if why:
                self._pause_now(why)

    def count_dns_refusal(self, name: str) -> None:
        """A name the sandbox's DNS refused: pauses the wire when too many distinct
        names were (a threshold of its own, looser than a call's: lnk_common.controls)."""
        why = self.controls.dns_refusal(time.time(), name)
        if why:
            self._pause_now(why)

    async def hold(self, writer: ByteWriter, work: Awaitable[None], *,
                   asked: bool = True) -> None:
        """Serve one client connection (`work`) as an open call: counted among the open
        calls, which close_all cancels (`asked` False: only once `work` says `asked()`);
        its socket closed at the end, whatever happens."""
        task = asyncio.current_task()
        if task is not None:
            self.open.add(task)
            if not asked:
                self.unasked.add(task)
        no_delay(writer)
        try:
            await work
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the other side closed, or went quiet: the normal end of a call
        except asyncio.CancelledError:
            # Closed by the kill switch, a pause or the helper's end: ordinary work, and
            # the task ends as any other (a cancelled one printed a traceback of its own
            # in asyncio's stream callback, one for each of a stop's open calls).
            pass
        except Exception as error:
            self.failed(error)
        finally:
            writer.close()
            if task is not None:
                self.open.discard(task)
                self.unasked.discard(task)
                self.log.closed_calls.pop(task, None)

    def failed(self, error: Exception) -> None:
        """What ended a call past its own handling, said: a refusal raised that far, or
        no descriptor left, on the log; any other error in one line (a bug: the call
        closed, others go on)."""
        if isinstance(error, Refused):
            self.log.write("refused", "-", f"reason={error.logged}")
        elif isinstance(error, OSError) and is_out_of_descriptors(error):
            self.log.write("refused", "-", f"reason={OUT_OF_DESCRIPTORS}")
        elif isinstance(error, OSError):
            self.report_error("a call ended on an error", error)
        else:
            self.report_error("a call ended on an unexpected error", error)

    async def splice_ends(self, reader: ByteReader, writer: ByteWriter,
                          up_reader: ByteReader | None,
                          up_writer: ByteWriter | socket.socket) -> Splice:
        """Ready a tunnel for `relay`, before its call is allowed: the streams'
        transports paused (what their buffers hold is sent on first by the threads), a
        blocking duplicate of each socket and a pipe each way. Out of descriptors: every
        one made is closed again and the call refused (with the reason), so that a call
        on the log as allowed is one that goes, and a failure leaks nothing. The
        upstream may be a bare socket (up_reader None; lnk_proxy.upstream.open_socket):
        its own descriptor is taken, made blocking, and closed by `relay` (the socket
        object no longer holds it; the caller closes it on a refusal here, as it
        would the stream)."""
        made: list[int] = []
        try:
            held = []
            streams = [(reader, writer)]
            if up_reader is not None and not isinstance(up_writer, socket.socket):
                streams.append((up_reader, up_writer))
            for stream_reader, stream_writer in streams:
                stream_writer.transport.pause_reading()  # type: ignore[attr-defined]
                await stream_writer.drain()
                held.append(await _emptied(stream_reader))
                made.append(os.dup(stream_writer.get_extra_info("socket").fileno()))
                os.set_blocking(made[-1], True)
            pipes = []
            for _ in range(2):
                pipe = os.pipe()
                made.extend(pipe)
                with contextlib.suppress(OSError):
                    fcntl.fcntl(pipe[1], _F_SETPIPE_SZ, PIPE_BYTES)
                pipes.append(pipe)
        except OSError as error:
            _close_all(made)
            if is_out_of_descriptors(error):
                raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
            raise
        except BaseException:
            _close_all(made)
            raise
        if isinstance(up_writer, socket.socket):  # nothing can fail past here
            up_writer.setblocking(True)
            made.insert(1, up_writer.detach())
            held.append(b"")
        return Splice(made[0], held[0], made[1], held[1], (pipes[0], pipes[1]))

    async def relay(self, ends: Splice, up_writer: ByteWriter | None
                    ) -> tuple[int, int]:
        """Both directions of a tunnel readied by `splice_ends`, each by splice(2) in a
        thread of its own (an idle one of an ended tunnel's, else a new one: _Workers):
        the bytes go socket → pipe → socket inside the kernel, never through Python
        (asyncio streams managed a third of a direct connection's throughput here). A
        cancel (the kill switch, a pause, the end) ends the tunnel as its close would:
        both sockets shut down, the threads waited for, the counts returned."""
        loop = asyncio.get_running_loop()
        client_fd, upstream_fd = ends.client_fd, ends.upstream_fd
        task = asyncio.current_task()
        with self.tunnel_lock:
            self.tunnel_fds.update((client_fd, upstream_fd))
            if task is not None:
                self.call_fds[task] = (client_fd, upstream_fd)
        done: list[asyncio.Future[int]] = [loop.create_future(), loop.create_future()]
        directions = ((client_fd, upstream_fd, ends.client_held, ends.pipes[0]),
                      (upstream_fd, client_fd, ends.upstream_held, ends.pipes[1]))
        started = 0
        try:
            for index, (source, sink, held, pipe) in enumerate(directions):
                _WORKERS.run(functools.partial(_splice_thread, loop, done[index], source,
                                               sink, held, pipe))
                started += 1
            await asyncio.wait(done)  # not gather: a cancel here leaves the counts be
        except asyncio.CancelledError:
            pass  # closed by the kill switch, a pause or the helper's end: it ends here
        finally:
            # A thread that could not start never closes its pipe: closed here.
            _close_all([fd for _, _, _, pipe in directions[started:] for fd in pipe])
            for index in range(started, 2):
                _settle(done[index], 0)
            for fd in (client_fd, upstream_fd):
                _SHUTDOWN(fd, socket.SHUT_RDWR)
            # The threads end at once now; wait for them whatever comes meanwhile: the
            # watch cancels open calls again every SWITCH_SECONDS, and a cancel taken
            # here once left both descriptors open and in `tunnel_fds` (where `sever`
            # would shut down whatever socket later took their numbers).
            while not all(future.done() for future in done):
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait(done)
            with self.tunnel_lock:
                self.tunnel_fds.difference_update((client_fd, upstream_fd))
                if task is not None:
                    self.call_fds.pop(task, None)
                os.close(client_fd)
                os.close(upstream_fd)
            if up_writer is not None:
                up_writer.close()
        # The bytes each way, also of a call the switch closed: its `ended` line says
        # what it moved (a cancel through gather lost them: sent=0 received=0).
        return done[0].result(), done[1].result()
