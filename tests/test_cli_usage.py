"""A CLI that says what was wrong (issue 29, item 4): a usage mistake is one line and the
command's own usage, exit 2; `lnk-sandbox NAME --help`; `mcp-remote` as a command;
`learn`'s list in the spec's own words and never an empty one; `check`'s verdict first;
on-stop's answers. The messages asserted keep the person's word "verb" ("unknown verb",
"the verbs: …"): user-visible (lnk_wrap.usage says why)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lnk_wrap import cli, usage
from lnk_wrap.learn import format_commands
from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, RunSandbox, WriteSpec, toml_list

DOC = cli.__doc__ or ""
RUN_USAGE = ("usage: lnk-sandbox run --spec=FILE [--wire=NAME] [--platform=NAME] "
             "[--summary=FILE] [--] COMMAND...\n")


def lnk(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, *args], env=env, capture_output=True, text=True,
                          input=stdin, timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


def said(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """What `lnk-sandbox WORDS…` says on stderr, run in this process; it must exit 2."""
    with pytest.raises(SystemExit) as ended:
        cli.main(list(words))
    assert ended.value.code == 2, words
    out, err = capsys.readouterr()
    assert out == ""
    return err


# Golden: each mistake, the one line that names it (the command's usage follows it).
MISTAKES = [
    (["run", "--spec", "demo.toml"],
     "no command given: lnk-sandbox run runs the command after --"),
    (["run", "--", "true"], "run needs --spec FILE"),
    (["run", "--spec"], "--spec needs a value (--spec FILE)"),
    (["run", "--spec", "s", "ls", "-la"],
     "missing `--` before the command: '-la' is read as an option of lnk-sandbox run; "
     "put -- before 'ls'"),
    (["run", "--spec", "s", "--bogus", "--", "true"], "unknown option '--bogus'"),
    (["run", "--follow", "--spec", "s", "--", "true"],
     "--follow is not an option of lnk-sandbox run"),
    (["run", "--spec", "s", "--spec", "s", "--", "true"], "--spec is given twice"),
    (["wrap", "--spec", "s", "--json=yes", "--", "true"], "--json takes no value"),
    (["log", "--json=yes"], "--json takes no value"),
    (["log", "-n"], "-n needs a value (-n N)"),
    (["log", "a", "b"], "unexpected 'b'"),
    (["paused", "--json", "yes"], "unexpected 'yes' (--json takes no value)"),
    (["resume"], "missing WIRE"),
    (["answer", "abc"], "missing ANSWER"),
    (["on-stop"], "no command given: lnk-sandbox on-stop runs the command after --"),
    (["on-stop", "--list", "--remove", "x"],
     "--list, --remove do not go together in lnk-sandbox on-stop"),
    (["tool", "add"], "missing NAME"),
    (["tool", "add", "far"], "no command given: lnk-sandbox tool add runs the command after --"),
    (["tool", "fetch"], "tool needs one of add, list, remove, not 'fetch'"),
    (["guest", "add", "ann", "--spec", "g.toml"], "guest add needs --key PUBKEY_FILE"),
    (["asks", "--show", "1", "--wait"], "--show, --wait do not go together in lnk-sandbox asks"),
    (["stop", "now"], "unexpected 'now'"),
    (["frobnicate"], "unknown verb 'frobnicate'"),
    (["--frobnicate"], "unknown option '--frobnicate'"),
    ([], "no verb given"),
]


@pytest.mark.parametrize(("words", "message"), MISTAKES)
def test_a_usage_mistake_is_one_line_then_the_command_s_usage_alone(
    capsys: pytest.CaptureFixture[str], words: list[str], message: str
) -> None:
    err = said(capsys, *words)
    lines = err.splitlines()
    assert lines[0] == f"lnk-sandbox: {message}"
    command = words[0] if words and words[0] in usage.commands(DOC) else ""
    if command:
        subcommand = words[1] if command in ("tool", "guest", "secret") and len(words) > 1 \
            and words[1] in ("add", "list", "remove", "set") else ""
        assert lines[1:] == [
            *(f"{'usage:' if index == 0 else '      '} {line}"
              for index, line in enumerate(usage.usage_of(DOC, command, subcommand))),
            f"(lnk-sandbox {command} --help says more)"]
    else:
        assert len(lines) == 2 and lines[1].startswith("the verbs: wrap, run, learn,")
    assert "unmatched" not in err and "Argument(" not in err and "Usage:" not in err


def test_the_acceptance_check_run_without_a_command(
    sandbox_env: dict[str, str], tmp_path: Path
) -> None:
    spec = tmp_path / "demo.toml"
    spec.write_text("")
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec)], env=sandbox_env,
                          cwd=tmp_path, capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert done.returncode == 2
    assert done.stderr.count("\n") <= 3
    assert "unmatched" not in done.stderr and "Argument(None" not in done.stderr
    assert done.stderr == ("lnk-sandbox: no command given: lnk-sandbox run runs the command "
                           f"after --\n{RUN_USAGE}(lnk-sandbox run --help says more)\n")


@pytest.mark.parametrize("words", [
    ["set", "anthropic", "sk-ant-TYPED-here"],
    ["set", "anthropic", "--sk-ant-TYPED-here"],
    ["set", "anthropic", "--", "sk-ant-TYPED-here"],
    ["sk-ant-TYPED-here"],
    ["list", "--sk-ant-TYPED-here"],
])
def test_a_secret_typed_as_an_argument_is_never_repeated(
    capsys: pytest.CaptureFixture[str], words: list[str]
) -> None:
    err = said(capsys, "secret", *words)
    assert "TYPED" not in err
    if words[0] == "set":
        assert err.startswith("lnk-sandbox: secret set reads the value from standard input, "
                              "never from an argument (an argument is seen by every user")
        assert err.splitlines()[1] == "usage: lnk-sandbox secret set NAME [--rule=FILE]"


@pytest.mark.parametrize("command", ["run", "log", "asks", "secret", "tool", "url", "check"])
def test_command_help_shows_that_command(sandbox_env: dict[str, str], command: str) -> None:
    done = lnk(sandbox_env, command, "--help")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == usage.command_help(DOC, command) + "\n"
    shown = done.stdout.splitlines()
    assert shown[0] == "Usage:"
    assert all(line.startswith(f"  lnk-sandbox {command} ")
               or line == f"  lnk-sandbox {command}" for line in shown[1:shown.index("")])
    assert any(line.startswith(f"  {command} ") for line in shown)  # its paragraph
    assert "lnk-sandbox wrap" not in done.stdout or command == "wrap"
    assert lnk(sandbox_env, command, "-h").stdout == done.stdout


def test_run_help_golden() -> None:
    assert usage.command_help(DOC, "run") == "\n".join([
        "Usage:",
        "  lnk-sandbox run --spec=FILE [--wire=NAME] [--platform=NAME] [--summary=FILE] [--] "
        "COMMAND...",
        "",
        "  run     Run COMMAND sandboxed now: the same line, run at once. With --summary, FILE",
        '          gets one JSON object when it has ended, for a script: {"status", "wire",',
        '          "run", "calls", "refused", "paused", "pause_reason", "stopped",',
        '          "other_runs"} (a file, not stderr: the command\'s own output stays its own).',
        "          With --platform macos, the macOS line run with its parent outside it (the",
        "          agent's proxy on its port, the log reader, signals): on a Mac only; it has",
        "          never run on one.",
        "",
        "Options:",
        "  --spec=FILE   The spec (TOML) that says what the sandbox may touch.",
        "  --wire=NAME   Name the sandbox's wire (its log and pause); default: the spec's name.",
        "  --platform=NAME  linux (this machine's sandbox, the default) or macos (wrap, run, "
        "check).",
        "  --summary=FILE  Write the run's summary there, as JSON, when it has ended (run).",
    ])


def test_help_after_the_command_is_the_command_s(
    sandbox_env: dict[str, str], write_spec: WriteSpec, tmp_path: Path
) -> None:
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\n")
    whole = lnk(sandbox_env, "--help")
    assert whole.returncode == 0 and whole.stdout.startswith("lnk-sandbox: the verbs")
    ran = lnk(sandbox_env, "run", "--spec", str(spec), "--", "/usr/bin/printf", "%s", "--help")
    assert ran.returncode == 0 and ran.stdout == "--help", ran.stderr
    mistaken = lnk(sandbox_env, "run", "--spec", str(spec), "/bin/echo", "--help")
    assert mistaken.returncode == 2
    assert mistaken.stderr.splitlines()[0] == (
        "lnk-sandbox: missing `--` before the command: '--help' is read as an option of "
        "lnk-sandbox run; put -- before '/bin/echo'")


def test_mcp_remote_is_a_command_as_the_seed_spells_it(
    sandbox_env: dict[str, str], lnk_home: Path
) -> None:
    refused = lnk(sandbox_env, "mcp-remote", "http://10.0.0.1/")
    script = lnk(sandbox_env.copy(), "--version")  # the console script is still there
    assert script.returncode == 0
    beside = subprocess.run([str(Path(LNK_SANDBOX).with_name("lnk-sandbox-mcp-remote")),
                             "http://10.0.0.1/"], capture_output=True, text=True, check=False,
                            timeout=SANDBOX_TIMEOUT_SECONDS)
    assert refused.returncode == beside.returncode == 2
    assert refused.stderr == beside.stderr
    assert lnk(sandbox_env, "mcp-remote").returncode == 2
    # tool add checks `lnk-sandbox mcp-remote …` as mcp-remote's own line, and keeps a
    # literal header value out of it.
    off_loopback = lnk(sandbox_env, "tool", "add", "far", "--", LNK_SANDBOX, "mcp-remote",
                       "http://10.0.0.1/mcp")
    assert off_loopback.returncode == 125
    assert "mcp-remote's command is refused: plain http:// is refused" in off_loopback.stderr
    added = lnk(sandbox_env, "tool", "add", "far", "--", LNK_SANDBOX, "mcp-remote",
                "https://far.example/mcp", "--header", "Authorization: Bearer tok-LITERAL")
    assert added.returncode == 0, added.stderr
    kept = (lnk_home / "sandbox" / "secrets" / "far.tool").read_text()
    assert "tok-LITERAL" not in kept and "mcp-remote" in kept


def test_learn_never_prints_an_empty_list_and_keeps_the_spec_s_spelling(
    write_spec: WriteSpec, run_sandbox: RunSandbox, tmp_path: Path
) -> None:
    assert os.path.realpath("/usr/bin/sh") != "/usr/bin/sh"  # a link here (to dash)
    work = tmp_path / "work"
    work.mkdir()
    spec = write_spec(f"[files]\nread = {toml_list(tmp_path)}\nwrite = {toml_list(work)}\n"
                      '[commands]\nrun = ["/usr/bin/sh"]\n')
    learned = run_sandbox(spec, "/usr/bin/sh", "-c", "/usr/bin/id >/dev/null", verb="learn")
    assert learned.returncode == 0, learned.stderr
    body = learned.stdout.split("\n", 1)[1]
    assert '"/usr/bin/sh",' in body and "dash" not in body
    assert '"/usr/bin/id",' in body
    import tomllib

    assert tomllib.loads(body)["commands"]["run"] == ["/usr/bin/sh", "/usr/bin/id"]
    # Only a program the sandbox wrote ran: nothing to list, and no `run = [ ]`.
    (work / "mine").write_bytes(Path("/usr/bin/true").read_bytes())
    (work / "mine").chmod(0o755)
    bare = write_spec(f"[files]\nread = {toml_list(tmp_path)}\nwrite = {toml_list(work)}\n")
    nothing = run_sandbox(bare, str(work / "mine"), verb="learn")
    assert nothing.returncode == 0, nothing.stderr
    assert "\nrun = [" not in nothing.stdout and "\n[commands]" not in nothing.stdout
    assert "# nothing to list" in nothing.stdout
    assert f"not offered: {work}/mine" in nothing.stderr


def test_format_commands_golden() -> None:
    assert format_commands(("/usr/bin/dash",), ["/usr/bin/id"], {"/usr/bin/dash": "/bin/sh"}) \
        == ("[commands]\nrun = [\n"
            '    "/bin/sh",       # listed; an interpreter: runs any code it is given\n'
            '    "/usr/bin/id",   # new\n]')
    assert not format_commands((), []).startswith("[commands]")


def test_check_leads_with_its_verdict(sandbox_env: dict[str, str], write_spec: WriteSpec
                                      ) -> None:
    plain = lnk(sandbox_env, "check")
    assert plain.returncode == 0
    assert plain.stdout.splitlines()[0] == "ready: sandboxes start here"
    spec = write_spec('[verbs]\nmodel = ["anthropic"]\n')
    with_spec = lnk(sandbox_env, "check", "--spec", str(spec))
    assert with_spec.stdout.splitlines()[0] == (
        f"ready; but {spec} has no key yet for anthropic: its model calls are refused until "
        "it is set (lnk-sandbox secret set anthropic)")
    secret = write_spec('[verbs]\nsecrets = ["telegram"]\n')
    refused = lnk(sandbox_env, "check", "--spec", str(secret))
    assert refused.stdout.splitlines()[0] == (
        f"NOT ready for {secret}: telegram is not in Link's secrets with a rule "
        "(lnk-sandbox secret set telegram --rule FILE)")
    import json

    assert json.loads(lnk(sandbox_env, "check", "--json").stdout)["verdict"] == \
        "ready: sandboxes start here"


def test_check_verdict_names_the_first_thing_missing() -> None:
    from lnk_wrap.check import verdict

    def machine(**changes: object) -> dict[str, object]:
        found: dict[str, object] = {
            "ready": True, "architecture": {"machine": "x86_64", "filter_built": True,
                                            "built_for": ["x86_64", "aarch64"]},
            "bubblewrap": {"found": True, "user_namespaces": True, "why": ""},
            "landlock_abi": 6, "seccomp": {"user_notification": True},
            "secret_verb": {}, "model_verb": {}}
        found.update(changes)
        return found

    assert verdict(machine()) == "ready: sandboxes start here"
    assert verdict(machine(ready=False, bubblewrap={"found": False, "why": "install it"})) == \
        "NOT ready: bubblewrap is missing: install it"
    assert verdict(machine(ready=False, architecture={
        "machine": "riscv64", "filter_built": False, "built_for": ["x86_64", "aarch64"]})) == \
        "NOT ready: no seccomp filter is built for riscv64 (only x86_64, aarch64)"
    assert verdict(machine(ready=False, landlock_abi=0)) == \
        "NOT ready: Landlock is absent from this kernel"


def test_on_stop_says_what_it_did_or_that_nothing_is_registered(
    sandbox_env: dict[str, str]
) -> None:
    empty = lnk(sandbox_env, "on-stop", "--list")
    assert empty.returncode == 0 and empty.stdout == ""
    assert empty.stderr == "lnk-sandbox: no on-stop command is registered (stop runs none)\n"
    none = lnk(sandbox_env, "on-stop", "--remove", "agent-main")
    assert none.returncode == 1
    assert none.stderr == ("lnk-sandbox: no on-stop command named 'agent-main' (registered: "
                           "none is registered); nothing was removed\n")
    assert lnk(sandbox_env, "on-stop", "--name", "agent-main", "--", "true").returncode == 0
    assert lnk(sandbox_env, "on-stop", "--name", "other", "--", "true").returncode == 0
    assert lnk(sandbox_env, "on-stop", "--list").stdout == "agent-main\ttrue\nother\ttrue\n"
    wrong = lnk(sandbox_env, "on-stop", "--remove", "agent")
    assert wrong.stderr == ("lnk-sandbox: no on-stop command named 'agent' (registered: "
                            "agent-main, other); nothing was removed\n")
    removed = lnk(sandbox_env, "on-stop", "--remove", "agent-main")
    assert removed.returncode == 0
    assert removed.stdout == "removed the on-stop command agent-main; 1 left\n"
    assert lnk(sandbox_env, "on-stop", "--remove", "other").stdout == \
        "removed the on-stop command other; none left\n"
