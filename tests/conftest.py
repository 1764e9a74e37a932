"""Shared fixtures: a fresh Link settings folder, spec files, and the real sandbox.

Every sandbox test runs the real thing: the installed `lnk-sandbox` beside this
interpreter (or the checkout's bin/), real bubblewrap, the real kernel. Nothing here
skips: a missing bubblewrap or Landlock fails the run (`test_machine.py` says which).
Also here: the one fuzz profile (`fuzz`), polling for a condition (`wait_until`), and
which modules depend on the user (the `depends_on_user` marker; docs/decisions/0038).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
_BESIDE = Path(sys.executable).parent / "lnk-sandbox"
LNK_SANDBOX = str(_BESIDE) if _BESIDE.exists() else str(ROOT / "bin" / "lnk-sandbox")

# A sandboxed command in a test that takes longer than this is hung, not slow.
SANDBOX_TIMEOUT_SECONDS = 30

T = TypeVar("T")

# -- fuzzing: one set of Hypothesis settings for every property ---------------------------
#
# The profile is chosen by LNK_FUZZ: "ci" (the default: bin/test and .ci/run), "dev" (a
# quick look while editing) or "deep" (a machine with time: `LNK_FUZZ=deep bin/test -k
# fuzz`). A profile sets the examples per unit of weight; a property that explores a larger
# space asks for more units with `@fuzz(weight)`, never for other settings.
# No deadline: an example that takes long on a busy machine is not a bug (test_guests's
# took 524 ms against Hypothesis's 200 ms while other work ran), and a hang is caught by the
# timeouts the tests already have. For the same reason too_slow is no failure.
FUZZ_EXAMPLES = {"dev": 25, "ci": 100, "deep": 2000}
for _name, _examples in FUZZ_EXAMPLES.items():
    settings.register_profile(_name, max_examples=_examples, deadline=None, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
FUZZ_PROFILE = os.environ.get("LNK_FUZZ") or "ci"
if FUZZ_PROFILE not in FUZZ_EXAMPLES:
    raise pytest.UsageError(f"LNK_FUZZ={FUZZ_PROFILE}: not one of {', '.join(FUZZ_EXAMPLES)}")
settings.load_profile(FUZZ_PROFILE)


def fuzz(weight: int = 1) -> settings:
    """The profile's settings with `weight` times its examples (a property over a larger
    space of inputs asks for more); everything else is the profile's."""
    return settings(max_examples=weight * FUZZ_EXAMPLES[FUZZ_PROFILE])


# -- waiting: poll the condition, never sleep in its stead ---------------------------------

# How often a condition is looked at: at once, then ever less often up to a tenth of a
# second (a look may itself start a process: `lnk-sandbox asks --json`, tmux).
WAIT_FIRST_PAUSE_SECONDS = 0.005
WAIT_LONGEST_PAUSE_SECONDS = 0.1


def wait_until(condition: Callable[[], T | None], what: str,
               timeout: float = SANDBOX_TIMEOUT_SECONDS) -> T:
    """Look at `condition` until it holds (is truthy) and return what it gave; fail after
    `timeout` seconds saying what was waited for. A busy machine makes a wait longer, never
    a test wrong, as a fixed sleep would."""
    deadline = time.monotonic() + timeout
    pause = WAIT_FIRST_PAUSE_SECONDS
    while True:
        held = condition()
        if held:
            return held
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(pause)
        pause = min(2 * pause, WAIT_LONGEST_PAUSE_SECONDS)


def ended(pid: int) -> bool:
    """Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet):
    what a test waits for after killing one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in (b"Z", b"X")


# -- which tests depend on the user --------------------------------------------------------
#
# .ci/run runs every test once as root, and runs again, as an ordinary user, only those
# marked `depends_on_user`: what behaves otherwise for root and for an ordinary user (a
# sandbox's start: bubblewrap, user and network namespaces, Landlock, seccomp as loaded;
# files whose modes or owners decide: the settings folder, secrets, guests; the test
# network's sockets from inside a sandbox). The rule is by module and default-deny: every
# module is marked but those listed here, which test pure code or processes on loopback
# that start no sandbox and decide nothing by a file's owner or mode. A new module is
# therefore run as both users until someone lists it here with its reason.
NOT_USER_DEPENDENT = {
    "test_additions": "a wire's additions file and the host rule: pure, fuzzed; files in tmp",
    "test_ask_dialog": "the asker's dialog (zenity on Xvfb, clicked by xdotool), started here: "
                       "no sandbox; the queue's owners and modes are test_ask's",
    "test_bodies": "the shared body reader and response stream over loopback sockets",
    "test_bwrap": "bubblewrap's argv planned from typed values (golden); no bwrap runs",
    "test_dead_code": "vulture over the product's source: no sandbox",
    "test_dns_core": "the DNS core: pure, fuzzed",
    "test_docs": "the docs against the code and the old notebook (git history): no sandbox",
    "test_endpoint_plan": "the endpoints' plan: pure",
    "test_filewrite": "a file's bytes read and written whole, on files in tmp",
    "test_gitconfig": "the gitconfig reader: pure, fuzzed",
    "test_gitdiscovery": "git's discovery read on folders in tmp; no sandbox",
    "test_imports": "the packages' layers (import-linter)",
    "test_lane": "the proxy's lane in this process, against hosts on loopback",
    "test_local_models": "the local-model filter (pure) and its relay on loopback",
    "test_messages": "the messages' table: pure",
    "test_macos": "the macOS profile: generated, golden-tested and evaluated here; no sandbox",
    "test_macos_log": "the macOS log reader against a fake `log` and `ps`; no sandbox",
    "test_macos_proxy": "the agent's proxy on a loopback TCP port, as a Mac runs it; no sandbox",
    "test_macos_run": "the Mac's parent: a stand-in sandbox-exec, the proxy on loopback",
    "test_mcpremote": "mcp-remote between real SDK clients and servers on loopback: no "
                      "sandbox, no settings folder (its secrets come in its environment)",
    "test_model_rules": "the model verb's rules: pure, fuzzed",
    "test_open_callback": "the sign-in callback's relay on loopback",
    "test_open_rules": "the open verb's rules: pure, fuzzed",
    "test_policy": "the policy and its argv: pure",
    "test_proxy_connection": "the proxy's connection machine: pure, playbooks and fuzzed",
    "test_proxy_linger": "the proxy in this process, refusing clients on loopback",
    "test_proxy_parsers": "the proxy's parsers: pure, fuzzed",
    "test_proxy_parsers_reference": "the proxy's parsers against reference parsers: pure",
    "test_response": "a body-less request's response, read one way: pure, fuzzed",
    "test_seccomp": "the seccomp filter's table and BPF, evaluated here; none is loaded",
    "test_secret_rules": "the secret verb's rules: pure, fuzzed",
    "test_secret_rules_clients": "the secret rules against real client libraries' requests",
    "test_secret_rules_telegram_reading": "the Telegram reading rules: pure, fuzzed",
    "test_shape": "an AST walk over the product's functions",
    "test_standins": "the dot files' stand-ins: pure",
    "test_streams": "the proxy's connection protocols over loopback sockets, in this process",
    "test_toml": "the vendored TOML reader against tomllib: pure, fuzzed (its one bad spec is "
                 "refused before any sandbox starts)",
    "test_vendor": "the vendored tomllib against its upstream",
    "test_wire_ends": "the splice threads' ends and a signal, in this process",
}


# -- the longest modules first --------------------------------------------------------------
#
# .ci/run's workers take a module whole (--dist loadfile) as they come free, in the order of
# the collection (--no-loadscope-reorder: xdist's own order, most tests first, handed
# test_verbs_model's 13 tests and 77 s out among the last, and a worker ran it alone at the
# end). The modules marked depends_on_user go first (CI's user run waits for root's to end
# them: below), then the others; in each part these go first, longest first: the modules
# of 10 s or more in CI's runs (seconds as root / as the ordinary user, c682e5b, record
# 0038), the rest following in the collection's order. A module missing here costs
# seconds at the end, never a test.
LONGEST_FIRST = (
    "test_verbs_model",  # 77 / 57
    "test_harnesses",  # 77 / 67
    "test_guests_ssh",  # 62 / 46
    "test_ask",  # 49 / 48
    "test_ask_dialog",  # 45 / -
    "test_secret_verb_sandbox",  # 41 / 27
    "test_log_bounds",  # 33 / 39
    "test_endpoints",  # 35 / 36
    "test_local_models_sandbox",  # 30 / 29
    "test_local_models",  # 27 / -
    "test_allow",  # 25 / 23
    "test_open_verb",  # 24 / 24
    "test_wire",  # 25 / 23
    "test_toml",  # 21 / -
    "test_errors_attacks",  # 19 / 15
    "test_mcpremote",  # 18 / -
    "test_mcp_verb",  # 16 / 17
    "test_wire_controls",  # 17 / 17
    "test_secret_rules_telegram_reading",  # 14 / -
    "test_secret_rules",  # 13 / -
    "test_proxy_parsers_reference",  # 12 / -
    "test_verbs_frame",  # 11 / 12
    "test_unix_sockets",  # 11 / 12
    "test_learn_network",  # 10 / 11
)
_RANK = {name: rank for rank, name in enumerate(LONGEST_FIRST)}

# A name here that is no test module (renamed, removed) would quietly mark or order nothing.
_STALE = sorted(name for name in (*NOT_USER_DEPENDENT, *LONGEST_FIRST)
                if not (Path(__file__).parent / f"{name}.py").is_file())
if _STALE:
    raise pytest.UsageError(f"tests/conftest.py NOT_USER_DEPENDENT or LONGEST_FIRST names no "
                            f"test module: {_STALE}")


def _module_name(item: pytest.Item) -> str | None:
    module = getattr(item, "module", None)
    return None if module is None else str(module.__name__).rpartition(".")[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = _module_name(item)
        if name is None or name not in NOT_USER_DEPENDENT:
            item.add_marker(pytest.mark.depends_on_user)
    # A stable sort (each module's tests stay together and in their order): the marked
    # modules first (below), each part longest first.
    items.sort(key=lambda item: (_module_name(item) in NOT_USER_DEPENDENT,
                                 _RANK.get(_module_name(item) or "", len(_RANK))))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        _marked_from([item.nodeid for item in items])


# -- CI: when root's marked tests have all ended -------------------------------------------
#
# .ci/run starts the ordinary user's run once root's run has ended every test marked
# depends_on_user (their teardowns too: no sandbox, server or screen of theirs is left),
# while root's run goes on with the rest (pure code and loopback, none of which starts a
# sandbox or reads a file's owner). It names a file in LNK_CI_MARKED_ENDED, which the run
# (its controller under pytest-xdist, which sees every test's reports) makes then.
_MARKED_ENDED = os.environ.get("LNK_CI_MARKED_ENDED", "")
_marked_left: set[str] | None = None


def _marked_from(nodeids: list[str]) -> None:
    global _marked_left
    if _MARKED_ENDED and _marked_left is None:
        _marked_left = {nodeid for nodeid in nodeids
                        if Path(nodeid.partition("::")[0]).stem not in NOT_USER_DEPENDENT}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    _marked_from(ids)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    global _marked_left
    if _marked_left is None or report.when != "teardown":
        return
    _marked_left.discard(report.nodeid)
    if not _marked_left:
        Path(_MARKED_ENDED).touch()
        _marked_left = None


@pytest.fixture
def lnk_home(tmp_path: Path) -> Path:
    home = tmp_path / "lnk-settings"
    home.mkdir()
    return home


@pytest.fixture
def sandbox_env(lnk_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["LNK_HOME"] = str(lnk_home)
    return env


WriteSpec = Callable[[str], Path]


@pytest.fixture
def write_spec(tmp_path: Path) -> Iterator[WriteSpec]:
    count = 0

    def write(text: str) -> Path:
        nonlocal count
        count += 1
        path = tmp_path / f"spec{count}.toml"
        path.write_text(text)
        return path

    yield write


RunSandbox = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run_sandbox(sandbox_env: dict[str, str], tmp_path: Path) -> RunSandbox:
    """run_sandbox(spec, *command, cwd=None, env=None, verb="run") → CompletedProcess."""

    def run(spec: Path, *command: str, cwd: Path | None = None,
            env: dict[str, str] | None = None, verb: str = "run",
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [LNK_SANDBOX, verb, "--spec", str(spec), "--", *command],
            cwd=str(cwd or tmp_path), env=env or sandbox_env, capture_output=True, text=True,
            timeout=SANDBOX_TIMEOUT_SECONDS, input=stdin, check=False,
        )

    return run


def toml_list(*paths: Path | str) -> str:
    """A TOML array of path strings (json's quoting is TOML's for these)."""
    import json

    return json.dumps([str(path) for path in paths])


@pytest.fixture(scope="session")
def testnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Real test hosts in network namespaces (tests/testnet.py). Made here when run as
    root; the ordinary-user run of .ci/run gets them made by root beforehand, named by
    LNK_TEST_NET. Never skipped: without either, the wire's tests fail and say why."""
    shared = os.environ.get("LNK_TEST_NET", "")
    if shared:
        if not (Path(shared) / "ready").exists():
            pytest.fail(f"LNK_TEST_NET={shared} holds no ready test network")
        yield Path(shared)
        return
    if os.geteuid() != 0:
        pytest.fail("the wire's tests make network namespaces for their test hosts: run them "
                    "as root, or with LNK_TEST_NET from `.ci/run`")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("under pytest-xdist each worker would make the test hosts again, on the "
                    "same addresses: make them once (`python -m tests.testnet up DIR`, as "
                    ".ci/run does) and name them in LNK_TEST_NET")
    from tests import testnet as network

    state = tmp_path_factory.mktemp("testnet")
    network.up(state)
    try:
        yield state
    finally:
        network.down(state)


def start_proxy(settings: Path, *options: str, stderr: int | None = subprocess.DEVNULL
                ) -> tuple[subprocess.Popen[bytes], int]:
    """A standalone proxy (the launcher's argv with `--listen`) on a free port of
    127.0.0.1, once it takes connections; killed if it ends first or takes longer than
    20 s to start. The caller ends it (terminate, wait)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [str(Path(LNK_SANDBOX).with_name("lnk-sandbox-proxy")), "--settings", str(settings),
         *options, "--listen", f"127.0.0.1:{port}"], stderr=stderr)
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                process.wait()
                raise AssertionError(f"the proxy did not start ({process.returncode})") from None
            time.sleep(0.05)


def end_run(run: subprocess.Popen[str]) -> None:
    """Kill a sandbox a test started, if it is still running (a failed test must not
    leave one behind)."""
    if run.poll() is None:
        run.kill()
        run.communicate()


# The venv's own interpreter (not its real path: the SDKs and clients are the venv's), and
# the venv, which a spec grants so a client imports inside a sandbox.
VENV_PYTHON = str(Path(LNK_SANDBOX).parent / "python")
VENV = Path(VENV_PYTHON).parent.parent


def run_out_script(spec: Path, env: dict[str, str], tmp_path: Path, source: str,
                   *args: str, timeout: float = SANDBOX_TIMEOUT_SECONDS,
                   ) -> tuple[object, subprocess.CompletedProcess[str]]:
    """Run `source` (which fills a dict `out`) with the venv's Python inside a sandbox of
    `spec`; `out` (printed as JSON on the last line of its output) and the completed run.
    A script that runs longer than one sandbox's start and call says why beside its
    `timeout`."""
    import json
    import secrets

    script = tmp_path / f"script{secrets.token_hex(4)}.py"
    script.write_text(source + "\nprint(json.dumps(out))\n")
    done = subprocess.run([LNK_SANDBOX, "run", "--spec", str(spec), "--", VENV_PYTHON,
                           str(script), *args], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done
    lines = done.stdout.strip().splitlines()
    assert lines, done
    return json.loads(lines[-1]), done


def wire_log_of(env: dict[str, str], wire: str) -> str:
    """The wire's log in the settings of `env` (LNK_HOME), or "" before any line."""
    path = Path(env["LNK_HOME"]) / "sandbox" / "wires" / wire / "log"
    return path.read_text() if path.exists() else ""


def call_lines(log: str) -> str:
    """A wire's log without the launcher's run lines (each run's `started` and `exited`,
    lnk_wrap.runs): the calls' lines only."""
    return "".join(line for line in log.splitlines(keepends=True)
                   if line.split("\t")[1:2] not in (["started"], ["exited"]))


def answer_next(env: dict[str, str], answer: str, seen: set[str]) -> dict[str, str]:
    """Wait for a new question in `lnk-sandbox asks --json` and answer it; the question."""
    import json
    import time

    deadline = time.monotonic() + SANDBOX_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        listed = subprocess.run([LNK_SANDBOX, "asks", "--json"], env=env, capture_output=True,
                                text=True, check=False, timeout=SANDBOX_TIMEOUT_SECONDS)
        waiting = [ask for ask in json.loads(listed.stdout or '{"asks": []}')["asks"]
                   if ask["id"] not in seen]
        if waiting:
            seen.add(waiting[0]["id"])
            subprocess.run([LNK_SANDBOX, "answer", waiting[0]["id"], answer], env=env,
                           check=True, capture_output=True, timeout=SANDBOX_TIMEOUT_SECONDS)
            return dict(waiting[0])
        time.sleep(0.1)
    raise AssertionError("no question waited")
