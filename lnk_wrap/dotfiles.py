"""Dot files of written folders: what is held read only, and where a stand-in goes.

A folder a sandbox writes is one the person works in afterwards, outside it, and some
files there run as the person without the person running the project: git's settings
and hooks on any git command, .envrc when direnv sees them cd in, an editor's tasks and
settings when it opens the folder. At the top of every written folder these are held
read only (a read-only bind in the mount plan) unless the spec's `write_dot_files` names
the folder; a missing one gets an empty stand-in for the run, so it cannot be made
(lnk_wrap.standins keeps the list of them).

Runs in the launcher, outside, at every start: what the folders hold now decides, not
what they held when the spec was read. Every file is read with read_regular (never
blocking on a FIFO a sandbox left; refused where git itself would wait on it).
Trust: the folders are written by the sandboxes this protects against, so every link
on the way to something held is either one the program cannot replace (it is followed,
as git would) or the run is refused; and every settings file is read as git reads it
(lnk_wrap.gitconfig), or the run is refused.

Order of operations, for each written folder whose dot files are not opened:
1. The fixed names at its top (TOP_NAMES): held when there, a stand-in when missing
   (not for .envrc: a new one runs nothing until the person allows it with direnv).
2. The repositories git finds from the folder and from the folder above it, decided
   as git decides (lnk_wrap.gitdiscovery: a `.git` that is not a valid git directory,
   another run's stand-in among them, is passed over): a `.git` folder, a `gitdir:`
   file, its `commondir`, a bare repository. Every folder git reads settings or hooks
   from is held whole where a sandbox could write it. A folder with no repository of
   its own has its HEAD held, so that it cannot be made a bare repository.
3. The settings files git reads for it (the repository's, `config.worktree`, the
   person's own and the system's), and every hooks folder and included file they name,
   resolved as git does (relative includes from the including file's folder, relative
   hooks folders from the top of the work tree, `~` from HOME); includes followed.
4. The hooks in those hooks folders: a hook that is a link has its target held; a hook
   that runs a hook manager (pre-commit, lefthook) has that manager's settings held at
   the top of the folder, with stand-ins where they are missing.
Nested paths (a hooks folder in scripts/hooks) are held the same way; the bwrap plan
pins the folders above them so they cannot be renamed and made again.
"""

from __future__ import annotations

import os
import stat

from lnk_common.policy import Policy
from lnk_wrap.gitconfig import MAX_CONFIG_BYTES, GitConfigError, named_paths, parse
from lnk_wrap.gitdiscovery import NotRegularFileError, discover, read_regular
from lnk_wrap.standins import FILE, FOLDER

TYPE_CHECKING = False  # the typing module costs an import at every start
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["FILE", "FOLDER", "HOOK_MANAGERS", "TOP_NAMES", "DotFileError", "Found", "find"]

# (name, kind, gets a stand-in when missing, why it is held). The seed's list: what
# runs on what the person does anyway, not on running the project.
TOP_NAMES: tuple[tuple[str, str, bool, str], ...] = (
    (".git", FOLDER, True,
     "git's settings and hooks run on any git command; all of it, since its commondir "
     "file can point git at settings anywhere"),
    (".envrc", FILE, False,
     "direnv runs it when you cd in; a missing one is left alone, since direnv runs a new "
     "one only after `direnv allow`, and a folder there would be a folder where you and "
     "direnv expect a file"),
    (".vscode", FOLDER, True, "VS Code runs its tasks and settings when it opens the folder"),
    (".idea", FOLDER, True, "JetBrains IDEs run its settings and run configurations"),
    (".husky", FOLDER, True, "husky's stubs in .husky/_ run its scripts in .husky"),
)


def _lefthook_names() -> tuple[tuple[str, str], ...]:
    names: list[tuple[str, str]] = []
    for stem in ("lefthook", "lefthook-local"):
        for extension in ("yml", "yaml", "toml", "json", "jsonc"):
            names += [(f"{stem}.{extension}", FILE), (f".{stem}.{extension}", FILE),
                      (f".config/{stem}.{extension}", FILE)]
    return (*names, (".lefthook", FOLDER), (".lefthook-local", FOLDER))


# A hook manager's settings, at the top of the work tree: what it reads when a git hook
# runs it (pre-commit: its config; lefthook: every name it looks up, its `-local`
# twins, and the script folders .lefthook/ and .lefthook-local/). Held when there;
# stand-ins where missing once a hook git runs names the manager.
HOOK_MANAGERS: dict[str, tuple[tuple[str, str], ...]] = {
    "pre-commit": ((".pre-commit-config.yaml", FILE), (".pre-commit-config.yml", FILE)),
    "lefthook": _lefthook_names(),
}
# How a hook names its manager (the scripts each installs contain these words).
_MANAGER_MARKS: dict[str, tuple[bytes, ...]] = {
    "pre-commit": (b"pre-commit", b"pre_commit"),
    "lefthook": (b"lefthook",),
}

# git's own limit on nested includes (config.c MAX_INCLUDE_DEPTH); deeper, git refuses.
MAX_INCLUDE_DEPTH = 10
# The kernel's limit on links followed in one path (ELOOP).
MAX_LINKS = 40
# A hooks folder holds a few dozen hooks at most; more is not one a person made, and
# each is read at every start.
MAX_HOOKS = 256
# Enough of a hook to find which manager it runs; installed stubs are a few KiB.
MAX_HOOK_BYTES = 64 * 1024
# A commondir file holds one path; PATH_MAX is enough for any git can use.
MAX_COMMONDIR_BYTES = 4096


class DotFileError(Exception):
    """The dot files of a written folder cannot be held; nothing runs."""


class Found:
    """What to hold read only (existing paths) and where to put stand-ins (missing
    paths, each the topmost missing folder on the way to what is held, or the file
    itself), each with its kind (FOLDER or FILE)."""

    __slots__ = ("held", "standins")

    def __init__(self) -> None:
        self.held: dict[str, str] = {}
        self.standins: dict[str, str] = {}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class _Finder:
    __slots__ = ("env", "found", "known", "managers", "policy", "seen_files")

    def __init__(self, policy: Policy, env: Mapping[str, str],
                 known: Mapping[str, str]) -> None:
        self.policy = policy
        self.env = env
        self.known = known
        self.found = Found()
        self.seen_files: set[str] = set()
        self.managers: set[tuple[str, str]] = set()

    # -- where the program can write ------------------------------------------------

    def writable(self, path: str) -> bool:
        """Whether a sandbox of this policy could change `path` (make, remove, replace
        it), once what is found so far is held."""
        policy = self.policy
        if not any(_inside(path, written) for written in policy.write):
            return False
        if _inside(path, policy.settings) or any(
            _inside(path, held) for held in (*self.found.held, *self.found.standins)
        ):
            return False
        if any(_inside(path, hidden) for hidden in policy.hide):
            return any(_inside(path, reopened) for reopened in policy.reopen)
        return True

    def opened(self, path: str) -> bool:
        return any(_inside(path, folder) for folder in self.policy.write_dot_files)

    # -- following paths as the kernel does -------------------------------------------

    def resolve(self, path: str) -> tuple[str, str | None]:
        """(the real path, the topmost missing part of it or None). A link the program
        could replace is refused: what it points at could change during the run."""
        pending = [part for part in reversed(path.split("/")) if part]
        current = "/"
        hops = 0
        while pending:
            part = pending.pop()
            if part in (".", ""):
                continue
            if part == "..":
                current = os.path.dirname(current)
                continue
            candidate = os.path.join(current, part)
            try:
                info = os.lstat(candidate)
            except (FileNotFoundError, NotADirectoryError):
                rest = [candidate, *reversed(pending)]
                return os.path.normpath(os.path.join(*rest)), candidate
            except OSError:
                # Not reachable by this user, so not by the sandbox either.
                return os.path.normpath(os.path.join(candidate, *reversed(pending))), None
            if stat.S_ISLNK(info.st_mode):
                if self.writable(os.path.dirname(candidate)) and not self.opened(candidate):
                    raise DotFileError(
                        f"{candidate} is a link in a folder the sandbox writes, and git "
                        "follows it to settings or hooks; the program could point it "
                        "elsewhere. Replace the link by what it points at, or open the "
                        "folder's dot files with [files] write_dot_files"
                    )
                hops += 1
                if hops > MAX_LINKS:
                    raise DotFileError(f"{path}: too many links (a loop)")
                target = os.readlink(candidate)
                if target.startswith("/"):
                    current = "/"
                pending += [part for part in reversed(target.split("/")) if part]
                continue
            current = candidate
        return current, None

    # -- holding -----------------------------------------------------------------------

    def hold(self, path: str, kind: str) -> str | None:
        """Hold what git (or an editor, or direnv) reads at `path`; returns the real
        path when it exists, else None (and a stand-in is put where it could be made)."""
        real, missing = self.resolve(path)
        for standin, standin_kind in self.known.items():
            # Another run's stand-in on the way: this run holds it too (the index
            # decides at hold time whether it is still one), never makes a path in it.
            if _inside(missing or real, standin) and self.writable(standin):
                self.found.standins[standin] = standin_kind
                return None
        if missing is None:
            if os.path.lexists(real) and self.writable(real) and not self.opened(real):
                self.found.held[real] = kind
            return real if os.path.lexists(real) else None
        parent = os.path.dirname(missing)
        if os.path.isdir(parent) and self.writable(missing) and not self.opened(missing):
            self.found.standins[missing] = kind if missing == real else FOLDER
        return None

    # -- the steps -----------------------------------------------------------------------

    def top_names(self, top: str) -> None:
        for name, kind, gets_standin, _ in TOP_NAMES:
            path = f"{top}/{name}"
            if os.path.islink(path):
                raise DotFileError(
                    f"{path} is a link in a folder the sandbox writes; the program could "
                    "point it elsewhere (replace it by what it points at, or open the "
                    "folder's dot files with [files] write_dot_files)"
                )
            if path in self.known:
                self.hold(path, kind)
            elif os.path.lexists(path):
                self.found.held[path] = kind
            elif gets_standin:
                self.hold(path, kind)
        for names in HOOK_MANAGERS.values():
            for name, kind in names:
                path = f"{top}/{name}"
                if os.path.lexists(path):
                    self.hold(path, kind)

    def git_dirs(self, found: str) -> tuple[str, str] | None:
        """(git dir, common dir) of the repository whose git directory git found at
        `found` (lnk_wrap.gitdiscovery), each held where writable."""
        git_dir = self.hold(found, FOLDER)
        if git_dir is None:
            return None
        try:
            data = read_regular(f"{git_dir}/commondir", MAX_COMMONDIR_BYTES, follow=True)
        except NotRegularFileError as error:
            if _read_without_waiting(error):
                return git_dir, git_dir
            raise _not_regular(error) from None
        except OSError:
            return git_dir, git_dir
        named = os.fsdecode(data.split(b"\0", 1)[0].rstrip(b"\r\n"))
        if not named:
            return git_dir, git_dir
        return git_dir, self.hold(os.path.join(git_dir, named), FOLDER) or ""

    def settings_file(self, path: str, depth: int = 0) -> list[str]:
        """Hold a settings file git reads and what it names; returns its hooks folders
        as written (relative ones are taken from each work tree's top)."""
        real = self.hold(path, FILE)
        if real is None or real in self.seen_files:
            return []
        self.seen_files.add(real)
        try:
            data = read_regular(real, MAX_CONFIG_BYTES + 1)
        except NotRegularFileError as error:
            if _read_without_waiting(error):
                return []  # no settings in a folder; none that a sandbox made in a device
            raise _not_regular(error) from None
        except OSError:
            return []
        try:
            hooks, includes = named_paths(parse(data))
        except GitConfigError as error:
            raise DotFileError(
                f"git's settings {real} cannot be read as git reads them ({error}); "
                "refusing, since a hooks folder it names could not be held"
            ) from None
        for include in includes:
            expanded = self.expand(include)
            if expanded is None:
                continue
            if depth >= MAX_INCLUDE_DEPTH:
                raise DotFileError(f"{real}: includes nested deeper than git allows")
            included = os.path.join(os.path.dirname(path), expanded)
            hooks += self.settings_file(included, depth + 1)
        return [expanded for value in hooks if (expanded := self.expand(value)) is not None]

    def expand(self, value: str) -> str | None:
        """git's interpolate_path: `~/` is HOME, `~user/` that user's home; `%(prefix)/`
        is git's own install folder, which no sandbox writes (None: nothing to hold)."""
        if value.startswith("%(prefix)/"):
            return None
        if not value.startswith("~"):
            return value
        user, _, rest = value[1:].partition("/")
        if user:
            import pwd

            try:
                home = pwd.getpwnam(user).pw_dir
            except KeyError:
                return None
        else:
            home = self.env.get("HOME", "")
            if not home:
                return None
        return os.path.join(home, rest)

    def repository(self, found: tuple[str | None, str], personal_hooks: list[str], *,
                   top: str | None) -> None:
        """Hold what git reads for the repository it found: (work tree's top, or None
        when bare; git directory as found). `top` is the written folder when that work
        tree is the written folder itself (its hook managers' settings are held there)."""
        work_tree, found_git_dir = found
        if work_tree is None and found_git_dir in self.policy.write:
            # A bare repository at the top of a written folder: its settings and hooks,
            # not the whole folder, or the sandbox could not work in it at all.
            git_dir, common = found_git_dir, found_git_dir
            self.hold(f"{git_dir}/commondir", FILE)
        else:
            dirs = self.git_dirs(found_git_dir)
            if dirs is None:
                return
            git_dir, common = dirs
        settings = [f"{common}/config"] if common else []
        if common != git_dir:
            settings.append(f"{git_dir}/config.worktree")
        hooks = list(personal_hooks)
        for path in settings:
            hooks += self.settings_file(path)
        # Relative hooks folders are taken from the top of the work tree; in a bare
        # repository, from the git directory (where git runs hooks).
        base = work_tree if work_tree is not None else git_dir
        folders = [os.path.join(base, hook) for hook in hooks]
        if common:
            folders.append(f"{common}/hooks")
        for folder in folders:
            real = self.hold(folder, FOLDER)
            if real is not None and os.path.isdir(real):
                self.husky_scripts(real)
                self.hooks(real, top)

    def husky_scripts(self, hooks_folder: str) -> None:
        """husky (9) points git at `.husky/_`, whose stubs run the person's scripts in
        `.husky` itself: held whole wherever it is, not only at a written folder's top."""
        parent, name = os.path.split(hooks_folder)
        if name == "_" and os.path.basename(parent) == ".husky":
            self.hold(parent, FOLDER)

    def hooks(self, folder: str, top: str | None) -> None:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        if len(names) > MAX_HOOKS:
            raise DotFileError(f"hooks folder {folder} holds more than {MAX_HOOKS} files")
        for name in names:
            if name.endswith(".sample"):
                continue
            path = f"{folder}/{name}"
            real = self.hold(path, FILE) if os.path.islink(path) else path
            if real is None or top is None:
                continue
            try:
                text = read_regular(real, MAX_HOOK_BYTES)
            except (NotRegularFileError, OSError):
                continue  # git cannot run it either (a FIFO, a folder): no manager named
            for manager, marks in _MANAGER_MARKS.items():
                if any(mark in text for mark in marks):
                    self.manager_settings(top, manager, text)

    def manager_settings(self, top: str, manager: str, hook: bytes) -> None:
        if (top, manager) not in self.managers:
            self.managers.add((top, manager))
            for name, kind in HOOK_MANAGERS[manager]:
                self.hold(f"{top}/{name}", kind)
        if manager == "pre-commit":
            # pre-commit bakes the settings file it was installed with into the hook.
            for word in hook.split():
                if word.startswith(b"--config="):
                    named = os.fsdecode(word[len(b"--config="):].strip(b"'\""))
                    if named:
                        self.hold(os.path.join(top, named), FILE)


def _personal_settings(env: Mapping[str, str]) -> list[str]:
    """The settings files git reads for every repository of the person (git-config(1))."""
    home = env.get("HOME", "")
    files: list[str] = []
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if env.get("GIT_CONFIG_GLOBAL"):
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        xdg = env.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else "")
        if xdg:
            files.append(f"{xdg}/git/config")
        if home:
            files.append(f"{home}/.gitconfig")
    return [path for path in files if os.path.isabs(path)]


def _read_without_waiting(error: NotRegularFileError) -> bool:
    """What git reads past without waiting: a folder (git reads no settings from it) or
    a device file (GIT_CONFIG_GLOBAL=/dev/null is common; a sandbox cannot make one).
    A FIFO git would wait on forever, and a socket it cannot open: the run is refused."""
    return error.kind in ("a folder", "a device file")


def _not_regular(error: NotRegularFileError) -> DotFileError:
    effect = ("git would wait on it forever, and so would this run"
              if error.kind.startswith("a FIFO") else "git cannot read it")
    return DotFileError(
        f"{error}: {effect}; a sandbox may have left it (remove it: rm {error.path})"
    )


def _discovered(folder: str) -> list[tuple[str | None, str]]:
    """The repositories git finds from the written folder `folder` and from the folder
    above it, each as lnk_wrap.gitdiscovery decides it (as git does: a `.git` that is
    not a valid git directory, another run's stand-in among them, is passed over).
    The folder above too: git run anywhere else in an enclosing repository (its top)
    uses that repository's hooks, wherever in it they lie, even when the written folder
    is a repository of its own."""
    found: list[tuple[str | None, str]] = []
    starts = [folder] if folder == "/" else [folder, os.path.dirname(folder)]
    for start in starts:
        try:
            repository = discover(start)
        except NotRegularFileError as error:
            raise _not_regular(error) from None
        if repository is not None and repository not in found:
            found.append(repository)
    return found


def find(policy: Policy, env: Mapping[str, str],
         known_standins: Mapping[str, str] | None = None) -> Found:
    """What the launcher holds read only and where it puts stand-ins for `policy`;
    `known_standins` (path → kind) are those the index lists now, held as
    stand-ins (joined), not as found."""
    finder = _Finder(policy, env, known_standins or {})
    tops = [folder for folder in policy.write
            if folder not in policy.write_dot_files and os.path.isdir(folder)
            and not os.path.islink(folder)]
    if not tops:
        return finder.found
    for top in tops:
        finder.top_names(top)
    # The person's own settings apply to every repository: a relative hooks folder they
    # name is taken from each work tree's top, and every hook git would run there is
    # looked at for the manager it runs.
    personal_hooks: list[str] = []
    for path in _personal_settings(env):
        personal_hooks += finder.settings_file(path)
    for hook in personal_hooks:
        if os.path.isabs(hook):
            real = finder.hold(hook, FOLDER)
            if real is not None and os.path.isdir(real):
                finder.hooks(real, None)
    for top in tops:
        found = _discovered(top)
        if not any(top in repository for repository in found):
            # With no repository of its own (no .git, or one git passes over, such as a
            # stand-in), git takes the folder itself for a bare repository once it
            # holds HEAD, objects/ and refs/: a sandbox could make them, and a config
            # whose core.pager or alias runs on the person's next `git log`. Its HEAD
            # is held (an empty stand-in when missing: not a valid HEAD).
            finder.hold(f"{top}/HEAD", FILE)
        for repository in found:
            finder.repository(repository, personal_hooks,
                              top=top if repository[0] == top else None)
    return finder.found
