"""Masked fine-tuning (train.<model>.<dataset>.mask_augment) and the training loop's best-weights selection."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from roar.data.prepare import PrepareConfig, prepare
from roar.data.storage import read_dataset, vocab_size
from roar.models.augment import masking_collate, random_mask
from roar.models.batching import SplitDataset
from roar.config.train_config import TrainConfig

MASK, UNMASKABLE = 2, (0, 3, 4)


def token_grid(rows: int = 2000, width: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random ids 5..99 with boundary tokens (3 first, 4 last inside the length) and non-zero ids past the
    length (so that only ``lengths``, not a zero id, says where padding starts)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, width + 1, rows)
    tokens = rng.integers(5, 100, (rows, width))
    tokens[:, 0] = 3
    tokens[np.arange(rows), lengths - 1] = 4
    return torch.from_numpy(tokens), torch.from_numpy(lengths)


def maskable(tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    inside = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    return inside & ~torch.isin(tokens, torch.tensor(UNMASKABLE))


def test_masking_rate_follows_p_uniform_on_0_to_p_max():
    tokens, lengths = token_grid()
    out = random_mask(tokens, lengths, 0.8, 1.0, torch.Generator().manual_seed(0), MASK, UNMASKABLE)
    can = maskable(tokens, lengths)
    hit = (out != tokens)
    assert bool((out[hit] == MASK).all())
    # E[rate] = E[p] = p_max / 2; 2000 rows: the row mean of p has sd 0.8 / sqrt(12 * 2000) = 0.005
    rate = hit.sum(1).double() / can.sum(1).double()
    assert abs(float(hit.sum() / can.sum()) - 0.4) < 0.02
    assert abs(float(rate.mean()) - 0.4) < 0.02
    # the row rates spread over [0, p_max] like U(0, 0.8): quartiles near 0.2, 0.4, 0.6, nothing far above 0.8
    quartiles = torch.quantile(rate, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert torch.allclose(quartiles, torch.tensor([0.2, 0.4, 0.6], dtype=torch.float64), atol=0.04)
    # no long row fully masked (p < 0.8: all of >= 30 tokens has chance < 0.8 ** 30 = 0.1 %); short rows may be
    assert float(rate[can.sum(1) >= 30].max()) < 1.0 and float(rate.max()) == 1.0
    # share 0.5: about half the rows untouched, the rate halved
    half = random_mask(tokens, lengths, 0.8, 0.5, torch.Generator().manual_seed(0), MASK, UNMASKABLE)
    touched = (half != tokens).any(1).double().mean()
    # at most about half the rows touched: an augmented row with a small p or few tokens may draw none
    assert 0.40 < float(touched) < 0.52
    assert abs(float((half != tokens).sum() / can.sum()) - 0.2) < 0.02


def test_unmaskable_tokens_and_padding_are_never_masked():
    tokens, lengths = token_grid(500, 30, seed=1)
    tokens[:, 5] = 0  # a padding id inside the sequence stays too
    can = maskable(tokens, lengths)
    for seed in range(5):
        out = random_mask(tokens, lengths, 1.0, 1.0, torch.Generator().manual_seed(seed), MASK, UNMASKABLE)
        assert torch.equal(out[~can], tokens[~can])
        assert (out != tokens).any()


def test_same_seed_same_masks_and_off_leaves_the_batches_as_they_are(tmp_path: Path):
    folder = tmp_path / "babi"
    prepare("babi-1", folder, PrepareConfig(n_train=60, n_test=10))
    meta, splits = read_dataset(folder)
    dataset = SplitDataset(splits["train"])
    rows = [list(range(i, i + 10)) for i in range(0, 50, 10)]

    def batches(seed: int) -> list[torch.Tensor]:
        collate = masking_collate(dataset.collate, {"p_max": 0.9}, seed, meta.mask_id, meta.unmaskable_ids)
        return [collate(r).tokens for r in rows]

    first, again, other = batches(0), batches(0), batches(1)
    plain = [dataset.collate(r).tokens for r in rows]
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert any(not torch.equal(a, b) for a, b in zip(first, other))
    assert any(not torch.equal(a, p) for a, p in zip(first, plain))
    # only mask ids are written, and the rest of the batch (second sequence, labels, lengths) is the same
    for r, masked in zip(rows, first):
        base = dataset.collate(r)
        assert bool((masked[masked != base.tokens] == meta.mask_id).all())


def test_off_by_default_and_absent_from_the_train_settings():
    config = TrainConfig()
    assert config.mask_augment is None
    assert "mask_augment" not in config.params()
    assert config.params() == {k: v for k, v in asdict(config).items()
                               if k not in ("mask_augment", "attend", "batching")}
    on = TrainConfig.from_dict({"mask_augment": {"p_max": 0.5}})
    assert on.params()["mask_augment"] == {"p_max": 0.5}
    for bad in ({"p_max": 0}, {"share": 0.5}, {"p_max": 0.5, "rate": 1}, {"p_max": True}, 0.5):
        with pytest.raises(ValueError, match="mask_augment=.* must be null or a mapping"):
            TrainConfig.from_dict({"mask_augment": bad})


def tiny(tmp_path: Path):
    folder = tmp_path / "babi"
    prepare("babi-1", folder, PrepareConfig(n_train=120, n_test=30))
    meta, splits = read_dataset(folder)
    return folder, meta, splits


def weights(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_masked_training_is_deterministic_and_differs_from_plain(tmp_path: Path, one_thread):
    from roar.models.training import save_model, train

    folder, meta, splits = tiny(tmp_path)
    base = dict(model="bilstm-attention", epochs=2, batch_size=20, lr=0.01, embedding_dim=8, hidden=4,
                attention_hidden=4)
    runs = {}
    for name, extra in (("plain", {}), ("masked", {"mask_augment": {"p_max": 0.9}}),
                        ("masked-again", {"mask_augment": {"p_max": 0.9}})):
        config = TrainConfig(**base, **extra)
        model, result = train(meta, vocab_size(folder), splits, config, 0, progress=False)
        runs[name] = (weights(model), result.reproducible())
        save_model(tmp_path / name, model, config, meta, vocab_size(folder), result)
    assert same(runs["masked"][0], runs["masked-again"][0]) and runs["masked"][1] == runs["masked-again"][1]
    assert not same(runs["plain"][0], runs["masked"][0])
    saved = {n: json.loads((tmp_path / n / "config.json").read_text())["train"] for n in runs}
    assert "mask_augment" not in saved["plain"] and saved["masked"]["mask_augment"] == {"p_max": 0.9}


@pytest.mark.parametrize("scores, best", [
    ([0.1, 0.5, 0.3, 0.2], 1),  # the peak at epoch 2 of 4
    ([math.nan, 0.2, math.nan, 0.1], 1),  # NaN never wins, not even before any finite score
    ([0.3, 0.3, 0.1], 0),  # equal is not better: the earliest of equal epochs
])
def test_the_returned_weights_are_those_of_the_best_validation_epoch(tmp_path: Path, monkeypatch, one_thread,
                                                                     scores, best):
    import roar.models.training as training

    folder, meta, splits = tiny(tmp_path)
    scripted = list(scores)
    real = training.compute_metric

    def scripted_metric(metric, logits, labels):  # the validation scores, then the real test metric
        return scripted.pop(0) if scripted else real(metric, logits, labels)

    monkeypatch.setattr(training, "compute_metric", scripted_metric)
    seen: list[tuple[dict, dict]] = []
    model_box: list[torch.nn.Module] = []
    real_build = training.build_model

    def build(*args, **kwargs):
        model_box.append(real_build(*args, **kwargs))
        return model_box[-1]

    monkeypatch.setattr(training, "build_model", build)
    config = TrainConfig(model="bilstm-attention", epochs=len(scores), batch_size=20, lr=0.05, embedding_dim=8,
                         hidden=4, attention_hidden=4)
    model, result = training.train(meta, vocab_size(folder), splits, config, 0, progress=False,
                                   on_epoch=lambda entry: seen.append((entry, weights(model_box[0]))))
    # on_epoch came live, once per epoch, with the history entries
    assert [entry for entry, _ in seen] == result.history
    assert [entry["epoch"] for entry, _ in seen] == list(range(len(scores)))
    assert result.best_epoch == best
    assert result.val_metric == scores[best]
    assert same(weights(model), seen[best][1])
    assert all(not same(weights(model), w) for i, (_, w) in enumerate(seen) if i != best)


def test_a_tiny_masked_study_end_to_end(tmp_path: Path, monkeypatch, one_thread):
    """k0 and all-masked models with mask_augment, a random and a plain-ROAR gradient chain, the report, and the comparison
    (the variant against itself: every contender it has agrees with itself)."""
    import yaml

    from roar.pipeline.chain import ChainRunner, ChainSpec
    from roar.method.masking import write_all_masked
    from roar.config.layout import Layout
    from roar.report.study import write_report
    from roar.tracking.protocol import NullTracker
    from roar.report.retrain_comparison import write_comparison

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("ROAR_STUDY_RUN_ID", raising=False)
    params = yaml.safe_load((Path(__file__).resolve().parents[3] / "studies" / "babi-1-quick-mask-augment" / "params.yaml")
                            .read_text())
    params["study"].update(measures=["random", "gradient", "input-x-gradient"], roar_measures=["gradient",
                           "input-x-gradient"], seeds=[0], steps=[50])
    params["prepare"]["babi-1"].update(n_train=800, n_test=100)
    params["train"]["bilstm-attention"]["babi-1"].update(epochs=4, lr=0.01)  # learns enough for a random-curve area
    params["runtime"] = {"threads": 1}
    assert params["train"]["bilstm-attention"]["babi-1"]["mask_augment"] == {"p_max": 1.0, "share": 0.5}
    layout = Layout(Path("."))
    prepare("babi-1", layout.prepared("babi-1", "bilstm-attention"), PrepareConfig(**params["prepare"]["babi-1"]))
    write_all_masked(layout.prepared("babi-1", "bilstm-attention"), layout.all_masked("babi-1", "bilstm-attention"))
    runner = ChainRunner(params, NullTracker(), None, Path("."), progress=False)  # no MLflow: the records are what counts
    runner.run_reference("babi-1", "bilstm-attention", 0, "k0")
    runner.run_reference("babi-1", "bilstm-attention", 0, "all")  # the retrained curves' k = 100 point
    saved = json.loads((layout.shared_model("babi-1", "bilstm-attention", "k0", 0) / "config.json").read_text())
    assert saved["train"]["mask_augment"] == {"p_max": 1.0, "share": 0.5}
    for measure, recursive in (("random", True), ("gradient", True), ("input-x-gradient", True),
                               ("gradient", False), ("input-x-gradient", False)):
        records = runner.run_chain(ChainSpec("babi-1", "bilstm-attention", measure, 0, recursive))
        assert set(records[0].no_retrain) == {"k0-model", "previous-model"}
        assert records[0].no_retrain_end_k == 100
    write_report(params, Path("results"), Path("reports"))
    tables = write_comparison(Path("reports"), Path("reports"), Path("comparison"))
    contenders = set(tables["summary"]["contender"])
    assert {"Recursive ROAR", "masked-trained k0 model, ROAR masks", "plain k0 model, ROAR masks"} <= contenders
    same = tables["tau"][(tables["tau"]["first"] == "Recursive ROAR")
                         & (tables["tau"]["second"] == "masked-trained Recursive ROAR")]
    assert len(same) == 1 and (same["tau"].isna() | (same["tau"] == 1.0)).all()
    assert (Path("comparison") / "retrain_comparison.md").is_file()
