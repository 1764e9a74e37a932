"""What the processes of ours that run outside a sandbox are given: their environment,
their HOME and their working folder.

The launcher starts them (the exec watch and the DNS helper are forks of it; the proxy
and the relay are spawned), and the proxy in turn starts the asker (and its dialog), the
opener and the tools. The invariant: nothing of them takes its HOME, its working folder,
its environment or any path to read from what a sandbox or a guest can write. A runtime
reads code from all three (a `.pth` or `usercustomize` under HOME's user site, a
`sitecustomize`, `node_modules` or `.npmrc` in the working folder, a program found on a
PATH folder, a library named by LD_PRELOAD), and outside that code runs as the person.

- The working folder of everything outside is `/` (OUTSIDE_FOLDER): the launcher goes
  there once it has taken the program's folder (bubblewrap's --chdir is the program's).
- A guest's session: sshd's environment is partly the guest's (AcceptEnv lets the client
  set LANG and LC_*; TERM, SSH_ORIGINAL_COMMAND and SSH_CONNECTION are the client's), and
  its HOME was the guest's own folder. None of it is taken: the helpers get HOME,
  USER and LOGNAME from the owner's account (its passwd entry), GUEST_PATH and
  GUEST_LOCALE, and nothing else (the proxy's own variables are added by the launcher): no
  display (the owner's screen is not known to an SSH session, so a guest's questions go to
  the queue).
- The person's own run: the caller's environment (a harness's, the person's), but no
  variable that names a path a sandbox of this policy writes: such a PATH folder is taken
  out of PATH; any other variable so naming one (LD_PRELOAD, SSL_CERT_FILE, HOME, …) is
  left out, and said, but PWD and OLDPWD (the working folder is `/`).

The rule is pure (`outside_environment`): the account, the test of what is written and
how a path is resolved are given in.
"""

from __future__ import annotations

import posixpath

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["GUEST_LOCALE", "GUEST_PATH", "LOADER_VARIABLES",
           "OUTSIDE_FOLDER", "Account", "Outside", "outside_environment",
           "without_loader_variables"]

# Where everything of ours outside works: no sandbox writes it.
OUTSIDE_FOLDER = "/"
# A guest's helpers: the system's folders only (a guest cannot set PATH, but sshd's or
# the owner's configuration can name a folder of the home, and no folder of the owner's
# is needed to serve a guest).
GUEST_PATH = "/usr/local/bin:/usr/bin:/bin"
# A locale every glibc has, named, never the client's (a locale name with a `/` is a
# folder glibc reads the locale's files from).
GUEST_LOCALE = "C.UTF-8"
# The working folder's own variables: the helpers' is OUTSIDE_FOLDER, so these are theirs,
# not the caller's, and are not said when left out.
_WORKING_FOLDER = ("PWD", "OLDPWD")


# What glibc's loader and libc read from the environment to load or run other code, or
# to change where they look (glibc's unsecvars.h, the list it clears for setuid
# programs). Every LD_* variable goes too, whatever glibc adds later. Bubblewrap, which
# runs outside until the sandbox is made, never gets them (it passes its environment on
# to the sandbox's init, which would clear them inside anyway: lnk_wrap.init).
LOADER_VARIABLES = frozenset({
    "GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
    "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS",
})


def without_loader_variables(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items()
            if not key.startswith("LD_") and key not in LOADER_VARIABLES}


class Account:
    """The person's account, as its passwd entry gives it (not the session's HOME)."""

    __slots__ = ("home", "name")

    def __init__(self, name: str, home: str) -> None:
        self.name = name
        self.home = home

    @classmethod
    def own(cls) -> Account:
        import os
        import pwd

        entry = pwd.getpwuid(os.getuid())
        return cls(entry.pw_name, entry.pw_dir)


class Outside:
    """The helpers' environment (HOME in it, or none); `guest`: the guest's name for a
    guest's session, whose helpers run in a session of their own (no controlling
    terminal, so no question of theirs reaches the guest's); what was left out of the
    caller's and why (one line each)."""

    __slots__ = ("env", "guest", "notes")

    def __init__(self, env: dict[str, str], guest: str, notes: tuple[str, ...]) -> None:
        self.env = env
        self.guest = guest
        self.notes = notes

    @property
    def own_session(self) -> bool:
        return bool(self.guest)


def _named_paths(value: str) -> list[str]:
    """The absolute paths a value names: itself, or each piece of a `:` list."""
    return [piece for piece in value.split(":") if piece.startswith("/")]


def outside_environment(caller: Mapping[str, str], *, guest: str, account: Account,
                        written: Callable[[str], bool], resolve: Callable[[str], str]
                        ) -> Outside:
    """The helpers' environment for one run. `caller`: the environment the run was started
    with; `guest`: a guest's name (its session's environment is not taken, only the
    account); `written(path)`: whether a
    sandbox of this run writes `path`; `resolve`: a path's real one (a link outside may
    lead into a written folder)."""

    def writes(path: str) -> bool:
        return written(posixpath.normpath(path)) or written(resolve(path))

    if guest:
        env = {"HOME": account.home, "USER": account.name, "LOGNAME": account.name,
               "PATH": GUEST_PATH, "LANG": GUEST_LOCALE}
        if writes(account.home):  # guest add and enter refuse this first
            del env["HOME"]
        return Outside(env, guest, ())
    env = {}
    left_out: list[str] = []
    for name, value in caller.items():
        if name in _WORKING_FOLDER:
            continue
        if name == "PATH":
            kept = [piece for piece in value.split(":")
                    if not (piece.startswith("/") and writes(piece))]
            if kept:
                env[name] = ":".join(kept)
            continue
        if any(writes(path) for path in _named_paths(value)):
            left_out.append(name)
            continue
        env[name] = value
    env["PWD"] = OUTSIDE_FOLDER
    notes = []
    if left_out:
        notes.append(f"{', '.join(sorted(left_out))} name{'s' if len(left_out) == 1 else ''}"
                     " a path this sandbox writes; not given to Link's helpers outside")
    if "HOME" in left_out and not writes(account.home):
        env["HOME"] = account.home
        notes.append(f"Link's helpers outside have HOME={account.home}, your account's")
    return Outside(env, "", tuple(notes))
