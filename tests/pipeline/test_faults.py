"""Faults and reuse with real processes: kill -9 at named points and of the whole pipeline, SIGTERM mid-step, a
second pipeline in the same workspace, code and params changes. Real DVC, real MLflow (SQLite),
real files; every run is compared with an uninterrupted run of the same study."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from roar.tracking.pipeline_log import read_calls, stopped_by
from tests.pipeline.conftest import REPO, commit, copy_project, make_project, mlflow_runs, project_env, sh

STUDY = "faults"
CHAINS = ("random", "gradient")
STEPS = (40, 70)


def fault_params() -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["study"].update(name=STUDY, measures=list(CHAINS), roar_measures=[], seeds=[0], steps=list(STEPS))
    params["prepare"]["babi-1"].update(n_train=300, n_test=60)
    params["train"]["bilstm-attention"]["babi-1"].update(epochs=2, lr=0.01)
    return params


def pipeline(root: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["roar", "pipeline", "--no-push"], cwd=root, env=project_env(root, **env),
                          capture_output=True, text=True)


def chain_dir(root: Path, kind: str, measure: str) -> Path:
    prefix = {"data": "data/masked", "models": "models", "results": "results", "runs": "runs"}[kind]
    return root / f"{prefix}/babi-1/bilstm-attention/{measure}/recursive/s0"


def records(root: Path, measure: str) -> dict[int, dict]:
    """Each step's record with its run facts."""
    return {k: json.loads((chain_dir(root, "results", measure) / f"k{k}.json").read_text())
            | json.loads((chain_dir(root, "runs", measure) / f"k{k}.json").read_text()) for k in STEPS}


def assert_nothing_half_written(root: Path) -> None:
    """Every step folder or record that exists under its final name is complete."""
    for measure in CHAINS:
        for k in STEPS:
            data, model = chain_dir(root, "data", measure) / f"k{k}", chain_dir(root, "models", measure) / f"k{k}"
            if data.exists():
                assert sorted(p.name for p in data.iterdir()) == ["meta.json", "test.arrow", "train.arrow",
                                                                  "val.arrow", "vocab.json"]
            if model.exists():
                assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors", "result.json"]
            record = chain_dir(root, "results", measure) / f"k{k}.json"
            if record.exists():
                assert json.loads(record.read_text())["k"] == k


def assert_no_run_left_running(root: Path) -> list:
    runs = mlflow_runs(root, STUDY)
    assert [r.info.run_name for r in runs if r.info.status == "RUNNING"] == []
    return runs


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    """The study run once, uninterrupted."""
    root = make_project(tmp_path_factory.mktemp("faults") / "baseline", fault_params())
    proc = pipeline(root)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return root


def test_kill9_at_each_point_then_rerun_gives_identical_results(baseline: Path, tmp_path: Path) -> None:
    root = make_project(tmp_path / "killed", fault_params())
    # Each run dies (SIGKILL, in both chains) at the next point; finished steps survive the kills.
    for point in ("data-written@k40", "model-written@k40", "importance@k70", "train@k70"):
        proc = pipeline(root, ROAR_FAILPOINT=point)
        assert proc.returncode != 0, point
        assert "FAILED" in proc.stdout, point
        assert_nothing_half_written(root)
        assert not (root / "reports/points.csv").exists()
    # the k = 40 steps finished in the third run; the fourth reused them
    assert all((chain_dir(root, "results", m) / "k40.json").is_file() for m in CHAINS)
    assert not any((chain_dir(root, "results", m) / "k70.json").is_file() for m in CHAINS)

    # A second pipeline in the same workspace is refused with one line while the first runs.
    first = subprocess.Popen(["roar", "pipeline", "--no-push"], cwd=root, env=project_env(root),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = root / ".roar.pipeline.lock"
    for _ in range(600):
        if lock.is_file() and lock.read_text().strip():
            break
        time.sleep(0.05)
    second = pipeline(root)
    out, err = first.communicate(timeout=900)
    assert first.returncode == 0, out[-2000:] + err[-3000:]
    assert second.returncode == 2
    assert second.stderr.strip().count("\n") == 0 and "another `roar pipeline`" in second.stderr

    for name in ("points.csv", "racu.csv", "curves.csv"):
        assert (root / "reports" / name).read_text() == (baseline / "reports" / name).read_text(), name
    for measure in CHAINS:
        got, want = records(root, measure), records(baseline, measure)
        for k in STEPS:
            assert (got[k]["data_hash"], got[k]["model_hash"]) == (want[k]["data_hash"], want[k]["model_hash"])
    assert not [p for p in root.rglob(".*tmp*")], "temporary folders left behind"
    runs = assert_no_run_left_running(root)
    killed = [r for r in runs if r.info.status == "KILLED"]
    assert {r.data.tags["roar.kind"] for r in killed} >= {"chain", "step", "importance", "train"}
    reused = [r for r in runs if r.data.tags.get("roar.reused") == "true"]
    assert sorted(r.data.tags["roar.k"] for r in reused) >= ["40", "40"]
    by_id = {r.info.run_id: r for r in runs}
    assert all(r.data.tags["roar.reused_from"] in by_id for r in reused)  # linked to the run that computed it


def test_kill9_of_the_whole_pipeline_then_rerun(baseline: Path, tmp_path: Path) -> None:
    root = make_project(tmp_path / "group", fault_params())
    proc = subprocess.Popen(["roar", "pipeline", "--no-push"], cwd=root, env=project_env(root),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    target = chain_dir(root, "data", "gradient") / "k40"
    for _ in range(6000):
        if target.is_dir() or proc.poll() is not None:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # roar pipeline, dvc and the stage processes at once
    proc.wait()
    assert target.is_dir(), "the pipeline ended before the kill"
    assert_nothing_half_written(root)
    rerun = pipeline(root)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    assert (root / "reports/points.csv").read_text() == (baseline / "reports/points.csv").read_text()
    runs = assert_no_run_left_running(root)
    assert any(r.info.status == "KILLED" and r.data.tags["roar.kind"] == "chain" for r in runs)
    # the killed pipeline's study run was ended by the next process, then reopened and finished by it
    (study,) = [r for r in runs if r.data.tags["roar.kind"] == "study"]
    assert study.info.status == "FINISHED" and "owner process gone" in study.data.tags["roar.ended_by"]


def processes_in(root: Path) -> list[str]:
    """The command lines of the live processes working in ``root`` (zombies excluded)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "cwd").resolve() == root.resolve() and "(Z)" not in (proc / "status").read_text():
                found.append((proc / "cmdline").read_text().replace("\0", " "))
        except OSError:
            continue
    return found


def both_chains_training_step_70(root: Path) -> bool:
    return {r.data.tags["roar.measure"] for r in mlflow_runs(root, STUDY) if r.info.status == "RUNNING"
            and r.data.tags.get("roar.kind") == "train" and r.data.tags.get("roar.k") == "70"} == set(CHAINS)


@pytest.mark.parametrize("to, inside", [("pipeline", "data-written"), ("every process", "train")])
def test_sigterm_mid_step_stops_the_stages_cleanly_and_a_rerun_finishes(baseline: Path, tmp_path: Path, to: str,
                                                                          inside: str) -> None:
    """SIGTERM while both chains are inside step 70: to `roar pipeline` alone (`kill`, a supervisor) after the
    step's data is written, or to every process at once (a machine shutting down, Slurm at a job's time limit or
    on preemption) inside the step's training, where Lightning's Trainer has its own SIGTERM handler. The chains
    drop step 70 and stop (SIGINT from the pipeline, or their own SIGTERM), every run they leave ends KILLED and
    none FAILED, no process is left, the call exits 75 and is logged as stopped; the rerun gives the
    uninterrupted run's results."""
    root = make_project(tmp_path / "sigterm", fault_params())
    proc = subprocess.Popen(["roar", "pipeline", "--no-push"], cwd=root, start_new_session=True, text=True,
                            env=project_env(root, ROAR_FAILPOINT=f"stall:{inside}@k70"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stalled = [chain_dir(root, "data", m) / "k70" for m in CHAINS]
    for _ in range(3000):
        if (all(p.is_dir() for p in stalled) and (inside != "train" or both_chains_training_step_70(root))
                or proc.poll() is not None):
            break
        time.sleep(0.2)
    assert all(p.is_dir() for p in stalled), "the chains did not reach step 70"
    if to == "pipeline":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 75, out[-2000:] + err[-3000:]
    assert "stopped by SIGTERM" in out and "run the same command again to resume" in out
    assert processes_in(root) == []
    assert_nothing_half_written(root)
    assert all((chain_dir(root, "results", m) / "k40.json").is_file() for m in CHAINS)
    assert not any((chain_dir(root, "results", m) / "k70.json").is_file() for m in CHAINS)
    runs = assert_no_run_left_running(root)
    assert [r.info.run_name for r in runs if r.info.status == "FAILED"] == []
    assert {(r.data.tags["roar.measure"], r.info.status) for r in runs if r.data.tags["roar.kind"] == "chain"
            and r.data.tags["roar.measure"] in CHAINS} == {(m, "KILLED") for m in CHAINS}
    at_70 = {(r.data.tags["roar.kind"], r.data.tags["roar.measure"], r.info.status) for r in runs
             if r.data.tags.get("roar.k") == "70"}  # the step's importance finished, its data written, then the stop
    killed = ("step", "train") if inside == "train" else ("step",)
    assert at_70 == {(kind, m, "KILLED") for m in CHAINS for kind in killed} | {
        ("importance", m, "FINISHED") for m in CHAINS}
    assert read_calls(root)[-1]["outcome"] == stopped_by("SIGTERM") == "stopped by SIGTERM"

    rerun = pipeline(root)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-3000:]
    assert (root / "reports/points.csv").read_text() == (baseline / "reports/points.csv").read_text()
    (study,) = [r for r in mlflow_runs(root, STUDY) if r.data.tags["roar.kind"] == "study"]
    assert study.info.status == "FINISHED"


def test_a_comment_changes_no_stage_and_code_of_one_measure_recomputes_exactly_its_steps(baseline: Path) -> None:
    before = {m: records(baseline, m) for m in CHAINS}
    module = baseline / "src/roar/importance/gradient.py"
    original = module.read_text()
    module.write_text(original + "\n# a comment: no stage's code changed\n")
    sh("roar", "provenance", "update", cwd=baseline)
    assert json.loads(sh("dvc", "status", "--json", cwd=baseline)) == {}
    module.write_text(original + "\n\ndef _unused() -> int:\n    return 0\n")  # code: the numbers do not move
    try:
        sh("roar", "provenance", "update", cwd=baseline)
        changed = sorted(json.loads(sh("dvc", "status", "--json", cwd=baseline)))
        assert changed == ["recursive@babi-1-bilstm-attention-gradient-0"]
        sh("dvc", "repro", cwd=baseline)
        after = {m: records(baseline, m) for m in CHAINS}
        for k in STEPS:
            assert after["gradient"][k]["step_run_id"] != before["gradient"][k]["step_run_id"]  # recomputed
            assert after["gradient"][k]["code_fingerprint"] != before["gradient"][k]["code_fingerprint"]
            assert after["gradient"][k]["data_hash"] == before["gradient"][k]["data_hash"]  # same numbers
            assert after["random"][k] == before["random"][k]  # reused, record untouched
        assert "up to date" in sh("dvc", "status", cwd=baseline)
    finally:
        module.write_text(original)
        sh("roar", "provenance", "update", cwd=baseline)
        sh("dvc", "repro", cwd=baseline)


@pytest.mark.parametrize("module, stages", [
    ("report/tables.py", {"report"}),
    ("method/racu.py", {"report"}),
    ("models/metrics.py", {"train_k0", "train_all_masked", "recursive"}),
    # the report reads step records, not datasets: a change to the dataset format does not re-run it
    ("data/storage.py", {"prepare", "train_k0", "train_all_masked", "recursive"}),
    # tracking is not on any computing path: a change there re-runs nothing
    ("tracking/mlflow_tracker.py", set()),
])
def test_a_module_change_invalidates_the_stages_that_compute_with_it(baseline: Path, module: str,
                                                                      stages: set) -> None:
    from roar.pipeline.provenance import STAGE_KINDS, computing_modules

    name = "roar." + module.removesuffix(".py").replace("/", ".")
    expected = {s for s, kind in STAGE_KINDS.items() if name in computing_modules(kind)} - {"roar"}
    assert expected == stages  # the derived computing paths, as the test states them (no plain-ROAR chain here)
    path = baseline / "src/roar" / module
    original = path.read_text()
    path.write_text(original + "\n_TOUCHED = True\n")
    try:
        sh("roar", "provenance", "update", cwd=baseline)
        changed = {name.split("@")[0] for name in json.loads(sh("dvc", "status", "--json", cwd=baseline))}
    finally:
        path.write_text(original)
        sh("roar", "provenance", "update", cwd=baseline)
    assert changed == stages


def test_params_change_then_revert_never_pairs_a_record_with_other_data(baseline: Path, tmp_path: Path) -> None:
    """Params B leave step data on disk under a record of params A (killed before B's record was
    written); after the revert to A that record must not be reused with B's data."""
    root = copy_project(baseline, tmp_path / "revert")  # the study run with params A
    params_a = (root / "params.yaml").read_text()
    params_b = yaml.safe_load(params_a)
    params_b["train"]["bilstm-attention"]["babi-1"]["epochs"] = 3  # other models, other masks
    (root / "params.yaml").write_text(yaml.safe_dump(params_b, sort_keys=False))
    proc = pipeline(root, ROAR_FAILPOINT="data-written@k70")
    assert proc.returncode != 0
    record70 = records(root, "gradient")[70]  # still params A's record ...
    data70 = chain_dir(root, "data", "gradient") / "k70"
    from roar.core.fileio import content_hash

    assert content_hash(data70) != record70["data_hash"]  # ... beside params B's data
    (root / "params.yaml").write_text(params_a)
    assert pipeline(root).returncode == 0
    assert (root / "reports/points.csv").read_text() == (baseline / "reports/points.csv").read_text()
    assert records(root, "gradient")[70]["data_hash"] == records(baseline, "gradient")[70]["data_hash"]
    assert_no_run_left_running(root)
    commit(root, "done")
