"""``roar pipeline --time-budget`` on a real git + DVC + MLflow project: a call whose budget admits only the
stages already done stops cleanly (partial report naming the missing seed, study run ended, lock released,
exit 75, what is left: the final report included), and the next call resumes and finishes the study."""

from __future__ import annotations

import re
import subprocess

import pandas as pd

from roar.launch.pipeline_log import FINISHED, STOPPED, read_calls
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
