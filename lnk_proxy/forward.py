"""Forwarding: a request to a host of the sandbox's own (absolute form to the proxy, or
in a port-80 tunnel), after the connection's machine admitted its head and its route
(lnk_proxy.connection).

Order: the upstream connection of the connection's last request is used again when
this one goes to the same host and port and it sent nothing unasked (its address was
checked when it was opened; the wire's gate and the name are checked again, and the
call counted: Proxy.check_name); otherwise a new one, decided afresh (gate, name,
lookup, every address: Proxy.decide) and opened to the very address checked. Then the
exchange: a body-less request's is the lane's (lnk_proxy.lane, `Lane.carry`), any
other's h11's (lnk_proxy.exchange); the upstream kept for the next request when it ended
clean, and, when a kept upstream had closed before answering (a server's idle timeout),
the request sent again, once, on a new connection: nothing of its body was sent, so
nothing of it was lost. A body-less request the lane carried out comes back here only
for that retry (the machine gives it again): its response, whatever it is, is the
lane's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import h11

from lnk_common.wire import Refused, linger
from lnk_proxy.connection import ClientConnection, Forward
from lnk_proxy.exchange import (
    IDLE_SECONDS,
    Outcome,
    asks_to_upgrade,
    client_body,
    exchange,
    next_cycle,
    outgoing,
)
from lnk_proxy.lane import Lane, take_kept
from lnk_proxy.streams import Inbox, Outbox
from lnk_proxy.upstream import Upstream

if TYPE_CHECKING:
    from lnk_proxy.server import Proxy

__all__ = ["forward"]


async def forward(proxy: Proxy, request: Forward, reader: Inbox, writer: Outbox, lane: Lane,
                  connection: ClientConnection) -> tuple[bool, bytes] | None:
    """The request and its response; (whether the client's connection goes on to
    another request, the bytes it already sent of that one), or None when the lane
    carries out the exchange (a body-less request: the task parks until it ends).
    `lane.kept` holds the connection's upstream between requests; `connection` (its
    machine) reads a body."""
    target = request.target
    try:
        kept = take_kept(proxy, lane.kept, target)  # the lane's rule too
        upstream = kept or await proxy.connect_upstream(target)
    except Refused as refusal:
        await proxy.refuse(writer, target.authority, refusal)
        await linger(reader, writer)  # the refusal read, not reset away
        return False, b""
    was_kept = kept is not None
    if request.parsed is None:
        lane.carry(connection, request, upstream, was_kept=was_kept)
        return None
    client, asked = request.parsed
    outcome = await exchange(proxy, target.authority, "http", client, reader, writer,
                             upstream, outgoing(asked, request.path,
                                                asks_to_upgrade(asked.headers)),
                             body=client_body(connection, reader, writer, IDLE_SECONDS))
    return await _settle(proxy, outcome, client, upstream, was_kept, request,
                         reader, writer, lane, connection)


async def _settle(proxy: Proxy, outcome: Outcome, client: h11.Connection,
                  upstream: Upstream, was_kept: bool, request: Forward,
                  reader: Inbox, writer: Outbox, lane: Lane, connection: ClientConnection
                  ) -> tuple[bool, bytes] | None:
    """After a passed request's exchange (h11's, for a request h11 read): its upstream
    kept when reusable, the request sent again when its kept upstream had closed, and
    whether the client's connection goes on."""
    if outcome.reusable:
        upstream.conn.start_next_cycle()  # h11 read this exchange: its state goes round
        lane.kept[0] = upstream
    if outcome.failure and was_kept and not outcome.responded and outcome.sent == 0:
        # The kept connection was closed by the server meanwhile: a request with no body
        # sent is sent again, once, on a new connection (checked afresh), which is then
        # kept as any other (and closed with the client's). Its body goes on from the
        # machine where it is (an ended one gives its end again).
        return await proxy.forward(request, reader, writer, lane, connection)
    return next_cycle(client, outcome)
