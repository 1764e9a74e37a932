"""lnk-sandbox-init: the first program inside the sandbox, and the last of ours.

    lnk-sandbox-init --rule ACCESS:PATH … -- COMMAND [ARG…]

Order of operations, each checked, any failure refusing to run the program (exit 125):
1. Read the rules (ACCESS is read, write, devices or proc: lnk_wrap.bwrap.Access).
2. Clear the loader's injection variables (LD_PRELOAD, LD_AUDIT, … : the list below).
3. Close every inherited file descriptor but 0, 1 and 2.
4. (The seccomp filter goes here, installed as the first thing inside: a later issue.)
5. Apply Landlock: single-threaded, after bubblewrap's mounts, right before exec; then
   verify it took effect by opening the sandbox's root folder, which no rule grants.
6. exec the command. This process is replaced: nothing of ours stays inside.

Keep imports here few and cheap: every sandbox start pays for them.
"""

from __future__ import annotations

import os
import sys

from lnk_common import landlock

__all__ = ["LOADER_VARIABLES", "main"]

EXIT_SANDBOX_FAILED = 125
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127

# What glibc's loader and libc read from the environment to load or run other code, or
# to change where they look (glibc's unsecvars.h, the list it clears for setuid
# programs). Every LD_* variable goes too, whatever glibc adds later.
LOADER_VARIABLES = frozenset({
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS",
})

_ACCESS = landlock.ACCESS_RIGHTS


class InitError(Exception):
    """The sandbox cannot be finished as asked; the program is not run."""


def parse(argv: list[str]) -> tuple[list[landlock.Rule], list[str]]:
    rules: list[landlock.Rule] = []
    index = 0
    while index < len(argv) and argv[index] != "--":
        if argv[index] != "--rule" or index + 1 >= len(argv):
            raise InitError(f"unknown option {argv[index]!r} (expected --rule ACCESS:PATH)")
        access, _, path = argv[index + 1].partition(":")
        if access not in _ACCESS or not path.startswith("/"):
            raise InitError(f"not a rule: {argv[index + 1]!r}")
        rules.append((path, _ACCESS[access]))
        index += 2
    command = argv[index + 1 :]
    if index >= len(argv) or not command:
        raise InitError("expected --rule … -- COMMAND [ARG…]")
    return rules, command


def clean_environment(env: dict[str, str]) -> dict[str, str]:
    return {
        key: value for key, value in env.items()
        if not key.startswith("LD_") and key not in LOADER_VARIABLES
    }


def apply_landlock(rules: list[landlock.Rule]) -> None:
    abi = landlock.abi_version()
    try:
        landlock.restrict_self(rules, abi=abi)
    except landlock.LandlockError as error:
        raise InitError(str(error)) from None
    try:
        fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        return
    os.close(fd)
    raise InitError("Landlock did not take effect: the sandbox's root folder is still readable")


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    try:
        rules, command = parse(arguments)
        env = clean_environment(dict(os.environ))
        os.closerange(3, 1 << 20)
        apply_landlock(rules)
    except (InitError, OSError) as error:
        print(f"lnk-sandbox-init: {error}; the program was not run", file=sys.stderr)
        sys.exit(EXIT_SANDBOX_FAILED)
    try:
        exec_search(command, env)
    except FileNotFoundError:
        print(f"lnk-sandbox: {command[0]}: not found in the sandbox", file=sys.stderr)
        sys.exit(EXIT_NOT_FOUND)
    except PermissionError:
        print(f"lnk-sandbox: {command[0]}: cannot be run in the sandbox (permission denied)",
              file=sys.stderr)
        sys.exit(EXIT_CANNOT_RUN)
    except OSError as error:
        print(f"lnk-sandbox: {command[0]}: cannot be run: {error.strerror}", file=sys.stderr)
        sys.exit(EXIT_CANNOT_RUN)


def exec_search(command: list[str], env: dict[str, str]) -> None:
    """execvpe as the shell does it: a name without a slash is looked for on PATH, a
    folder that refuses (EACCES) is passed over but remembered. By hand, because
    os.execvpe imports `warnings` on its first use, and after Landlock the standard
    library is no longer readable."""
    name = command[0]
    if "/" in name:
        os.execve(name, command, env)
    denied: OSError | None = None
    for folder in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
        try:
            os.execve(os.path.join(folder or ".", name), command, env)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except PermissionError as error:
            denied = denied or error
    raise denied or FileNotFoundError(name)


if __name__ == "__main__":
    main()
