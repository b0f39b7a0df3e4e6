"""Integrated gradients from a zero-embedding baseline, right Riemann sum, samples batched."""

from __future__ import annotations

import numpy as np
import torch

from roar.importance.base import embedding_gradient
from roar.models.batching import Batch


class IntegratedGradientImportance:
    """``|mean_i dy_c/de(i/n * e) . e|`` for i = 1..n.

    The n scaled copies of a batch are stacked along the batch axis and run together, at most
    ``max_rows`` sequences per forward/backward pass (the memory budget).

    Args:
        samples: number of Riemann samples n (paper: 50).
        max_rows: largest number of sequences in one pass (batch rows x samples); None picks
            128 on the CPU, i.e. one sample of a 128-example batch per pass (stacking runs slower
            there: bench/bench_integrated_gradients.py), and 8192 on a GPU.
        batched: stack the samples (True) or run them one pass at a time (reference).
    """

    name = "integrated-gradient"
    needs_model = True
    explains_class = True

    def __init__(self, samples: int = 50, max_rows: int | None = None, batched: bool = True):
        if samples < 1:
            raise ValueError(f"integrated-gradient samples={samples!r} must be >= 1")
        self.samples, self.max_rows, self.batched = samples, max_rows, batched

    def mean_gradient(self, model: torch.nn.Module, batch: Batch, embeddings: torch.Tensor) -> torch.Tensor:
        """``[B, L, D]`` mean gradient over the scaled inputs ``i/n * e``, i = 1..n."""
        n, rows = self.samples, embeddings.shape[0]
        scales = torch.arange(1, n + 1, dtype=embeddings.dtype, device=embeddings.device) / n
        max_rows = self.max_rows or (8192 if embeddings.is_cuda else 128)
        per_pass = max(1, max_rows // max(rows, 1)) if self.batched else 1
        total = torch.zeros_like(embeddings)
        for start in range(0, n, per_pass):
            chunk = scales[start:start + per_pass]
            m = len(chunk)
            scaled = (chunk[:, None, None, None] * embeddings[None]).reshape(m * rows, *embeddings.shape[1:])
            stacked = Batch(batch.tokens.repeat(m, 1), batch.lengths.repeat(m),
                            None if batch.tokens2 is None else batch.tokens2.repeat(m, 1),
                            None if batch.lengths2 is None else batch.lengths2.repeat(m),
                            batch.labels.repeat(m), batch.rows)
            total += embedding_gradient(model, stacked, scaled).reshape(m, *embeddings.shape).sum(0)
        return total / n

    def attribute(self, model: torch.nn.Module, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        embeddings = model.embed(batch.tokens).detach()
        return (self.mean_gradient(model, batch, embeddings) * embeddings).sum(-1).abs()
