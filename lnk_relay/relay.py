"""The relay's I/O: one connection from inside, one to this machine's loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lnk_common.controls import Controls, SharedControls
from lnk_common.wire import OUT_OF_DESCRIPTORS, Refused, Wire, is_out_of_descriptors, no_delay
from lnk_common.wirelog import WireLog

__all__ = ["CONNECT_SECONDS", "Relay"]

# Connecting to this machine's loopback is immediate, or nothing listens.
CONNECT_SECONDS = 5.0


class Relay(Wire):
    """`to_port`: where on this machine's loopback (None: the port the connection came
    to inside, as the launcher's sockets are made)."""

    def __init__(self, *, log: WireLog, settings: str, wire: str,
                 controls: Controls | SharedControls, say: Callable[[str], None],
                 to_port: int | None = None) -> None:
        super().__init__(log=log, settings=settings, wire=wire, controls=controls, say=say)
        self.to_port = to_port

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.hold(writer, self._carry(reader, writer))

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        came_to = writer.get_extra_info("sockname")
        port = self.to_port or came_to[1]
        target = f"localhost:{port}"
        order = ("::1", "127.0.0.1") if ":" in came_to[0] else ("127.0.0.1", "::1")
        up_writer = None
        try:
            self.gate()
            upstream = None
            for address in order:
                try:
                    upstream = await asyncio.wait_for(
                        asyncio.open_connection(address, port), CONNECT_SECONDS)
                    break
                except OSError as error:
                    if is_out_of_descriptors(error):  # said as such: not the port's fault
                        raise Refused(503, OUT_OF_DESCRIPTORS, counts=False) from None
                except TimeoutError:
                    pass
            if upstream is None:
                raise Refused(502, f"nothing listens on port {port} of this machine's "
                                   "loopback")
            up_reader, up_writer = upstream
            no_delay(up_writer)
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
                           f"id={call} sent={counted[0]} received={counted[1]} "
                           f"seconds={time.monotonic() - started:.3f}")
