"""Link's settings folder: where it is and what lives in it.

Every helper finds Link's settings through this module and nowhere else, so the layout
has one description in code (and one in docs/ARCHITECTURE.md). The folder is hidden in
every sandbox: nothing inside can read or write it, which is what makes a file here (a
kill switch, a pause, a token) something a sandboxed program cannot undo or steal.

Inputs are explicit (an environment mapping), never a hidden read of os.environ, so the
wrap step and the tests can say exactly which settings folder a line will use.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["SettingsError", "SettingsFolder", "settings_folder"]


class SettingsError(Exception):
    """The settings folder cannot be located (no LNK_HOME, no XDG_CONFIG_HOME, no HOME)."""


class SettingsFolder:
    """Link's settings folder (`root`, absolute) and the paths the sandbox keeps in it."""

    __slots__ = ("root",)

    def __init__(self, root: str) -> None:
        self.root = root


def settings_folder(env: Mapping[str, str]) -> SettingsFolder:
    """`$LNK_HOME`, else `${XDG_CONFIG_HOME:-~/.config}/lnk`, made absolute.

    The path is not resolved through links here: the spec loader canonicalises it with
    the other paths, so that a settings folder reached through a link is hidden at its
    real place.
    """
    explicit = env.get("LNK_HOME", "")
    if explicit:
        return SettingsFolder(os.path.abspath(explicit))
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return SettingsFolder(os.path.join(os.path.normpath(xdg), "lnk"))
    home = env.get("HOME", "")
    if not home:
        raise SettingsError("cannot locate Link's settings folder: set LNK_HOME or HOME")
    return SettingsFolder(os.path.join(os.path.abspath(home), ".config", "lnk"))
