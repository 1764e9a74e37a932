"""A wire's controls, sans IO: its limit of calls a minute, and when it looks wrong.

- Calls a minute: every call on the wire, of every verb, in the last minute (a sliding
  window); the call over it gets 429 with Retry-After, the seconds until a slot frees.
  Those refusals count toward no pause: the program is doing what its policy allows,
  only slower. Off unless the spec sets it.
- Pause on anomaly, only for patterns no normal work makes: a burst of refusals, many
  distinct targets refused in turn (both within a window, loose thresholds from the
  spec's [pause]), and any attempt at a cloud metadata service (at once). A threshold
  is reached at exactly its number.

The clock is passed in; nothing here reads a file or the time by itself.
"""

from __future__ import annotations

import math
from collections import deque

__all__ = ["Controls"]


class Controls:
    __slots__ = ("calls", "calls_per_minute", "refusals", "refused", "targets", "window")

    def __init__(self, *, calls_per_minute: int, pause: tuple[int, int, int]) -> None:
        self.calls_per_minute = calls_per_minute
        self.refusals, self.targets, self.window = pause
        self.calls: deque[float] = deque()
        self.refused: deque[tuple[float, str]] = deque()

    def admit(self, now: float) -> float | None:
        """Count a call now, or, past the limit, the seconds until a slot frees."""
        if not self.calls_per_minute:
            return None
        while self.calls and self.calls[0] <= now - 60.0:
            self.calls.popleft()
        if len(self.calls) >= self.calls_per_minute:
            return max(1.0, math.ceil(self.calls[0] + 60.0 - now))
        self.calls.append(now)
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
