"""Masking of the first sequence by importance, and one (Recursive) ROAR step.

Rules: only the first sequence is masked; special tokens are never masked;
already-masked tokens stay masked and count towards k; ``quantile`` masks
``floor(k/100 * maskable)`` tokens, ``count`` masks ``min(k, maskable)``; masked tokens are
replaced by the mask id (length kept); ties go to the earlier position (stable sort).

``study.masking_count: official`` counts as the official code does (nlp-roar-interpretability,
``nlproar/dataset/roar.py``, ``ROARDataset._mask_dataset``): ``quantile`` masks
``int(float32(k/100) * maskable)`` tokens, the product rounded to float32 and truncated, over the
maskable tokens including those already masked (as roar's count). It differs from the exact floor
for some k and lengths (k = 53, 100 maskable tokens: 52 instead of 53), never for k = 10, 20, ..., 90
at up to 20,000 maskable tokens. The official code then picks the tokens by ``torch.topk``, whose
order among equal scores is unspecified; ties here still go to the earlier position.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from roar.data.storage import Split, read_dataset, write_dataset
from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS, maskable_positions  # noqa: F401 (masking's rule, kept in the data layer)
from roar.config.catalog import MASKING_COUNTS, strategy_spec

# Each strategy's rule (its other facts: roar.config.catalog.STRATEGY_SPECS): ``[N]`` tokens to mask
# at k, given each example's ``[N]`` maskable tokens.
MASKING_RULES: dict[str, Callable[[np.ndarray, int], np.ndarray]] = {
    "quantile": lambda n_maskable, k: (k * n_maskable) // 100,  # integer arithmetic: exact floor
    "count": lambda n_maskable, k: np.minimum(k, n_maskable),
}
# The rules of each ``study.masking_count`` (roar.config.catalog.MASKING_COUNTS): the official code's
# quantile count is computed in float32 and truncated; its count rule is roar's.
COUNT_RULES: dict[str, dict[str, Callable[[np.ndarray, int], np.ndarray]]] = {
    "roar": MASKING_RULES,
    "official": {**MASKING_RULES, "quantile": lambda n_maskable, k: (
        np.float32(k / 100) * n_maskable.astype(np.float32)).astype(np.int64)},
}


def check_k(k: int, strategy: str) -> None:
    """Raise a one-line error for a k that ``strategy`` does not allow."""
    spec = strategy_spec(strategy)
    if k < 0 or (spec.end_k is not None and k > spec.end_k):
        span = f"0..{spec.end_k}" if spec.end_k is not None else ">= 0"
        raise ValueError(f"k={k!r} is outside {span}, the {spec.unit} that the {strategy} strategy masks")


def target_masked(n_maskable: np.ndarray, k: int, strategy: str, masking_count: str = MASKING_COUNTS[0]) -> np.ndarray:
    """``[N]`` number of tokens that should be masked at ``k``, by the rule of ``masking_count``."""
    check_k(k, strategy)
    if masking_count not in COUNT_RULES:
        raise ValueError(f"masking_count={masking_count!r} unknown; allowed: {', '.join(COUNT_RULES)}")
    return COUNT_RULES[masking_count][strategy](n_maskable, k)


def check_finite(importance: np.ndarray, candidates: np.ndarray, measure: str = "") -> None:
    """Refuse NaN or +-inf importance at the positions that may be masked (NaN would sort below
    -inf and silently under-mask); values elsewhere (padding, specials) are ignored."""
    bad = candidates & ~np.isfinite(importance)
    if not bad.any():
        return
    n_nan = int((candidates & np.isnan(importance)).sum())
    rows, cols = np.nonzero(bad)
    who = f"importance measure {measure!r}" if measure else "the importance measure"
    raise ValueError(f"{who} produced {int(bad.sum())} non-finite value(s) ({n_nan} NaN, {int(bad.sum()) - n_nan} "
                     f"inf) at maskable positions of {len(set(rows.tolist()))} example(s) (first: row {rows[0]}, "
                     f"position {cols[0]}); masking by them would be arbitrary: check the model it explains "
                     "(diverged training?) and the measure")


def mask_top_k(tokens: np.ndarray, lengths: np.ndarray, importance: np.ndarray, k: int, strategy: str,
               mask_id: int = MASK_ID, unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS,
               measure: str = "", masking_count: str = MASKING_COUNTS[0]) -> np.ndarray:
    """Mask the most important unmasked tokens until ``k`` is reached.

    Args:
        tokens: ``[N, L]`` first-sequence ids (may already hold mask ids).
        lengths: ``[N]`` sequence lengths.
        importance: ``[N, L]`` scores, higher = more important (values off the candidates ignored).
        k: percent (quantile) or tokens (count).
        strategy: ``quantile`` or ``count``.
        measure: the measure's name, for the error message.
        masking_count: the counting rule (:data:`COUNT_RULES`): ``roar`` or ``official``.

    Returns:
        ``[N, L]`` new ids; the input is not modified.

    Raises:
        ValueError: ``importance`` holds NaN or +-inf at a position that may be masked.
    """
    if importance.shape != tokens.shape:
        raise ValueError(f"importance shape {importance.shape} differs from tokens shape {tokens.shape}")
    maskable = maskable_positions(tokens, lengths, unmaskable_ids)
    already = maskable & (tokens == mask_id)
    to_mask = np.maximum(target_masked(maskable.sum(1), k, strategy, masking_count) - already.sum(1), 0)
    candidates = maskable & ~already
    importance = np.asarray(importance, dtype=np.float64)
    check_finite(importance, candidates, measure)
    scores = np.where(candidates, importance, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")  # descending, earlier position first on ties
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(tokens.shape[1])[None, :].repeat(len(tokens), 0), axis=1)
    chosen = candidates & (rank < to_mask[:, None])
    return np.where(chosen, mask_id, tokens)


def mask_split(split: Split, importance: np.ndarray, k: int, strategy: str, mask_id: int = MASK_ID,
               unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS, measure: str = "",
               masking_count: str = MASKING_COUNTS[0]) -> Split:
    """The split with its first sequence masked up to ``k`` by ``importance``."""
    return split.with_tokens(mask_top_k(split.tokens, split.lengths, importance, k, strategy, mask_id, unmaskable_ids,
                                        measure, masking_count))


def masked_fraction(split: Split, mask_id: int = MASK_ID, unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS) -> float:
    """Share of maskable tokens that are masked (a sanity figure logged per step)."""
    maskable = maskable_positions(split.tokens, split.lengths, unmaskable_ids)
    return float((maskable & (split.tokens == mask_id)).sum() / max(maskable.sum(), 1))


def mask_all(split: Split, mask_id: int = MASK_ID, unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS) -> Split:
    """The split with every maskable first-sequence token masked (the k = 100 point)."""
    return mask_split(split, np.zeros(split.tokens.shape), 100, "quantile", mask_id, unmaskable_ids)


def write_all_masked(prepared: Path, out: Path) -> None:
    """The k = 100 dataset: every maskable first-sequence token masked (measure-independent)."""
    meta, splits = read_dataset(prepared)
    masked = {name: mask_all(split, meta.mask_id, meta.unmaskable_ids) for name, split in splits.items()}
    write_dataset(out, meta, (prepared / "vocab.json").read_text(), masked)

