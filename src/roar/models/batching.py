"""Turn a :class:`~roar.data.storage.Split` into padded tensor batches."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from roar.data.storage import Split


class Batch(NamedTuple):
    """Tensors of one batch, trimmed to its longest sequences; ``rows`` index the split."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    tokens2: torch.Tensor | None
    lengths2: torch.Tensor | None
    labels: torch.Tensor
    rows: np.ndarray

    def to(self, device: torch.device | str) -> Batch:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Batch(move(self.tokens), move(self.lengths), move(self.tokens2), move(self.lengths2),
                     move(self.labels), self.rows)

    def part(self, start: int, stop: int) -> Batch:
        """Rows ``start:stop`` of the batch (same padded width)."""
        cut = lambda t: None if t is None else t[start:stop]  # noqa: E731
        return Batch(cut(self.tokens), cut(self.lengths), cut(self.tokens2), cut(self.lengths2), cut(self.labels),
                     self.rows[start:stop])


def make_batch(split: Split, rows: np.ndarray) -> Batch:
    """The batch of ``rows`` of ``split``."""
    lengths = split.lengths[rows]
    max_len = max(int(lengths.max(initial=1)), 1)
    tokens2 = lengths2 = None
    if split.paired:
        lengths2 = split.lengths2[rows]
        max2 = max(int(lengths2.max(initial=1)), 1)
        tokens2 = torch.from_numpy(split.tokens2[rows, :max2])
        lengths2 = torch.from_numpy(lengths2)
    return Batch(torch.from_numpy(split.tokens[rows, :max_len]), torch.from_numpy(lengths), tokens2, lengths2,
                 torch.from_numpy(split.labels[rows]), rows)


def iterate_batches(split: Split, batch_size: int, shuffle_seed: int | None = None) -> Iterator[Batch]:
    """Batches in order, or shuffled by ``shuffle_seed``."""
    order = np.arange(len(split))
    if shuffle_seed is not None:
        order = np.random.default_rng(shuffle_seed).permutation(len(split))
    for start in range(0, len(split), batch_size):
        yield make_batch(split, order[start:start + batch_size])


def length_batches(split: Split, batch_size: int) -> Iterator[Batch]:
    """Batches of rows of one (first, second) sequence length each, shortest first, at most
    ``batch_size`` rows: no padding at all (the BiLSTM then flips instead of gathering and masks
    nothing). A length with few rows gives a small batch; integrated gradients fills its passes with
    more samples instead. Ties keep split order (stable sort).
    """
    order = np.lexsort((split.lengths2, split.lengths))
    keys = split.lengths[order].astype(np.int64) * (int(split.lengths2.max(initial=0)) + 1) + split.lengths2[order]
    for group in np.split(order, np.flatnonzero(np.diff(keys)) + 1) if len(order) else []:
        for start in range(0, len(group), batch_size):
            yield make_batch(split, group[start:start + batch_size])


class SplitDataset(torch.utils.data.Dataset):
    """Index dataset whose collate function builds a :class:`Batch` (for DataLoader)."""

    def __init__(self, split: Split):
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> int:
        return i

    def collate(self, rows: list[int]) -> Batch:
        return make_batch(self.split, np.asarray(rows))


class BucketBatchSampler(torch.utils.data.Sampler):
    """Shuffled batches of similar lengths: less padding, so fewer wasted LSTM steps.

    Each epoch shuffles the examples, sorts windows of ``batch_size * window`` of them by length,
    cuts batches and shuffles the batch order, all from a seeded generator.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, window: int = 50):
        self.lengths, self.batch_size, self.window = lengths, batch_size, window
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def __iter__(self):
        order = self.rng.permutation(len(self.lengths))
        size = self.batch_size * self.window
        batches = []
        for start in range(0, len(order), size):
            chunk = order[start:start + size]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i:i + self.batch_size].tolist() for i in range(0, len(chunk), self.batch_size)]
        for i in self.rng.permutation(len(batches)):
            yield batches[i]
