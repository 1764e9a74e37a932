"""What the exec watch decides, sans IO: whether a file is in [commands], what a script's
interpreter is, which program a loader run directly is handed, and what `learn` offers.

The watch never answers for Landlock: it names what Landlock will refuse, by the same
list (files and folders of [commands], and the loader, which must stay runnable), and
lets every call go on. These functions only read the values they are given.
"""

from __future__ import annotations

__all__ = ["INTERPRETER_NAMES_PATTERN", "LOADER_OPTIONS_WITH_VALUE", "SHEBANG_BYTES", "Commands",
           "FileId", "interpreter_of", "is_interpreter", "offer", "program_given_to_loader"]

# The kernel reads this much of a file for its #! line (BINPRM_BUF_SIZE).
SHEBANG_BYTES = 256

# A file's identity, as Landlock knows it: (st_dev, st_ino).
FileId = tuple[int, int]


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Commands:
    """The list Landlock enforces: `run` (files and folders of [commands]) and the
    loaders (which every dynamically linked program needs run on its behalf), by path as
    the spec says them, and by identity once pinned.

    Landlock judges the file, not the path it was reached by: the init opened each
    listed path and its rule holds that file or folder, wherever it is moved later. So
    the watch judges by identity too: a file is allowed when it, or a folder it was
    reached through, is one the init opened (`pin`, done by the watch before anything of
    the sandbox's own runs). A folder renamed and a decoy made at its old path is
    refused by Landlock and named here alike."""

    __slots__ = ("loader_ids", "loaders", "run", "run_ids")

    def __init__(self, run: tuple[str, ...], loaders: tuple[str, ...]) -> None:
        self.run = run
        self.loaders = loaders
        self.run_ids: frozenset[FileId] = frozenset()
        self.loader_ids: frozenset[FileId] = frozenset()

    def pin(self, run_ids: frozenset[FileId], loader_ids: frozenset[FileId]) -> None:
        self.run_ids = run_ids
        self.loader_ids = loader_ids

    def allows(self, file: FileId, folders: tuple[FileId, ...]) -> bool:
        """`file`, reached through `folders` (from the sandbox's root down)."""
        return (file in self.loader_ids or file in self.run_ids
                or any(folder in self.run_ids for folder in folders))

    def is_loader(self, file: FileId) -> bool:
        return file in self.loader_ids


def _spacetab(byte: int) -> bool:
    return byte in (0x20, 0x09)


def interpreter_of(head: bytes) -> bytes | None:
    """The interpreter a `#!` line names, as the kernel reads it, or None where the
    kernel would not run the file as a script (ENOEXEC). Never raises.

    A port of fs/binfmt_script.c (Linux 5.1+), over the first BINPRM_BUF_SIZE bytes
    (past the end of the file: NULs, as the kernel's zeroed buffer): the line ends at
    the first newline found before any NUL (strnchr stops at a NUL); with none, the
    whole buffer is the line, but only when a blank or NUL follows the name within it
    (else the name may be cut short: ENOEXEC), and the buffer's last byte is dropped.
    Trailing blanks go; the name starts after `#!` and blanks and ends at the first
    blank, tab or NUL (the kernel writes a NUL there and opens the C string)."""
    buffer = head[:SHEBANG_BYTES].ljust(SHEBANG_BYTES, b"\0")
    if buffer[:2] != b"#!":
        return None
    last = SHEBANG_BYTES - 1
    first_nul = buffer.find(b"\0")
    newline = buffer.find(b"\n", 0, first_nul if first_nul >= 0 else SHEBANG_BYTES)
    if newline >= 0:
        end = newline
    else:
        first = next((at for at in range(2, last + 1) if not _spacetab(buffer[at])), None)
        if first is None:
            return None  # nothing but blanks
        if not any(_spacetab(buffer[at]) or buffer[at] == 0 for at in range(first, last + 1)):
            return None  # the name may go on past the buffer
        end = last
    while _spacetab(buffer[end - 1]):
        end -= 1
    name_at = next((at for at in range(2, end + 1) if not _spacetab(buffer[at])), None)
    if name_at is None or name_at == end:
        return None  # no interpreter named
    name_end = next((at for at in range(name_at, end)
                     if _spacetab(buffer[at]) or buffer[at] == 0), end)
    if name_end == name_at:
        return None  # a NUL right away: the kernel opens "", which fails (ENOENT)
    return buffer[name_at:name_end]


# ld.so's options that take a value (ld.so --help, glibc 2.36).
LOADER_OPTIONS_WITH_VALUE = frozenset({
    "--library-path", "--inhibit-rpath", "--audit", "--preload", "--argv0",
    "--glibc-hwcaps-prepend", "--glibc-hwcaps-mask",
})


def program_given_to_loader(argv: list[str]) -> str | None:
    """The program a loader run directly (`ld.so [OPTIONS] PROGRAM …`) is handed."""
    index = 1
    while index < len(argv):
        word = argv[index]
        if word in LOADER_OPTIONS_WITH_VALUE:
            index += 2
            continue
        if word.startswith("--"):
            index += 1
            continue
        return word
    return None


# Programs that run any code they are given (a script, a -c string, a file): listing
# one lets a sandbox run anything through it. Matched on the file's name, by `learn`;
# compiled when first used (`re` is 5 ms of every watch's start, and the watch needs it not).
INTERPRETER_NAMES_PATTERN = (
    r"(python|pypy|perl|ruby|irb|node|nodejs|bun|deno|php|lua|luajit|tclsh|wish|"
    r"sh|bash|dash|zsh|ksh|mksh|fish|csh|tcsh|busybox|awk|gawk|mawk|nawk|java|jshell|"
    r"R|Rscript|guile|racket|sbcl|ghci|runghc|erl|escript|elixir|julia|osascript|"
    r"gdb|vim|vi|nvim|emacs|expect)"
    r"([0-9.]*(-[0-9.]+)?)"
)


def is_interpreter(path: str) -> bool:
    import re

    return re.fullmatch(INTERPRETER_NAMES_PATTERN, path.rsplit("/", 1)[-1]) is not None


def offer(
    seen: list[str], *, listed: tuple[str, ...], replaceable: tuple[str, ...],
) -> tuple[list[str], list[tuple[str, str]]]:
    """(programs to add to [commands], (program, why not offered) pairs) for what a run
    started, in order, each once. A program the sandbox could replace (in a folder it
    writes, or a temp folder) is never offered: listing it would let anything run."""
    offered: list[str] = []
    refused: list[tuple[str, str]] = []
    for path in dict.fromkeys(seen):
        if any(_inside(path, entry) for entry in listed):
            continue
        holder = next((folder for folder in replaceable if _inside(path, folder)), None)
        if holder is not None:
            refused.append((path, f"lies in {holder}, which the sandbox can write: "
                                  "listing it would let anything run"))
            continue
        offered.append(path)
    return offered, refused
