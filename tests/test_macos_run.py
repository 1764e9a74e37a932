"""`run --platform macos`'s parent (lnk_wrap.seatbelt_run), as far as Linux can run it.

No Seatbelt exists here, so /usr/bin/sandbox-exec is a fake (only for what
cannot exist here: it checks the line's shape, keeps the profile for the test, and runs
the command unconfined); everything else is real: the agent's proxy on its port of
127.0.0.1 started from its argv, the program's environment, the URL secret's verb to a
local model runtime, the log reader against a fake `log`, the status.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import h11
import pytest

from lnk_common.policy import Policy
from lnk_wrap.seatbelt import MacosError
from lnk_wrap.seatbelt_run import run_macos

from .conftest import VENV_PYTHON
from .seatbelt_eval import evaluate

FAKE_SANDBOX_EXEC = """#!/bin/sh
# A fake /usr/bin/sandbox-exec: the line's shape checked, the profile kept.
[ "$1" = "-p" ] || exit 71
printf '%s' "$2" > "$FAKE_PROFILE"
shift 2
: > "$FAKE_PARAMETERS"
while [ "$1" != "--" ]; do
  case "$1" in -D*) printf '%s\\n' "${1#-D}" >> "$FAKE_PARAMETERS"; shift ;; *) exit 72 ;; esac
done
shift
exec "$@"
"""
FAKE_LOG = """#!/bin/sh
while [ ! -s "$FAKE_PID" ]; do sleep 0.01; done
echo 'Filtering the log data using "…"'
pid=$(cat "$FAKE_PID")
echo "2026-12-04 23:30:00.000 E  kernel[0:1] (Sandbox) Sandbox: python3($pid) deny(1) \
process-exec* /usr/bin/forbidden"
: > "$FAKE_PRINTED"
exec sleep 600
"""
# The program's first lines: its pid given to the fake `log`, then wait until it printed.
WAIT_FOR_LOG = """
import os, time
open(os.environ["FAKE_PID"], "w").write(str(os.getpid()))
while not os.path.exists(os.environ["FAKE_PRINTED"]):
    time.sleep(0.01)
"""
PROGRAM = WAIT_FOR_LOG + """
import json, sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
url = os.environ["LNK_SANDBOX_URL"] + "/local/" + sys.argv[1] + "/api/tags"
body = opener.open(url, timeout=20).read()
print(json.dumps({"body": body.decode(), "proxy": os.environ.get("HTTP_PROXY"),
                  "url": os.environ["LNK_SANDBOX_URL"]}))
sys.exit(7)
"""


class _Runtime(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # http.server's name
        body = b'{"models":["lnk"]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def runtime() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Runtime)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _script(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def test_the_macs_parent_runs_the_line_with_its_proxy_and_names_refusals(
        tmp_path: Path, runtime: int, capfd: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "lnk"
    settings.mkdir()
    with socket.socket() as probe:  # the agent main's port must be free for this test
        if probe.connect_ex(("127.0.0.1", 40781)) == 0:
            pytest.fail("127.0.0.1:40781 is taken on this machine; the test needs it")
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    fake = _script(bin_folder / "sandbox-exec", FAKE_SANDBOX_EXEC)
    _script(bin_folder / "log", FAKE_LOG)
    policy = Policy(settings=str(settings), agent="main", name="main", network="none",
                    local_models=(runtime,), commands=(os.path.realpath(VENV_PYTHON),),
                    site_packages=str(Path(h11.__file__).resolve().parent.parent))
    env = {"PATH": f"{bin_folder}:{os.environ['PATH']}", "HOME": str(tmp_path),
           **{name: str(tmp_path / name.lower()) for name in (
               "FAKE_PROFILE", "FAKE_PARAMETERS", "FAKE_PID", "FAKE_PRINTED")}}
    status = run_macos(policy, [VENV_PYTHON, "-c", PROGRAM, str(runtime)], env,
                       sandbox_exec=fake)
    out, err = capfd.readouterr()
    assert status == 7, err
    found = json.loads(out.strip().splitlines()[-1])
    assert found["body"] == '{"models":["lnk"]}'  # through the proxy's URL secret verb
    assert found["url"].startswith("http://127.0.0.1:40781/_link/s/")
    assert "lnk-sandbox: [commands] refused /usr/bin/forbidden (Seatbelt's report)" in err
    # The profile sandbox-exec was given: the proxy's port, the runtime's closed.
    parameters = dict(line.split("=", 1) for line in
                      (tmp_path / "fake_parameters").read_text().splitlines())
    rules = evaluate((tmp_path / "fake_profile").read_text(), parameters)
    assert rules.may_connect(40781) and not rules.may_connect(runtime)
    assert not rules.may_run("/usr/bin/forbidden")
    with socket.socket() as probe:  # the proxy is gone with the run
        assert probe.connect_ex(("127.0.0.1", 40781)) != 0


def test_a_taken_port_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    settings = tmp_path / "lnk"
    settings.mkdir()
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT only
    try:
        holder.bind(("127.0.0.1", 40781))
    except OSError:
        holder.close()
        pytest.fail("127.0.0.1:40781 is taken on this machine; the test needs it")
    holder.listen()
    try:
        bin_folder = tmp_path / "bin"
        bin_folder.mkdir()
        fake = _script(bin_folder / "sandbox-exec", FAKE_SANDBOX_EXEC)
        policy = Policy(settings=str(settings), agent="main", name="main", network="proxy")
        with pytest.raises(MacosError, match="40781, the proxy's port of this agent, is taken"):
            run_macos(policy, ["/bin/touch", str(tmp_path / "ran")], {"PATH": "/usr/bin:/bin"},
                      sandbox_exec=fake)
        assert not (tmp_path / "ran").exists()
    finally:
        holder.close()


def test_not_a_mac_says_so(tmp_path: Path) -> None:
    policy = Policy(settings=str(tmp_path))
    with pytest.raises(MacosError, match="this is not a Mac"):
        run_macos(policy, ["/bin/true"], {}, sandbox_exec=str(tmp_path / "none"))


def test_the_programs_environment_holds_no_placeholder_variable_of_the_proxys(
        tmp_path: Path) -> None:
    from lnk_wrap.seatbelt_run import environments

    policy = Policy(settings=str(tmp_path), name="w", network="none", models=("openai",))
    program, given = environments(policy, {"LNK_PLACEHOLDER": "x", "PATH": "/bin"}, 40791)
    assert "LNK_PLACEHOLDER" not in program and given["LNK_PLACEHOLDER"].startswith("lnk-")
    assert program["OPENAI_BASE_URL"] == "http://127.0.0.1:40791/_link/model/openai/v1"
    assert program["OPENAI_API_KEY"] == given["LNK_PLACEHOLDER"]


def test_run_platform_macos_on_this_machine_is_one_line_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """`lnk-sandbox run --platform macos` reaches the Mac's parent (run_macos); here,
    with no sandbox-exec, it says so in one line (125) and runs nothing; --summary, not
    built for macOS, is refused the same way."""
    import subprocess

    from .conftest import LNK_SANDBOX

    marker = tmp_path / "ran"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[files]\nread = ["{tmp_path}"]\nwrite = ["{tmp_path}"]\n')
    env = {**os.environ, "LNK_HOME": str(tmp_path / "settings")}
    for extra in ([], ["--summary", str(tmp_path / "summary.json")]):
        done = subprocess.run([LNK_SANDBOX, "run", "--platform", "macos", "--spec", str(spec),
                               *extra, "--", "/usr/bin/touch", str(marker)],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.returncode == 125 and done.stderr.count("\n") == 1, done
        assert "nothing ran" in done.stderr and "Traceback" not in done.stderr, done
        assert not marker.exists()


FAKE_LEARN_LOG = """#!/bin/sh
while [ ! -s "$FAKE_PID" ]; do sleep 0.01; done
pid=$(cat "$FAKE_PID")
for line in "allow process-exec* /usr/bin/git" "allow(1) process-exec* $FAKE_WRITTEN/tool" \
    "allow process-exec* /private/tmp/x" "allow process-exec* /usr/bin/listed" \
    "deny(1) process-exec* /usr/bin/refused" "allow process-exec* /usr/bin/git"; do
  echo "2026-12-05 02:00:00.000 E  kernel[0:1] (Sandbox) Sandbox: sh($pid) $line"
done
: > "$FAKE_PRINTED"
exec sleep 600
"""


def test_learn_platform_macos_offers_the_programs_seatbelt_reported(tmp_path: Path) -> None:
    """learn --platform macos: the profile allows every program with report; the parent
    reads the allowed reports of its run and offers them as Linux's learn does (each once;
    never one in a written or temp folder; a listed one not again; a refusal not at
    all)."""
    from lnk_wrap.learn import learn_macos

    settings = tmp_path / "lnk"
    settings.mkdir()
    written = "/Users/someone/out"  # a Mac's folder, as its reports name it; not in a temp one
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    fake = _script(bin_folder / "sandbox-exec", FAKE_SANDBOX_EXEC)
    _script(bin_folder / "log", FAKE_LEARN_LOG)
    policy = Policy(settings=str(settings), network="none", write=(written,),
                    commands=("/usr/bin/listed",))
    env = {"PATH": f"{bin_folder}:{os.environ['PATH']}", "HOME": str(tmp_path),
           "FAKE_WRITTEN": written,
           **{name: str(tmp_path / name.lower()) for name in (
               "FAKE_PROFILE", "FAKE_PARAMETERS", "FAKE_PID", "FAKE_PRINTED")}}
    found = learn_macos(policy, [VENV_PYTHON, "-c", WAIT_FOR_LOG], env,
                        sandbox_exec=fake)
    assert found.status == 0
    assert found.offered == ["/usr/bin/git"]
    assert [path for path, _ in found.refused] == [f"{written}/tool", "/private/tmp/x"]
    profile = (tmp_path / "fake_profile").read_text()
    assert "(allow process-exec* (with report))" in profile


def test_learn_platform_macos_on_this_machine_is_one_line_and_runs_nothing(
        tmp_path: Path) -> None:
    import subprocess

    from .conftest import LNK_SANDBOX

    marker = tmp_path / "ran"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[files]\nread = ["{tmp_path}"]\nwrite = ["{tmp_path}"]\n')
    env = {**os.environ, "LNK_HOME": str(tmp_path / "settings")}
    done = subprocess.run([LNK_SANDBOX, "learn", "--platform", "macos", "--spec", str(spec),
                           "--", "/usr/bin/touch", str(marker)],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 125 and done.stderr.count("\n") == 1, done
    assert "learn --platform macos: no /usr/bin/sandbox-exec: this is not a Mac" in done.stderr
    assert "nothing ran" in done.stderr and not marker.exists() and done.stdout == ""
