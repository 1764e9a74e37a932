"""What the exec watch decides, sans IO: whether a file is in [commands], what a script's
interpreter is, which program a loader run directly is handed, and what `learn` offers.

The watch never answers for Landlock: it names what Landlock will refuse, by the same
list (files and folders of [commands], and the loader, which must stay runnable), and
lets every call go on. These functions only read the values they are given.
"""

from __future__ import annotations

__all__ = ["INTERPRETER_NAMES_PATTERN", "LOADER_OPTIONS_WITH_VALUE", "Commands", "interpreter_of",
           "is_interpreter", "offer", "program_given_to_loader"]

# The kernel reads this much of a file for its #! line (BINPRM_BUF_SIZE).
SHEBANG_BYTES = 256


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Commands:
    """The list Landlock enforces: `run` (files and folders of [commands]) and the
    loaders (which every dynamically linked program needs run on its behalf)."""

    __slots__ = ("loaders", "run")

    def __init__(self, run: tuple[str, ...], loaders: tuple[str, ...]) -> None:
        self.run = run
        self.loaders = loaders

    def allows(self, path: str) -> bool:
        return path in self.loaders or any(_inside(path, entry) for entry in self.run)

    def is_loader(self, path: str) -> bool:
        return path in self.loaders


def interpreter_of(head: bytes) -> str | None:
    """The interpreter a `#!` line names, as the kernel reads it (binfmt_script): after
    `#!` and blanks, up to the next blank or the end of the line."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:SHEBANG_BYTES].split(b"\n", 1)[0]
    words = line.replace(b"\t", b" ").strip(b" ").split(b" ", 1)
    if not words or not words[0]:
        return None
    return words[0].decode("utf-8", "surrogateescape")


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
