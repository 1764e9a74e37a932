"""The resolved policy: what one sandbox may touch, with every path absolute and canonical.

A spec file is read once (lnk_common.spec) into a Policy. The Policy, not the file, is
what the emitted command line carries: `wrap` writes it as options of the launcher
(`to_argv`) and the launcher reads it back (`from_argv`), so a line kept by a harness
runs what the spec said when it was wrapped, not what the file says later.

The argv form is strict: every option is known, every path absolute, nothing repeated
that must not be, and anything else is a PolicyArgvError. It is written by our own wrap
step, but a person may type it too, so it is checked like any input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

__all__ = ["Policy", "PolicyArgvError", "split_argv"]


class PolicyArgvError(Exception):
    """The launcher's options do not describe a policy."""


_PATH_OPTIONS = ("--read", "--write", "--hide", "--reopen")
_VALUE_OPTIONS = ("--settings", "--name", "--spec")
_FLAG_OPTIONS = ("--keep-session",)


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Everything the launcher needs to build one sandbox.

    read/write: trees granted (write implies read). hide: closed whatever else is open.
    reopen: paths inside a hidden folder given back the access their grant gives.
    settings: Link's settings folder, hidden in every sandbox. spec: the file it came
    from, for messages only. keep_session: a guest's terminal (no --new-session).
    """

    settings: str
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    hide: tuple[str, ...] = ()
    reopen: tuple[str, ...] = ()
    name: str = ""
    spec: str = ""
    keep_session: bool = False

    def __post_init__(self) -> None:
        for path in (self.settings, *self.read, *self.write, *self.hide, *self.reopen):
            if not path.startswith("/") or "\0" in path:
                raise PolicyArgvError(f"not an absolute path: {path!r}")
            if str(PurePosixPath(path)) != path or "/../" in f"{path}/" or "/./" in f"{path}/":
                raise PolicyArgvError(f"not a normalised path: {path!r}")

    def to_argv(self) -> list[str]:
        argv = ["--settings", self.settings]
        if self.name:
            argv += ["--name", self.name]
        if self.spec:
            argv += ["--spec", self.spec]
        if self.keep_session:
            argv.append("--keep-session")
        for option, paths in (
            ("--read", self.read),
            ("--write", self.write),
            ("--hide", self.hide),
            ("--reopen", self.reopen),
        ):
            for path in paths:
                argv += [option, path]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str]) -> Policy:
        lists: dict[str, list[str]] = {option: [] for option in _PATH_OPTIONS}
        values: dict[str, str] = {}
        flags: set[str] = set()
        index = 0
        while index < len(argv):
            option = argv[index]
            if option in _FLAG_OPTIONS:
                if option in flags:
                    raise PolicyArgvError(f"{option} given twice")
                flags.add(option)
                index += 1
                continue
            if option not in _PATH_OPTIONS and option not in _VALUE_OPTIONS:
                raise PolicyArgvError(f"unknown option {option!r}")
            if index + 1 >= len(argv):
                raise PolicyArgvError(f"{option} needs a value")
            value = argv[index + 1]
            if option in _PATH_OPTIONS:
                lists[option].append(value)
            elif option in values:
                raise PolicyArgvError(f"{option} given twice")
            else:
                values[option] = value
            index += 2
        if "--settings" not in values:
            raise PolicyArgvError("--settings is required: Link's settings folder is hidden in every sandbox")
        return cls(
            settings=values["--settings"],
            name=values.get("--name", ""),
            spec=values.get("--spec", ""),
            keep_session="--keep-session" in flags,
            read=tuple(lists["--read"]),
            write=tuple(lists["--write"]),
            hide=tuple(lists["--hide"]),
            reopen=tuple(lists["--reopen"]),
        )


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `OPTIONS -- COMMAND…` at the first `--`; the command must not be empty."""
    try:
        cut = argv.index("--")
    except ValueError:
        raise PolicyArgvError("expected OPTIONS -- COMMAND [ARG…]") from None
    command = argv[cut + 1 :]
    if not command:
        raise PolicyArgvError("no command after --")
    return argv[:cut], command
