"""Gradient importance: the L2 norm of the explained class logit's gradient with respect to the one-hot input (gold class by default)."""

from __future__ import annotations

import numpy as np
import torch

from roar.importance.base import WithoutOptions, embedding_gradient
from roar.models.base import Classifier
from roar.models.batching import Batch


class GradientImportance(WithoutOptions):
    """``||dy_c/dx||_2`` over the vocabulary axis of the one-hot token x.

    With ``e = x W`` (W: ``[V, D]`` embedding matrix), ``dy/dx = W g`` for ``g = dy/de``. A variant
    with another norm over the vocabulary axis overrides :meth:`vocabulary_norm` only.
    """

    name = "gradient"

    def attribute(self, model: Classifier, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        grad = embedding_gradient(model, batch, model.embed(batch.tokens))
        return self.vocabulary_norm(grad, model.embedding_matrix().detach())

    @staticmethod
    def vocabulary_norm(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` norm of ``dy/dx = W g`` over the vocabulary, for ``grad`` g ``[B, L, D]`` and
        ``weight`` W ``[V, D]``: here ``||W g||_2``, from ``||W g||^2 = g^T (W^T W) g`` (the ``[D, D]``
        Gram matrix gives it without the ``[B, L, V]`` tensor)."""
        gram = weight.T @ weight
        squared = torch.einsum("bld,de,ble->bl", grad, gram, grad)
        return squared.clamp(min=0).sqrt()
