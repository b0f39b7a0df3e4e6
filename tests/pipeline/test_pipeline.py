"""Real DVC and real MLflow, end to end, on a tiny grid in a throwaway project."""

from __future__ import annotations

import collections
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.pipeline.conftest import (S3_CREDENTIALS, TINY_RUN_KINDS, TinyStudy, commit, mlflow_runs,
                                     project_env, s3_server, sh)


@pytest.fixture(scope="module")
def project(tiny_study: TinyStudy) -> Path:
    """A git + DVC project holding this repo's pipeline files and a tiny params.yaml, run once."""
    return tiny_study.root


def runs(root: Path):
    return mlflow_runs(root, "tiny")


def test_outputs_and_lock(project: Path) -> None:
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    assert "report" in lock
    assert "recursive@babi-1-bilstm-attention-attention-1" in lock
    for measure in ("random", "attention"):
        for seed in (0, 1):
            for k in (40, 70):
                data = project / f"data/masked/babi-1/bilstm-attention/{measure}/recursive/s{seed}/k{k}"
                model = project / f"models/babi-1/bilstm-attention/{measure}/recursive/s{seed}/k{k}"
                assert (data / "train.arrow").is_file() and (model / "model.safetensors").is_file()
                record = json.loads((project / f"results/babi-1/bilstm-attention/{measure}/recursive/s{seed}/k{k}.json").read_text())
                assert record["k"] == k and record["data_path"].endswith(f"k{k}")
                assert len(record["input_data_hash"]) == 64 and len(record["model_hash"]) == 64
    # the recursion chains: step 70's importance ran on step 40's data and model
    r40 = json.loads((project / "results/babi-1/bilstm-attention/attention/recursive/s0/k40.json").read_text())
    r70 = json.loads((project / "results/babi-1/bilstm-attention/attention/recursive/s0/k70.json").read_text())
    assert r70["input_data_hash"] == r40["data_hash"] and r70["input_model_hash"] == r40["model_hash"]
    points = (project / "reports/points.csv").read_text().splitlines()
    assert points[0] == "dataset,model,measure,recursive,strategy,seed,k,metric,value,curve"
    # 2 measures x 2 seeds x (k0, 40, 70, 100) x (retrained, k0-model, previous-model)
    assert len(points) == 1 + 2 * 2 * 4 * 3
    racu = (project / "reports/racu.csv").read_text().splitlines()
    assert racu[0] == "dataset,model,measure,recursive,strategy,racu_mean,racu_low,racu_high,n_seeds,interval"
    assert len(racu) == 2 and racu[1].startswith("babi-1,bilstm-attention,attention,True,quantile,")


def test_mlflow_run_tree(tiny_study: TinyStudy) -> None:
    all_runs = tiny_study.runs  # as the pipeline left them (other tests add runs)
    by_id = {r.info.run_id: r for r in all_runs}
    kinds = collections.Counter(r.data.tags["roar.kind"] for r in all_runs)
    assert kinds == TINY_RUN_KINDS
    for run in all_runs:
        path, current = [], run
        while current is not None:
            path.append(current.data.tags["roar.kind"])
            current = by_id.get(current.data.tags.get("mlflow.parentRunId"))
        expected = {"study": ["study"], "chain": ["chain", "study"], "step": ["step", "chain", "study"],
                    "report": ["report", "study"],
                    "train": ["train", "step", "chain", "study"], "importance": ["importance", "step", "chain", "study"]}
        assert path == expected[run.data.tags["roar.kind"]]
        assert run.info.status == "FINISHED"
        assert run.data.tags["roar.git_commit"]
    train = [r for r in all_runs if r.data.tags["roar.kind"] == "train"]
    for run in train:
        for tag in ("roar.dataset", "roar.model", "roar.measure", "roar.seed", "roar.k", "roar.model_hash", "roar.data_hash"):
            assert run.data.tags[tag], tag
        assert "test_accuracy" in run.data.metrics and "val_accuracy" in run.data.metrics
    importance = [r for r in all_runs if r.data.tags["roar.kind"] == "importance"]
    assert all(r.data.metrics["examples_per_second"] > 0 for r in importance)
    assert all(r.inputs.dataset_inputs for r in importance)


def test_report_files_and_dvc_views(project: Path) -> None:
    reports = project / "reports"
    for name in ("racu.md", "racu.tex", "racu.json", "README.md", "figures/racu.png", "figures/racu.pdf",
                 "figures/curves-babi-1-bilstm-attention.png",
                 "figures/noretrain-babi-1-bilstm-attention.png", "noretrain.csv", "noretrain_tau.csv",
                 "noretrain_compute.csv"):
        assert (reports / name).is_file(), name
    assert "| babi-1 | attention |" in (reports / "racu.md").read_text()
    metrics = sh("dvc", "metrics", "show", "--json", cwd=project)
    assert "racu_mean" in metrics
    sh("dvc", "plots", "show", "-o", "plots-html", cwd=project)
    assert (project / "plots-html" / "index.html").is_file()


def test_racu_matches_an_independent_numpy_computation(project: Path) -> None:
    """RACU recomputed from points.csv with plain numpy equals racu.csv's mean (of the
    unclipped per-seed values) and racu_seeds.csv's per-seed values, for every curve (the no-retrain
    ones against the random measure's same curve)."""
    import csv

    import numpy as np

    rows = list(csv.DictReader((project / "reports/points.csv").open()))
    curves: dict = collections.defaultdict(dict)
    for r in rows:
        curves[(r["curve"], r["measure"], r["seed"])][int(r["k"])] = float(r["value"])
    per_measure = collections.defaultdict(list)
    for (name, measure, seed), curve in curves.items():
        if measure == "random":
            continue
        base = curves[(name, "random", seed)]
        x = np.array(sorted(curve)) / 100
        p = np.array([curve[k] for k in sorted(curve)])
        b = np.array([base[k] for k in sorted(curve)])
        num = sum((x[i + 1] - x[i]) * ((b[i] - p[i]) + (b[i + 1] - p[i + 1])) / 2 for i in range(len(x) - 1))
        den = sum((x[i + 1] - x[i]) * ((b[i] - b[-1]) + (b[i + 1] - b[-1])) / 2 for i in range(len(x) - 1))
        if den > 0:  # a random curve that does not fall (1-epoch models) gives no RACU for that seed
            per_measure[(name, measure)].append(num / den)
    table = list(csv.DictReader((project / "reports/racu.csv").open()))
    assert [r["measure"] for r in table] == ["attention"]
    assert int(table[0]["n_seeds"]) == len(per_measure[("retrained", "attention")]) >= 1
    assert abs(float(table[0]["racu_mean"]) - np.mean(per_measure[("retrained", "attention")])) < 1e-6
    seeds = list(csv.DictReader((project / "reports/racu_seeds.csv").open()))
    for name in ("retrained", "k0-model", "previous-model"):
        assert [float(r["racu_unclipped"]) for r in seeds if r["curve"] == name] == pytest.approx(
            per_measure[(name, "attention")], abs=1e-6), name
        assert [float(r["racu"]) for r in seeds if r["curve"] == name] == pytest.approx(
            [min(1, max(-1, v)) for v in per_measure[(name, "attention")]], abs=1e-6), name


def test_audit_point_and_tampering(project: Path) -> None:
    env = project_env(project)
    out = sh("roar", "audit", "babi-1", "bilstm-attention", "attention", "1", "70", cwd=project, env=env)
    assert "k=0 " in out and "k=40 " in out and "k=70 " in out and "all files match dvc.lock" in out
    evidence = json.loads(sh("roar", "audit", "babi-1", "bilstm-attention", "attention", "1", "70", "--json",
                             cwd=project, env=env))
    assert [e["k"] for e in evidence] == [0, 40, 70]
    assert evidence[2]["stage"] == "recursive@babi-1-bilstm-attention-attention-1"
    assert all(len(md5) == 32 for md5 in evidence[1]["data_files"].values())
    target = project / "data/masked/babi-1/bilstm-attention/attention/recursive/s1/k40/train.arrow"
    original = target.read_bytes()
    try:
        target.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
        proc = subprocess.run(["roar", "audit", "babi-1", "bilstm-attention", "attention", "1", "70"], cwd=project,
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 2
        assert "k40/train.arrow is stale or tampered" in proc.stderr
    finally:
        target.write_bytes(original)


def test_audit_reads_the_cache_where_dvc_keeps_it(project: Path, tmp_path: Path) -> None:
    """The audit reads the ``.dir`` manifests through DVC's API: a ``cache.dir`` outside the project (set in
    ``.dvc/config.local``) works, and a manifest missing from that cache names the stage to pull."""
    env = project_env(project)
    cache, outside = project / ".dvc" / "cache", tmp_path / "dvc-cache"
    chain = "recursive@babi-1-bilstm-attention-attention-1"
    md5 = next(o["md5"] for o in yaml.safe_load((project / "dvc.lock").read_text())["stages"][chain]["outs"]
               if o["path"].startswith("data/masked/"))
    manifest = outside / "files" / "md5" / md5[:2] / md5[2:]
    shutil.move(cache, outside)
    try:
        sh("dvc", "cache", "dir", "--local", str(outside), cwd=project, env=env)
        out = sh("roar", "audit", "babi-1", "bilstm-attention", "attention", "1", "70", cwd=project, env=env)
        assert "k=40 " in out and "all files match dvc.lock" in out
        manifest.rename(manifest.with_name("moved-away"))
        proc = subprocess.run(["roar", "audit", "babi-1", "bilstm-attention", "attention", "1", "70"], cwd=project,
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 2
        assert f"the DVC cache lacks the manifest of data/masked/babi-1/bilstm-attention/attention/recursive/s1 " \
               f"({md5}); run `dvc pull {chain}`" in proc.stderr
    finally:
        if manifest.with_name("moved-away").exists():
            manifest.with_name("moved-away").rename(manifest)
        (project / ".dvc" / "config.local").unlink(missing_ok=True)
        shutil.move(outside, cache)


def test_report_reproduces_byte_identical_from_a_fresh_clone(project: Path, tmp_path: Path) -> None:
    commit(project, "study results")
    clone = project.parent / f"{project.name}-clone"
    sh("git", "clone", "-q", str(project), str(clone), cwd=project.parent)
    sh("roar", "reproduce-report", cwd=clone)
    assert not list(clone.glob("models/**/model.safetensors"))  # only the results were pulled
    for name in ("points.csv", "curves.csv", "racu.csv", "racu.md", "racu.tex"):
        assert (clone / "reports" / name).read_bytes() == (project / "reports" / name).read_bytes(), name


def test_plain_roar_chain_reuses_importance_and_random_matches_recursive(project: Path) -> None:
    env = project_env(project)
    for measure in ("random", "attention"):
        sh("roar", "chain", "babi-1", "bilstm-attention", measure, "0", "--roar", "--no-progress", cwd=project, env=env)
    result = lambda m, mode, k: json.loads(  # noqa: E731
        (project / f"results/babi-1/bilstm-attention/{m}/{mode}/s0/k{k}.json").read_text())
    k0 = json.loads((project / "results/babi-1/bilstm-attention/k0/s0.json").read_text())
    for k in (40, 70):  # plain ROAR explains the unmasked data with the k = 0 model at every step
        assert result("attention", "roar", k)["input_model_hash"] == k0["model_hash"]
        assert result("attention", "roar", k)["input_data_hash"] == k0["data_hash"]
        # random importance is model-independent: both modes mask the same tokens
        assert result("random", "roar", k)["data_hash"] == result("random", "recursive", k)["data_hash"]
    run = json.loads((project / "runs/babi-1/bilstm-attention/attention/roar/s0/k70.json").read_text())
    assert run["importance_seconds"] < 0.01  # computed once, at k = 40
    for kind in ("data/masked", "models", "results", "runs"):  # leave the DVC workspace as the pipeline made it
        for measure in ("random", "attention"):
            shutil.rmtree(project / f"{kind}/babi-1/bilstm-attention/{measure}/roar")


def test_second_repro_does_nothing(project: Path) -> None:
    before = len(runs(project))
    out = sh("dvc", "repro", cwd=project)
    assert "Data and pipelines are up to date" in out
    assert len(runs(project)) == before


def test_mlflow_run_entry_point_reproduces_a_chain(project: Path) -> None:
    env = project_env(project, MLFLOW_TRACKING_URI=f"sqlite:///{project / 'mlflow.db'}")
    proc = subprocess.run(["mlflow", "run", ".", "-e", "chain", "-P", "measure=attention", "-P", "seed=1",
                           "--env-manager", "local"], cwd=project, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "recursive@babi-1-bilstm-attention-attention-1' didn't change" in proc.stdout + proc.stderr


def test_param_change_reruns_only_that_measure(project: Path) -> None:
    original = (project / "params.yaml").read_text()
    params = yaml.safe_load(original)
    params["importance"]["attention"] = {"note": 1}
    try:
        (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        changed = sorted(json.loads(sh("dvc", "status", "--json", cwd=project)))
    finally:  # the other tests expect the study's params
        (project / "params.yaml").write_text(original)
    assert changed == ["recursive@babi-1-bilstm-attention-attention-0", "recursive@babi-1-bilstm-attention-attention-1"]


def test_s3_remote_push_and_pull_in_a_clean_clone(project: Path, tmp_path: Path) -> None:
    """Push to a real S3-protocol server (moto) on 127.0.0.1; a fresh clone pulls every output."""
    with s3_server("roar") as endpoint:
        env = project_env(project, **S3_CREDENTIALS)
        sh("git", "checkout", "-q", "params.yaml", cwd=project)
        sh("dvc", "remote", "add", "-f", "s3", "s3://roar/store", cwd=project)
        sh("dvc", "remote", "modify", "s3", "endpointurl", endpoint, cwd=project)
        commit(project, "results")
        sh("dvc", "push", "-r", "s3", cwd=project, env=env)
        clone = tmp_path / "clone"
        sh("git", "clone", "-q", str(project), str(clone), cwd=tmp_path)
        sh("dvc", "pull", "-r", "s3", cwd=clone, env=env)
        for k in (40, 70):
            for kind in ("data/masked", "models"):
                step = clone / f"{kind}/babi-1/bilstm-attention/attention/recursive/s1/k{k}"
                original = project / step.relative_to(clone)
                assert sorted(p.name for p in step.iterdir()) == sorted(p.name for p in original.iterdir())
        assert (clone / "models/babi-1/bilstm-attention/k0/s0/model.safetensors").read_bytes() == \
            (project / "models/babi-1/bilstm-attention/k0/s0/model.safetensors").read_bytes()
        status = sh("dvc", "status", cwd=clone, env=env)
        assert "up to date" in status
