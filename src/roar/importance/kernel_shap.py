"""KernelSHAP: Shapley values of the tokens for the explained class's logit, the mask token as the
absent value, estimated from sampled coalitions by weighted least squares.

Why this measure: Shapley values are what users of attribution libraries (shap, Captum's
``KernelShap``) reach for first, and they complete the picture the paper's measures leave open.
Occlusion asks what one token does with all others present; the gradient family asks about an
infinitesimal change; KernelSHAP averages a token's effect over many contexts in which other
tokens are already masked, which is the situation Recursive ROAR creates step after step. It
needs forward passes only (no backward), so it also runs on models without an embedding path.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import torch

from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS
from roar.importance.base import MeasureContext
from roar.importance.occlusion import candidate_positions, masked_logits, rows_per_pass
from roar.models.batching import Batch


def all_coalitions(players: int) -> tuple[np.ndarray, np.ndarray]:
    """Every coalition but the empty and the full one, ``[2^M - 2, M]`` bool, with its Shapley
    kernel weight ``(M - 1) / (C(M, s) s (M - s))`` for size s."""
    codes = np.arange(1, 2 ** players - 1)
    present = (codes[:, None] >> np.arange(players)[None, :]) & 1 == 1
    sizes = present.sum(1)
    weights = (players - 1) / (np.array([math.comb(players, int(s)) for s in sizes]) * sizes * (players - sizes))
    return present, weights


def sampled_coalitions(players: int, pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``2 * pairs`` coalitions ``[2 pairs, M]`` bool, each drawn with the probability the Shapley
    kernel gives it (size s with probability proportional to ``1 / (s (M - s))``, then a uniform
    subset of that size), and its complement next to it (paired sampling: the estimate's error
    from terms that are odd in the coalition cancels). Equal weights, since the draw carries the kernel."""
    sizes = np.arange(1, players)
    size_p = 1.0 / (sizes * (players - sizes))
    drawn = rng.choice(sizes, size=pairs, p=size_p / size_p.sum())
    ranks = rng.random((pairs, players)).argsort(1).argsort(1)
    present = ranks < drawn[:, None]
    return np.concatenate([present, ~present]), np.ones(2 * pairs)


def constrained_least_squares(present: np.ndarray, weights: np.ndarray, gains: np.ndarray, total: float) -> np.ndarray:
    """``[M]`` phi minimising ``sum_n w_n (gains_n - present_n . phi)^2`` subject to ``sum phi = total``.

    Lagrange: ``phi = P (b - nu 1)`` with ``P`` the pseudo-inverse of ``A = Z^T W Z``, ``b = Z^T W g``
    and ``nu = (1^T P b - total) / (1^T P 1)``; the constraint then holds whatever ``A``'s rank.
    """
    z = present.astype(np.float64)
    a = z.T @ (weights[:, None] * z)
    b = z.T @ (weights * gains)
    inverse = np.linalg.pinv(a, hermitian=True)
    pb, p1 = inverse @ b, inverse.sum(1)
    nu = (pb.sum() - total) / p1.sum()
    return pb - nu * p1


class KernelShapImportance:
    """KernelSHAP values of the first sequence's tokens for the explained class's logit, signed.

    The players of an example are the positions masking may still choose
    (:func:`roar.importance.occlusion.candidate_positions`); every other position (specials,
    padding, tokens masked at an earlier step) keeps its token and scores 0. A coalition keeps
    its players' tokens and replaces the rest by the mask token. With M players:

    - M <= 1: the one player gets ``y(x) - y(all masked)`` (efficiency alone decides);
    - ``2^M - 2 <= samples``: every coalition with its kernel weight: exact Shapley values;
    - otherwise ``samples`` coalitions drawn by the kernel in complementary pairs (Covert & Lee
      2021), solved by least squares under the efficiency constraint
      ``sum_i phi_i = y(x) - y(all masked)``, which holds exactly.

    Each example's coalitions come from a generator seeded by (``seed``, split name, example id), so
    the scores do not depend on the batch an example is in. With fewer samples than players the
    system is underdetermined and the minimum-norm solution is taken: choose ``samples`` above
    the typical number of tokens. Cost: ``samples + 2`` forward passes per example, no backward.

    Args:
        samples: coalitions per example, an even number >= 2.
        max_rows: most sequences per forward pass; None: the device's default
            (:func:`roar.models.device.max_rows_per_pass`, 128 on the CPU).
        seed: seed of the coalition draws.
        mask_id: the dataset's mask token (default: the word vocabulary's).
        unmaskable_ids: the dataset's never-masked ids (default: the word vocabulary's).
    """

    name = "kernel-shap"

    def __init__(self, samples: int = 64, max_rows: int | None = None, seed: int = 0, mask_id: int = MASK_ID,
                 unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS):
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2 or samples % 2:
            raise ValueError(f"kernel-shap samples={samples!r} must be an even integer >= 2 (coalitions come in "
                             "complementary pairs)")
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"kernel-shap max_rows={max_rows!r} must be >= 1 or null")
        self.samples, self.max_rows, self.seed = samples, max_rows, seed
        self.mask_id, self.unmaskable_ids = mask_id, tuple(unmaskable_ids)

    @classmethod
    def from_params(cls, params: dict, context: MeasureContext) -> KernelShapImportance:
        """Options ``samples`` (default 64) and ``max_rows`` (default None); the chain's seed, the
        dataset's mask token and specials."""
        return cls(int(params.get("samples", 64)), params.get("max_rows"), context.seed, context.mask_id,
                   context.unmaskable_ids)

    @staticmethod
    def model_passes(params: dict) -> int:
        """Forward passes per example (roar.launch.plan's cost model): ``samples`` coalitions plus the
        whole and the all-masked input."""
        return int(params.get("samples", 64)) + 2

    def coalitions(self, players: int, example_id: int, split_name: str) -> tuple[np.ndarray, np.ndarray]:
        """``([n, M] bool present, [n] weights)`` of one example with ``players`` players."""
        if players <= 1:
            return np.zeros((0, players), dtype=bool), np.zeros(0)
        if 2 ** players - 2 <= self.samples:
            return all_coalitions(players)
        rng = np.random.default_rng([self.seed, zlib.crc32(split_name.encode()), int(example_id)])
        return sampled_coalitions(players, self.samples // 2, rng)

    def attribute(self, model: torch.nn.Module, batch: Batch, example_ids: np.ndarray, split_name: str) -> torch.Tensor:
        candidates = candidate_positions(batch, self.mask_id, self.unmaskable_ids)
        players = [np.flatnonzero(row) for row in candidates.cpu().numpy()]
        n_rows, width = len(batch.tokens), batch.tokens.shape[1]
        drawn = [self.coalitions(len(p), i, split_name) for p, i in zip(players, example_ids, strict=True)]
        # rows to evaluate: every example whole, every example with all players masked, then the coalitions
        owner = [np.arange(n_rows), np.arange(n_rows)] + [np.full(len(z), b) for b, (z, _) in enumerate(drawn)]
        absent = np.zeros((2 * n_rows + sum(len(z) for z, _ in drawn), width), dtype=bool)
        absent[n_rows:2 * n_rows] = candidates.cpu().numpy()
        start = 2 * n_rows
        for where, (present, _) in zip(players, drawn, strict=True):
            absent[start:start + len(present), where] = ~present
            start += len(present)
        device = batch.tokens.device
        logits = masked_logits(model, batch, torch.from_numpy(np.concatenate(owner)).to(device),
                               torch.from_numpy(absent).to(device), self.mask_id,
                               rows_per_pass(model, batch, self.max_rows)).double().cpu().numpy()
        full, empty = logits[:n_rows], logits[n_rows:2 * n_rows]
        scores = np.zeros((n_rows, width))
        start = 2 * n_rows
        for b, (where, (present, weights)) in enumerate(zip(players, drawn, strict=True)):
            gains = logits[start:start + len(present)] - empty[b]
            start += len(present)
            if len(where) == 1:
                scores[b, where] = full[b] - empty[b]
            elif len(where) > 1:
                scores[b, where] = constrained_least_squares(present, weights, gains, full[b] - empty[b])
        return torch.from_numpy(scores).to(device)
