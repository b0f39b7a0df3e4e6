"""What every importance measure shares: the interface, the explained class and its logit's gradient."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from roar.config.catalog import TARGETS, measure_spec
from roar.data.storage import Split
from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS
from roar.models.base import Classifier
from roar.models.batching import Batch


@dataclass(frozen=True)
class MeasureContext:
    """What a run knows when it builds a measure (besides the measure's own options).

    Attributes:
        seed: the chain's seed (``random`` draws from it).
        train_split: the training split of the step's input data (``mutual-information`` counts it).
        vocab_size, n_classes: the dataset's token ids and classes.
        mask_id, unmaskable_ids: the dataset's mask token and never-masked ids (``occlusion`` and
            ``kernel-shap`` replace tokens by the mask; default: the word vocabulary's).
    """

    seed: int = 0
    train_split: Split | None = None
    vocab_size: int = 0
    n_classes: int = 0
    mask_id: int = MASK_ID
    unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS


class ImportanceMeasure(Protocol):
    """Scores each token of the first sequence; higher means more important.

    ``attribute`` returns ``[B, L]`` scores for a batch whose first sequence is ``[B, L]``;
    values at padding positions are unspecified (masking never looks at them). A measure whose
    spec has ``explains_class`` explains the logit of ``batch.labels`` (see :func:`explained_batch`);
    one without ``needs_model`` gets None for the model. It uses a model only through
    :class:`~roar.models.base.Classifier`.

    Attributes:
        name: the measure's name in :data:`roar.config.catalog.MEASURE_SPECS`, where its facts are.
    """

    name: str

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext) -> ImportanceMeasure:
        """The measure configured by its ``importance.<name>`` options and the run's ``context``."""
        ...

    def attribute(self, model: Classifier | None, batch: Batch, example_ids: np.ndarray,
                  split_name: str) -> torch.Tensor: ...


class WithoutOptions:
    """Base of a measure that reads no ``importance.<name>`` options: ``from_params`` is the bare class."""

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext):
        return cls()


def explained_logit(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``[B]`` logit of each example's explained class ``labels``."""
    return logits.gather(1, labels[:, None]).squeeze(1)


@torch.no_grad()
def predicted_labels(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """``[B]`` the class ``model`` predicts for each example of ``batch``."""
    return model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits.argmax(-1)


def explained_batch(model: torch.nn.Module | None, batch: Batch, target: str) -> Batch:
    """``batch`` with ``labels`` set to the class to explain: unchanged for ``gold``, the model's
    prediction for ``predicted``."""
    if target not in TARGETS:
        raise ValueError(f"importance target {target!r} unknown; allowed: {', '.join(TARGETS)}")
    if target == "gold" or model is None:
        return batch
    return batch._replace(labels=predicted_labels(model, batch))


@contextlib.contextmanager
def rnn_backward_allowed(model: torch.nn.Module, device: torch.device) -> Iterator[None]:
    """Let a gradient pass through the recurrent layers of a model in eval mode.

    cuDNN computes an RNN's backward pass only in training mode. For a model whose class declares
    ``cudnn_rnn`` (the BiLSTM), on a GPU, its RNN modules switch to training mode for the pass and
    back after it; without dropout that changes nothing else. An RNN with dropout keeps eval mode
    and runs without cuDNN instead (native kernels: same gradients, slower). Elsewhere (the CPU,
    models without RNNs) nothing changes.
    """
    if device.type != "cuda" or not getattr(type(model), "cudnn_rnn", False):
        yield
        return
    rnns = [m for m in model.modules() if isinstance(m, torch.nn.RNNBase)]
    if any(m.dropout for m in rnns):
        with torch.backends.cudnn.flags(enabled=False):
            yield
        return
    modes = [m.training for m in rnns]
    try:
        for m in rnns:
            m.train()
        yield
    finally:
        for m, mode in zip(rnns, modes, strict=True):
            m.train(mode)


def embedding_gradient(model: torch.nn.Module, batch: Batch, embeddings: torch.Tensor) -> torch.Tensor:
    """``[B, L, D]`` gradient of the explained class's logit (``batch.labels``) with respect to the
    given first-sequence embeddings.

    Examples are independent in the model, so the gradient of the summed gold logits gives
    every example's own gradient in one backward pass.
    """
    embeddings = embeddings.detach().requires_grad_(True)
    with torch.enable_grad(), rnn_backward_allowed(model, embeddings.device), frozen_weights(model):
        logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2, inputs_embeds=embeddings).logits
        (grad,) = torch.autograd.grad(explained_logit(logits, batch.labels).sum(), embeddings)
    return grad


@contextlib.contextmanager
def frozen_weights(model: torch.nn.Module) -> Iterator[None]:
    """Parameters that need no gradient for the pass: autograd then records no graph for the parts
    that do not depend on the input (the question encoder) and the LSTM kernels skip the weight
    gradients (the input gradient is the same)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in trainable:
            p.requires_grad_(False)
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def prediction_agreement(model: torch.nn.Module, split: Split, batch_size: int = 256) -> float:
    """Share of ``split``'s examples whose predicted class is the gold one (what ``target: predicted``
    explains instead of the gold class)."""
    from roar.models.batching import iterate_batches

    device = next(model.parameters()).device
    agree = sum(int((predicted_labels(model, batch.to(device)) == batch.labels.to(device)).sum())
                for batch in iterate_batches(split, batch_size))
    return agree / max(len(split), 1)


def compute_importance(measure: ImportanceMeasure, model: torch.nn.Module | None, split: Split, split_name: str,
                       batch_size: int = 128, progress: bool = True, target: str = "gold") -> np.ndarray:
    """``[N, L]`` float32 importance of every first-sequence token of ``split`` (0 on padding).

    ``target`` (:data:`~roar.config.catalog.TARGETS`) picks the class that measures with ``explains_class``
    explain (gold: the batch's labels as they are).
    On a GPU, ``batch_size`` shrinks to the rows one gradient pass of the model fits there
    (:func:`roar.models.device.max_rows_per_pass` at the split's longest sequences). A measure that
    reads the model sees the rows in order of length (:func:`roar.models.batching.length_batches`):
    a model runs no padding positions; a row's scores are the same up to float rounding (the kernels'
    shapes change), others get them in split order.
    """
    from tqdm.auto import tqdm

    from roar.models.batching import iterate_batches, length_batches

    out = np.zeros(split.tokens.shape, dtype=np.float32)
    device = torch.device("cpu")
    if model is not None:
        model.eval()
        device = next(model.parameters()).device
        if device.type == "cuda":
            from roar.models.device import max_rows_per_pass

            batch_size = min(batch_size, max_rows_per_pass(model, split.tokens.shape[1], split.tokens2.shape[1],
                                                           device))
    batches = iterate_batches(split, batch_size) if model is None else length_batches(split, batch_size)
    total = -(-len(split) // batch_size)
    for batch in tqdm(batches, total=total, desc=f"{measure.name} on {split_name}", disable=not progress,
                      leave=False):
        batch = batch.to(device)
        if target != "gold" and measure_spec(measure.name).explains_class:
            batch = explained_batch(model, batch, target)
        scores = measure.attribute(model, batch, split.index[batch.rows], split_name)
        scores = scores.detach().float().cpu().numpy()
        inside = np.arange(scores.shape[1])[None, :] < split.lengths[batch.rows, None]
        out[batch.rows, : scores.shape[1]] = np.where(inside, scores, 0.0)
    return out
