"""Integrated gradients' two weightings, pinned by hand on a model whose gradients are written down.

The model has 1-d embeddings ``e`` and scores class c as ``sum_t p_c x_t + q_c x_t^2`` over the first
sequence's (scaled) embeddings x, so the gradient at x = a e is ``p_c + 2 q_c a e_t``. With n = 2 the
Riemann points are a = 1/2 and a = 1 (right rule, i = 1..n), and per token

* textbook: ``|e/2 * (g(1/2) + g(1))|``
* official: ``|e/2 * (1/2 g(1/2) + 1 g(1))|`` (each term times its scale i/n, as the official code's
  gradient with respect to the unscaled embedding carries it).

Class 0 has p = -3, q = 1; class 1 has p = 1, q = 0. Tokens 1, 2, 3 embed as 2, 1, -1. For class 0:

* e = 2: g(1/2) = -3 + 2 = -1, g(1) = -3 + 4 = 1; textbook |2/2 (-1 + 1)| = 0, official |2/2 (-1/2 + 1)| = 0.5
* e = 1: g = -2, -1; textbook |1/2 (-3)| = 1.5, official |1/2 (-1 - 1)| = 1
* e = -1: g = -4, -5; textbook |-1/2 (-9)| = 4.5, official |-1/2 (-2 - 5)| = 3.5

For class 1 the gradient is 1 everywhere: textbook ``|e|``, official ``|e| (1/2 + 1)/2 = 3/4 |e|``.
A left Riemann rule (points 0 and 1/2) would give 4, 2.5 and 3.5 for class 0's textbook scores, and
the absolute value taken per term instead of after the mean would give 1 for the first token; the
numbers below exclude both.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from roar.config.schema import check_params
from roar.core.errors import RoarError
from roar.importance.integrated_gradient import IntegratedGradientImportance
from roar.importance.registry import make_measure
from roar.models.base import ModelOutput
from roar.models.batching import Batch
from tests.conftest import tiny_params

P, Q = (-3.0, 1.0), (1.0, 0.0)  # per class c: the linear and quadratic coefficients
EMBEDDINGS = (0.0, 2.0, 1.0, -1.0)  # token id -> its 1-d embedding (0 is padding)


class QuadraticScorer(torch.nn.Module):
    """``logit_c = sum_t p_c x_t + q_c x_t^2`` over the first sequence's real tokens (float64)."""

    cudnn_rnn = False

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(len(EMBEDDINGS), 1, padding_idx=0).double()
        self.embedding.weight.data = torch.tensor(EMBEDDINGS, dtype=torch.float64)[:, None]
        self.p = torch.tensor(P, dtype=torch.float64)
        self.q = torch.tensor(Q, dtype=torch.float64)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding(tokens)

    def embedding_matrix(self) -> torch.Tensor:
        return self.embedding.weight

    def forward(self, tokens, lengths, tokens2=None, lengths2=None, inputs_embeds=None) -> ModelOutput:
        x = (self.embed(tokens) if inputs_embeds is None else inputs_embeds)[..., 0]  # [B, L]
        x = x * (torch.arange(tokens.shape[1])[None, :] < lengths[:, None])
        logits = x.sum(1)[:, None] * self.p[None, :] + (x ** 2).sum(1)[:, None] * self.q[None, :]
        return ModelOutput(logits, None, x[..., None])


def batch(label: int) -> Batch:
    """Two rows: tokens 1, 2, 3 (embeddings 2, 1, -1) and tokens 3, 1 (embeddings -1, 2) with padding."""
    tokens = torch.tensor([[1, 2, 3], [3, 1, 0]])
    return Batch(tokens, torch.tensor([3, 2]), None, None, torch.tensor([label, label]), np.arange(2))


def scores(weighting: str, label: int, **options) -> np.ndarray:
    measure = IntegratedGradientImportance(samples=2, weighting=weighting, **{"max_rows": 64, **options})
    return measure.attribute(QuadraticScorer(), batch(label), np.arange(2), "test").detach().numpy()


@pytest.mark.parametrize("options", [{}, {"batched": False}, {"max_rows": 1}, {"max_rows": 3}])
def test_official_weighting_by_hand(options):
    assert scores("official", 0, **options)[0] == pytest.approx([0.5, 1.0, 3.5], abs=1e-12)
    assert scores("official", 0, **options)[1, :2] == pytest.approx([3.5, 0.5], abs=1e-12)
    assert scores("official", 1, **options)[0] == pytest.approx([1.5, 0.75, 0.75], abs=1e-12)


@pytest.mark.parametrize("options", [{}, {"batched": False}, {"max_rows": 1}])
def test_textbook_weighting_by_hand(options):
    assert scores("textbook", 0, **options)[0] == pytest.approx([0.0, 1.5, 4.5], abs=1e-12)
    assert scores("textbook", 1, **options)[0] == pytest.approx([2.0, 1.0, 1.0], abs=1e-12)


def test_weighting_is_an_option_textbook_by_default():
    assert make_measure("integrated-gradient", {"samples": 2}).weighting == "textbook"
    assert make_measure("integrated-gradient", {"samples": 2, "weighting": "official"}).weighting == "official"
    with pytest.raises(ValueError, match="weighting='scaled' unknown; allowed: textbook, official"):
        IntegratedGradientImportance(weighting="scaled")


def test_schema_refuses_an_unknown_weighting_in_one_line():
    params = tiny_params()
    params["importance"]["integrated-gradient"]["weighting"] = "scaled"
    with pytest.raises(RoarError) as refused:
        check_params(params)
    assert str(refused.value) == ("params.yaml: importance.integrated-gradient.weighting = 'scaled' must be one of "
                                  "textbook, official")
