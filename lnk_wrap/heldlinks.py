"""Held dot files with more than one name: refused at launch (F7).

A dot file held read only (lnk_wrap.dotfiles) is a read-only mount at its path, but a
mount covers a path, not a file: when the file has another name (a hard link) where the
sandbox writes, writing that name changes the held file. One run can make such a pair
whenever the file is not held yet (`.envrc` gets no placeholder; a hook manager's
settings get none while no hook names the manager; a run with `write_dot_files` writes
`.git` whole), and every later run would then hold the file at one name and leave it
writable at the other. Finding the other names would take a walk of every written
folder; the count of names (st_nlink) says at once that there is one. So a held regular
file with more than one name refuses the run, saying which and how to fix it.

During a run no new name can be made: a held file is a mount of its own, and link(2)
never crosses mounts (EXDEV), by path or through /proc/self/fd; a name made inside a held
folder is on a read-only mount (EROFS). So the look at launch is enough (tested).

What is looked at: every held file, and every file of a held folder (`.git`, `.husky`,
`.vscode`, `.idea`, a hooks folder, `.lefthook`) but git's data: a git directory's
`objects`, `refs`, `logs`, `lfs` and `annex` (a local `git clone` hard-links the objects
to the source repository's; none of these is run or read as settings). One lstat a file.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = ["GIT_DATA_FOLDERS", "MAX_FILES_LOOKED_AT", "refusal"]

# A git directory's data, not what runs or configures it: content-addressed objects
# (hard-linked by a local clone, legitimately), refs and their logs, git-lfs's and
# git-annex's stores. Skipped in a folder that is a git directory (has HEAD and objects).
GIT_DATA_FOLDERS = frozenset(("objects", "refs", "logs", "lfs", "annex"))
# A .git without its data, a .vscode or a .husky holds some tens of files; each costs an
# lstat at every start. Past this many, the run is refused rather than left unchecked.
MAX_FILES_LOOKED_AT = 10_000


def refusal(held: Mapping[str, str]) -> str | None:
    """The one line that refuses the run, or None: the first held regular file (or file
    in a held folder) that has more than one name."""
    looked_at = 0
    for path in sorted(held):
        for file, names in _files(path):
            looked_at += 1
            if looked_at > MAX_FILES_LOOKED_AT:
                return (f"the held dot files hold more than {MAX_FILES_LOOKED_AT} files to "
                        f"look at for hard links (the last in {path}); open the folder's dot "
                        "files with [files] write_dot_files, or make it smaller")
            if names > 1:
                return (f"{file} is held read only but has {names} names (hard links); "
                        "writing another name would change it. Give it a name of its own "
                        f"(cp -p {file} {file}.copy && mv {file}.copy {file}), or open the "
                        "folder's dot files with [files] write_dot_files")
    return None


def _files(path: str) -> Iterator[tuple[str, int]]:
    """(file, its count of names) for `path` if a regular file, else for every regular
    file below it; links are not followed (a hook that is a link has its target held
    on its own, lnk_wrap.dotfiles)."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISREG(info.st_mode):
        yield path, info.st_nlink
        return
    if not stat.S_ISDIR(info.st_mode):
        return
    pending = [path]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {entry.name for entry in entries}
        git_dir = "HEAD" in names and "objects" in names
        for entry in entries:
            try:
                entry_info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(entry_info.st_mode):
                if not (git_dir and entry.name in GIT_DATA_FOLDERS):
                    pending.append(entry.path)
            elif stat.S_ISREG(entry_info.st_mode):
                yield entry.path, entry_info.st_nlink
