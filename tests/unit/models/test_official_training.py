"""The official code's training options: attention without the start and end tokens (``attend: official``)
and uniformly shuffled batches (``batching: shuffled``); at their defaults nothing of a model changes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from roar.config.train_config import TrainConfig
from roar.data.storage import DatasetMeta, Split
from roar.data.tokenize import END_ID, MASK_ID, PAD_ID, START_ID, UNK_ID
from roar.models.batching import SplitDataset
from roar.models.registry import build_model
from roar.models.training import load_model, save_model, train, train_loader

SMALL = {"embedding_dim": 8, "hidden": 4, "attention_hidden": 4}
META = DatasetMeta("babi-toy", ["a", "b"], True, "accuracy", "accuracy")

pytestmark = pytest.mark.usefixtures("one_thread")


def models(**config) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The same weights with ``attend: all`` and with ``attend: official``."""
    pair = []
    for attend in ("all", "official"):
        torch.manual_seed(0)
        pair.append(build_model(META, 12, TrainConfig(**SMALL, attend=attend, **config)).double().eval())
    return pair[0], pair[1]


def batch() -> tuple[torch.Tensor, ...]:
    """Two stories: one with a [MASK] and an [UNK] between START and END, one shorter (padded)."""
    tokens = torch.tensor([[START_ID, 7, MASK_ID, 8, UNK_ID, END_ID], [START_ID, 9, 10, END_ID, PAD_ID, PAD_ID]])
    return tokens, torch.tensor([6, 4]), torch.tensor([[5, 6], [6, 0]]), torch.tensor([2, 1])


def test_official_attention_leaves_out_start_and_end_and_renormalises_over_the_rest():
    everything, official = models()
    assert everything.state_dict().keys() == official.state_dict().keys()  # no new weights or buffers
    tokens, lengths, tokens2, lengths2 = batch()
    with torch.no_grad():
        a_all = everything(tokens, lengths, tokens2, lengths2).attention
        a_official = official(tokens, lengths, tokens2, lengths2).attention
    attended = torch.tensor([[0, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0]], dtype=torch.bool)
    assert (a_official[~attended] == 0).all() and (a_all[:, 0] > 0).all()
    assert (a_official[0, 2] > 0) and (a_official[0, 4] > 0)  # [MASK] and [UNK] are attended (ids >= [MASK])
    # same states and scores: the official weights are the others renormalised over the attended tokens
    expected = torch.where(attended, a_all, 0.0)
    expected = expected / expected.sum(1, keepdim=True)
    torch.testing.assert_close(a_official, expected, rtol=1e-12, atol=1e-12)


def test_attend_is_saved_with_the_model_and_left_out_at_its_default(tmp_path):
    from roar.models.training import TrainResult

    result = TrainResult(best_epoch=0, val_metric=1.0, test_metric=1.0, metric="accuracy", seconds=0.0, history=[])
    for attend in ("all", "official"):
        config = TrainConfig(**SMALL, attend=attend)
        save_model(tmp_path / attend, build_model(META, 12, config), config, META, 12, result)
    saved = {attend: json.loads((tmp_path / attend / "config.json").read_text())["train"]
             for attend in ("all", "official")}
    assert "attend" not in saved["all"] and saved["official"]["attend"] == "official"
    assert load_model(tmp_path / "official").unattended == (PAD_ID, START_ID, END_ID)
    assert load_model(tmp_path / "all").unattended == ()


def test_params_leave_the_new_options_out_at_their_defaults():
    assert "attend" not in TrainConfig().params() and "batching" not in TrainConfig().params()
    official = TrainConfig(attend="official", batching="shuffled").params()
    assert (official["attend"], official["batching"]) == ("official", "shuffled")


def test_bad_values_and_attend_without_attention_are_refused_in_one_line():
    with pytest.raises(ValueError, match="batching='sorted' unknown; allowed: buckets, shuffled"):
        TrainConfig.from_dict({"batching": "sorted"})
    with pytest.raises(ValueError, match="attend='words' unknown; allowed: all, official"):
        TrainConfig.from_dict({"attend": "words"})
    with pytest.raises(ValueError, match="roberta has no attention over the first sequence to restrict; allowed: all"):
        TrainConfig.from_dict({"model": "roberta", "attend": "official"})


def split(n: int = 23) -> Split:
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 9, n)
    tokens = [[START_ID, *rng.integers(5, 12, length - 2).tolist(), END_ID] for length in lengths]
    return Split.from_lists(tokens, rng.integers(0, 2, n).tolist(), [[5, 6]] * n)


def epochs(loader, n: int = 2) -> list[list[list[int]]]:
    return [[batch.rows.tolist() for batch in loader] for _ in range(n)]


def test_shuffled_batches_cut_a_new_uniform_permutation_each_epoch():
    data = SplitDataset(split())
    config = TrainConfig(batch_size=5, batching="shuffled")
    first, second = epochs(train_loader(data, config, 3, data.collate))
    for epoch in (first, second):
        assert [len(rows) for rows in epoch] == [5, 5, 5, 5, 3]  # consecutive cuts, the last one smaller
        assert sorted(sum(epoch, [])) == list(range(23))
    assert first != second
    assert epochs(train_loader(data, config, 3, data.collate)) == [first, second]  # seeded
    assert epochs(train_loader(data, config, 4, data.collate))[0] != first


def test_bucket_batches_stay_the_default():
    data = SplitDataset(split())
    buckets = epochs(train_loader(data, TrainConfig(batch_size=5), 3, data.collate), 1)[0]
    lengths = data.split.lengths
    # within a window every batch holds neighbouring lengths: the buckets sort each window by length
    assert all(lengths[rows].max() - lengths[rows].min() <= 2 for rows in buckets)


def test_training_runs_with_both_official_options():
    rows = split(40)
    splits = {"train": rows, "val": rows, "test": rows}
    config = TrainConfig(epochs=2, batch_size=8, lr=0.01, attend="official", batching="shuffled", **SMALL)
    model, result = train(META, 12, splits, config, seed=0, progress=False, device=torch.device("cpu"))
    assert model.unattended == (PAD_ID, START_ID, END_ID) and len(result.history) == 2
