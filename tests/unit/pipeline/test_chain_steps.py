"""A whole chain through the library with the in-memory tracker (no MLflow): its values checked
against direct evaluations, a record for every k, reuse, and the run tree it asks for."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from roar.pipeline.chain import ChainRunner, ChainSpec
from roar.data.prepare import PrepareConfig, prepare
from roar.data.storage import read_dataset
from roar.core.fileio import content_hash
from roar.tracking.protocol import NullTracker
from roar.pipeline.step_record import StepRecord
from roar.models.training import load_model, predict_logits
from tests.conftest import tiny_params

STEPS = [50, 80]
SPEC = ChainSpec("babi-1", "bilstm-attention", "gradient", 0, True)


def chain_params() -> dict:
    params = tiny_params("null-tracker", n_train=160, n_test=40, epochs=1, measures=["random", "gradient"],
                         roar_measures=[], seeds=[0], steps=STEPS)
    params["importance"]["target"] = "gold"
    return params


def accuracy(model_dir: Path, split) -> float:
    """Test accuracy by hand: argmax of the saved model's logits against the labels."""
    logits = predict_logits(load_model(model_dir), split).numpy()
    return float((logits.argmax(-1) == split.labels).mean())


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """The k = 0 model and one recursive gradient chain in a fresh workspace, tracked in memory."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("null-chain")
    params = chain_params()
    tracker = NullTracker()
    runner = ChainRunner(params, tracker, None, root, progress=False)
    prepare("babi-1", runner.layout.prepared("babi-1", "bilstm-attention"),
            PrepareConfig(**params["prepare"]["babi-1"]))
    reference = runner.run_reference("babi-1", "bilstm-attention", 0, "k0")
    records = runner.run_chain(SPEC)
    yield root, runner, tracker, reference, records
    torch.set_num_threads(threads)


def test_the_k0_record_holds_the_k0_models_test_metric(chain) -> None:
    root, runner, _, reference, _ = chain
    k0 = runner.layout.shared_model("babi-1", "bilstm-attention", "k0", 0)
    test = read_dataset(runner.layout.prepared("babi-1", "bilstm-attention"))[1]["test"]
    assert reference.k == 0 and reference.metric == "accuracy"
    assert reference.value == pytest.approx(accuracy(k0, test), abs=1e-6)
    assert reference.model_hash == content_hash(k0)
    assert StepRecord.read(runner.layout.shared_result("babi-1", "bilstm-attention", "k0", 0)) == reference


def test_every_step_has_a_record_with_its_models_metric_on_its_masked_data(chain) -> None:
    root, runner, _, reference, records = chain
    assert [r.k for r in records] == STEPS
    previous = Path(reference.model_path)
    for record in records:
        test = read_dataset(Path(record.data_path))[1]["test"]
        assert record.value == pytest.approx(accuracy(Path(record.model_path), test), abs=1e-6)
        assert record.no_retrain["k0-model"].value == pytest.approx(accuracy(Path(reference.model_path), test),
                                                                    abs=1e-6)
        assert record.no_retrain["previous-model"].value == pytest.approx(accuracy(previous, test), abs=1e-6)
        assert record.data_hash == content_hash(Path(record.data_path))
        on_disk = StepRecord.read(root / f"results/babi-1/bilstm-attention/gradient/recursive/s0/k{record.k}.json")
        assert on_disk == record
        previous = Path(record.model_path)
    assert records[1].input_model_hash == records[0].model_hash  # Recursive ROAR: step 80 explains step 50's model
    assert records[-1].no_retrain_end_k == 100 and records[0].no_retrain_end is None


def test_the_tracker_gets_the_run_tree_of_a_chain(chain) -> None:
    _, _, tracker, _, records = chain
    runs = tracker.runs
    assert collections.Counter(r.kind for r in runs.values()) == {"chain": 2, "step": 3, "train": 3, "importance": 2}
    assert all(r.status == "FINISHED" for r in runs.values())
    chain_run = runs[records[0].run.chain_run_id]
    assert chain_run.kind == "chain" and chain_run.name == "babi-1/bilstm-attention/gradient/recursive/s0"
    assert chain_run.tags["roar.recursive"] == "true" and chain_run.tags["roar.target"] == "gold"
    for record in records:
        run = record.run
        step = runs[run.step_run_id]
        assert step.parent == run.chain_run_id and step.tags["roar.k"] == record.k
        assert runs[run.train_run_id].parent == run.step_run_id
        assert runs[run.train_run_id].tags["roar.model_hash"] == record.model_hash
        assert runs[run.importance_run_id].parent == run.step_run_id
        assert step.metrics["accuracy"] == [(0, pytest.approx(record.value))]
    # the chain run holds each curve at its k
    assert chain_run.metrics["k0_model_accuracy"] == [
        (r.k, pytest.approx(r.no_retrain["k0-model"].value)) for r in records] + [
        (100, pytest.approx(records[-1].no_retrain_end["k0-model"].value))]


def test_a_second_call_reuses_every_step_without_retraining(chain) -> None:
    root, runner, _, _, records = chain
    model_files = {p: p.stat().st_mtime_ns for p in (root / "models").rglob("*") if p.is_file()}
    tracker = NullTracker()
    again = ChainRunner(runner.params, tracker, None, root, progress=False).run_chain(SPEC)
    assert again == records  # the same records, no-retrain scores included
    runs = tracker.runs.values()
    assert collections.Counter(r.kind for r in runs) == {"chain": 1, "step": 2}  # no train, no importance run
    assert {r.tags["roar.reused_from"] for r in runs if r.kind == "step"} == {r.run.step_run_id for r in records}
    assert {p: p.stat().st_mtime_ns for p in (root / "models").rglob("*") if p.is_file()} == model_files
