"""Ask the person one question, every available way at once; the first answer wins.

Ways (lnk_ask.ways): a dialog on the person's screen (zenity; notify-send with actions;
osascript on macOS), the controlling terminal (/dev/tty, with a code typed back), and
the queue in Link's settings (lnk_ask.queue, always). They run at once, not one after
another: the person is at one of them, and which one is not known here (at the screen,
in the terminal that started the harness, or away, answering from another shell with
`lnk-sandbox answer`). In turn, a person away from the screen would wait out the
dialog's time before the terminal asked, and the two minutes are for the whole question.
The dialog is first in the sense that it is shown first and is where a person at a
screen looks; the queue is always there, since it is what makes a box or an agent in the
background askable at all.

No answer in `timeout` seconds is no. Silence is never yes; an error is never yes:
a way that fails (no display, a terminal in the background, a dialog that crashed)
drops out and the question stays open on the others; an error of the queue, which is
where the question is decided, is no at once. The decision is made once, in the queue
(`AskQueue.decide`, by link(2)), whichever way it came.

`ask` blocks (run it in a thread); `ask_async` runs `lnk-sandbox-ask` as a child
process for an asyncio caller (the proxy), so a question never stops its loop and the
terminal's job-control signals never reach it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import select
import signal
import struct
import subprocess
import sys
import termios
import time

from lnk_ask import text, ways
from lnk_ask.queue import AskQueue, QueueError
from lnk_common.boundedlog import BoundedLog, clip
from lnk_common.policy import is_name

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "DEFAULT_TIMEOUT_SECONDS",
    "HOWS",
    "LOG_PATH",
    "MAX_TIMEOUT_SECONDS",
    "Answer",
    "AskUsageError",
    "ask",
    "ask_async",
    "command",
    "log_path",
]

# Two minutes without an answer is no (the issue; a tool call waits this long at most).
DEFAULT_TIMEOUT_SECONDS = 120
# A question holds a call (and its sandbox's tool) while it waits; past a quarter of an
# hour the person has gone, and a call held longer is a resource held for nothing.
MAX_TIMEOUT_SECONDS = 900
# How often the queue and a dialog's process are looked at: an answer from the queue is
# taken within this, and a loop of ten wakes a second costs nothing.
POLL_SECONDS = 0.1
# A title and what a yes allows go to `lnk-sandbox-ask` in argv: each is shown cut far
# shorter (MAX_TITLE_CHARS, MAX_ALLOWS_CHARS), and argv is bounded (a tool's name may be
# as long as the program likes); cut here, saying so.
MAX_ARGV_TEXT_CHARS = 1024
# The log of every question and answer, under the settings root (a BoundedLog).
LOG_PATH = ("sandbox", "asks.log")
# How an answer came.
HOWS = ("dialog", "terminal", "queue", "timeout", "error")


class AskUsageError(ValueError):
    """The question cannot be asked as given (a bad wire, title or timeout): exit 2."""


class Answer:
    """The answer: `answer` "yes" or "no", `how` one of HOWS, the question's `id` (empty
    when it was never queued), and for an error its one-line `reason`."""

    __slots__ = ("answer", "how", "id", "reason")

    def __init__(self, answer: str, how: str, ident: str = "", reason: str = "") -> None:
        self.answer = answer if answer == "yes" and how not in ("timeout", "error") else "no"
        self.how = how
        self.id = ident
        self.reason = reason

    @property
    def yes(self) -> bool:
        return self.answer == "yes"

    def as_json(self) -> dict[str, str]:
        found = {"answer": self.answer, "how": self.how}
        if self.id:
            found["id"] = self.id
        if self.reason:
            found["reason"] = self.reason
        return found

    def __repr__(self) -> str:
        return f"Answer({self.answer!r}, {self.how!r}, {self.id!r}, {self.reason!r})"


def log_path(settings_root: str) -> str:
    return os.path.join(settings_root, *LOG_PATH)


def check_usage(wire: str, title: str, timeout: float) -> None:
    if not is_name(wire):
        raise AskUsageError(f"--wire {text.printable(wire, 80)}: use letters, digits, "
                            "'.', '_' and '-'")
    if not title.strip():
        raise AskUsageError("a question needs a title")
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        raise AskUsageError(f"--timeout is 1 to {MAX_TIMEOUT_SECONDS} seconds")


def default_allows(wire: str, title: str) -> str:
    """What a yes allows when the caller does not say (`lnk-sandbox-ask` run by hand)."""
    return f"what the wire {wire} asks: {title}"


def ask(settings_root: str, wire: str, title: str, question: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS, *, env: Mapping[str, str] | None = None,
        platform: str = sys.platform, terminal: str = "/dev/tty", whole: bool = False,
        allows: str = "", tell: Callable[[str], None] | None = None) -> Answer:
    """Ask, block until the first answer or the timeout, and return it. Never raises but
    AskUsageError (bad arguments); every other failure, an interruption included
    (KeyboardInterrupt, SystemExit), is Answer("no", "error"). `whole`: the question is
    shown up to MAX_WHOLE_QUESTION_CHARS, not cut at MAX_QUESTION_CHARS (a page's URL).
    `allows`: what a yes allows, in the caller's words (Link's, never a sandbox's alone:
    "sandbox W, server demo, tool wipe"), shown on the terminal's code line, in the
    dialog and in the queue (default_allows when empty). `tell`: given one line at once
    when the question can be answered from the queue only (no screen, no terminal)."""
    check_usage(wire, title, timeout)
    shown_title = text.printable(title, text.MAX_TITLE_CHARS)
    shown_question = text.printable(question, text.MAX_WHOLE_QUESTION_CHARS if whole
                                      else text.MAX_QUESTION_CHARS)
    kept_question = text.printable(question, text.MAX_KEPT_QUESTION_CHARS)
    shown_allows = text.printable(allows or default_allows(wire, title),
                                    text.MAX_ALLOWS_CHARS)
    environment = os.environ if env is None else env
    started = time.monotonic()
    deadline = started + timeout
    queue = AskQueue(settings_root)
    try:
        log = BoundedLog(log_path(settings_root))
    except OSError as error:
        return Answer("no", "error", reason=f"the log of questions cannot be opened: "
                                            f"{error.strerror}")
    try:
        try:
            ident = queue.open_question(wire, shown_title, shown_question,
                                        time.time() + timeout, allows=shown_allows,
                                        whole=kept_question)
        except QueueError as error:
            _log(log, wire, "-", "asked", shown_title, shown_question)
            _log(log, wire, "-", "no", "error", text.printable(str(error)))
            return Answer("no", "error", reason=str(error))
        _log(log, wire, ident, "asked", shown_title, shown_question)
        try:
            answer, how = _wait(queue, ident, wire, _Shown(shown_title, shown_question,
                                                           kept_question, shown_allows),
                                started, deadline, environment, platform, terminal, tell)
            found = Answer(answer, how, ident)
        except BaseException as error:  # an interruption, a failure: no, and said so
            reason = "interrupted" if isinstance(error, (KeyboardInterrupt, SystemExit)) \
                else f"{type(error).__name__}: {error}"
            try:
                answer, how = queue.decide(ident, "no", "error")
            except QueueError:
                answer, how = "no", "error"
            found = Answer(answer, how, ident, reason if how == "error" else "")
            _log(log, wire, ident, found.answer, found.how, text.printable(found.reason))
            with contextlib.suppress(QueueError):
                queue.close_question(ident)
            # An interruption (SIGTERM, SIGHUP, Ctrl-C in the console script) is an
            # answer too: no, returned so the script prints it and exits 1.
            return found
        _log(log, wire, ident, found.answer, found.how, "")
        with contextlib.suppress(QueueError):
            queue.close_question(ident)
        return found
    finally:
        log.close()


class _Shown:
    """A question's texts as the ways show them, printable ASCII: the title, the question as
    a dialog shows it, the question kept whole (what the terminal lays out), what a yes
    allows."""

    __slots__ = ("allows", "kept", "question", "title")

    def __init__(self, title: str, question: str, kept: str, allows: str) -> None:
        self.title = title
        self.question = question
        self.kept = kept
        self.allows = allows


def _log(log: BoundedLog, wire: str, ident: str, event: str, first: str,
         second: str) -> None:
    """TIME\\tWIRE\\tID\\tEVENT\\t… : `asked TITLE QUESTION`, or `yes|no HOW [REASON]`.
    Every field is given printable ASCII already (no tab, no newline)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    fields = [stamp, wire, ident, event, first, second]
    line = clip("\t".join(fields).rstrip("\t"))
    with contextlib.suppress(OSError):
        log.append(line.encode() + b"\n")


# Linux's TIOCGDEV (_IOR('T', 0x32, unsigned int)): the device number of the terminal a
# descriptor is on, the real one behind /dev/tty (whose own st_rdev, 5:0, is the same for
# every terminal). Elsewhere the descriptor's st_rdev is taken.
_TIOCGDEV = 0x80045432
# Keys typed before a question are read aside when it is shown (they are not an answer)
# and given back when it closes: at most the line discipline's buffer (4 KiB).
MAX_TYPEAHEAD_BYTES = 4096
# A terminal that does not take the question's output in this long (its output stopped:
# Ctrl-S, or tcflow(TCOOFF) from any program that shares it) drops out of the ways; the
# question goes on on the others.
WRITE_SECONDS = 2.0


class _Terminal:
    """The controlling terminal, opened anew as /dev/tty (never stdin or stdout, which a
    sandboxed program may share and redirect), used only while this process is in the
    terminal's foreground and holds the terminal's lock: one question at a time on it,
    the lock a file in the asks folder (AskQueue.terminal_lock), never the terminal
    itself, which every sandbox can reach and lock. Keys typed before the question was
    shown are read aside then (not an answer) and given back at the close (TIOCSTI, ours
    to use outside a sandbox), or shown when they cannot be."""

    __slots__ = ("code", "echoed", "fd", "kept", "lock", "locked", "shown", "typed")

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC | os.O_NONBLOCK)
        self.lock: int | None = None
        self.locked = False
        self.shown = False
        self.typed = bytearray()
        self.kept = b""
        self.echoed = False
        self.code = f"{secrets.randbelow(10 ** ways.CODE_DIGITS):0{ways.CODE_DIGITS}d}"
        if not os.isatty(self.fd):
            self.close()
            raise OSError("not a terminal")

    def foreground(self) -> bool:
        try:
            return os.tcgetpgrp(self.fd) == os.getpgrp()
        except OSError:
            return False

    def device(self) -> int:
        try:
            found = fcntl.ioctl(self.fd, _TIOCGDEV, b"\0" * 4)
            return int(struct.unpack("I", found)[0])
        except OSError:
            return os.fstat(self.fd).st_rdev

    def size(self) -> tuple[int, int]:
        """(columns, rows) as the terminal says now (TIOCGWINSZ), or the common size."""
        try:
            rows, columns = struct.unpack("HHHH", fcntl.ioctl(
                self.fd, termios.TIOCGWINSZ, b"\0" * 8))[:2]
        except OSError:
            rows = columns = 0
        return (columns, rows) if columns and rows else ways.FALLBACK_TERMINAL_SIZE

    def try_show(self, queue: AskQueue, ident: str,
                 render: Callable[[int, int], str | None]) -> bool:
        """Take the terminal's lock and show the question, laid out for its size now;
        False while another question holds it or this process is not in the foreground.
        OSError when the terminal cannot ask this question (too small, its lock not to be
        had, its output stopped): said on it where it can be, and it drops out."""
        if not self.foreground():
            return False
        if self.lock is None:
            try:
                self.lock = queue.terminal_lock(self.device())
            except QueueError as error:
                with contextlib.suppress(OSError):
                    self._write(f"\r\n{ways.LINK_MARK} question {ident} is not asked here "
                                f"(see lnk-sandbox asks): {text.printable(str(error), 200)}"
                                "\r\n")
                raise OSError(str(error)) from None
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.locked = True
        columns, rows = self.size()
        prompt = render(columns, rows)
        if prompt is None:
            self._write(ways.terminal_too_small(ident, columns))
            raise OSError("the terminal is too small to show the question")
        self.kept = self._take_typeahead()
        self.shown = True
        self._write(prompt)
        return True

    def _take_typeahead(self) -> bytes:
        """What waits to be read, taken aside: a line begun but not ended too, which a
        canonical terminal gives only when it is not canonical (for the instant of the
        read; its settings put back as they were)."""
        try:
            settings = termios.tcgetattr(self.fd)
        except termios.error:
            return b""
        canonical = bool(settings[3] & termios.ICANON)
        self.echoed = bool(settings[3] & termios.ECHO)
        if canonical:
            # VMIN 1, VTIME 0: a read of the program's that begins in this instant waits
            # for a key as it would have (VMIN 0 would give it 0 bytes: an end of file).
            # Ours does not wait: its open file description is non-blocking.
            raw = [*settings[:6], list(settings[6])]
            raw[3] = settings[3] & ~termios.ICANON
            raw[6][termios.VMIN] = 1
            raw[6][termios.VTIME] = 0
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.fd, termios.TCSANOW, raw)
        kept = bytearray()
        try:
            while len(kept) < MAX_TYPEAHEAD_BYTES:
                try:
                    data = os.read(self.fd, MAX_TYPEAHEAD_BYTES - len(kept))
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                kept += data
        finally:
            if canonical:
                with contextlib.suppress(termios.error):
                    termios.tcsetattr(self.fd, termios.TCSANOW, settings)
        return bytes(kept)

    def feed(self) -> str | None:
        """Read what was typed: "yes" for the code and Enter, "no" for any other line,
        None while a line is being typed. OSError when the terminal is gone."""
        if not self.foreground():
            return None
        try:
            data = os.read(self.fd, 256)
        except BlockingIOError:
            return None
        if not data:
            raise OSError("the terminal closed")
        for byte in data:
            if byte in (0x0A, 0x0D):
                return "yes" if ways.code_matches(bytes(self.typed), self.code) else "no"
            if byte in (0x7F, 0x08):  # a raw-mode terminal: the line's editing is ours
                del self.typed[-1:]
            elif byte in (0x03, 0x04, 0x1B):  # Ctrl-C, Ctrl-D, Escape in raw mode
                return "no"
            else:
                self.typed.append(byte)
            if len(self.typed) > ways.MAX_TYPED_BYTES:
                return "no"
        return None

    def _write(self, message: str) -> None:
        """Write it all within WRITE_SECONDS, or OSError."""
        data = message.encode("ascii", "replace")
        end = time.monotonic() + WRITE_SECONDS
        while data:
            try:
                data = data[os.write(self.fd, data):]
            except BlockingIOError:
                left = end - time.monotonic()
                if left <= 0:
                    raise OSError("the terminal does not take output (stopped?)") from None
                select.select([], [self.fd], [], min(left, POLL_SECONDS))

    def _give_back(self) -> None:
        """The keys typed before the question, put back where they were typed (TIOCSTI
        from outside every sandbox, on our own controlling terminal), or, where the
        system refuses it (dev.tty.legacy_tiocsti = 0), shown so they can be typed
        again; only counted when they were typed unseen (echo off: a password)."""
        given = 0
        try:
            for byte in self.kept:
                fcntl.ioctl(self.fd, termios.TIOCSTI, bytes([byte]))
                given += 1
        except OSError:
            left = self.kept[given:].decode("utf-8", "surrogateescape")
            shown = text.printable(left, 400) if self.echoed else f"{len(left)} keys"
            self._write(f"{ways.LINK_MARK} typed before the question and not given back "
                        f"(the system refuses TIOCSTI): {shown}\r\n")

    def close(self, outcome: str = "") -> None:
        """End the question here: say how it ended, give back the keys typed before it,
        let go of the lock. A line half typed at the prompt was typed for the question
        and goes with it; nothing else is flushed (what was typed to the program and not
        read here stays for it)."""
        with contextlib.suppress(OSError):
            if self.shown and outcome:
                self._write(f"\r\n{ways.LINK_MARK} {outcome}\r\n")
            if self.kept:
                self._give_back()
        if self.lock is not None:
            if self.locked:
                with contextlib.suppress(OSError):
                    fcntl.flock(self.lock, fcntl.LOCK_UN)
            os.close(self.lock)
            self.lock = None
        os.close(self.fd)


def _open_terminal(path: str) -> _Terminal | None:
    try:
        return _Terminal(path)
    except OSError:
        return None  # no controlling terminal (a harness, a service): the other ways


def _start_dialog(dialog: ways.Dialog, env: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
    try:
        process = subprocess.Popen(
            dialog.argv, stdin=subprocess.PIPE if dialog.stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ways.dialog_environment(env),
            start_new_session=True, close_fds=True)
    except OSError:
        return None
    if process.stdin is not None:
        # zenity's text (at most MAX_WHOLE_QUESTION_CHARS and a few lines: within a
        # pipe's 64 KiB, so the write never waits on the dialog).
        with contextlib.suppress(OSError):
            process.stdin.write(dialog.stdin.encode("ascii", "replace"))
        with contextlib.suppress(OSError):
            process.stdin.close()
        process.stdin = None  # closed: communicate() must not flush it
    return process


def _queue_only(ident: str, seconds: int) -> str:
    return (f"lnk-sandbox-ask: no screen and no terminal to ask on: the question {ident} "
            f"waits in the queue (see lnk-sandbox asks); answer it with: lnk-sandbox "
            f"answer {ident} yes|no (no answer in {seconds} s is no)\n")


def _wait(queue: AskQueue, ident: str, wire: str, shown: _Shown, started: float,
          deadline: float, env: Mapping[str, str], platform: str, terminal_path: str,
          tell: Callable[[str], None] | None) -> tuple[str, str]:
    """Ask on the dialog and the terminal at once (the queue holds the question already)
    and wait, a turn at a time, for the first answer, decided in the queue; none by
    `deadline` is no. The dialog and the terminal are closed however the wait ends."""
    seconds = max(1, round(deadline - started))
    # The wire is part of the text a dialog shows (never of its window's title, which
    # the person does not always see): which sandbox asks is half the question; what a
    # yes allows is the other half, and zenity's box says it again. zenity's dialog is
    # sized against the screen (lnk_ask.ways.dialog_size).
    screen = ways.screen_size(env) if platform != "darwin" else None
    dialog = ways.pick_dialog(env, platform, shown.title,
                              f"{shown.question}\n\nA yes allows: {shown.allows}\n"
                              f"(asked by the wire {wire})", seconds, allows=shown.allows,
                              screen=screen)
    process = _start_dialog(dialog, env) if dialog else None
    terminal = _open_terminal(terminal_path) if terminal_path else None
    waiting = _Waiting(queue, ident, wire, shown, deadline, dialog, process, terminal, tell)
    waiting.tell_queue_only()
    # Job control: reading the terminal from the background must fail (EIO), not stop
    # this process; a blocked SIGTTIN counts as ignored for that, and blocking is per
    # thread, so this holds in any thread of a caller.
    masked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTTIN, signal.SIGTTOU})
    decided: tuple[str, str] | None = None
    try:
        while decided is None:
            decided = waiting.turn()
        return decided
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, masked)
        waiting.close(decided)


class _Waiting:
    """One question's ways while it waits: the dialog (a child process, None once it has
    ended), the terminal (None once it dropped out), and the queue, where the answer is
    decided whichever way it came."""

    __slots__ = ("deadline", "dialog", "ident", "no_terminal", "process", "queue", "shown",
                 "tell", "terminal", "told", "wire")

    def __init__(self, queue: AskQueue, ident: str, wire: str, shown: _Shown,
                 deadline: float, dialog: ways.Dialog | None,
                 process: subprocess.Popen[bytes] | None, terminal: _Terminal | None,
                 tell: Callable[[str], None] | None) -> None:
        self.queue = queue
        self.ident = ident
        self.wire = wire
        self.shown = shown
        self.deadline = deadline
        self.dialog = dialog
        self.process = process
        self.terminal = terminal
        self.tell = tell
        self.told = False
        # Said only where there never was a terminal: a terminal that drops out may be
        # the one standard error is on, its output stopped, where a line would block.
        self.no_terminal = terminal is None

    def tell_queue_only(self) -> None:
        """Tell the caller, once, when only the queue is left to answer on."""
        if (self.tell is not None and not self.told and self.process is None
                and self.no_terminal):
            self.told = True
            self.tell(_queue_only(self.ident, max(1, round(self.deadline - time.monotonic()))))

    def turn(self) -> tuple[str, str] | None:
        """One turn of the wait (at most POLL_SECONDS): the answer decided, or None."""
        now = time.monotonic()
        if now >= self.deadline:
            return self.queue.decide(self.ident, "no", "timeout")
        given = self.queue.answered(self.ident)
        if given is not None:
            return given
        decided = self._dialog_answer()
        if decided is not None:
            return decided
        self._show_on_terminal()
        return self._terminal_answer(now)

    def _dialog_answer(self) -> tuple[str, str] | None:
        """The dialog's answer once it has ended; a dialog that ended without one drops
        out."""
        if self.process is None or self.dialog is None or self.process.poll() is None:
            return None
        out, err = self.process.communicate()
        verdict = self.dialog.verdict(self.process.returncode, out.decode("utf-8", "replace"),
                                      err.decode("utf-8", "replace"))
        self.process = None
        if verdict is not None:
            return self.queue.decide(self.ident, verdict, "dialog")
        self.tell_queue_only()
        return None

    def _show_on_terminal(self) -> None:
        if self.terminal is None or self.terminal.shown:
            return
        try:
            self.terminal.try_show(self.queue, self.ident, self._render)
        except OSError:  # this terminal cannot ask it: the other ways go on
            self.terminal.close()
            self.terminal = None
            self.tell_queue_only()

    def _render(self, columns: int, rows: int) -> str | None:
        left = max(1, round(self.deadline - time.monotonic()))
        assert self.terminal is not None
        return ways.terminal_prompt(self.shown.title, self.shown.kept, self.shown.allows,
                                    self.wire, self.ident, self.terminal.code, left, columns,
                                    rows)

    def _terminal_answer(self, now: float) -> tuple[str, str] | None:
        """What was typed on the terminal, waiting for it until the turn's end (a mere
        sleep where no terminal shows the question)."""
        terminal = self.terminal
        # Only while in the foreground: a terminal readable by a job in the
        # background would wake this loop at once, again and again.
        waiting = ([terminal.fd] if terminal is not None and terminal.shown
                   and terminal.foreground() else [])
        timeout = max(0.0, min(POLL_SECONDS, self.deadline - now))
        if not waiting:
            time.sleep(timeout)
            return None
        readable, _, _ = select.select(waiting, [], [], timeout)
        if not readable or terminal is None:
            return None
        try:
            verdict = terminal.feed()
        except OSError:
            terminal.close()
            self.terminal = None
            self.tell_queue_only()
            return None
        if verdict is None:
            return None
        return self.queue.decide(self.ident, verdict, "terminal")

    def close(self, decided: tuple[str, str] | None) -> None:
        """End the dialog (it is asked to end, then made to) and the terminal, saying
        there how the question ended."""
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.terminate()
            try:
                self.process.communicate(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()
        if self.terminal is not None:
            outcome = (f"{decided[0]} ({decided[1]})" if decided else "no (ended)")
            self.terminal.close(outcome)


def command(settings_root: str, wire: str, title: str,
            timeout: float = DEFAULT_TIMEOUT_SECONDS, *, whole: bool = False,
            allows: str = "") -> list[str]:
    """The argv that runs `lnk-sandbox-ask` for a question given on its standard input
    (never in argv: a tool's arguments may be long, and argv is every local process's to
    read), isolated as every helper (`python -I -S _start.py ask …`:
    lnk_common.chain.helper_argv). `allows`: a few words, as the title."""
    from lnk_common.chain import helper_argv

    check_usage(wire, title, timeout)
    title = text.bounded(title, MAX_ARGV_TEXT_CHARS)
    allows = text.bounded(allows, MAX_ARGV_TEXT_CHARS)
    return [*helper_argv("ask"), "--settings", settings_root, "--wire", wire,
            "--title", title, "--question", "-", "--timeout", f"{timeout:g}", "--json",
            *(["--whole"] if whole else []), *(["--allows", allows] if allows else [])]


async def ask_async(settings_root: str, wire: str, title: str, question: str,
                    timeout: float = DEFAULT_TIMEOUT_SECONDS, *,
                    env: Mapping[str, str] | None = None, whole: bool = False,
                    allows: str = "") -> Answer:
    """`ask` in a child process (`lnk-sandbox-ask --json`), for an asyncio caller. The
    child is ended (SIGTERM: it answers no and cleans up) when the caller is cancelled.
    Anything but a well-formed yes from the child is no. A question longer than
    MAX_ASKED_CHARS is cut here, saying so (text.bounded): the child takes 1 MiB."""
    import asyncio
    import json

    argv = command(settings_root, wire, title, timeout, whole=whole, allows=allows)
    question = text.bounded(question)
    try:
        child = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(os.environ if env is None else env))
    except OSError as error:
        return Answer("no", "error", reason=f"lnk-sandbox-ask cannot start: {error.strerror}")
    try:
        out, err = await child.communicate(question.encode("utf-8", "surrogatepass"))
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            child.terminate()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(child.wait(), 5)
        raise
    try:
        found = json.loads(out)
        answer, how = str(found["answer"]), str(found["how"])
        ident = str(found.get("id", ""))
    except (ValueError, KeyError, TypeError):
        reason = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
        return Answer("no", "error", reason=text.printable(reason[0], 200))
    if how not in HOWS or (answer == "yes") != (child.returncode == 0):
        return Answer("no", "error", ident, "lnk-sandbox-ask answered inconsistently")
    return Answer(answer, how, ident, str(found.get("reason", "")))
