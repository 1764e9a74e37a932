"""A file's bytes whole: the one loop every atomic write here shares (Link's secrets, the
ask queue's records, guests.toml and authorized_keys), and the one read of an open file
to its end or past a limit (secrets, a wire's additions, a wire's log for `learn` and
the runs' lines)."""

from __future__ import annotations

import os

__all__ = ["read_whole", "write_synced"]

# What one read(2) asks for when no limit is given (a log of a few MiB: some tens of reads).
_CHUNK_BYTES = 1 << 16


def write_synced(fd: int, data: bytes, mode: int) -> None:
    """`data` written whole to `fd` (a short write goes on where it stopped), its mode
    exactly `mode` (a umask only takes bits away), synced to disk; `fd` closed, whatever
    happens. The caller renames or links the file into place after."""
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_whole(fd: int, limit: int | None = None) -> bytes:
    """`fd`'s bytes from where it stands to its end; with `limit`, at most `limit` + 1 of
    them (the one more tells the caller the file is too large, unread past it). `fd` is
    the caller's to close."""
    chunks: list[bytes] = []
    size = 0
    while limit is None or size <= limit:
        chunk = os.read(fd, _CHUNK_BYTES if limit is None else limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
