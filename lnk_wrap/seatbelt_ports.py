"""The proxy's port on the Mac's loopback, fixed per agent: the last of the agent's block.

On macOS the proxy listens on the machine's loopback (Seatbelt allows a port whole or not
at all, and the sandbox shares the machine's network), so each agent's proxy needs a
port of its own that its harness is configured with before it starts. Each agent gets a
block of AGENT_PORT_BLOCK ports, numbered from FIRST_AGENT_PORT_BLOCK; its proxy takes the
last of them: `main`'s block is always the first, so its proxy is on 40781 (the seed).
Any other agent, or a spec with a wire but no agent (by its wire's name), gets the next
block free the first time it is wrapped, and keeps it: the table is a file in Link's
settings (PORTS_FILE, hidden in every sandbox), one key a line, appended under a lock.

`block_port` and `reading` are pure; `port_for` is the one function that touches a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from lnk_common.policy import Policy, is_name

__all__ = ["AGENT_PORT_BLOCK", "FIRST_AGENT_PORT_BLOCK", "MAIN_AGENT", "MAX_BLOCKS",
           "PORTS_FILE", "PortsError", "block_port", "key_of", "open_folder", "port_for",
           "port_for_key", "reading", "url_port"]

# The first block: 40772 to 40781, so `main`'s proxy is on 40781 (the seed's number).
FIRST_AGENT_PORT_BLOCK = 40772
# Ten ports an agent: its proxy on the last, the others kept for its harness's own
# servers, so two agents never meet on a port they were configured with.
AGENT_PORT_BLOCK = 10
MAIN_AGENT = "main"
# Blocks up to the last port there is (65535): 2,476 agents and wires, far past a Mac's.
MAX_BLOCKS = (65535 - FIRST_AGENT_PORT_BLOCK + 1) // AGENT_PORT_BLOCK
# The table in Link's settings: one key (`agent NAME` or `wire NAME`) a line, its block
# its line's number after main's.
PORTS_FILE = ("sandbox", "macos-ports")
# A table of MAX_BLOCKS keys of at most 70 bytes each, and a little more.
MAX_PORTS_FILE_BYTES = MAX_BLOCKS * 72


class PortsError(Exception):
    """No port for this policy: one line, nothing is printed."""


def block_port(index: int) -> int:
    """The proxy's port of block `index` (0 is main's): the last of the block."""
    if not 0 <= index < MAX_BLOCKS:
        raise PortsError(f"no port block {index}: at most {MAX_BLOCKS} agents and wires")
    return FIRST_AGENT_PORT_BLOCK + index * AGENT_PORT_BLOCK + AGENT_PORT_BLOCK - 1


def key_of(policy: Policy) -> str:
    """The table's key of `policy`: its agent, else its wire; refused without either."""
    if policy.agent:
        return f"agent {policy.agent}"
    if policy.name:
        return f"wire {policy.name}"
    raise PortsError("on macOS the proxy's port is fixed per agent or wire: give the spec "
                     "an [agent] or a name (or --wire)")


def url_port(settings: str, policy: Policy | None, agent: str | None) -> int:
    """`url --platform macos`: the port of the spec's agent or wire, else of `agent`,
    given a block the first time as `wrap` would; PortsError for any failure."""
    if policy is not None:
        key = key_of(policy)
    elif agent is None or not is_name(agent):
        raise PortsError("url --platform macos needs --agent=NAME or --spec=FILE: the port "
                         "is the agent's")
    else:
        key = f"agent {agent}"
    try:
        return port_for_key(settings, key)[0]
    except OSError as error:
        raise PortsError(f"the macOS ports' table: {error.strerror}") from None


def reading(text: str) -> list[str]:
    """The table's keys, in order (blank lines skipped)."""
    return [line for line in text.split("\n") if line]


def _index(keys: list[str], key: str) -> int | None:
    if key == f"agent {MAIN_AGENT}":
        return 0
    return keys.index(key) + 1 if key in keys else None


def port_for(settings: str, policy: Policy) -> tuple[int, tuple[int, ...]]:
    """The proxy's port of `policy`'s agent or wire, given a block the first time; and
    every port the table gives (main's included), which no sandbox may listen on."""
    return port_for_key(settings, key_of(policy))


_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(parent: int | None, name: str) -> int:
    """`name` in the folder `parent` (or a path, with None) opened as a folder, made 0700
    when missing, never through a link: a link planted in Link's settings is refused."""
    if parent is not None:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=parent)
    try:
        return os.open(name, _OPEN_FOLDER, dir_fd=parent)
    except OSError as error:
        raise PortsError(f"{name}: not a folder of Link's settings (a link or a file is "
                         f"there: {error.strerror}); refused, nothing followed") from None


def port_for_key(settings: str, key: str) -> tuple[int, tuple[int, ...]]:
    """port_for by the table's key (`agent NAME`, `wire NAME`)."""
    root = open_folder(None, settings)
    try:
        folder = open_folder(root, PORTS_FILE[0])
    finally:
        os.close(root)
    try:
        fd = os.open(PORTS_FILE[1], os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=folder)
    finally:
        os.close(folder)
    path = os.path.join(settings, *PORTS_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = os.pread(fd, MAX_PORTS_FILE_BYTES + 1, 0)
        if len(data) > MAX_PORTS_FILE_BYTES:
            raise PortsError(f"{path}: larger than {MAX_PORTS_FILE_BYTES} bytes; not a table")
        keys = reading(data.decode("utf-8", "replace"))
        index = _index(keys, key)
        if index is None:
            index = len(keys) + 1
            block_port(index)  # refused past the last block, before anything is written
            start = b"" if not data or data.endswith(b"\n") else b"\n"
            os.pwrite(fd, start + f"{key}\n".encode(), len(data))
            os.fsync(fd)
            keys.append(key)
        ports = (block_port(0), *(block_port(number + 1) for number in range(len(keys))))
        return block_port(index), ports
    finally:
        os.close(fd)
