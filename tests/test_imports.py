"""The packages' layers hold (pyproject.toml's [tool.importlinter] contract): each
package imports only those below it, so the proxy never depends on the CLI's package
and lnk_common on no helper's. import-linter reads every import, those inside functions
included (most of ours are there, to keep each start's imports few)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_layers_contract_is_kept() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_every_module_of_ours_is_under_a_layer() -> None:
    """A new top-level package must be placed in the contract, or it is checked by none."""
    import tomllib
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    ours = {path.parent.name for path in ROOT.glob("lnk_*/__init__.py")}
    assert ours == set(config["root_packages"])
    layered = {name.strip() for layer in config["contracts"][0]["layers"]
               for name in layer.split("|")}
    assert layered == ours
