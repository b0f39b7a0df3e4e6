"""Throwaway git + DVC projects holding this repository's pipeline, for the pipeline tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
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


def tiny_params() -> dict:
    """The default params shrunk to a tiny study (2 measures, 2 seeds, steps 40 and 70)."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["study"].update(name="tiny", measures=["random", "attention"], seeds=[0, 1], steps=[40, 70])
    # big enough to learn something (k = 0 well above chance), so that RACU is defined
    params["prepare"]["babi-1"].update(n_train=600, n_test=100)
    params["train"]["bilstm-attention"]["babi-1"].update(epochs=4, lr=0.01)
    return params


# The MLflow runs of the tiny study by kind: the shared k = 0 and all-masked chains (2 seeds) and
# 2 measures x 2 seeds chains; steps: 4 shared + 2 x 4; one train run per step, importance per step k > 0.
TINY_RUN_KINDS = {"study": 1, "chain": 8, "step": 12, "train": 12, "importance": 8, "report": 1}


@pytest.fixture(scope="session")
def project(tmp_path_factory) -> Path:
    """A git + DVC project holding this repo's pipeline files and a tiny params.yaml, run once
    with the local executor (shared by the test modules that compare against it)."""
    root = make_project(tmp_path_factory.mktemp("project") / "tiny", tiny_params())
    sh("roar", "pipeline", "--jobs", "2", cwd=root)
    shutil.copy(root / "reports" / "racu.csv", root.parent / "racu-local-run.csv")  # later tests edit params
    return root


# Lines a test wants in the session's summary (e.g. the Slurm jobs it ran), shown even with -q,
# so that a CI log says what ran.
REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT:
        terminalreporter.section("pipeline report")
        for line in REPORT:
            terminalreporter.write_line(line)
