"""The label-leak diagnostics on hand-made masked data."""

from __future__ import annotations

import numpy as np
import pytest

from roar.data.storage import DatasetMeta, Split
from roar.method.leakage import label_word_absence, leakage, mask_positions, mask_probe

MASK = 2
VOCAB = ["[PAD]", "[UNK]", "[MASK]", "[START]", "[END]", "went", "to", "kitchen", "garden", "where", "is", "mary"]
META = DatasetMeta("babi-toy", ["garden", "kitchen"], True, "accuracy", "accuracy")


def split(tokens: list[list[int]], labels: list[int], second: list[list[int]] | None = None) -> Split:
    width = max(len(t) for t in tokens)
    padded = np.array([t + [0] * (width - len(t)) for t in tokens], dtype=np.int64)
    second = second or [[9, 10, 11]] * len(tokens)
    width2 = max(len(t) for t in second)
    padded2 = np.array([t + [0] * (width2 - len(t)) for t in second], dtype=np.int64)
    return Split(padded, np.array([len(t) for t in tokens]), padded2, np.array([len(t) for t in second]),
                 np.array(labels), np.arange(len(tokens)))


def test_mask_positions_count_from_start_and_from_end() -> None:
    s = split([[3, 5, MASK, 7, 4], [3, MASK, 4]], [0, 1])
    features = mask_positions(s, MASK, positions=4)
    # from the start: row 0 masked at 2, row 1 at 1; from the end (0 = last token): row 0 at 2, row 1 at 1
    np.testing.assert_array_equal(features, [[0, 0, 1, 0, 0, 0, 1, 0], [0, 1, 0, 0, 0, 1, 0, 0]])


def test_mask_positions_ignore_padding_and_mask_ids_beyond_the_length() -> None:
    s = split([[3, MASK, 4], [3, 5, 6, 7, 4]], [0, 1])
    s.tokens[0, 4] = MASK  # a mask id in the padding is not a masked token
    features = mask_positions(s, MASK, positions=5)
    assert features[0].tolist() == [0, 1, 0, 0, 0, 0, 1, 0, 0, 0]
    assert features[1].sum() == 0


def test_label_word_absence_hand_counted() -> None:
    # gold garden (0): present / absent (kitchen visible) / absent (nothing visible); gold kitchen: present
    s = split([[3, 8, 7, 4], [3, 7, MASK, 4], [3, MASK, MASK, 4], [3, 7, 4]], [0, 0, 0, 1])
    out = label_word_absence(s, META, VOCAB)
    assert out == {"label_word_absent": pytest.approx(2 / 4), "other_labels_visible": pytest.approx((1 + 1 + 0 + 0) / 4)}


def test_label_word_absence_needs_classes_that_are_words() -> None:
    meta = DatasetMeta("sst-toy", ["negative", "positive"], False, "macro-f1", "auroc")
    assert label_word_absence(split([[3, 5, 4]], [0]), meta, VOCAB) is None


def _stories(n: int, rng: np.random.Generator, leak: bool) -> Split:
    """Stories of 8 tokens; the label picks the masked position when ``leak``, else a random one does."""
    labels = rng.integers(0, 2, n)
    tokens = rng.integers(5, 9, (n, 8))
    tokens[:, 0], tokens[:, -1] = 3, 4
    where = np.where(labels == 1, 2, 5) if leak else rng.choice([2, 5], n)
    tokens[np.arange(n), where] = MASK
    return Split(tokens, np.full(n, 8), np.tile([9, 10, 11], (n, 1)), np.full(n, 3), labels, np.arange(n))


@pytest.mark.parametrize("leak, low, high", [(True, 0.99, 1.0), (False, 0.0, 0.62)])
def test_mask_probe_reads_a_label_written_into_the_mask_positions(leak, low, high) -> None:
    rng = np.random.default_rng(0)
    splits = {"train": _stories(400, rng, leak), "test": _stories(400, rng, leak)}
    out = mask_probe(splits, META, len(VOCAB))
    assert abs(out["majority"] - 0.5) < 0.1  # two classes drawn at random
    assert low <= out["mask_probe"] <= high, out


def test_leakage_combines_both_diagnostics() -> None:
    rng = np.random.default_rng(1)
    splits = {"train": _stories(100, rng, True), "test": _stories(100, rng, True)}
    assert set(leakage(splits, META, VOCAB)) == {"mask_probe", "majority", "label_word_absent", "other_labels_visible"}
