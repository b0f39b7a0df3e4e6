"""Step records keep their on-disk keys through a read and a write; the step store reuses a
step only when its key and its files match."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from roar.config.layout import run_facts_path
from roar.core.fileio import content_hash
from roar.pipeline.step_record import CurveScore, StepRecord, read_records
from roar.pipeline.step_store import StepStore

SCORE = {"value": 0.5, "data_hash": "d1", "model_hash": "m0"}
STEP = {"dataset": "babi-1", "model": "bilstm-attention", "measure": "gradient", "recursive": True,
        "strategy": "quantile", "seed": 0, "k": 90, "target": "predicted", "metric": "accuracy", "value": 0.61,
        "val_metric": 0.6, "best_epoch": 3, "leakage": {"mask_probe": 0.3, "majority": 0.2},
        "predicted_is_gold_train": 0.9, "predicted_is_gold_test": 0.8,
        "data_hash": "d1", "model_hash": "m1", "input_data_hash": "d0", "input_model_hash": "m0",
        "data_path": "data/masked/x/k90", "model_path": "models/x/k90", "step_key": "abc", "code_fingerprint": "c",
        "libraries": {"torch": "2"}, "no_retrain": {"k0-model": SCORE, "previous-model": SCORE},
        "no_retrain_end": {"k": 100, "k0-model": SCORE, "previous-model": SCORE}}
STEP_RUN = {"study_run_id": "st", "chain_run_id": "c1", "step_run_id": "s1", "train_run_id": "t",
            "importance_run_id": "i1", "git_commit": "g", "train_seconds": 12.5, "importance_seconds": 1.5,
            "scoring_seconds": {"k0-model": 0.25, "previous-model": 0.5}, "end_scoring_seconds": {"k0-model": 0.75}}
SHARED = {"dataset": "babi-1", "model": "bilstm-attention", "measure": "shared", "recursive": None,
          "strategy": "quantile", "seed": 0, "k": 0, "metric": "accuracy", "value": 0.9, "val_metric": 0.88,
          "best_epoch": 5, "leakage": {"mask_probe": 0.2}, "data_hash": "d0", "model_hash": "m0",
          "data_path": "data/prepared/x", "model_path": "models/x/k0/s0"}
SHARED_RUN = {"study_run_id": "st", "chain_run_id": "c0", "step_run_id": "s0", "train_run_id": "t0",
              "git_commit": "g", "train_seconds": 20.0}


@pytest.mark.parametrize(("obj", "run"), [(STEP, STEP_RUN), (SHARED, SHARED_RUN), ({**STEP, "from_newer_code": [1]}, {})],
                         ids=["step", "shared", "extra"])
def test_a_record_writes_back_the_keys_and_values_it_was_read_from(obj: dict, run: dict, tmp_path: Path) -> None:
    record = StepRecord.from_json(json.loads(json.dumps(obj)), run)
    assert record.to_json() == obj and record.run.to_json() == run
    path = tmp_path / "study" / "results" / "babi-1" / "k.json"
    record.write(path)
    assert json.loads(path.read_text()) == obj
    assert json.loads((tmp_path / "study" / "runs" / "babi-1" / "k.json").read_text()) == run
    assert StepRecord.read(path) == record


def test_the_record_holds_what_the_inputs_determine_and_the_run_facts_what_the_run_was(tmp_path: Path) -> None:
    """Two runs of the same step (other run ids, commit and seconds) write byte-identical records."""
    first, second = tmp_path / "a" / "results" / "k90.json", tmp_path / "b" / "results" / "k90.json"
    StepRecord.from_json(STEP, STEP_RUN).write(first)
    StepRecord.from_json(STEP, {**STEP_RUN, "chain_run_id": "other", "git_commit": "h", "train_seconds": 99.0,
                                "scoring_seconds": {"k0-model": 3.0}}).write(second)
    assert first.read_bytes() == second.read_bytes()
    assert (tmp_path / "a" / "runs" / "k90.json").read_bytes() != (tmp_path / "b" / "runs" / "k90.json").read_bytes()


def test_a_record_of_older_code_with_its_run_inside_reads_into_record_and_run_facts() -> None:
    legacy = {**STEP, **{k: v for k, v in STEP_RUN.items() if not k.endswith("scoring_seconds")},
              "no_retrain": {"k0-model": {**SCORE, "seconds": 0.25}, "previous-model": {**SCORE, "seconds": 0.5}},
              "no_retrain_end": {"k": 100, "k0-model": {**SCORE, "seconds": 0.75}, "previous-model": SCORE}}
    record = StepRecord.from_json(legacy)
    assert record.to_json() == STEP and record.run.to_json() == STEP_RUN and record.extra == {}


def test_fields_of_a_chain_step_record() -> None:
    record = StepRecord.from_json(STEP, STEP_RUN)
    assert record.explained == {"train": 0.9, "test": 0.8}
    assert record.no_retrain["k0-model"] == CurveScore(0.5, "d1", "m0")
    k0_score = record.no_retrain["k0-model"]
    assert k0_score.made_from("d1", "m0") and not k0_score.made_from("d1", "m1")
    assert record.end_scores(100).keys() == {"k0-model", "previous-model"} and record.end_scores(50) == {}
    assert record.run.run_ids() == {"chain_run_id": "c1", "importance_run_id": "i1", "step_run_id": "s1",
                                    "study_run_id": "st", "train_run_id": "t"}
    assert record.with_run(train_seconds=1.0).run.train_seconds == 1.0 and record.run.train_seconds == 12.5
    assert StepRecord.from_json(SHARED).is_shared and not record.is_shared


def test_run_facts_live_under_runs_beside_results() -> None:
    assert run_facts_path(Path("studies/x/results/b/m/g/recursive/s0/k10.json")) == Path(
        "studies/x/runs/b/m/g/recursive/s0/k10.json")
    assert run_facts_path(Path("/w/results/q/results/k0/s0.json")) == Path("/w/results/q/runs/k0/s0.json")
    with pytest.raises(ValueError, match="not under a results folder"):
        run_facts_path(Path("elsewhere/k10.json"))


def test_a_file_that_is_no_record_is_named(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "k10.json").write_text(json.dumps({k: v for k, v in STEP.items() if k != "value"}))
    with pytest.raises(ValueError, match=r"k10.json: not a step record \(step record lacks value\)"):
        read_records(tmp_path / "results")


def test_the_store_reuses_a_step_only_with_its_key_and_its_files(tmp_path: Path) -> None:
    store = StepStore(tmp_path / "data", tmp_path / "models", tmp_path / "results")
    for folder, name in ((store.data_dir(90), "train.arrow"), (store.model_dir(90), "model.safetensors")):
        folder.mkdir(parents=True)
        (folder / name).write_text(name)
    record = StepRecord.from_json({**STEP, "data_path": str(store.data_dir(90)), "model_path": str(store.model_dir(90)),
                                   "data_hash": content_hash(store.data_dir(90)),
                                   "model_hash": content_hash(store.model_dir(90))})
    store.write(record)
    said = []
    assert store.load_done(90, {"abc"}, said.append) == record
    assert store.load_done(90, {"other key"}, said.append) is None and not said
    assert store.load_done(10, {"abc"}, said.append) is None  # no record
    (store.model_dir(90) / "model.safetensors").write_text("changed")
    assert store.load_done(90, {"abc"}, said.append) is None
    assert "differs from the step record's" in said[0]
    store.record_path(90).write_text("{")
    assert store.load_done(90, {"abc"}, said.append) is None and "unreadable step record" in said[1]


def _chain_store(study: Path) -> StepStore:
    chain = Path("babi-1/bilstm-attention/attention/recursive/s0")
    return StepStore(study / "data/masked" / chain, study / "models" / chain, study / "results" / chain)


def _finish_step(store: StepStore, k: int, key: str) -> StepRecord:
    for folder, name in ((store.data_dir(k), "train.arrow"), (store.model_dir(k), "model.safetensors")):
        folder.mkdir(parents=True)
        (folder / name).write_text(f"{name} of {store.study_folder().name}")
    record = StepRecord.from_json({**STEP, "k": k, "step_key": key, "data_path": str(store.data_dir(k)),
                                   "model_path": str(store.model_dir(k)), "data_hash": content_hash(store.data_dir(k)),
                                   "model_hash": content_hash(store.model_dir(k))}, STEP_RUN)
    store.write(record)
    return record


def test_a_step_done_with_the_same_key_in_another_study_folder_is_copied_not_recomputed(tmp_path: Path) -> None:
    (tmp_path / ".dvc").mkdir()
    for name in ("gold", "predicted", "unrelated"):
        (tmp_path / "studies" / name).mkdir(parents=True)
        (tmp_path / "studies" / name / "params.yaml").write_text("study: {}\n")
    gold, predicted = _chain_store(tmp_path / "studies/gold"), _chain_store(tmp_path / "studies/predicted")
    done = _finish_step(gold, 10, "same key")
    _finish_step(_chain_store(tmp_path / "studies/unrelated"), 10, "another key")
    (tmp_path / "studies/empty").mkdir()  # no params.yaml: not a study folder
    assert predicted.study_folder() == (tmp_path / "studies/predicted").resolve()
    assert [s.study_folder().name for s in predicted.elsewhere()] == [tmp_path.name, "gold", "unrelated"]

    said = []
    assert predicted.load_done(10, {"a key of no study"}, said.append) is None and not said
    assert not predicted.data_dir(10).exists()
    record = predicted.load_done(10, {"same key"}, said.append)
    assert record is not None and "done in" in said[0] and said[0].rstrip().endswith("recomputing it")
    assert "studies/gold" in said[0]
    for there, here in ((gold.data_dir(10), predicted.data_dir(10)), (gold.model_dir(10), predicted.model_dir(10))):
        assert content_hash(here) == content_hash(there) and (here / next(p.name for p in there.iterdir())).is_file()
    assert record.data_path == str(predicted.data_dir(10)) and record.model_path == str(predicted.model_dir(10))
    assert (record.value, record.step_key, record.data_hash, record.run) == (done.value, "same key", done.data_hash,
                                                                            done.run)  # it names the run that made it
    assert not list(predicted.data.glob("*.tmp*")) and not list(predicted.models.glob("*.tmp*"))
    # now done here: reused in place, nothing copied again
    said.clear()
    assert predicted.load_done(10, {"same key"}, said.append) == record and not said


def test_a_step_elsewhere_whose_files_changed_is_not_copied(tmp_path: Path) -> None:
    (tmp_path / ".dvc").mkdir()
    for name in ("gold", "predicted"):
        (tmp_path / "studies" / name).mkdir(parents=True)
        (tmp_path / "studies" / name / "params.yaml").write_text("study: {}\n")
    gold, predicted = _chain_store(tmp_path / "studies/gold"), _chain_store(tmp_path / "studies/predicted")
    _finish_step(gold, 10, "same key")
    (gold.model_dir(10) / "model.safetensors").write_text("retrained since")
    assert predicted.load_done(10, {"same key"}, lambda message: None) is None
    assert not predicted.model_dir(10).exists() and not predicted.record_path(10).exists()
    shutil.rmtree(gold.data_dir(10))  # a study folder whose DVC outputs this machine lacks
    assert predicted.load_done(10, {"same key"}, lambda message: None) is None


def test_the_store_drops_steps_no_longer_studied(tmp_path: Path) -> None:
    store = StepStore(tmp_path / "data", tmp_path / "models", tmp_path / "results")
    for k in (10, 20):
        store.data_dir(k).mkdir(parents=True)
        store.model_dir(k).mkdir(parents=True)
        store.write(StepRecord.from_json({**STEP, "k": k}))
    store.remove_stale([20])
    assert [p.name for p in store.data.iterdir()] == ["k20"] and [p.name for p in store.models.iterdir()] == ["k20"]
    assert [p.name for p in store.results.iterdir()] == ["k20.json"] == [p.name for p in store.runs.iterdir()]
