"""Throwaway git + DVC projects holding this repository's pipeline, for the pipeline tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def project_env(root: Path | None = None, **extra: str) -> dict:
    """The environment of a stage process: this venv first, no tracking settings inherited, and
    ``root``'s own copy of ``src/`` imported (so that editing it changes what the stages run)."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **extra}
    if root is not None:
        env["PYTHONPATH"] = str(root / "src")
    for name in ("MLFLOW_TRACKING_URI", "ROAR_STUDY_RUN_ID", "ROAR_FAILPOINT"):
        if name not in extra:
            env.pop(name, None)
    return env


def sh(*args: str, cwd: Path, env: dict | None = None) -> str:
    """Run a command, fail the test with its output if it fails; returns its stdout."""
    proc = subprocess.run(args, cwd=cwd, env=env or project_env(cwd), capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def commit(root: Path, message: str) -> None:
    sh("git", "add", "-A", cwd=root)
    sh("git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", message, cwd=root)


def make_project(root: Path, params: dict) -> Path:
    """A git + DVC project with this repo's pipeline files, its own copy of ``src/`` and ``params``."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("dvc.yaml", "MLproject", "python_env.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("git", "init", "-q", cwd=root)
    commit(root, "init")
    sh("dvc", "init", "-q", cwd=root)
    sh("dvc", "remote", "add", "-d", "storage", "../dvc-storage", cwd=root)
    commit(root, "project")
    return root


def mlflow_runs(root: Path, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], max_results=10_000)
