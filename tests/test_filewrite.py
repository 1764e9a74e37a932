"""lnk_common.filewrite: the one read of an open file to its end or past a limit, and the
one synced write, on real files in tmp (a pipe for reads that come in pieces)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from lnk_common.filewrite import read_whole, write_synced


@pytest.mark.parametrize(("size", "limit", "expected"), [
    (0, None, 0), (1, None, 1), (200_000, None, 200_000),
    (10, 10, 10), (11, 10, 11), (500, 10, 11), (0, 0, 0), (5, 0, 1),
])
def test_read_whole_reads_to_the_end_or_one_past_its_limit(
    tmp_path: Path, size: int, limit: int | None, expected: int
) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * (size // 256) + bytes(size % 256))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_whole(fd, limit) == path.read_bytes()[:expected]
    finally:
        os.close(fd)


def test_read_whole_gathers_what_comes_in_pieces() -> None:
    """A pipe gives what has been written so far: the read goes on to the end."""
    read, write = os.pipe()

    def writer() -> None:
        for _ in range(50):
            os.write(write, b"x" * 1000)
        os.close(write)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert read_whole(read) == b"x" * 50_000
    finally:
        thread.join()
        os.close(read)


def test_write_synced_writes_whole_with_its_mode_and_closes(tmp_path: Path) -> None:
    path = tmp_path / "w"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    write_synced(fd, b"y" * 300_000, 0o600)
    with pytest.raises(OSError):
        os.fstat(fd)  # closed (looked at before anything else may take its number)
    assert path.read_bytes() == b"y" * 300_000
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
