"""Held dot files with more than one name: refused at launch (F7).

A dot file held read only (lnk_wrap.dotfiles) is a read-only mount at its path, but a
mount covers a path, not a file: when the file has another name (a hard link) where the
sandbox writes, writing that name changes the held file. One run can make such a pair
whenever the file is not held yet (`.envrc` gets no stand-in; a hook manager's
settings get none while no hook names the manager; a run with `write_dot_files` writes
`.git` whole), and every later run would then hold the file at one name and leave it
writable at the other. Finding the other names would take a walk of every written
folder; the count of names (st_nlink) says at once that there is one. So a held regular
file with more than one name refuses the run, saying which and how to fix it.

A symbolic link inside a held folder is the same door by another name: the link is held,
what it points at is not (`.vscode/tasks.json -> ../notes.txt`, `.husky/pre-commit ->
../scripts/hook`). One that leads to a place the sandbox could write refuses the run too;
a hook that is a link has its target held (lnk_wrap.dotfiles), so it leads nowhere
writable and passes.

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
    from collections.abc import Callable, Iterator, Mapping

__all__ = ["GIT_DATA_FOLDERS", "MAX_FILES_LOOKED_AT", "refusal"]

# A git directory's data, not what runs or configures it: content-addressed objects
# (hard-linked by a local clone, legitimately), refs and their logs, git-lfs's and
# git-annex's stores. Skipped in a folder that is a git directory (has HEAD and objects).
GIT_DATA_FOLDERS = frozenset(("objects", "refs", "logs", "lfs", "annex"))
# A .git without its data, a .vscode or a .husky holds some tens of files; each costs an
# lstat at every start. Past this many, the run is refused rather than left unchecked.
MAX_FILES_LOOKED_AT = 10_000


def refusal(held: Mapping[str, str], writable: Callable[[str], bool]) -> str | None:
    """The one line that refuses the run, or None: the first held regular file (or file
    in a held folder) that has more than one name, or link in a held folder that leads
    where `writable` says the sandbox could write (the launcher's judgement, with what
    is held counted as read only)."""
    looked_at = 0
    for path in sorted(held):
        for entry, info in _entries(path):
            looked_at += 1
            if looked_at > MAX_FILES_LOOKED_AT:
                return (f"the held dot files hold more than {MAX_FILES_LOOKED_AT} files to "
                        f"look at for hard links (the last in {path}); open the folder's dot "
                        "files with [files] write_dot_files, or make it smaller")
            if stat.S_ISLNK(info.st_mode):
                target = os.path.realpath(entry)
                if writable(target):
                    return (f"{entry} is held read only but is a link to {target}, which the "
                            "sandbox writes: writing there would change what it reads. "
                            "Replace the link by what it points at, or open the folder's dot "
                            "files with [files] write_dot_files")
            elif info.st_nlink > 1:
                return (f"{entry} is held read only but has {info.st_nlink} names (hard "
                        "links); writing another name would change it. Give it a name of its "
                        f"own (cp -p {entry} {entry}.copy && mv {entry}.copy {entry}), or "
                        "open the folder's dot files with [files] write_dot_files")
    return None


def _entries(path: str) -> Iterator[tuple[str, os.stat_result]]:
    """(path, lstat) of `path` if a regular file, else of every regular file and link
    below it, git's data aside; links are not followed."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISREG(info.st_mode):
        yield path, info
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
            if git_dir and entry.name in GIT_DATA_FOLDERS:
                continue  # a folder, or a link to one (Android's repo links objects away)
            try:
                entry_info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(entry_info.st_mode):
                pending.append(entry.path)
            elif stat.S_ISREG(entry_info.st_mode) or stat.S_ISLNK(entry_info.st_mode):
                yield entry.path, entry_info
