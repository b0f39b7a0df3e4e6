"""Random importance: a seeded uniform score per token, the baseline of every comparison."""

from __future__ import annotations

import numpy as np
import torch

from roar.importance.base import MeasureContext
from roar.models.batching import Batch

_SPLIT_CODES = {"train": 1, "val": 2, "test": 3}


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & np.uint64(0xFFFFFFFFFFFFFFFF)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def uniform_scores(seed: int, split_code: int, example_ids: np.ndarray, length: int) -> np.ndarray:
    """``[B, length]`` uniform [0, 1) values fixed by (seed, split, example id, position).

    A counter-based hash, so a token's score does not depend on batching, padding or the
    recursion step: random masking is then the same recursively and non-recursively.
    """
    with np.errstate(over="ignore"):
        key = _splitmix64(np.uint64(seed) * np.uint64(4) + np.uint64(split_code))
        rows = _splitmix64(key ^ example_ids.astype(np.uint64))
        cells = _splitmix64(rows[:, None] + np.arange(length, dtype=np.uint64)[None, :])
    return (cells >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class RandomImportance:
    """Uniform random scores, seeded; model-independent."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = seed

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext) -> RandomImportance:
        """No options; seeded by the chain's seed."""
        return cls(context.seed)

    def attribute(self, model, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        scores = uniform_scores(self.seed, _SPLIT_CODES[split_name], example_ids, batch.tokens.shape[1])
        return torch.from_numpy(scores)
