"""The lane: every body-less request's exchange (lnk_proxy.bodiless), carried out in the
protocols' callbacks, with no task woken, no future and no timer of its own.

A request kept alive to the host of the last one is most of what a harness's tools
send, and its cost was asyncio's more than the proxy's own: the client's bytes fed to
its reader, the connection's task woken to read them, a timer for each wait, the
upstream's bytes fed to another reader and the task woken again (four turns of the
loop a request). Here the client's protocol (`LaneProtocol`) gives what it receives to
the connection's own machine (lnk_proxy.connection.ClientConnection, the one the task
drives), where a client's bytes wait until a command takes them, and tells the
connection's `Lane` while its task is parked (`Lane.idle`).

The lane looks at them only when the machine holds one whole head and an upstream is
kept for this connection. It then takes the machine's command for that head, whose
checks every request passes in their one order. The lane carries out the machine's
command itself only when it is a body-less request that the kept upstream may take, by
the one rule the task's `forward` uses too (`take_kept`: the same authority, still open,
nothing sent unasked; then the gate and the name, Proxy.check_name); any other command
(a refusal, a verb, a CONNECT, a request with a body or to another host) it gives back
to the machine (`ClientConnection.give_again`), and the task, woken, takes it as the
machine's next command, as it takes every other. A body-less request the task decided (a
connection's first, one to another host, one sent again) the task hands to the lane
once its upstream is open (`Lane.carry`), and parks. Either way the request is written
anew to the upstream, and the upstream's protocol (`UpstreamProtocol`) hands the
response to the lane, which reads it one way (lnk_proxy.response: body-less, its head
written anew and exactly its Content-Length of body; else h11's, from every byte read)
and writes it back as it comes, the client's full send buffer pausing the upstream's
reading: the one body-less exchange, whatever its response. Two turns of the loop a
kept-alive request; one `allowed` and one `ended` line as ever.

Bytes that are not one whole head, or come with no upstream kept, are the task's: the
lane leaves them in the machine and wakes the task, which takes the machine's command
(the head's time, HEAD_SECONDS, is the task's). What came behind a head waits in the
machine, for the task once the exchange has ended.
A kept upstream that closed, or sent what h11 refuses, before a response head: the
request is given back to the machine too, and the task sends it once more on a new
connection, as it always was (a new one that does so is the call's failure); a refusal
of the gate or the name is written here and ends the connection (`END`), as the task's
refusal does, and so does the end of a response the program asked to be the last
(`Connection: close`). The connection's one timer is the parked task's: at its end, a
connection that moved within IDLE_SECONDS waits again; one that did not is closed, an
exchange in flight ended with its line.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import h11

from lnk_common.wire import Refused
from lnk_common.wirelog import ended_detail
from lnk_proxy.bodiless import bodiless_request_bytes, client_closes
from lnk_proxy.connection import ClientConnection, Forward
from lnk_proxy.head import HeadError, head_end
from lnk_proxy.response import Response
from lnk_proxy.streams import Ends, Inbox, Outbox, held

if TYPE_CHECKING:
    from lnk_proxy.server import Proxy
    from lnk_proxy.target import Target
    from lnk_proxy.upstream import Upstream

__all__ = ["CLIENT_BUFFER_BYTES", "END", "NEXT", "Lane", "LaneProtocol", "UpstreamProtocol",
           "lane_server", "take_kept"]

# A client connection's bytes waiting (in its machine while it is HTTP, else in its inbox:
# lnk_proxy.streams) are at most about twice this before its socket is no longer read
# (the `limit` the proxy's listeners always had).
CLIENT_BUFFER_BYTES = 1 << 20


class _End:
    """The connection ends (a refusal was written, the lane's exchange failed, or it
    went quiet past its time)."""

    __slots__ = ()


END = _End()


class _Next:
    """The task's next command is the machine's to give: the client sent more (bytes,
    which the machine holds, its end, or the error its connection ended on), or the
    lane gave a command back (`ClientConnection.give_again`: one that needs an await, or
    a request to send once more)."""

    __slots__ = ()


NEXT = _Next()


Note = _End | _Next
# No note missed (Lane.missed).
_NO_NOTE = object()


class _Rung:
    """The parked task's timer ran out (what its wait is resolved with)."""

    __slots__ = ()


_RUNG = _Rung()


def _ring(parked: asyncio.Future[Note | _Rung]) -> None:
    if not parked.done():
        parked.set_result(_RUNG)


class _Exchange:
    """The lane's call in flight."""

    __slots__ = ("authority", "call", "paused", "protocol", "reading", "request", "started",
                 "upstream", "was_kept")

    def __init__(self, call: int, request: Forward, upstream: Upstream,
                 protocol: UpstreamProtocol, *, was_kept: bool) -> None:
        self.authority = request.target.authority
        self.call = call
        self.started = time.monotonic()
        self.request = request
        self.upstream = upstream
        self.protocol = protocol  # the upstream's, whose bytes come here while it runs
        # The response, read by lnk_proxy.response (body-less, else h11's; `Connection:
        # close` added when the program asked for its connection to close after it).
        self.reading = Response(request.raw, request.path, upstream.conn,
                                close=client_closes(request.head))
        self.paused = False  # the upstream's reading paused for the client's buffer
        # The upstream was the last request's: closed before it answered, the request
        # is sent again once on a new connection (the machine gives it again); a new one
        # that closes is the call's failure.
        self.was_kept = was_kept


class Lane:
    """One client connection's lane (see the module's text). `proxy` is the Proxy
    whose checks, log and refusals it uses (lnk_proxy.server); `kept` the connection's
    one-slot list of its kept upstream, shared with the task."""

    __slots__ = ("connection", "exchange", "kept", "last", "missed", "parked", "protocol",
                 "proxy", "reader", "writer")

    def __init__(self, proxy: Proxy, protocol: LaneProtocol, reader: Inbox, writer: Outbox,
                 kept: list[Upstream | None]) -> None:
        self.proxy = proxy
        self.protocol = protocol
        self.reader = reader
        self.writer = writer
        self.kept = kept
        self.connection: ClientConnection | None = None
        self.parked: asyncio.Future[Note | _Rung] | None = None
        # A note given after the parked task's timer rang, before the task ran: kept
        # for it (it would be lost, and the task would not take the machine's command).
        self.missed: object = _NO_NOTE
        self.exchange: _Exchange | None = None
        self.last = time.monotonic()
        protocol.lane = self

    # -- the task's side ------------------------------------------------------------

    async def idle(self, connection: ClientConnection, seconds: float) -> Note:
        """Park the task between requests, or while the lane carries out its request,
        until it has work: END, or NEXT (the machine gives the task's next command).
        `connection`: the connection's machine, idle or carried out by the lane."""
        self.connection = connection
        loop = asyncio.get_running_loop()
        wait = seconds
        while True:
            if self.exchange is None and self._client_said_more():
                return NEXT
            parked: asyncio.Future[Note | _Rung] = loop.create_future()
            self.parked = parked
            timer = loop.call_later(wait, _ring, parked)  # no cancel of the task: a
            try:  # note given as the timer rings is never thrown away with the wait
                woken = await parked
            finally:
                timer.cancel()
                self.parked = None
            if not isinstance(woken, _Rung):
                return woken
            if self.missed is not _NO_NOTE:
                note, self.missed = self.missed, _NO_NOTE
                return note  # type: ignore[return-value]
            quiet = time.monotonic() - self.last
            if quiet < seconds:  # it moved since the timer was set: the rest of its time
                wait = seconds - quiet
                continue
            if self.exchange is not None:
                self._finish(" error=TimeoutError")
            return END

    def close(self) -> None:
        """The task is ending: an exchange in flight ends with its line (the switches,
        the proxy's stop), and the lane takes nothing more."""
        self.protocol.lane = None
        if self.exchange is not None:
            self._finish("")

    # -- the client's side ----------------------------------------------------------

    def moved(self) -> None:
        """The client sent more (the machine holds it), while the task is parked: a
        request begun, or a refusal written, here; else the task woken to take the
        machine's next command (unless an exchange is in flight: then it wakes at the
        exchange's end)."""
        if self.parked is None or self.exchange is not None:
            return
        try:
            taken = self._begin()
        except Exception as error:
            self._failed(error)
            return
        if not taken:
            self._wake(NEXT)

    def _begin(self) -> bool:
        upstream, connection = self.kept[0], self.connection
        if upstream is None or connection is None:
            return False  # no kept upstream
        try:
            if head_end(connection.buffer) < 0:
                return False  # no whole head yet: the task's, with the head's time
        except HeadError:
            # Bytes the head guard refuses before a head's end (a bare LF, a head past
            # MAX_HEAD_BYTES): the task gives them to the machine, which refuses them with
            # their reason (a HeadError here would be a fault of the lane's, and the
            # program would get no answer). In line, not a function: the hot path's.
            return False
        command = connection.next_command()  # every check of the machine's, in its order
        if not (isinstance(command, Forward) and command.parsed is None):
            return self._give_back(connection)  # the task's: h11's, a verb, a tunnel...
        target = command.target
        try:
            kept = take_kept(self.proxy, self.kept, target)  # the task's rule, and checks
            if kept is None:  # a new connection, decided by the task (it may await)
                return self._give_back(connection)
            call = next(self.proxy.ids)
            self.proxy.log.write("allowed", target.authority, f"id={call} kind=http")
        except Refused as refusal:
            self.proxy.refuse_now(self.writer, target.authority, refusal)
            self._wake(END)
            return True
        except BaseException:
            upstream.close()
            raise
        protocol = kept.writer.transport.get_protocol()
        assert isinstance(protocol, UpstreamProtocol)  # every upstream's (open_upstream)
        self._start(call, command, kept, protocol, was_kept=True)
        return True

    def _give_back(self, connection: ClientConnection) -> bool:
        """The machine's command is the task's to carry out, as the machine gave it."""
        connection.give_again()
        self._wake(NEXT)
        return True

    def carry(self, connection: ClientConnection, command: Forward, upstream: Upstream, *,
              was_kept: bool) -> None:
        """The task's body-less request (`command`, its gate, name and address checked
        and `upstream` open to it), carried out here as the lane's own: the task parks
        (`idle`) until the lane has work for it. `was_kept`: the upstream is the last
        request's."""
        protocol = upstream.writer.transport.get_protocol()
        try:
            assert isinstance(protocol, UpstreamProtocol)  # every upstream's (open_upstream)
            call = next(self.proxy.ids)
            self.proxy.log.write("allowed", command.target.authority, f"id={call} kind=http")
        except BaseException:
            upstream.close()
            raise
        self.connection = connection
        self._start(call, command, upstream, protocol, was_kept=was_kept)
        if self.reader.exception() is not None:  # the client went while it was decided
            self._finish(" error=ConnectionResetError")

    def _client_said_more(self) -> bool:
        """The client said something for the task: bytes the machine holds, its end, or
        the error its connection ended on."""
        connection = self.connection
        return ((connection is not None and (connection.held > 0 or connection.ended))
                or self.reader.exception() is not None)

    def _start(self, call: int, command: Forward, upstream: Upstream,
               protocol: UpstreamProtocol, *, was_kept: bool) -> None:
        """The exchange begun: the upstream's bytes come here, the request written anew
        (lnk_proxy.bodiless)."""
        self.exchange = _Exchange(call, command, upstream, protocol, was_kept=was_kept)
        self.last = time.monotonic()
        protocol.sink = self
        if self.protocol.writing_paused:  # the last response is not all sent yet
            self.pause()
        upstream.writer.write(bodiless_request_bytes(command.head, command.path))

    def client_ended(self, lost: bool) -> None:
        """The client's end came (`lost`: its connection is gone, not half-closed)."""
        if self.exchange is not None:
            if lost:
                try:
                    self._finish(" error=ConnectionResetError")
                except Exception as error:
                    self._failed(error)
            return  # half-closed: the response still goes, then the task reads the end
        self._wake(NEXT)

    def pause(self) -> None:
        """The client's send buffer is full: its upstream waits."""
        exchange = self.exchange
        if exchange is not None and not exchange.paused:
            exchange.paused = True
            exchange.upstream.writer.transport.pause_reading()

    def resume(self) -> None:
        exchange = self.exchange
        if exchange is not None and exchange.paused:
            exchange.paused = False
            exchange.upstream.writer.transport.resume_reading()

    # -- the upstream's side --------------------------------------------------------

    def upstream_data(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        try:
            self._response(exchange, data)
        except Exception as error:
            self._failed(error)

    def _response(self, exchange: _Exchange, data: bytes) -> None:
        """The upstream's `data` read (b"": its clean end, once h11 reads the response)
        and what it gives written to the program; the exchange ended with the response,
        or with h11's refusal of the upstream's bytes."""
        self.last = time.monotonic()
        try:
            sent = exchange.reading.feed(data)
        except h11.ProtocolError as error:  # the upstream's bytes are no response
            self._upstream_failed(exchange, f" error={type(error).__name__}")
            return
        if sent:
            self.writer.write(sent)
        if exchange.reading.done:
            self._finish("")

    def upstream_ended(self, *, clean: bool) -> None:
        """The upstream closed while the lane's exchange was on it (`clean`: its end
        came, rather than its connection lost)."""
        try:
            self._upstream_ended(clean)
        except Exception as error:
            self._failed(error)

    def _upstream_ended(self, clean: bool) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        if clean and exchange.reading.h11_reads:
            self._response(exchange, b"")  # the end of a response framed by it, or h11's
            if self.exchange is not exchange:  # refusal: either way the exchange ended
                return
        self._upstream_failed(exchange, " error=ConnectionResetError")

    # -- the end of an exchange -----------------------------------------------------

    def _upstream_failed(self, exchange: _Exchange, failure: str) -> None:
        """The upstream ended the exchange (closed, or sent no response h11 takes): a
        kept one that did so before a response head, the request is the task's to send
        once more on a new connection (given again by the machine: nothing of it was
        answered, and the kept upstream is gone); else the call fails and the connection
        ends."""
        connection = self.connection
        if not exchange.reading.begun and exchange.was_kept and connection is not None:
            self._finish(failure, wake=False)
            connection.give_again()
            self._wake(NEXT)
            return
        self._finish(failure)

    def _finish(self, failure: str, *, wake: bool = True) -> None:
        """The exchange's end: its upstream kept for the next request when the response
        ended cleanly at its length, else closed; its ended line; the task woken when
        the connection ends or has bytes waiting."""
        exchange = self.exchange
        assert exchange is not None
        self.exchange = None
        upstream = exchange.upstream
        exchange.protocol.sink = None
        if not failure and exchange.reading.reusable:
            if exchange.paused:
                upstream.writer.transport.resume_reading()
            exchange.reading.next_cycle()
            self.kept[0] = upstream
        else:
            upstream.close()
        closes = exchange.reading.close  # the program asked for the end after it
        if not failure and not closes and self.connection is not None:
            # The machine takes the next head, from what came behind this one (it
            # holds it: nothing of it was given out with a body-less request).
            self.connection.request_done(b"")
        self.proxy.log.write("ended", exchange.authority, ended_detail(
            exchange.call, 0, exchange.reading.passed, exchange.started, failure))
        if not wake:
            return
        if failure or closes:
            self._wake(END)
        elif self._client_said_more():
            self._wake(NEXT)

    def _failed(self, error: Exception) -> None:
        """What raised in a callback (the log with no descriptor left, or a bug) is said
        as the task's end says it (`Wire.failed`), the exchange in flight ended with its
        line if the log takes it, and the connection closed: nothing escapes into
        asyncio, which would close the transport and leave the task parked."""
        with contextlib.suppress(Exception):
            self.proxy.failed(error)
        exchange = self.exchange
        if exchange is not None:
            self.exchange = None
            exchange.protocol.sink = None
            exchange.upstream.close()
            with contextlib.suppress(Exception):
                self.proxy.log.write("ended", exchange.authority, ended_detail(
                    exchange.call, 0, exchange.reading.passed, exchange.started,
                    f" error={type(error).__name__}"))
        self._wake(END)

    def _wake(self, note: Note) -> None:
        parked = self.parked
        if parked is None:
            return
        self.parked = None  # from now on the task's: the lane takes nothing
        if parked.done():  # its timer rang; the task has not run since
            self.missed = note
        else:
            parked.set_result(note)


def take_kept(proxy: Proxy, kept: list[Upstream | None], target: Target
              ) -> Upstream | None:
    """The connection's kept upstream (`kept`'s one slot, emptied), when a request to
    `target` may go on it: the same authority (its address was checked when it was
    opened), still open, and nothing it sent unasked held (those bytes would be read as
    this request's response); then the wire's gate and the name checked again, and the
    call counted (Proxy.check_name: Refused, and the upstream closed). Else it is
    closed, and None: the request is decided afresh on a new connection. The one rule,
    for the lane's requests and the task's (lnk_proxy.forward)."""
    previous, kept[0] = kept[0], None
    if previous is None:
        return None
    if not (previous.authority == target.authority and previous.usable()
            and not held(previous.reader)):
        previous.close()
        return None
    try:
        proxy.check_name(target)
    except BaseException:
        previous.close()
        raise
    return previous


Handler = Callable[[Inbox, Outbox], Coroutine[Any, Any, None]]


class LaneProtocol(Ends):
    """A client connection's protocol (lnk_proxy.streams): while the connection is HTTP
    (`serve`), its bytes go to its machine (lnk_proxy.connection), where they wait until
    a command takes them, and its lane is told (the task, if it waits, woken by the
    inbox); else, and once a relay has taken the connection, to its inbox. Its handler
    runs as the connection's task from the moment it is made (as asyncio.start_server's
    did)."""

    def __init__(self, handler: Handler) -> None:
        super().__init__(CLIENT_BUFFER_BYTES)
        self.handler = handler
        self.lane: Lane | None = None
        self.machine: ClientConnection | None = None
        self.task: asyncio.Task[None] | None = None  # held: a task is only weakly kept

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.outbox is not None  # made just now
        self.task = asyncio.get_running_loop().create_task(
            self.handler(self.inbox, self.outbox))

    def serve(self, machine: ClientConnection) -> None:
        """The connection is HTTP, read by `machine`: its bytes go there from now, with
        what the inbox held already (and its end), until a read of the inbox takes them
        back (a relay's)."""
        self.machine = machine
        held = self.inbox.hand_over(self._given_back)
        if held:
            machine.receive_data(held)
        if self.inbox.at_eof():
            machine.receive_data(b"")

    def _given_back(self) -> bytes:
        machine, self.machine = self.machine, None
        return machine.take_held() if machine is not None else b""

    def data_received(self, data: bytes) -> None:
        machine = self.machine
        if machine is None:
            super().data_received(data)
            return
        machine.receive_data(data)
        self.inbox.arrived(machine.held)
        if self.lane is not None:
            self.lane.moved()

    def eof_received(self) -> bool:
        keep = super().eof_received()
        if self.machine is not None:
            self.machine.receive_data(b"")
        if self.lane is not None:
            self.lane.client_ended(False)
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.machine is not None and exc is None:
            self.machine.receive_data(b"")
        if self.lane is not None:
            self.lane.client_ended(True)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.lane is not None:
            self.lane.pause()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self.lane is not None:
            self.lane.resume()


class UpstreamProtocol(Ends):
    """An upstream connection's protocol (lnk_proxy.streams): its bytes go to a lane
    while the lane's exchange is on it (`sink`), else to its inbox."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.sink: Lane | None = None

    def data_received(self, data: bytes) -> None:
        sink = self.sink
        if sink is not None:
            sink.upstream_data(data)
            return
        super().data_received(data)

    def eof_received(self) -> bool:
        keep = super().eof_received()
        if self.sink is not None:
            self.sink.upstream_ended(clean=True)
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.sink is not None:
            self.sink.upstream_ended(clean=False)


async def lane_server(handler: Handler, sock: socket.socket) -> asyncio.Server:
    """A server on a listening `sock`, each connection's protocol a LaneProtocol (the
    connection's handler makes its lane)."""
    return await asyncio.get_running_loop().create_server(lambda: LaneProtocol(handler),
                                                          sock=sock)
