"""The MLflow tags that the UI reads: experiment kind, source, curves, RACU, and nesting under `mlflow run`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from roar.tracking.protocol import log_curve
from roar.tracking.mlflow_tracker import (EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, Tracker, entry_point, log_report,
                                          refresh_report, runs_page_url)
from tests.conftest import tiny_params


@pytest.fixture
def store(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("ROAR_STUDY_RUN_ID", raising=False)
    return tmp_path


def test_experiment_kind_source_tags_and_curve(store: Path) -> None:
    tracker = Tracker("study-a", store)
    assert tracker.client.get_experiment(tracker.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    study = tracker.study_run("study-a", "key", {})
    tags = {"roar.dataset": "babi-1", "roar.model": "m", "roar.measure": "attention", "roar.recursive": "true",
            "roar.seed": "0"}
    with tracker.run("chain", "c", study, tags) as chain:
        pass
    run = tracker.client.get_run(chain)
    assert run.data.tags["roar.study_run"] == study and run.data.tags["mlflow.parentRunId"] == study
    assert run.data.tags["mlflow.source.type"] == "PROJECT"
    assert run.data.tags["mlflow.source.name"] == str(store.resolve())
    k0 = store / "k0"
    k0.mkdir()
    (k0 / "result.json").write_text('{"metric": "accuracy", "test_metric": 0.9}')
    log_curve(tracker, chain, [(40, "accuracy", 0.5), (70, "accuracy", 0.3)], k0)
    history = tracker.client.get_metric_history(chain, "retrained_accuracy")
    assert [(m.step, m.value) for m in history] == [(0, 0.9), (40, 0.5), (70, 0.3)]
    per_seed = pd.DataFrame([
        {"dataset": "babi-1", "model": "m", "measure": "attention", "recursive": True, "seed": 0,
         "curve": "retrained", "racu": 0.75, "racu_unclipped": 0.75},
        {"dataset": "babi-1", "model": "m", "measure": "attention", "recursive": True, "seed": 0,
         "curve": "k0-model", "racu": float("nan"), "racu_unclipped": -1.5},
        {"dataset": "babi-1", "model": "m", "measure": "attention", "recursive": True, "seed": 1,
         "curve": "retrained", "racu": 0.1, "racu_unclipped": 0.1}])  # seed 1 has no chain run: left out
    assert tracker.log_chain_racu(per_seed) == [chain]
    assert tracker.client.get_run(chain).data.metrics == {
        "retrained_accuracy": 0.3, "racu": 0.75, "racu_unclipped": 0.75, "racu_unclipped_k0_model": -1.5}
    # an experiment made without the kind (older roar, or by hand) gets it
    other = tracker.client.create_experiment("study-b")
    assert EXPERIMENT_KIND_TAG not in tracker.client.get_experiment(other).tags
    Tracker("study-b", store)
    assert tracker.client.get_experiment(other).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND


def test_runs_nest_under_the_mlflow_run_entry_point(store: Path, monkeypatch, capsys) -> None:
    first = Tracker("study-a", store)
    study = first.study_run("study-a", "key", {})
    launch = first.client.create_run(first.experiment_id, tags={"mlflow.project.entryPoint": "chain"}).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", launch)
    tracker = Tracker("study-a", store)
    assert tracker.study_run("study-a", "key", {}) == study
    chains = [tracker.start("chain", f"c{i}", study, {}) for i in range(2)]
    step = tracker.start("step", "k=10", chains[0], {})
    parent = {r: tracker.client.get_run(r).data.tags["mlflow.parentRunId"] for r in (*chains, step, launch)}
    assert parent == {chains[0]: launch, chains[1]: launch, step: chains[0], launch: study}
    assert tracker.client.get_run(launch).data.tags["roar.kind"] == "launch"
    # a run of another experiment (`mlflow run` without --experiment-name) is named, not nested under
    elsewhere = first.client.create_run("0").info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", elsewhere)
    tracker = Tracker("study-a", store)
    assert "--experiment-name study-a" in capsys.readouterr().err
    chain = tracker.start("chain", "c", tracker.study_run("study-a", "key", {}), {})
    assert tracker.client.get_run(chain).data.tags["mlflow.parentRunId"] == study
    assert "mlflow.parentRunId" not in tracker.client.get_run(elsewhere).data.tags


def test_entry_point_and_runs_page() -> None:
    assert entry_point(["/venv/bin/roar", "chain", "babi-1"]) == "chain"
    assert entry_point(["/venv/bin/pytest", "-q"]) == "pytest"
    assert runs_page_url("7", "http://127.0.0.1:5000/") == \
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"


def _call_at_barrier(call, args: tuple, barrier, errors) -> None:
    barrier.wait()
    try:
        call(*args)
    except Exception as error:  # reported to the parent, which names it in the failure
        errors.put(f"{type(error).__name__}: {str(error)[:200]}")


def run_at_once(call, calls: list[tuple]) -> list[str]:
    """``call(*args)`` for each of ``calls`` in its own forked process, all released by one barrier;
    the errors they raised."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    barrier, errors = context.Barrier(len(calls)), context.Queue()
    workers = [context.Process(target=_call_at_barrier, args=(call, args, barrier, errors)) for args in calls]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    failed = [errors.get() for _ in range(errors.qsize())]
    return failed + [f"worker exit code {w.exitcode}" for w in workers if w.exitcode != 0 and not failed]


def test_stages_logging_one_new_dataset_at_once_all_record_it(store: Path) -> None:
    """MLflow's SQL store looks a dataset up, then inserts it: processes that log one new dataset at
    the same instant race for the insert (seen in CI: ``UNIQUE constraint failed: datasets...``).
    Six real processes released by a barrier, eight times over; every run must get the input."""
    tracker = Tracker("study-a", store)
    for trial in range(8):
        runs = [tracker.start("train", f"t{trial}-{i}", None, {}) for i in range(6)]
        assert run_at_once(tracker.log_dataset, [(run, f"ds-{trial}", Path("data/prepared/x"), "d" * 40, "train")
                                                 for run in runs]) == []
        for run in runs:
            inputs = tracker.client.get_run(run).inputs.dataset_inputs
            assert [(i.dataset.name, i.tags[0].value) for i in inputs] == [(f"ds-{trial}", "train")]


def test_only_unique_key_violations_are_retried() -> None:
    from roar.tracking.mlflow_tracker import lost_insert_race

    assert lost_insert_race(RuntimeError("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: datasets"))
    assert lost_insert_race(RuntimeError('(psycopg2.errors.UniqueViolation) duplicate key value violates unique '
                                         'constraint "dataset_pk"'))
    assert not lost_insert_race(RuntimeError("INVALID_PARAMETER_VALUE: Run 'abc' not found"))


def test_parallel_stages_of_one_mlflow_run_all_nest_it(store: Path, monkeypatch) -> None:
    """Under ``mlflow run`` every stage process tags the entry point's run the first time it starts a run
    under the study run; parallel stages do it in the same instant (MLflow's ``set_tag`` fails on that
    race with ``UNIQUE constraint failed: tags.key, tags.run_uuid``). Six real processes, five times over."""
    first = Tracker("study-a", store)
    study = first.study_run("study-a", "key", {})
    for trial in range(5):
        launch = first.client.create_run(first.experiment_id).info.run_id
        monkeypatch.setenv("MLFLOW_RUN_ID", launch)
        tracker = Tracker("study-a", store)
        tracker.study_run("study-a", "key", {})
        assert run_at_once(tracker.start, [("chain", f"c{trial}-{i}", study, {}) for i in range(6)]) == []
        tags = tracker.client.get_run(launch).data.tags
        assert (tags["mlflow.parentRunId"], tags["roar.kind"], tags["roar.study_run"]) == (study, "launch", study)
        chains = tracker.client.search_runs([tracker.experiment_id], f"tags.`mlflow.runName` LIKE 'c{trial}-%'")
        assert sorted(r.data.tags["mlflow.parentRunId"] for r in chains) == [launch] * 6


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


def test_a_rewritten_report_replaces_the_report_runs_files(store: Path) -> None:
    """`roar pipeline` rewrites README.md and writes machines.csv after its report stage logged the report:
    the refresh logs them to that same report run, so MLflow keeps what is on disk."""
    from mlflow.artifacts import download_artifacts

    params = tiny_params()
    reports = store / "reports"
    (reports / "figures").mkdir(parents=True)
    (reports / "README.md").write_text("as the stage wrote it\n")
    (reports / "figures" / "racu.png").write_bytes(b"png")
    racu = pd.DataFrame([{"dataset": "babi-1", "model": "m", "measure": "attention", "recursive": True,
                          "racu_mean": 0.5, "racu_low": None, "racu_high": None, "interval": "", "n_seeds": 1}])
    stage_run = log_report(params, reports, racu, store)
    (reports / "README.md").write_text("with this call's machines\n")
    (reports / "machines.csv").write_text("machine,calls\nx,1\n")
    (reports / ".gitignore").write_text("/points.csv\n")  # DVC's, written after the stage: not the report's
    assert refresh_report(params, reports, racu, store) == stage_run
    tracker = Tracker("tiny", store)
    kinds = [r.data.tags["roar.kind"] for r in tracker.client.search_runs([tracker.experiment_id])]
    assert sorted(kinds) == ["report", "study"]  # no second report run
    names = sorted(a.path for a in tracker.client.list_artifacts(stage_run))
    assert names == ["README.md", "figures", "machines.csv"]
    local = Path(download_artifacts(run_id=stage_run, artifact_path="README.md", dst_path=str(store / "got")))
    assert local.read_text() == "with this call's machines\n"
    assert tracker.client.get_run(stage_run).data.metrics == {"racu_mean.babi-1.m.recursive.attention": 0.5}
    # a study run with no report run yet (its report stage logged under an earlier commit's study run) gets one
    fresh = refresh_report(tiny_params("other"), reports, racu, store)
    other = Tracker("other", store)
    runs = {r.data.tags["roar.kind"]: r for r in other.client.search_runs([other.experiment_id])}
    assert sorted(runs) == ["report", "study"] and runs["report"].info.run_id == fresh
    assert runs["report"].data.tags["mlflow.parentRunId"] == runs["study"].info.run_id
