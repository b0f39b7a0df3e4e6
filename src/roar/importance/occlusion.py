"""Occlusion (leave-one-out): how much the explained class's logit drops when one token is masked."""

from __future__ import annotations

import numpy as np
import torch

from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS, maskable_positions
from roar.importance.base import MeasureContext
from roar.models.batching import Batch


def candidate_positions(batch: Batch, mask_id: int, unmaskable_ids: tuple[int, ...]) -> torch.Tensor:
    """``[B, L]`` bool: the first-sequence positions that masking may still choose (inside the
    sequence, not a special token, not already the mask token; :func:`roar.method.masking.mask_top_k`)."""
    tokens, lengths = batch.tokens.cpu().numpy(), batch.lengths.cpu().numpy()
    maskable = maskable_positions(tokens, lengths, unmaskable_ids) & (tokens != mask_id)
    return torch.from_numpy(maskable).to(batch.tokens.device)


def rows_per_pass(model: torch.nn.Module, batch: Batch, max_rows: int | None) -> int:
    """``max_rows``, or the device's rows per gradient pass at ``batch``'s padded lengths (a safe
    bound for a forward pass without gradients, which keeps less)."""
    if max_rows:
        return max_rows
    from roar.models.device import max_rows_per_pass

    length2 = 0 if batch.tokens2 is None else batch.tokens2.shape[1]
    return max_rows_per_pass(model, batch.tokens.shape[1], length2, batch.tokens.device)


@torch.no_grad()
def masked_logits(model: torch.nn.Module, batch: Batch, rows: torch.Tensor, absent: torch.Tensor, mask_id: int,
                  max_rows: int) -> torch.Tensor:
    """``[N]`` explained-class logits (``batch.labels``) of ``N`` variants of ``batch``'s examples.

    Variant n is example ``rows[n]`` with the first-sequence positions ``absent[n]`` (``[N, L]``
    bool) replaced by ``mask_id``; lengths and the second sequence stay. At most ``max_rows``
    variants go through the model at once, shortest first, each pass cut to its longest sequence
    (the models do not depend on padding; the passes then hold little of it).
    """
    order = torch.argsort(batch.lengths[rows], stable=True)
    out = []
    for start in range(0, len(rows), max_rows):
        pick = order[start:start + max_rows]
        part = rows[pick]
        width = int(batch.lengths[part].max())
        tokens = batch.tokens[part, :width].masked_fill(absent[pick, :width], mask_id)
        logits = model(tokens, batch.lengths[part], None if batch.tokens2 is None else batch.tokens2[part],
                       None if batch.lengths2 is None else batch.lengths2[part]).logits
        out.append(logits.gather(1, batch.labels[part, None]).squeeze(1))
    if not out:
        return batch.tokens.new_zeros(0, dtype=torch.float32)
    logits = torch.empty(len(rows), dtype=out[0].dtype, device=out[0].device)
    logits[order] = torch.cat(out)
    return logits


class OcclusionImportance:
    """``y_c(x) - y_c(x with token i replaced by the mask token)``, signed (a token that speaks
    against class c scores below 0, so it is masked last).

    Only the positions masking may still choose are occluded (see :func:`candidate_positions`);
    the others (specials, padding, tokens masked at an earlier step) score 0, which costs them
    nothing since masking never picks them. One forward pass per occluded token, no backward
    pass: the variants of a batch are stacked along the batch axis, ``max_rows`` per pass.

    Args:
        max_rows: most variants per forward pass; None: the device's default
            (:func:`roar.models.device.max_rows_per_pass`, 128 on the CPU).
        mask_id: the dataset's mask token (:class:`roar.data.storage.DatasetMeta`; default: the word
            vocabulary's).
        unmaskable_ids: the dataset's never-masked ids (likewise).
    """

    name = "occlusion"

    def __init__(self, max_rows: int | None = None, mask_id: int = MASK_ID,
                 unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS):
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"occlusion max_rows={max_rows!r} must be >= 1 or null")
        self.max_rows, self.mask_id, self.unmaskable_ids = max_rows, mask_id, tuple(unmaskable_ids)

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext) -> OcclusionImportance:
        """Option ``max_rows`` (default None); the mask token and specials from the dataset."""
        return cls(params.get("max_rows"), context.mask_id, context.unmaskable_ids)

    @staticmethod
    def model_passes(params: dict) -> int:
        """Forward passes per example (roar.launch.plan's cost model): about one per token of a
        bAbI/sentence-length example plus the unoccluded one; 20 is a typical sentence."""
        return 21

    def attribute(self, model: torch.nn.Module, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        candidates = candidate_positions(batch, self.mask_id, self.unmaskable_ids)
        rows, positions = candidates.nonzero(as_tuple=True)
        absent = torch.zeros(len(rows), batch.tokens.shape[1], dtype=torch.bool, device=rows.device)
        absent[torch.arange(len(rows), device=rows.device), positions] = True
        max_rows = rows_per_pass(model, batch, self.max_rows)
        every = torch.arange(len(batch.tokens), device=rows.device)
        full = masked_logits(model, batch, every, torch.zeros_like(batch.tokens, dtype=torch.bool), self.mask_id,
                             max_rows)
        dropped = masked_logits(model, batch, rows, absent, self.mask_id, max_rows)
        scores = torch.zeros(batch.tokens.shape, dtype=full.dtype, device=full.device)
        scores[rows, positions] = full[rows] - dropped
        return scores
