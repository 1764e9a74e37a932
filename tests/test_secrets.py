"""The store of secrets (issue 13): `lnk-sandbox secret set/list/remove` and
`lnk_common.secrets.read_secret`, attacked as a person's mistakes and a program's plants
would: the real installed CLI, real files, real links, real processes racing, and a real
sandbox that reads the home folder holding Link's settings.

A secret's value is a marker that must never show up anywhere but in its file: not in a
verb's stdout or stderr, not in argv, not inside a sandbox (F6, V2).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from lnk_common.secrets import (
    MAX_NAME_LENGTH,
    MAX_SECRET_BYTES,
    SecretError,
    name_problem,
    read_rule,
    read_secret,
    rule_names,
    value_problem,
)
from lnk_common.settings import settings_folder
from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, RunSandbox, WriteSpec
from tests.test_files_attacks import Q, files_spec

EXIT_USAGE = 2
EXIT_REFUSED = 125
VALUE = b"sk-ant-api03-MARKER-7f3e9c1d2b4a-do-not-leak"
NAME_REFUSAL = (f"lnk-sandbox: a secret's name is 1 to {MAX_NAME_LENGTH} ASCII letters, "
                "digits, '-' or '_', starting with a letter or digit (the name given is not "
                "repeated here, in case it was the value); nothing was done\n")


def secret(env: dict[str, str], *words: str, stdin: bytes = b"",
           umask: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """`lnk-sandbox secret WORDS…` as a person runs it, the value (if any) on stdin."""
    def set_umask() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run([LNK_SANDBOX, "secret", *words], env=env, input=stdin,
                          capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False,
                          preexec_fn=set_umask)


def store(lnk_home: Path) -> Path:
    return lnk_home / "sandbox" / "secrets"


def no_value_in(result: subprocess.CompletedProcess[bytes], value: bytes = VALUE) -> None:
    assert value not in result.stdout and value not in result.stderr, result


# -- the verbs, round trip --------------------------------------------------------------------


def test_secret_set_list_remove_round_trip(sandbox_env: dict[str, str], lnk_home: Path) -> None:
    done = secret(sandbox_env, "set", "anthropic", stdin=VALUE + b"\n")
    assert (done.returncode, done.stdout, done.stderr) == (
        0, b"the secret anthropic is stored\n", b"")
    # One trailing newline is taken off, and only one.
    assert (store(lnk_home) / "anthropic").read_bytes() == VALUE
    assert read_secret(str(lnk_home), "anthropic") == VALUE
    done = secret(sandbox_env, "set", "two-lines", stdin=b"a\nb\n\n")
    assert done.returncode == 0, done
    assert read_secret(str(lnk_home), "two-lines") == b"a\nb\n"

    listed = secret(sandbox_env, "list")
    assert (listed.returncode, listed.stdout) == (0, b"anthropic\ntwo-lines\n")
    listed_json = secret(sandbox_env, "list", "--json")
    assert listed_json.stdout == b'{"secrets":["anthropic","two-lines"],"rules":[]}\n'

    # A rotated key is read at once: read_secret holds no copy.
    rotated = VALUE + b"-rotated"
    assert secret(sandbox_env, "set", "anthropic", stdin=rotated).returncode == 0
    assert read_secret(str(lnk_home), "anthropic") == rotated

    removed = secret(sandbox_env, "remove", "anthropic")
    assert (removed.returncode, removed.stdout) == (0, b"the secret anthropic is removed\n")
    again = secret(sandbox_env, "remove", "anthropic")
    assert (again.returncode, again.stderr) == (1, b"lnk-sandbox: no secret named anthropic\n")
    assert secret(sandbox_env, "list").stdout == b"two-lines\n"
    with pytest.raises(SecretError, match="no secret named anthropic"):
        read_secret(str(lnk_home), "anthropic")
    for result in (done, listed, listed_json, removed, again):
        no_value_in(result)
        no_value_in(result, rotated)


def test_secret_store_is_found_by_settings_folder_from_home(tmp_path: Path) -> None:
    """With no LNK_HOME, the store is under ${XDG_CONFIG_HOME:-~/.config}/lnk, the folder
    lnk_common.settings names (the one every sandbox hides)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("LNK_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    assert secret(env, "set", "openai", stdin=VALUE).returncode == 0
    root = settings_folder(env).root
    assert root == str(home / ".config" / "lnk")
    assert read_secret(root, "openai") == VALUE


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_secret_file_0600_in_folder_0700_whatever_the_umask(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path, umask: int,
) -> None:
    fresh = tmp_path / "fresh-settings"  # made by the verb itself, under this umask
    env = {**sandbox_env, "LNK_HOME": str(fresh)}
    assert secret(env, "set", "gemini", stdin=VALUE, umask=umask).returncode == 0
    for folder in (fresh, fresh / "sandbox", store(fresh)):
        assert stat.S_IMODE(folder.lstat().st_mode) == 0o700, folder
    info = (store(fresh) / "gemini").lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    # Only the secret: no temp file left behind.
    assert sorted(os.listdir(store(fresh))) == ["gemini"]


def test_secret_store_folder_opened_to_others_is_refused(
    sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    assert secret(sandbox_env, "set", "x", stdin=VALUE).returncode == 0
    store(lnk_home).chmod(0o755)
    done = secret(sandbox_env, "set", "x", stdin=VALUE + b"2")
    assert done.returncode == EXIT_REFUSED
    assert done.stderr == (f"lnk-sandbox: {store(lnk_home)} must be yours and 0700 (it is 0755, "
                           f"owner {os.geteuid()}); refused\n").encode()
    with pytest.raises(SecretError, match="must be yours and 0700"):
        read_secret(str(lnk_home), "x")


# -- the value: only from stdin, never echoed --------------------------------------------------


@pytest.mark.parametrize("words", [
    ["set", "anthropic", VALUE.decode()],
    ["set", "anthropic", f"--value={VALUE.decode()}"],
    ["set", VALUE.decode(), "anthropic"],
    ["set", "anthropic", "--", VALUE.decode()],
])
def test_secret_value_given_as_argument_is_refused_and_not_echoed(
    sandbox_env: dict[str, str], lnk_home: Path, words: list[str],
) -> None:
    done = secret(sandbox_env, *words)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.startswith(
        b"lnk-sandbox: secret set reads the value from standard input, never from an "
        b"argument (an argument is seen by every user of this machine in /proc")
    assert done.stderr.splitlines()[1] == b"usage: lnk-sandbox secret set NAME [--rule=FILE]"
    no_value_in(done)
    assert not store(lnk_home).exists()


def test_secret_key_pasted_as_the_name_is_refused_and_not_echoed(
    sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    """`secret set AIza…` (a Gemini key is 39 characters of the name's own alphabet):
    too long to be a name, and the refusal does not repeat it."""
    key = "AIzaSyD-MARKER0123456789abcdefghijklmno"
    assert len(key) == 39
    done = secret(sandbox_env, "set", key, stdin=VALUE)
    assert (done.returncode, done.stderr) == (EXIT_USAGE, NAME_REFUSAL.encode())
    assert key.encode() not in done.stdout + done.stderr
    assert not store(lnk_home).exists()


@pytest.mark.parametrize(("value", "reason"), [
    (b"", "the value is empty"),
    (b"\n", "the value is empty"),
    (VALUE + b"\0tail", "the value holds a NUL byte"),
    (VALUE * (MAX_SECRET_BYTES // len(VALUE) + 1),
     f"the value is longer than {MAX_SECRET_BYTES} bytes"),
])
def test_secret_bad_value_is_refused_with_its_reason(
    sandbox_env: dict[str, str], lnk_home: Path, value: bytes, reason: str,
) -> None:
    done = secret(sandbox_env, "set", "bad", stdin=value)
    assert (done.returncode, done.stdout) == (EXIT_REFUSED, b"")
    assert done.stderr == f"lnk-sandbox: the secret bad is not stored: {reason}\n".encode()
    assert not (store(lnk_home) / "bad").exists()
    assert value_problem(value.removesuffix(b"\n")) == reason


def test_secret_value_at_the_limit_is_stored(sandbox_env: dict[str, str], lnk_home: Path) -> None:
    at_limit = b"k" * MAX_SECRET_BYTES
    assert secret(sandbox_env, "set", "big", stdin=at_limit + b"\n").returncode == 0
    assert read_secret(str(lnk_home), "big") == at_limit
    over = secret(sandbox_env, "set", "big", stdin=at_limit + b"k")
    assert over.returncode == EXIT_REFUSED
    assert read_secret(str(lnk_home), "big") == at_limit  # the old value kept whole


# -- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [
    "a/b", "..", ".", "../x", "/etc/passwd", ".hidden", "_lead", "sécret", "名前", "a b",
    "a:b", "a.b", "a" * (MAX_NAME_LENGTH + 1), "a\\b", "%2e%2e",
])
def test_secret_bad_name_is_refused_by_every_verb(
    sandbox_env: dict[str, str], lnk_home: Path, name: str,
) -> None:
    for words in (["set", name], ["remove", name]):
        done = secret(sandbox_env, *words, stdin=VALUE)
        assert (done.returncode, done.stdout, done.stderr) == (
            EXIT_USAGE, b"", NAME_REFUSAL.encode()), (words, done)
    with pytest.raises(SecretError, match="a secret's name is"):
        read_secret(str(lnk_home), name)
    assert not store(lnk_home).exists()


def test_secret_name_grammar_sans_io() -> None:
    for good in ("a", "anthropic", "open-router_2", "A" * MAX_NAME_LENGTH, "0x"):
        assert name_problem(good) is None, good
    # NUL cannot reach argv (the kernel ends a word there), so it is checked here.
    for bad in ("", "a\0b", "\0", "a\n", "a\u0131", "\uff41", "-x", "a" * (MAX_NAME_LENGTH + 1)):
        assert name_problem(bad) is not None, bad
        assert bad not in (name_problem(bad) or "") or bad == ""


def test_secret_name_that_looks_like_an_option_is_refused(sandbox_env: dict[str, str]) -> None:
    done = secret(sandbox_env, "set", "--", "-x", stdin=VALUE)
    assert done.returncode == EXIT_USAGE
    no_value_in(done)


# -- links planted in the store ------------------------------------------------------------------


def test_secret_link_at_the_secrets_path_is_refused_not_followed(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path,
) -> None:
    assert secret(sandbox_env, "set", "first", stdin=b"one").returncode == 0
    target = tmp_path / "target"
    target.write_bytes(b"untouched")
    target.chmod(0o600)
    (store(lnk_home) / "planted").symlink_to(target)

    done = secret(sandbox_env, "set", "planted", stdin=VALUE)
    assert done.returncode == EXIT_REFUSED
    assert done.stderr == (b"lnk-sandbox: the secret planted is not stored: what is at its "
                           b"name is not a regular file (a link or a folder); refused, nothing "
                           b"followed\n")
    assert target.read_bytes() == b"untouched"
    assert (store(lnk_home) / "planted").is_symlink()
    assert sorted(os.listdir(store(lnk_home))) == ["first", "planted"]  # no temp file left
    with pytest.raises(SecretError, match="the secret planted cannot be opened"):
        read_secret(str(lnk_home), "planted")
    # list names secrets, not links.
    assert secret(sandbox_env, "list").stdout == b"first\n"
    # remove takes the link away, never its target.
    assert secret(sandbox_env, "remove", "planted").returncode == 0
    assert target.read_bytes() == b"untouched"


@pytest.mark.parametrize("at", [("sandbox", "secrets"), ("sandbox",)])
def test_secret_link_at_a_store_folder_is_refused_not_followed(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path, at: tuple[str, ...],
) -> None:
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "secrets").mkdir(parents=True, mode=0o700)
    elsewhere.chmod(0o700)
    link = lnk_home.joinpath(*at)
    link.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    link.symlink_to(elsewhere if at == ("sandbox",) else elsewhere / "secrets")
    (elsewhere / "secrets" / "old").write_bytes(b"old")
    (elsewhere / "secrets" / "old").chmod(0o600)

    done = secret(sandbox_env, "set", "new", stdin=VALUE)
    assert done.returncode == EXIT_REFUSED
    assert done.stderr.startswith(
        f"lnk-sandbox: {link} is not a folder (a link or a file is there); refused, nothing "
        "followed: ".encode())
    assert sorted(os.listdir(elsewhere / "secrets")) == ["old"]
    for words in (["list"], ["remove", "old"]):
        refused = secret(sandbox_env, *words)
        assert refused.returncode == EXIT_REFUSED, words
        assert b"is not a folder (a link or a file is there)" in refused.stderr
    assert (elsewhere / "secrets" / "old").read_bytes() == b"old"
    with pytest.raises(SecretError, match="is not a folder"):
        read_secret(str(lnk_home), "old")


def test_read_secret_refuses_what_is_not_a_0600_regular_file(lnk_home: Path) -> None:
    folder = store(lnk_home)
    folder.mkdir(parents=True, mode=0o700)
    loose = folder / "loose"
    loose.write_bytes(VALUE)
    loose.chmod(0o644)
    with pytest.raises(SecretError) as refused:
        read_secret(str(lnk_home), "loose")
    assert str(refused.value) == (f"the secret loose must be yours and 0600 (it is 0644, owner "
                                  f"{os.geteuid()}); refused")
    os.mkfifo(folder / "fifo", 0o600)  # must not hang the reader
    with pytest.raises(SecretError, match="the secret fifo is not a regular file"):
        read_secret(str(lnk_home), "fifo")
    (folder / "dir").mkdir(mode=0o700)
    with pytest.raises(SecretError, match="the secret dir is not a regular file"):
        read_secret(str(lnk_home), "dir")
    assert VALUE.decode() not in str(refused.value)


# -- races ---------------------------------------------------------------------------------------


def test_secret_concurrent_sets_leave_one_whole_value(
    sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    """Writers racing on one name, and a reader and a watcher meanwhile: every value the
    reader sees is one writer's whole value, and every file the watcher sees is 0600."""
    values = [bytes([ord("a") + index]) * (MAX_SECRET_BYTES - index) for index in range(6)]
    assert secret(sandbox_env, "set", "race", stdin=values[0]).returncode == 0
    seen: set[bytes] = set()
    modes: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                seen.add(read_secret(str(lnk_home), "race"))
            except SecretError as error:
                seen.add(str(error).encode())
            for entry in os.listdir(store(lnk_home)):
                with contextlib.suppress(FileNotFoundError):
                    modes.add(stat.S_IMODE((store(lnk_home) / entry).lstat().st_mode))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        writers = [subprocess.Popen([LNK_SANDBOX, "secret", "set", "race"], env=sandbox_env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE) for _ in values]
        # Every value handed over before any is waited for (each fits in a pipe's
        # buffer), so the writers run their writes and renames at once.
        for writer, value in zip(writers, values, strict=True):
            assert writer.stdin is not None
            writer.stdin.write(value)
            writer.stdin.close()
        for writer in writers:
            writer.wait(timeout=SANDBOX_TIMEOUT_SECONDS)
            assert writer.stdout is not None and writer.stderr is not None
            out, err = writer.stdout.read(), writer.stderr.read()
            writer.stdout.close()
            writer.stderr.close()
            assert (writer.returncode, out, err) == (0, b"the secret race is stored\n", b"")
    finally:
        done.set()
        watcher.join()
    assert read_secret(str(lnk_home), "race") in values
    assert seen <= set(values), {item[:40] for item in seen - set(values)}
    assert modes == {0o600}
    assert sorted(os.listdir(store(lnk_home))) == ["race"]


# -- the sandbox cannot reach the store (F6, V2) -------------------------------------------------


def test_F6_V2_sandbox_reading_home_cannot_read_the_secrets(
    tmp_path: Path, write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """A spec that reads (and one that writes) the home folder holding Link's settings:
    inside, the store is not there to read, list, find or replace, and the value appears
    nowhere in what the program sees."""
    home = tmp_path / "home"
    home.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ("LNK_HOME", "XDG_CONFIG_HOME")}
    env["HOME"] = str(home)
    assert secret(env, "set", "anthropic", stdin=VALUE).returncode == 0
    secret_file = home / ".config" / "lnk" / "sandbox" / "secrets" / "anthropic"
    assert secret_file.read_bytes() == VALUE
    script = " ; ".join([
        f"cat {Q(str(secret_file))} && echo READ-FILE",
        f"ls -a {Q(str(secret_file.parent))} && echo LISTED",
        f"grep -r -l -a {Q(VALUE.decode())} {Q(str(home))} 2>/dev/null && echo FOUND",
        f"ln -s /tmp {Q(str(secret_file.parent / 'x'))} 2>/dev/null && echo PLANTED",
        f"cat /proc/self/environ | tr '\\0' '\\n' | grep -a {Q(VALUE.decode())} && echo ENV",
        "echo END",
    ])
    for spec_text in (files_spec(read=(home,)), files_spec(write=(home,))):
        spec = write_spec(spec_text)
        result = run_sandbox(spec, "/bin/sh", "-c", script, env=env, cwd=home)
        assert result.returncode == 0, result
        assert result.stdout.splitlines() == ["END"], result
        # Not unreadable but absent: the whole settings folder is hidden.
        assert result.stderr.splitlines() == [
            f"cat: {secret_file}: No such file or directory",
            f"ls: cannot access '{secret_file.parent}': No such file or directory",
        ], result
        for marker in ("READ-FILE", "LISTED", "FOUND", "PLANTED", "ENV"):
            assert marker not in result.stdout, (marker, result)
        assert VALUE.decode() not in result.stdout + result.stderr
    assert secret_file.read_bytes() == VALUE
    assert sorted(os.listdir(secret_file.parent)) == ["anthropic"]


# -- a secret kept with its rule (issue 14: the secret verb) ---------------------------------------

TELEGRAM_RULE = (Path(__file__).parent.parent / "examples" / "telegram-rule.json").read_bytes()
BOT_TOKEN = b"123456:AAH-MARKER-bot-token-do-not-leak"


def rule_file(tmp_path: Path, content: bytes, name: str = "rule.json") -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_secret_set_with_rule_keeps_both_and_remove_takes_both(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path,
) -> None:
    from lnk_proxy.secret_rules import parse_rule

    path = rule_file(tmp_path, TELEGRAM_RULE)
    done = secret(sandbox_env, "set", "telegram", "--rule", str(path), stdin=BOT_TOKEN + b"\n")
    assert (done.returncode, done.stdout, done.stderr) == (
        0, b"the secret telegram is stored with its rule\n", b"")
    no_value_in(done, BOT_TOKEN)
    folder = store(lnk_home)
    for name in ("telegram", "telegram.rule"):
        info = (folder / name).stat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert read_secret(str(lnk_home), "telegram") == BOT_TOKEN
    assert read_rule(str(lnk_home), "telegram") == TELEGRAM_RULE
    assert parse_rule(read_rule(str(lnk_home), "telegram")).host == "api.telegram.org"
    # The --rule=FILE spelling, and a second secret with no rule.
    assert secret(sandbox_env, "set", "other", f"--rule={path}",
                  stdin=BOT_TOKEN).returncode == 0
    assert secret(sandbox_env, "set", "plain", stdin=VALUE).returncode == 0

    listed = secret(sandbox_env, "list", "--json")
    assert listed.stdout == (b'{"secrets":["other","plain","telegram"],'
                             b'"rules":["other","telegram"]}\n')
    no_value_in(listed, BOT_TOKEN)
    assert secret(sandbox_env, "list").stdout == b"other\nplain\ntelegram\n"
    assert rule_names(str(lnk_home)) == ["other", "telegram"]

    removed = secret(sandbox_env, "remove", "telegram")
    assert (removed.returncode, removed.stdout) == (0, b"the secret telegram is removed\n")
    assert sorted(os.listdir(folder)) == ["other", "other.rule", "plain"]
    with pytest.raises(SecretError) as missing:
        read_rule(str(lnk_home), "telegram")
    assert str(missing.value) == ("no rule is kept with the secret telegram (set it with: "
                                  "lnk-sandbox secret set telegram --rule FILE)")
    with pytest.raises(SecretError, match="no rule is kept with the secret plain"):
        read_rule(str(lnk_home), "plain")


WEAK_RULES: list[tuple[bytes, str]] = [
    (b'{"host": "api.telegram.org/{path}", "paths": ["/x{secret}"]}',
     "host: no placeholder ({secret}, {name}, {path}) may stand in the host; the rule fixes "
     "the one host"),
    (b'{"host": "api.telegram.org", "paths": ["/x?token={secret}"]}',
     "paths[0]: a shape is a path only: no query, so no secret in a query (a query is logged "
     "and cached where a path segment is not)"),
    (b'{"host": "api.telegram.org", "paths": ["/bot/{name}"]}',
     "paths[0]: {secret} stands nowhere (put it in the path shape or give a header)"),
    (b'{"host": "api.telegram.org", "paths": ["/bot{secret}/{path}"]}',
     "paths[0]: a literal segment must come before {path} (else {path} reaches every method)"),
    (b'{"host": "api.telegram.org", "paths": ["/bot{secret}/{name}"], "allow": ["*"]}',
     "unknown key in a rule (known: header, host, methods, not_urls, paths, placeholder, "
     "refuse); a key not known is refused, never ignored"),
    (b"host = 'api.telegram.org'", "a rule is one JSON object (this is not valid JSON)"),
]


@pytest.mark.parametrize(("content", "reason"), WEAK_RULES)
def test_secret_set_with_a_weak_rule_is_refused_naming_file_and_field_and_stores_nothing(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path, content: bytes, reason: str,
) -> None:
    path = rule_file(tmp_path, content, "weak.json")
    done = secret(sandbox_env, "set", "weak", "--rule", str(path), stdin=BOT_TOKEN)
    assert (done.returncode, done.stdout) == (EXIT_REFUSED, b"")
    assert done.stderr == (f"lnk-sandbox: the secret weak is not stored: the rule in {path} is "
                           f"refused: {reason}\n").encode()
    no_value_in(done, BOT_TOKEN)
    assert not store(lnk_home).exists()


def test_secret_set_with_a_rule_file_missing_or_too_long_stores_nothing(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path,
) -> None:
    from lnk_proxy.secret_rules import MAX_RULE_BYTES

    missing = tmp_path / "missing.json"
    done = secret(sandbox_env, "set", "weak", "--rule", str(missing), stdin=BOT_TOKEN)
    assert (done.returncode, done.stderr) == (EXIT_REFUSED, (
        f"lnk-sandbox: the secret weak is not stored: the rule file {missing} cannot be read: "
        "No such file or directory\n").encode())
    long = rule_file(tmp_path, TELEGRAM_RULE + b" " * MAX_RULE_BYTES, "long.json")
    done = secret(sandbox_env, "set", "weak", "--rule", str(long), stdin=BOT_TOKEN)
    assert done.returncode == EXIT_REFUSED
    assert done.stderr.endswith(f"refused: a rule is at most {MAX_RULE_BYTES} bytes\n".encode())
    assert not store(lnk_home).exists()


@pytest.mark.parametrize(("value", "reason"), [
    (b"no-bot-id-here", "the rule's placeholder is {id}:{random}, and the secret does not start "
                        "with ASCII digits and a ':'"),
    (b"123456:has/slash", "the secret cannot stand in a path as it is (letters, digits, '-', "
                          "'.', '_', '~', ':' only)"),
    (b"123456:has%2fpercent", "the secret cannot stand in a path as it is (letters, digits, '-', "
                              "'.', '_', '~', ':' only)"),
])
def test_secret_set_value_that_cannot_stand_where_the_rule_puts_it_stores_nothing(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path, value: bytes, reason: str,
) -> None:
    path = rule_file(tmp_path, TELEGRAM_RULE)
    done = secret(sandbox_env, "set", "telegram", "--rule", str(path), stdin=value)
    assert (done.returncode, done.stdout) == (EXIT_REFUSED, b"")
    assert done.stderr == (f"lnk-sandbox: the secret telegram is not stored: {reason} (the rule "
                           "given)\n").encode()
    no_value_in(done, value)
    assert not store(lnk_home).exists()


def test_secret_rotated_without_rule_keeps_the_rule_and_is_checked_against_it(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path,
) -> None:
    path = rule_file(tmp_path, TELEGRAM_RULE)
    assert secret(sandbox_env, "set", "telegram", "--rule", str(path),
                  stdin=BOT_TOKEN).returncode == 0
    rotated = b"123456:AAH-rotated-MARKER"
    done = secret(sandbox_env, "set", "telegram", stdin=rotated)
    assert (done.returncode, done.stdout) == (0, b"the secret telegram is stored\n")
    assert read_secret(str(lnk_home), "telegram") == rotated
    assert read_rule(str(lnk_home), "telegram") == TELEGRAM_RULE
    done = secret(sandbox_env, "set", "telegram", stdin=b"not a bot token")
    assert done.returncode == EXIT_REFUSED
    assert done.stderr == (b"lnk-sandbox: the secret telegram is not stored: the rule's "
                           b"placeholder is {id}:{random}, and the secret does not start with "
                           b"ASCII digits and a ':' (the rule kept with it)\n")
    assert read_secret(str(lnk_home), "telegram") == rotated  # the old value kept whole


def test_secret_set_with_rule_and_a_value_as_argument_is_refused_not_echoed(
    sandbox_env: dict[str, str], lnk_home: Path, tmp_path: Path,
) -> None:
    path = rule_file(tmp_path, TELEGRAM_RULE)
    done = secret(sandbox_env, "set", "telegram", "--rule", str(path), BOT_TOKEN.decode())
    assert done.returncode == EXIT_USAGE
    no_value_in(done, BOT_TOKEN)
    assert not store(lnk_home).exists()


def test_read_rule_refuses_a_link_or_a_loose_file(lnk_home: Path, tmp_path: Path) -> None:
    folder = store(lnk_home)
    folder.mkdir(parents=True, mode=0o700)
    elsewhere = rule_file(tmp_path, TELEGRAM_RULE, "planted.json")
    (folder / "linked.rule").symlink_to(elsewhere)
    with pytest.raises(SecretError, match=r"^the rule of the secret linked cannot be opened "
                                          r"\(a link is refused\)"):
        read_rule(str(lnk_home), "linked")
    loose = folder / "loose.rule"
    loose.write_bytes(TELEGRAM_RULE)
    loose.chmod(0o644)
    with pytest.raises(SecretError) as refused:
        read_rule(str(lnk_home), "loose")
    assert str(refused.value) == (f"the rule of the secret loose must be yours and 0600 (it is "
                                  f"0644, owner {os.geteuid()}); refused")
    (folder / "loose").write_bytes(VALUE)
    (folder / "loose").chmod(0o600)
    (folder / "linked").write_bytes(VALUE)
    (folder / "linked").chmod(0o600)
    # A rule that is a link or not a regular file is not listed as kept.
    assert rule_names(str(lnk_home)) == ["loose"]


def test_check_says_which_named_secrets_are_not_ready_and_a_run_is_refused(
    sandbox_env: dict[str, str], write_spec: WriteSpec, run_sandbox: RunSandbox,
) -> None:
    """A spec naming a secret that is not in the store with a rule: `check` warns, and
    the run is refused with one line naming it and the fix; nothing runs."""
    rule = Path(__file__).parent.parent / "examples" / "telegram-rule.json"
    spec = write_spec('[verbs]\nsecrets = ["telegram", "tracker"]\n')
    assert secret(sandbox_env, "set", "telegram", "--rule", str(rule),
                  stdin=b"123456:REALTOKEN-check").returncode == 0
    assert secret(sandbox_env, "set", "tracker", stdin=b"no-rule-VALUE").returncode == 0
    shown = subprocess.run([LNK_SANDBOX, "check", "--spec", str(spec)], env=sandbox_env,
                           capture_output=True, text=True, check=False,
                           timeout=SANDBOX_TIMEOUT_SECONDS).stdout
    assert "secret verb: secrets kept with a rule (names only): telegram" in shown
    assert f"  {spec}: on for telegram, tracker" in shown
    assert ("  WARNING: tracker is not in Link's secrets with a rule: the run is refused "
            "until it is (lnk-sandbox secret set tracker --rule FILE)") in shown
    assert "REALTOKEN" not in shown and "VALUE" not in shown
    result = run_sandbox(spec, "sh", "-c", "echo RAN")
    assert (result.returncode, result.stdout) == (125, "")
    assert "[verbs] secrets names tracker" in result.stderr
    assert "VALUE" not in result.stderr and "REALTOKEN" not in result.stderr
