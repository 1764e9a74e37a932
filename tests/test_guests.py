"""Guests' sans-IO core (lnk_wrap.guests) and the verbs' refusals, without sshd.

authorized_keys lines are checked against a table of odd lines, and against the real
`ssh-keygen -l`, which reads a line's options as sshd does; Hypothesis adds and removes a
guest's line among generated odd lines and holds every other byte identical.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common.policy import Policy
from lnk_wrap import guests as core
from lnk_wrap.enter import session_command
from lnk_wrap.guests import GuestError
from lnk_wrap.spec import load_spec, parse_document
from tests.conftest import LNK_SANDBOX, fuzz, toml_list

ED = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFxiD6pgn5k8cxMeIO/Do3AqkEeo3UnpIVxEFqOOF5T9 one")
ED_FINGERPRINT = "SHA256:hV3UW38adwd5ULZrqLfGDRknYwuymyZcwWzKlUwGUE8"
RSA = ("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQDGctjwgJZheu31CykLFdvUO3UYJlY/maxXErJnQJEdeU8Acm"
       "UO7eWKKBCs+D3BTKJBZDDLj3kP5QuoTYf8jXcUsq2V106dJokBH1hx4BxOm36WUxIg6J7kBaiSd0YTgIlqzC4"
       "CTYT9klVmvcblKbqTvDIg7Eos0sDSk5td9dXPsQ== two")
KEY = core.parse_public_key(ED.encode(), "k.pub")
OTHER = core.parse_public_key(RSA.encode(), "r.pub")
BLOB = ED.split()[1]


# -- a guest's key file ------------------------------------------------------------------

def test_a_public_key_is_read_with_its_fingerprint() -> None:
    assert KEY.kind == "ssh-ed25519" and KEY.comment == "one"
    assert KEY.fingerprint() == ED_FINGERPRINT
    assert KEY.text() == " ".join(ED.split()[:2])
    assert core.parse_public_key(b"\n# a note\n" + ED.encode() + b"\r\n", "k") == KEY
    assert OTHER.kind == "ssh-rsa" and OTHER != KEY


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "holds 0 keys"),
    (ED.encode() + b"\n" + RSA.encode() + b"\n", "holds 2 keys"),
    (b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n",
     "this is a private key"),
    (b'restrict,command="x" ' + ED.encode(), "is not a key type sshd takes"),
    (b"ssh-ed25519-cert-v01@openssh.com AAAA c", "a certificate"),
    (b"ssh-ed25519 !!!notbase64", "does not decode"),
    (b"ssh-rsa " + BLOB.encode(), "is not a ssh-rsa key"),
    (b"ssh-ed25519", "not a public key line"),
    (b"ssh-ed25519 AAAA caf\xe9", "not UTF-8"),
    ("ssh-ed25519 AAAA\u00e9 c".encode(), "does not decode"),
    (b"x" * (core.MAX_KEY_FILE_BYTES + 1), "larger than"),
])
def test_a_key_file_that_is_not_one_public_key_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(GuestError, match=r"^k\.pub: ") as refused:
        core.parse_public_key(data, "k.pub")
    assert reason in str(refused.value)


# -- authorized_keys lines, as sshd reads them -------------------------------------------

# (the line, whether it names KEY (sshd's reading), the options seen)
LINES: list[tuple[bytes, bool, tuple[str, ...]]] = [
    (ED.encode(), True, ()),
    (b"ssh-ed25519 " + BLOB.encode(), True, ()),
    (ED.encode() + b"\r", True, ()),
    (b" \t" + ED.encode(), True, ()),
    (b'command="echo a,b c",no-pty ' + ED.encode(), True, ('command="echo a,b c"', "no-pty")),
    (b'from="1.2.3.4",command="say \\"hi there\\", ok" ' + ED.encode(), True,
     ('from="1.2.3.4"', 'command="say \\"hi there\\", ok"')),
    (b"no-pty\t" + ED.encode(), True, ("no-pty",)),
    (b"restrict,pty " + ED.encode() + b" with a long comment, and commas", True,
     ("restrict", "pty")),
    (b'environment="A=b c",permitopen="h:1" ' + ED.encode(), True,
     ('environment="A=b c"', 'permitopen="h:1"')),
    (b"# " + ED.encode(), False, ()),
    (b"", False, ()),
    (b"   ", False, ()),
    (b"\r", False, ()),
    (RSA.encode(), False, ()),
    (b'command="unterminated ' + ED.encode(), False, ()),
    (b"not-a-key-type AAAA", False, ()),
    (b"ssh-ed25519 AAAA%%%", False, ()),
]


@pytest.mark.parametrize(("raw", "names_key", "options"), LINES)
def test_a_line_is_read_as_sshd_reads_it(raw: bytes, names_key: bool,
                                         options: tuple[str, ...]) -> None:
    line = core.parse_line(raw, 1)
    assert (line.key == KEY) is names_key
    if names_key:
        assert line.options == options


@pytest.mark.parametrize(("raw", "names_key", "options"), LINES)
def test_the_reading_agrees_with_ssh_keygen(tmp_path: Path, raw: bytes, names_key: bool,
                                            options: tuple[str, ...]) -> None:
    """ssh-keygen -l reads an authorized_keys line's options as sshd does (advance past
    the options, quotes and `\\"` kept): it finds KEY's fingerprint exactly where we do."""
    file = tmp_path / "authorized_keys"
    file.write_bytes(raw + b"\n")
    listed = subprocess.run(["ssh-keygen", "-l", "-f", str(file)], capture_output=True,
                            text=True, check=False, timeout=30)
    assert (ED_FINGERPRINT in listed.stdout) is names_key, listed


def test_options_with_quoted_commas_and_escapes() -> None:
    line = core.parse_line(b'command="a \\"b,c\\" d",no-agent-forwarding ' + ED.encode(), 4)
    assert line.number == 4 and line.key == KEY
    assert line.option("command") == 'a "b,c" d'
    assert line.option("no-agent-forwarding") == ""
    assert line.option("from") is None
    assert core.split_options('a="x y",b rest') == (('a="x y"', "b"), " rest")
    assert core.split_options('a="open') is None


def test_lets_in_finds_the_first_line_whatever_its_options_and_comment() -> None:
    content = (b"# mine\n\n" + RSA.encode() + b"\r\n"
               + b'from="10.0.0.0/8" ssh-ed25519 ' + BLOB.encode() + b" laptop\r\n"
               + ED.encode() + b"\n")
    assert core.lets_in(content, KEY) == 4
    assert core.lets_in(content, OTHER) == 3
    assert core.lets_in(b"# " + ED.encode() + b"\n", KEY) is None
    assert core.lets_in(b"", KEY) is None


@pytest.mark.parametrize("raw", [
    b"cert-authority " + ED.encode(),
    b'command="unterminated ' + ED.encode(),
    b"ssh-rsa " + BLOB.encode(),
    b"rsa-sha2-512 " + BLOB.encode(),
    b"some-future-type " + BLOB.encode(),
])
def test_lets_in_refuses_in_doubt(raw: bytes) -> None:
    """A line that might let the key in, where this reading and sshd's could differ,
    counts as letting it in: the doubt refuses, never adds a line behind it."""
    assert core.lets_in(b"# x\n" + raw + b"\n", KEY) == 2


def test_add_keeps_every_byte_and_ends_an_unended_last_line() -> None:
    assert core.add_line(b"", "L") == b"L\n"
    assert core.add_line(b"a\r\n", "L") == b"a\r\nL\n"
    assert core.add_line(b"a\r\nb", "L") == b"a\r\nb\nL\n"
    with pytest.raises(GuestError):
        core.add_line(b"", "a\nb")


COMMAND = "/opt/lnk/bin/lnk-sandbox enter --settings=/home/o/.config/lnk ann"
OURS = core.forced_line(COMMAND, KEY, "ann")


def test_the_forced_line() -> None:
    expected = f'restrict,pty,command="{COMMAND}" {KEY.text()} lnk-guest-ann'
    assert expected == OURS
    line = core.parse_line(OURS.encode(), 1)
    assert line.key == KEY and line.option("command") == COMMAND
    assert line.options == ("restrict", "pty", f'command="{COMMAND}"')


def test_remove_takes_only_the_guests_own_lines() -> None:
    content = (b"#c\r\n" + ED.encode() + b"\n" + OURS.encode() + b"\n" + RSA.encode()
               + b"\n" + OURS.replace("ann", "bob").encode() + b"\n")
    changed, removed = core.remove_lines(content, KEY, COMMAND)
    assert removed == 1
    assert changed == (b"#c\r\n" + ED.encode() + b"\n" + RSA.encode() + b"\n"
                       + OURS.replace("ann", "bob").encode() + b"\n")
    assert core.remove_lines(changed, KEY, COMMAND) == (changed, 0)


@pytest.mark.parametrize("path", [
    "/home/o p/lnk", '/home/"o"', "/home/o\\p", "/home/$USER", "/home/o;rm", "/home/`x`",
    "/home/o\np", "/home/o*", "/home/\u00e9",
])
def test_a_path_that_cannot_stand_unquoted_is_refused(path: str) -> None:
    with pytest.raises(GuestError, match="only letters, digits"):
        core.forced_command("/usr/bin/lnk-sandbox", path, "ann")
    with pytest.raises(GuestError, match="only letters, digits"):
        core.forced_command(path + "/lnk-sandbox", "/s", "ann")


def test_forced_command_names_both_paths_absolutely() -> None:
    assert core.forced_command("/v/bin/lnk-sandbox", "/h/.config/lnk", "a.b-c_1") == \
        "/v/bin/lnk-sandbox enter --settings=/h/.config/lnk a.b-c_1"
    for bad in (("bin/lnk-sandbox", "/s", "a"), ("/b/lnk-sandbox", "s", "a"),
                ("/b/lnk-sandbox", "/s", "-a"), ("/b/lnk-sandbox", "/s", "a b"),
                ("/b/lnk-sandbox", "/s", "x" * 59)):
        with pytest.raises(GuestError):
            core.forced_command(*bad)


# -- Hypothesis: odd files, our line in and out ------------------------------------------

_TOKENS = st.sampled_from([
    "ssh-ed25519", "ssh-rsa", BLOB, RSA.split()[1], "AAAA", "#", " ", "\t", ",", '"',
    '\\"', "command=", "restrict", "no-pty", "from=", "=", "x", "\r", "cert-authority",
    "lnk-guest-ann", "\u00e9", "\x00", "\x0b",
])
_LINE = st.lists(_TOKENS, max_size=12).map("".join)
_CONTENT = st.lists(_LINE, max_size=8).flatmap(
    lambda lines: st.sampled_from(["", "\n", "\r\n"]).map(
        lambda end: "\n".join(lines) + (end if lines else "")))


@fuzz(4)
@given(_CONTENT)
def test_our_line_goes_in_and_out_and_every_other_byte_stays(text: str) -> None:
    content = text.encode("utf-8")
    added = core.add_line(content, OURS)
    ended = content if not content or content.endswith(b"\n") else content + b"\n"
    assert added == ended + OURS.encode() + b"\n"
    changed, removed = core.remove_lines(added, KEY, COMMAND)
    assert removed == 1 and changed == ended
    # a key in no line: nothing at all changes
    assert core.remove_lines(content, OTHER, COMMAND) == (content, 0) or OTHER.text().split()[
        1] in text


@fuzz(4)
@given(st.binary(max_size=300))
def test_any_bytes_are_read_without_error(content: bytes) -> None:
    for line in core.key_lines(content):
        assert line.key is None or isinstance(line.key.blob, bytes)
    found = core.lets_in(content, KEY)
    if BLOB.rstrip("=").encode() not in b"".join(content.split()):
        assert found is None


@fuzz(3)
@given(st.lists(_LINE, max_size=6), st.sampled_from([ED, "ssh-ed25519 " + BLOB,
                                                     'no-pty,command="a b" ' + ED]))
def test_a_line_naming_the_key_is_always_found_at_or_before_it(before: list[str],
                                                               line: str) -> None:
    content = "".join(item + "\n" for item in before).encode() + line.encode() + b"\n"
    found = core.lets_in(content, KEY)
    assert found is not None and found <= len(before) + 1


# -- guests.toml and the kept spec --------------------------------------------------------

def _rich_spec(tmp_path: Path) -> Path:
    for folder in ("r", "w", "w/dots", "r/h", "r/h/back", "bin"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    spec = tmp_path / "spec.toml"
    spec.write_text(
        f'name = "ignored"\n[files]\nread = {toml_list(tmp_path / "r")}\n'
        f'write = {toml_list(tmp_path / "w", tmp_path / "w/dots")}\n'
        f'hide = {toml_list(tmp_path / "r/h", tmp_path / "missing")}\n'
        f'reopen = {toml_list(tmp_path / "r/h/back")}\n'
        f'write_dot_files = {toml_list(tmp_path / "w/dots")}\n'
        f'[commands]\nrun = ["/usr/bin", {toml_list(tmp_path / "bin")[1:-1]}]\n'
        '[network]\nmode = "proxy"\nhosts = ["example.com", "*.example.org:8443"]\n'
        'calls_per_minute = 30\n[tcp]\nendpoints = ["db.example.com:5432"]\n'
        '[lan]\nhosts = ["10.1.2.3:22"]\n[localhost]\nports = [5432]\nmodels = [11434]\n'
        '[verbs]\nmodel = ["anthropic"]\nsecrets = ["gh"]\ntools = ["github"]\n'
        '[pause]\nrefusals = 5\ntargets = 4\nwindow = "2m"\n')
    return spec


def test_the_kept_spec_reads_back_to_the_same_policy(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "LNK_HOME": str(tmp_path / "lnk")}
    policy = load_spec(_rich_spec(tmp_path), env)
    document = core.guest_document(policy)
    guest = core.Guest("ann", KEY, OURS, str(tmp_path / "spec.toml"), document)
    text = core.render_guests([guest])
    kept = core.parse_guests(text.encode(), "/s/guests.toml")
    assert list(kept) == ["ann"]
    again = parse_document(kept["ann"].spec, file="/s/guests.toml", env=env)
    assert again.replace(spec="", name="") == policy.replace(spec="", name="")
    assert kept["ann"].key == KEY and kept["ann"].line == OURS


def test_guests_toml_quotes_names_and_refuses_what_it_does_not_know() -> None:
    guest = core.Guest("a.b", KEY, OURS, "/x.toml", {})
    kept = core.parse_guests(core.render_guests([guest]).encode(), "/g")
    assert list(kept) == ["a.b"]
    for text, reason in (
        ('[other]\n', "other: unknown key"),
        ('[guests."-x"]\nkey="k"\nline="l"\nspec_file="s"\n', "guests.-x: a guest's name"),
        (f'[guests.a]\nkey="{KEY.text()}"\nline="l"\n', "guests.a.spec_file: missing"),
        (f'[guests.a]\nkey="{KEY.text()}"\nline="l"\nspec_file="s"\nextra=1\n',
         "guests.a.extra: unknown key"),
        ('[guests.a]\nkey="ssh-ed25519 AAAA"\nline="l"\nspec_file="s"\n', "guests.a.key:"),
        ("[guests\n", "not valid TOML"),
    ):
        with pytest.raises(GuestError, match=r"^/g: ") as refused:
            core.parse_guests(text.encode(), "/g")
        assert reason in str(refused.value)


@pytest.mark.parametrize(("original", "expected"), [
    (None, ["/bin/bash", "-l"]),
    ("ls -la", ["/bin/bash", "-c", "ls -la"]),
    ("scp -t /w/x", ["/bin/bash", "-c", "scp -t /w/x"]),
    ("internal-sftp", ["/sftp-server"]),
    ("internal-sftp -l INFO", ["/sftp-server", "-l", "INFO"]),
    ("/usr/lib/openssh/sftp-server", ["/sftp-server"]),
    ("", ["/bin/bash", "-c", ""]),
])
def test_what_a_session_runs(original: str | None, expected: list[str]) -> None:
    assert session_command(original, "/bin/bash", "/sftp-server") == expected


def test_sftp_without_a_server_is_said() -> None:
    with pytest.raises(GuestError, match="no sftp-server on this machine"):
        session_command("internal-sftp", "/bin/sh", None)
    with pytest.raises(GuestError, match="longer than"):
        session_command("x" * (300 * 1024), "/bin/sh", None)


# -- the verbs' refusals (no sshd needed) ---------------------------------------------------

def _guest_add(tmp_path: Path, *words: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, "guest", "add", *words], capture_output=True,
                          text=True, timeout=60, check=False, start_new_session=True,
                          stdin=subprocess.DEVNULL,
                          env=env or {**os.environ, "HOME": str(tmp_path / "home"),
                                      "LNK_HOME": str(tmp_path / "lnk")})


@pytest.fixture
def owner(tmp_path: Path) -> Path:
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "lnk").mkdir()
    (tmp_path / "w").mkdir()
    (tmp_path / "spec.toml").write_text(f"[files]\nwrite = {toml_list(tmp_path / 'w')}\n")
    (tmp_path / "k.pub").write_text(ED + "\n")
    return tmp_path


def _nothing_kept(tmp_path: Path) -> None:
    assert not (tmp_path / "lnk" / "guests.toml").exists()
    assert not (tmp_path / "lnk" / "guests").exists()


@pytest.mark.parametrize(("spec", "reason"), [
    ("[files]\nread = [\"/no/such/folder\"]\n",
     "spec.toml: files.read[0]: '/no/such/folder' does not exist; nothing was kept"),
    ("[files]\nreed = []\n", "spec.toml: files.reed: unknown key"),
    ("[agent]\nname = \"a\"\nhome = \"HERE/w\"\n", "spec.toml: agent: a guest's spec has no "
                                                  "[agent]"),
    ("[verbs]\nopen = true\n", "spec.toml: verbs.open: a guest's pages would open in your "
                               "browser, logged in as you"),
])
def test_a_bad_spec_is_refused_naming_file_and_key(owner: Path, spec: str, reason: str
                                                   ) -> None:
    (owner / "spec.toml").write_text(spec.replace("HERE", str(owner)))
    refused = _guest_add(owner, "ann", "--spec", str(owner / "spec.toml"), "--key",
                         str(owner / "k.pub"))
    assert refused.returncode == 125, refused
    assert reason in refused.stderr
    _nothing_kept(owner)
    assert not (owner / "home" / ".ssh" / "authorized_keys").exists()


def test_a_refusal_naming_the_guests_words_is_plain_ascii(owner: Path) -> None:
    """A spec from the guest naming a folder with an escape, a bidi override and a Cyrillic
    letter: `guest add`'s refusal names it escaped, in one printable line."""
    odd = owner / "gone\x1b]52;c;eA==\x07\u202e\u0430"
    (owner / "spec.toml").write_text(f"[files]\nwrite = {toml_list(odd)}\n")
    refused = subprocess.run([LNK_SANDBOX, "guest", "add", "ann", "--spec",
                              str(owner / "spec.toml"), "--key", str(owner / "k.pub")],
                             capture_output=True, timeout=60, check=False,
                             start_new_session=True, stdin=subprocess.DEVNULL,
                             env={**os.environ, "HOME": str(owner / "home"),
                                  "LNK_HOME": str(owner / "lnk")})
    assert refused.returncode == 125, refused
    assert all(byte == 0x0A or 0x20 <= byte < 0x7F for byte in refused.stderr), refused.stderr
    assert b"\\u202e\\u0430' does not exist" in refused.stderr, refused.stderr
    assert refused.stderr.count(b"\n") == 1
    _nothing_kept(owner)


def test_a_private_key_a_bad_name_and_a_missing_key_are_refused(owner: Path) -> None:
    (owner / "k").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n")
    for words, reason in (
        (("ann", "--key", str(owner / "k")), "this is a private key"),
        (("ann", "--key", str(owner / "nope.pub")), "nope.pub: no such file"),
        (("-bad", "--key", str(owner / "k.pub")), ""),
        (("a/b", "--key", str(owner / "k.pub")), "a guest's name is"),
    ):
        refused = _guest_add(owner, *words, "--spec", str(owner / "spec.toml"))
        assert refused.returncode != 0, refused
        assert reason in refused.stderr
    _nothing_kept(owner)


def test_an_authorized_keys_that_is_a_link_is_refused(owner: Path) -> None:
    (owner / "elsewhere").write_text("")
    (owner / "home" / ".ssh" / "authorized_keys").symlink_to(owner / "elsewhere")
    refused = _guest_add(owner, "ann", "--spec", str(owner / "spec.toml"), "--key",
                         str(owner / "k.pub"))
    assert refused.returncode == 125
    assert "authorized_keys is a link; refusing" in refused.stderr, refused
    assert (owner / "elsewhere").read_text() == ""
    _nothing_kept(owner)


def test_a_settings_folder_that_cannot_stand_unquoted_is_refused(owner: Path) -> None:
    (owner / "l nk").mkdir()
    refused = _guest_add(owner, "ann", "--spec", str(owner / "spec.toml"), "--key",
                         str(owner / "k.pub"),
                         env={**os.environ, "HOME": str(owner / "home"),
                              "LNK_HOME": str(owner / "l nk")})
    assert refused.returncode == 125
    assert "holds ' '" in refused.stderr and "only letters, digits" in refused.stderr
    assert not (owner / "l nk" / "guests.toml").exists()


def test_enter_refuses_a_guest_it_does_not_keep(owner: Path) -> None:
    refused = subprocess.run([LNK_SANDBOX, "enter", "--settings", str(owner / "lnk"), "zed"],
                             capture_output=True, text=True, timeout=60, check=False,
                             env={**os.environ, "SSH_ORIGINAL_COMMAND": "true"})
    assert refused.returncode == 125
    assert refused.stderr == (f"lnk-sandbox: no guest named zed in {owner}/lnk/guests.toml; "
                              "refusing the session\n")


def test_the_wire_and_the_own_folder_of_a_session(owner: Path) -> None:
    from lnk_wrap.enter import session_policy
    from lnk_wrap.guests_view import guest_home, guests_path

    settings = str(owner / "lnk")
    env = {"HOME": str(owner / "home"), "LNK_HOME": settings}
    policy = load_spec(owner / "spec.toml", env)
    os.makedirs(guest_home(settings, "ann"), mode=0o700)
    guest = core.Guest("ann", KEY, OURS, str(owner / "spec.toml"), core.guest_document(policy))
    Path(guests_path(settings)).write_text(core.render_guests([guest]))
    session = session_policy(settings, "ann", env)
    assert session.name == "guest-ann" and session.keep_session
    assert session.write == (str(owner / "w"), f"{settings}/guests/ann")
    assert session.write_dot_files == (f"{settings}/guests/ann",)
    assert f"{settings}/guests" in session.hide
    assert "--keep-session" in session.to_argv()


def test_base64_of_the_blob_is_what_the_line_carries() -> None:
    assert base64.b64decode(BLOB) == KEY.blob


@pytest.mark.parametrize("written", ["home", "home/.ssh", ".", "venv", "packages"])
def test_a_spec_that_writes_what_runs_outside_is_refused(owner: Path, written: str) -> None:
    """The owner's home folder, ~/.ssh, a folder holding them, lnk-sandbox's own folder:
    a guest writing any would run its writes outside at the next session (sshd, the
    owner's shell, lnk-sandbox itself); refused by the real `guest add`, naming the rule."""
    from lnk_common.chain import package_root

    target = {"venv": Path(LNK_SANDBOX).parent, "packages": Path(package_root()) / "lnk_wrap"
              }.get(written, owner / written)
    (owner / "spec.toml").write_text(f"[files]\nwrite = {toml_list(target)}\n")
    refused = _guest_add(owner, "ann", "--spec", str(owner / "spec.toml"), "--key",
                         str(owner / "k.pub"))
    assert refused.returncode == 125, refused
    rule = {"home": "is your home folder", "home/.ssh": "is " + str(owner / "home" / ".ssh")
            + ", a dot folder of your home", ".": "holds your home folder",
            "venv": "code a guest's session runs as you",
            "packages": "code a guest's session runs as you"}[written]
    assert refused.stderr.startswith(f"lnk-sandbox: {owner}/spec.toml: files.write {target} ")
    assert rule in refused.stderr, refused
    assert "what is written there runs as you, outside any sandbox" in refused.stderr
    assert refused.stderr.count("\n") == 1
    _nothing_kept(owner)


# -- what a guest may never write: the rule, on a real owner's folders --------------------

@pytest.fixture
def machine(tmp_path: Path) -> dict[str, str]:
    """An owner's home, with what a person's home holds, and an environment whose XDG
    folders, PATH and git settings point elsewhere too; the env `guest add` would see."""
    home = tmp_path / "home"
    for folder in (".bashrc.d", ".config/fish/conf.d", ".ssh/config.d", ".local/bin",
                   ".local/share/applications", "bin", ".config/systemd/user", ".config/git",
                   ".config/autostart", ".vim/plugin", ".emacs.d", ".mozilla", ".cargo/bin",
                   "node_modules", "binaries", "projects/x/.git", "projects/linked",
                   ".new-tool"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    for folder in ("xdg-config/autostart", "xdg-data/systemd/user", "xdg-dirs/autostart",
                   "tools/bin", "hooks", "gitinc", "editor", "proj", "dotfiles/vim",
                   "xdg-config-notes", "outside", "runtime", "lnk"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "gitinc" / "extra").write_text(f"[core]\n\teditor = {tmp_path}/editor/vi -f\n")
    (home / ".gitconfig").write_text(f"[core]\n\thooksPath = {tmp_path}/hooks\n"
                                     f"[include]\n\tpath = {tmp_path}/gitinc/extra\n")
    (tmp_path / "proj" / "tool").write_text("#!/bin/sh\n")
    (home / "bin" / "tool").symlink_to(tmp_path / "proj" / "tool")
    (tmp_path / "dotfiles" / "bashrc").write_text("")
    (home / ".bashrc").symlink_to(tmp_path / "dotfiles" / "bashrc")
    (home / ".vimrc").symlink_to(tmp_path / "dotfiles" / "vim")
    (tmp_path / "to-config").symlink_to(home / ".config")
    (tmp_path / "to-bin").symlink_to(home / "bin")
    (home / "projects" / "linked" / "cfg").symlink_to(home / ".config" / "git")
    return {"HOME": str(home), "LNK_HOME": str(tmp_path / "lnk"),
            "PATH": f"{tmp_path}/tools/bin:{home}/.local/bin:/usr/local/bin:/usr/bin:/bin",
            "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
            "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
            "XDG_CONFIG_DIRS": f"{tmp_path}/xdg-dirs:/etc/xdg",
            "XDG_RUNTIME_DIR": str(tmp_path / "runtime"), "BASE": str(tmp_path)}


DOT = "a dot folder of your home"
HOME_CODE = "a folder of your home whose code runs as you"
# (the folder written, <H>/ and <B>/ for the machine's, what the refusal says, the rule)
REFUSED = [
    ("<H>/.bashrc.d", "is <H>/.bashrc.d", DOT),
    ("<H>/.config/fish/conf.d", "lies inside <H>/.config", DOT),
    ("<H>/.ssh/config.d", "lies inside <H>/.ssh", DOT),
    ("<H>/.local", "is <H>/.local", DOT),
    ("<H>/.local/bin", "lies inside <H>/.local", DOT),
    ("<H>/.local/share/applications", "lies inside <H>/.local", DOT),
    ("<H>/.config/systemd/user", "lies inside <H>/.config", DOT),
    ("<H>/.config/git", "lies inside <H>/.config", DOT),
    ("<H>/.config/autostart", "lies inside <H>/.config", DOT),
    ("<H>/.vim/plugin", "lies inside <H>/.vim", DOT),
    ("<H>/.emacs.d", "is <H>/.emacs.d", DOT),
    ("<H>/.mozilla", "is <H>/.mozilla", DOT),
    ("<H>/.cargo/bin", "lies inside <H>/.cargo", DOT),
    ("<H>/.new-tool", "is <H>/.new-tool", DOT),
    ("<H>", "is your home folder <H>", "your login and shell read it"),
    ("<B>", "holds your home folder <H>", "your login and shell read it"),
    ("<H>/bin", "is <H>/bin", HOME_CODE),
    ("<H>/node_modules", "is <H>/node_modules", HOME_CODE),
    ("<B>/xdg-config", "is <B>/xdg-config", "named by your environment ($XDG_CONFIG_HOME)"),
    ("<B>/xdg-config/autostart", "lies inside <B>/xdg-config",
     "named by your environment ($XDG_CONFIG_HOME)"),
    ("<B>/xdg-data/systemd/user", "lies inside <B>/xdg-data",
     "named by your environment ($XDG_DATA_HOME)"),
    ("<B>/xdg-dirs/autostart", "lies inside <B>/xdg-dirs",
     "named by your environment ($XDG_CONFIG_DIRS)"),
    ("<B>/runtime", "is <B>/runtime", "named by your environment ($XDG_RUNTIME_DIR)"),
    ("<B>/tools", "holds <B>/tools/bin", "a folder on your PATH"),
    ("<B>/tools/bin", "is <B>/tools/bin", "a folder on your PATH"),
    ("<B>/hooks", "is <B>/hooks", "named by your git settings (core.hookspath in "
     "<H>/.gitconfig)"),
    ("<B>/gitinc", "holds <B>/gitinc/extra", "a settings file your git reads"),
    ("<B>/editor", "holds <B>/editor/vi", "named by your git settings (core.editor in "
     "<B>/gitinc/extra)"),
    ("<B>/proj", "holds <H>/bin/tool (resolved: <B>/proj/tool)", "a link in <H>/bin"),
    ("<B>/dotfiles", "holds <H>/.bashrc (resolved: <B>/dotfiles/bashrc)",
     "a dot entry of your home"),
    ("<B>/dotfiles/vim", "is <H>/.vimrc (resolved: <B>/dotfiles/vim)",
     "a dot entry of your home"),
    # A link to a dot folder or to ~/bin is what it resolves to (the spec loader resolves).
    ("<B>/to-config", "is <H>/.config", DOT),
    ("<B>/to-bin", "is <H>/bin", HOME_CODE),
    ("<H>/projects/linked/cfg", "lies inside <H>/.config", DOT),
    ("/etc", "is /etc", "a folder of the system every login reads"),
    ("/var/spool", "is /var/spool", "a folder of the system every login reads"),
    ("/var", "holds /var/spool", "a folder of the system every login reads"),
]
ALLOWED = ["<H>/projects/x", "<H>/projects/x/.git", "<H>/binaries", "<B>/outside",
           "<B>/xdg-config-notes", "<H>/projects/linked"]


def _fill(text: str, machine: dict[str, str]) -> str:
    return text.replace("<H>", machine["HOME"]).replace("<B>", machine["BASE"])


def _refusal(machine: dict[str, str], written: str) -> str | None:
    from lnk_wrap.guests_view import refuse_written_outside

    env = {key: value for key, value in machine.items() if key != "BASE"}
    spec = Path(machine["BASE"]) / "spec.toml"
    spec.write_text(f"[files]\nwrite = {toml_list(_fill(written, machine))}\n")
    policy = load_spec(spec, env)
    try:
        refuse_written_outside(policy, env, LNK_SANDBOX, f"{spec}: ")
    except GuestError as error:
        return str(error)
    return None


@pytest.mark.parametrize(("written", "said", "rule"), REFUSED)
def test_every_folder_the_owners_programs_read_is_refused_naming_its_rule(
        machine: dict[str, str], written: str, said: str, rule: str) -> None:
    refusal = _refusal(machine, written)
    assert refusal is not None, written
    spec = Path(machine["BASE"]) / "spec.toml"
    real = os.path.realpath(_fill(written, machine))
    assert refusal.startswith(f"{spec}: files.write {real} {_fill(said, machine)}"), refusal
    assert _fill(rule, machine) in refusal, refusal
    assert "\n" not in refusal


@pytest.mark.parametrize("written", ALLOWED)
def test_a_project_folder_is_fine(machine: dict[str, str], written: str) -> None:
    assert _refusal(machine, written) is None


def test_guest_add_refuses_bashrc_d_and_keeps_nothing(machine: dict[str, str]) -> None:
    """The attack of the issue, through the real verb: a spec writing ~/.bashrc.d (a file
    dropped there runs at the owner's next login) is refused before anything is asked."""
    base = Path(machine["BASE"])
    bashrc_d = machine["HOME"] + "/.bashrc.d"
    (base / "spec.toml").write_text(f"[files]\nwrite = {toml_list(bashrc_d)}\n")
    (base / "k.pub").write_text(ED + "\n")
    env = {**os.environ, **{key: value for key, value in machine.items() if key != "BASE"}}
    env["PATH"] = env["PATH"] + ":" + os.environ["PATH"]
    refused = _guest_add(base, "ann", "--spec", str(base / "spec.toml"), "--key",
                         str(base / "k.pub"), env=env)
    assert refused.returncode == 125, refused
    assert (f"files.write {machine['HOME']}/.bashrc.d is {machine['HOME']}/.bashrc.d, a dot "
            "folder of your home") in refused.stderr, refused
    assert not (base / "lnk" / "guests.toml").exists()
    assert not (Path(machine["HOME"]) / ".ssh" / "authorized_keys").exists()


def test_git_settings_that_cannot_be_read_refuse_and_a_fifo_is_not_waited_on(
        machine: dict[str, str]) -> None:
    """A settings file git would refuse names what cannot be checked: refused. One that is
    a FIFO (or a device, GIT_CONFIG_GLOBAL=/dev/null) holds no settings: not waited on."""
    import threading

    base = Path(machine["BASE"])
    os.mkfifo(base / "fifo")
    results: list[str | None] = []
    checking = threading.Thread(target=lambda: results.append(
        _refusal({**machine, "GIT_CONFIG_GLOBAL": str(base / "fifo")}, "<B>/outside")))
    checking.start()
    checking.join(30)
    assert not checking.is_alive() and results == [None]
    assert _refusal({**machine, "GIT_CONFIG_GLOBAL": "/dev/null"}, "<B>/outside") is None
    (base / "bad.gitconfig").write_text("[core\n")
    refusal = _refusal({**machine, "GIT_CONFIG_GLOBAL": str(base / "bad.gitconfig")},
                       "<B>/outside")
    assert refusal is not None and refusal.startswith(f"{base}/bad.gitconfig: your git "
                                                      "settings cannot be read as git reads")


BIND_CHECK = """
import os, sys
from lnk_wrap.spec import load_spec
from lnk_wrap.guests import GuestError
from lnk_wrap.guests_view import refuse_written_outside
home, bound, spec, program = sys.argv[1:5]
env = {"HOME": home, "LNK_HOME": os.path.join(os.path.dirname(home), "lnk"),
       "PATH": "/usr/bin:/bin"}
try:
    refuse_written_outside(load_spec(spec, env), env, program, "")
except GuestError as error:
    print(error)
"""


def test_a_bind_mount_of_a_dot_folder_is_that_dot_folder(machine: dict[str, str]) -> None:
    """By name, /BASE/bound is no dot folder; bind-mounted over ~/.config (in a mount
    namespace of this test's own), the file system says it is ~/.config: refused."""
    import sys

    base = Path(machine["BASE"])
    (base / "bound").mkdir()
    (base / "spec.toml").write_text(f"[files]\nwrite = {toml_list(base / 'bound')}\n")
    # The bind mount as root of a user namespace; the check in a namespace inside it, as
    # this test's own user again (whose home is listable, as an owner's is).
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
         'mount --bind "$1/.config" "$2" && shift 2 && exec "$@"', "sh", machine["HOME"],
         str(base / "bound"), "unshare", "--user", f"--map-user={os.getuid()}",
         f"--map-group={os.getgid()}", sys.executable, "-c", BIND_CHECK, machine["HOME"],
         str(base / "bound"), str(base / "spec.toml"), LNK_SANDBOX],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done
    assert done.stdout.startswith(f"files.write {base}/bound is {machine['HOME']}/.config, a "
                                  "dot entry of your home"), done


def _place(path: str, identities: dict[str, int], *, exists: bool = True) -> core.Place:
    """A Place on a made-up file system: `identities` gives each folder's inode by its
    name as the file system has it (a case-insensitive one gives one inode to two names)."""
    chain: list[tuple[str, int, int]] = [("/", 1, 2)]
    prefix = ""
    for name in path.strip("/").split("/"):
        prefix += "/" + name
        if prefix not in identities:
            return core.Place(path, path, tuple(chain), False)
        chain.append((name, 1, identities[prefix]))
    return core.Place(path, path, tuple(chain), exists)


def test_the_rule_compares_as_the_file_system_has_it() -> None:
    """Names the text comparison misses: ~/BIN on a case-insensitive file system is ~/bin;
    a bind mount of ~/.config elsewhere is ~/.config; ~/.CONFIG is a dot folder still."""
    inodes = {"/h": 10, "/h/o": 11, "/h/o/bin": 12, "/h/o/BIN": 12, "/h/o/BIN/x": 13,
              "/h/o/.config": 14, "/srv": 20, "/srv/cfg": 14, "/srv/cfg/git": 15,
              "/h/o/.CONFIG": 14, "/h/o/work": 16, "/srv/w": 21}
    home = _place("/h/o", inodes)
    protected = (core.Protected(_place("/h/o/bin", inodes), "~/bin"),
                 core.Protected(_place("/h/o/.config", inodes), "a dot entry of your home"))
    for written, said in (("/h/o/BIN", "is /h/o/bin, ~/bin"),
                          ("/h/o/BIN/x", "lies inside /h/o/bin, ~/bin"),
                          ("/srv/cfg", "is /h/o/.config, a dot entry"),
                          ("/srv/cfg/git", "lies inside /h/o/.config, a dot entry"),
                          ("/h/o/.CONFIG", "is /h/o/.CONFIG, a dot folder of your home"),
                          ("/h", "holds your home folder /h/o")):
        problem = core.written_outside_problem((("files.write", _place(written, inodes)),),
                                               (home,), protected)
        assert problem is not None and problem.startswith(f"files.write {written} {said}"), \
            (written, problem)
    for fine in ("/h/o/work", "/srv/w"):
        assert core.written_outside_problem((("files.write", _place(fine, inodes)),),
                                            (home,), protected) is None, fine


GOLDEN = Path(__file__).parent / "golden"


def test_guests_toml_and_the_line_golden() -> None:
    """guests.toml's whole text, and the authorized_keys line, for a fixed guest whose
    spec uses every kind of key (tests/golden/guests.toml)."""
    policy = Policy(settings="/s", read=("/srv/data",), write=("/srv/work", "/srv/dots"),
                    hide=("/srv/data/secret",), reopen=("/srv/data/secret/ok",),
                    write_dot_files=("/srv/dots",), commands=("/usr/bin",),
                    network="proxy", hosts=("example.com", "*.example.org:8443"),
                    endpoints=("db.example.com:5432",), lan=("10.1.2.3:22",),
                    localhost_ports=(5432,), local_models=(11434,), models=("anthropic",),
                    secrets=("gh",), tools=("github",), calls_per_minute=30,
                    pause=(5, 4, 120))
    guest = core.Guest("ann", KEY, OURS, "/home/o/guest.toml", core.guest_document(policy))
    text = core.render_guests([guest, core.Guest("b.c", OTHER, "x", "/b.toml", {})])
    assert text == (GOLDEN / "guests.toml").read_text()
    kept_line = text.split("line = ")[1].split("\n")[0]
    assert kept_line.strip('"').replace('\\"', '"') == OURS


@given(st.text())
def test_what_is_shown_is_printable_ascii_and_json_reads_back(text: str) -> None:
    """`shown` (a line on the terminal) and `json_shown` (guest list --json) hold only
    printable ASCII (and JSON's own newline at the end) whatever the guest's text; the
    JSON reads back to the very text."""
    import json

    from lnk_wrap.guests_view import json_shown, shown

    assert all(" " <= character <= "~" for character in shown(text))
    data = json_shown({"spec_file": text})
    assert all(byte == 0x0A or 0x20 <= byte < 0x7F for byte in data)
    assert json.loads(data) == {"spec_file": text}
