"""A wire's controls, sans IO: its limit of calls a minute, and when it looks wrong.

- Calls a minute: every call on the wire, of every verb, in the last minute (a sliding
  window); the call over it gets 429 with Retry-After, the seconds until a slot frees.
  Those refusals count toward no pause: the program is doing what its policy allows,
  only slower. Off unless the spec sets it.
- Pause on anomaly, only for patterns no normal work makes: a burst of refusals (a host
  not listed counting once per window: `Controls.refusal`'s `ordinary`), many
  distinct targets refused in turn (both within a window, loose thresholds from the
  spec's [pause]), many distinct names refused by the sandbox's DNS (a looser threshold
  of its own, DNS_NAMES_PER_TARGET times [pause] targets: below), and any attempt at a
  cloud metadata service (at once). A threshold is reached at exactly its number.

The counts are the wire's, not one proxy's: every run of a wire (each sandbox started
with the same name) adds to the same window, kept in Link's settings
(`sandbox/wires/<wire>/window`) and read and written under a lock for each call by
`SharedControls`. The core below is pure: the clock and the state are passed in.

The state is bounded whatever the thresholds (up to the spec's MAX_COUNT) and whatever
a sandbox does: calls and refusals are counts by the second, and a refused target or
name is a short digest kept with when it was last refused, at most MAX_TRACKED_NAMES of
each (past that the wire pauses: it can no longer tell, and fails closed).
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["DNS_NAMES_PER_TARGET", "MAX_TRACKED_NAMES", "WINDOW_SECONDS", "Controls",
           "SharedControls"]

# Calls a minute: a minute.
WINDOW_SECONDS = 60
# A name the sandbox's DNS refuses counts toward a threshold of its own: this many times
# [pause] targets distinct names within [pause] window (200 in a minute by default).
# Looser than a call's, since a resolver asks on its own for names the program never
# named: A and AAAA of each, each name of a search list (up to 6 in glibc) and the name
# alone, so one lookup may be 14 names; its retries (up to 5 attempts) ask the same
# names again, and only distinct names count: a name asked again leaks nothing new (it
# is folded in the log). A flood of new names, the way to send data out by DNS, does.
DNS_NAMES_PER_TARGET = 10
# Distinct refused targets, and refused DNS names, kept within a window (each some 30
# bytes of the window file, read and written at every call): far past any threshold
# normal work needs; past it the wire pauses.
MAX_TRACKED_NAMES = 4096


def _digest(name: str) -> str:
    """A short stand-in for a target or name: the window file holds no names (only
    whether one was seen), and a 253-byte name costs no more than a short one."""
    import hashlib

    return hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()


class Controls:
    __slots__ = ("calls", "calls_per_minute", "dns_names", "refusals", "refused",
                 "refused_names", "refused_targets", "targets", "window")

    def __init__(self, *, calls_per_minute: int, pause: tuple[int, int, int]) -> None:
        self.calls_per_minute = calls_per_minute
        self.refusals, self.targets, self.window = pause
        # Calls by the whole second they were made in: (second, count), oldest first. A
        # second leaves the window 61 s after it began, so no 60 s span ever holds more
        # than the limit (a call may wait up to a second longer than it had to, never
        # less); the state stays 60 numbers long whatever the limit.
        self.calls: deque[list[float]] = deque()
        # Refusals by the second, as calls are: (second, count), oldest first.
        self.refused: deque[list[float]] = deque()
        # Refused targets and refused DNS names: digest -> when last refused.
        self.refused_targets: dict[str, float] = {}
        self.refused_names: dict[str, float] = {}
        self.dns_names = self.targets * DNS_NAMES_PER_TARGET

    def admit(self, now: float) -> float | None:
        """Count a call now, or, past the limit, the seconds until a slot frees."""
        if not self.calls_per_minute:
            return None
        while self.calls and self.calls[0][0] + WINDOW_SECONDS + 1 <= now:
            self.calls.popleft()
        if sum(count for _, count in self.calls) >= self.calls_per_minute:
            return float(max(1, math.ceil(self.calls[0][0] + WINDOW_SECONDS + 1 - now)))
        second = float(math.floor(now))
        if self.calls and self.calls[-1][0] == second:
            self.calls[-1][1] += 1
        else:
            self.calls.append([second, 1.0])
        return None

    def refusal(self, now: float, target: str, *, ordinary: bool = False) -> str | None:
        """Note a refusal (not one of the limit's); the pause's reason once a threshold
        is reached, else None. `ordinary`: a refusal normal work makes again and again (a
        host not listed: a harness's telemetry and update checks, retried, at every run),
        which counts toward the burst only the first time its target is refused within
        the window; again, it tells nothing new and leaks nothing (nothing was sent). Its
        target still counts among the distinct ones, the pattern of a program trying
        host after host."""
        if ordinary:
            self._expire(self.refused_targets, now)
            key = _digest(target)
            if key in self.refused_targets:
                self.refused_targets[key] = now
                return None
        while self.refused and self.refused[0][0] + 1 <= now - self.window:
            self.refused.popleft()  # every refusal of that second has left the window
        second = float(math.floor(now))
        if self.refused and self.refused[-1][0] == second:
            self.refused[-1][1] += 1
        else:
            self.refused.append([second, 1.0])
        count = int(sum(number for _, number in self.refused))
        if count >= self.refusals:
            return (f"{count} calls refused within {self.window} s "
                    f"(the [pause] threshold is {self.refusals})")
        distinct = self._note(self.refused_targets, target, now)
        if distinct is None:
            return (f"more than {MAX_TRACKED_NAMES} different targets refused within "
                    f"{self.window} s (more than Link keeps count of)")
        if distinct >= self.targets:
            return (f"{distinct} different targets refused within {self.window} s "
                    f"(the [pause] threshold is {self.targets})")
        return None

    def dns_refusal(self, now: float, name: str) -> str | None:
        """Note a name the sandbox's DNS refused; the pause's reason once
        `dns_names` distinct names were refused within the window, else None."""
        distinct = self._note(self.refused_names, name.lower().rstrip("."), now)
        if distinct is None:
            return (f"more than {MAX_TRACKED_NAMES} different names refused by the "
                    f"sandbox's DNS within {self.window} s (more than Link keeps count of)")
        if distinct >= self.dns_names:
            return (f"{distinct} different names refused by the sandbox's DNS within "
                    f"{self.window} s (the threshold is {self.dns_names}: "
                    f"{DNS_NAMES_PER_TARGET} times [pause] targets)")
        return None

    def _expire(self, seen: dict[str, float], now: float) -> None:
        for old in [key for key, when in seen.items() if when <= now - self.window]:
            del seen[old]

    def _note(self, seen: dict[str, float], name: str, now: float) -> int | None:
        """Note `name` as refused now; how many distinct ones are in the window (None:
        more than can be kept)."""
        self._expire(seen, now)
        key = _digest(name)
        if key not in seen and len(seen) >= MAX_TRACKED_NAMES:
            return None
        seen[key] = now
        return len(seen)


# The window file at its largest: 61 seconds of calls, a window's seconds of refusals
# (MAX_WINDOW_SECONDS, 3,600) and MAX_TRACKED_NAMES of each kind of digest, with room.
_MAX_STATE_BYTES = 1 << 20


class SharedControls:
    """Controls whose window lives in a file every proxy of the wire shares."""

    __slots__ = ("controls", "path")

    def __init__(self, controls: Controls, path: str) -> None:
        self.controls = controls
        self.path = path

    @property
    def calls_per_minute(self) -> int:
        return self.controls.calls_per_minute

    def _with_state(self, action: str, now: float, target: str) -> object:
        import fcntl
        import os

        import orjson

        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            fd = os.open(self.path, flags, 0o600)
        controls = self.controls
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                state = orjson.loads(os.pread(fd, _MAX_STATE_BYTES, 0) or b"{}")
                controls.calls = deque([float(second), float(count)]
                                       for second, count in state.get("calls", []))
                controls.refused = deque([float(second), float(count)]
                                         for second, count in state.get("refused", []))
                controls.refused_targets = {str(key): float(when) for key, when
                                            in state.get("targets", {}).items()}
                controls.refused_names = {str(key): float(when) for key, when
                                          in state.get("dns", {}).items()}
            except (ValueError, TypeError, AttributeError):
                controls.calls, controls.refused = deque(), deque()
                controls.refused_targets, controls.refused_names = {}, {}
            found = (controls.admit(now) if action == "admit"
                     else controls.refusal(now, target) if action == "refusal"
                     else controls.refusal(now, target, ordinary=True)
                     if action == "ordinary" else controls.dns_refusal(now, target))
            data = orjson.dumps({"calls": list(controls.calls),
                                 "refused": list(controls.refused),
                                 "targets": controls.refused_targets,
                                 "dns": controls.refused_names})
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            return found
        finally:
            os.close(fd)

    def admit(self, now: float) -> float | None:
        if not self.controls.calls_per_minute:
            return None
        found = self._with_state("admit", now, "")
        return found if isinstance(found, float) else None

    def refusal(self, now: float, target: str, *, ordinary: bool = False) -> str | None:
        found = self._with_state("ordinary" if ordinary else "refusal", now, target)
        return found if isinstance(found, str) else None

    def dns_refusal(self, now: float, name: str) -> str | None:
        found = self._with_state("dns", now, name)
        return found if isinstance(found, str) else None
