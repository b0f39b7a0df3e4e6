"""What every model family returns and what importance measures may use of a model.

Measures see a model only through :class:`Classifier`: the first sequence's embeddings, the
embedding matrix behind them, and a forward pass from given embeddings. Anything else (layers,
attention internals, optimiser groups) stays inside the family's own module.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import torch


class ModelOutput(NamedTuple):
    """Forward pass results.

    Attributes:
        logits: ``[B, C]`` class scores.
        attention: ``[B, L]`` attention over the first sequence (0 on padding), or None (a family
            without the ``attention`` capability).
        embeddings: ``[B, L, D]`` the first sequence's input embeddings used.
    """

    logits: torch.Tensor
    attention: torch.Tensor | None
    embeddings: torch.Tensor


class Classifier(Protocol):
    """The interface of a model, as importance measures and training use it.

    A model is a ``torch.nn.Module`` whose class also declares ``cudnn_rnn`` (its RNNs need
    training mode for a backward pass under cuDNN) and ``mixed_precision`` (train in 16-bit
    floats on a GPU), and which has ``saved_floats_per_row`` (roar.models.device) and
    ``make_optimizer`` (roar.models.training).
    """

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` first-sequence ids -> ``[B, L, D]`` embeddings (the mask token's too)."""
        ...

    def embedding_matrix(self) -> torch.Tensor:
        """``[V, D]`` the first sequence's embedding table (row ``i`` embeds token id ``i``)."""
        ...

    def __call__(self, tokens: torch.Tensor, lengths: torch.Tensor, tokens2: torch.Tensor | None = None,
                 lengths2: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> ModelOutput:
        """Classify a batch; ``inputs_embeds`` (``[B, L, D]``) replaces ``embed(tokens)``."""
        ...
