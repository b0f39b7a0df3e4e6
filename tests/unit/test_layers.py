"""The package's layers point down: import-linter's layers contract of pyproject.toml.

The package imports lazily inside functions; import-linter's graph (grimp) counts those imports
too, which the second test checks on a copy of the package with one added back edge.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[2]


def lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess:
    """Run ``lint-imports`` (of this interpreter's environment) on the ``roar`` package under ``src``."""
    script = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(script), "--config", str(config), "--no-cache"], cwd=src.parent, text=True,
                          capture_output=True, env={"PYTHONPATH": str(src), "PATH": str(script.parent)}, check=False)


def test_layers_contract_is_kept():
    result = lint_imports(ROOT / "src", ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "roar's layers point down KEPT" in result.stdout


def test_a_back_edge_inside_a_function_breaks_the_contract(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "roar", src / "roar", ignore=shutil.ignore_patterns("__pycache__"))
    prepare = src / "roar" / "data" / "prepare.py"
    prepare.write_text(prepare.read_text() + "\n\ndef _back_edge():\n    from roar.chain import ChainSpec\n\n"
                       "    return ChainSpec\n")
    result = lint_imports(src, ROOT / "pyproject.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
    assert "roar.data.prepare -> roar.chain" in result.stdout


def test_every_module_is_in_a_layer(tmp_path):
    """A new module directly in roar/ must be placed in a layer (the contract is exhaustive)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "roar", src / "roar", ignore=shutil.ignore_patterns("__pycache__"))
    (src / "roar" / "stray.py").write_text('"""A module in no layer."""\n')
    result = lint_imports(src, ROOT / "pyproject.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "roar.stray" in result.stdout
