"""A wire's controls, sans IO: its limit of calls a minute, and when it looks wrong.

- Calls a minute: every call on the wire, of every verb, in the last minute (a sliding
  window); the call over it gets 429 with Retry-After, the seconds until a slot frees.
  Those refusals count toward no pause: the program is doing what its policy allows,
  only slower. Off unless the spec sets it.
- Pause on anomaly, only for patterns no normal work makes: a burst of refusals, many
  distinct targets refused in turn (both within a window, loose thresholds from the
  spec's [pause]), and any attempt at a cloud metadata service (at once). A threshold
  is reached at exactly its number.

The counts are the wire's, not one proxy's: every run of a wire (each sandbox started
with the same name) adds to the same window, kept in Link's settings
(`sandbox/wires/<wire>/window`) and read and written under a lock for each call by
`SharedControls`. The core below is pure: the clock and the state are passed in.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["WINDOW_SECONDS", "Controls", "SharedControls"]

# Calls a minute: a minute.
WINDOW_SECONDS = 60


class Controls:
    __slots__ = ("calls", "calls_per_minute", "refusals", "refused", "targets", "window")

    def __init__(self, *, calls_per_minute: int, pause: tuple[int, int, int]) -> None:
        self.calls_per_minute = calls_per_minute
        self.refusals, self.targets, self.window = pause
        # Calls by the whole second they were made in: (second, count), oldest first. A
        # second leaves the window 61 s after it began, so no 60 s span ever holds more
        # than the limit (a call may wait up to a second longer than it had to, never
        # less); the state stays 60 numbers long whatever the limit.
        self.calls: deque[list[float]] = deque()
        self.refused: deque[tuple[float, str]] = deque()

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

    def refusal(self, now: float, target: str) -> str | None:
        """Note a refusal (not one of the limit's); the pause's reason once a threshold
        is reached, else None."""
        self.refused.append((now, target))
        while self.refused and self.refused[0][0] <= now - self.window:
            self.refused.popleft()
        if len(self.refused) >= self.refusals:
            return (f"{len(self.refused)} calls refused within {self.window} s "
                    f"(the [pause] threshold is {self.refusals})")
        distinct = {name for _, name in self.refused}
        if len(distinct) >= self.targets:
            return (f"{len(distinct)} different targets refused within {self.window} s "
                    f"(the [pause] threshold is {self.targets})")
        return None


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
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                state = orjson.loads(os.pread(fd, 1 << 20, 0) or b"{}")
                self.controls.calls = deque([float(second), float(count)]
                                            for second, count in state.get("calls", []))
                self.controls.refused = deque((float(t), str(name))
                                              for t, name in state.get("refused", []))
            except (ValueError, TypeError, AttributeError):
                self.controls.calls, self.controls.refused = deque(), deque()
            found = (self.controls.admit(now) if action == "admit"
                     else self.controls.refusal(now, target))
            data = orjson.dumps({"calls": [list(entry) for entry in self.controls.calls],
                                 "refused": [list(entry) for entry in self.controls.refused]})
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

    def refusal(self, now: float, target: str) -> str | None:
        found = self._with_state("refusal", now, target)
        return found if isinstance(found, str) else None
