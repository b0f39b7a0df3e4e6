"""Input x gradient importance: ``|x . dy_c/dx|`` with one-hot x, i.e. ``|e . dy_c/de|``."""

from __future__ import annotations

import numpy as np
import torch

from roar.importance.base import WithoutOptions, embedding_gradient
from roar.models.base import Classifier
from roar.models.batching import Batch


class InputXGradientImportance(WithoutOptions):
    """Absolute dot product of each token's embedding and the explained class logit's gradient there."""

    name = "input-x-gradient"

    def attribute(self, model: Classifier, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        embeddings = model.embed(batch.tokens).detach()
        grad = embedding_gradient(model, batch, embeddings)
        return (grad * embeddings).sum(-1).abs()
