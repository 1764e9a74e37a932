"""The program's HOME: a folder of its own that exists and can be written (the seed: "a
harness's HOME is its own folder"), never the person's, unless the spec writes theirs.

Chosen, in this order:
- the policy's own (`[agent]`'s folder, or `[files] home`): already written, dot files
  open (lnk_wrap.spec);
- the caller's HOME when the sandbox writes it (a spec granting your home keeps it, its
  dot files held as in any written folder);
- for a named wire (the spec's `name`, or `--wire`): `sandbox/homes/<wire>` in Link's
  settings, made at its first run and kept across its runs (a harness's login, settings
  and history are there the next time); written with its dot files open: nothing of the
  person's runs from it, and no other sandbox sees it (Link's settings are hidden in
  every sandbox, and only this one folder is reopened);
- else (a run of no named wire, a wire of its own that ends with it) `/tmp/home` in the
  sandbox's private /tmp, gone at the end, as the wire is.

The XDG base folders of the caller's environment (`XDG_CONFIG_HOME` …) point into the
caller's home; where the sandbox cannot write one it is dropped, so that programs use
their defaults under the new HOME (an unwritable one fails as EROFS did for HOME).
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from lnk_common.policy import Policy

__all__ = ["HOMES_FOLDER", "TEMPORARY_HOME", "Choice", "HomeError", "choose", "describe",
           "environment"]

# In Link's settings (lnk_common.settings): one folder per wire.
HOMES_FOLDER = ("sandbox", "homes")
# A run of no named wire: in the sandbox's private /tmp (lnk_wrap.bwrap makes it).
TEMPORARY_HOME = "/tmp/home"  # noqa: S108 (the sandbox's own tmpfs, made by bwrap)
# The XDG base folders, each a folder under HOME by default.
XDG_FOLDERS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


class HomeError(Exception):
    """The wire's HOME cannot be made or is not what Link made."""


class Choice:
    """The HOME chosen: `path` ("" keeps the caller's), `policy` with it granted,
    `temporary` (made inside, in the private /tmp), `wire` (the wire whose folder in
    Link's settings it is, made by `make` once the run is sure to start)."""

    __slots__ = ("path", "policy", "temporary", "wire")

    def __init__(self, *, path: str, policy: Policy, temporary: bool = False,
                 wire: str = "") -> None:
        self.path = path
        self.policy = policy
        self.temporary = temporary
        self.wire = wire

    def make(self) -> bool:
        """Make the wire's folder if it is not there (True: made now); else nothing."""
        if not self.wire:
            return False
        return _wire_home(self.policy.settings, self.wire)[1]


def choose(policy: Policy, env: Mapping[str, str], *, wire: str,
           writes: Callable[[str], bool]) -> Choice:
    """The HOME of a sandbox of `policy` on `wire` ("" for a run of no named wire), the
    caller's environment `env`; `writes(path)`: whether the sandbox writes `path`."""
    if policy.home:
        return Choice(path=policy.home, policy=policy)
    yours = env.get("HOME", "")
    if yours and os.path.isabs(yours) and (writes(yours) or writes(os.path.realpath(yours))):
        return Choice(path="", policy=policy)
    if not wire:
        return Choice(path=TEMPORARY_HOME, policy=policy, temporary=True)
    path = os.path.join(policy.settings, *HOMES_FOLDER, wire)
    if os.path.lexists(path):  # refused before anything starts; made later (`make`)
        _check_own(path, wire)
    granted = policy.replace(write=(*policy.write, path),
                             write_dot_files=(*policy.write_dot_files, path), home=path)
    return Choice(path=path, policy=granted, wire=wire)


def describe(policy: Policy, env: Mapping[str, str], *, wire: str,
             writes: Callable[[str], bool]) -> tuple[str, str]:
    """(HOME, in words) as `choose` would choose it, making nothing (`check`)."""
    if policy.home:
        own = "[agent]'s own folder" if policy.agent else "the spec's [files] home"
        return policy.home, f"{own}, written with its dot files"
    yours = env.get("HOME", "")
    if yours and os.path.isabs(yours) and (writes(yours) or writes(os.path.realpath(yours))):
        return yours, "yours: the spec writes it (its dot files held as in any written folder)"
    if not wire:
        return TEMPORARY_HOME, ("in the sandbox's private /tmp, gone at the end of the run "
                                "(a run of no named wire; name one to keep a HOME)")
    path = os.path.join(policy.settings, *HOMES_FOLDER, wire)
    return path, (f"the wire {wire}'s own, in Link's settings, kept across its runs "
                  "(written with its dot files; no other sandbox sees it)")


def _wire_home(settings: str, wire: str) -> tuple[str, bool]:
    """`sandbox/homes/<wire>` in Link's settings, made (0700) if it is not there; a link,
    or anything but a folder of this user's, is refused (a sandbox that wrote one there
    never had the folder above it)."""
    folder = os.path.join(settings, *HOMES_FOLDER)
    path = os.path.join(folder, wire)
    made = False
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
            made = True
        except FileExistsError:
            pass
    except OSError as error:
        raise HomeError(f"the wire {wire}'s HOME {path} cannot be made: "
                        f"{error.strerror}") from None
    _check_own(path, wire)
    return path, made


def _check_own(path: str, wire: str) -> None:
    try:
        found = os.lstat(path)
    except OSError as error:
        raise HomeError(f"the wire {wire}'s HOME {path} cannot be read: "
                        f"{error.strerror}") from None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        raise HomeError(f"the wire {wire}'s HOME {path} is not a folder of yours; "
                        "refusing (remove it, and Link makes it again)")


def environment(env: Mapping[str, str], choice: Choice,
                writes: Callable[[str], bool]) -> dict[str, str]:
    """The program's environment with its HOME, and without the XDG base folders it
    cannot write (they named the caller's home)."""
    if not choice.path:
        return dict(env)
    changed = {name: value for name, value in env.items()
               if name not in XDG_FOLDERS or (os.path.isabs(value) and writes(value))}
    changed["HOME"] = choice.path
    return changed
