"""``roar pipeline --time-budget`` on a real git + DVC + MLflow project: a call whose budget admits only the
stages already done stops cleanly (partial report naming the missing seed, study run ended, lock released,
exit 75, what is left: the final report included), and the next call resumes and finishes the study; a chain
that does not fit whole runs the steps that fit and stops between steps."""

from __future__ import annotations

import json
import re
import subprocess

import pandas as pd
import pytest
import yaml

from roar.tracking.pipeline_log import FINISHED, STOPPED, read_calls
from tests.pipeline.conftest import make_project, mlflow_runs, project_env, sh, tiny_params


def test_a_budgeted_call_stops_between_stages_and_the_next_one_resumes(tmp_path) -> None:
    root = make_project(tmp_path / "tiny", tiny_params("budget"))
    seed0 = [f"{kind}@babi-1-bilstm-attention-{what}" for kind, what in (
        ("train_all_masked", "0"), ("recursive", "random-0"), ("recursive", "attention-0"))]
    sh("dvc", "repro", *seed0, cwd=root)  # seed 0 done (and prepare, its k = 0 model), seed 1 not started
    before = {p.relative_to(root): p.read_bytes() for p in (root / "results").rglob("*.json")}

    stopped = subprocess.run(["roar", "pipeline", "--time-budget", "1s", "--no-push"], cwd=root,
                             env=project_env(root), capture_output=True, text=True)
    out = stopped.stdout
    assert stopped.returncode == 75, out + stopped.stderr
    assert "train_k0@babi-1-bilstm-attention-1: not started" in out
    assert "recursive@babi-1-bilstm-attention-random-1" not in out.split("[roar] time budget reached")[0]
    left = [line.split()[-1] for line in out.split("[roar] time budget reached")[1].splitlines()[1:]
            if line.startswith("[roar]   ")]
    assert sorted(left) == sorted(["train_k0@babi-1-bilstm-attention-1", "train_all_masked@babi-1-bilstm-attention-1",
                                   "recursive@babi-1-bilstm-attention-random-1",
                                   "recursive@babi-1-bilstm-attention-attention-1", "report"]), out
    assert "run the same command again to resume" in out
    # nothing of seed 0 was recomputed, nothing of seed 1 written
    after = {p.relative_to(root): p.read_bytes() for p in (root / "results").rglob("*.json")}
    assert after == before
    # the partial report: the RACU of seed 0, seed 1 named as missing
    racu = pd.read_csv(root / "reports" / "racu.csv")
    assert set(racu["measure"]) == {"attention"} and racu["n_seeds"].tolist() == [1]
    excluded = pd.read_csv(root / "reports" / "excluded.csv")
    assert excluded[excluded["seed"] == 1]["reason"].str.contains("no results for this seed").all()
    readme = (root / "reports" / "README.md").read_text()
    assert "## Left out" in readme and "no results for this seed" in readme.split("## Left out")[1]
    study = [r for r in mlflow_runs(root, "budget") if r.data.tags.get("roar.kind") == "study"]
    assert [r.info.status for r in study] == ["FINISHED"]
    assert study[0].data.tags["roar.stopped_early"].startswith("time budget")
    assert all(r.info.status == "FINISHED" for r in mlflow_runs(root, "budget"))  # no run left open
    [stop] = read_calls(root)  # the pipeline log: this call, what it ran (nothing) and how it ended
    assert stop["outcome"] == STOPPED and stop["stages"] == {} and stop["jobs"] == 2

    resumed = sh("roar", "pipeline", "--time-budget", "3h", "--no-push", cwd=root)  # lock released: it starts
    assert "[roar] pipeline finished" in resumed
    for stage in seed0:
        assert f"{stage}: ok in" not in resumed  # done: not started again
    assert re.search(r"\[roar\] \d+ of \d+ stage\(s\) done", resumed), resumed
    assert {p.relative_to(root): p.read_bytes() for p in (root / "results").rglob("*.json")
            if p.relative_to(root) in before} == before
    racu = pd.read_csv(root / "reports" / "racu.csv")
    assert racu["n_seeds"].tolist() == [2]
    assert "up to date" in sh("dvc", "status", cwd=root)
    stop_again, finish = read_calls(root)
    assert stop_again == stop and finish["outcome"] == FINISHED
    assert set(finish["stages"]) == {"train_k0@babi-1-bilstm-attention-1", "train_all_masked@babi-1-bilstm-attention-1",
                                     "recursive@babi-1-bilstm-attention-random-1",
                                     "recursive@babi-1-bilstm-attention-attention-1", "report"}
    assert all(seconds > 0 for seconds in finish["stages"].values())
    assert finish["wall_seconds"] >= max(finish["stages"].values())
    assert "2 call(s) so far" in resumed


def test_a_chain_that_does_not_fit_runs_the_steps_that_do_and_the_next_call_finishes_it(tmp_path, monkeypatch) -> None:
    """A budget whose end comes before the chain's last step: the stage reuses its finished steps, stops before
    the one left (exit 75 of its command, its chain run KILLED), the partial report names the missing step, and
    the next call computes only that step."""
    import time

    from roar.launch.budget import TimeBudget
    from roar.launch.local import StoppedEarly, run_pipeline

    root = make_project(tmp_path / "tiny", tiny_params("partial", seeds=[0]))
    chain = "recursive@babi-1-bilstm-attention-attention-0"
    sh("dvc", "repro", cwd=root)
    records = root / "results/babi-1/bilstm-attention/attention/recursive/s0"
    kept, last = records / "k40.json", records / "k70.json"
    kept_bytes, last_bytes = kept.read_bytes(), last.read_bytes()
    last.unlink()  # step 70 to do again: the stage is stale
    for part in ("data/masked", "models"):  # as for a chain that never finished: git does not ignore its outputs yet
        (root / part / "babi-1/bilstm-attention/attention/recursive/.gitignore").unlink()
    locked = yaml.safe_load((root / "dvc.lock").read_text())["stages"][chain]

    for name, value in project_env(root).items():
        monkeypatch.setenv(name, value)
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "ROAR_STUDY_RUN_ID", "ROAR_FAILPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    # the budget's clock says an hour is left, so the chain starts; its deadline (wall clock) is 20 s away,
    # too close for a step planned at 600 s: the stage stops before step 70, whatever this machine's speed
    budget = TimeBudget(3600.0, {chain: 6000.0}, step_planned={chain: 600.0}, wall_clock=lambda: time.time() - 3580)
    lines: list[str] = []
    with pytest.raises(StoppedEarly) as stopped:
        run_pipeline(root, jobs=1, log=lines.append, gate=budget)
    assert stopped.value.refused == [chain]
    assert any(f"{chain}: stopped between steps after" in line for line in lines), lines
    assert kept.read_bytes() == kept_bytes and not last.exists()
    untracked = sh("git", "status", "--porcelain", "--untracked-files=all", "data", "models", cwd=root).splitlines()
    assert [line for line in untracked if not line.endswith(".gitignore")] == []  # `git add` at a stop takes no model
    assert yaml.safe_load((root / "dvc.lock").read_text())["stages"][chain] == locked  # nothing locked for the stop
    excluded = pd.read_csv(root / "reports" / "excluded.csv")
    assert excluded["reason"].str.contains("missing k 70").any(), excluded
    runs = mlflow_runs(root, "partial")
    chains = [r for r in runs if r.data.tags.get("roar.kind") == "chain" and r.data.tags.get("roar.measure") == "attention"]
    assert [r.info.status for r in chains].count("KILLED") == 1
    assert "RUNNING" not in {r.info.status for r in runs}
    stop = read_calls(root)[-1]
    assert stop["outcome"] == STOPPED and stop["stages"][chain] > 0

    resumed = sh("roar", "pipeline", "--time-budget", "3h", "--no-push", cwd=root)
    assert f"{chain}: ok in" in resumed, resumed
    remade, before = json.loads(last.read_bytes()), json.loads(last_bytes)
    assert (remade["data_hash"], remade["model_hash"]) == (before["data_hash"], before["model_hash"])
    assert kept.read_bytes() == kept_bytes
    assert "up to date" in sh("dvc", "status", cwd=root)
