"""lnk-sandbox explain: what a spec opens, golden for every example spec and harness recipe
(text and --json), every field of the policy explained, and the same words for `guest add`.

The golden files (tests/golden/explain/) name the repository `<repo>` and Link's settings
`<settings>`, so they hold wherever the checkout is. To write them again after a change of
words: LNK_GOLDEN_WRITE=1 with this module, then read the diff.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_common.policy import FIELDS, Policy
from lnk_wrap import explain
from lnk_wrap.explain import FIELD_WORDS, Facts
from tests.conftest import LNK_SANDBOX, SANDBOX_TIMEOUT_SECONDS, fuzz

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "explain"
WRITE = os.environ.get("LNK_GOLDEN_WRITE") == "1"
# Every spec under examples/: the examples and each harness's two recipes (a harness's
# installed files and HOME hold no spec).
EXAMPLE_SPECS = sorted(
    path.relative_to(ROOT).as_posix() for path in (
        *(ROOT / "examples").glob("*.toml"),
        *(ROOT / "examples" / "harnesses").glob("*/*.toml")))


def _explained(spec: str, settings: Path, *words: str) -> str:
    done = subprocess.run([LNK_SANDBOX, "explain", "--spec", spec, *words], cwd=ROOT,
                          env={**os.environ, "LNK_HOME": str(settings)},
                          capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert (done.returncode, done.stderr) == (0, ""), done
    return (done.stdout.replace(str(settings.resolve()), "<settings>")
            .replace(str(ROOT), "<repo>"))


def _golden(name: str, found: str) -> None:
    path = GOLDEN / name
    if WRITE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(found)
    assert found == path.read_text(), f"{name}: LNK_GOLDEN_WRITE=1 writes it again"


def test_every_example_has_its_goldens() -> None:
    assert len(EXAMPLE_SPECS) >= 14, EXAMPLE_SPECS
    named = {path.name for path in GOLDEN.iterdir()}
    expected = {_golden_name(spec) + suffix for spec in EXAMPLE_SPECS
                for suffix in (".txt", ".json")} | {"every_field.txt", "every_field.json"}
    assert named == expected


def _golden_name(spec: str) -> str:
    return spec.removeprefix("examples/").removesuffix(".toml").replace("/", "-")


@pytest.mark.parametrize("spec", EXAMPLE_SPECS)
def test_example_golden(spec: str, tmp_path: Path) -> None:
    """The text and the JSON, whole, as the person's `lnk-sandbox explain` prints them."""
    settings = tmp_path / "lnk-settings"
    settings.mkdir()
    text = _explained(spec, settings)
    _golden(_golden_name(spec) + ".txt", text)
    found = _explained(spec, settings, "--json")
    _golden(_golden_name(spec) + ".json", found)
    document = json.loads(found)
    # The same facts: every line of the text is a line of the JSON, in the same order.
    said = [line["text"] for group in document["groups"] for line in group["lines"]]
    assert [line.strip() for line in text.splitlines() if line.startswith("  ")] == said


# A policy with every field of FIELDS away from its default.
EVERY_FIELD = Policy(
    settings="/s", settings_via="/home/u/.config/lnk", name="main", agent="main",
    spec="/home/u/main.toml", learn="", home="/s/agents/main", network="proxy",
    hosts=("example.com", "*.example.org:8443"), endpoints=("db.example.com:5432",),
    lan=("10.1.2.3:22",), localhost_ports=(5432,), models=("anthropic", "gemini"),
    secrets=("telegram", "unruled"), local_models=(11434,), tools=("github", "wipe", "gone"),
    site_packages="/opt/venv/site", calls_per_minute=60, pause=(5, 4, 120),
    server_tools=True, open_pages=True, keep_session=True, read=("/srv/data",),
    write=("/srv/work", "/srv/dots", "/s/agents/main"), hide=("/srv/data/secret", "/s/agents"),
    reopen=("/srv/data/secret/ok",), write_dot_files=("/srv/dots", "/s/agents/main"),
    commands=("/usr/bin",))
EVERY_FACT = Facts(secret_hosts={"telegram": "api.telegram.org"},
                   tool_asks={"github": "every call asks you but list_issues",
                              "wipe": "no call asks you"})


def test_every_field_golden() -> None:
    _golden("every_field.txt", explain.text(EVERY_FIELD, EVERY_FACT))
    _golden("every_field.json", json.dumps(explain.as_json(EVERY_FIELD, EVERY_FACT),
                                           indent=2) + "\n")


def test_every_field_of_the_policy_has_its_words() -> None:
    """A row added to FIELDS without words here fails; a field with words says them
    (for the policy of every field), and a silent one says why it is silent."""
    assert list(FIELD_WORDS) != [] and set(FIELD_WORDS) == {field.name for field in FIELDS}
    said = {line.field for line in explain.explain(EVERY_FIELD, EVERY_FACT)}
    for name, words in FIELD_WORDS.items():
        if words.render is None:
            assert words.silent and not words.group, name
        else:
            assert name in said, f"{name} has words but says none for a policy setting it"


def test_a_field_without_words_fails_the_test() -> None:
    """The check above, against a table missing one row: it would fail."""
    fewer = {name: words for name, words in FIELD_WORDS.items() if name != "hosts"}
    assert set(fewer) != {field.name for field in FIELDS}


def test_the_network_host_and_none_say_what_is_open() -> None:
    host = explain.opens(Policy(settings="/s", network="host"), Facts())
    assert "this machine and its networks: NOT closed (network \"host\"); unix sockets by " \
           "name are refused" in host
    assert not any(line.startswith("pause:") for line in host)  # no wire, no controls
    none = explain.opens(Policy(settings="/s"), Facts())
    assert "network: none (no host, no lookup)" in none


def test_a_guest_is_shown_its_own_folder_and_ssh() -> None:
    """What `guest add` shows and asks (the same function): the guest's folder, and what a
    session over SSH may do; the guest's folder is not listed again among the written."""
    policy = Policy(settings="/s", read=("/r",), write=("/w",), hide=("/r/h",),
                    network="proxy", hosts=("example.com",), models=("anthropic",))
    lines = explain.opens(policy, Facts(guest_home="/s/guests/ann"))
    assert lines[:4] == [
        "reads (and runs programs from): /r",
        "reads and writes: /w",
        "dot files held read only at the top (.git, .envrc, .vscode, .idea, .husky, git's "
        "hooks and settings, a hook manager's settings), so nothing written there runs as "
        "you outside: /w",
        "hidden, whatever grants them: /r/h",
    ]
    assert "its own folder, written, dot files open: /s/guests/ann" in lines
    assert "over SSH: a shell, a command, scp and sftp, all inside; no forwarding of ports, " \
           "agent or X11" in lines
    assert not any(line.startswith("its HOME") for line in lines)


def test_a_path_that_would_rewrite_the_terminal_is_shown_escaped() -> None:
    policy = Policy(settings="/s", read=("/r/\x1b]52;c;cm0=\x07x",))
    shown = explain.text(policy, Facts())
    assert "\x1b" not in shown and "\\x1b]52;c;cm0=\\x07x" in shown


def test_the_store_says_each_secret_s_host_and_each_tool_s_asking(tmp_path: Path) -> None:
    """Read from Link's settings as a run reads them: a secret's rule's host, a tool's
    asking, and what is not there said so (a run would refuse to start)."""
    settings = tmp_path / "lnk-settings"
    env = {**os.environ, "LNK_HOME": str(settings)}

    def lnk(*words: str, stdin: str = "") -> None:
        subprocess.run([LNK_SANDBOX, *words], env=env, input=stdin, text=True, check=True,
                       capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)

    lnk("secret", "set", "telegram", "--rule", str(ROOT / "examples" / "telegram-rule.json"),
        stdin="123456:secret-value\n")
    lnk("tool", "add", "github", "--allow", "list_issues", "--", "/bin/true")
    lnk("tool", "add", "quiet", "--ask", "none", "--", "/bin/true")
    spec = tmp_path / "spec.toml"
    spec.write_text('[verbs]\nsecrets = ["telegram", "unset"]\n'
                    'tools = ["github", "quiet", "gone"]\n')
    said = _explained(str(spec), settings)
    assert ("  secrets through /_link/secret/ (kept outside, added by their rule, only to its "
            "host): telegram (to api.telegram.org), unset (no rule read: a run refuses to "
            "start)\n") in said
    assert ("  tools that run outside, as you: github (every call asks you but list_issues), "
            "quiet (no call asks you), gone (not defined: a run refuses to start)\n") in said
    assert "secret-value" not in said


def test_a_first_run_with_write_dot_files_shows_the_same_lines(tmp_path: Path) -> None:
    """launch.notice_first_run says its line, then explain's, once per spec content."""
    from lnk_wrap.launch import notice_first_run

    policy = Policy(settings=str(tmp_path), spec="/p/spec.toml", write=("/p/work",),
                    write_dot_files=("/p/work",))
    said: list[str] = []
    notice_first_run(policy, said.append)
    assert said[0].startswith("first run of /p/spec.toml: it lets the sandbox write the dot "
                              "files (.git, hooks, .envrc, editor settings) of /p/work")
    assert said[1:] == [f"  {line}" for line in explain.opens(policy, Facts())]
    assert "  dot files writable (.git, hooks, .envrc ...) in: /p/work" in said
    notice_first_run(policy, said.append)
    assert len(said) == 1 + len(explain.opens(policy, Facts()))  # said once


_NAME = st.text(st.characters(exclude_characters="/\0", exclude_categories=["Cs"]),
                min_size=1, max_size=12).filter(lambda name: name not in (".", ".."))
_PATHS = st.lists(_NAME.map(lambda name: f"/{name}"), max_size=3, unique=True)
_HOSTS = st.lists(st.text(min_size=1, max_size=20).filter(
    lambda host: not host.startswith("-") and not any(c.isspace() for c in host)),
    max_size=3, unique=True)


@fuzz(2)
@given(read=_PATHS, hide=_PATHS, hosts=_HOSTS, network=st.sampled_from(["none", "proxy"]),
       ports=st.lists(st.integers(1, 65535), max_size=2, unique=True),
       flags=st.lists(st.booleans(), min_size=2, max_size=2))
def test_any_policy_is_said_in_plain_ascii_and_its_json_holds_the_same_lines(
        read: list[str], hide: list[str], hosts: list[str], network: str, ports: list[int],
        flags: list[bool]) -> None:
    policy = Policy(settings="/s", read=tuple(read), hide=tuple(hide), network=network,
                    hosts=tuple(hosts) if network == "proxy" else (),
                    localhost_ports=tuple(ports), open_pages=flags[0],
                    models=("openai",) if flags[1] else (), server_tools=flags[1])
    shown = explain.text(policy, Facts())
    assert all(" " <= character <= "~" for character in shown.replace("\n", ""))
    document = json.loads(json.dumps(explain.as_json(policy, Facts())))
    said = [line["text"] for group in document["groups"] for line in group["lines"]]
    assert said == explain.opens(policy, Facts())
    assert {line["field"] for group in document["groups"] for line in group["lines"]} \
        <= {*FIELD_WORDS, None}


def test_a_bad_spec_is_one_line_naming_file_key_and_reason(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text('[network]\nmode = "proxy"\nhosts = ["*"]\n')
    done = subprocess.run([LNK_SANDBOX, "explain", "--spec", str(spec)],
                          env={**os.environ, "LNK_HOME": str(tmp_path / "s")},
                          capture_output=True, text=True, check=False,
                          timeout=SANDBOX_TIMEOUT_SECONDS)
    assert done.returncode == 125 and done.stdout == ""
    assert done.stderr.startswith(f"lnk-sandbox: {spec}: network.hosts[0]: "), done.stderr
    assert done.stderr.count("\n") == 1
