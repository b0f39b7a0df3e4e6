"""What every importance measure shares: the interface and the gold-logit gradient."""

from __future__ import annotations

import contextlib
from typing import Protocol

import numpy as np
import torch

from roar.data.storage import Split
from roar.models.batching import Batch


class ImportanceMeasure(Protocol):
    """Scores each token of the first sequence; higher means more important.

    ``attribute`` returns ``[B, L]`` scores for a batch whose first sequence is ``[B, L]``;
    values at padding positions are unspecified (masking never looks at them).
    """

    name: str
    needs_model: bool

    def attribute(self, model: torch.nn.Module | None, batch: Batch, example_ids: np.ndarray,
                  split_name: str) -> torch.Tensor: ...


def gold_logit(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[B]`` logit of each example's gold class."""
    return logits.gather(1, labels[:, None]).squeeze(1)


def _rnn_backward_allowed():
    # cuDNN refuses RNN backward in eval mode; the native kernels give the same gradients.
    return torch.backends.cudnn.flags(enabled=False) if torch.cuda.is_available() else contextlib.nullcontext()


def embedding_gradient(model: torch.nn.Module, batch: Batch, embeddings: torch.Tensor) -> torch.Tensor:
    """``[B, L, D]`` gradient of the gold logit with respect to the given first-sequence embeddings.

    Examples are independent in the model, so the gradient of the summed gold logits gives
    every example's own gradient in one backward pass.
    """
    embeddings = embeddings.detach().requires_grad_(True)
    with torch.enable_grad(), _rnn_backward_allowed():
        logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2, inputs_embeds=embeddings).logits
        (grad,) = torch.autograd.grad(gold_logit(logits, batch.labels).sum(), embeddings)
    return grad


def compute_importance(measure: ImportanceMeasure, model: torch.nn.Module | None, split: Split, split_name: str,
                       batch_size: int = 128, progress: bool = True) -> np.ndarray:
    """``[N, L]`` float32 importance of every first-sequence token of ``split`` (0 on padding)."""
    from tqdm.auto import tqdm

    from roar.models.batching import iterate_batches

    out = np.zeros(split.tokens.shape, dtype=np.float32)
    device = torch.device("cpu")
    if model is not None:
        model.eval()
        device = next(model.parameters()).device
    batches = iterate_batches(split, batch_size)
    total = -(-len(split) // batch_size)
    for batch in tqdm(batches, total=total, desc=f"{measure.name} on {split_name}", disable=not progress,
                      leave=False):
        scores = measure.attribute(model, batch.to(device), split.index[batch.rows], split_name)
        scores = scores.detach().float().cpu().numpy()
        inside = np.arange(scores.shape[1])[None, :] < split.lengths[batch.rows, None]
        out[batch.rows, : scores.shape[1]] = np.where(inside, scores, 0.0)
    return out
