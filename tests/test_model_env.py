"""The model verb's side of a sandbox's start (lnk_wrap.model_env, the launcher): the
program's environment points each named provider's SDK at the verb with a placeholder
for its key and holds no provider's key at all; the placeholder is one per run, or one
per agent kept in Link's settings where no sandbox reaches it.

The environment is golden-tested as a pure function, checked against every variable the
installed SDKs read, and then looked at from inside real sandboxes (`env`, every
/proc/*/environ), with the real proxy answering the verb at the base URL given."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from lnk_common.endpoints import PROXY_ADDRESS, PROXY_PORT
from lnk_common.policy import MODEL_PROVIDERS, Policy
from lnk_proxy.main import PLACEHOLDER_VARIABLE as PROXY_PLACEHOLDER_VARIABLE
from lnk_wrap import model_env
from lnk_wrap.launch import PLACEHOLDER_VARIABLE
from lnk_wrap.model_env import (
    KEY_VARIABLES,
    PROVIDER_VARIABLES,
    ROUTE_VARIABLES,
    ModelEnvError,
    is_placeholder,
    new_placeholder,
    placeholder_for,
    sandbox_environment,
    verb_base,
)
from tests.conftest import RunSandbox, WriteSpec, toml_list

PLACEHOLDER = "lnk-" + "0123456789" * 4
BASE = "http://127.0.0.1:3128/_link/model"
EXIT_SANDBOX_FAILED = 125


def _environment(env: dict[str, str], models: tuple[str, ...]
                 ) -> tuple[dict[str, str], list[str]]:
    return sandbox_environment(env, models, PLACEHOLDER, proxy_address=PROXY_ADDRESS,
                               proxy_port=PROXY_PORT)


# -- the environment, sans IO -------------------------------------------------------------


def test_verb_bases_are_the_contracts() -> None:
    assert {provider: verb_base(provider, PROXY_ADDRESS, PROXY_PORT)
            for provider in MODEL_PROVIDERS} == {
        "anthropic": f"{BASE}/anthropic",
        "openai": f"{BASE}/openai/v1",
        "gemini": f"{BASE}/gemini",
        "openrouter": f"{BASE}/openrouter/api/v1",
    }
    assert set(PROVIDER_VARIABLES) == set(KEY_VARIABLES) == set(ROUTE_VARIABLES) == set(
        MODEL_PROVIDERS)
    assert PLACEHOLDER_VARIABLE == PROXY_PLACEHOLDER_VARIABLE == "LNK_PLACEHOLDER"


def test_V2_environment_golden_with_every_provider_named() -> None:
    env = {
        "PATH": "/usr/bin", "HOME": "/home/u",
        "ANTHROPIC_API_KEY": "sk-ant-REALKEY-0001", "ANTHROPIC_AUTH_TOKEN": "tok",
        "ANTHROPIC_BASE_URL": "https://gateway.example", "ANTHROPIC_PROFILE": "work",
        "ANTHROPIC_CUSTOM_HEADERS": "Authorization: Bearer sk-ant-REALKEY-0002",
        "OPENAI_API_KEY": "sk-proj-REALKEY-0003", "OPENAI_ORG_ID": "org-1",
        "OPENAI_PROJECT_ID": "proj_1", "AZURE_OPENAI_API_KEY": "x",
        "GOOGLE_API_KEY": "AIzaREALKEY-0004-aaaaaaaaaa", "GOOGLE_GENAI_USE_VERTEXAI": "true",
        "GOOGLE_CLOUD_PROJECT": "p", "GOOGLE_APPLICATION_CREDENTIALS": "/home/u/adc.json",
        "OPENROUTER_API_KEY": PLACEHOLDER,
    }
    out, notes = _environment(env, ("anthropic", "openai", "gemini", "openrouter"))
    assert out == {
        "PATH": "/usr/bin", "HOME": "/home/u",
        "ANTHROPIC_BASE_URL": f"{BASE}/anthropic", "ANTHROPIC_API_KEY": PLACEHOLDER,
        "OPENAI_BASE_URL": f"{BASE}/openai/v1", "OPENAI_API_KEY": PLACEHOLDER,
        "GOOGLE_GEMINI_BASE_URL": f"{BASE}/gemini", "GEMINI_API_KEY": PLACEHOLDER,
        "OPENROUTER_BASE_URL": f"{BASE}/openrouter/api/v1", "OPENROUTER_API_KEY": PLACEHOLDER,
    }
    # One line, naming the variables whose values looked like keys (a placeholder, "tok"
    # and "x" do not), never a value.
    assert notes == [
        "ANTHROPIC_API_KEY, ANTHROPIC_CUSTOM_HEADERS, OPENAI_API_KEY, GOOGLE_API_KEY looked "
        "like real keys: a model verb is on, so the sandbox holds no provider's key (each "
        "named provider's goes in from Link's secrets, at the proxy)"]
    assert "REALKEY" not in repr(notes)


def test_V2_every_key_of_every_provider_goes_when_any_model_verb_is_on() -> None:
    """A key for a provider not named is no less a key: none stays in the sandbox."""
    keys = [name for names in KEY_VARIABLES.values() for name in names]
    env = {name: f"REALKEY-{index:04d}-abcdefghijklmnop" for index, name in enumerate(keys)}
    for named in MODEL_PROVIDERS:
        out, notes = _environment(env, (named,))
        _, _, key_variable = PROVIDER_VARIABLES[named]
        assert not any("REALKEY" in value for value in out.values()), named
        assert out[key_variable] == PLACEHOLDER
        assert notes == [model_env.FOREIGN_KEY_NOTE.format(names=", ".join(keys))]


def test_a_named_providers_routes_go_and_others_stay() -> None:
    """GOOGLE_CLOUD_PROJECT is every Google Cloud tool's: it goes only when Gemini is
    named (with GOOGLE_GENAI_USE_VERTEXAI it sends google-genai to Vertex, not the verb)."""
    routes = {name: "value" for names in ROUTE_VARIABLES.values() for name in names}
    out, notes = _environment(routes, ("openai",))
    assert not set(ROUTE_VARIABLES["openai"]) & set(out)
    for provider in ("anthropic", "gemini"):
        assert set(ROUTE_VARIABLES[provider]) <= set(out)
    assert notes == []
    out, _ = _environment(routes, ("gemini", "anthropic"))
    assert set(ROUTE_VARIABLES["openai"]) <= set(out)
    assert not (set(ROUTE_VARIABLES["gemini"]) | set(ROUTE_VARIABLES["anthropic"])) & set(out)


def test_without_a_model_verb_the_environment_is_left_as_it_is() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-REALKEY-0001", "PATH": "/bin"}
    assert _environment(env, ()) == (env, [])


@pytest.mark.parametrize(("value", "looks"), [
    ("sk-ant-api03-" + "A" * 80, True),
    ("sk-ant-REALKEY-0001", True),
    ("AIzaSyA-0123456789abcdefghij", True),
    ("Authorization: Bearer sk-or-v1-0123456789abcdef", True),
    ("", False), ("x", False), ("dummy", False), ("not set", False),
    (PLACEHOLDER, False), ("sk-" + "a" * 12, False),
])
def test_what_looks_like_a_key(value: str, looks: bool) -> None:
    _, notes = _environment({"ANTHROPIC_API_KEY": value}, ("anthropic",))
    assert bool(notes) is looks


# Every provider-named variable the installed SDKs read, beyond the tables: each was read
# in the SDK's source and judged neither a credential nor a way around the verb.
NOT_CREDENTIALS_OR_ROUTES = {
    "ANTHROPIC_LOG": "log level",
    "ANTHROPIC_OPEN_TELEMETRY": "tracing switch",
    "ANTHROPIC_OPEN_TELEMETRY_PROPAGATION": "tracing",
    "ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE": "tracing",
    "ANTHROPIC_OPEN_TELEMETRY_TRACES_MAX_CONTENT_BYTES": "tracing",
    "ANTHROPIC_ENVIRONMENT_ID": "an environments worker's id (its secret is a key above)",
    "ANTHROPIC_SESSION_ID": "an environments worker's session id",
    "ANTHROPIC_WORK_ID": "an environments worker's work id",
    "OPENAI_LOG": "log level",
    "OPENAI_API_VERSION": "Azure's API version; Azure's endpoint and keys go",
    "GOOGLE_API_USE_MTLS_ENDPOINT": "google-auth's mTLS switch for Google's own endpoints",
    "GOOGLE_GENAI_API_VERSION": "v1 or v1beta: both under the verb",
    "GOOGLE_GENAI_CLIENT_MODE": "the SDK's record/replay test mode",
    "GOOGLE_GENAI_DEBUG": "debug output",
    "GOOGLE_GENAI_HTTP_CLIENT": "httpx or aiohttp",
    "GOOGLE_GENAI_REPLAYS_DIRECTORY": "the SDK's replay test files",
    "GOOGLE_GENAI_REPLAY_ID": "the SDK's replay test files",
    "GOOGLE_GENAI_RUN_GEMINI_ONLY_IN_API_MODE": "the SDK's own tests",
    "GOOGLE_GENAI_RUN_VERTEX_ONLY_IN_API_MODE": "the SDK's own tests",
    # Not environment variables: enum values and constants that match the pattern.
    "GOOGLE_MAPS": "a tool enum", "GOOGLE_SEARCH": "a tool enum",
    "GOOGLE_SEARCH_IMAGE": "a tool enum", "GOOGLE_SEARCH_WEB": "a tool enum",
    "GOOGLE_SERVICE_ACCOUNT_AUTH": "an auth-type enum", "GEMINI_API": "an API enum",
}
_NAMED = re.compile(r"[\"']((?:ANTHROPIC|OPENAI|AZURE_OPENAI|GOOGLE|GEMINI|OPENROUTER)_[A-Z0-9_]+)"
                    r"[\"']")


def test_V2_every_variable_the_installed_sdks_read_is_judged() -> None:
    """A new SDK that reads a new variable (a new key, a new route around the verb)
    fails here until it is put in a table or judged harmless above."""
    import importlib.util

    found: set[str] = set()
    for package in ("anthropic", "openai", "google.genai"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for folder in spec.submodule_search_locations:
            for path in Path(folder).rglob("*.py"):
                if "tests" in path.parts:
                    continue
                found |= set(_NAMED.findall(path.read_text(errors="replace")))
    judged = {name for table in (KEY_VARIABLES, ROUTE_VARIABLES) for names in table.values()
              for name in names}
    judged |= {name for variables in PROVIDER_VARIABLES.values()
               for name in (variables[0], variables[2])}
    assert found - judged - set(NOT_CREDENTIALS_OR_ROUTES) == set()
    assert {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"} <= found


# -- the placeholder -------------------------------------------------------------------------


def test_a_run_placeholder_is_new_each_time_and_of_the_contracts_form() -> None:
    made = {new_placeholder() for _ in range(100)}
    assert len(made) == 100
    for text in made:
        assert re.fullmatch(r"lnk-[0-9a-f]{40}", text) and is_placeholder(text)
    for text in ("lnk-" + "A" * 40, "lnk-" + "a" * 39, "xnk-" + "a" * 40, "lnk-" + "g" * 40):
        assert not is_placeholder(text)


def _agent_policy(settings: Path, agent: str = "main") -> Policy:
    return Policy(settings=str(settings), models=("anthropic",), agent=agent)


def test_an_agents_placeholder_is_kept_0600_in_settings_the_sandbox_does_not_see(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "lnk"
    first = placeholder_for(_agent_policy(settings))
    assert is_placeholder(first)
    assert placeholder_for(_agent_policy(settings)) == first
    assert placeholder_for(_agent_policy(settings, "other")) != first
    kept = settings / "sandbox" / "agents" / "main" / "model-placeholder"
    assert kept.read_text() == first
    assert stat.S_IMODE(kept.lstat().st_mode) == 0o600
    for folder in (settings / "sandbox" / "agents", settings / "sandbox" / "agents" / "main"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert sorted(os.listdir(kept.parent)) == ["model-placeholder"]  # no temp file left
    # A run without an agent gets a new one each time, and keeps nothing.
    anonymous = Policy(settings=str(settings), models=("openai",))
    assert placeholder_for(anonymous) != placeholder_for(anonymous)


def _make_in_child(settings: str, queue: multiprocessing.Queue[str]) -> None:
    queue.put(placeholder_for(_agent_policy(Path(settings))))


def test_launchers_of_one_agent_racing_all_get_the_one_placeholder(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[str] = context.Queue()
    children = [context.Process(target=_make_in_child, args=(str(tmp_path / "lnk"), queue))
                for _ in range(8)]
    for child in children:
        child.start()
    found = {queue.get(timeout=30) for _ in children}
    for child in children:
        child.join(30)
    assert len(found) == 1 and is_placeholder(found.pop())


FIX = "remove it, and the next run makes a new one (the agent's harness then needs it)"


@pytest.mark.parametrize(("make", "reason"), [
    (lambda path: path.write_text("lnk-short"),
     "does not hold a placeholder (lnk- and 40 lowercase hex characters)"),
    (lambda path: path.write_text(PLACEHOLDER + "\n"),
     "does not hold a placeholder (lnk- and 40 lowercase hex characters)"),
    (lambda path: path.write_text("lnk-" + "AB" * 20),
     "does not hold a placeholder (lnk- and 40 lowercase hex characters)"),
    (lambda path: path.mkdir(), "is not a regular file"),
    (lambda path: os.mkfifo(path, 0o600), "is not a regular file"),
])
def test_an_agents_placeholder_is_read_back_strictly(
    tmp_path: Path, make: object, reason: str
) -> None:
    settings = tmp_path / "lnk"
    kept = settings / "sandbox" / "agents" / "main" / "model-placeholder"
    kept.parent.mkdir(parents=True, mode=0o700)
    os.chmod(kept.parent.parent, 0o700)
    assert callable(make)
    make(kept)
    if kept.is_file():
        kept.chmod(0o600)
    with pytest.raises(ModelEnvError) as caught:
        placeholder_for(_agent_policy(settings))
    assert str(caught.value) == f"{kept} {reason}: {FIX}"


def test_an_agents_placeholder_open_to_others_or_behind_a_link_is_refused(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "lnk"
    placeholder_for(_agent_policy(settings))
    kept = settings / "sandbox" / "agents" / "main" / "model-placeholder"
    kept.chmod(0o644)
    with pytest.raises(ModelEnvError) as caught:
        placeholder_for(_agent_policy(settings))
    assert str(caught.value) == (f"{kept} must be yours and 0600 (it is 0644, owner "
                                 f"{os.geteuid()}): {FIX}")
    kept.unlink()
    elsewhere = tmp_path / "chosen"
    elsewhere.write_text(PLACEHOLDER)
    elsewhere.chmod(0o600)
    kept.symlink_to(elsewhere)
    with pytest.raises(ModelEnvError) as caught:
        placeholder_for(_agent_policy(settings))
    assert str(caught.value).startswith(f"{kept} cannot be opened (")
    # A link where the agent's folder goes is refused too, and nothing is made behind it.
    kept.unlink()
    (settings / "sandbox" / "agents" / "main").rmdir()
    target = tmp_path / "target"
    target.mkdir(mode=0o700)
    (settings / "sandbox" / "agents" / "main").symlink_to(target)
    with pytest.raises(ModelEnvError) as caught:
        placeholder_for(_agent_policy(settings))
    assert str(caught.value).startswith(
        f"{settings}/sandbox/agents/main is not a folder (a link or a file is there); refused")
    assert list(target.iterdir()) == []
    (settings / "sandbox" / "agents").chmod(0o755)
    with pytest.raises(ModelEnvError, match="must be yours and 0700"):
        placeholder_for(_agent_policy(settings, "fresh"))


# -- real sandboxes ---------------------------------------------------------------------------

# What a harness may hold when it starts a sandbox: keys of named and unnamed providers,
# a custom header carrying one, routes around the verb.
HARNESS = {
    "ANTHROPIC_API_KEY": "sk-ant-REALKEY-0001",
    "ANTHROPIC_AUTH_TOKEN": "sk-ant-oat-REALKEY-0002",
    "ANTHROPIC_CUSTOM_HEADERS": "X-Api-Key: sk-ant-REALKEY-0003",
    "ANTHROPIC_PROFILE": "work",
    "GOOGLE_API_KEY": "AIzaSy-REALKEY-0004-abcdefgh",
    "GOOGLE_GENAI_USE_VERTEXAI": "true",
    "OPENAI_ORG_ID": "org-0005",
    "OPENROUTER_API_KEY": "sk-or-v1-REALKEY-0006",
    "AZURE_OPENAI_API_KEY": "REALKEY-0007-abcdefghijklmnop",
    "LNK_PLACEHOLDER": "lnk-" + "f" * 40,
}
DUMP = ("env; echo ==; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\"; done; "
        "echo ==; tr '\\0' ' ' < /proc/self/cmdline")


def _dump(run_sandbox: RunSandbox, spec: Path, env: dict[str, str]
          ) -> tuple[dict[str, str], str, str]:
    result = run_sandbox(spec, "sh", "-c", DUMP, env=env)
    assert result.returncode == 0, result.stderr
    first = result.stdout.split("==\n")[0]
    variables = dict(line.split("=", 1) for line in first.splitlines() if "=" in line)
    return variables, result.stdout, result.stderr


def test_V2_the_sandbox_holds_base_urls_and_the_placeholder_and_no_real_key(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    spec = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n'
                      '[verbs]\nmodel = ["anthropic", "openai", "gemini"]\n')
    variables, everything, stderr = _dump(run_sandbox, spec, {**sandbox_env, **HARNESS})
    placeholder = variables["ANTHROPIC_API_KEY"]
    assert is_placeholder(placeholder) and placeholder != HARNESS["LNK_PLACEHOLDER"]
    assert {name: value for name, value in variables.items()
            if name.startswith(("ANTHROPIC", "OPENAI", "GOOGLE", "GEMINI", "OPENROUTER",
                                "AZURE", "LNK_PLACEHOLDER", "NODE_USE"))} == {
        "ANTHROPIC_BASE_URL": f"{BASE}/anthropic", "ANTHROPIC_API_KEY": placeholder,
        "OPENAI_BASE_URL": f"{BASE}/openai/v1", "OPENAI_API_KEY": placeholder,
        "GOOGLE_GEMINI_BASE_URL": f"{BASE}/gemini", "GEMINI_API_KEY": placeholder,
    }
    # Nowhere in the sandbox: not in the program's environment, not in any process's
    # /proc/*/environ, not in its argv.
    assert "REALKEY" not in everything
    assert "HTTP_PROXY" not in variables  # network "none": the verb alone
    assert stderr.count("looked like real keys") == 1
    assert "REALKEY" not in stderr
    assert ("ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN, ANTHROPIC_CUSTOM_HEADERS, "
            "AZURE_OPENAI_API_KEY, GOOGLE_API_KEY, OPENROUTER_API_KEY looked like real keys"
            ) in stderr


def _curl(base_variable: str, key_header: str, path: str) -> str:
    return (f'curl -s -m 20 -w "\\nSTATUS=%{{http_code}}\\n" "${base_variable}{path}" '
            f'-H "{key_header}" '
            '-H "content-type: application/json" '
            '-d \'{"model":"m","max_tokens":1,"messages":[]}\'')


def _answers(stdout: str) -> list[tuple[str, str]]:
    """(status, the body's lines joined) of each call, in order; a verb's refusal is one
    line of JSON, read as its error's message."""
    import json

    found: list[tuple[str, str]] = []
    body: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("STATUS="):
            text = " ".join(body)
            if text.startswith('{"type":"error"'):
                text = json.loads(text)["error"]["message"]
            found.append((line.removeprefix("STATUS="), text))
            body = []
        elif line.strip():
            body.append(line.strip())
    return found


def test_V2_the_proxy_at_the_base_url_knows_the_sandboxs_placeholder(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """With network "none", the proxy runs for the verb: the placeholder in the
    program's environment is the one the proxy was given (no secret is set, so an
    admitted call says which secret is missing), and a made-up key is refused."""
    spec = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n[verbs]\nmodel = "anthropic"\n')
    script = "; ".join([
        _curl("ANTHROPIC_BASE_URL", "x-api-key: $ANTHROPIC_API_KEY", "/v1/messages"),
        _curl("ANTHROPIC_BASE_URL", "x-api-key: sk-ant-guess", "/v1/messages"),
    ])
    result = run_sandbox(spec, "sh", "-c", script, env={**sandbox_env, **HARNESS})
    assert result.returncode == 0, result.stderr
    # Said at start, on stderr: which provider has no key yet, and the fix.
    assert ("lnk-sandbox: the model verb has no key for anthropic yet: its calls are refused "
            "until you set one (its value on standard input: lnk-sandbox secret set "
            "anthropic)") in result.stderr.splitlines()
    assert _answers(result.stdout) == [
        ("403", "no usable key for anthropic: no secret named anthropic (set it with: "
                "lnk-sandbox secret set anthropic)"),
        ("401", "the call carried a key that is not this sandbox's placeholder")]


def test_V2_with_the_proxy_variables_node_is_told_to_use_them_and_the_verb_answers(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """mode = "proxy": the SDK's call to the base URL goes to the proxy's own address
    directly (NO_PROXY names loopback), and a client that ignores NO_PROXY sends it in
    absolute form through HTTP_PROXY (curl's `--noproxy ''`): both reach the verb."""
    spec = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n'
                      '[network]\nmode = "proxy"\nhosts = ["example.com"]\n'
                      '[verbs]\nmodel = ["openai"]\n')
    call = _curl("OPENAI_BASE_URL", "Authorization: Bearer $OPENAI_API_KEY",
                 "/chat/completions")
    script = ('echo "$NODE_USE_ENV_PROXY $HTTP_PROXY $NO_PROXY $OPENAI_BASE_URL"; '
              + call + "; " + call.replace("curl ", "curl --noproxy '' ", 1))
    result = run_sandbox(spec, "sh", "-c", script, env={**sandbox_env, **HARNESS})
    assert result.returncode == 0, result.stderr
    first, _, rest = result.stdout.partition("\n")
    assert first == f"1 http://127.0.0.1:3128 localhost,127.0.0.1,::1 {BASE}/openai/v1"
    assert _answers(rest) == 2 * [("403", "no usable key for openai: no secret named openai "
                                          "(set it with: lnk-sandbox secret set openai)")]


def test_V2_an_agents_placeholder_survives_runs_and_a_runs_does_not(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    lnk_home: Path, tmp_path: Path,
) -> None:
    (lnk_home / "agents" / "main").mkdir(parents=True)
    agent = write_spec('[agent]\nname = "main"\n[verbs]\nmodel = "openrouter"\n')
    plain = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n[verbs]\nmodel = "openrouter"\n')
    kept = lnk_home / "sandbox" / "agents" / "main" / "model-placeholder"
    # The agent's sandbox cannot see where its placeholder is kept, nor change it.
    look = (f'echo "$OPENROUTER_API_KEY"; '
            f'test -e "{kept}" && echo SEEN; echo x > "{kept}" 2>/dev/null && echo WROTE; '
            f'ls -A "{lnk_home}/agents/main"')
    seen = []
    for _ in range(2):
        result = run_sandbox(agent, "sh", "-c", look, env=sandbox_env)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[1:] == [], result.stdout
        seen.append(lines[0])
    assert seen[0] == seen[1] == kept.read_text()
    runs = {run_sandbox(plain, "sh", "-c", 'echo "$OPENROUTER_API_KEY"', env=sandbox_env
                        ).stdout.strip() for _ in range(2)}
    assert len(runs) == 2 and seen[0] not in runs
    assert all(is_placeholder(text) for text in (*runs, *seen))


def test_a_tampered_agent_placeholder_refuses_the_run_and_nothing_runs(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    lnk_home: Path, tmp_path: Path,
) -> None:
    (lnk_home / "agents" / "main").mkdir(parents=True)
    kept = lnk_home / "sandbox" / "agents" / "main" / "model-placeholder"
    kept.parent.mkdir(parents=True, mode=0o700)
    kept.parent.parent.chmod(0o700)
    kept.write_text("lnk-chosen-by-someone")
    kept.chmod(0o600)
    marker = tmp_path / "MARKER"
    spec = write_spec('[agent]\nname = "main"\n[verbs]\nmodel = "anthropic"\n')
    result = run_sandbox(spec, "sh", "-c", f"touch {marker}", env=sandbox_env)
    assert result.returncode == EXIT_SANDBOX_FAILED
    # (after the agent's first-run notice: its own folder's dot files are open)
    assert result.stderr.strip().splitlines()[-1:] == [
        f"lnk-sandbox: {kept} does not hold a placeholder (lnk- and 40 lowercase hex "
        f"characters): {FIX}"]
    assert not marker.exists()


def test_the_wrap_line_carries_the_model_verb_never_a_placeholder(
    write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    """The kept line carries the verb and the agent, never a placeholder."""
    from tests.conftest import LNK_SANDBOX

    spec = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n[network]\nserver_tools = true\n'
                      '[verbs]\nmodel = ["gemini", "anthropic"]\n')
    result = subprocess.run([LNK_SANDBOX, "wrap", "--spec", str(spec), "--json", "--", "true"],
                            env={**sandbox_env, **HARNESS}, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    line = json.loads(result.stdout)
    words = list(line)
    assert words[words.index("--model") + 1] == "gemini"
    assert "--server-tools" in words
    assert not any(word.startswith("lnk-") and len(word) == 44 for word in words)


# -- check -----------------------------------------------------------------------------------


def _check(sandbox_env: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    from tests.conftest import LNK_SANDBOX

    return subprocess.run([LNK_SANDBOX, "check", *options], env=sandbox_env,
                          capture_output=True, text=True, check=False)


def _set_secret(sandbox_env: dict[str, str], name: str, value: str) -> None:
    from tests.conftest import LNK_SANDBOX

    subprocess.run([LNK_SANDBOX, "secret", "set", name], input=value, env=sandbox_env,
                   capture_output=True, text=True, check=True)


def test_check_says_which_model_verbs_a_spec_turns_on_and_which_has_no_key(
    write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    _set_secret(sandbox_env, "anthropic", "sk-ant-REALKEY-0001")
    _set_secret(sandbox_env, "telegram", "1:REALKEY")
    spec = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n'
                      '[verbs]\nmodel = ["anthropic", "openai"]\n')
    result = _check(sandbox_env, "--spec", str(spec))
    assert result.returncode == 0, result.stderr
    block = result.stdout.split("\nmodel verb: ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block == [
        "keys in Link's secrets (names only): set for anthropic; not set: openai, gemini, "
        "openrouter",
        f"  {spec}: on for anthropic, openai; each key is the secret of the provider's name, "
        "added at the proxy (the sandbox holds a placeholder, and no provider's key)",
        "  WARNING: no secret named openai yet: its calls are refused until it is set "
        "(lnk-sandbox secret set openai)",
        "  server-side tools: removed (by allow-list; [network] server_tools = true keeps "
        "them)",
    ]
    assert "REALKEY" not in result.stdout + result.stderr
    found = json.loads(_check(sandbox_env, "--spec", str(spec), "--json").stdout)
    assert found["model_verb"] == {
        "providers": ["anthropic", "openai", "gemini", "openrouter"], "keys_set": ["anthropic"],
        "spec": str(spec), "on": ["anthropic", "openai"], "no_key_yet": ["openai"],
        "server_tools": False}
    model = next(item for item in found["protections"]
                 if item["protection"].startswith("the model verb"))
    assert model["in_force"] is True


def test_check_says_when_server_tools_are_kept_and_when_no_verb_is_on(
    write_spec: WriteSpec, sandbox_env: dict[str, str], tmp_path: Path,
) -> None:
    kept = write_spec('[network]\nserver_tools = true\n[verbs]\nmodel = "gemini"\n')
    result = _check(sandbox_env, "--spec", str(kept))
    assert ("  server-side tools: KEPT ([network] server_tools = true): the provider may "
            "search, fetch and run code on its side") in result.stdout.splitlines()
    assert "  WARNING: no secret named gemini yet" in result.stdout
    off = write_spec(f'[files]\nread = {toml_list(tmp_path)}\n')
    assert f"  {off}: off (no [verbs] model)" in _check(
        sandbox_env, "--spec", str(off)).stdout.splitlines()
    bad = write_spec('[verbs]\nmodel = "bing"\n')
    refused = _check(sandbox_env, "--spec", str(bad))
    assert refused.returncode == EXIT_SANDBOX_FAILED
    assert "verbs.model: 'bing' is not a provider the model verb knows" in refused.stderr


def test_the_example_spec_gives_the_verbs_base_urls(
    run_sandbox: RunSandbox, sandbox_env: dict[str, str],
) -> None:
    examples = Path(__file__).resolve().parent.parent / "examples"
    result = run_sandbox(examples / "model.toml", "sh", "-c",
                         'echo "$ANTHROPIC_BASE_URL $OPENAI_BASE_URL $ANTHROPIC_API_KEY"',
                         cwd=examples, env={**sandbox_env, **HARNESS})
    assert result.returncode == 0, result.stderr
    anthropic, openai, key = result.stdout.split()
    assert (anthropic, openai) == (f"{BASE}/anthropic", f"{BASE}/openai/v1")
    assert is_placeholder(key)


def test_V2_learn_keeps_the_model_verb_and_so_holds_no_real_key(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """`learn` ran under a copy of the policy made field by field, which had dropped the
    wire and would have dropped the model verb: the program then held the harness's keys."""
    out = tmp_path / "out"
    out.mkdir()
    spec = write_spec(f'[files]\nwrite = {toml_list(out)}\n[verbs]\nmodel = "anthropic"\n'
                      '[commands]\nrun = ["/usr/bin/env"]\n')
    result = run_sandbox(spec, "sh", "-c", f'env > "{out}/env"', env={**sandbox_env, **HARNESS},
                         verb="learn")
    assert result.returncode == 0, result.stderr
    seen = (out / "env").read_text()
    assert "REALKEY" not in seen
    assert f"ANTHROPIC_BASE_URL={BASE}/anthropic\n" in seen
    assert re.search(r"^ANTHROPIC_API_KEY=lnk-[0-9a-f]{40}$", seen, re.MULTILINE)


def test_a_trust_variable_the_sandbox_cannot_read_is_not_passed_in(
    run_sandbox: RunSandbox, write_spec: WriteSpec, sandbox_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A harness's SSL_CERT_FILE outside the grants made every SDK fail inside
    (FileNotFoundError while building its client); one inside the grants is kept."""
    hidden, shown = tmp_path / "hidden", tmp_path / "shown"
    hidden.mkdir()
    shown.mkdir()
    (hidden / "ca.pem").write_text("x")
    (shown / "ca.pem").write_text("x")
    spec = write_spec(f'[files]\nread = {toml_list(shown)}\n[verbs]\nmodel = "anthropic"\n')
    result = run_sandbox(spec, "/usr/bin/env", env={
        **sandbox_env, "SSL_CERT_FILE": str(hidden / "ca.pem"),
        "REQUESTS_CA_BUNDLE": str(shown / "ca.pem")})
    assert result.returncode == 0, result.stderr
    inside = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert "SSL_CERT_FILE" not in inside
    assert inside["REQUESTS_CA_BUNDLE"] == str(shown / "ca.pem")
    assert ("lnk-sandbox: SSL_CERT_FILE names a file the sandbox cannot read; not passed in "
            "(the proxy outside still uses it)") in result.stderr


def test_keys_not_set_reads_the_store_by_name_where_the_store_keeps_it(tmp_path: Path) -> None:
    """The start's "no key yet" line reads Link's store by name (its folder's path
    written twice, so pinned here), a link or a folder is no key."""
    from lnk_common.secrets import SECRETS_FOLDER, write_secret
    from lnk_wrap import model_env

    assert model_env._STORE == SECRETS_FOLDER
    settings = str(tmp_path)
    assert model_env.keys_not_set(settings, ("anthropic", "openai")) == ["anthropic", "openai"]
    write_secret(settings, "anthropic", b"sk-ant-x")
    folder = tmp_path.joinpath(*SECRETS_FOLDER)
    (folder / "openai").symlink_to(folder / "anthropic")
    (folder / "gemini").mkdir()
    assert model_env.keys_not_set(settings, ("anthropic", "openai", "gemini")) == [
        "openai", "gemini"]
