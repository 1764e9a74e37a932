"""Guests over SSH: the sans-IO core (authorized_keys lines, guests.toml).

A guest is a person who reaches this machine over SSH with a key of their own and works
only inside a sandbox of their own, as the machine's owner (no account, no administrator).
`lnk-sandbox guest add NAME --spec FILE --key PUBKEY_FILE` keeps the spec, resolved, in
Link's settings (`guests.toml`) and writes one line into the owner's authorized_keys:

    restrict,pty,command="/abs/lnk-sandbox enter --settings=/abs/settings NAME" KEY NAME

sshd runs that command, whatever the client asked, with the client's request in
SSH_ORIGINAL_COMMAND (lnk_wrap.enter). `restrict` turns off every forwarding, the agent,
X11 and ~/.ssh/rc; `pty` gives a terminal back.

Everything here is pure: bytes and text in, bytes and text out, or one GuestError. The
file work (atomic rewrites, the lock, asking) is lnk_wrap.guests_view.

authorized_keys is read as sshd reads it (auth2-pubkeyfile.c, auth_check_authkey_line): a
line is split on "\\n" only; leading spaces and tabs are skipped; blank and `#` lines are
nothing; a line whose first word is a key type is a key; otherwise options come first and
end at the first space or tab outside double quotes (a `\\"` is an escaped quote; an
unterminated quote makes the line nothing), then the key. A key is its type and its
base64 blob (the blob ends at a space or tab; base64 skips whitespace, so a CRLF line is
the same key). Two lines let in the same key when their blobs decode to the same bytes:
the comment and the options do not matter (sshd takes the first line that matches,
options and all). A line with `cert-authority` lets in certificates signed by its key,
never the key itself. Where this reading could differ from sshd's (a key type this list
lacks, a blob sshd decodes differently), the key's base64 text appearing anywhere in a
line that is not a comment counts as letting it in: the doubt refuses, it never adds a
second line behind one that would win.
"""

from __future__ import annotations

import base64
import binascii
import os

from lnk_common.policy import MAX_NAME_CHARACTERS, Policy, is_name

__all__ = ["GUEST_NAME_CHARACTERS", "KEY_TYPES", "Guest", "GuestError", "Place", "Protected",
           "PublicKey",
           "add_line", "forced_command", "forced_line", "guest_document",
           "key_lines", "lets_in", "lies_in", "parse_guests", "parse_public_key", "remove_lines",
           "render_guests", "split_options", "wire_name", "written_outside_problem"]


class GuestError(Exception):
    """A guest cannot be added, read, entered or removed; one line, naming the file, the
    key or the line, and the reason."""


# A guest's wire is `guest-NAME`, and a wire's name is at most MAX_NAME_CHARACTERS.
WIRE_PREFIX = "guest-"
GUEST_NAME_CHARACTERS = MAX_NAME_CHARACTERS - len(WIRE_PREFIX)
# A public key file holds one line; an RSA key of 16384 bits is some 2.8 kB of base64.
MAX_KEY_FILE_BYTES = 16 * 1024
# An authorized_keys file of a person's keys is a few kB; one of this size is not a file
# a person edits, and reading it whole into memory must stay cheap.
MAX_AUTHORIZED_KEYS_BYTES = 4 * 1024 * 1024
# guests.toml: a few lines per guest; a hundred guests is far past any real machine.
MAX_GUESTS_BYTES = 1024 * 1024

# The key types sshd 9 reads (sshkey.c's keytypes). A certificate type is refused for a
# guest's key (a certificate is let in by a cert-authority line, not by its own).
KEY_TYPES = (
    "ssh-ed25519", "ssh-rsa", "ssh-dss", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521", "sk-ecdsa-sha2-nistp256@openssh.com",
    "sk-ssh-ed25519@openssh.com", "ssh-xmss@openssh.com",
)
CERT_TYPES = (
    *(f"{kind.removesuffix('@openssh.com')}-cert-v01@openssh.com" for kind in KEY_TYPES),
    "rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com")
# sshd also reads a key written with a signature algorithm's name as its type.
_READ_TYPES = frozenset((*KEY_TYPES, *CERT_TYPES, "rsa-sha2-256", "rsa-sha2-512"))

# What a path on the forced command may hold: sshd reads the command between double
# quotes, then runs it with the owner's shell (`$SHELL -c`), so a character either one
# treats specially (a quote, a backslash, a space, `$`, `;`, `*` …) is refused rather
# than quoted twice over: one rule, no quoting to get wrong.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._+-,:@%")


def is_guest_name(text: str) -> bool:
    return len(text) <= GUEST_NAME_CHARACTERS and is_name(text)


def wire_name(name: str) -> str:
    return WIRE_PREFIX + name


def name_problem(name: str) -> str | None:
    if not is_guest_name(name):
        return (f"a guest's name is 1 to {GUEST_NAME_CHARACTERS} letters, digits, '.', '_' "
                "or '-', starting with a letter, digit or '_'")
    return None


class PublicKey:
    """A public key: its type, its blob (decoded) and its comment (the guest's own text:
    shown only through lnk_ask.text.printable, never written to a file)."""

    __slots__ = ("blob", "comment", "kind")

    def __init__(self, kind: str, blob: bytes, comment: str = "") -> None:
        self.kind = kind
        self.blob = blob
        self.comment = comment

    def text(self) -> str:
        """`TYPE BASE64`, as it goes on a line (no comment)."""
        return f"{self.kind} {base64.b64encode(self.blob).decode('ascii')}"

    def fingerprint(self) -> str:
        """As `ssh-keygen -l` shows it: SHA256 and the unpadded base64 of the digest."""
        import hashlib  # 2.5 ms to import: not at every session's start

        digest = base64.b64encode(hashlib.sha256(self.blob).digest()).decode("ascii")
        return "SHA256:" + digest.rstrip("=")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and self.blob == other.blob

    def __hash__(self) -> int:
        return hash(self.blob)

    def __repr__(self) -> str:
        return f"PublicKey({self.kind!r}, {self.fingerprint()!r})"


def _blob_type(blob: bytes) -> str | None:
    """The type named inside a key's blob (its first SSH string), or None."""
    if len(blob) < 4:
        return None
    length = int.from_bytes(blob[:4], "big")
    if length > 64 or len(blob) < 4 + length:
        return None
    try:
        return blob[4:4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


def _decode_blob(text: str) -> bytes | None:
    """The blob's bytes, as sshd's base64 reads them (whitespace skipped), or None."""
    cleaned = "".join(text.split())
    if not cleaned:
        return None
    try:
        return base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        return None


def parse_public_key(data: bytes, file: str) -> PublicKey:
    """A public key file (`TYPE BASE64 [COMMENT]`, one line): the key, or GuestError
    naming `file` and why. Options, a private key, a certificate, two keys: refused."""
    if len(data) > MAX_KEY_FILE_BYTES:
        raise GuestError(f"{file}: larger than {MAX_KEY_FILE_BYTES} bytes; a public key is "
                         "one line")
    try:  # the type and the base64 are ASCII (checked below); a comment may be UTF-8
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise GuestError(f"{file}: not a public key (not UTF-8 text)") from None
    if "PRIVATE KEY" in text:
        raise GuestError(f"{file}: this is a private key; give the .pub file (the private "
                         "key stays with the guest)")
    lines = [line for line in text.replace("\r\n", "\n").split("\n")
             if line.strip() and not line.lstrip().startswith("#")]
    if len(lines) != 1:
        raise GuestError(f"{file}: holds {len(lines)} keys; a guest's key file holds exactly "
                         "one public key line")
    words = lines[0].split(None, 2)
    if len(words) < 2:
        raise GuestError(f"{file}: not a public key line (TYPE BASE64 [COMMENT])")
    kind, encoded = words[0], words[1]
    comment = words[2].strip() if len(words) > 2 else ""
    if kind in CERT_TYPES:
        raise GuestError(f"{file}: a certificate ({kind}); give the guest's plain public key")
    if kind not in KEY_TYPES:
        raise GuestError(f"{file}: {kind[:64]!r} is not a key type sshd takes "
                         "(options before the key are not taken either: lnk-sandbox writes "
                         "the line's options itself)")
    blob = _decode_blob(encoded)
    if blob is None:
        raise GuestError(f"{file}: the key's base64 does not decode")
    if _blob_type(blob) != kind:
        raise GuestError(f"{file}: the key's data is not a {kind} key")
    return PublicKey(kind, blob, comment)


# -- authorized_keys lines ------------------------------------------------------------

class KeyLine:
    """One line of authorized_keys as sshd reads it. key: the key it names (None for a
    blank line, a comment, or a line sshd skips); options: the options' text, split;
    number: the line's number (from 1)."""

    __slots__ = ("key", "number", "options", "raw")

    def __init__(self, raw: bytes, number: int, key: PublicKey | None,
                 options: tuple[str, ...]) -> None:
        self.raw = raw
        self.number = number
        self.key = key
        self.options = options

    def option(self, name: str) -> str | None:
        """The value of `name="…"` (unquoted, `\\"` undone), `""` for a flag, or None."""
        for option in self.options:
            head, equals, value = option.partition("=")
            if head.lower() != name:
                continue
            if not equals:
                return ""
            if len(value) >= 2 and value[0] == value[-1] == '"':
                return value[1:-1].replace('\\"', '"')
            return value
        return None


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t":
        index += 1
    return index


def split_options(text: str) -> tuple[tuple[str, ...], str] | None:
    """The options at the start of `text` (sshd's advance_past_options: they end at the
    first space or tab outside double quotes; `\\"` is a quote kept inside), split at
    the commas outside quotes, and the rest of the line; None for an unterminated
    quote (sshd skips such a line)."""
    quoted = False
    index = 0
    pieces: list[str] = []
    start = 0
    while index < len(text) and (quoted or text[index] not in " \t"):
        character = text[index]
        if character == "\\" and text[index + 1:index + 2] == '"':
            index += 2
            continue
        if character == '"':
            quoted = not quoted
        elif character == "," and not quoted:
            pieces.append(text[start:index])
            start = index + 1
        index += 1
    if quoted:
        return None
    pieces.append(text[start:index])
    return tuple(pieces), text[index:]


def _read_key(text: str, index: int) -> tuple[PublicKey | None, bool]:
    """The key at `index` (type, blob), and whether the first word was a key type."""
    end = index
    while end < len(text) and text[end] not in " \t":
        end += 1
    kind = text[index:end]
    if kind not in _READ_TYPES:
        return None, False
    start = _skip_space(text, end)
    stop = start
    while stop < len(text) and text[stop] not in " \t":
        stop += 1
    blob = _decode_blob(text[start:stop])
    if blob is None:
        return None, True
    return PublicKey(kind, blob, text[stop:].strip()), True


def parse_line(raw: bytes, number: int) -> KeyLine:
    """One line (its bytes without the "\\n") as sshd reads it."""
    text = raw.decode("latin-1")  # bytes kept one to one; sshd reads bytes
    index = _skip_space(text, 0)
    if index == len(text) or text[index] in "#\r\n":
        return KeyLine(raw, number, None, ())
    key, was_type = _read_key(text, index)
    if was_type:
        return KeyLine(raw, number, key, ())
    split = split_options(text[index:])
    if split is None:
        return KeyLine(raw, number, None, ())
    options, rest = split
    key, _ = _read_key(rest, _skip_space(rest, 0))
    return KeyLine(raw, number, key, options)


def key_lines(content: bytes) -> list[KeyLine]:
    """Every line of an authorized_keys file (a last line without "\\n" too)."""
    lines = content.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [parse_line(raw, number) for number, raw in enumerate(lines, start=1)]


def lets_in(content: bytes, key: PublicKey) -> int | None:
    """The number of the first line that lets `key` in (or might: see the module's
    docstring), or None."""
    encoded = base64.b64encode(key.blob).decode("ascii").rstrip("=")
    for line in key_lines(content):
        if line.key is not None and line.key == key and line.option("cert-authority") is None:
            return line.number
        text = line.raw.decode("latin-1")
        stripped = text.lstrip(" \t")
        if stripped and not stripped.startswith("#") and encoded in "".join(text.split()):
            return line.number
    return None


def add_line(content: bytes, line: str) -> bytes:
    """`content` with `line` added at the end. Every existing byte is kept; a last line
    without "\\n" gets one (else the two would run together)."""
    if "\n" in line or "\r" in line:
        raise GuestError("a line to add holds a line break")
    if content and not content.endswith(b"\n"):
        content += b"\n"
    return content + line.encode("ascii") + b"\n"


def remove_lines(content: bytes, key: PublicKey, command: str) -> tuple[bytes, int]:
    """`content` without the lines that let `key` in through exactly `command` (the
    guest's own lines); every other byte kept. Returns the new content and how many
    lines went."""
    kept: list[bytes] = []
    removed = 0
    pieces = content.split(b"\n")
    for number, body in enumerate(pieces, start=1):
        last = number == len(pieces)
        if last and body == b"":
            break
        line = parse_line(body, number)
        if line.key is not None and line.key == key and line.option("command") == command:
            removed += 1
            continue
        kept.append(body if last else body + b"\n")
    return b"".join(kept), removed


def _safe(text: str, what: str) -> str:
    if not text or any(character not in _SAFE for character in text):
        bad = sorted({character for character in text if character not in _SAFE})
        raise GuestError(
            f"{what} {text!r} holds {''.join(bad)!r}: the forced command sshd runs is read "
            "within double quotes and then by the owner's shell, so only letters, digits "
            "and / . _ + - , : @ % are written there; move it to such a path")
    return text


def forced_command(program: str, settings: str, name: str) -> str:
    """The command sshd runs for the guest: lnk-sandbox by its absolute path, Link's
    settings folder named (sshd's environment is not the person's)."""
    if not os.path.isabs(program) or not os.path.isabs(settings):
        raise GuestError("the forced command names lnk-sandbox and Link's settings by "
                         "absolute paths")
    if name_problem(name):
        raise GuestError(f"{name!r}: {name_problem(name)}")
    return (f"{_safe(program, 'lnk-sandbox at')} enter "
            f"--settings={_safe(settings, 'Link settings folder')} {name}")


def forced_line(command: str, key: PublicKey, name: str) -> str:
    """The authorized_keys line: restrict (no forwarding of any kind, no agent, no X11,
    no ~/.ssh/rc), a terminal given back, the forced command, the key, a comment that
    says whose it is."""
    if '"' in command or "\\" in command:
        raise GuestError("the forced command holds a quote or a backslash")
    return f'restrict,pty,command="{command}" {key.text()} lnk-guest-{name}'


# -- what a guest may never write ------------------------------------------------------
#
# A rule, not a list of names: what the owner's login, shell, editor, git or desktop reads
# code or settings from runs, as the owner and outside any sandbox, whatever a guest wrote
# there; one session's writes would run unsandboxed later (at the guest's next connection:
# sshd, `$SHELL -c`, lnk-sandbox; at the owner's next login, editor, commit, desktop).
# So a written folder (files.write, files.write_dot_files) may not be, hold, or lie inside:
# - the owner's home folder (be or hold only: a project folder in it is fine);
# - any dot entry directly in the home, whatever its name, existing or not (`.bashrc.d`,
#   `.config`, `.ssh`, `.local` …);
# - each Protected place the I/O shell found (lnk_wrap.guests_view.outside_places): ~/bin,
#   the folders the owner's environment names for programs to read (PATH, the XDG
#   folders …), what the owner's git settings name, where every link in those folders
#   leads, the system's folders, and the trees of code a session runs (lnk-sandbox, its
#   interpreter and packages, bubblewrap).
# Each is compared as named and as resolved, and as the file system has it: by the
# (device, inode) of each folder on the way, so a case-insensitive file system, a bind
# mount or a link cannot pass a name the text comparison misses.

# A Place's chain: (a component's name, its device, its inode), from the root down.
Link = tuple[str, int, int]


class Place:
    """A path as the check sees it: as named, as resolved, and the chain of (name, device,
    inode) of each folder from the root down along the resolved path, as far as it
    exists (`exists`: the whole path does)."""

    __slots__ = ("chain", "exists", "named", "resolved")

    def __init__(self, named: str, resolved: str, chain: tuple[Link, ...] = (),
                 exists: bool = False) -> None:
        self.named = named
        self.resolved = resolved
        self.chain = chain
        self.exists = exists

    def forms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.named, self.resolved)))

    def identity(self) -> tuple[int, int] | None:
        return self.chain[-1][1:] if self.exists and self.chain else None

    def identities(self) -> list[tuple[int, int]]:
        return [link[1:] for link in self.chain]

    def shown(self) -> str:
        return self.named if self.resolved == self.named else (
            f"{self.named} (resolved: {self.resolved})")


class Protected:
    """A place no written folder may be, hold or lie inside; `rule`: why, in words the
    refusal says ("a folder on your PATH")."""

    __slots__ = ("place", "rule")

    def __init__(self, place: Place, rule: str) -> None:
        self.place = place
        self.rule = rule


def lies_in(path: str, folder: str) -> bool:
    """`path` is `folder` or lies below it, by name."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


_inside = lies_in


def _is(written: Place, other: Place) -> bool:
    mine = written.identity()
    return (mine is not None and mine == other.identity()) or any(
        form == theirs for form in written.forms() for theirs in other.forms())


def _holds(written: Place, other: Place) -> bool:
    mine = written.identity()
    return (mine is not None and mine in other.identities()) or any(
        _inside(theirs, form) for form in written.forms() for theirs in other.forms())


def _lies_inside(written: Place, other: Place) -> bool:
    theirs = other.identity()
    return (theirs is not None and theirs in written.identities()) or any(
        _inside(form, folder) for form in written.forms() for folder in other.forms())


def _dot_folder(written: Place, home: Place) -> str | None:
    """The dot entry of `home` that `written` is or lies inside, or None."""
    for form in written.forms():
        for folder in home.forms():
            if form != folder and _inside(form, folder):
                first = form[len(folder.rstrip("/")) + 1:].split("/")[0]
                if first.startswith("."):
                    return f"{folder.rstrip('/')}/{first}"
    mine = home.identity()
    for index, link in enumerate(written.chain[:-1]):
        following = written.chain[index + 1][0]
        if mine is not None and link[1:] == mine and following.startswith("."):
            return f"{home.named.rstrip('/')}/{following}"
    return None


_RUNS = "what is written there runs as you, outside any sandbox"


def written_outside_problem(written: tuple[tuple[str, Place], ...], homes: tuple[Place, ...],
                            protected: tuple[Protected, ...]) -> str | None:
    """Why a guest writing `written` ((its key, the folder), in order) could change what
    runs as the owner outside any sandbox, in one line naming the key, the folder, the
    rule and the path; None when it cannot (see the rule above)."""
    for key, place in written:
        where = f"{key} {place.shown()}"
        for home in homes:
            if _is(place, home) or _holds(place, home):
                verb = "is" if _is(place, home) else "holds"
                return (f"{where} {verb} your home folder {home.shown()}: your login and "
                        f"shell read it, so {_RUNS}; grant a folder inside it instead "
                        "(~/projects/x), not a dot folder")
            dot = _dot_folder(place, home)
            if dot is not None:
                return (f"{where} {'is' if dot in place.forms() else 'lies inside'} {dot}, "
                        "a dot folder of your home (your shell, editor, git and desktop "
                        f"read code and settings from those): {_RUNS}; grant a folder "
                        "that is no dot folder and lies in none")
        # The closest match is the one named: what it is, then what it lies in, then
        # what it holds.
        for verb, relation in (("is", _is), ("lies inside", _lies_inside),
                               ("holds", _holds)):
            for entry in protected:
                if relation(place, entry.place):
                    return (f"{where} {verb} {entry.place.shown()}, {entry.rule}: {_RUNS}; "
                            "grant a folder that is none of these, holds none and lies in "
                            "none")
    return None


# -- guests.toml ----------------------------------------------------------------------

class Guest:
    """One kept guest: name, key, the authorized_keys line written, the spec file it came
    from (for messages), and the spec as kept (a spec document, every path absolute)."""

    __slots__ = ("key", "line", "name", "spec", "spec_file")

    def __init__(self, name: str, key: PublicKey, line: str, spec_file: str,
                 spec: dict[str, object]) -> None:
        self.name = name
        self.key = key
        self.line = line
        self.spec_file = spec_file
        self.spec = spec


def guest_document(policy: Policy) -> dict[str, object]:
    """The spec a guest is kept with: the resolved policy written back as a spec (every
    path absolute and canonical), so a session reads it with the spec loader again."""
    document: dict[str, dict[str, object]] = {}

    def put(section: str, key: str, value: object) -> None:
        if value:  # an empty list, 0 and false are the spec's defaults: left out
            document.setdefault(section, {})[key] = value

    for key, paths in (("read", policy.read), ("write", policy.write), ("hide", policy.hide),
                       ("reopen", policy.reopen), ("write_dot_files", policy.write_dot_files)):
        put("files", key, list(paths))
    put("commands", "run", list(policy.commands))
    if policy.network != "none":
        put("network", "mode", policy.network)
    put("network", "hosts", list(policy.hosts))
    put("network", "calls_per_minute", policy.calls_per_minute)
    put("network", "server_tools", policy.server_tools)
    put("tcp", "endpoints", list(policy.endpoints))
    put("lan", "hosts", list(policy.lan))
    put("localhost", "ports", list(policy.localhost_ports))
    put("localhost", "models", list(policy.local_models))
    put("verbs", "model", list(policy.models))
    put("verbs", "tools", list(policy.tools))
    put("verbs", "secrets", list(policy.secrets))
    if policy.has_wire():
        refusals, targets, window = policy.pause
        document["pause"] = {"refusals": refusals, "targets": targets, "window": f"{window}s"}
    return dict(document)


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's for every character (and every
    control character is escaped)."""
    import json

    return json.dumps(text, ensure_ascii=True)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise GuestError(f"cannot keep a {type(value).__name__} in guests.toml")


def render_guests(guests: list[Guest]) -> str:
    """guests.toml's text: one table a guest, its spec in sub-tables."""
    out = ["# Guests over SSH, kept by `lnk-sandbox guest add` (edit with guest add and",
           "# guest remove: each guest's line in ~/.ssh/authorized_keys goes with it).", ""]
    for guest in sorted(guests, key=lambda found: found.name):
        head = f"guests.{_toml_string(guest.name)}"
        out.append(f"[{head}]")
        out.append(f"key = {_toml_string(guest.key.text())}")
        out.append(f"line = {_toml_string(guest.line)}")
        out.append(f"spec_file = {_toml_string(guest.spec_file)}")
        out.append("")
        out.append(f"[{head}.spec]")
        for section, table in guest.spec.items():
            assert isinstance(table, dict)
            out.append(f"[{head}.spec.{section}]")
            for key, value in table.items():
                out.append(f"{key} = {_toml_value(value)}")
        out.append("")
    return "\n".join(out)


def parse_guests(data: bytes, file: str) -> dict[str, Guest]:
    """guests.toml read back: each guest by name, or GuestError naming the file and key."""
    from lnk_wrap.vendor import tomllib as toml

    if len(data) > MAX_GUESTS_BYTES:
        raise GuestError(f"{file}: larger than {MAX_GUESTS_BYTES} bytes")
    try:
        document = toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, toml.TOMLDecodeError) as error:
        raise GuestError(f"{file}: not valid TOML: {error}") from None
    unknown = set(document) - {"guests"}
    if unknown:
        raise GuestError(f"{file}: {sorted(unknown)[0]}: unknown key (known: [guests])")
    table = document.get("guests", {})
    if not isinstance(table, dict):
        raise GuestError(f"{file}: guests: must be a table")
    found: dict[str, Guest] = {}
    for name, entry in table.items():
        where = f"guests.{name}"
        problem = name_problem(name)
        if problem:
            raise GuestError(f"{file}: {where}: {problem}")
        if not isinstance(entry, dict):
            raise GuestError(f"{file}: {where}: must be a table")
        extra = set(entry) - {"key", "line", "spec_file", "spec"}
        if extra:
            raise GuestError(f"{file}: {where}.{sorted(extra)[0]}: unknown key")
        for key in ("key", "line", "spec_file"):
            if not isinstance(entry.get(key), str):
                raise GuestError(f"{file}: {where}.{key}: missing, or not a string")
        spec = entry.get("spec", {})
        if not isinstance(spec, dict):
            raise GuestError(f"{file}: {where}.spec: must be a table")
        try:
            public = parse_public_key(str(entry["key"]).encode("ascii", "replace"), file)
        except GuestError as error:
            raise GuestError(f"{file}: {where}.key: {str(error).partition(': ')[2]}") from None
        found[name] = Guest(name, public, str(entry["line"]), str(entry["spec_file"]), spec)
    return found
