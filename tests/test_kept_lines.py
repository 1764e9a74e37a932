"""Kept lines: the line `wrap` prints, kept by a harness and run after what it names has
moved. Each way it goes stale is exit 125 and one line on stderr saying what moved and
to ask `wrap` again, never a traceback; a line whose install is as it was runs.

Real installs, not mocks: each test makes its own in tmp_path, the two layouts a line
meets. `installed`: a venv made with copies of the interpreter (so that the test can
remove or replace it), our packages and their libraries in its site-packages, the
`lnk-sandbox` script bin/setup writes; the line names the venv's Python and its
site-packages. `checkout`: our packages in a folder of their own and a venv (links to
this machine's Python) holding the libraries, as bin/setup makes a checkout; the line
names this machine's Python, the checkout, and (for a wire) the venv's site-packages.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from lnk_common.chain import HELPER_MODULES
from lnk_common.policy import Policy, split_argv
from lnk_wrap.entry import script
from lnk_wrap.helpers import (
    ASK_WRAP_AGAIN,
    KEPT_LINE_FORMAT,
    KEPT_LINE_SCRIPT,
    KEPT_LINE_SHELL,
    kept_line,
)
from tests.conftest import ROOT, SANDBOX_TIMEOUT_SECONDS, toml_list

GOLDEN = Path(__file__).parent / "golden"
PYTHON_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
# The libraries our packages import (the proxy's h11 and dnslib, orjson, docopt-ng).
LIBRARIES = ("docopt", "orjson", "h11", "dnslib")
# The words before the line's Python: the shell, -c, its script, its $0.
SHELL_WORDS = 4


class Install:
    """A copy of lnk-sandbox in tmp_path: where its Python, its packages (`root`, the
    folder holding lnk_wrap) and its `lnk-sandbox` script are."""

    def __init__(self, venv: Path, root: Path) -> None:
        self.venv = venv
        self.root = root
        self.python = venv / "bin" / "python"
        self.script = venv / "bin" / "lnk-sandbox"


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{PYTHON_VERSION}" / "site-packages"


def _make_venv(venv: Path, *, copies: bool) -> None:
    subprocess.run([os.path.realpath(sys.executable), "-m", "venv", "--without-pip",
                    *(["--copies"] if copies else []), str(venv)], check=True,
                   timeout=SANDBOX_TIMEOUT_SECONDS)
    libraries = Path(sysconfig.get_path("purelib"))
    for name in LIBRARIES:
        shutil.copytree(libraries / name, _site_packages(venv) / name,
                        ignore=shutil.ignore_patterns("__pycache__"))


def _copy_packages(folder: Path) -> None:
    for package in ROOT.glob("lnk_*"):
        shutil.copytree(package, folder / package.name,
                        ignore=shutil.ignore_patterns("__pycache__"))


def _write_script(install: Install) -> None:
    """The `lnk-sandbox` bin/setup writes (lnk_wrap/entry.py), for this install."""
    python = os.path.realpath(install.python)
    install.script.write_text(script(python, str(install.root),
                                     [str(_site_packages(install.venv))]))
    install.script.chmod(0o755)


@pytest.fixture
def installed(tmp_path: Path) -> Install:
    venv = tmp_path / "venv"
    _make_venv(venv, copies=True)
    install = Install(venv, _site_packages(venv))
    _copy_packages(install.root)
    _write_script(install)
    return install


@pytest.fixture
def checkout(tmp_path: Path) -> Install:
    venv = tmp_path / "checkout" / ".venv"
    _make_venv(venv, copies=False)
    install = Install(venv, tmp_path / "checkout")
    _copy_packages(install.root)
    _write_script(install)
    return install


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def kept_env(tmp_path: Path) -> dict[str, str]:
    """What a harness may run a kept line with: little of ours (no PATH to our venv)."""
    settings = tmp_path / "lnk-settings"
    settings.mkdir()
    return {"PATH": "/usr/bin:/bin", "LNK_HOME": str(settings)}


def _wrap(install: Install, spec_text: str, env: dict[str, str], tmp_path: Path,
          *command: str, json_form: bool = True) -> list[str] | str:
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    done = subprocess.run([str(install.script), "wrap", *(["--json"] if json_form else []),
                           "--spec", str(spec), "--", *command], env=env,
                          capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS,
                          check=False)
    assert done.returncode == 0, done.stderr
    spec.unlink()  # the line carries the policy: the spec need not be there when it runs
    if not json_form:
        return done.stdout
    line: list[str] = json.loads(done.stdout)
    return line


def _line(install: Install, work: Path, env: dict[str, str], tmp_path: Path,
          spec_text: str = "") -> list[str]:
    """The line for a command that leaves a marker in `work`, under a spec writing it."""
    line = _wrap(install, spec_text or f"[files]\nwrite = {toml_list(work)}\n", env, tmp_path,
                 "/bin/sh", "-c", f"echo ran > {work}/marker; echo ran")
    assert isinstance(line, list)
    return line


def _run(line: list[str], work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(line, cwd=str(work), env=env, capture_output=True, text=True,
                          timeout=SANDBOX_TIMEOUT_SECONDS, check=False)


def _assert_refused(done: subprocess.CompletedProcess[str], work: Path, *named: str) -> None:
    """Exit 125, one line on stderr naming each of `named` and saying to ask `wrap`
    again, no traceback, and nothing run."""
    assert done.returncode == 125, done
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("lnk-sandbox: "), done.stderr
    assert "Traceback" not in done.stderr
    assert "ask `lnk-sandbox wrap` again" in done.stderr, done.stderr
    for word in named:
        assert word in done.stderr, (word, done.stderr)
    assert done.stdout == ""
    assert not (work / "marker").exists()


def _restamped(line: list[str], stamp: str) -> list[str]:
    changed = list(line)
    changed[changed.index("--kept-line") + 1] = stamp
    return changed


# -- the line as it runs ---------------------------------------------------------------------


def test_a_kept_line_runs_its_sandboxed_command_from_elsewhere(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    line = _line(installed, work, kept_env, tmp_path)
    assert line[:SHELL_WORDS] == [KEPT_LINE_SHELL, "-c", KEPT_LINE_SCRIPT, "lnk-sandbox"]
    assert line[SHELL_WORDS] == str(installed.python)
    assert line[SHELL_WORDS + 3] == str(installed.root / "lnk_wrap" / "_start.py")
    done = _run(line, work, kept_env)
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("ran\n", "")
    assert (work / "marker").read_text() == "ran\n"


def test_the_printed_line_run_by_a_shell_runs_and_is_refused_alike(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    """A harness that keeps the text (not the JSON) and hands it to a shell."""
    text = _wrap(installed, f"[files]\nwrite = {toml_list(work)}\n", kept_env, tmp_path,
                 "/bin/sh", "-c", f"echo ran > {work}/marker; echo ran", json_form=False)
    assert isinstance(text, str) and text.count("\n") == 1
    assert shlex.split(text)[:SHELL_WORDS] == [KEPT_LINE_SHELL, "-c", KEPT_LINE_SCRIPT,
                                               "lnk-sandbox"]
    ran = subprocess.run(["/bin/sh", "-c", text], cwd=str(work), env=kept_env,
                         capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS,
                         check=False)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "ran\n", "")
    (work / "marker").unlink()
    installed.python.unlink()
    refused = subprocess.run(["/bin/sh", "-c", text], cwd=str(work), env=kept_env,
                             capture_output=True, text=True, timeout=SANDBOX_TIMEOUT_SECONDS,
                             check=False)
    _assert_refused(refused, work, f"the Python this kept line names, {installed.python}, "
                                   "is gone")


# -- the interpreter -------------------------------------------------------------------------


def test_a_venv_moved_is_its_python_gone(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    line = _line(installed, work, kept_env, tmp_path)
    installed.venv.rename(tmp_path / "venv-moved")
    _assert_refused(_run(line, work, kept_env), work, str(installed.python), "is gone")


def test_a_python_removed(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    line = _line(installed, work, kept_env, tmp_path)
    installed.python.unlink()
    _assert_refused(_run(line, work, kept_env), work, str(installed.python), "is gone")


def _another_python() -> str | None:
    """A Python 3 of another version than this one on this machine (pyenv's, or
    python3.N in PATH's folders), or None."""
    def listed(folder: Path, pattern: str) -> list[Path]:
        try:  # a folder on PATH this user cannot read (root's, in CI's user run)
            return sorted(folder.glob(pattern))
        except OSError:
            return []

    found = [str(path) for path in listed(Path.home(), ".pyenv/versions/3.*/bin/python3")]
    for folder in [*os.environ.get("PATH", "").split(":"), "/usr/bin", "/usr/local/bin"]:
        found += [str(path) for path in listed(Path(folder or "."), "python3.[0-9]*")
                  if re.fullmatch(r"python3\.\d+", path.name)]
    for python in found:
        done = subprocess.run([python, "-I", "-S", "-c",
                               "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=False,
                              timeout=SANDBOX_TIMEOUT_SECONDS)
        version = done.stdout.strip()
        if done.returncode == 0 and version not in ("", PYTHON_VERSION) \
                and tuple(map(int, version.split("."))) >= (3, 6):  # _start.py's f-strings
            return python
    return None


def test_a_python_replaced_by_another_version(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    """The line's Python now leads to another version (as a pyenv shim does, or a
    system upgrade that keeps the name): its libraries and compiled code are not this
    one's. Said before anything is imported."""
    other = _another_python()
    line = _line(installed, work, kept_env, tmp_path)
    installed.python.unlink()
    if other is not None:
        installed.python.write_text(f'#!/bin/sh\nexec {shlex.quote(other)} "$@"\n')
    else:
        # No other Python here (an ordinary user cannot read root's pyenv): this one,
        # saying it is 3.99 before _start.py runs (the interpreter's flags dropped, the
        # script run as the main module), so the check still meets a Python that is not
        # the line's. Never a skip: CI runs this test as root and as a user.
        real = shlex.quote(str(Path(sys.executable).resolve()))
        installed.python.write_text(
            '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\n'
            f'exec {real} -I -S -c \'import runpy, sys; sys.version_info = (3, 99, 0, '
            '"final", 0); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], '
            'run_name="__main__")\' "$@"\n')
    installed.python.chmod(0o755)
    _assert_refused(_run(line, work, kept_env), work,
                    f"this kept line was made for Python {PYTHON_VERSION}")


def test_a_line_made_for_another_python(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    line = _restamped(_line(installed, work, kept_env, tmp_path), f"{KEPT_LINE_FORMAT}:3.10")
    _assert_refused(_run(line, work, kept_env), work, "made for Python 3.10",
                    f"is Python {PYTHON_VERSION} now")


# -- the install -----------------------------------------------------------------------------


def test_an_install_removed(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    """What `pip uninstall` leaves: the venv and its Python, none of our packages."""
    line = _line(installed, work, kept_env, tmp_path)
    for package in installed.root.glob("lnk_*"):
        shutil.rmtree(package)
    _assert_refused(_run(line, work, kept_env), work,
                    f"the install this kept line names, {installed.root}, is gone")


def test_a_checkout_moved(
        checkout: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    line = _line(checkout, work, kept_env, tmp_path)
    assert line[SHELL_WORDS] == os.path.realpath(sys.executable)
    checkout.root.rename(tmp_path / "checkout-moved")
    _assert_refused(_run(line, work, kept_env), work, str(checkout.root), "is gone")


def test_a_checkouts_venv_moved_takes_the_proxys_libraries(
        checkout: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    """A wire's line names the folder of the proxy's libraries (the checkout's venv):
    refused by the launcher, before the proxy or anything else is started."""
    line = _line(checkout, work, kept_env, tmp_path,
                 f'[files]\nwrite = {toml_list(work)}\n'
                 '[network]\nmode = "proxy"\nhosts = ["example.com"]\n')
    libraries = str(_site_packages(checkout.venv))
    assert line[line.index("--site-packages") + 1] == libraries
    checkout.venv.rename(tmp_path / "venv-moved")
    _assert_refused(_run(line, work, kept_env), work,
                    f"the libraries this line names, {libraries}, are gone")


@pytest.mark.parametrize(("gone", "named"), [
    ("lnk_wrap/_start.py", "the install this kept line names"),
    ("lnk_wrap/launch.py", "cannot start its launch: No module named 'lnk_wrap.launch'"),
    ("lnk_wrap/init.py", "no longer has its init"),
    ("lnk_proxy/main.py", "no longer has its proxy"),
    ("lnk_common/policy.py", "No module named 'lnk_common.policy'"),
    ("lnk_wrap/helpers.py", "No module named 'lnk_wrap.helpers'"),
])
def test_a_helper_gone(
        gone: str, named: str, installed: Install, work: Path, kept_env: dict[str, str],
        tmp_path: Path) -> None:
    line = _line(installed, work, kept_env, tmp_path)
    (installed.root / gone).unlink()
    _assert_refused(_run(line, work, kept_env), work, str(installed.root), named)


# -- the project upgraded --------------------------------------------------------------------


@pytest.mark.parametrize("stamp", [f"{KEPT_LINE_FORMAT - 1}:{PYTHON_VERSION}",
                                   f"{KEPT_LINE_FORMAT + 1}:{PYTHON_VERSION}",
                                   f":{PYTHON_VERSION}", "", "junk"])
def test_a_line_of_another_format(
        stamp: str, installed: Install, work: Path, kept_env: dict[str, str],
        tmp_path: Path) -> None:
    line = _restamped(_line(installed, work, kept_env, tmp_path), stamp)
    named = ("of format",) if stamp.endswith(PYTHON_VERSION) else ("made for Python",)
    _assert_refused(_run(line, work, kept_env), work, *named)


def test_an_install_upgraded_to_another_format(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    """The project upgraded in place (same paths) to a version whose lines read
    otherwise: the old line is refused, naming both formats."""
    line = _line(installed, work, kept_env, tmp_path)
    helpers = installed.root / "lnk_wrap" / "helpers.py"
    text = helpers.read_text()
    assert f"\nKEPT_LINE_FORMAT = {KEPT_LINE_FORMAT}\n" in text
    helpers.write_text(text.replace(f"\nKEPT_LINE_FORMAT = {KEPT_LINE_FORMAT}\n",
                                    f"\nKEPT_LINE_FORMAT = {KEPT_LINE_FORMAT + 1}\n"))
    _assert_refused(_run(line, work, kept_env), work, f"of format {KEPT_LINE_FORMAT}",
                    f"reads format {KEPT_LINE_FORMAT + 1}")


def test_an_install_upgraded_in_the_same_format_keeps_the_line(
        installed: Install, work: Path, kept_env: dict[str, str], tmp_path: Path) -> None:
    """An upgrade that keeps the format (here: the same code written again, its
    compiled files gone) keeps every kept line working."""
    line = _line(installed, work, kept_env, tmp_path)
    for package in installed.root.glob("lnk_*"):
        shutil.rmtree(package)
    _copy_packages(installed.root)
    done = _run(line, work, kept_env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ran\n", "")


# -- the line, whole -------------------------------------------------------------------------


def test_the_kept_line_golden() -> None:
    """The line for a policy of every option, whole. If this changes, ask whether a line
    an older install printed would now be read otherwise; if so, raise KEPT_LINE_FORMAT
    (lnk_wrap.helpers) and write the golden again."""
    from tests.test_bwrap import AGENT_POLICY

    policy = AGENT_POLICY.replace(
        settings_via="/home/u/.config", agent="main", learn="/home/u/learned.toml",
        home="/home/u/src/app", network="proxy",
        hosts=("example.com",), endpoints=("db=10.0.0.5:5432",), lan=("10.0.0.9:80",),
        localhost_ports=(8080,), models=("anthropic",), secrets=("token",),
        local_models=(11434,), tools=("t",), site_packages="/opt/venv/site-packages",
        calls_per_minute=60, server_tools=True, open_pages=True, keep_session=True,
        write_dot_files=("/home/u/src/app",), commands=("/usr/bin/git",))
    line = kept_line([*policy.to_argv(), "--", "claude", "--print"],
                     python="/usr/bin/python3.11", start="/opt/lnk/lnk_wrap/_start.py",
                     python_version="3.11")
    golden = json.loads((GOLDEN / "kept_line.json").read_text())
    assert line == golden
    options, command = split_argv(line[line.index("launch") + 1:])
    assert Policy.from_argv(options).to_argv() == options and command == ["claude", "--print"]


def test_every_refusal_ends_alike_and_start_knows_every_helper() -> None:
    start = (ROOT / "lnk_wrap" / "_start.py").read_text()
    assert f'AGAIN = "{ASK_WRAP_AGAIN}"' in start
    assert ASK_WRAP_AGAIN.replace("`", "\\`") + "\\n" in KEPT_LINE_SCRIPT
    imported = dict(re.findall(r'_HELPER == "([a-z-]+)":\n\s+from ([a-z_.]+) import main', start))
    assert {helper: module for helper, module in imported.items() if helper != "cli"} \
        == HELPER_MODULES
