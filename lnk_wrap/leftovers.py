"""What a launcher killed outright during a start would leave, ended by the sandbox's
watch (lnk_wrap.launch._watch).

bubblewrap's `--die-with-parent` has a gap (containers/bubblewrap issue #633, open): its
outer process sets its parent-death signal only after it has made the sandbox's first
process, which then waits in read(2) on an eventfd for the outer one's go. An outer
process that dies in between (its launcher killed: the death signal, or SIGPIPE on
--info-fd, whose only reader was the launcher) leaves that first process waiting for
ever, pid 1 of a pid namespace of its own, its parent init. Nothing of the sandbox has
run in it, but it stays.

The watch is forked before bubblewrap starts and outlives a killed launcher. When the
launcher ends before the sandbox's init has handed the watch its listener, the watch
ends every process that holds the init's end of their socket pair: only bubblewrap's
two processes and the init (before it hands that end over) ever hold it. They are found
by that socket's inode, which is unique while the socket exists, never by a command
line, and each is killed through a pidfd opened before its descriptors are looked at
again (a pid reused meanwhile is never killed). Killing the sandbox's pid 1 ends every
process of its pid namespace.

One look at /proc is not enough: a look taken while bubblewrap's outer process dies
just after making the first one was seen to miss both (CI's test, 1 run in some 300).
So the watch looks again until the kernel says that no process holds the init's end
any more: the watch's own end of the pair hangs up (POLLHUP), which no look can miss.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal

# How long the watch goes on looking for the holders before it gives up and says so:
# each is killed within a round, and a round takes milliseconds; a holder that outlives
# this is one it cannot end (the watch says so on its way out).
SWEEP_SECONDS = 10.0
# How long a round waits for what it killed to end: SIGKILL ends a process at once
# unless it is in an uninterruptible sleep (a slow mount); past it, the next round.
END_WAIT_MS = 2000
# How long the watch waits for the hang-up after a round that killed nothing, before it
# looks again (a process it did not see yet, made as it looked).
LOOK_AGAIN_MS = 20


def _holds(pid: str, target: str) -> bool:
    folder = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(folder)
    except OSError:  # gone, or not ours to look at (and so not ours to kill)
        return False
    for fd in fds:
        try:
            if os.readlink(f"{folder}/{fd}") == target:
                return True
        except OSError:
            continue
    return False


def holders(inode: int) -> list[int]:
    """The processes (other than this one) holding the unix socket `inode`."""
    target, own = f"socket:[{inode}]", str(os.getpid())
    return [int(pid) for pid in os.listdir("/proc")
            if pid.isdigit() and pid != own and _holds(pid, target)]


def end_holders(inode: int, other_end: int) -> bool:
    """Kill every process holding the unix socket `inode`, until none does: until
    `other_end`, the other end of its pair, hangs up. Return whether it did within
    SWEEP_SECONDS."""
    import time

    target = f"socket:[{inode}]"
    hung_up = select.poll()
    hung_up.register(other_end, 0)  # POLLHUP only: every holder of the other end gone
    deadline = time.monotonic() + SWEEP_SECONDS
    while not hung_up.poll(0):
        if time.monotonic() > deadline:
            return False
        found = holders(inode)
        if not found:
            hung_up.poll(LOOK_AGAIN_MS)
            continue
        ending = []
        for pid in found:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:  # ended meanwhile
                continue
            # The pidfd names one process for good: if it holds the socket now, it is
            # the one found (its pid cannot have been reused while it lives).
            if _holds(str(pid), target):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            ending.append(pidfd)
        _wait_ended(ending)
    return True


def _wait_ended(pidfds: list[int]) -> None:
    """Until each of `pidfds`' processes has ended (its descriptors closed), or
    END_WAIT_MS; the pidfds closed."""
    try:
        poller = select.poll()
        for pidfd in pidfds:
            poller.register(pidfd, select.POLLIN)
        waiting = set(pidfds)
        while waiting:
            ready = poller.poll(END_WAIT_MS)
            if not ready:
                break
            for pidfd, _ in ready:
                poller.unregister(pidfd)
                waiting.discard(pidfd)
    finally:
        for pidfd in pidfds:
            os.close(pidfd)
