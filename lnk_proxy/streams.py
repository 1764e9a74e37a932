"""The proxy's stream reader: asyncio's, saying how many bytes it holds, by its public
methods only.

Two decisions need to know whether a reader holds bytes not read yet: a read that finds
them there sets no timer (Python 3.11's wait_for made a task of each read and took two
turns of the loop more, some 30 µs of a kept-alive request's three reads each; a timer
set and cancelled costs a few µs more than none), and an upstream that sent more than
its response's length is not used again (those bytes would be read as the next
request's response). asyncio's StreamReader keeps that count in a private buffer; an
`Inbox` counts it itself, from what it is fed and what is read out of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["Inbox", "held", "read_within"]


class Inbox(asyncio.StreamReader):
    """A StreamReader whose `held` is the bytes fed to it and not yet read out. Every way
    bytes leave it (read, readexactly, readuntil, readline) is counted; a reader handed
    to the splice (lnk_common.wire.Wire.splice_ends, which empties it by its public
    methods) is never read again."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.held = 0

    def feed_data(self, data: Any) -> None:  # bytes; typeshed's wider type
        super().feed_data(data)
        self.held += len(data)

    async def read(self, n: int = -1) -> bytes:
        data = await super().read(n)
        self.held -= len(data)
        return data

    async def readexactly(self, n: int) -> bytes:
        data = await super().readexactly(n)
        self.held -= len(data)
        return data

    async def readuntil(self, separator: Any = b"\n") -> bytes:  # typeshed's type
        data = await super().readuntil(separator)
        self.held -= len(data)
        return data

    async def readline(self) -> bytes:
        data = await super().readline()
        self.held -= len(data)
        return data


def held(reader: asyncio.StreamReader) -> bool:
    """Whether `reader` may hold bytes not read yet: an Inbox says; any other reader is
    taken to (the safe answer for both decisions above: a timer set, a connection not
    used again)."""
    return reader.held > 0 if isinstance(reader, Inbox) else True


async def read_within(reader: asyncio.StreamReader, size: int, seconds: float) -> bytes:
    """What `reader` has (up to `size` bytes), waiting at most `seconds` for it;
    TimeoutError past that. asyncio.timeout, not wait_for (one timer, no task), and no
    timer at all when the bytes are there already."""
    if isinstance(reader, Inbox) and reader.held:
        return await reader.read(size)
    async with asyncio.timeout(seconds):
        return await reader.read(size)
