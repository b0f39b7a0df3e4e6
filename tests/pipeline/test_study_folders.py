"""A study folder beside the default study: its own outputs, MLflow study run, push and reports, compared with DVC."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_params
from tests.pipeline.conftest import commit, make_project, mlflow_runs, sh


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project whose default study never runs, with ``studies/micro`` (1 seed, 2 measures, k = 50) run by
    ``roar pipeline --study micro`` from the project root."""
    root = make_project(tmp_path_factory.mktemp("studies") / "project", tiny_params())
    params = tiny_params()
    params["study"].update(name="micro", seeds=[0], steps=[50])
    params["prepare"]["babi-1"].update(n_train=300, n_test=100)
    (root / "micro.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = sh("roar", "study", "new", "micro", "--from", "micro.yaml", cwd=root)
    assert "roar pipeline --study micro" in out
    commit(root, "study micro")
    sh("roar", "pipeline", "--study", "micro", "--jobs", "2", cwd=root)
    return root


def test_the_study_keeps_its_own_outputs(project: Path) -> None:
    study = project / "studies" / "micro"
    for kind in ("data/prepared/babi-1", "models/babi-1", "results/babi-1"):
        assert (study / kind).is_dir() and not (project / kind).exists(), kind
    assert (study / "results/babi-1/bilstm-attention/attention/recursive/s0/k50.json").is_file()
    racu = (study / "reports/racu.csv").read_text().splitlines()
    assert len(racu) == 2 and racu[1].startswith("babi-1,bilstm-attention,attention,True,quantile,")
    assert not (project / "reports").exists() and (study / "dvc.lock").is_file() and not (project / "dvc.lock").exists()
    # the default study is untouched: its stages are still to run, the study's are done
    assert "Data and pipelines are up to date" in sh("dvc", "status", "dvc.yaml", cwd=study)
    assert "prepare@babi-1-bilstm-attention" in sh("dvc", "status", "dvc.yaml", cwd=project)


def test_audit_inside_a_study_folder(project: Path) -> None:
    """The audit finds the DVC cache at the project root above the study folder (not ``<study>/.dvc/cache``)."""
    out = sh("roar", "audit", "babi-1", "bilstm-attention", "attention", "0", "50", cwd=project / "studies" / "micro")
    assert "k=0 " in out and "k=50 " in out and "all files match dvc.lock" in out

def test_one_mlflow_store_with_the_study_run_tagged(project: Path) -> None:
    assert not (project / "studies/micro/mlflow.db").exists()
    runs = mlflow_runs(project, "micro")  # the project's mlflow.db
    studies = [r for r in runs if r.data.tags["roar.kind"] == "study"]
    assert len(studies) == 1 and studies[0].data.tags["roar.study_folder"] == "studies/micro"
    assert studies[0].info.status == "FINISHED"
    assert {r.data.tags["roar.kind"] for r in runs} == {"study", "chain", "step", "train", "importance", "report"}


def test_the_push_holds_the_study_and_a_clone_pulls_it(project: Path, tmp_path: Path) -> None:
    commit(project, "micro results")
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", str(project), str(clone), cwd=tmp_path)
    storage = project.parent / "dvc-storage"  # the project's remote (../dvc-storage), filled by the pipeline's push
    assert any(storage.rglob("*")), "roar pipeline --study pushed nothing"
    sh("dvc", "remote", "modify", "--local", "storage", "url", str(storage), cwd=clone)
    sh("dvc", "pull", "-q", "dvc.yaml", cwd=clone / "studies/micro")
    model = "studies/micro/models/babi-1/bilstm-attention/attention/recursive/s0/k50/model.safetensors"
    assert (clone / model).read_bytes() == (project / model).read_bytes()
    assert "Data and pipelines are up to date" in sh("dvc", "status", "dvc.yaml", cwd=clone / "studies/micro")


def test_metrics_and_plots_of_studies_side_by_side_and_between_commits(project: Path) -> None:
    shown = json.loads(sh("dvc", "metrics", "show", "--json", cwd=project))
    (workspace,) = shown.values()  # {"": {"data": {file: ...}}}: the workspace
    assert "studies/micro/reports/racu.json" in workspace["data"]
    # a change of the study's RACU (as a re-run with other params would make) against the last commit
    racu = project / "studies/micro/reports/racu.json"
    original = racu.read_text()
    changed = json.loads(original)
    leaf = changed["babi-1"]["bilstm-attention"]["recursive"]["attention"]
    leaf["racu_mean"] = round(leaf["racu_mean"] - 0.25, 6)
    racu.write_text(json.dumps(changed))
    try:
        diff = json.loads(sh("dvc", "metrics", "diff", "HEAD", "--json", "--targets", str(racu.relative_to(project)),
                             cwd=project))
        entry = diff["studies/micro/reports/racu.json"]["babi-1.bilstm-attention.recursive.attention.racu_mean"]
        assert entry["diff"] == pytest.approx(-0.25)
    finally:
        racu.write_text(original)
    # every study's plot definition (a target path would be drawn as a plain file, without the template)
    plots = json.loads(sh("dvc", "plots", "diff", "HEAD", "--json", cwd=project))["data"]
    content = plots["studies/micro/reports/curves.csv"][0]["content"]
    assert content["facet"]["column"]["field"] == "rev"  # the roar-curves template: a column per revision
    revs = {row["rev"] for row in content["data"]["values"]}
    measures = {row["measure"] for row in content["data"]["values"]}
    assert revs == {"HEAD", "workspace"} and measures == {"random", "attention"}


def test_a_second_target_takes_the_chains_that_explain_no_class_from_the_first(tmp_path: Path) -> None:
    """Two studies that differ only in ``importance.target``: the second restores its trainings from the first
    through DVC's run cache, computes its gradient chains (they explain a class) and copies the random and
    attention steps, whose step keys do not hold the target."""
    root = make_project(tmp_path / "project", tiny_params())
    for name, target in (("gold", "gold"), ("predicted", "predicted")):
        params = tiny_params()
        params["study"].update(name=name, seeds=[0], steps=[50], measures=["random", "attention", "gradient"])
        params["prepare"]["babi-1"].update(n_train=300, n_test=100)
        params["importance"]["target"] = target
        (root / f"{name}.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        sh("roar", "study", "new", name, "--from", f"{name}.yaml", cwd=root)
    sh("roar", "pipeline", "--study", "gold", "--no-push", cwd=root)
    shutil.rmtree(root / ".dvc" / "cache" / "runs", ignore_errors=True)  # as on a fresh clone
    out = sh("roar", "pipeline", "--study", "predicted", "--no-push", cwd=root)
    assert "2 finished training(s) of other study folders saved to DVC's run cache" in out
    trained = {r.data.tags.get("roar.measure") for r in mlflow_runs(root, "predicted")
               if r.data.tags.get("roar.kind") == "train"}
    assert trained == {"gradient"}  # its k = 0 and all-masked models restored, not trained

    chain = "babi-1/bilstm-attention/{}/recursive/s0/k50"
    gold, predicted = root / "studies/gold", root / "studies/predicted"
    for measure in ("random", "attention"):
        record, facts = f"results/{chain.format(measure)}.json", f"runs/{chain.format(measure)}.json"
        assert (predicted / record).read_bytes() == (gold / record).read_bytes()
        # copied, not recomputed: the run facts name the gold study's MLflow runs (a recompute has its own)
        assert (predicted / facts).read_bytes() == (gold / facts).read_bytes()
        model = f"models/{chain.format(measure)}/model.safetensors"
        assert (predicted / model).read_bytes() == (gold / model).read_bytes()
    made = json.loads((predicted / f"results/{chain.format('gradient')}.json").read_text())
    assert made["target"] == "predicted"
    facts = f"runs/{chain.format('gradient')}.json"
    assert json.loads((predicted / facts).read_text())["step_run_id"] != json.loads((gold / facts).read_text())[
        "step_run_id"]
    assert made["step_key"] != json.loads((gold / f"results/{chain.format('gradient')}.json").read_text())["step_key"]
    for reference in ("models/babi-1/bilstm-attention/k0/s0/model.safetensors",
                      "results/babi-1/bilstm-attention/k0/s0.json"):
        assert (predicted / reference).read_bytes() == (gold / reference).read_bytes()
    assert "Data and pipelines are up to date" in sh("dvc", "status", "dvc.yaml", cwd=predicted)
