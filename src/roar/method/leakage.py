"""How much the mask pattern alone tells about the gold label (the label leak of ROAR).

An importance measure that explains the gold class can choose its tokens *because of* the label;
masking them then writes the label into the data, and the next model may learn to read it from
where the masks are instead of from the remaining evidence (Madsen et al. 2022 list this among
the method's limits). Two diagnostics, computed for every masked dataset:

- ``mask_probe``: test accuracy of a logistic regression that sees only *which positions are
  masked* (counted from the start and from the end of the first sequence) plus the bag of words
  of the second sequence (the question, the hypothesis), trained on the masked train split.
  ``majority`` is the accuracy of always answering the most frequent training class. A masking
  rule that does not look at the label (random; attention; the predicted class on test data)
  can only put into the positions what the input itself says; a probe far above ``majority``
  that rises with k, beside a retrained model whose accuracy rises with k, is the leak.
- ``label_word_absent``: for tasks whose classes are words of the first sequence (bAbI answers
  are locations), the share of test examples whose gold answer word is nowhere visible, and
  ``other_labels_visible``, how many other class words remain visible on average.
"""

from __future__ import annotations

import warnings

import numpy as np

from roar.data.storage import DatasetMeta, Split

POSITIONS = 128  # mask indicators kept from each end of the first sequence
MAX_TRAIN = 20_000  # probe training examples at most (a seeded sample of larger train splits)


def mask_positions(split: Split, mask_id: int, positions: int = POSITIONS) -> np.ndarray:
    """``[N, 2 * positions]`` float32: is position p masked, counted from the start, then from the end."""
    n, width = split.tokens.shape
    masked = split.tokens == mask_id
    inside = np.arange(width)[None, :] < split.lengths[:, None]
    masked &= inside
    head = np.zeros((n, positions), dtype=np.float32)
    tail = np.zeros((n, positions), dtype=np.float32)
    take = min(positions, width)
    head[:, :take] = masked[:, :take]
    # From the end: position 0 is the last token of each sequence.
    offsets = split.lengths[:, None] - 1 - np.arange(take)[None, :]
    valid = offsets >= 0
    rows = np.repeat(np.arange(n)[:, None], take, axis=1)
    tail[:, :take] = np.where(valid, masked[rows, np.clip(offsets, 0, None)], False)
    return np.hstack([head, tail])


def second_sequence_bag(split: Split, vocab_size: int):
    """``[N, V]`` sparse counts of the second sequence's tokens (an empty matrix for single-sequence tasks)."""
    from scipy import sparse

    n = len(split)
    if not split.paired:
        return sparse.csr_matrix((n, 0), dtype=np.float32)
    inside = np.arange(split.tokens2.shape[1])[None, :] < split.lengths2[:, None]
    rows, cols = np.nonzero(inside)
    return sparse.csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, split.tokens2[rows, cols])),
                             shape=(n, vocab_size))


def probe_features(split: Split, meta: DatasetMeta, vocab_size: int):
    """What the probe sees: the mask pattern of the first sequence and the second sequence's words."""
    from scipy import sparse

    return sparse.hstack([sparse.csr_matrix(mask_positions(split, meta.mask_id)),
                          second_sequence_bag(split, vocab_size)]).tocsr()


def mask_probe(splits: dict[str, Split], meta: DatasetMeta, vocab_size: int, seed: int = 0) -> dict[str, float]:
    """Test accuracy of the mask-pattern probe and of the majority class (see the module docstring)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    train, test = splits["train"], splits["test"]
    rows = np.arange(len(train))
    if len(rows) > MAX_TRAIN:
        rows = np.sort(np.random.default_rng(seed).choice(rows, MAX_TRAIN, replace=False))
    labels = train.labels[rows]
    counts = np.bincount(labels, minlength=len(meta.classes))
    majority = float(np.mean(test.labels == counts.argmax()))
    if len(np.unique(labels)) < 2:
        return {"mask_probe": majority, "majority": majority}
    features = probe_features(train, meta, vocab_size)[rows]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        probe = LogisticRegression(max_iter=1000, C=1.0).fit(features, labels)
    accuracy = float(np.mean(probe.predict(probe_features(test, meta, vocab_size)) == test.labels))
    return {"mask_probe": accuracy, "majority": majority}


def label_word_absence(split: Split, meta: DatasetMeta, vocab: list[str]) -> dict[str, float] | None:
    """For classes that are words of the vocabulary: the share of examples whose gold class word is not
    visible in the first sequence, and the mean number of other class words visible; None otherwise."""
    index = {word: i for i, word in enumerate(vocab)}
    if not meta.classes or not all(name in index for name in meta.classes):
        return None
    class_ids = np.array([index[name] for name in meta.classes])
    inside = np.arange(split.tokens.shape[1])[None, :] < split.lengths[:, None]
    visible = np.stack([((split.tokens == cid) & inside).any(1) for cid in class_ids], axis=1)  # [N, C]
    gold_visible = visible[np.arange(len(split)), split.labels]
    others = visible.sum(1) - gold_visible
    return {"label_word_absent": float(np.mean(~gold_visible)), "other_labels_visible": float(np.mean(others))}


def leakage(splits: dict[str, Split], meta: DatasetMeta, vocab: list[str], seed: int = 0) -> dict[str, float]:
    """Both diagnostics for one (masked) dataset; keys ``mask_probe``, ``majority`` and, where the classes
    are words, ``label_word_absent`` and ``other_labels_visible`` (test split)."""
    out = mask_probe(splits, meta, len(vocab), seed)
    absence = label_word_absence(splits["test"], meta, vocab)
    if absence is not None:
        out.update(absence)
    return out
