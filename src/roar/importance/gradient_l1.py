"""Gradient importance with the L1 norm over the vocabulary axis (as some peers use) instead of the L2 norm."""

from __future__ import annotations

import torch

from roar.importance.gradient import GradientImportance

# Largest [B, L, chunk] product ``g W^T`` held at once (float32: 64 MiB); a transformer's vocabulary
# times a batch's tokens would not fit, so the vocabulary is taken in chunks of rows.
CHUNK_ELEMENTS = 2**24


class GradientL1Importance(GradientImportance):
    """``||dy_c/dx||_1 = sum_v |W_v . g|`` over the vocabulary axis of the one-hot token x
    (``g = dy_c/de``, W: ``[V, D]`` embedding matrix); the gradient is :class:`GradientImportance`'s."""

    name = "gradient-l1"

    @staticmethod
    def vocabulary_norm(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ``||W g||_1`` for ``grad`` g ``[B, L, D]`` and ``weight`` W ``[V, D]``. Unlike the L2
        norm it has no ``[D, D]`` shortcut: the ``[B, L, V]`` product is summed a chunk of W's rows at a time."""
        rows = max(1, CHUNK_ELEMENTS // max(grad.shape[0] * grad.shape[1], 1))
        return sum((grad @ part.T).abs().sum(-1) for part in weight.split(rows))
