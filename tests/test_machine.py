"""What the sandbox stands on, asserted rather than skipped: under CI a missing
bubblewrap, user namespace or Landlock fails the run here, by name."""

from __future__ import annotations

import os

from lnk_wrap import landlock
from lnk_wrap.check import report


def test_bubblewrap_is_installed_and_makes_user_namespaces() -> None:
    found = report(os.environ)["bubblewrap"]
    assert found["found"], found.get("why")
    assert found["user_namespaces"], found.get("why")


def test_landlock_is_in_the_kernel() -> None:
    assert landlock.abi_version() >= 1, "Landlock is absent: every sandbox refuses to start"
