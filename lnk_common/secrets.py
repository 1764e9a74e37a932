"""The store of secrets in Link's settings folder: `sandbox/secrets/<name>`, one file each.

Job: keep a person's secrets (a hosted model's key, a bot's token) where no sandbox can
read them, and hand a verb the current value at each call, so a rotated key takes effect
at once. Writers are `lnk-sandbox secret set/remove`; readers are the proxy's model and
secret verbs (at each call), the tools' definitions (lnk_proxy.tools), and the launcher,
which reads a named secret and its rule at start to make its placeholder of the secret's
shape (lnk_wrap.verb_env). Link's settings folder is hidden in every sandbox, so a sandboxed
program can neither read a secret nor plant a file or link here.

Trust: the settings root is the real folder `lnk_common.settings.settings_folder` found
(no link on it). Below it nothing is trusted: `sandbox/` and `secrets/` are opened one
name at a time with O_NOFOLLOW and O_DIRECTORY, so a link planted at either is refused,
never followed; the secrets folder must be ours and 0700; a secret must be a regular
file, ours, exactly 0600, opened with O_NOFOLLOW (a link at its name is refused).

Order of a write: the name checked (sans-IO) → the folders opened (made 0700 when
missing) → a temp file made beside the secret with O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600
(umask can only take bits away, and fchmod sets 0600 again) → written whole, fsync →
what sits at the name checked (absent or a regular file, never a link or folder) →
rename over it (rename never follows a link at its target) → the folder fsync-ed. A
reader therefore sees the old value or the new one whole, never a part, and the value is
never readable by another user at any moment. Two writers of one name each use their own
temp file: the last rename wins, whole.

The value never appears in a message: every error names the secret (a name the grammar
allowed) or the path, never the bytes. A name the grammar refuses is not echoed either: a
key pasted where the name goes (`secret set AIza…`) must not land on a terminal or a log.

A secret may be kept with its rule (the secret verb's, lnk_proxy.secret_rules): the file
`<name>.rule` beside it, written, read and removed the same way (0600, whole, no link).
A secret's name never holds '.', so `<name>.rule` is no secret's name and no secret's file
can be a rule's. This module keeps the rule's bytes only; `secret set --rule` parses them
before anything is stored, and the proxy parses them again at each read.

A tool's definition is kept here too (`<name>.tool`), its own secrets beside it
(`<name>.tool-secrets`, so the definition never holds a token) and the tools' index
(`tools.index`, the variables every definition names, for a sandbox's start): all written
and read as a secret is, none a secret's name (each holds a '.').

Sans-IO core: `name_problem` and `value_problem`. One error type: `SecretError`.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from lnk_common.filewrite import read_whole, write_synced

__all__ = [
    "MAX_NAME_LENGTH",
    "MAX_RULE_FILE_BYTES",
    "MAX_SECRET_BYTES",
    "RULE_SUFFIX",
    "SECRETS_FOLDER",
    "SecretError",
    "list_secrets",
    "name_problem",
    "read_rule",
    "read_secret",
    "remove_secret",
    "rule_names",
    "value_problem",
    "write_rule",
    "write_secret",
]

# Long enough for any service's name ("anthropic", "openrouter", "github-work"); short
# enough that a key pasted where the name goes is refused rather than stored as a name
# and printed by `secret list` (Gemini's keys are 39 characters, GitHub's tokens 40,
# Anthropic's and OpenAI's over 100).
MAX_NAME_LENGTH = 32
# Keys and tokens are under 1 KiB; an RSA-4096 private key in PEM is about 3.3 KiB. A
# bound far above both still stops a mistaken pipe of a whole file from being stored and
# then read at every call of a verb.
MAX_SECRET_BYTES = 64 * 1024
# The rule's file beside its secret: `<name>.rule` (a name never holds '.').
RULE_SUFFIX = ".rule"
# A rule is a few hundred bytes (lnk_proxy.secret_rules.MAX_RULE_BYTES bounds what parses);
# the store reads one byte past this to refuse a larger file without reading it whole.
MAX_RULE_FILE_BYTES = 16 * 1024
# Under the settings root, as docs/decisions/0015-settings-folder.md lays out.
SECRETS_FOLDER = ("sandbox", "secrets")

# Letters, digits, '-' and '_', starting with a letter or digit: no '/', no '.', so no
# '..', no hidden or temp file name, nothing a shell, a path or a URL reads specially.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
_TEMP_PREFIX = ".tmp-"
_FOLDER_MODE = 0o700
_FILE_MODE = 0o600
_OPEN_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class SecretError(Exception):
    """A secret cannot be named, stored, read or removed; the message never holds a value."""


# -- sans-IO ------------------------------------------------------------------------------


def name_problem(name: str) -> str | None:
    """Why `name` cannot name a secret, or None. The reason never repeats the name."""
    if not name:
        return "a secret's name cannot be empty"
    if len(name) > MAX_NAME_LENGTH or not name.isascii() or _NAME.match(name) is None:
        return (f"a secret's name is 1 to {MAX_NAME_LENGTH} ASCII letters, digits, '-' or "
                "'_', starting with a letter or digit (the name given is not repeated here, "
                "in case it was the value)")
    return None


def value_problem(value: bytes) -> str | None:
    """Why `value` cannot be stored, or None. The reason never repeats the value."""
    if not value:
        return "the value is empty"
    if b"\0" in value:
        return "the value holds a NUL byte"
    if len(value) > MAX_SECRET_BYTES:
        return f"the value is longer than {MAX_SECRET_BYTES} bytes"
    return None


def _checked_name(name: str) -> str:
    problem = name_problem(name)
    if problem:
        raise SecretError(problem)
    return name


# -- the folder -----------------------------------------------------------------------------


def _open_folder(parent: int, name: str, shown: str, *, make: bool) -> int:
    """Open `name` in the folder `parent` as a folder, never through a link."""
    if make:
        try:
            os.mkdir(name, _FOLDER_MODE, dir_fd=parent)
        except FileExistsError:
            pass
        except OSError as error:
            raise SecretError(f"cannot make {shown}: {error.strerror}") from None
    try:
        return os.open(name, _OPEN_FOLDER, dir_fd=parent)
    except FileNotFoundError:
        raise
    except OSError as error:
        # ELOOP: a link (O_NOFOLLOW); ENOTDIR: a file, or a link on some kernels.
        raise SecretError(f"{shown} is not a folder (a link or a file is there); refused, "
                          f"nothing followed: {error.strerror}") from None


def _secrets_folder(settings_root: str, *, make: bool) -> int | None:
    """A descriptor of the secrets folder, checked ours and 0700; None when it does not
    exist and `make` is false."""
    if make:
        try:
            os.makedirs(settings_root, mode=_FOLDER_MODE, exist_ok=True)
        except OSError as error:
            raise SecretError(f"cannot make Link's settings folder {settings_root}: "
                              f"{error.strerror}") from None
    try:
        root = os.open(settings_root, _OPEN_FOLDER)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise SecretError(f"Link's settings folder {settings_root} cannot be opened: "
                          f"{error.strerror}") from None
    shown = settings_root
    try:
        folder = root
        for part in SECRETS_FOLDER:
            shown = os.path.join(shown, part)
            try:
                opened = _open_folder(folder, part, shown, make=make)
            except FileNotFoundError:
                return None
            if folder != root:
                os.close(folder)
            folder = opened
    finally:
        os.close(root)
    info = os.fstat(folder)
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        os.close(folder)
        raise SecretError(f"{shown} must be yours and 0700 (it is "
                          f"{stat.S_IMODE(info.st_mode):04o}, owner {info.st_uid}); refused")
    return folder


# -- reading ---------------------------------------------------------------------------------


def read_secret(settings_root: str, name: str) -> bytes:
    """The value of the secret `name`, read now (a rotated key takes effect at once).

    Refused: a bad name, a missing secret, a link, anything but a regular file, a file not
    the user's or not exactly 0600, a folder on the way that is a link or not 0700, an
    empty or oversized value."""
    _checked_name(name)
    value = _read_file(settings_root, name, f"the secret {name}", MAX_SECRET_BYTES,
                       missing=f"no secret named {name} (set it with: lnk-sandbox secret set "
                               f"{name})")
    problem = value_problem(value)
    if problem:
        raise SecretError(f"the secret {name} cannot be used: {problem}")
    return value


def read_rule(settings_root: str, name: str) -> bytes:
    """The bytes of the rule kept with the secret `name`, read now, as strictly as a
    secret (regular file, ours, 0600, no link); not parsed here. SecretError when there is
    none."""
    _checked_name(name)
    value = _read_file(settings_root, name + RULE_SUFFIX, f"the rule of the secret {name}",
                       MAX_RULE_FILE_BYTES,
                       missing=f"no rule is kept with the secret {name} (set it with: "
                               f"lnk-sandbox secret set {name} --rule FILE)")
    if len(value) > MAX_RULE_FILE_BYTES:
        raise SecretError(f"the rule of the secret {name} is longer than "
                          f"{MAX_RULE_FILE_BYTES} bytes; refused")
    return value


def _read_file(settings_root: str, filename: str, shown: str, limit: int, *,
               missing: str) -> bytes:
    """The bytes of `filename` in the secrets folder, up to limit + 1 (the caller refuses
    more), after the checks read_secret names."""
    folder = _secrets_folder(settings_root, make=False)
    if folder is None:
        raise SecretError(missing)
    try:
        try:
            # O_NONBLOCK: a FIFO planted at the name must not hang the reader before the
            # regular-file check below refuses it.
            fd = os.open(filename, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=folder)
        except FileNotFoundError:
            raise SecretError(missing) from None
        except OSError as error:
            raise SecretError(f"{shown} cannot be opened (a link is refused): "
                              f"{error.strerror}") from None
    finally:
        os.close(folder)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SecretError(f"{shown} is not a regular file; refused")
        if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) != _FILE_MODE:
            raise SecretError(f"{shown} must be yours and 0600 (it is "
                              f"{stat.S_IMODE(info.st_mode):04o}, owner {info.st_uid}); refused")
        data = read_whole(fd, limit)
    except OSError as error:
        raise SecretError(f"{shown} cannot be read: {error.strerror}") from None
    finally:
        os.close(fd)
    return data


def list_secrets(settings_root: str) -> list[str]:
    """The names of the stored secrets, sorted; entries that are not a regular file with a
    valid name (a temp file, a link, a folder) are not secrets and are left out."""
    folder = _secrets_folder(settings_root, make=False)
    if folder is None:
        return []
    try:
        names = []
        for entry in os.listdir(folder):
            if name_problem(entry) is not None:
                continue
            try:
                info = os.stat(entry, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(info.st_mode):
                names.append(entry)
    finally:
        os.close(folder)
    return sorted(names)


def rule_names(settings_root: str) -> list[str]:
    """The names of the secrets kept with a rule (a regular file `<name>.rule` beside a
    stored secret), sorted."""
    return _names_with(settings_root, RULE_SUFFIX, beside_a_secret=True)


def _names_with(settings_root: str, suffix: str, *, beside_a_secret: bool) -> list[str]:
    """The valid names of regular files `<name><suffix>` in the secrets folder (with
    `beside_a_secret`, only those whose secret `<name>` is a regular file too), sorted."""
    folder = _secrets_folder(settings_root, make=False)
    if folder is None:
        return []
    try:
        names = []
        for entry in os.listdir(folder):
            name = entry.removesuffix(suffix)
            if name == entry or name_problem(name) is not None:
                continue
            try:
                found = [os.stat(entry, dir_fd=folder, follow_symlinks=False)]
                if beside_a_secret:
                    found.append(os.stat(name, dir_fd=folder, follow_symlinks=False))
            except FileNotFoundError:
                continue
            if all(stat.S_ISREG(info.st_mode) for info in found):
                names.append(name)
    finally:
        os.close(folder)
    return sorted(names)


# -- writing ---------------------------------------------------------------------------------


def write_secret(settings_root: str, name: str, value: bytes) -> None:
    """Store `value` as the secret `name`, atomically, 0600 in a 0700 folder (see the
    module's order of a write)."""
    _checked_name(name)
    problem = value_problem(value)
    if problem:
        raise SecretError(f"the secret {name} is not stored: {problem}")
    _write_file(settings_root, name, value, f"the secret {name}")


def write_rule(settings_root: str, name: str, rule: bytes) -> None:
    """Keep `rule` (bytes the caller parsed) with the secret `name`, as a secret is
    written. The caller writes the rule before the value, so a new value is never read
    with a rule it was not checked against."""
    _checked_name(name)
    if not rule or len(rule) > MAX_RULE_FILE_BYTES:
        raise SecretError(f"the rule of the secret {name} is not stored: it is empty or longer "
                          f"than {MAX_RULE_FILE_BYTES} bytes")
    _write_file(settings_root, name + RULE_SUFFIX, rule, f"the rule of the secret {name}")


def _write_file(settings_root: str, filename: str, value: bytes, shown: str) -> None:
    folder = _secrets_folder(settings_root, make=True)
    if folder is None:  # made just now, then gone: someone else is at work here
        raise SecretError("the secrets folder vanished while it was made; nothing was stored")
    temporary = f"{_TEMP_PREFIX}{filename}-{os.urandom(8).hex()}"
    try:
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, _FILE_MODE, dir_fd=folder)
        except OSError as error:
            raise SecretError(f"{shown} is not stored: cannot make a temp file: "
                              f"{error.strerror}") from None
        try:
            write_synced(fd, value, _FILE_MODE)
            _refuse_other_than_file(folder, filename, shown)
            os.rename(temporary, filename, src_dir_fd=folder, dst_dir_fd=folder)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder)
            raise
        os.fsync(folder)
    except OSError as error:
        raise SecretError(f"{shown} is not stored: {error.strerror}") from None
    finally:
        os.close(folder)


def _refuse_other_than_file(folder: int, name: str, shown: str) -> None:
    """What sits at `name` now must be nothing or a regular file: a planted link is
    refused, not replaced silently (rename would replace the link itself, never follow
    it, so a race after this check cannot reach the link's target either)."""
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise SecretError(f"{shown} is not stored: what is at its name is not a "
                          "regular file (a link or a folder); refused, nothing followed")


def remove_secret(settings_root: str, name: str) -> bool:
    """Remove the secret `name` and the rule kept with it; False when there was neither.
    Unlinking never follows a link: one planted at the name goes, its target stays. The
    rule goes first: should the second unlink fail, what is left is a secret with no rule,
    which the secret verb refuses to use."""
    _checked_name(name)
    folder = _secrets_folder(settings_root, make=False)
    if folder is None:
        return False
    removed = False
    try:
        for filename in (name + RULE_SUFFIX, name):
            try:
                os.unlink(filename, dir_fd=folder)
            except FileNotFoundError:
                continue
            except OSError as error:
                raise SecretError(f"the secret {name} cannot be removed: "
                                  f"{error.strerror}") from None
            removed = True
        os.fsync(folder)
    finally:
        os.close(folder)
    return removed


# -- tools: a tool's definition is kept here too (it can hold a token) ----------------------

TOOL_SUFFIX = ".tool"
# A tool's definition: its command, the tools allowed without asking, and the asking mode;
# a few kilobytes at most (a long command line with a header or two).
MAX_TOOL_FILE_BYTES = 64 * 1024


def read_tool_file(settings_root: str, name: str) -> bytes:
    """The bytes of the tool `name`'s definition, read as strictly as a secret."""
    _checked_name(name)
    value = _read_file(settings_root, name + TOOL_SUFFIX, f"the tool {name}",
                       MAX_TOOL_FILE_BYTES,
                       missing=f"no tool named {name} (add it with: lnk-sandbox tool add "
                               f"{name} -- COMMAND…)")
    if len(value) > MAX_TOOL_FILE_BYTES:
        raise SecretError(f"the tool {name}'s definition is over {MAX_TOOL_FILE_BYTES} bytes")
    return value


def write_tool_file(settings_root: str, name: str, definition: bytes) -> None:
    _checked_name(name)
    if len(definition) > MAX_TOOL_FILE_BYTES:
        raise SecretError(f"the tool {name}'s definition is over {MAX_TOOL_FILE_BYTES} bytes")
    _write_file(settings_root, name + TOOL_SUFFIX, definition, f"the tool {name}")


# A tool's own secrets (`tool add NAME --secret VAR`, and the literal header values it keeps
# out of mcp-remote's argv): one file beside the definition, `<name>.tool-secrets`, so the
# definition itself never holds a token. A handful of values, each at most a secret's size.
TOOL_SECRETS_SUFFIX = ".tool-secrets"
MAX_TOOL_SECRETS_FILE_BYTES = 16 * MAX_SECRET_BYTES


def read_tool_secrets_file(settings_root: str, name: str) -> bytes | None:
    """The bytes of the tool `name`'s secrets, read as strictly as a secret; None when it
    has none stored."""
    _checked_name(name)
    missing = f"no secrets stored for the tool {name}"
    try:
        value = _read_file(settings_root, name + TOOL_SECRETS_SUFFIX,
                           f"the secrets of the tool {name}", MAX_TOOL_SECRETS_FILE_BYTES,
                           missing=missing)
    except SecretError as error:
        if str(error) == missing:
            return None
        raise
    if len(value) > MAX_TOOL_SECRETS_FILE_BYTES:
        raise SecretError(f"the secrets of the tool {name} are over "
                          f"{MAX_TOOL_SECRETS_FILE_BYTES} bytes")
    return value


def write_tool_secrets_file(settings_root: str, name: str, secrets: bytes | None) -> None:
    """Keep `secrets` as the tool `name`'s (written as a secret is), or with None remove
    what was kept (a tool added again without secrets keeps none of its old ones)."""
    _checked_name(name)
    if secrets is None:
        _remove_files(settings_root, name, (name + TOOL_SECRETS_SUFFIX,))
        return
    if len(secrets) > MAX_TOOL_SECRETS_FILE_BYTES:
        raise SecretError(f"the secrets of the tool {name} are over "
                          f"{MAX_TOOL_SECRETS_FILE_BYTES} bytes")
    _write_file(settings_root, name + TOOL_SECRETS_SUFFIX, secrets,
                f"the secrets of the tool {name}")


# What every tool's definition names, for a sandbox's start to read with `os` alone
# (lnk_wrap.verb_env): `name TAB inode TAB mtime_ns TAB size TAB VAR,VAR…` a line, one a
# definition, as lnk_proxy.tools wrote it. Not a secret's name (it holds a '.'), nor a
# tool's (no `.tool` suffix).
TOOLS_INDEX = "tools.index"


def tool_file_identity(settings_root: str, name: str) -> tuple[int, int, int] | None:
    """(inode, mtime_ns, size) of the tool `name`'s definition, never through a link; None
    when it is not a regular file there."""
    _checked_name(name)
    folder = _secrets_folder(settings_root, make=False)
    if folder is None:
        return None
    try:
        info = os.stat(name + TOOL_SUFFIX, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    finally:
        os.close(folder)
    return (info.st_ino, info.st_mtime_ns, info.st_size) if stat.S_ISREG(info.st_mode) else None


def write_tools_index(settings_root: str, index: bytes | None) -> None:
    """Keep the tools' index (written as a secret is), or with None remove it (a start
    then reads every definition)."""
    if index is None:
        _remove_files(settings_root, "index", (TOOLS_INDEX,))
        return
    _write_file(settings_root, TOOLS_INDEX, index, "the tools' index")


def tool_names(settings_root: str) -> list[str]:
    """The names of the tools defined, sorted (regular files `<name>.tool`)."""
    return _names_with(settings_root, TOOL_SUFFIX, beside_a_secret=False)


def remove_tool_file(settings_root: str, name: str) -> bool:
    """Remove the tool `name`'s definition and its secrets; False when there was no
    definition. The definition goes first: a definition left without its secrets is
    refused at its start, never run with less than it names."""
    _checked_name(name)
    return _remove_files(settings_root, name, (name + TOOL_SUFFIX, name + TOOL_SECRETS_SUFFIX))


def _remove_files(settings_root: str, name: str, filenames: tuple[str, ...]) -> bool:
    """Unlink each of `filenames` in the secrets folder (never following a link); whether
    the first was there."""
    folder = _secrets_folder(settings_root, make=False)
    if folder is None:
        return False
    found = False
    try:
        for index, filename in enumerate(filenames):
            try:
                os.unlink(filename, dir_fd=folder)
            except FileNotFoundError:
                continue
            except OSError as error:
                raise SecretError(f"the tool {name} cannot be removed: "
                                  f"{error.strerror}") from None
            found = found or index == 0
        os.fsync(folder)
        return found
    finally:
        os.close(folder)
