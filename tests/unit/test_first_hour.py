"""A fresh clone's first hour (issue 24): validation agrees with DVC on the params it reads."""

from __future__ import annotations

import copy
import itertools
import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from roar.cli import app
from roar.config.schema import check_params
from roar.core.errors import RoarError

REPO = Path(__file__).resolve().parents[2]
ITEM = re.compile(r"\$\{item\.(\w+)\}")


def _params() -> dict:
    """The project's params with a plain ROAR measure too, so that the ``roar`` stages have items."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["study"]["roar_measures"] = ["mutual-information"]
    return params


def dvc_param_keys(params: dict) -> list[str]:
    """Every ``params.yaml`` key that ``dvc.yaml``'s stages read, for the study of ``params``: each stage's
    string params with ``${item.*}`` expanded over its matrix (``${study.*}`` lists of ``params``)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    keys: set[str] = set()
    for stage in stages.values():
        matrix = {name: params["study"][ref.removeprefix("${study.").removesuffix("}")]
                  for name, ref in (stage.get("matrix") or {}).items()}
        for values in itertools.product(*matrix.values()) if matrix else [()]:
            item = dict(zip(matrix, values))
            keys |= {ITEM.sub(lambda m: str(item[m.group(1)]), entry)
                     for entry in stage.get("params", []) if isinstance(entry, str)}
    return sorted(keys)


def _without(params: dict, key: str) -> dict:
    """``params`` less the dotted ``key`` (names hold '-' but no '.')."""
    out = copy.deepcopy(params)
    *parents, last = key.split(".")
    node = out
    for part in parents:
        node = node[part]
    del node[last]
    return out


def test_the_derived_keys_cover_every_stage_kind():
    keys = dvc_param_keys(_params())
    for key in ("study", "study.strategy", "study.steps", "importance.batch_size", "importance.target",
                "importance.attention", "importance.mutual-information", "prepare.babi-1",
                "train.bilstm-attention.babi-1"):
        assert key in keys


@pytest.mark.parametrize("key", dvc_param_keys(_params()))
def test_every_param_dvc_reads_is_required_by_the_schema(key):
    """Validation refuses, in one line naming the key, a params file without a key that DVC reads as a param
    (DVC would stop with "Parameters ... are missing" only after prepare and k = 0 ran)."""
    params = _params()
    check_params(params)
    with pytest.raises(RoarError) as refused:
        check_params(_without(params, key))
    message = str(refused.value)
    assert "\n" not in message and "missing" in message and key.split(".")[-1] in message


def test_validate_refuses_params_without_importance_target(tmp_path, monkeypatch):
    text = (REPO / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(re.sub(r"(?m)^  target: .*\n", "", text))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 2, result.output
    assert "missing key importance.target" in result.output and "ok (" not in result.output
    assert len(result.output.strip().splitlines()) == 1


# --- 2. `.venv/bin/roar pipeline` without the virtualenv on PATH ---------------------------------------------

def test_tool_env_puts_the_interpreters_scripts_first(monkeypatch):
    from roar.core.tools import scripts_folder, tool_env

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    env = tool_env(ROAR_STUDY_RUN_ID="abc")
    assert env["PATH"].split(":")[0] == str(scripts_folder()) and env["PATH"].endswith("/usr/bin:/bin")
    assert env["ROAR_STUDY_RUN_ID"] == "abc"
    assert shutil.which("dvc", path=env["PATH"]).startswith(str(scripts_folder()))
    assert shutil.which("roar", path=env["PATH"]).startswith(str(scripts_folder()))


def test_tool_env_says_what_to_do_when_dvc_is_nowhere(monkeypatch, tmp_path):
    import roar.core.tools as tools

    monkeypatch.setattr(tools, "scripts_folder", lambda: tmp_path)
    monkeypatch.setattr(tools.sys, "executable", str(tmp_path / "python"))
    with pytest.raises(RoarError, match=r"dvc not found .*run `make setup`.*activate the virtualenv"):
        tools.tool_env({"PATH": str(tmp_path)})


def test_local_pipeline_spawns_dvc_with_the_tool_env(monkeypatch, tmp_path):
    """The stage list (the first dvc roar runs) finds dvc with the virtualenv off PATH."""
    from roar.launch.local import stage_names

    shutil.copy(REPO / "dvc.yaml", tmp_path)
    shutil.copy(REPO / "params.yaml", tmp_path)
    shutil.copy(REPO / "provenance.yaml", tmp_path)
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert "report" in stage_names(tmp_path)


# --- 3. `roar study status`: per study, up to date / not run here / stale (why) ---------------------------------

def test_study_status_says_why_a_study_is_stale():
    from roar.launch.studies import _why_stale

    lock = {"stages": {"recursive@a": {"outs": [{"path": "results/a/s0"}]}, "report": {"outs": []}}}
    status = {"recursive@a": [{"changed deps": {"../../provenance.yaml": {"fingerprints.chain.gradient": "modified"},
                                                "params.yaml": {"importance.target": "modified"},
                                                "data/prepared/a": "deleted"}},
                              {"changed outs": {"results/a/s0": "not in cache"}}],
              "report": [{"changed deps": {"results": "modified"}}]}  # results: made by the chains, not an input
    why = _why_stale(status, lock)
    assert why[0].startswith("code of chain.gradient changed (`roar provenance verify`")
    assert why[1:] == ["params changed: importance.target"]
    # outputs missing (upstream ones too): not stale, only not run here
    only_missing = {"recursive@a": [{"changed deps": {"data/prepared/a": "deleted"}},
                                    {"changed outs": {"results/a/s0": "not in cache"}}],
                    "report": [{"changed deps": {"results": "modified"}}]}
    assert _why_stale(only_missing, lock) == []
    assert _why_stale({"new@b": [{"changed outs": {"x": "not in cache"}}]}, lock) == [
        "stage new@b is not in dvc.lock (the study's grid changed)"]


def test_study_status_of_a_study_never_run(tmp_path, monkeypatch):
    from roar.launch.studies import NOT_RUN, new_study, study_status

    for name in ("dvc.yaml", "params.yaml", "provenance.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / ".dvc").mkdir()
    new_study("other", REPO / "params.yaml", tmp_path)
    status = study_status(tmp_path, "other")
    assert (status.state, status.folder) == (NOT_RUN, "studies/other")
    assert status.line() == ("other                        not run here: no dvc.lock (never run in this project); "
                             "run it with `roar pipeline --study other`")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["study", "status", "other"])
    assert result.exit_code == 0 and "not run here" in result.output, result.output


# --- 4. MLflow 3.17's UI: the way from the experiments list to the runs -----------------------------------------

def test_the_experiment_says_how_to_reach_its_runs(tmp_path, monkeypatch):
    """MLflow 3.17's UI ignores ``mlflow.experimentKind`` (its workflow switch decides, GenAI by default): the
    experiment's description, shown in the experiments list, names the switch and the runs link."""
    from mlflow.tracking import MlflowClient

    from roar.tracking.mlflow_tracker import NOTE_TAG, Tracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    tracker = Tracker("study-a", tmp_path)
    note = MlflowClient(tracker.uri).get_experiment(tracker.experiment_id).tags[NOTE_TAG]
    assert "Model training" in note
    assert f"#/experiments/{tracker.experiment_id}/runs?workflowType=machine_learning" in note
    client = MlflowClient(tracker.uri)
    client.set_experiment_tag(tracker.experiment_id, NOTE_TAG, "mine")
    Tracker("study-a", tmp_path)
    assert client.get_experiment(tracker.experiment_id).tags[NOTE_TAG] == "mine"  # the user's description stays
