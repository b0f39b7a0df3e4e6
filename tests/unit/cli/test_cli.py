"""The command line: one-line errors on bad arguments before any work, and skipped chains."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roar.cli import app

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture()
def project(tmp_path, monkeypatch):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("args, message", [
    (["chain", "babi-1", "bilstm-attention", "nope", "0"], "unknown measure 'nope'; allowed: random, attention"),
    (["prepare", "nope"], "unknown dataset 'nope'; allowed: babi-1"),
    (["prepare", "babi-1", "--model", "lstm"], "unknown model 'lstm'; allowed: bilstm-attention, roberta"),
    (["train-reference", "babi-1", "bilstm-attention", "0", "--which", "k50"], "reference 'k50' unknown"),
    (["audit", "babi-1", "bilstm-attention", "attention", "0", "15"], "k=15 is not a point of the study"),
])
def test_bad_arguments_fail_with_one_line(project, args, message):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not any((project / name).exists() for name in ("data", "models", "mlflow.db"))


def test_unsupported_measure_is_refused_or_skipped(project):
    refused = CliRunner().invoke(app, ["chain", "babi-1", "roberta", "attention", "0", "--no-progress"])
    assert refused.exit_code == 2 and "'attention' is not defined for model 'roberta'" in refused.output
    skipped = CliRunner().invoke(app, ["chain", "babi-1", "roberta", "attention", "0", "--skip-unsupported"])
    assert skipped.exit_code == 0 and skipped.output.startswith("skipped:")
    for kind in ("data/masked", "models", "results"):
        assert (project / kind / "babi-1/roberta/attention/recursive/s0/UNSUPPORTED.txt").is_file()


def test_bad_params_value_names_it(project):
    text = (project / "params.yaml").read_text().replace("strategy: quantile", "strategy: percent")
    (project / "params.yaml").write_text(text)
    result = CliRunner().invoke(app, ["report"])
    assert result.exit_code == 2
    assert "unknown strategy 'percent'; allowed: quantile, count" in result.output


def test_git_commit_ignores_what_the_pipeline_writes(tmp_path):
    import subprocess

    from roar.tracking.mlflow_tracker import git_commit

    def git(*args):
        subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    study = tmp_path / "studies" / "s"
    written = [tmp_path / "dvc.lock", study / "dvc.lock", study / "results" / "k10.json", study / "runs" / "k10.json",
               tmp_path / "runs" / "pipeline.jsonl", study / "reports" / "racu.csv"]
    for path in [tmp_path / "params.yaml", study / "params.yaml", *written]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n")
    git("add", "-A")
    git("commit", "-qm", "init")
    head = git_commit(tmp_path)
    assert len(head) == 40
    for path in written:  # what the pipeline writes, at the top or in a study folder
        path.write_text("y\n")
    assert git_commit(tmp_path) == head
    assert git_commit(study) == head
    (study / "params.yaml").write_text("a: 2\n")
    assert git_commit(study) == head + "-dirty"


@pytest.mark.parametrize("words, expected", [
    ("roar chain babi-1 bilstm-attention in", ["input-x-gradient", "integrated-gradient"]),
    ("roar audit babi-1 rob", ["roberta"]),
    ("roar prepare rotten", ["rotten-tomatoes"]),
    ("roar train-reference babi-1 bilstm-attention 0 --which ", ["k0", "all"]),
])
def test_shell_completion_offers_the_registered_names(words, expected):
    """What `roar --install-completion` gives the shell: the registries' names for the word being typed."""
    result = CliRunner().invoke(app, [], prog_name="roar", env={
        "_ROAR_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split(" ")) - 1)})
    assert result.stdout.split() == expected
