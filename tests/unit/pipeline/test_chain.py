"""What each chain step explains, deterministic retraining, and reuse that checks the files.

These run the real chain runner (real files, real MLflow in a temporary SQLite store) on a tiny
generated bAbI-1, and recompute a step from what is on disk to check what it explained.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from roar.pipeline.chain import ChainRunner, ChainSpec
from roar.data.prepare import PrepareConfig, prepare
from roar.data.storage import read_dataset
from roar.core.fileio import content_hash
from roar.importance.registry import make_measure
from roar.importance.base import compute_importance
from roar.method.masking import mask_split
from roar.config.layout import Layout
from roar.pipeline.stage import stage_runner
from roar.models.training import load_model
from tests.conftest import tiny_params

STEPS = [40, 70]


def chain_params() -> dict:
    params = tiny_params("chain-test", n_train=240, n_test=60, epochs=2, measures=["random", "gradient"],
                         roar_measures=["gradient"], seeds=[0], steps=STEPS)
    params["runtime"] = {"threads": 1}
    params["importance"]["target"] = "gold"  # the paper's class; test_the_explained_class_... tries predicted
    return params


@pytest.fixture(scope="module")
def project(tmp_path_factory, monkeypatch_module) -> Path:
    """A workspace with prepared data, the k = 0 model and one recursive and one plain gradient chain."""
    root = tmp_path_factory.mktemp("chain")
    monkeypatch_module.chdir(root)  # the step records hold paths relative to the workspace
    monkeypatch_module.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch_module.delenv("ROAR_STUDY_RUN_ID", raising=False)
    params = chain_params()
    layout = Layout(Path("."))
    prepare("babi-1", layout.prepared("babi-1", "bilstm-attention"), PrepareConfig(**params["prepare"]["babi-1"]))
    runner = stage_runner(ChainRunner, params, Path("."), progress=False)
    runner.run_reference("babi-1", "bilstm-attention", 0, "k0")
    for recursive in (True, False):
        runner.run_chain(ChainSpec("babi-1", "bilstm-attention", "gradient", 0, recursive))
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _step(project: Path, kind: str, mode: str, k: int) -> Path:
    if kind in ("results", "runs"):
        return project / f"{kind}/babi-1/bilstm-attention/gradient/{mode}/s0/k{k}.json"
    prefix = "data/masked" if kind == "data" else "models"
    return project / f"{prefix}/babi-1/bilstm-attention/gradient/{mode}/s0/k{k}"


def _redo_step(data_dir: Path, model_dir: Path, k: int) -> dict:
    """Mask ``data_dir`` up to k by gradient importance of the model in ``model_dir``, by hand."""
    meta, splits = read_dataset(data_dir)
    model, measure = load_model(model_dir), make_measure("gradient")
    return {name: mask_split(split, compute_importance(measure, model, split, name, 128, False), k, "quantile",
                             meta.mask_id, meta.unmaskable_ids).tokens for name, split in splits.items()}


def _tokens(data_dir: Path) -> dict:
    return {name: split.tokens for name, split in read_dataset(data_dir)[1].items()}


def _assert_same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_recursive_step_explains_the_previous_steps_masked_data_with_its_model(project: Path) -> None:
    prepared, k0 = project / "data/prepared/babi-1/bilstm-attention", project / "models/babi-1/bilstm-attention/k0/s0"
    _assert_same(_tokens(_step(project, "data", "recursive", 40)), _redo_step(prepared, k0, 40))
    expected = _redo_step(_step(project, "data", "recursive", 40), _step(project, "models", "recursive", 40), 70)
    _assert_same(_tokens(_step(project, "data", "recursive", 70)), expected)
    # the tempting mistake: the previous model on the unmasked data masks other tokens
    wrong = _redo_step(prepared, _step(project, "models", "recursive", 40), 70)
    assert any((wrong[name] != expected[name]).any() for name in expected)
    record = json.loads(_step(project, "results", "recursive", 70).read_text())
    assert record["input_data_hash"] == content_hash(_step(project, "data", "recursive", 40))
    assert record["input_model_hash"] == content_hash(_step(project, "models", "recursive", 40))


def test_plain_roar_step_explains_the_unmasked_data_with_the_k0_model(project: Path) -> None:
    prepared, k0 = project / "data/prepared/babi-1/bilstm-attention", project / "models/babi-1/bilstm-attention/k0/s0"
    for k in STEPS:
        _assert_same(_tokens(_step(project, "data", "roar", k)), _redo_step(prepared, k0, k))
        record = json.loads(_step(project, "results", "roar", k).read_text())
        assert (record["input_data_hash"], record["input_model_hash"]) == (content_hash(prepared), content_hash(k0))
    # and differs from the recursive chain after the first step
    assert any((_tokens(_step(project, "data", "roar", 70))[n] != _tokens(_step(project, "data", "recursive", 70))[n]).any()
               for n in ("train", "val", "test"))


def test_retraining_on_the_same_inputs_gives_the_same_model_folder_hash(project: Path) -> None:
    runner = stage_runner(ChainRunner, chain_params(), Path("."), progress=False)
    folder = project / "models/babi-1/bilstm-attention/k0/s0"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    runner.run_reference("babi-1", "bilstm-attention", 0, "k0")
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert before == after  # byte-identical: weights, config and result.json (no wall time inside)
    assert "seconds" not in json.loads(after["result.json"])


def test_reuse_checks_the_files_on_disk_against_the_record(project: Path) -> None:
    runner = stage_runner(ChainRunner, chain_params(), Path("."), progress=False)
    spec = ChainSpec("babi-1", "bilstm-attention", "gradient", 0, True)
    records = {r.k: r for r in runner.run_chain(spec)}
    original = {k: json.loads(_step(project, "results", "recursive", k).read_text()) for k in STEPS}
    runs = {k: json.loads(_step(project, "runs", "recursive", k).read_text()) for k in STEPS}
    assert all(records[k].run.step_run_id == runs[k]["step_run_id"] for k in STEPS)  # all reused
    # Replace step 40's data by other data (as a run under other params would leave it): the
    # record no longer matches the files, so step 40 is recomputed; its inputs are unchanged, so
    # the recomputed data are the original's and step 70 (same step key) is reused.
    data40 = _step(project, "data", "recursive", 40)
    shutil.rmtree(data40)
    shutil.copytree(project / "data/prepared/babi-1/bilstm-attention", data40)
    again = {r.k: r for r in runner.run_chain(spec)}
    assert again[40].run.step_run_id != runs[40]["step_run_id"]
    assert again[40].data_hash == original[40]["data_hash"] == content_hash(data40)
    assert again[40].model_hash == original[40]["model_hash"]
    assert again[70].run.step_run_id == runs[70]["step_run_id"]


def test_a_step_record_from_other_params_is_not_reused(project: Path) -> None:
    params = chain_params()
    params["importance"]["batch_size"] = 64  # a params change (same numbers, other step key)
    runner = stage_runner(ChainRunner, params, Path("."), progress=False)
    original = json.loads(_step(project, "results", "roar", 40).read_text())
    original_run = json.loads(_step(project, "runs", "roar", 40).read_text())
    records = runner.run_chain(ChainSpec("babi-1", "bilstm-attention", "gradient", 0, False))
    assert records[0].step_key != original["step_key"]
    assert records[0].run.step_run_id != original_run["step_run_id"]
    assert records[0].data_hash == original["data_hash"]  # recomputed, same inputs -> same data


def test_word_vectors_changed_in_place_are_caught(project: Path, tmp_path: Path, monkeypatch) -> None:
    """A vectors file named in params is no DVC dependency; a chain refuses a k = 0 model trained
    with other vectors, and the file's digest is part of every step key."""
    from roar.data.embeddings import vectors_digest
    from roar.core.errors import RoarError

    vectors = tmp_path / "vectors.txt"
    vectors.write_text("".join(f"{w} " + " ".join(["0.1"] * 50) + "\n" for w in ("mary", "john", "kitchen")))
    shutil.copytree(project / "data", tmp_path / "ws" / "data")
    monkeypatch.chdir(tmp_path / "ws")
    params = chain_params()
    params["train"]["bilstm-attention"]["babi-1"]["embeddings"] = str(vectors)
    runner = stage_runner(ChainRunner, params, Path("."), progress=False)
    runner.run_reference("babi-1", "bilstm-attention", 0, "k0")
    first = vectors_digest(str(vectors))
    assert json.loads(Path("models/babi-1/bilstm-attention/k0/s0/result.json").read_text())["embeddings_digest"] == first
    vectors.write_text(vectors.read_text().replace("0.1", "0.2", 3))
    assert vectors_digest(str(vectors)) != first
    with pytest.raises(RoarError, match="trained with other word vectors.*dvc repro --force train_k0@babi-1"):
        runner.run_chain(ChainSpec("babi-1", "bilstm-attention", "random", 0, True))


def test_a_diverged_training_fails_with_one_line_instead_of_loading_no_weights(tmp_path: Path) -> None:
    from roar.data.storage import vocab_size
    from roar.config.train_config import TrainConfig
    from roar.models.training import train

    folder = tmp_path / "babi"
    prepare("babi-1", folder, PrepareConfig(n_train=80, n_test=20))
    meta, splits = read_dataset(folder)
    config = TrainConfig(model="bilstm-attention", epochs=2, batch_size=20, lr=1e30, embedding_dim=8, hidden=4,
                         attention_hidden=4)  # steps of 1e30: the logits overflow to inf/NaN
    with pytest.raises(ValueError, match=r"non-finite validation accuracy in every epoch \(\[nan, nan\]\).*lower lr"):
        train(meta, vocab_size(folder), splits, config, 0, progress=False)


def test_early_stopping_stops_after_patience_epochs_without_improvement(tmp_path: Path) -> None:
    from roar.data.storage import vocab_size
    from roar.config.train_config import TrainConfig
    from roar.models.training import train

    folder = tmp_path / "babi"
    prepare("babi-1", folder, PrepareConfig(n_train=80, n_test=20))
    meta, splits = read_dataset(folder)
    # lr so small that the weights barely move: the validation accuracy of epoch 0 is never beaten
    config = TrainConfig(model="bilstm-attention", epochs=20, batch_size=20, lr=1e-12, embedding_dim=8, hidden=4,
                         attention_hidden=4, patience=3)
    _, result = train(meta, vocab_size(folder), splits, config, 0, progress=False)
    assert result.best_epoch == 0
    assert [entry["epoch"] for entry in result.history] == [0, 1, 2, 3]  # epoch 0, then 3 without improvement
    config.patience = None
    config.epochs = 5
    _, full = train(meta, vocab_size(folder), splits, config, 0, progress=False)
    assert len(full.history) == 5


def test_step_records_carry_the_target_and_the_leak_diagnostic(project: Path) -> None:
    record = json.loads(_step(project, "results", "recursive", STEPS[0]).read_text())
    assert record["target"] == "gold"
    leak = record["leakage"]
    assert set(leak) == {"mask_probe", "majority", "label_word_absent", "other_labels_visible"}
    assert 0 <= leak["majority"] <= leak["mask_probe"] + 0.5 and 0 <= leak["label_word_absent"] <= 1
    reference = json.loads((project / "results/babi-1/bilstm-attention/k0/s0.json").read_text())
    assert reference["leakage"]["label_word_absent"] == 0.0  # nothing is masked at k = 0


def test_the_explained_class_is_part_of_the_step_key(project: Path, monkeypatch) -> None:
    params = chain_params()
    params["importance"]["target"] = "predicted"
    runner = stage_runner(ChainRunner, params, Path("."), progress=False)
    before = {k: json.loads(_step(project, "results", "roar", k).read_text()) for k in STEPS}
    records = runner.run_chain(ChainSpec("babi-1", "bilstm-attention", "gradient", 0, False))
    assert [r.target for r in records] == ["predicted", "predicted"]
    assert all(r.step_key != before[r.k]["step_key"] for r in records)
    assert all(0 <= r.explained["test"] <= 1 for r in records)
    assert all(0 <= json.loads(_step(project, "results", "roar", r.k).read_text())["predicted_is_gold_test"] <= 1
               for r in records)  # the record's key on disk
    random_records = runner.run_chain(ChainSpec("babi-1", "bilstm-attention", "random", 0, True))
    assert {r.target for r in random_records} == {"none"}


def _accuracy(model_dir: Path, split) -> float:
    """Test accuracy of a saved model on a split, by hand (argmax of the logits against the labels)."""
    from roar.models.training import predict_logits

    logits = predict_logits(load_model(model_dir), split).numpy()
    return float((logits.argmax(-1) == split.labels).mean())


def test_no_retrain_curves_score_each_steps_masked_test_data_with_the_k0_and_the_previous_model(
        project: Path, tmp_path: Path) -> None:
    from roar.method.masking import write_all_masked

    prepared, k0 = project / "data/prepared/babi-1/bilstm-attention", project / "models/babi-1/bilstm-attention/k0/s0"
    write_all_masked(prepared, tmp_path / "all")
    all_masked = read_dataset(tmp_path / "all")[1]["test"]
    for mode in ("recursive", "roar"):
        previous = k0
        for k in STEPS:
            record = json.loads(_step(project, "results", mode, k).read_text())
            test = read_dataset(_step(project, "data", mode, k))[1]["test"]
            scores = record["no_retrain"]
            assert scores["k0-model"]["value"] == pytest.approx(_accuracy(k0, test), abs=1e-6)
            assert scores["previous-model"]["value"] == pytest.approx(_accuracy(previous, test), abs=1e-6)
            assert scores["k0-model"]["model_hash"] == content_hash(k0)
            assert scores["previous-model"]["model_hash"] == content_hash(previous)
            assert all(e["data_hash"] == record["data_hash"] for e in scores.values())
            seconds = json.loads(_step(project, "runs", mode, k).read_text())["scoring_seconds"]
            assert seconds.keys() == scores.keys() and all(s > 0 for s in seconds.values())
            previous = _step(project, "models", mode, k)
        end = record["no_retrain_end"]  # the last step's record carries the all-masked point
        assert end["k"] == 100
        assert end["k0-model"]["value"] == pytest.approx(_accuracy(k0, all_masked), abs=1e-6)
        assert end["previous-model"]["value"] == pytest.approx(_accuracy(previous, all_masked), abs=1e-6)
        first = json.loads(_step(project, "results", mode, STEPS[0]).read_text())
        assert "no_retrain_end" not in first
    # the scores differ from the retrained model's (else the test could not tell the curves apart)
    record = json.loads(_step(project, "results", "recursive", STEPS[-1]).read_text())
    assert len({record["value"], record["no_retrain"]["k0-model"]["value"],
                record["no_retrain_end"]["k0-model"]["value"]}) > 1


def test_a_record_without_no_retrain_curves_is_completed_not_reused_as_is(project: Path) -> None:
    """A record of older code (same step key, no no-retrain entries) or one whose previous model was
    retrained since (other hash) gets its curves (re)scored; the retrained step itself is reused."""
    runner = stage_runner(ChainRunner, chain_params(), Path("."), progress=False)
    spec = ChainSpec("babi-1", "bilstm-attention", "gradient", 0, False)
    runner.run_chain(spec)  # the fixture's records (another test may have left other params' records)
    paths = {k: _step(project, "results", "roar", k) for k in STEPS}
    original = {k: json.loads(p.read_text()) for k, p in paths.items()}
    step_runs = {k: json.loads(_step(project, "runs", "roar", k).read_text())["step_run_id"] for k in STEPS}
    old = dict(original[STEPS[-1]])
    del old["no_retrain"], old["no_retrain_end"]
    paths[STEPS[-1]].write_text(json.dumps(old))
    stale = json.loads(json.dumps(original[STEPS[0]]))
    stale["no_retrain"]["previous-model"].update(model_hash="other", value=-1.0)
    paths[STEPS[0]].write_text(json.dumps(stale))
    records = {r.k: r for r in runner.run_chain(spec)}
    for k in STEPS:
        assert records[k].run.step_run_id == step_runs[k]  # the step is reused
        on_disk = json.loads(paths[k].read_text())
        for curve in ("k0-model", "previous-model"):
            assert on_disk["no_retrain"][curve]["value"] == pytest.approx(original[k]["no_retrain"][curve]["value"])
            assert on_disk["no_retrain"][curve]["model_hash"] == original[k]["no_retrain"][curve]["model_hash"]
    assert on_disk["no_retrain_end"]["k0-model"]["value"] == original[STEPS[-1]]["no_retrain_end"]["k0-model"]["value"]


def test_a_fresh_clone_recomputing_a_chain_of_verified_code_writes_its_committed_records_back(
        project: Path, monkeypatch) -> None:
    """A fresh clone has the committed records but not the data and models. Its recompute under code that
    `roar provenance verify` showed equivalent gives the same data and models, and must write the committed
    record bytes back (their step key is the earlier code's), so dvc.lock does not change."""
    import roar.pipeline.chain as chain_module
    from roar.config.catalog import measure_spec

    spec = ChainSpec("babi-1", "bilstm-attention", "random", 0, True)
    current = chain_module.chain_code_fingerprint
    monkeypatch.setattr(chain_module, "chain_code_fingerprint", lambda module: "code-before-a-cleanup")
    runner = stage_runner(ChainRunner, chain_params(), Path("."), progress=False)
    committed_runs = {r.k: r.run.step_run_id for r in runner.run_chain(spec)}
    results = project / "results/babi-1/bilstm-attention/random/recursive/s0"
    committed = {k: (results / f"k{k}.json").read_bytes() for k in STEPS}
    for kind in ("data/masked", "models"):  # what a clone lacks
        shutil.rmtree(project / f"{kind}/babi-1/bilstm-attention/random/recursive/s0")

    monkeypatch.setattr(chain_module, "chain_code_fingerprint", current)
    monkeypatch.setattr(chain_module, "_code_equivalents", lambda code, root, model: {code, "code-before-a-cleanup"})
    records = stage_runner(ChainRunner, chain_params(), Path("."), progress=False).run_chain(spec)
    assert all(r.run.step_run_id != committed_runs[r.k] for r in records)  # recomputed, not reused
    assert {k: (results / f"k{k}.json").read_bytes() for k in STEPS} == committed
    assert all(json.loads(committed[k])["code_fingerprint"] == "code-before-a-cleanup" for k in STEPS)

    # code that was not verified equivalent re-keys the records
    monkeypatch.setattr(chain_module, "_code_equivalents", lambda code, root, model: {code})
    for kind in ("data/masked", "models"):
        shutil.rmtree(project / f"{kind}/babi-1/bilstm-attention/random/recursive/s0")
    stage_runner(ChainRunner, chain_params(), Path("."), progress=False).run_chain(spec)
    rekeyed = json.loads((results / f"k{STEPS[0]}.json").read_text())
    assert rekeyed["code_fingerprint"] == current(measure_spec("random").module) != "code-before-a-cleanup"


def test_a_chain_stopped_at_its_deadline_keeps_its_steps_and_resumes_to_the_same_records(
        project: Path, tmp_path: Path, monkeypatch) -> None:
    """A deadline with room for one step: step 40 is computed, the chain stops before step 70 with its runs
    KILLED, and the next run computes only step 70, to what the uninterrupted chain computed."""
    from roar.pipeline.deadline import StepDeadline, StoppedAtDeadline

    for part in ("data/prepared", "models/babi-1/bilstm-attention/k0"):
        shutil.copytree(project / part, tmp_path / "ws" / part)
    monkeypatch.chdir(tmp_path / "ws")
    runner = stage_runner(ChainRunner, chain_params(), Path("."), progress=False)
    spec = ChainSpec("babi-1", "bilstm-attention", "gradient", 0, True)
    ticks = iter(range(0, 10_000, 600))  # each reading of the clock: 600 s later
    deadline = StepDeadline(ends_at=1000.0, step_seconds=100.0, clock=lambda: float(next(ticks)))
    with pytest.raises(StoppedAtDeadline) as stop:  # step 40 at 0 s; step 70 at 1200 s, past the end
        runner.run_chain(spec, deadline)
    assert stop.value.k == 70
    here = Path("results/babi-1/bilstm-attention/gradient/recursive/s0")
    assert sorted(p.name for p in here.glob("k*.json")) == ["k40.json"]
    assert not Path("models/babi-1/bilstm-attention/gradient/recursive/s0/k70").exists()
    client = runner.tracker.client
    chains = [r for r in client.search_runs([runner.tracker.experiment_id], "tags.`roar.kind` = 'chain'")
              if r.data.tags.get("roar.measure") == "gradient"]
    assert [r.info.status for r in chains] == ["KILLED"]
    steps = client.search_runs([runner.tracker.experiment_id], "tags.`roar.kind` = 'step'")
    assert {r.info.status for r in steps} == {"FINISHED"}  # step 40's; step 70 never opened a run

    step40 = json.loads((here / "k40.json").read_text())
    records = {r.k: r for r in runner.run_chain(spec)}
    assert json.loads((here / "k40.json").read_text()) == step40  # reused as it was
    uninterrupted = json.loads(_step(project, "results", "recursive", 70).read_text())
    assert (records[70].data_hash, records[70].model_hash) == (uninterrupted["data_hash"], uninterrupted["model_hash"])
