"""A tool's secrets (issue 26, item 9), tested as attacks on a real sandbox: a tool at a URL
(lnk-sandbox-mcp-remote, outside) reached through the MCP verb from inside, its remote a
loopback HTTP server here that records what it is sent.

What holds: a token given with `tool add --secret` (on standard input), or literally in a
header (moved into the tool's secrets at tool add), reaches the remote and nothing else: not
the sandbox's environment, nor any /proc/*/environ or /proc/*/cmdline inside, nor
mcp-remote's argv outside (/proc/PID/cmdline), nor the definition file, nor any log. A
variable a tool names is out of every sandbox's environment, the run saying so when the
harness's environment held it; an old definition that named `${FAR_TOKEN}` is never filled
from the session. mcp-remote's URL rule is `tool add`'s, at once.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lnk_proxy.tools import ToolError, check_secret_values, parse_tool, plan_tool
from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    VENV,
    RunSandbox,
    WriteSpec,
    fuzz,
    toml_list,
)
from tests.test_mcp_verb import INITIALIZE, PYTHON, RAW_CLIENT, write_messages

MCP_REMOTE = str(Path(LNK_SANDBOX).with_name("lnk-sandbox-mcp-remote"))
TOKEN = "tok-7c1e9a44b0d2f3e8-far"  # noqa: S105 (a test's token)
HARNESS_TOKEN = "tok-harness-5d2a1f0e9b8c"  # noqa: S105


class Remote:
    """A remote MCP server (Streamable HTTP answered in JSON) on 127.0.0.1: each request's
    method and Authorization; at each tools/call, whether any process's argv on this
    machine (/proc/*/cmdline, read from outside while mcp-remote waits for the answer)
    holds the token."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.argv_with_token: list[str] = []
        remote = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def do_DELETE(self) -> None:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                method = body.get("method", "")
                remote.seen.append((method, self.headers.get("authorization", "")))
                if "id" not in body:
                    self.send_response(202)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if method == "tools/call":
                    remote.argv_with_token += _argv_holding(TOKEN)
                result = ({"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "far", "version": "1"}}
                          if method == "initialize" else
                          {"tools": [{"name": "far", "inputSchema": {"type": "object"}}]}
                          if method == "tools/list" else
                          {"content": [{"type": "text", "text": "far did it"}]})
                data = json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result})
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()


def _argv_holding(text: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as stream:
                    if text.encode() in stream.read():
                        found.append(entry)
            except OSError:
                continue
    return found


@pytest.fixture
def remote() -> Iterator[Remote]:
    server = Remote()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def client(tmp_path: Path, write_spec: WriteSpec) -> tuple[Path, Path]:
    folder = tmp_path / "client"
    folder.mkdir()
    (folder / "raw.py").write_text(RAW_CLIENT)
    write_messages(folder / "messages.jsonl", [
        INITIALIZE, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "far", "arguments": {}}}])
    spec = write_spec(f"[files]\nread = {toml_list(VENV, folder)}\n"
                      '[verbs]\ntools = ["far"]\n')
    return folder, spec


def _tool(env: dict[str, str], *words: str, stdin: str | None = None
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LNK_SANDBOX, "tool", *words], env=env, capture_output=True,
                          text=True, timeout=SANDBOX_TIMEOUT_SECONDS, check=False,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def _files_holding(root: Path, text: str, *, besides: str) -> list[str]:
    """Every file under `root` (Link's settings: logs, definitions, the tools' logs) but
    the tool's secrets file `besides` that holds `text`."""
    return [str(path) for path in root.rglob("*")
            if path.is_file() and path.name != besides and text.encode() in path.read_bytes()]


def _call_far(run_sandbox: RunSandbox, folder: Path, spec: Path,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_sandbox(spec, PYTHON, str(folder / "raw.py"), "far",
                       str(folder / "messages.jsonl"), "dump", env=env)


def test_a_literal_header_value_reaches_only_the_remote(
    remote: Remote, client: tuple[Path, Path], sandbox_env: dict[str, str],
    run_sandbox: RunSandbox, lnk_home: Path,
) -> None:
    """The acceptance script's form (`--header "Authorization: Bearer TOKEN"`): tool add
    keeps the value as a secret of the tool and says so; the definition, mcp-remote's argv
    (read outside while it waits for the answer), the sandbox and every log lack it; the
    remote gets it."""
    folder, spec = client
    added = _tool(sandbox_env, "add", "far", "--ask", "none", "--", MCP_REMOTE, remote.url,
                  "--header", f"Authorization: Bearer {TOKEN}")
    assert added.returncode == 0, added
    result = _call_far(run_sandbox, folder, spec)
    assert "far did it" in result.stdout, result
    assert ("tools/call", f"Bearer {TOKEN}") in remote.seen, remote.seen
    assert remote.argv_with_token == [], "the token is in a process's argv outside"
    assert _files_holding(lnk_home, TOKEN, besides="far.tool-secrets") == []
    assert TOKEN not in result.stdout + result.stderr, "the token is visible inside"
    assert "the value of the header Authorization is kept as a secret" in added.stdout, added
    assert TOKEN not in added.stdout + added.stderr


def test_a_secret_from_standard_input_reaches_only_the_remote_and_the_harnesss_never_in(
    remote: Remote, client: tuple[Path, Path], sandbox_env: dict[str, str],
    run_sandbox: RunSandbox, lnk_home: Path,
) -> None:
    """The README's form, typed as written (single quotes, --secret): the value comes on
    standard input, is given to mcp-remote in its environment and reaches the remote. The
    harness's environment exports FAR_TOKEN too (with another value): the run says so on
    stderr, and neither value is in the sandbox, nor argv outside, nor any file but the
    tool's secrets."""
    folder, spec = client
    added = _tool(sandbox_env, "add", "far", "--ask", "none", "--secret", "FAR_TOKEN", "--",
                  MCP_REMOTE, remote.url, "--header", "Authorization: Bearer ${FAR_TOKEN}",
                  stdin=TOKEN + "\n")
    assert added.returncode == 0 and "with its secrets FAR_TOKEN" in added.stdout, added
    harness = {**sandbox_env, "FAR_TOKEN": HARNESS_TOKEN}
    result = _call_far(run_sandbox, folder, spec, env=harness)
    assert "far did it" in result.stdout, result
    assert "FAR_TOKEN named by a tool's definition" in result.stderr, result.stderr
    assert HARNESS_TOKEN not in result.stderr
    for value in (TOKEN, HARNESS_TOKEN):
        assert value not in result.stdout, f"{value} is visible inside"
        assert _files_holding(lnk_home, value, besides="far.tool-secrets") == []
    assert "'FAR_TOKEN'" not in result.stdout  # not even the name, in the dumped environ
    assert ("tools/call", f"Bearer {TOKEN}") in remote.seen, remote.seen
    assert remote.argv_with_token == []


def test_an_old_definition_naming_a_variable_takes_it_out_of_every_sandbox(
    tool_setup_old: Path, sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    write_spec: WriteSpec, client: tuple[Path, Path],
) -> None:
    """A definition kept before secrets were (`{"command", "allow", "ask"}`, with the old
    README's `${FAR_TOKEN}`), a harness that exports FAR_TOKEN: a sandbox whose spec names
    no tool at all lacks it, and the run says so; the tool itself is refused at its start
    (never filled from the session), with the fix."""
    harness = {**sandbox_env, "FAR_TOKEN": HARNESS_TOKEN, "FAR_TOKEN2": "second"}
    plain_spec = write_spec("[files]\n")
    # Read from the definitions (no index: an older lnk-sandbox wrote none), then from the
    # tools' index a tool add writes, and once the definition changed behind the index
    # (now naming FAR_TOKEN2, not FAR_TOKEN): read from the definitions again.
    for step, expected in (("no index", "A=none B=second"), ("index", "A=none B=second"),
                           ("stale index", f"A={HARNESS_TOKEN} B=none")):
        if step == "index":
            assert _tool(sandbox_env, "add", "other", "--", "true").returncode == 0
        if step == "stale index":
            tool_setup_old.write_bytes(tool_setup_old.read_bytes().replace(
                b"${FAR_TOKEN}", b"${FAR_TOKEN2}"))
        result = run_sandbox(plain_spec, "sh", "-c",
                             'echo "A=${FAR_TOKEN:-none} B=${FAR_TOKEN2:-none}"', env=harness)
        assert result.stdout.strip() == expected, (step, result)
        assert "named by a tool's definition" in result.stderr, (step, result)
    tool_setup_old.write_bytes(tool_setup_old.read_bytes().replace(
        b"${FAR_TOKEN2}", b"${FAR_TOKEN}"))
    folder, spec = client
    called = _call_far(run_sandbox, folder, spec, env=harness)
    assert "names ${FAR_TOKEN}, which is not one of its secrets: add it again with " \
           "--secret FAR_TOKEN" in called.stdout, called
    assert HARNESS_TOKEN not in called.stdout


@pytest.fixture
def tool_setup_old(lnk_home: Path, remote: Remote) -> Path:
    """The tool `far` as an earlier lnk-sandbox kept it (written here as it wrote it)."""
    folder = lnk_home / "sandbox" / "secrets"
    folder.mkdir(parents=True, mode=0o700)
    folder.chmod(0o700)
    (lnk_home / "sandbox").chmod(0o700)
    definition = folder / "far.tool"
    fd = os.open(definition, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps({"command": [MCP_REMOTE, remote.url, "--header",
                                         "Authorization: Bearer ${FAR_TOKEN}"],
                             "allow": [], "ask": "none"}).encode())
    os.close(fd)
    return definition


@pytest.mark.parametrize(("url", "says"), [
    ("http://192.0.2.1/mcp", "plain http:// is refused to 192.0.2.1"),
    ("http://127.1/mcp", "plain http:// is refused to 127.1"),
    ("http://localhost./mcp", "the URL's host is not a host name or an IP address"),
    ("http://[::ffff:127.0.0.1]/mcp", "plain http:// is refused"),
])
def test_tool_add_refuses_plain_http_off_loopback_at_once(
    url: str, says: str, sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    """mcp-remote's URL rule is tool add's: refused before anything is kept, and before
    a secret is asked for (standard input held open, never written)."""
    added = _tool(sandbox_env, "add", "far", "--", MCP_REMOTE, url, "--header",
                  f"Authorization: Bearer {TOKEN}")
    assert added.returncode == 125 and f"mcp-remote's command is refused: {says}" in \
        added.stderr, added
    assert TOKEN not in added.stderr
    waiting = subprocess.Popen(
        [LNK_SANDBOX, "tool", "add", "far", "--secret", "FAR_TOKEN", "--", MCP_REMOTE, url,
         "--header", "Authorization: Bearer ${FAR_TOKEN}"], env=sandbox_env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = waiting.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    finally:
        waiting.kill()
    assert waiting.returncode == 125 and says in err, err
    assert not (lnk_home / "sandbox" / "secrets" / "far.tool").exists()


@pytest.mark.parametrize(("words", "says"), [
    (["--", MCP_REMOTE, "https://far.example/mcp", "--header", "Authorization: ${FAR_TOKEN}"],
     "${FAR_TOKEN} is not one of the tool's secrets"),
    (["--secret", "PATH", "--", "true"], "--secret PATH is refused"),
    (["--secret", "LNK_TOOL_HEADER_1", "--", "true"], "--secret LNK_TOOL_HEADER_1 is refused"),
    (["--env", "HOME=/tmp", "--", "true"], "--env HOME is refused"),
    (["--env", "tok-abc", "--", "true"], "--env takes NAME=VALUE"),
    (["--secret", "A", "--env", "A=1", "--", "true"], "A is named by both"),
    (["--cwd", "relative", "--", "true"], "is not a folder"),
])
def test_tool_add_refuses_what_it_cannot_keep_safely(
    words: list[str], says: str, sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    added = _tool(sandbox_env, "add", "far", *words)
    assert added.returncode == 125 and says in added.stderr, added
    assert "tok-abc" not in added.stderr
    assert not (lnk_home / "sandbox" / "secrets" / "far.tool").exists()


def test_secrets_come_one_a_line_in_their_order_and_a_miscount_keeps_nothing(
    sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    """`printf '%s\\n' "$A" "$B" | tool add … --secret A --secret B`: exactly as many
    lines as secrets, or nothing is kept (a value is never said)."""
    words = ["add", "two", "--secret", "ONE", "--secret", "TWO", "--", "true"]
    for typed in ("only-one-value\n", "a-value\nb-value\nc-value\n", "a-value\n\n"):
        refused = _tool(sandbox_env, *words, stdin=typed)
        assert refused.returncode == 125 and "value" in refused.stderr, refused
        assert "-value" not in refused.stderr
        assert not (lnk_home / "sandbox" / "secrets").exists() or not list(
            (lnk_home / "sandbox" / "secrets").iterdir())
    kept = _tool(sandbox_env, *words, stdin="a-value\nb-value\n")
    assert kept.returncode == 0, kept
    stored = json.loads((lnk_home / "sandbox" / "secrets" / "two.tool-secrets").read_bytes())
    assert stored == {"ONE": "a-value", "TWO": "b-value"}
    listed = json.loads(_tool(sandbox_env, "list", "--json").stdout)
    assert listed["tools"][0]["secrets"] == ["ONE", "TWO"]
    assert "-value" not in json.dumps(listed)
    removed = _tool(sandbox_env, "remove", "two")
    assert removed.returncode == 0 and not list((lnk_home / "sandbox" / "secrets").iterdir())


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)
_KEYS = ["command", "allow", "ask", "cwd", "home", "environment", "secrets"]


@fuzz(3)
@given(st.one_of(
    st.binary(max_size=200),
    st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=7).map(
        lambda document: json.dumps(document).encode())))
def test_a_definition_parses_or_raises_its_own_error(raw: bytes) -> None:
    """Any bytes, and JSON objects of our keys with any values: a Tool whose every part
    is checked (it can start), or ToolError; nothing else escapes."""
    try:
        tool = parse_tool("far", raw, owner_home="/home/p")
    except ToolError:
        return
    assert tool.cwd.startswith("/") and tool.home.startswith("/") and tool.command
    tool.process_environment(dict.fromkeys(tool.secrets, "v"))


_WORD = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=20)


@fuzz(3)
@given(st.lists(_WORD, min_size=1, max_size=6), st.lists(_WORD, max_size=3),
       st.lists(_WORD, max_size=3), st.booleans())
def test_a_plan_is_whole_or_refused_and_a_refusal_never_repeats_a_value(
        command: list[str], assignments: list[str], secrets: list[str], remote: bool) -> None:
    """plan_tool on any words (as mcp-remote's command or not): a plan whose command names
    no `${VAR}` outside its secrets and holds no moved header's value, or ToolError that
    repeats neither an --env value nor a header's value."""
    header_value = f"tok-{command[0]}"
    if remote:
        command = ["lnk-sandbox-mcp-remote", "https://far.example/mcp", "--header",
                   f"X-Key: {header_value}", *command[1:]]
    try:
        plan = plan_tool("far", command, [], "each", environ={"PATH": "/usr/bin", "LANG": "C"},
                         owner_home="/home/p", home=None, cwd=None, assignments=assignments,
                         secrets=secrets)
        check_secret_values(plan, [b"v"] * len(plan.asked))
    except ToolError as error:
        for assignment in assignments:
            value = assignment.partition("=")[2]
            assert len(value) < 4 or value not in str(error)
        if remote:
            assert header_value not in str(error) or len(header_value) < 8
        return
    for moved in plan.moved.values():
        assert all(moved not in word for word in plan.tool.command)
