"""Which repository git finds from a folder, decided as git's own discovery decides it.

The launcher holds read only the settings and hooks of the repository git will use
when the person runs it in a written folder later. Taking "a `.git` is there" for "a
repository is there" is not what git does: git passes over a `.git` that is not a valid
git directory (an empty folder, which is what a stand-in is; a folder without HEAD,
objects or refs; a FIFO) and goes on upward. A launcher that stopped there would never
look at the enclosing repository, whose hooks may lie in the written folder (found
with two runs at once: the second saw the first's stand-in). So this follows git's
setup.c rule by rule (setup_git_directory_gently_1, read_gitfile_gently,
is_git_directory, validate_headref, get_common_dir_noenv; git 2.39-2.47), and
tests/test_gitdiscovery.py checks it against the real `git rev-parse` on the odd cases.

Where this knowingly finds more than git would, it is on the safe side (more held):
GIT_CEILING_DIRECTORIES, GIT_DISCOVERY_ACROSS_FILESYSTEM, safe.directory and
safe.bareRepository are not applied, since the person's git later may run with other
settings than the harness that starts the sandbox.

Every file is read without ever blocking (read_regular): a sandbox may have left a FIFO
where git expects a file. Where git itself would block on it (HEAD, commondir, a
settings file), NotRegularFileError says so and the launcher refuses the run in one
line; where git passes over what is not a regular file (a `.git` that is a FIFO),
this passes over it too.

Runs in the launcher only; imports nothing but errno, os and stat.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["MAX_GITFILE_BYTES", "NotRegularFileError", "discover", "is_git_directory",
           "read_regular"]

# git's read_gitfile_gently refuses a `.git` file larger than this (max_file_size).
MAX_GITFILE_BYTES = 1 << 20
# git's validate_headref reads at most this much of HEAD (its buffer of 256, less the NUL).
MAX_HEAD_BYTES = 255
# A commondir file holds one path; git reads it whole, PATH_MAX is enough for any it
# can use.
MAX_COMMONDIR_BYTES = 4096
# git's sane_ctype isspace: no \v, no \f.
_GIT_SPACE = b" \t\n\r"
_HEX = frozenset(b"0123456789abcdefABCDEF")
# Object names git knows (SHA-1, SHA-256), in hexadecimal digits.
_OBJECT_NAME_DIGITS = (40, 64)


class NotRegularFileError(Exception):
    """Something other than a regular file where one is read; git would block on a
    FIFO there, and so would the launcher had it opened it blindly."""

    def __init__(self, path: str, kind: str) -> None:
        self.path = path
        self.kind = kind
        super().__init__(f"{path} is {kind} where git reads a file")


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a unix socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def read_regular(path: str, limit: int, *, follow: bool = False) -> bytes:
    """Up to `limit` bytes of the regular file at `path`, opened O_NONBLOCK (a FIFO
    opens at once instead of waiting for a writer) and O_NOFOLLOW unless `follow`, and
    checked with fstat on the very descriptor before any read: NotRegularFileError for
    anything else (a socket, which open refuses with ENXIO, too). OSError as open gives
    it otherwise (missing, unreadable, a link when not followed)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    if not follow:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ENXIO:  # a unix socket, or a device without its driver
            try:
                mode = os.stat(path, follow_symlinks=follow).st_mode
            except OSError:
                raise error from None
            raise NotRegularFileError(path, _kind(mode)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, _kind(mode))
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _valid_head(path: str) -> bool:
    """git's validate_headref: a link into refs/, `ref: refs/…`, or an object name."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode):
        try:
            return os.readlink(path).startswith("refs/")
        except OSError:
            return False
    if stat.S_ISFIFO(info.st_mode):
        # git opens it and waits for a writer: every git command there would hang.
        raise NotRegularFileError(path, _kind(info.st_mode))
    if not stat.S_ISREG(info.st_mode):
        return False  # git's open or read fails on a folder, a socket, a device
    try:
        data = read_regular(path, MAX_HEAD_BYTES)
    except OSError:
        return False
    data = data.split(b"\0", 1)[0]  # git reads it as a C string
    if data.startswith(b"ref:") and data[4:].lstrip(_GIT_SPACE).startswith(b"refs/"):
        return True
    return any(len(data) >= digits and all(byte in _HEX for byte in data[:digits])
               for digits in _OBJECT_NAME_DIGITS)


def common_dir(git_dir: str) -> str:
    """git's get_common_dir_noenv: the folder `commondir` names (relative to the git
    directory), or the git directory itself. A commondir git fails to read (empty, a
    folder) makes git die; the git directory itself is taken then (held either way)."""
    path = f"{git_dir}/commondir"
    if not os.path.exists(path):
        return git_dir
    try:
        data = read_regular(path, MAX_COMMONDIR_BYTES, follow=True)
    except NotRegularFileError as error:
        if error.kind.startswith("a FIFO"):
            raise
        return git_dir
    except OSError:
        return git_dir
    named = os.fsdecode(data.split(b"\0", 1)[0].rstrip(b"\r\n"))
    if not named:
        return git_dir
    return os.path.normpath(os.path.join(git_dir, named))


def is_git_directory(path: str) -> bool:
    """git's is_git_directory: a valid HEAD, and objects/ and refs/ that can be
    searched (access X_OK, as git checks) in its common dir."""
    if not _valid_head(f"{path}/HEAD"):
        return False
    common = common_dir(path)
    return os.access(f"{common}/objects", os.X_OK) and os.access(f"{common}/refs", os.X_OK)


class _GitDies(Exception):
    """git stops with an error at this `.git` (a bad `.git` file): nothing of a
    repository runs from there."""


def _gitfile_target(dot_git: str) -> str:
    """git's read_gitfile_gently on a regular `.git` file: the git directory its
    `gitdir:` line names, or _GitDies where git dies (read_gitfile_error_die)."""
    try:
        data = read_regular(dot_git, MAX_GITFILE_BYTES + 1, follow=True)
    except OSError:
        raise _GitDies from None
    if len(data) > MAX_GITFILE_BYTES or not data.startswith(b"gitdir: "):
        raise _GitDies
    data = data.rstrip(b"\r\n")
    if len(data) < 9:
        raise _GitDies  # no path in gitfile
    pointer = os.fsdecode(data[8:].split(b"\0", 1)[0])
    if not pointer.startswith("/"):
        pointer = os.path.join(os.path.dirname(dot_git), pointer)
    if not is_git_directory(pointer):
        raise _GitDies
    return pointer


def discover(start: str) -> tuple[str | None, str] | None:
    """(work tree's top or None for a bare repository, git directory as git names it)
    that git finds when run in the folder `start`; None when it finds none or dies
    first. Follows setup_git_directory_gently_1: at each folder up to /, its `.git`
    (a `gitdir:` file, else a valid git directory), then the folder itself as a bare
    repository."""
    folder = os.path.normpath(start)
    while True:
        dot_git = f"{folder.rstrip('/')}/.git"
        try:
            info: os.stat_result | None = os.stat(dot_git)
        except OSError:
            info = None
        if info is not None and stat.S_ISREG(info.st_mode):
            try:
                return folder, _gitfile_target(dot_git)
            except _GitDies:
                return None
        # Anything else (a folder, missing, a FIFO: its HEAD is not there) is passed
        # over unless it is a valid git directory; nothing in it is opened blindly.
        if is_git_directory(dot_git):
            return folder, dot_git
        if is_git_directory(folder):
            return None, folder
        if folder == "/":
            return None
        folder = os.path.dirname(folder)
