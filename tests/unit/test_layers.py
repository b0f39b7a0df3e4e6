"""The package's layers point down and its modules import each other in no cycle: the import-linter
contracts of pyproject.toml.

The package imports lazily inside functions; import-linter's graph (grimp) counts those imports
too, which the tests check on copies of the package with one added import.
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


def copy_package(tmp_path: Path) -> Path:
    """A copy of the package; returns its ``src`` folder."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "roar", src / "roar", ignore=shutil.ignore_patterns("__pycache__"))
    return src


def copy_with_import(tmp_path: Path, module: str, imported: str) -> Path:
    """A copy of the package where ``module`` imports ``imported`` inside a function."""
    src = copy_package(tmp_path)
    path = src.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + f"\n\ndef _added():\n    import {imported}\n\n    return {imported}\n")
    return src


def test_contracts_are_kept():
    result = lint_imports(ROOT / "src", ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "roar's parts point down KEPT" in result.stdout
    assert "no import cycles between siblings KEPT" in result.stdout


def test_a_back_edge_inside_a_function_breaks_the_layers(tmp_path):
    result = lint_imports(copy_with_import(tmp_path, "roar.data.prepare", "roar.pipeline.chain"), ROOT / "pyproject.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout
    assert "roar.data.prepare -> roar.pipeline.chain" in result.stdout


def test_a_cycle_within_a_layer_breaks_the_acyclic_contract(tmp_path):
    """chain imports runner; runner importing chain (both in the steps layer) is a cycle."""
    result = lint_imports(copy_with_import(tmp_path, "roar.pipeline.runner", "roar.pipeline.chain"), ROOT / "pyproject.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "roar's parts point down KEPT" in result.stdout
    assert "no import cycles between siblings BROKEN" in result.stdout


def test_every_module_is_in_a_layer(tmp_path):
    """A new module directly in roar/ must be placed in a layer (the contract is exhaustive)."""
    src = copy_package(tmp_path)
    (src / "roar" / "stray.py").write_text('"""A module in no layer."""\n')
    result = lint_imports(src, ROOT / "pyproject.toml")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "roar.stray" in result.stdout
