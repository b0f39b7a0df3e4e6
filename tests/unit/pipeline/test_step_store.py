"""When a recomputed step writes back the record that was committed for it (StepStore.as_committed)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from roar.pipeline.step_record import CurveScore, RunFacts, StepRecord
from roar.pipeline.step_store import StepStore


def _record(step_key: str, code: str, value: float = 0.5, run: str = "run-a") -> StepRecord:
    return StepRecord("babi-1", "bilstm-attention", "gradient", True, "quantile", 0, 10, "accuracy", value,
                      data_hash="d" * 32, model_hash="m" * 32, data_path="data/x/k10", model_path="models/x/k10",
                      val_metric=0.6, best_epoch=3, leakage={"answer_absent_test": 0.25}, target="gold",
                      input_data_hash="i" * 32, input_model_hash="j" * 32, step_key=step_key,
                      code_fingerprint=code, libraries={"torch": "2.13.0"}, run=RunFacts(step_run_id=run))


def _store(tmp_path: Path) -> StepStore:
    return StepStore(tmp_path / "data", tmp_path / "models", tmp_path / "results")


def test_without_a_record_on_disk_the_new_record_is_written(tmp_path: Path) -> None:
    new = _record("key-new", "code-new")
    assert _store(tmp_path).as_committed(new, {"key-new", "key-old"}) is new


def test_a_committed_record_of_verified_code_with_the_same_result_is_kept_with_the_new_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    committed = replace(_record("key-old", "code-old"), no_retrain={"k0-model": CurveScore(0.4, "a", "b")})
    committed = committed.with_run(scoring_seconds={"k0-model": 1.5})
    store.write(committed)
    kept = store.as_committed(_record("key-new", "code-new", run="run-b"), {"key-new", "key-old"})
    assert (kept.step_key, kept.code_fingerprint) == ("key-old", "code-old")
    assert kept.no_retrain == committed.no_retrain  # its no-retrain scores too (rescored only if hashes differ)
    assert kept.run.step_run_id == "run-b"  # the run facts are this run's (runs/, not a DVC output)
    assert kept.run.scoring_seconds == {"k0-model": 1.5}  # but the kept scores' seconds are the committed run's


def test_a_committed_record_of_unverified_code_is_replaced(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write(_record("key-old", "code-old"))
    new = _record("key-new", "code-new")
    assert store.as_committed(new, {"key-new"}) is new


def test_a_committed_record_with_another_result_is_replaced(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.write(_record("key-old", "code-old", value=0.5))
    for changed in (_record("key-new", "code-new", value=0.51),
                    replace(_record("key-new", "code-new"), model_hash="n" * 32),
                    replace(_record("key-new", "code-new"), leakage={"answer_absent_test": 0.3})):
        assert store.as_committed(changed, {"key-new", "key-old"}) is changed


def test_an_unreadable_committed_record_is_replaced(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.record_path(10).parent.mkdir(parents=True)
    store.record_path(10).write_text("{not json")
    new = _record("key-new", "code-new")
    assert store.as_committed(new, {"key-new"}) is new
