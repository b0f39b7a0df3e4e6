"""Masked fine-tuning (``train.<model>.<dataset>.mask_augment``): random masking of training batches.

In the spirit of Madsen et al. (2023), "Faithfulness measurable masked language models": a model
trained on inputs with a random share of their tokens masked sees masked inputs in distribution,
so its score on masked test data (the no-retrain curve) measures the importance measure rather
than the distribution shift. Only the first sequence is masked (as ROAR masks it), never padding
or special tokens (:func:`roar.data.tokenize.maskable_positions`' rule, which masking follows); the draws come from a torch
generator seeded by the training seed, so the same seed gives the same masks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from roar.models.batching import Batch


def random_mask(tokens: torch.Tensor, lengths: torch.Tensor, p_max: float, share: float,
                generator: torch.Generator, mask_id: int, unmaskable_ids: tuple[int, ...]) -> torch.Tensor:
    """``tokens`` with random maskable positions replaced by ``mask_id`` (a new tensor).

    Each row is augmented with probability ``share``; an augmented row draws p ~ U(0, p_max) and masks
    each maskable position (inside ``lengths``, not an ``unmaskable_ids`` token) with probability p.
    Draws three tensors from ``generator`` per call whatever the values, so the stream stays aligned.
    """
    rows, width = tokens.shape
    inside = torch.arange(width)[None, :] < lengths[:, None]
    maskable = inside & ~torch.isin(tokens, torch.tensor(unmaskable_ids, dtype=tokens.dtype))
    p = torch.rand(rows, generator=generator, dtype=torch.float64) * p_max
    augmented = torch.rand(rows, generator=generator, dtype=torch.float64) < share
    draws = torch.rand(rows, width, generator=generator, dtype=torch.float64)
    hit = maskable & augmented[:, None] & (draws < p[:, None])
    return torch.where(hit, torch.tensor(mask_id, dtype=tokens.dtype), tokens)


def masking_collate(collate: Callable[[list[int]], Batch], setting: dict, seed: int, mask_id: int,
                    unmaskable_ids: tuple[int, ...]) -> Callable[[list[int]], Batch]:
    """A DataLoader ``collate_fn``: ``collate``'s batch with its first sequence randomly masked
    (:func:`random_mask` with ``setting`` = ``{p_max, share}``) from a generator seeded by ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    p_max, share = float(setting["p_max"]), float(setting.get("share", 1.0))

    def masked(rows: list[int]) -> Batch:
        batch = collate(rows)
        return batch._replace(tokens=random_mask(batch.tokens, batch.lengths, p_max, share, generator, mask_id,
                                                 unmaskable_ids))
    return masked
