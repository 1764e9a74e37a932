"""The five harnesses of examples/harnesses/, the real binaries at their pinned versions,
each run by its recipe inside a real sandbox against the test network's fake providers.

Each recipe is copied whole into the test's own folder (its install/ hard-linked: the
harnesses are hundreds of megabytes), so a run writes the copy's `work` and `home`, never
the checkout's; the spec, the configuration files and the command are the recipe's as
shipped, and the prompt is the one thing the test chooses: `lnk-write-file PATH TEXT`,
which the fake provider answers with a call of the write-file tool the harness offers,
then, once the tool's result comes back, with streamed text (tests/fakeproviders.py);
aider writes by a file listing in its answer, so it gets `lnk-write-listing`.

What each run shows, with `spec.toml` (no network but the verb) and `proxy.toml` (the
filtering proxy the one way out, no host listed): the harness starts, exits 0; it reached
its provider only through the verb, every call carrying the real key in the provider's
form and the placeholder nowhere; the calls were streams; the file was written in the
recipe's written folder by the harness's own tool; the streamed answer came out; no wire
is paused. What the harness tried beyond its model (telemetry, update checks) is read
from the wire's log: the refusals docs/decisions/0009-harness-recipes.md tabulates.

A harness missing from its recipe's install/ fails its tests (bin/setup --tests installs
them); none skips.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LNK_SANDBOX, ROOT, SANDBOX_TIMEOUT_SECONDS, VENV_PYTHON, wire_log_of
from tests.fakeproviders import (
    ca_file,
    conversation,
    holds_tool_result,
    log_offset,
    requests_seen,
)

RECIPES = ROOT / "examples" / "harnesses"
# A harness's whole run (start-up, two model calls, a tool, exit): Gemini CLI's Node start
# alone takes seconds on a loaded machine; longer than this is hung, not slow.
HARNESS_TIMEOUT_SECONDS = 180
PLACEHOLDER = re.compile(r"lnk-[0-9a-f]{40}")
# The real key's form at each provider (model_rules._KEY_FORMS), and the provider's host.
KEY_FORMS = {"anthropic": ("x-api-key", ""), "openai": ("authorization", "Bearer "),
             "gemini": ("x-goog-api-key", "")}
HOSTS = {"anthropic": "api.anthropic.com", "openai": "api.openai.com",
         "gemini": "generativelanguage.googleapis.com"}
KEY_PREFIXES = {"anthropic": "sk-ant-real-", "openai": "sk-proj-real-", "gemini": "AIzaReal"}
# What the fake provider's streamed answer starts each delta with (fakeproviders._deltas).
STREAMED = re.compile(r"t0@[0-9.]+ t1@[0-9.]+ t2@[0-9.]+")


@dataclass(frozen=True)
class Harness:
    """A recipe: its folder's name, the provider it talks to, the command its README
    gives (run in the recipe's `work`), with PROMPT where the prompt goes, and whether it
    writes by a tool call (the others, by a file listing in the answer)."""

    name: str
    provider: str
    command: tuple[str, ...]
    by_tool: bool = True


PROMPT = "{prompt}"
HARNESSES = {harness.name: harness for harness in (
    Harness("claude-code", "anthropic",
            ("../install/bin/claude", "-p", "--permission-mode", "acceptEdits", PROMPT)),
    Harness("codex", "openai",
            ("../install/bin/codex", "exec", "--skip-git-repo-check", PROMPT)),
    Harness("gemini-cli", "gemini",
            ("../install/bin/gemini", "--approval-mode", "yolo", "-p", PROMPT)),
    Harness("opencode", "anthropic",
            ("../install/bin/opencode", "run", "-m", "anthropic/claude-sonnet-4-5", PROMPT)),
    Harness("aider", "openai",
            ("../install/bin/python", "-m", "aider", "--yes-always", "--no-git",
             "--message", PROMPT), by_tool=False),
)}
SPECS = ("spec.toml", "proxy.toml")


def installed(harness: Harness) -> Path:
    """The recipe's install/ folder, which bin/setup --harnesses fills; a test fails, and
    says the fix, when it is not there."""
    install = RECIPES / harness.name / "install"
    pinned = (RECIPES / harness.name / "pinned").read_text().split()
    command = install / "bin" / pinned[3]
    if not command.exists():
        pytest.fail(f"{harness.name} is not installed ({command} is missing): run "
                    "bin/setup --harnesses (bin/setup --tests does too)")
    assert (install / ".pinned").read_text().split() == pinned, (
        f"{install} holds another version than {harness.name}/pinned names: run bin/setup "
        "--harnesses")
    return install


def copy_recipe(harness: Harness, into: Path) -> Path:
    """The recipe as shipped, in `into`: every file copied, install/ hard-linked."""
    source = RECIPES / harness.name
    target = into / harness.name
    shutil.copytree(source, target, symlinks=True,
                    ignore=shutil.ignore_patterns("install"))
    shutil.copytree(installed(harness), target / "install", symlinks=True,
                    copy_function=_link_or_copy)
    return target


def _link_or_copy(source: str, target: str) -> None:
    """A hard link, or a copy where the test's folder is on another file system."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def dns_server(testnet: Path) -> str:
    """The test network's DNS server, which answers the providers' names with the fake
    providers' address (tests/testnet.py writes it in the state's `ready`)."""
    ready: dict[str, Any] = json.loads((testnet / "ready").read_text())
    return str(ready["addresses"]["dns"])


def lnk(env: dict[str, str], *words: str, given: str | None = None) -> None:
    """`lnk-sandbox WORDS…` outside, which must succeed (`given` on its standard input)."""
    done = subprocess.run([LNK_SANDBOX, *words], input=given, env=env, capture_output=True,
                          text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert done.returncode == 0, done


def settings_with_key(harness: Harness, tmp_path: Path, testnet: Path
                      ) -> tuple[dict[str, str], str]:
    """A fresh Link settings folder holding a new real key for the harness's provider, and
    the environment that names it (the test network's DNS and CA): (env, key)."""
    settings = tmp_path / "lnk-settings"
    settings.mkdir()
    env = {**os.environ, "LNK_HOME": str(settings), "LNK_SANDBOX_DNS": dns_server(testnet),
           "SSL_CERT_FILE": str(ca_file(testnet))}
    key = KEY_PREFIXES[harness.provider] + secrets.token_hex(8)
    lnk(env, "secret", "set", harness.provider, given=key)
    return env, key


@dataclass(frozen=True)
class Run:
    done: subprocess.CompletedProcess[str]
    records: list[dict[str, Any]]  # what the provider received with this run's key
    log: str  # the wire's log
    written: Path
    text: str


def run_recipe(harness: Harness, spec_name: str, tmp_path: Path, testnet: Path) -> Run:
    recipe = copy_recipe(harness, tmp_path)
    env, key = settings_with_key(harness, tmp_path, testnet)
    work = recipe / "work"
    text = "written-by-" + harness.name + "-" + secrets.token_hex(4)
    if harness.by_tool:
        written = work / "hello.txt"
        prompt = f"lnk-write-file {written} {text}"
    else:
        written = work / "hello.txt"
        prompt = f"lnk-write-listing hello.txt {text}"
    command = [prompt if word == PROMPT else word for word in harness.command]
    start = log_offset(testnet)
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(recipe / spec_name), "--",
                           *command], cwd=str(work), env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=HARNESS_TIMEOUT_SECONDS,
                          check=False)
    records = [record for record in requests_seen(testnet, start)
               if key in json.dumps(record["headers"])]
    paused = subprocess.run([LNK_SANDBOX, "paused", "--json"], env=env, capture_output=True,
                            text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
    assert paused.returncode == 0, paused
    assert json.loads(paused.stdout).get("paused") == [], paused.stdout
    assert key not in done.stdout + done.stderr
    log = wire_log_of(env, harness.name)
    assert key not in log
    _assert_reached_by_the_verb(harness, records, key)
    return Run(done=done, records=records, log=log, written=written, text=text)


def _assert_reached_by_the_verb(harness: Harness, records: list[dict[str, Any]],
                                key: str) -> None:
    assert records, "the provider received nothing with this run's key"
    header, prefix = KEY_FORMS[harness.provider]
    for record in records:
        assert record["host"].split(":")[0] == HOSTS[harness.provider], record["host"]
        assert record["headers"].get(header) == prefix + key, record["headers"]
        assert not PLACEHOLDER.search(json.dumps(record)), "the placeholder reached the provider"


def log_lines(log: str, event: str) -> list[list[str]]:
    """The wire's log lines of `event` ("allowed", "refused" …), each as its fields after
    the time: the event, the target, the rest."""
    fields = [line.split("\t")[1:] for line in log.splitlines()]
    return [each for each in fields if each and each[0] == event]


def streamed(harness: Harness, records: list[dict[str, Any]]) -> bool:
    """Whether every turn of the conversation (a call offering the harness's tools: not a
    title's or a router's call on the side) asked for a stream, in the provider's way."""
    calls = [record for record in records if record["method"] == "POST"
             and json.loads(record["body"] or "{}").get("tools")]
    if not calls:
        return harness.by_tool is False and all(
            json.loads(record["body"]).get("stream") is True for record in records)
    if harness.provider == "gemini":
        return all(record["path"].endswith(":streamGenerateContent")
                   and "alt=sse" in record["query"] for record in calls)
    return all(json.loads(record["body"]).get("stream") is True for record in calls)


@pytest.mark.parametrize("spec_name", SPECS)
@pytest.mark.parametrize("name", list(HARNESSES))
def test_the_harness_writes_a_file_through_the_verb(
    name: str, spec_name: str, tmp_path: Path, testnet: Path,
) -> None:
    """The recipe's command, as its README gives it: the harness starts, its model
    answers through the verb with the real key added outside, streamed; the harness's own
    tool writes the file in the written folder; it exits 0; no wire paused."""
    harness = HARNESSES[name]
    run = run_recipe(harness, spec_name, tmp_path, testnet)
    assert run.done.returncode == 0, (run.done.stdout[-4000:], run.done.stderr[-4000:])
    assert run.written.read_text().strip() == run.text, run.done
    assert streamed(harness, run.records), [record["path"] for record in run.records]
    if harness.by_tool:
        # The tool's call went out, its result came back, and the streamed answer after it
        # was printed.
        assert any(run.text in record["body"] and holds_tool_result(
            conversation(json.loads(record["body"]))) for record in run.records), (
            "no call carried the tool's result")
        assert STREAMED.search(run.done.stdout), run.done.stdout[-4000:]
    else:
        assert run.text in run.done.stdout, run.done.stdout[-4000:]
    # What the harness sent beyond its model: nothing leaves a sandbox of no network
    # (the wire logs only the verb's calls); with the proxy, each is a refusal logged.
    allowed = log_lines(run.log, "allowed")
    assert allowed and all(fields[1] == HOSTS[harness.provider] + ":443"
                           and "kind=model" in fields[2] for fields in allowed), run.log
    if spec_name == "spec.toml":
        assert log_lines(run.log, "refused") == [], run.log


def readme_command(name: str) -> tuple[str, list[str]]:
    """The command a recipe's README gives: the folder it runs in, and its words (the
    shell block's first command after `cd`, its continued lines joined)."""
    import shlex

    text = (RECIPES / name / "README.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    lines = [line for line in block.splitlines() if line.strip()]
    assert lines[0].startswith("cd "), lines
    return lines[0][3:].strip(), shlex.split(lines[1])


@pytest.mark.parametrize("name", list(HARNESSES))
def test_the_readme_gives_the_command_the_tests_run(name: str) -> None:
    """What the README tells a person to type is what the tests run: `lnk-sandbox run
    --spec ../spec.toml --` and the harness's command, in the recipe's `work`, the
    prompt aside."""
    folder, words = readme_command(name)
    assert folder == f"examples/harnesses/{name}/work"
    assert (ROOT / folder / words[0]).resolve() == (ROOT / ".venv" / "bin" / "lnk-sandbox")
    assert words[1:5] == ["run", "--spec", "../spec.toml", "--"], words
    command = words[5:]
    expected = HARNESSES[name].command
    assert len(command) == len(expected), command
    assert [word for word, want in zip(command, expected, strict=True) if want != PROMPT] == [
        want for want in expected if want != PROMPT]


# A stdio MCP server of the person's, run outside by the MCP verb (the MCP SDK's server).
MCP_TOOL = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("github")


@server.tool()
def list_issues() -> str:
    \"\"\"Lists the issues.\"\"\"
    return "ISSUES-" + open(__file__ + ".mark").read()


server.run()
"""


# How each harness is told of the MCP server, by its recipe: (the file the recipe ships,
# where the person puts it in the project, or None: named on the command line), the
# command, and the tool's name as the harness offers it to its model.
MCP_RUNS: dict[str, tuple[tuple[str, str] | None, tuple[str, ...], str]] = {
    "claude-code": (None, ("../install/bin/claude", "-p", "lnk-call-tool list_issues",
                           "--mcp-config", "../mcp.json",
                           "--allowedTools", "mcp__github__list_issues"),
                    "mcp__github__list_issues"),
    "gemini-cli": (("mcp-settings.json", ".gemini/settings.json"),
                   ("../install/bin/gemini", "--approval-mode", "yolo", "-p",
                    "lnk-call-tool list_issues"), "list_issues"),
    "opencode": (("mcp-opencode.json", "opencode.json"),
                 ("../install/bin/opencode", "run", "-m", "anthropic/claude-sonnet-4-5",
                  "lnk-call-tool list_issues"), "github_list_issues"),
}


@pytest.mark.parametrize("spec_name", SPECS)
@pytest.mark.parametrize("name", list(MCP_RUNS))
def test_the_harness_calls_a_tool_of_yours_through_the_mcp_verb(
    name: str, spec_name: str, tmp_path: Path, testnet: Path,
) -> None:
    """The recipe's MCP file and README's command (Claude Code's mcp.json on its command
    line, Gemini CLI's mcp-settings.json as the project's .gemini/settings.json,
    opencode's mcp-opencode.json as the project's opencode.json): the
    harness finds the tool at `$LNK_SANDBOX_URL/mcp/github` (the URL secret filled from
    its environment), calls it
    when its model asks, and the tool's answer, from the server outside, reaches the
    model in the next call; the wire's log has the MCP call and no path or name."""
    harness = HARNESSES[name]
    recipe = copy_recipe(harness, tmp_path)
    placed, command, offered_as = MCP_RUNS[name]
    if placed is not None:
        shipped, where = placed
        (recipe / "work" / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(recipe / shipped, recipe / "work" / where)
    tool = tmp_path / "tool.py"
    tool.write_text(MCP_TOOL)
    mark = secrets.token_hex(6)
    (tmp_path / "tool.py.mark").write_text(mark)
    spec = recipe / spec_name
    spec.write_text(spec.read_text().replace('[verbs]\n', '[verbs]\ntools = ["github"]\n'))
    env, key = settings_with_key(harness, tmp_path, testnet)
    lnk(env, "tool", "add", "github", "--allow", "list_issues", "--", str(VENV_PYTHON),
        str(tool))
    start = log_offset(testnet)
    run = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", *command],
                         cwd=str(recipe / "work"), env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True,
                         timeout=HARNESS_TIMEOUT_SECONDS, check=False)
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-4000:])
    records = [record for record in requests_seen(testnet, start)
               if key in json.dumps(record["headers"])]
    _assert_reached_by_the_verb(harness, records, key)
    offered = [record for record in records if offered_as in record["body"]]
    assert offered, f"{name} offered its model no tool of the MCP server"
    assert any(f"ISSUES-{mark}" in record["body"] and holds_tool_result(
        conversation(json.loads(record["body"]))) for record in records), (
        "the tool's answer did not reach the model", [record["body"][-1500:] for record in records])
    log = wire_log_of(env, harness.name)
    assert "\tmcp:github\t" in log and "kind=mcp" in log, log
    assert "list_issues" not in log and mark not in log and key not in log
    assert key not in run.stdout + run.stderr
