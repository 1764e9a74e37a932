"""The open verb's I/O: the person's opener outside, and a login's callback passed in.

`/_link/s/<secret>/open` (`OpenVerb`, below) checks the URL
(lnk_proxy.open_rules), asks the person with the URL shown whole, and on yes runs the
person's own opener here, outside: `xdg-open` (`open` on macOS) found on the PATH the
harness gave the proxy, with the one form the person read. For a page whose
`redirect_uri` comes back to `http://localhost:<port>` or `http://127.0.0.1:<port>`, a
`Callback` listens on that port of this machine's loopback and passes the first request
in to the same port on the sandbox's own loopback, over a socket made inside the
sandbox's network by the DNS helper (the proxy, in this machine's network, can make none
there); then it closes, answered or not, or after CALLBACK_SECONDS.

Order: ask → yes → `listen` (bound now; a port already taken is refused, since the
login's answer, its code, would go to whatever holds it) → the opener started →
`close_early` (whatever connected before that is closed unread) → `start` (the first
request from then on is passed in). Nothing is bound while the person is asked: a request
sent then finds no port, a no holds none, and the program learns nothing of this
machine's ports before the answer.

Trust: the URL is the program's (hostile) and was checked before it reaches here; the
request that comes to the callback port after the page is opened is the browser's (or
anything on this machine that reaches the port before the browser: one request only,
then the port is closed). Neither a path, a query nor a code is ever logged: the host
and port only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Mapping

import h11

from lnk_common.wire import Refused

TYPE_CHECKING = False
if TYPE_CHECKING:
    from lnk_proxy.mcp_verb import Asker
    from lnk_proxy.verb_call import Keep, VerbCall

__all__ = ["CALLBACK_SECONDS", "OPENER_SECONDS", "Callback", "CallbackSockets", "OpenVerb",
           "find_opener", "run_opener"]

# The five minutes: a sign-in page waits for a person to type a password and
# pass a second factor; past this the port is closed and the login must start again.
CALLBACK_SECONDS = 300.0
# The person's opener hands the page to a browser and returns (xdg-open that finds no
# browser fails within a second); one that has not returned by then (some run the browser
# in the foreground) is taken as having opened it, and is left to run. Short: the program
# waits on its open meanwhile, and a login's program often serves its callback only once
# its open has returned (google-auth-oauthlib's run_local_server does).
OPENER_SECONDS = 3.0
# What is read of the opener's stderr, for the one line said when it fails.
OPENER_STDERR_BYTES = 4096
# A callback request is a GET with a code and a state in its query; a form post
# (response_mode=form_post) a few KiB. Bounds what is held of the browser's request.
MAX_CALLBACK_HEAD_BYTES = 64 * 1024
MAX_CALLBACK_BODY_BYTES = 1 << 20
# How long the browser and the program each have to send their part of the one exchange.
CALLBACK_IO_SECONDS = 30.0
_READ_BYTES = 64 * 1024
# What of the browser's request reaches the program (default deny; lower case, as h11
# gives names): what a callback server reads (a form post's type, its length, set here).
PASSED_REQUEST_HEADERS = frozenset({b"host", b"content-type", b"accept", b"user-agent",
                                    b"accept-language"})


def find_opener(environ: Mapping[str, str], platform: str = sys.platform) -> str | None:
    """The person's opener: `open` on macOS, else `xdg-open`, found on the PATH the
    harness gave the proxy (never a folder of the sandbox's: the proxy runs outside)."""
    name = "open" if platform == "darwin" else "xdg-open"
    return shutil.which(name, path=environ.get("PATH", os.defpath))


async def run_opener(opener: str, url: str, environ: Mapping[str, str], *,
                     starting: Callable[[], None] | None = None) -> str:
    """Run `opener url`; "" when it opened the page (exit 0, or still running after
    OPENER_SECONDS), else one line saying why not. `starting` is called just before the
    opener is started, with nothing awaited in between: the opener runs while asyncio
    still sets up its pipes, so "once it runs" would come after whatever it did first."""
    if starting is not None:
        starting()
    try:
        process = await asyncio.create_subprocess_exec(
            opener, url, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env=dict(environ), start_new_session=True)
    except OSError as error:
        return f"the opener {opener} could not be started: {error.strerror}"
    assert process.stderr is not None
    try:
        status = await asyncio.wait_for(process.wait(), OPENER_SECONDS)
    except TimeoutError:
        asyncio.get_running_loop().create_task(_reap(process))
        return ""
    if status == 0:
        return ""
    said = (await process.stderr.read(OPENER_STDERR_BYTES)).decode("ascii", "replace")
    last = [line for line in said.splitlines() if line.strip()][-1:]
    detail = "".join(c if 0x20 <= ord(c) < 0x7F else "?" for c in last[0])[:200] if last else ""
    return (f"the person's opener ({os.path.basename(opener)}) failed with status {status}"
            + (f": {detail}" if detail else ""))


async def _reap(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    with contextlib.suppress(Exception):
        while await process.stderr.read(_READ_BYTES):
            pass
        await process.wait()


# Callbacks being served (asyncio keeps a task only weakly).
_LIVE: set[asyncio.Task[None]] = set()


class CallbackSockets:
    """The sockets made inside the sandbox's network for login callbacks (neither bound
    nor listening), by family; each is used for one callback and then closed."""

    def __init__(self, sockets: list[socket.socket]) -> None:
        self.v4 = [sock for sock in sockets if sock.family == socket.AF_INET]
        self.v6 = [sock for sock in sockets if sock.family == socket.AF_INET6]

    def left(self) -> int:
        return len(self.v4)

    def take(self) -> tuple[socket.socket, socket.socket | None]:
        """One IPv4 socket, and an IPv6 one if any is left (for a `localhost` callback
        whose program listens on ::1 only)."""
        return self.v4.pop(), self.v6.pop() if self.v6 else None

    def give_back(self, pair: tuple[socket.socket, socket.socket | None]) -> None:
        """A pair not used (no callback came): kept for the next login."""
        self.v4.append(pair[0])
        if pair[1] is not None:
            self.v6.append(pair[1])


class Callback:
    """One login's callback: this machine's loopback port `port` (127.0.0.1, and ::1
    too when the redirect names `localhost`, which a browser may reach by either),
    listened on from the person's yes until the first request after the page was
    opened, or `seconds`; that request is passed in to the program's port and its
    answer back, and then everything is closed."""

    def __init__(self, host: str, port: int, sockets: CallbackSockets, *,
                 log: Callable[[str, str, str], None], next_id: Callable[[], int],
                 gate: Callable[[], None], seconds: float = CALLBACK_SECONDS) -> None:
        self.host = host
        self.port = port
        self.sockets = sockets
        self.log = log
        self.next_id = next_id
        self.gate = gate
        self.seconds = seconds
        self.listeners: list[socket.socket] = []
        self.pair: tuple[socket.socket, socket.socket | None] | None = None
        self.task: asyncio.Task[None] | None = None

    def listen(self) -> None:
        """Bind the port here, or Refused: taken, or no callback socket left. Called
        after the person's yes, never before (`OpenVerb.call`)."""
        if not self.sockets.left():
            raise Refused(503, "no login callback is left in this sandbox (a run passes "
                               "in 8); not opened: start the sandbox again to sign in",
                          counts=False, final=True)
        addresses = ["127.0.0.1"] + (["::1"] if self.host == "localhost" else [])
        try:
            for address in addresses:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                self.listeners.append(sock)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind((address, self.port))
                except OSError as error:
                    if address == "::1" and error.errno == 99:  # EADDRNOTAVAIL: no IPv6 here
                        self.listeners.pop().close()
                        continue
                    raise
                sock.listen(8)
                sock.setblocking(False)
        except OSError as error:
            self.close()
            taken = error.errno == 98  # EADDRINUSE
            raise Refused(409, f"port {self.port} of this machine's loopback is "
                               + ("taken by another program: the login's answer (its code) "
                                  "would go to it; not opened" if taken else
                                  f"not free to listen on ({error.strerror}); not opened"),
                          counts=False) from None
        self.pair = self.sockets.take()

    def close_early(self) -> int:
        """Close, unread, every connection waiting on the port: called once the opener
        is started, so whatever connected between the bind and the page's opening (a
        process on this machine that found the port first) is never taken for the
        browser's request. Returns how many, and logs it (never what they sent)."""
        closed = 0
        for sock in self.listeners:
            while True:
                try:
                    early, _ = sock.accept()
                except OSError:  # BlockingIOError: none left waiting
                    break
                early.close()
                closed += 1
        if closed:
            self.log("refused", f"localhost:{self.port}",
                     f"kind=callback reason={closed} connection(s) came before the page "
                     "was opened; closed unread")
        return closed

    def start(self) -> None:
        """Serve the one callback, in the background (the opener runs meanwhile)."""
        self.task = asyncio.get_running_loop().create_task(self._serve())
        # The loop keeps only a weak reference to a task: held here until it ends.
        _LIVE.add(self.task)
        self.task.add_done_callback(_LIVE.discard)

    def close(self) -> None:
        for sock in self.listeners:
            sock.close()
        self.listeners = []

    def cancel(self) -> None:
        """Not opened after all (a no, or the opener failed): the port is closed and the
        socket inside kept for the next login."""
        self.close()
        if self.task is not None:
            self.task.cancel()
        elif self.pair is not None:
            self.sockets.give_back(self.pair)
            self.pair = None

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        accepts = [loop.create_task(loop.sock_accept(sock)) for sock in self.listeners]
        cancelled = False
        try:
            done, _ = await asyncio.wait(accepts, timeout=self.seconds,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # not opened after all: cleaned up below
            done, cancelled = set(), True
        for task in accepts:
            task.cancel()
        accepted = [task.result()[0] for task in done
                    if not task.cancelled() and task.exception() is None]
        # One request: the port closes now, whatever comes next (a connection to the
        # other address in the same instant included).
        self.close()
        for extra in accepted[1:]:
            extra.close()
        if not accepted:
            if self.pair is not None:
                self.sockets.give_back(self.pair)
                self.pair = None
            if not cancelled:
                self.log("ended", f"localhost:{self.port}", "kind=callback reason=no "
                         f"callback came within {self.seconds:g} s; the port is closed")
            return
        browser = accepted[0]
        pair, self.pair = self.pair, None
        assert pair is not None
        try:
            await self._pass_in(browser, pair)
        finally:
            browser.close()
            for sock in pair:
                if sock is not None:
                    sock.close()

    async def _pass_in(self, browser: socket.socket,
                       pair: tuple[socket.socket, socket.socket | None]) -> None:
        loop = asyncio.get_running_loop()
        browser.setblocking(False)
        authority = f"localhost:{self.port}"
        call = self.next_id()
        started = time.monotonic()
        server = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_CALLBACK_HEAD_BYTES)
        try:
            request, body = await asyncio.wait_for(_read_request(loop, browser, server),
                                                   CALLBACK_IO_SECONDS)
            self.gate()
        except Refused as refusal:
            self.log("refused", authority, f"kind=callback reason={refusal.reason}")
            await _answer(loop, browser, server, refusal.status, refusal.reason)
            return
        except (h11.RemoteProtocolError, TimeoutError, OSError, ValueError) as error:
            if isinstance(error, h11.RemoteProtocolError):
                reason = "the callback's request is not HTTP/1.1"
            elif isinstance(error, ValueError):  # _read_request's bound, said by it
                reason = str(error)
            else:
                reason = "the callback's request did not come whole"
            self.log("refused", authority, f"kind=callback reason={reason}")
            with contextlib.suppress(Exception):
                await _answer(loop, browser, server, 400, reason)
            return
        self.log("allowed", authority, f"id={call} kind=callback")
        inside = await _connect_inside(loop, self.host, self.port, pair)
        if inside is None:
            self.log("ended", authority, f"id={call} kind=callback error=502")
            await _answer(loop, browser, server, 502, f"nothing in the sandbox listens on "
                                                      f"port {self.port}")
            return
        sent = received = 0
        failure = ""
        status = 0
        try:
            client = h11.Connection(h11.CLIENT)
            # Default deny: the browser sends the person's cookies for `localhost` to any
            # port (cookies are not kept apart by port: a local notebook's login cookie
            # would come along), and whatever else it holds; the program gets the request
            # line and the headers a callback needs, nothing else.
            headers = [(name, value) for name, value in request.headers
                       if name in PASSED_REQUEST_HEADERS]
            headers += [(b"connection", b"close"),
                        (b"content-length", str(len(body)).encode("ascii"))]
            outgoing = client.send(h11.Request(method=request.method, target=request.target,
                                               headers=headers)) or b""
            outgoing += (client.send(h11.Data(data=body)) or b"") if body else b""
            outgoing += client.send(h11.EndOfMessage()) or b""
            await asyncio.wait_for(loop.sock_sendall(inside, outgoing), CALLBACK_IO_SECONDS)
            sent = len(outgoing)
            status, received = await asyncio.wait_for(_read_response(loop, inside, client),
                                                      CALLBACK_IO_SECONDS)
        except (h11.ProtocolError, TimeoutError, OSError):
            failure = " error=the program's answer did not come whole"
        finally:
            inside.close()
            self.log("ended", authority, f"id={call} kind=callback sent={sent} "
                                         f"received={received} seconds="
                                         f"{time.monotonic() - started:.3f}{failure}")
        # The browser never gets the program's own answer: its page would run in the
        # person's browser as a localhost origin (which browsers trust more than the
        # web's: a script there may call the person's other local services), its
        # `Location` or a refresh would open a page nobody was asked about (the URL
        # carrying data out), its Set-Cookie would reach every localhost port. The
        # person reads one line of ours with the program's status.
        with contextlib.suppress(Exception):
            if status and status < 400:
                await _answer(loop, browser, server, 200, "the sign-in's answer was passed "
                              f"into the sandbox (its program answered {status}); you can "
                              "close this tab")
            else:
                await _answer(loop, browser, server, 502, "the sign-in's answer was passed "
                              "into the sandbox, and its program " + (
                                  f"answered {status}" if status else "gave no whole answer"))


async def _read_request(loop: asyncio.AbstractEventLoop, browser: socket.socket,
                        server: h11.Connection) -> tuple[h11.Request, bytes]:
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = server.next_event()
        if event is h11.NEED_DATA:
            data = await loop.sock_recv(browser, _READ_BYTES)
            server.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_CALLBACK_BODY_BYTES:
                raise ValueError(f"the callback's body is larger than "
                                 f"{MAX_CALLBACK_BODY_BYTES} bytes")
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            raise OSError("the browser closed before its request ended")


async def _connect_inside(loop: asyncio.AbstractEventLoop, host: str, port: int,
                          pair: tuple[socket.socket, socket.socket | None]
                          ) -> socket.socket | None:
    """The program's port, on the sandbox's own loopback: 127.0.0.1 first, then ::1 for
    a `localhost` callback (a program may listen on either)."""
    v4, v6 = pair
    tries: list[tuple[socket.socket, str]] = [(v4, "127.0.0.1")]
    if host == "localhost" and v6 is not None:
        tries.append((v6, "::1"))
    for sock, address in tries:
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (address, port)),
                                   CALLBACK_IO_SECONDS)
        except (OSError, TimeoutError):
            continue
        return sock
    return None


async def _read_response(loop: asyncio.AbstractEventLoop, inside: socket.socket,
                         client: h11.Connection) -> tuple[int, int]:
    """The program's answer read whole (bounded), for its status: (status, bytes)."""
    received = 0
    status = 0
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            data = await loop.sock_recv(inside, _READ_BYTES)
            received += len(data)
            if received > MAX_CALLBACK_BODY_BYTES + MAX_CALLBACK_HEAD_BYTES:
                raise OSError("the program's answer is too large")
            client.receive_data(data)
            continue
        if isinstance(event, h11.Response):
            status = event.status_code
        if isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return status, received


async def _answer(loop: asyncio.AbstractEventLoop, browser: socket.socket,
                  server: h11.Connection, status: int, reason: str) -> None:
    """A page of ours to the browser: one line of plain text (the person reads it)."""
    body = f"lnk-sandbox: {reason}\n".encode("ascii", "replace")
    data = server.send(h11.Response(status_code=status, headers=[
        (b"content-type", b"text/plain; charset=us-ascii"),
        (b"content-length", str(len(body)).encode("ascii")), (b"connection", b"close")])) or b""
    data += server.send(h11.Data(data=body)) or b""
    data += server.send(h11.EndOfMessage()) or b""
    with contextlib.suppress(OSError):
        await loop.sock_sendall(browser, data)


class OpenVerb:
    """`/_link/s/<secret>/open` (a part of lnk_proxy.url_secret_verb): one URL (the body)
    opened in the person's browser, outside, when they say yes; asked every time, the
    URL shown whole in the one form that opens (lnk_proxy.open_rules). A login's
    callback to a loopback port is bound only after the yes (nothing is held, nothing of
    this machine's ports is learnt, while the person is asked; a port taken is then
    refused), what came to it before the opener started is closed unread, and the first
    request after is passed in once (`Callback`). Logged by host only; counted as a
    call. `ask`: the question shown whole; `environ`: where the opener is found (the
    proxy's own environment when None); `wire`: the sandbox named in the question."""

    __slots__ = ("ask", "callbacks", "environ", "wire")

    def __init__(self, callbacks: CallbackSockets, *, ask: Asker | None,
                 environ: Mapping[str, str] | None, wire: str) -> None:
        self.callbacks = callbacks
        self.ask = ask
        self.environ = environ
        self.wire = wire

    async def call(self, call: VerbCall, rest: str) -> Keep:
        from lnk_proxy.open_rules import MAX_URL_BYTES, OpenRuleError, callback_target, check_url

        authority = "-"
        callback: Callback | None = None
        try:
            if rest != "/":
                raise Refused(404, "the open verb's path is /_link/s/<secret>/open")
            if call.request.method != b"POST":
                raise Refused(405, "the open verb takes POST with the URL as its body")
            # One URL, and a line end a client may add.
            raw = await call.body(MAX_URL_BYTES + 2)
            try:
                url = check_url(raw.strip(b"\r\n"))
                target = callback_target(url)
            except OpenRuleError as error:
                raise Refused(error.status, error.reason) from None
            authority = url.host if url.port is None else f"{url.host}:{url.port}"
            environ = os.environ if self.environ is None else self.environ
            opener = find_opener(environ)
            if opener is None:
                raise Refused(503, "no opener on this machine: xdg-open is not on the PATH "
                                   "Link was started with; not opened", counts=False,
                              final=True)
            await self._asked(call, url.host, url.opened, target)
            if target is not None:
                callback = self._callback(call, target)
                callback.listen()
        except Refused as refusal:
            if callback is not None:
                callback.cancel()
            return await call.refuse(authority, refusal)
        return await self._open(call, authority, opener, url.opened, environ, callback)

    async def _asked(self, call: VerbCall, host: str, shown: str,
                     target: tuple[str, int] | None) -> None:
        """The person asked, the URL shown whole; Refused unless they say yes, or when a
        kill switch or a pause came while the question waited."""
        if self.ask is None:
            raise Refused(403, "opening a page is asked of the person, and no way to "
                               "ask is available here; not opened", counts=False)
        # One line (lnk_ask shows a question's line breaks as \x0a); a dialog cuts it
        # into lines (lnk_ask.ways.dialog_lines), every character kept.
        back = (f"  Its login comes back to port {target[1]} of this machine's loopback "
                "(http://" + target[0] + f":{target[1]}), and that answer is passed into "
                "the sandbox, once." if target is not None else "")
        yes, how = await self.ask(
            f"{self.wire or 'a sandbox'}: open {host}?",
            f"The sandbox {self.wire or '-'} asks to open this page in your browser: "
            f"{shown}{back}",
            f"sandbox {self.wire or '-'} opens a page on {host}")
        if not yes:
            raise Refused(403, f"the person did not allow opening the page ({how})",
                          logged=f"the person did not allow opening the page ({how})")
        # The question may have waited two minutes: a kill switch or a pause since then
        # holds over the yes.
        call.proxy.gate(counted=False)

    def _callback(self, call: VerbCall, target: tuple[str, int]) -> Callback:
        """The login's callback, bound (`listen`) only after the yes: while the question
        waits nothing listens (a request sent then cannot pass as the browser's), no port
        is held for a question answered no, and whether a port is taken is learnt by
        nobody who has not been allowed (taken: 409 then, said to the program and
        logged)."""
        proxy = call.proxy
        return Callback(target[0], target[1], self.callbacks, log=proxy.log.write,
                        next_id=lambda: next(proxy.ids), gate=lambda: proxy.gate(counted=False))

    async def _open(self, call: VerbCall, authority: str, opener: str, shown: str,
                    environ: Mapping[str, str], callback: Callback | None) -> Keep:
        """The opener run, one allowed and one ended line; the answer `{"opened": URL}`."""
        from lnk_proxy.mcp_verb import tool_environment

        log = call.proxy.log
        number = next(call.proxy.ids)
        log.write("allowed", authority, f"id={number} kind=open")
        started = time.monotonic()

        def page_opening() -> None:
            # The opener is about to start: what connected before is closed unread, and
            # the first request after is the one passed in. Before, not after, its start:
            # a browser (or an opener that follows by itself) coming back at once would
            # otherwise be closed as early. An opener that fails to start cancels it.
            if callback is not None:
                callback.close_early()
                callback.start()

        failure = await run_opener(opener, shown, tool_environment(environ),
                                   starting=page_opening)
        log.write("ended", authority, f"id={number} kind=open seconds="
                                      f"{time.monotonic() - started:.3f}"
                                      + (" error=the opener failed" if failure else ""))
        if failure:
            if callback is not None:
                callback.cancel()
            return await call.refuse(authority, Refused(502, failure + "; not opened",
                                                        counts=False), echo=False)
        import orjson

        return await call.respond(200, [(b"content-type", b"application/json")],
                                  orjson.dumps({"opened": shown}) + b"\n")

    def close(self) -> None:
        """Nothing is kept between calls: each callback ends on its own."""
