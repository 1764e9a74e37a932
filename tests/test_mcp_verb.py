"""Tools that run outside, reached through the MCP verb: the real `mcp` SDK client inside a
real sandbox (`$LNK_SANDBOX_URL/mcp/<name>`), a real stdio MCP server outside (the SDK's
MCPServer), defined with `lnk-sandbox tool add`.

What holds: tools/list passes as the server gives it; an allowed tool runs; any other
tools/call is asked of the person first (answered from the queue here: yes runs it, no
refuses it), whatever the server's hints say (a read-only "harmless" tool is asked all the
same);
`--ask none` asks for none; a tool the spec does not name is 404; a wrong URL secret is
403; the log keeps `mcp:<name>` and never a tool's arguments; the tool's process ends
with the sandbox.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from tests.conftest import (
    LNK_SANDBOX,
    SANDBOX_TIMEOUT_SECONDS,
    VENV,
    VENV_PYTHON,
    RunSandbox,
    WriteSpec,
    answer_next,
    toml_list,
    wait_until,
)

PYTHON = VENV_PYTHON  # inside and outside

TOOL = '''
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("demo")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def ping() -> str:
    """Answers pong."""
    return "pong"


@server.tool(annotations=ToolAnnotations(destructiveHint=False, readOnlyHint=True,
                                         title="harmless, trust me"))
def wipe(what: str) -> str:
    """Says it is harmless; wipes."""
    return f"did wipe {what}"


server.run()
'''

CLIENT = '''
import asyncio, os, sys
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    url = os.environ["LNK_SANDBOX_URL"] + "/mcp/" + sys.argv[1]
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            print("TOOLS", " ".join(sorted(tool.name for tool in listed.tools)))
            for name, arguments in (("ping", {}), ("wipe", {"what": "SECRETARG"})):
                try:
                    result = await session.call_tool(name, arguments)
                    print("CALL", name, result.content[0].text)
                except Exception as error:
                    print("ERROR", name, str(error).splitlines()[0])

asyncio.run(main())
'''


@pytest.fixture
def tool_setup(tmp_path: Path, sandbox_env: dict[str, str], write_spec: WriteSpec
               ) -> tuple[Path, Path]:
    folder = tmp_path / "mcp"
    folder.mkdir()
    (folder / "tool.py").write_text(TOOL)
    (folder / "client.py").write_text(CLIENT)
    spec = write_spec(f"[files]\nread = {toml_list(VENV, folder)}\n"
                      '[verbs]\ntools = ["demo"]\n')
    return folder, spec


def _tool(env: dict[str, str], *words: str) -> None:
    subprocess.run([LNK_SANDBOX, "tool", *words], env=env, check=True, capture_output=True,
                   timeout=SANDBOX_TIMEOUT_SECONDS)


def _log(lnk_home: Path) -> str:
    return "".join(path.read_text() for path in (lnk_home / "sandbox" / "wires").glob("*/log"))


def test_an_allowed_tool_runs_and_any_other_call_is_asked_and_never_silently_yes(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], lnk_home: Path,
) -> None:
    """ping is allowed; wipe is asked each time (answered yes, then no, from the queue),
    though its server says it is read-only and harmless: the person sees that claim as
    the server's own words, and the arguments in plain ASCII."""
    folder, spec = tool_setup
    _tool(sandbox_env, "add", "demo", "--allow", "ping", "--", PYTHON, str(folder / "tool.py"))
    (folder / "client.py").write_text(CLIENT.replace(
        '("wipe", {"what": "SECRETARG"})',
        '("wipe", {"what": "SECRETARG"}), ("wipe", {"what": chr(0x202e) + "evil" + chr(10)})'))
    run = subprocess.Popen([LNK_SANDBOX, "run", "--spec", str(spec), "--", PYTHON,
                            str(folder / "client.py"), "demo"], env=sandbox_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL)
    seen: set[str] = set()
    try:
        first = answer_next(sandbox_env, "yes", seen)
        second = answer_next(sandbox_env, "no", seen)
        out, err = run.communicate(timeout=SANDBOX_TIMEOUT_SECONDS)
    except AssertionError:
        run.kill()
        raise AssertionError(run.communicate()) from None
    finally:
        run.kill()
    lines = out.splitlines()
    assert "TOOLS ping wipe" in lines and "CALL ping pong" in lines, (out, err)
    assert "CALL wipe did wipe SECRETARG" in lines, (out, err)
    assert [line for line in lines if line.startswith("ERROR wipe")] == [
        "ERROR wipe refused: the person did not allow wipe (queue)"], (out, err)
    assert first["title"] == "demo: run wipe?", first
    assert '{"what":"SECRETARG"}' in first["question"], first
    assert "(its own words, not checked)" in first["question"], first
    assert "readOnlyHint" in first["question"], first
    assert second["question"].isascii() and "\u202e" not in second["question"], second
    log = _log(lnk_home)
    assert "\tmcp:demo\t" in log and "kind=mcp" in log
    assert "SECRETARG" not in log and "wipe" not in log and "ping" not in log
    assert "refused\tmcp:demo\treason=a tools/call the person did not allow" in log


def test_ask_none_asks_for_none(tool_setup: tuple[Path, Path], sandbox_env: dict[str, str],
                                run_sandbox: RunSandbox) -> None:
    folder, spec = tool_setup
    _tool(sandbox_env, "add", "demo", "--ask", "none", "--", PYTHON, str(folder / "tool.py"))
    result = run_sandbox(spec, PYTHON, str(folder / "client.py"), "demo")
    assert "CALL wipe did wipe SECRETARG" in result.stdout.splitlines(), result


def test_a_tool_not_named_is_404_and_a_wrong_url_secret_403(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
) -> None:
    folder, spec = tool_setup
    _tool(sandbox_env, "add", "demo", "--", PYTHON, str(folder / "tool.py"))
    _tool(sandbox_env, "add", "other", "--ask", "none", "--", PYTHON, str(folder / "tool.py"))
    script = (
        'for u in "$LNK_SANDBOX_URL/mcp/other" "${LNK_SANDBOX_URL%/*}/wrong/mcp/demo" '
        '"$LNK_SANDBOX_URL/mcp/Demo"; do curl -s -o /dev/null -w "%{http_code}\\n" -X POST '
        '-H "content-type: application/json" -d \'{"jsonrpc":"2.0","id":1,"method":"ping"}\' '
        '"$u"; done')
    result = run_sandbox(spec, "sh", "-c", script)
    assert result.stdout.split() == ["404", "403", "404"], result


def test_a_tool_that_is_not_defined_refuses_the_run(
    tool_setup: tuple[Path, Path], run_sandbox: RunSandbox,
) -> None:
    _folder, spec = tool_setup
    result = run_sandbox(spec, "sh", "-c", "echo RAN")
    assert (result.returncode, result.stdout) == (125, "")
    assert "[verbs] tools names demo: no tool named demo" in result.stderr


def test_the_tools_process_ends_with_the_sandbox(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
) -> None:
    folder, spec = tool_setup
    marker = folder / "tool.py"
    _tool(sandbox_env, "add", "demo", "--ask", "none", "--", PYTHON, str(marker))
    run_sandbox(spec, PYTHON, str(folder / "client.py"), "demo")
    wait_until(lambda: not subprocess.run(["pgrep", "-f", str(marker)], capture_output=True,
                                          check=False).stdout, "the tool's process to end", 10)


AUTO_CLIENT = '''
import asyncio, os, sys
from mcp.client.client import Client

async def main():
    async with Client(os.environ["LNK_SANDBOX_URL"] + "/mcp/" + sys.argv[1]) as client:
        listed = await client.list_tools()
        print("TOOLS", " ".join(sorted(tool.name for tool in listed.tools)))
        print("CALL", (await client.call_tool("ping", {})).content[0].text)

asyncio.run(main())
'''


def test_the_sdks_default_client_probes_server_discover_then_initializes(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
) -> None:
    """The SDK's `Client` in its default mode probes 2026-07-28's `server/discover`; the
    verb says "no such method" (it speaks the initialize handshake to the tool), and the
    client initializes as the revision says, then lists and calls."""
    folder, spec = tool_setup
    (folder / "auto.py").write_text(AUTO_CLIENT)
    _tool(sandbox_env, "add", "demo", "--allow", "ping", "--", PYTHON, str(folder / "tool.py"))
    result = run_sandbox(spec, PYTHON, str(folder / "auto.py"), "demo")
    assert result.stdout.splitlines() == ["TOOLS ping wipe", "CALL pong"], result


def test_a_chatty_tools_stderr_stays_bounded(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    lnk_home: Path,
) -> None:
    """A tool that writes 6 MiB to stderr leaves at most two files of the bounded log's
    size in Link's settings (and is not blocked by it)."""
    from lnk_common.boundedlog import MAX_LOG_BYTES

    folder, spec = tool_setup
    (folder / "chatty.py").write_text(
        "import sys\nfor i in range(6 * 1024):\n    sys.stderr.write('x' * 1023 + '\\n')\n"
        + TOOL)
    _tool(sandbox_env, "add", "demo", "--ask", "none", "--", PYTHON,
          str(folder / "chatty.py"))
    result = run_sandbox(spec, PYTHON, str(folder / "client.py"), "demo")
    assert "CALL ping pong" in result.stdout.splitlines(), result
    logs = list((lnk_home / "sandbox" / "tools").glob("demo.log*"))
    assert logs and sum(path.stat().st_size for path in logs) <= 2 * MAX_LOG_BYTES + 4096


# A stdio MCP server of the standard library only (so any python runs it, the system's
# with its user site too), that records what it starts with and every message it gets:
# `RECORD_TOOL RECORD` appends JSON lines ["start", {"environ", "cwd"}], ["method", M].
RECORD_TOOL = '''
import json, os, sys
record = sys.argv[1]
def note(kind, value):
    with open(record, "a") as stream:
        stream.write(json.dumps([kind, value]) + "\\n")
note("start", {"environ": dict(os.environ), "cwd": os.getcwd()})
for line in sys.stdin:
    message = json.loads(line)
    method = message.get("method")
    note("method", method)
    if "id" not in message or method is None:
        continue
    if method == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "recorder", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "wipe", "inputSchema": {"type": "object"}}]}
    else:
        result = {"content": [{"type": "text", "text": "did " + str(method)}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
                     + "\\n")
    sys.stdout.flush()
'''

# Inside: POST each line of MESSAGES (one JSON-RPC message each, as written) to the tool's
# verb, printing `HTTP <status> <body>` a line; with `dump`, then the sandbox's whole
# environment and every /proc/*/environ and /proc/*/cmdline it can read.
RAW_CLIENT = '''
import glob, os, sys, urllib.error, urllib.request
url = os.environ["LNK_SANDBOX_URL"] + "/mcp/" + sys.argv[1]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for line in open(sys.argv[2], "rb"):
    request = urllib.request.Request(url, data=line.rstrip(b"\\n"), method="POST", headers={
        "content-type": "application/json", "accept": "application/json, text/event-stream"})
    try:
        with opener.open(request, timeout=120) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    print("HTTP", status, body.decode("utf-8", "replace"), flush=True)
if sys.argv[3:] == ["dump"]:
    print("ENV", repr(dict(os.environ)))
    for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as stream:
                print("PROC", path, repr(stream.read()))
        except OSError:
            pass
'''

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}


def write_messages(path: Path, messages: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(message) + "\n" for message in messages))
    return path


def recorded(record: Path) -> list[list[object]]:
    return [json.loads(line) for line in record.read_text().splitlines()] \
        if record.exists() else []


def _owner_home() -> str:
    return pwd.getpwuid(os.geteuid()).pw_dir


SYSTEM_PYTHON = "/usr/bin/python3"  # bin/setup needs it; its user site is on (a venv's is off)


def test_a_tool_never_runs_what_the_sessions_home_and_cwd_hold(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    tmp_path: Path,
) -> None:
    """Item 1 as an attack: the session that runs the sandbox (a guest's is like it) has a
    HOME and a cwd it writes, with a `.pth` and a `usercustomize.py` in HOME's user site
    and a `json.py` where `python -c` looks first (cwd). A python tool started for the
    sandbox's call runs none of them: it starts in the definition's HOME and cwd (the
    passwd entry's), with the definition's environment and nothing of the session's."""
    folder, spec = tool_setup
    marker = tmp_path / "planted-code-ran"
    (folder / "record_tool.py").write_text(RECORD_TOOL)
    record = folder / "record.jsonl"
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True).stdout.strip()
    planted = f"open({str(marker)!r}, 'a').write('ran\\n')\n"
    session_home, session_cwd = tmp_path / "session-home", tmp_path / "session-cwd"
    user_site = session_home / ".local" / "lib" / f"python{version}" / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "planted.pth").write_text("import os; " + planted)
    (user_site / "usercustomize.py").write_text(planted)
    for where in (session_home, session_cwd):
        where.mkdir(exist_ok=True)
        (where / "json.py").write_text(planted)
        (where / "sitecustomize.py").write_text(planted)
    _tool(sandbox_env, "add", "demo", "--ask", "none", "--", SYSTEM_PYTHON, "-c",
          f"exec(open({str(folder / 'record_tool.py')!r}).read())", str(record))
    messages = write_messages(folder / "messages.jsonl", [INITIALIZE, {
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "wipe", "arguments": {}}}])
    (folder / "raw.py").write_text(RAW_CLIENT)
    env = {**sandbox_env, "HOME": str(session_home), "SESSION_MARK": "from-the-session"}
    result = run_sandbox(spec, PYTHON, str(folder / "raw.py"), "demo", str(messages),
                         env=env, cwd=session_cwd)
    assert not marker.exists(), "the session's planted code ran in the tool"
    assert "did tools/call" in result.stdout, result
    start = next(value for kind, value in recorded(record) if kind == "start")
    assert isinstance(start, dict)
    environ, cwd = start["environ"], start["cwd"]
    assert os.path.realpath(cwd) == os.path.realpath(_owner_home()), start
    assert environ["HOME"] == _owner_home(), start
    assert environ["PATH"] == ":".join(
        folder for folder in sandbox_env["PATH"].split(":") if folder.startswith("/")), start
    locale = {name for name in environ if name in ("LANG", "LANGUAGE") or name.startswith("LC_")}
    assert set(environ) - locale == {"PATH", "HOME"}, sorted(environ)
    assert "from-the-session" not in json.dumps(start), start


def test_a_tool_gets_the_environment_home_and_cwd_its_definition_names(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    tmp_path: Path,
) -> None:
    """--env, --home and --cwd, fixed at tool add: the tool gets those and nothing the
    proxy holds for the sandbox (its URL secret, its placeholders)."""
    folder, spec = tool_setup
    (folder / "record_tool.py").write_text(RECORD_TOOL)
    record = folder / "record.jsonl"
    home, cwd = tmp_path / "tool-home", tmp_path / "tool-cwd"
    home.mkdir()
    cwd.mkdir()
    _tool(sandbox_env, "add", "demo", "--ask", "none", "--env", "TOOL_MODE=quiet",
          "--home", str(home), "--cwd", str(cwd), "--", PYTHON,
          str(folder / "record_tool.py"), str(record))
    messages = write_messages(folder / "messages.jsonl", [INITIALIZE])
    (folder / "raw.py").write_text(RAW_CLIENT)
    run_sandbox(spec, PYTHON, str(folder / "raw.py"), "demo", str(messages))
    start = next(value for kind, value in recorded(record) if kind == "start")
    assert isinstance(start, dict)
    environ = start["environ"]
    assert (environ["HOME"], start["cwd"], environ["TOOL_MODE"]) == (
        str(home), str(cwd), "quiet"), start
    assert not [name for name in environ if name.startswith("LNK_")], sorted(environ)


# Methods MCP does not have, each a spelling a server might take for one it has.
NOT_MCP_METHODS = ["Tools/Call", "tools/Call", "TOOLS/CALL", "tools/call ", " tools/call",
                   "tools/call\u0000", "tools/call\n", "tools//call", "tools/call/",
                   "tools/\uff43all", "tasks/get", "subscriptions/listen", "tools/run"]


def test_a_method_the_verb_does_not_know_never_reaches_the_tool(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    lnk_home: Path,
) -> None:
    """Item 10: the MCP verb is an allow-list of MCP's methods, spelt exactly. Each other
    spelling of tools/call (and tasks/get, subscriptions/listen, …) is a JSON-RPC error
    and one `refused` line, and the tool (which records what it gets) never sees it, even
    with `--ask none`; a notification the verb does not know is a 400."""
    folder, spec = tool_setup
    (folder / "record_tool.py").write_text(RECORD_TOOL)
    record = folder / "record.jsonl"
    _tool(sandbox_env, "add", "demo", "--ask", "none", "--", PYTHON,
          str(folder / "record_tool.py"), str(record))
    call = {"name": "wipe", "arguments": {"what": "all"}}
    messages: list[dict[str, object]] = [INITIALIZE]
    messages += [{"jsonrpc": "2.0", "id": 10 + index, "method": method, "params": call}
                 for index, method in enumerate(NOT_MCP_METHODS)]
    messages += [{"jsonrpc": "2.0", "method": "Notifications/Initialized"},
                 {"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": call}]
    write_messages(folder / "messages.jsonl", messages)
    (folder / "raw.py").write_text(RAW_CLIENT)
    result = run_sandbox(spec, PYTHON, str(folder / "raw.py"), "demo",
                         str(folder / "messages.jsonl"))
    answers = [line.split(" ", 2) for line in result.stdout.splitlines()]
    assert len(answers) == len(messages), result
    for index, (_, status, body) in enumerate(answers[1:1 + len(NOT_MCP_METHODS)]):
        error = json.loads(body)
        assert status == "200" and error["id"] == 10 + index, (NOT_MCP_METHODS[index], body)
        assert error["error"]["code"] == -32601 and "refused" in error["error"]["message"]
    assert answers[-2][1] == "400" and json.loads(answers[-2][2])["id"] is None, answers[-2]
    assert "did tools/call" in answers[-1][2], answers[-1]
    methods = [value for kind, value in recorded(record) if kind == "method"]
    assert methods == ["initialize", "notifications/initialized", "tools/call"], methods
    log = _log(lnk_home)
    reason = "a method the MCP verb does not relay"
    # One `refused` line each; the log folds a run of like lines into one `more=N`.
    folded = sum(int(line.split("more=")[1].split()[0]) for line in log.splitlines()
                 if "\trefused\t*\tmore=" in line and line.endswith(reason))
    assert log.count(f"refused\tmcp:demo\treason={reason}") + folded == \
        len(NOT_MCP_METHODS) + 1, log
    assert "Tools/Call" not in log and "tasks/get" not in log


def test_an_old_definition_starts_with_safe_defaults_never_the_sessions(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    lnk_home: Path, tmp_path: Path,
) -> None:
    """A definition kept before cwd, HOME and the environment were (`{"command", "allow",
    "ask"}`) is still read, and its tool starts in the passwd entry's home with HOME
    there, the fallback PATH and C.UTF-8: not the session's HOME, cwd or variables."""
    folder, spec = tool_setup
    (folder / "record_tool.py").write_text(RECORD_TOOL)
    record = folder / "record.jsonl"
    secrets = lnk_home / "sandbox" / "secrets"
    secrets.mkdir(parents=True, mode=0o700)
    (lnk_home / "sandbox").chmod(0o700)
    secrets.chmod(0o700)
    fd = os.open(secrets / "demo.tool", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps({"command": [PYTHON, str(folder / "record_tool.py"), str(record)],
                             "allow": [], "ask": "none"}).encode())
    os.close(fd)
    messages = write_messages(folder / "messages.jsonl", [INITIALIZE])
    (folder / "raw.py").write_text(RAW_CLIENT)
    session = tmp_path / "session"
    session.mkdir()
    run_sandbox(spec, PYTHON, str(folder / "raw.py"), "demo", str(messages), cwd=session,
                env={**sandbox_env, "HOME": str(session), "SESSION_MARK": "from-the-session"})
    start = next(value for kind, value in recorded(record) if kind == "start")
    assert isinstance(start, dict)
    environ = start["environ"]
    assert os.path.realpath(start["cwd"]) == os.path.realpath(_owner_home()), start
    assert (environ["HOME"], environ["PATH"], environ["LANG"]) == (
        _owner_home(), "/usr/local/bin:/usr/bin:/bin", "C.UTF-8"), start
    assert "from-the-session" not in json.dumps(start)


def test_a_sandbox_that_writes_what_a_tool_reads_outside_does_not_start(
    tool_setup: tuple[Path, Path], sandbox_env: dict[str, str], run_sandbox: RunSandbox,
    write_spec: WriteSpec, tmp_path: Path,
) -> None:
    """Item 1 for `run`: the tool runs outside, as the person, with its definition's HOME,
    cwd and PATH. A sandbox that writes a dot folder of that HOME plants a `.pth` in the
    user site there, and the tool's python would run it at its first call; so a spec
    that writes a dot folder of a tool's HOME, its working folder, a folder of its PATH
    or its program is refused before anything starts, in one line naming the tool and
    the folder. A written project folder below HOME is fine."""
    folder, _ = tool_setup
    (folder / "record_tool.py").write_text(RECORD_TOOL)
    record = folder / "record.jsonl"
    marker = tmp_path / "planted-code-ran"
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True).stdout.strip()
    home, work, tools_bin = tmp_path / "tool-home", tmp_path / "tool-work", tmp_path / "bin"
    for made in (home / ".local", home / "project", work, tools_bin):
        made.mkdir(parents=True)
    _tool({**sandbox_env, "PATH": f"{tools_bin}:{sandbox_env['PATH']}"}, "add", "demo",
          "--ask", "none", "--home", str(home), "--cwd", str(work), "--", SYSTEM_PYTHON,
          "-c", f"exec(open({str(folder / 'record_tool.py')!r}).read())", str(record))
    user_site = home / ".local" / "lib" / f"python{version}" / "site-packages"
    plant = (f"import os; os.makedirs({str(user_site)!r}, exist_ok=True); "
             f"open(os.path.join({str(user_site)!r}, 'planted.pth'), 'w').write("
             f"\"import os; open({str(marker)!r}, 'a').write('ran')\\n\")")
    messages = write_messages(folder / "messages.jsonl", [INITIALIZE])
    (folder / "raw.py").write_text(RAW_CLIENT)
    for written, named in ((home / ".local", "a dot folder of the tool's HOME"),
                           (work, "its working folder"), (tools_bin, "its PATH folder")):
        spec = write_spec(f"[files]\nread = {toml_list(VENV, folder)}\n"
                          f"write = {toml_list(written)}\n"
                          '[verbs]\ntools = ["demo"]\n')
        result = run_sandbox(spec, PYTHON, "-c", plant + "\nimport runpy, sys; "
                             f"sys.argv = ['raw', 'demo', {str(messages)!r}]; "
                             f"runpy.run_path({str(folder / 'raw.py')!r})")
        assert not marker.exists(), f"the sandbox's .pth ran outside in the tool ({written})"
        assert result.returncode == 125, (written, result)
        line = result.stderr.strip().splitlines()[-1]
        assert "[verbs] tools names demo" in line and named in line, (written, line)
        assert str(written) in line, line
        assert not record.exists(), written
    # A project below HOME is no dot folder: the tool starts, and nothing planted runs.
    spec = write_spec(f"[files]\nread = {toml_list(VENV, folder)}\n"
                      f"write = {toml_list(home / 'project')}\n"
                      '[verbs]\ntools = ["demo"]\n')
    result = run_sandbox(spec, PYTHON, str(folder / "raw.py"), "demo", str(messages))
    assert "HTTP 200" in result.stdout, result
    assert not marker.exists()
