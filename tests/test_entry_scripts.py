"""The console scripts a package install gets (lnk_wrap/entry_scripts/, pyproject's
script-files): each finds the interpreter beside it, starts it isolated without `site`,
puts the install's site-packages on the path, and gives the program its own path as
sys.argv[0] (`guest add` and `enter` write that path where sshd runs it: with `-c` there,
guest add refused to run from a pip install).

Each script is run for real from a venv-shaped folder whose site-packages holds a module
of the same name that prints what it was given."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPTS = {"lnk-sandbox": "lnk_wrap/cli.py", "lnk-sandbox-ask": "lnk_ask/main.py",
           "lnk-sandbox-mcp-remote": "lnk_mcpremote/main.py"}
STUB = """import json, sys
def main():
    print(json.dumps({"argv": sys.argv, "flags": [sys.flags.isolated, sys.flags.no_site]}))
"""


def _install(tmp_path: Path, script: str) -> Path:
    """A venv's shape: bin/python3 (this interpreter), bin/SCRIPT, and the stub module
    under lib/pythonX.Y/site-packages."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(Path(sys.executable).resolve())
    shutil.copy2(ROOT / "lnk_wrap" / "entry_scripts" / script, bin_dir / script)
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    module = tmp_path / "venv" / "lib" / version / "site-packages" / SCRIPTS[script]
    module.parent.mkdir(parents=True)
    (module.parent / "__init__.py").write_text("")
    module.write_text(STUB)
    return bin_dir / script


@pytest.mark.parametrize("script", list(SCRIPTS))
@pytest.mark.parametrize("how", ["absolute", "by PATH", "by a link"])
def test_the_program_gets_its_own_path_and_an_isolated_python(
        tmp_path: Path, script: str, how: str) -> None:
    installed = _install(tmp_path, script)
    env = {"PATH": f"{installed.parent}:/usr/bin:/bin"}
    if how == "absolute":
        argv = [str(installed)]
    elif how == "by PATH":
        argv = [script]
    else:  # pipx's form: a link in another folder
        link = tmp_path / "local-bin" / script
        link.parent.mkdir()
        link.symlink_to(installed)
        argv = [str(link)]
    done = subprocess.run([*argv, "guest", "add", "ann"], env=env, capture_output=True,
                          text=True, check=False, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done
    said = json.loads(done.stdout)
    assert said["argv"] == [str(installed), "guest", "add", "ann"], said
    assert os.access(said["argv"][0], os.X_OK)
    assert said["flags"] == [1, 1], said
