"""The relay's I/O: one connection from inside, one to this machine's loopback.

A `[localhost]` port is relayed as it is (splice, nothing read). A models port
(`model_ports`, `[localhost] models`) is read as HTTP: ONE request per connection, its
head and body checked by the local model's inference filter (lnk_proxy.local_models, sans
IO), our own re-serialisation sent on with `Connection: close`, the response streamed back
as it arrives (an SSE or NDJSON stream token by token, never held whole) with `Connection:
close`, and the connection closed after it: every request on a models port is read, none
rides on an earlier one's connection. A refusal is one line to the program (an HTTP status
and a one-line JSON body, the verbs' shape) and one `refused localhost:PORT reason=…` line
on the wire's log, which never holds the path, a header or the body.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import h11

from lnk_common.bodies import PASSED, BodyShare, HeldBodies, pass_response, read_body
from lnk_common.controls import Controls, SharedControls
from lnk_common.wire import (
    OUT_OF_DESCRIPTORS,
    Refused,
    Wire,
    is_out_of_descriptors,
    linger,
    no_delay,
    refusal_head,
)
from lnk_common.wirelog import WireLog, ended_detail

__all__ = ["BODY_IDLE_SECONDS", "CONNECT_SECONDS", "HEAD_SECONDS",
           "MAX_HELD_BODY_BYTES", "RESPONSE_IDLE_SECONDS", "Relay"]

# Connecting to this machine's loopback is immediate, or nothing listens.
CONNECT_SECONDS = 5.0
# A models port's client has this long to send a whole request head (slowloris: a head
# dribbled a byte at a time holds a connection and its memory for nothing).
HEAD_SECONDS = 10.0
# ... and may pause this long within its body (an SDK sends it at once; a large base64
# image over a slow link still moves every minute).
BODY_IDLE_SECONDS = 60.0
# A local model's answer can take long before its first byte (a model loaded from disk,
# a long answer not streamed, generated on a CPU): this long with nothing from the
# runtime ends the call. A client that goes away ends it at once (watched).
RESPONSE_IDLE_SECONDS = 3600.0
# The request bodies the relay holds at once, across its models ports' calls: a call holds
# its body (up to the filter's MAX_BODY_BYTES, 32 MiB) from its first byte until it is sent
# on; a program opening many connections with large bodies would otherwise hold gigabytes
# of this machine's memory, outside the sandbox. Four bodies at the limit; over it, 503.
MAX_HELD_BODY_BYTES = 128 * 1024 * 1024
HELD_BODIES_FULL = (f"the relay holds {MAX_HELD_BODY_BYTES // (1024 * 1024)} MiB of request "
                    "bodies already (MAX_HELD_BODY_BYTES); try again when a call has ended")
# What one read takes from a socket.
_CHUNK = 65536
# Never sent back to the program: hop-by-hop fields (RFC 9110 7.6.1); `connection: close`
# is set by the relay itself (one request a connection).
_HOP_FIELDS = frozenset({b"connection", b"proxy-connection", b"keep-alive", b"te",
                         b"trailer", b"upgrade"})


class Relay(Wire):
    """`to_port`: where on this machine's loopback (None: the port the connection came
    to inside, as the launcher's sockets are made). `model_ports`: the ports (of this
    machine's loopback) whose calls pass the local model's inference filter;
    `server_tools`: `[network] server_tools` for those calls (off: a runtime's own web
    search is removed as the model verb removes a provider's)."""

    def __init__(self, *, log: WireLog, settings: str, wire: str,
                 controls: Controls | SharedControls, say: Callable[[str], None],
                 to_port: int | None = None, model_ports: frozenset[int] = frozenset(),
                 server_tools: bool = False) -> None:
        super().__init__(log=log, settings=settings, wire=wire, controls=controls, say=say)
        self.to_port = to_port
        self.model_ports = model_ports
        self.server_tools = server_tools
        # Every models call's body, at most MAX_HELD_BODY_BYTES (lnk_common.bodies).
        self.held_bodies = HeldBodies(MAX_HELD_BODY_BYTES, HELD_BODIES_FULL)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        came_to = writer.get_extra_info("sockname")
        port = self.to_port or came_to[1]
        if port in self.model_ports:
            await self.hold(writer, self._filtered(reader, writer, port, came_to[0]),
                            asked=False)
        else:
            await self.hold(writer, self._carry(reader, writer, port, came_to[0]))

    async def _upstream(self, port: int, came_to: str
                        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `port` of this machine's loopback, [::1] first for a call that
        came to [::1] and 127.0.0.1 first for one that came to 127.0.0.1, or Refused."""
        order = ("::1", "127.0.0.1") if ":" in came_to else ("127.0.0.1", "::1")
        for address in order:
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port), CONNECT_SECONDS)
            except OSError as error:
                if is_out_of_descriptors(error):  # said as such: not the port's fault
                    raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
                continue
            except TimeoutError:
                continue
            no_delay(up_writer)
            return up_reader, up_writer
        raise Refused(502, f"nothing listens on port {port} of this machine's loopback")

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     port: int, came_to: str) -> None:
        target = f"localhost:{port}"
        up_writer = None
        try:
            self.gate()
            up_reader, up_writer = await self._upstream(port, came_to)
            ends = await self.splice_ends(reader, writer, up_reader, up_writer)
        except Refused as refusal:
            if up_writer is not None:
                up_writer.close()
            self.log.write("refused", target, f"reason={refusal.logged}")
            self.count_refusal(target, refusal)
            return
        call = next(self.ids)
        self.log.write("allowed", target, f"id={call} kind=relay")
        started = time.monotonic()
        counted = [0, 0]
        try:
            counted[:] = await self.relay(ends, up_writer)
        finally:
            self.log.write("ended", target,
                           ended_detail(call, counted[0], counted[1], started))

    # -- a models port: one request, filtered --------------------------------------------

    async def _filtered(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        port: int, came_to: str) -> None:
        from lnk_proxy import local_models

        target = f"localhost:{port}"
        client = h11.Connection(h11.SERVER,
                                max_incomplete_event_size=local_models.MAX_HEAD_BYTES)
        held = self.held_bodies.share()
        try:
            await self._filtered_call(reader, writer, port, came_to, target, client, held)
        finally:
            held.release()

    async def _filtered_call(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter, port: int, came_to: str,
                             target: str, client: h11.Connection, held: BodyShare) -> None:
        from lnk_proxy import local_models

        up_writer: asyncio.StreamWriter | None = None
        try:
            try:
                request = await asyncio.wait_for(_request_head(client, reader), HEAD_SECONDS)
            except TimeoutError:
                raise Refused(408, "the request head took too long") from None
            if request is None:
                return  # closed before a request: nothing was asked, nothing went
            self.asked()  # a call from here: the switches close it (the gate first)
            self.gate()
            admitted = local_models.route(request.method, request.target)
            headers = local_models.check_headers(list(request.headers))
            raw = await _request_body(request, client, reader, writer, held)
            body = local_models.check_body(admitted, raw, server_tools=self.server_tools)
            del raw  # the program's bytes are not needed again (nor held: MAX_HELD_BODY_BYTES)
            up_reader, up_writer = await self._upstream(port, came_to)
        except (Refused, local_models.LocalModelError) as error:
            refusal = (error if isinstance(error, Refused)
                       else Refused(error.status, error.reason))
            if up_writer is not None:
                up_writer.close()
            await self._refuse(reader, writer, target, refusal)
            return
        if not any(name == b"host" for name, _ in headers):
            headers.append((b"host", f"localhost:{port}".encode()))  # an HTTP/1.0 client's
        if admitted.body != "none":
            # The body is the filter's JSON, whatever type the program named (a form or
            # multipart type could make a runtime read it otherwise).
            headers = [(name, value) for name, value in headers if name != b"content-type"]
            headers.append((b"content-type", b"application/json"))
            headers.append((b"content-length", str(len(body)).encode()))
        headers.append((b"connection", b"close"))
        outgoing = h11.Request(method=admitted.method, target=admitted.target.encode(),
                               headers=headers)
        # Handed over in a list that _exchange empties: once sent on, no frame holds it.
        payload = [body]
        del body
        await self._exchange(target, client, reader, writer, up_reader, up_writer,
                             outgoing, payload, held)

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      target: str, refusal: Refused) -> None:
        self.log.write("refused", target, f"reason={refusal.logged}")
        from lnk_proxy import local_models

        # The verbs' JSON, which every SDK reads its error message from (a text body's
        # reason the openai SDK never showed).
        text = local_models.refusal_body(refusal.status, refusal.reason)
        writer.write(refusal_head(refusal, "application/json", len(text)) + text)
        self.count_refusal(target, refusal)
        with contextlib.suppress(OSError):  # the program gone already: nothing to say
            await writer.drain()
            await linger(reader, writer)

    async def _exchange(self, target: str, client: h11.Connection,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                        outgoing: h11.Request, payload: list[bytes], held: BodyShare) -> None:
        """The one allowed request sent on, and its response streamed back as it comes:
        each piece the runtime sends is written to the program at once. An `allowed` and
        an `ended` line on the wire's log (the ended one also when the call is cancelled
        by the kill switch, a pause or the relay's end)."""
        call = next(self.ids)
        self.log.write("allowed", target, f"id={call} kind=local-model")
        started = time.monotonic()
        sent = 0
        streamed = _Streamed()
        failure = ""
        conn = h11.Connection(h11.CLIENT)
        gone = asyncio.ensure_future(_client_gone(reader, up_writer))
        try:
            body = payload.pop()
            up_writer.write(conn.send(outgoing))
            if body:
                up_writer.write(conn.send(h11.Data(data=body)))
            up_writer.write(conn.send(h11.EndOfMessage()))
            sent = len(body)
            del body
            await up_writer.drain()
            held.release()  # sent on: the answer may stream for minutes without it
            # What one read from the runtime holds (a token, or several when the runtime
            # is faster than the program) goes to the program in one write, before the
            # next read: never held past the read that brought it (lnk_common.bodies).
            ended = await pass_response(conn, client, writer,
                                        _reads(up_reader, RESPONSE_IDLE_SECONDS), streamed,
                                        fields=_response_fields)
            if ended != PASSED:  # the runtime closed before its response ended (h11
                failure = " error=runtime-closed"  # admits no 101: none was asked)
        except (h11.ProtocolError, ConnectionError, TimeoutError, asyncio.IncompleteReadError
                ) as error:
            failure = f" error={type(error).__name__}"
        finally:
            gone.cancel()
            if gone.done() and not gone.cancelled() and gone.result():
                failure = " error=client-gone"
            up_writer.close()
            self.log.write("ended", target,
                           ended_detail(call, sent, streamed.received, started, failure))


class _Streamed:
    """What the response's passing moved (lnk_common.bodies.Streamed)."""

    __slots__ = ("received", "responded")

    def __init__(self) -> None:
        self.received = 0
        self.responded = False


def _response_fields(fields: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The runtime's response fields as the program gets them: no hop-by-hop field, and
    `connection: close` (one request a connection)."""
    return [*((name, value) for name, value in fields if name.lower() not in _HOP_FIELDS),
            (b"connection", b"close")]


def _reads(reader: asyncio.StreamReader, idle: float) -> Callable[[], Awaitable[bytes]]:
    """A read of up to _CHUNK bytes of `reader`, waiting at most `idle` seconds."""
    return lambda: asyncio.wait_for(reader.read(_CHUNK), idle)


async def _request_head(client: h11.Connection, reader: asyncio.StreamReader
                        ) -> h11.Request | None:
    """The request's head, or None for a connection closed before one began; Refused for
    what h11 does not read as HTTP/1.1 (its message is not quoted: it may hold the
    program's bytes) and for a head over MAX_HEAD_BYTES (h11 bounds only a head still
    incomplete: one that arrives whole in a read is measured here)."""
    from lnk_proxy.local_models import MAX_HEAD_BYTES

    fed = 0
    try:
        while True:
            event = client.next_event()
            if event is not h11.NEED_DATA:
                break
            data = await asyncio.wait_for(reader.read(_CHUNK), HEAD_SECONDS)
            fed += len(data)
            client.receive_data(data)
    except h11.RemoteProtocolError as error:
        status = error.error_status_hint if error.error_status_hint in (400, 431) else 400
        raise Refused(status, "the request is not HTTP/1.1 as h11 reads it (or its head is "
                              "too large)") from None
    if not isinstance(event, h11.Request):
        return None  # ConnectionClosed: nothing asked
    if fed - len(client.trailing_data[0]) > MAX_HEAD_BYTES:
        raise Refused(431, "the request is not HTTP/1.1 as h11 reads it (or its head is "
                           "too large)")
    return event


async def _request_body(request: h11.Request, client: h11.Connection,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        held: BodyShare) -> bytes:
    """The request's whole body, at most the filter's MAX_BODY_BYTES, or Refused (413
    from the Content-Length before a byte is read, else as it passes; 503 when the relay
    holds MAX_HELD_BODY_BYTES already)."""
    from lnk_proxy.local_models import MAX_BODY_BYTES

    too_large = Refused(413, f"the body is over {MAX_BODY_BYTES // (1024 * 1024)} MiB "
                             "(MAX_BODY_BYTES)")
    return await read_body(request, client, writer, _reads(reader, BODY_IDLE_SECONDS),
                           limit=MAX_BODY_BYTES, too_large=too_large, take=held.take,
                           unreadable="the request body is not HTTP/1.1 as h11 reads it",
                           stalled="the request body stalled")


async def _client_gone(reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter) -> bool:
    """True once the program's side has ended (what it sends after its one request is
    not read: the relay answers that one and closes); the runtime's connection is closed
    then, so that the runtime's work and the socket are not held for nobody."""
    with contextlib.suppress(ConnectionError):
        while await reader.read(_CHUNK):
            pass
    up_writer.close()
    return True
