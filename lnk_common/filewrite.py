"""Writing a new file's bytes whole: the one loop every atomic write here shares (Link's
secrets, the ask queue's records, guests.toml and authorized_keys)."""

from __future__ import annotations

import os

__all__ = ["write_synced"]


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
