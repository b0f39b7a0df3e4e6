"""Throwaway git + DVC projects holding this repository's pipeline, for the pipeline tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, tiny_params

BIN = Path(sys.executable).parent


def project_env(root: Path | None = None, **extra: str) -> dict:
    """The environment of a stage process: this venv first, no tracking settings inherited, and
    ``root``'s own copy of ``src/`` imported (so that editing it changes what the stages run)."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", **extra}
    if root is not None:
        env["PYTHONPATH"] = str(root / "src")
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "ROAR_STUDY_RUN_ID", "ROAR_FAILPOINT"):
        if name not in extra:
            env.pop(name, None)
    return env


def no_venv_env(root: Path) -> dict:
    """A stage environment whose PATH lacks this virtualenv (as when a user runs ``.venv/bin/roar``)."""
    env = project_env(root)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != BIN and p != str(BIN))
    assert shutil.which("dvc", path=env["PATH"]) is None and shutil.which("roar", path=env["PATH"]) is None
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
    for name in ("dvc.yaml", "provenance.yaml", "MLproject", "python_env.yaml", ".gitignore", ".dvcignore"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("git", "init", "-q", cwd=root)
    commit(root, "init")
    sh("dvc", "init", "-q", cwd=root)
    (root / ".dvc" / "plots").mkdir(exist_ok=True)
    for template in (REPO / ".dvc" / "plots").glob("*.json"):  # the project's plot templates (dvc.yaml plots)
        shutil.copy(template, root / ".dvc" / "plots" / template.name)
    sh("dvc", "remote", "add", "-d", "storage", "../dvc-storage", cwd=root)
    commit(root, "project")
    return root


def mlflow_runs(root: Path, experiment: str, uri: str | None = None):
    """Every run of ``experiment`` in ``uri`` (default: ``root``'s own ``mlflow.db``)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri or f"sqlite:///{root / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    return client.search_runs([found.experiment_id], max_results=10_000)


# The MLflow runs of the tiny study by kind: the shared k = 0 and all-masked chains (2 seeds) and
# 2 measures x 2 seeds chains; steps: 4 shared + 2 x 4; one train run per step, importance per step k > 0.
TINY_RUN_KINDS = {"study": 1, "chain": 8, "step": 12, "train": 12, "importance": 8, "report": 1}


@dataclass
class TinyStudy:
    """The tiny study run once per session by ``roar pipeline`` with the default (SQLite) tracking;
    ``runs``: its MLflow runs as they were right after the pipeline (later tests add runs)."""

    root: Path
    runs: list
    racu: str  # reports/racu.csv as the pipeline wrote it
    out: str  # what `roar pipeline` printed


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> TinyStudy:
    """Run as a user of a fresh clone runs it: the virtualenv's ``roar`` with the virtualenv off PATH
    (the stages must find ``dvc`` and ``roar`` all the same)."""
    root = make_project(tmp_path_factory.mktemp("project") / "tiny", tiny_params())
    out = sh(str(BIN / "roar"), "pipeline", "--jobs", "2", cwd=root, env=no_venv_env(root))
    return TinyStudy(root, mlflow_runs(root, "tiny"), (root / "reports" / "racu.csv").read_text(), out)


def copy_project(root: Path, to: Path) -> Path:
    """A copy of the finished project ``root`` to change freely: its git history, DVC cache, outputs
    and MLflow store (runs logged in the copy keep their artifacts beside the original's); not its DVC
    remote (``../dvc-storage``), so push nothing from the copy."""
    shutil.copytree(root, to, symlinks=True)
    return to


# Fake credentials for the local S3-protocol server (moto), which accepts any.
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(ready: Callable[[], bool], timeout: float, what: str, server: subprocess.Popen | None = None) -> None:
    """Poll ``ready`` until it holds; fail the test after ``timeout`` s or when ``server`` exits."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert server is None or server.poll() is None, f"{what} exited with status {server.returncode}"
        assert time.monotonic() < deadline, f"{what} not ready after {timeout:.0f} s"
        time.sleep(0.2)


def answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url`` (any status)."""
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        pass
    except (urllib.error.URLError, OSError):
        return False
    return True


@contextmanager
def server_process(args: list[str], ready_url: str, what: str, timeout: float = 60.0,
                   env: dict | None = None, log: Path | None = None) -> Iterator[subprocess.Popen]:
    """A server started in its own process group, ready when ``ready_url`` answers; the whole group
    (a server may fork workers) is terminated on exit, whatever happened."""
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: answers(ready_url), timeout, what, proc)
        yield proc
    finally:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        if log:
            out.close()


@contextmanager
def s3_server(*buckets: str) -> Iterator[str]:
    """A real S3-protocol server (moto) on 127.0.0.1 holding empty ``buckets``; yields its URL."""
    import boto3

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with server_process([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)], url, "moto_server"):
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
        for bucket in buckets:
            s3.create_bucket(Bucket=bucket)
        yield url


# Lines a test wants in the session's summary (e.g. the Slurm jobs it ran), shown even with -q,
# so that a CI log says what ran.
REPORT: list[str] = []


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT:
        terminalreporter.section("pipeline report")
        for line in REPORT:
            terminalreporter.write_line(line)
