"""Attention importance: the BiLSTM's additive attention weights over the first sequence."""

from __future__ import annotations

import numpy as np
import torch

from roar.importance.base import WithoutOptions
from roar.models.base import Classifier
from roar.models.batching import Batch


class AttentionImportance(WithoutOptions):
    """``alpha_t`` of the attention layer; refused for models without one (the transformer)."""

    name = "attention"

    @torch.no_grad()
    def attribute(self, model: Classifier, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        out = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2)
        if out.attention is None:
            raise ValueError(f"the attention measure needs a model with an attention layer; "
                             f"{type(model).__name__} has none")
        return out.attention
