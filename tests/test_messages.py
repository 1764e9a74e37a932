"""lnk_execwatch.messages: a sendmsg's header and control data read as the kernel reads
them (copy_msghdr_from_user, __scm_send), the errno the kernel gives for each fault."""

from __future__ import annotations

import contextlib
import errno
import socket
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_execwatch.messages import (
    MSGHDR_BYTES,
    SCM_RIGHTS,
    SOL_SOCKET,
    Control,
    MessageError,
    build_control,
    parse_control,
    parse_header,
    parse_iovecs,
)


def _header(name_at: int = 0x1000, name_length: int = 16, iov_at: int = 0x2000,
            iov_count: int = 1, control_at: int = 0, control_length: int = 0) -> bytes:
    return struct.pack("=QiiQQQQi4x", name_at, name_length, 0, iov_at, iov_count,
                       control_at, control_length, 0)


def test_a_header_is_read_as_the_kernel_copies_it() -> None:
    header = parse_header(_header())
    assert (header.name_at, header.name_length, header.iov_at, header.iov_count) == (
        0x1000, 16, 0x2000, 1)
    assert parse_header(_header(name_at=0, name_length=16)).name_length == 0
    assert parse_header(_header(name_length=4096)).name_length == 128


@pytest.mark.parametrize(("raw", "code"), [
    (_header(name_length=-1), errno.EINVAL),
    (_header(iov_count=1025), errno.EMSGSIZE),
    (_header(control_length=1 << 31), errno.ENOBUFS),
    (_header()[:MSGHDR_BYTES - 1], errno.EFAULT),
])
def test_a_header_the_kernel_refuses_is_its_errno(raw: bytes, code: int) -> None:
    with pytest.raises(MessageError) as refused:
        parse_header(raw)
    assert refused.value.code == code


def test_iovecs_pair_addresses_and_lengths() -> None:
    assert parse_iovecs(struct.pack("=QQQQ", 1, 2, 3, 4)) == [(1, 2), (3, 4)]
    with pytest.raises(MessageError):
        parse_iovecs(b"\0" * 15)


def test_control_data_as_libc_lays_it_out_is_read_back() -> None:
    """The same bytes Python's own sendmsg would give the kernel (CMSG_SPACE each)."""
    rights = struct.pack("=iii", 3, 4, 5)
    raw = (struct.pack("=Qii", socket.CMSG_LEN(12), SOL_SOCKET, SCM_RIGHTS) + rights
           + b"\0" * (socket.CMSG_SPACE(12) - socket.CMSG_LEN(12))
           + struct.pack("=Qii", socket.CMSG_LEN(4), 0, 1) + b"\x07\0\0\0" + b"\0" * 4)
    found = parse_control(raw)
    assert [(c.level, c.kind, c.fds) for c in found] == [(1, 1, (3, 4, 5)), (0, 1, ())]
    assert build_control(found) == raw


@pytest.mark.parametrize("raw", [
    struct.pack("=Qii", 8, 1, 1),  # shorter than its own header
    struct.pack("=Qii", 64, 1, 1) + b"\0" * 8,  # longer than what is left
    struct.pack("=Qii", 16, SOL_SOCKET, SCM_RIGHTS),  # rights with no descriptor
    struct.pack("=Qii", 16 + 4 * 254, SOL_SOCKET, SCM_RIGHTS) + b"\0" * 4 * 254,
])
def test_control_data_the_kernel_refuses_is_einval(raw: bytes) -> None:
    with pytest.raises(MessageError) as refused:
        parse_control(raw)
    assert refused.value.code == errno.EINVAL


@given(st.lists(st.tuples(st.integers(0, 300), st.integers(0, 5), st.binary(max_size=40)),
                max_size=6))
def test_built_control_data_reads_back_the_same(
        messages: list[tuple[int, int, bytes]]) -> None:
    controls = [Control(level, kind, data) for level, kind, data in messages
                if not (level == SOL_SOCKET and kind == SCM_RIGHTS)]
    again = parse_control(build_control(controls))
    assert [(c.level, c.kind, c.data) for c in again] == [
        (c.level, c.kind, c.data) for c in controls]


@given(st.binary(max_size=200))
def test_any_control_bytes_are_read_or_refused_never_raise_otherwise(raw: bytes) -> None:
    with contextlib.suppress(MessageError):
        parse_control(raw)
