"""Integrated gradients from a zero-embedding baseline, right Riemann sum, samples batched: textbook
IG, or the official code's weighting of each term by its scale."""

from __future__ import annotations

import numpy as np
import torch

from roar.config.catalog import IG_WEIGHTINGS
from roar.importance.base import MeasureContext, embedding_gradient
from roar.models.base import Classifier
from roar.models.batching import Batch


class IntegratedGradientImportance:
    """``|mean_i dy_c/de(i/n * e) . e|`` for i = 1..n (``weighting: textbook``), or
    ``|mean_i (i/n) dy_c/de(i/n * e) . e|`` for i = 1..n (``weighting: official``).

    Both use the right Riemann points ``i/n``, i = 1..n, the embedding ``e`` of each first-sequence
    token (zero baseline), the mean over the n points, the dot product with ``e`` and the absolute
    value last. The official code (nlp-roar-interpretability,
    ``nlproar/explain/importance_measures/integrated_gradient.py``: ``for i in arange(1, n + 1)``,
    ``embedding_scale = i / n``, a running mean, ``abs`` at the end) takes the gradient with respect
    to the unscaled embedding while the model sees it times ``i/n``
    (``nlproar/model/rnn_multiple_sequence_to_class.py``, ``_Encoder.forward``): by the chain rule each
    term carries the factor ``i/n``, which textbook IG does not have.

    The n scaled copies of a batch are stacked along the batch axis and run together, at most
    ``max_rows`` sequences per forward/backward pass (the memory budget); a batch of more than
    ``max_rows`` examples is explained in parts of ``max_rows``.

    Args:
        samples: number of Riemann samples n (paper: 50).
        max_rows: largest number of sequences in one pass (batch rows x samples); None picks
            :func:`roar.models.device.max_rows_per_pass`: 128 on the CPU, i.e. one sample of a
            128-example batch per pass (stacking runs slower there:
            bench/bench_integrated_gradients.py); on a GPU what the model's activations at the
            batch's length leave room for in free memory (at most 8192).
        batched: stack the samples (True) or run them one pass at a time (reference).
        weighting: ``textbook`` or ``official`` (:data:`~roar.config.catalog.IG_WEIGHTINGS`).
    """

    name = "integrated-gradient"

    def __init__(self, samples: int = 50, max_rows: int | None = None, batched: bool = True,
                 weighting: str = IG_WEIGHTINGS[0]):
        if samples < 1:
            raise ValueError(f"integrated-gradient samples={samples!r} must be >= 1")
        if weighting not in IG_WEIGHTINGS:
            raise ValueError(f"integrated-gradient weighting={weighting!r} unknown; "
                             f"allowed: {', '.join(IG_WEIGHTINGS)}")
        self.samples, self.max_rows, self.batched, self.weighting = samples, max_rows, batched, weighting

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext) -> IntegratedGradientImportance:
        """Options ``samples`` (default 50), ``max_rows`` (default None) and ``weighting`` (default textbook)."""
        return cls(int(params.get("samples", 50)), params.get("max_rows"),
                   weighting=params.get("weighting", IG_WEIGHTINGS[0]))

    @staticmethod
    def model_passes(params: dict) -> int:
        """One gradient pass per Riemann sample (what roar.launch.plan's cost model counts)."""
        return int(params.get("samples", 50))

    def rows_per_pass(self, model: torch.nn.Module, batch: Batch, device: torch.device) -> int:
        """``max_rows``, or the device's default for ``model`` at ``batch``'s padded lengths."""
        if self.max_rows:
            return self.max_rows
        from roar.models.device import max_rows_per_pass

        length2 = 0 if batch.tokens2 is None else batch.tokens2.shape[1]
        return max_rows_per_pass(model, batch.tokens.shape[1], length2, device)

    def mean_gradient(self, model: torch.nn.Module, batch: Batch, embeddings: torch.Tensor) -> torch.Tensor:
        """``[B, L, D]`` mean gradient over the scaled inputs ``i/n * e``, i = 1..n (each times ``i/n`` with
        the official weighting)."""
        max_rows, rows = self.rows_per_pass(model, batch, embeddings.device), embeddings.shape[0]
        if rows > max_rows:
            return torch.cat([self._mean_gradient(model, batch.part(start, start + max_rows),
                                                  embeddings[start:start + max_rows], max_rows)
                              for start in range(0, rows, max_rows)])
        return self._mean_gradient(model, batch, embeddings, max_rows)

    def _mean_gradient(self, model: torch.nn.Module, batch: Batch, embeddings: torch.Tensor,
                       max_rows: int) -> torch.Tensor:
        n, rows = self.samples, embeddings.shape[0]
        scales = torch.arange(1, n + 1, dtype=embeddings.dtype, device=embeddings.device) / n
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
            gradients = embedding_gradient(model, stacked, scaled).reshape(m, *embeddings.shape)
            if self.weighting == "official":  # d(i/n * e)/de = i/n: the official code's gradient
                gradients = gradients * chunk[:, None, None, None]
            total += gradients.sum(0)
        return total / n

    def attribute(self, model: Classifier, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        embeddings = model.embed(batch.tokens).detach()
        return (self.mean_gradient(model, batch, embeddings) * embeddings).sum(-1).abs()
