"""The wires' controls in Link's settings: the kill switch, pauses, the on-stop commands,
and how many calls each helper of a wire holds open.

    sandbox/stop                  the kill switch: while it is there, every proxy refuses
                                  every call and closes every open one
    sandbox/wires/<wire>/paused   a paused wire: every call of it refused until resumed
    sandbox/on-stop/<id>          a command `lnk-sandbox stop` runs (once per stop)
    sandbox/wires/<wire>/open/<pid>  the calls a proxy or relay of the wire holds open
                                  now (a number), for `lnk-sandbox status`: replaced
                                  whole at most once a second when it changed, removed
                                  when the helper ends (one a killed helper left is told
                                  by its pid: lnk_wrap.status; the wire's next helper
                                  removes it)

All live in Link's settings, which no sandbox reads or writes: there is no process to
signal and nothing a sandbox can undo. Writers write whole files atomically (a
temporary file renamed over); readers take the safe answer from anything they cannot
read: a stop or pause file that is empty, malformed or unreadable still stops or pauses,
and so does one whose folder cannot be read (only "no such file" reads as off).
"""

from __future__ import annotations

import functools
import os
import time

__all__ = ["OPEN_CALLS_FOLDER", "clear_stop", "is_stopped", "on_stop_commands",
           "open_calls_path", "pause", "pause_path", "paused", "paused_wires",
           "register_on_stop", "remove_on_stop", "resume", "stop", "stop_path", "stopped",
           "sweep_open_calls", "write_open_calls"]

# errno's EMFILE and ENFILE (Linux), named here rather than importing errno on the
# launcher's start path: this process, or the machine, has no descriptor left.
_EMFILE = 24
_ENFILE = 23


def _sandbox(settings: str, *parts: str) -> str:
    return os.path.join(settings, "sandbox", *parts)


# The two paths every call looks at, joined once (a join cost as much as the lookup).
@functools.lru_cache(maxsize=64)
def stop_path(settings: str) -> str:
    return _sandbox(settings, "stop")


@functools.lru_cache(maxsize=64)
def pause_path(settings: str, wire: str) -> str:
    return _sandbox(settings, "wires", wire, "paused")


def _write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                 | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(temporary, path)


def _json(data: object) -> bytes:
    import orjson

    return orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n"


def _read(path: str) -> dict[str, str] | None:
    """The file's fields; {} when it is there but cannot be read or parsed (still on);
    None when it is not there."""
    found = _read_with_status(path)
    return None if found is None else found[0]


def _read_with_status(path: str) -> tuple[dict[str, str], os.stat_result | None] | None:
    """`_read`, with the stat of the file read (None when it could not be read)."""
    try:
        with open(path, "rb") as handle:
            status = os.fstat(handle.fileno())
            data = handle.read(65536)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno in (_EMFILE, _ENFILE):
            # No descriptor left to open it with (a burst of calls took them all): that
            # says nothing of the file, so ask whether it is there, which needs none.
            # Absent (ENOENT) is off; there, or unknown, is on, as any unreadable file.
            try:
                os.lstat(path)
            except FileNotFoundError:
                return None
            except OSError:
                return {}, None
        return {}, None
    try:
        import orjson

        found = orjson.loads(data)
    except ValueError:
        return {}, status
    fields = {str(key): str(value) for key, value in found.items()} \
        if isinstance(found, dict) else {}
    return fields, status


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- the kill switch ------------------------------------------------------------------------


def stop(settings: str, reason: str = "lnk-sandbox stop") -> None:
    _write(stop_path(settings), _json({"since": _now(), "reason": reason}))


def clear_stop(settings: str) -> bool:
    try:
        os.unlink(stop_path(settings))
    except FileNotFoundError:
        return False
    return True


def stopped(settings: str) -> dict[str, str] | None:
    """The kill switch's fields ({} when its file cannot be read: on all the same), or
    None when it is off."""
    if not is_stopped(settings):
        return None
    return _read(stop_path(settings)) or {}


def is_stopped(settings: str) -> bool:
    """Whether the kill switch is on: when its file is there, and when whether it is there
    cannot be told (a folder on the way unreadable, a link loop, a file where a folder
    is): only a file known to be absent lets calls go."""
    try:
        os.lstat(stop_path(settings))
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


# -- pauses -----------------------------------------------------------------------------------


def pause(settings: str, wire: str, reason: str) -> None:
    _write(pause_path(settings, wire), _json({"wire": wire, "since": _now(),
                                               "reason": reason}))


# Pause files as last read, by path: what each was then (stat: device, inode, size,
# modification and change times) and its fields. Every call of a wire asks whether it is
# paused: a stat says whether the file is there (as the open did, in one system call and
# without a file object) and, when it is and is the file last read, its fields are the
# ones kept, not read and parsed again. A file changed less than PAUSE_SETTLE_NS before
# it was read is not kept (read again at every call until it is older): a change within
# the clock's tick, at the same size, on an inode number used again, would leave the
# stat as it was, so only a file that had settled when it was read is known to be the
# file the same stat describes later (git's "racy" rule, as lnk_proxy.resolver keeps
# /etc/hosts). Writers replace a pause whole (a new file renamed over, which sets the
# change time), so a pause, a resume or a new reason is seen at the very next call.
PAUSE_SETTLE_NS = 2_000_000_000
# Pause files kept at most (a process looks at its own wire's; `paused_wires` at all).
MAX_KEPT_PAUSES = 64
_KEPT_PAUSES: dict[str, tuple[tuple[int, ...], dict[str, str]]] = {}


def _identity(status: os.stat_result) -> tuple[int, ...]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
            status.st_ctime_ns)


def paused(settings: str, wire: str) -> dict[str, str] | None:
    """The pause of `wire` (its fields, {} when unreadable), or None when not paused."""
    path = pause_path(settings, wire)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None  # as an open would have found: no file, or no folder on the way
    except OSError:
        return {}  # as an open would have failed (a folder unreadable, a loop): on
    kept = _KEPT_PAUSES.get(path)
    if kept is not None and kept[0] == _identity(status):
        return dict(kept[1])
    read = _read_with_status(path)
    if read is None:
        _KEPT_PAUSES.pop(path, None)
        return None
    fields, read_status = read
    if read_status is not None and (
            time.time_ns() - max(read_status.st_mtime_ns, read_status.st_ctime_ns)
            > PAUSE_SETTLE_NS):
        if len(_KEPT_PAUSES) >= MAX_KEPT_PAUSES:
            _KEPT_PAUSES.clear()
        _KEPT_PAUSES[path] = (_identity(read_status), dict(fields))
    else:
        _KEPT_PAUSES.pop(path, None)
    return fields


def resume(settings: str, wire: str) -> bool:
    try:
        os.unlink(pause_path(settings, wire))
    except FileNotFoundError:
        return False
    return True


def paused_wires(settings: str) -> list[dict[str, str]]:
    """Every paused wire: {"wire", "since", "reason"} (what could not be read says so)."""
    folder = _sandbox(settings, "wires")
    try:
        wires = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    found = []
    for wire in wires:
        fields = paused(settings, wire)
        if fields is None:
            continue
        found.append({"wire": wire, "since": fields.get("since", "unknown"),
                      "reason": fields.get("reason", "the pause file cannot be read; "
                                                     "paused all the same")})
    return found


# -- on-stop commands -------------------------------------------------------------------------


def register_on_stop(settings: str, argv: list[str], name: str = "") -> str:
    identity = name or os.urandom(6).hex()
    _write(_sandbox(settings, "on-stop", identity), _json({"name": identity, "argv": argv}))
    return identity


def remove_on_stop(settings: str, identity: str) -> bool:
    if "/" in identity or identity.startswith("."):
        return False
    try:
        os.unlink(_sandbox(settings, "on-stop", identity))
    except FileNotFoundError:
        return False
    return True


def on_stop_commands(settings: str) -> list[tuple[str, list[str]]]:
    folder = _sandbox(settings, "on-stop")
    try:
        names = sorted(name for name in os.listdir(folder) if not name.endswith(".tmp"))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as handle:
                import orjson

                entry = orjson.loads(handle.read(65536))
            argv = entry["argv"]
            if isinstance(argv, list) and argv and all(isinstance(word, str) for word in argv):
                found.append((name, argv))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return found


# -- the calls a helper holds open ------------------------------------------------------------

OPEN_CALLS_FOLDER = "open"


def open_calls_path(settings: str, wire: str, pid: int) -> str:
    return _sandbox(settings, "wires", wire, OPEN_CALLS_FOLDER, str(pid))


def sweep_open_calls(settings: str, wire: str) -> None:
    """Remove the open-calls files of `wire` whose helper's pid no process has (a helper
    killed by SIGKILL removes none); a pid used again since reads as alive (status tells
    it by start time). Never raises."""
    folder = _sandbox(settings, "wires", wire, OPEN_CALLS_FOLDER)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if not (name.isascii() and name.isdigit()) or int(name) == os.getpid():
            continue
        try:
            os.kill(int(name), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                continue
        except OSError:
            continue  # there, another user's: alive


def write_open_calls(settings: str, wire: str, count: int | None) -> None:
    """This process's open calls on `wire`, replaced whole; None removes the file (the
    helper ends). Never raises: a count status cannot read is shown as unknown, and no
    call waits on it."""
    path = open_calls_path(settings, wire, os.getpid())
    try:
        if count is None:
            os.unlink(path)
        else:
            _write(path, f"{count}\n".encode())
    except OSError:
        return
