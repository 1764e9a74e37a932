"""Link's settings folder: where it is and what lives in it.

Every command and helper finds Link's settings through `settings_folder` (the commands, the
spec loader, `check`) or is given the folder it found (the launcher, on the line `wrap`
printed; the proxy, relay and exec watch, by the launcher), so there is one answer to
"which folder", and the layout has one description in code (and one in
docs/decisions/0015-settings-folder.md). The folder is hidden in every sandbox: nothing
inside can read or
write it, which is what makes a file here (a kill switch, a pause, a token) something a
sandboxed program cannot undo or steal.

Which folder it is must not be a sandbox's to change either (F6): a link on the way (GNU
stow's `~/.config/lnk -> ../dotfiles/lnk`) in a folder a sandbox writes could be
replaced by a folder of the program's own, and every later command would take that one.
So the path is followed here one name at a time, as the kernel does, and every link met
is named (`SettingsFolder.links`): the launcher refuses a run that could replace one, and
pins the real folders on the way (docs/decisions/0015-settings-folder.md).

Inputs are explicit (an environment mapping), never a hidden read of os.environ, so the
wrap step and the tests can say exactly which settings folder a line will use.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["MAX_LINKS", "SettingsError", "SettingsFolder", "locate", "settings_folder"]

# The kernel's own limit on links followed in one path (ELOOP past it).
MAX_LINKS = 40


class SettingsError(Exception):
    """The settings folder cannot be located (no LNK_HOME, no XDG_CONFIG_HOME, no HOME),
    or the path to it cannot be followed."""


class SettingsFolder:
    """Link's settings folder.

    root: the real path, with no link on it: where the folder is, or will be made.
    named: the path as LNK_HOME, XDG_CONFIG_HOME or HOME name it (absolute, normalised).
    links: each link met on the way from `named` to `root`, in the order followed.
    """

    __slots__ = ("links", "named", "root")

    def __init__(self, root: str, named: str = "", links: tuple[str, ...] = ()) -> None:
        self.root = root
        self.named = named or root
        self.links = links


def settings_folder(env: Mapping[str, str]) -> SettingsFolder:
    """`$LNK_HOME`, else `${XDG_CONFIG_HOME:-~/.config}/lnk`, made absolute, then followed
    to the real folder (`locate`)."""
    return locate(_named(env))


def _named(env: Mapping[str, str]) -> str:
    explicit = env.get("LNK_HOME", "")
    if explicit:
        return os.path.abspath(explicit)
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return os.path.join(os.path.normpath(xdg), "lnk")
    home = env.get("HOME", "")
    if not home:
        raise SettingsError("cannot locate Link's settings folder: set LNK_HOME or HOME")
    return os.path.join(os.path.abspath(home), ".config", "lnk")


def locate(named: str) -> SettingsFolder:
    """Follow the absolute path `named` as the kernel does, one name at a time, noting
    every link; what does not exist yet is taken as named (the launcher makes it)."""
    pending = [part for part in reversed(named.split("/")) if part]
    current = "/"
    links: list[str] = []
    while pending:
        part = pending.pop()
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        try:
            info = os.lstat(candidate)
        except FileNotFoundError:
            rest = [candidate, *reversed(pending)]
            return SettingsFolder(os.path.normpath(os.path.join(*rest)), named, tuple(links))
        except OSError as error:
            raise SettingsError(f"Link's settings folder {named} cannot be reached: "
                                f"{candidate}: {error.strerror}") from None
        if stat.S_ISLNK(info.st_mode):
            links.append(candidate)
            if len(links) > MAX_LINKS:
                raise SettingsError(f"Link's settings folder {named}: too many links (a loop)")
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = "/"
            pending += [name for name in reversed(target.split("/")) if name]
            continue
        if pending and not stat.S_ISDIR(info.st_mode):
            raise SettingsError(f"Link's settings folder {named} cannot be reached: "
                                f"{candidate} is not a folder")
        current = candidate
    return SettingsFolder(current, named, tuple(links))
