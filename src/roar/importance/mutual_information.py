"""Mutual information between word presence and label: a model-independent baseline."""

from __future__ import annotations

import numpy as np
import torch

from roar.data.storage import Split
from roar.importance.base import MeasureContext
from roar.models.batching import Batch


def word_label_mutual_information(split: Split, vocab_size: int, n_classes: int) -> np.ndarray:
    """``[V]`` MI of each word's presence in the first sequence with the label.

    For each class c, the one-vs-rest 2x2 table of document counts (word present/absent x class
    c/not c), each cell +1, gives ``MI_c``; the result is ``sum_c p(c) MI_c`` with the class prior
    ``p(c)`` of the split.
    """
    n_docs = len(split)
    present = np.zeros((n_classes, vocab_size), dtype=np.float64)
    valid = np.arange(split.tokens.shape[1])[None, :] < split.lengths[:, None]
    for c in range(n_classes):
        rows = split.labels == c
        tokens = split.tokens[rows]
        # Each word counts once per document; padding cells are left out (not encoded as -1,
        # which would collide with the last word id of the previous document).
        doc_word = np.unique((tokens + (np.arange(tokens.shape[0]) * vocab_size)[:, None])[valid[rows]])
        present[c] = np.bincount(doc_word % vocab_size, minlength=vocab_size)
    class_docs = np.bincount(split.labels, minlength=n_classes).astype(np.float64)
    prior = class_docs / n_docs
    total_present = present.sum(0)
    mi = np.zeros(vocab_size)
    for c in range(n_classes):
        n11 = present[c] + 1
        n10 = total_present - present[c] + 1
        n01 = class_docs[c] - present[c] + 1
        n00 = (n_docs - class_docs[c]) - (total_present - present[c]) + 1
        n = n11 + n10 + n01 + n00
        mi_c = np.zeros(vocab_size)
        for n_xy, n_x, n_y in ((n11, n11 + n10, n11 + n01), (n10, n11 + n10, n10 + n00),
                               (n01, n01 + n00, n11 + n01), (n00, n01 + n00, n10 + n00)):
            mi_c += n_xy / n * np.log(n * n_xy / (n_x * n_y))
        mi += prior[c] * mi_c
    return mi


class MutualInformationImportance:
    """Each token scores the MI of its word with the label, from the training split's counts."""

    name = "mutual-information"

    def __init__(self, train_split: Split, vocab_size: int, n_classes: int):
        self.table = torch.from_numpy(word_label_mutual_information(train_split, vocab_size, n_classes))

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext) -> MutualInformationImportance:
        """No options; counts ``context.train_split``."""
        if context.train_split is None:
            raise ValueError("mutual-information needs the training split")
        return cls(context.train_split, context.vocab_size, context.n_classes)

    def attribute(self, model, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        return self.table[batch.tokens.cpu()]
