"""RACU (relative area between curves) and confidence intervals over seeds (DESIGN §2)."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

BOOTSTRAP_RESAMPLES = 9_999
BOOTSTRAP_SEED = 0


class MeanCI(NamedTuple):
    """Mean over seeds and the 95 % bootstrap (BCa) interval of the mean."""

    mean: float
    low: float
    high: float
    n: int


def _trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


def racu(k: np.ndarray, measure: np.ndarray, random: np.ndarray) -> float:
    """RACU of one seed's measure curve against the same seed's random curve.

    ``area(b - p) / area(b - b_I)`` by the trapezoid rule over the masking ratios ``k``, where
    ``b_I`` is the random curve's last point (everything masked), clipped to [-1, 1]. The ratio
    does not depend on the unit of k (percent or tokens).

    Args:
        k: ``[I]`` increasing masking ratios of the curve points.
        measure: ``[I]`` performance p_i of the measure's models.
        random: ``[I]`` performance b_i of the random-masking models.

    Returns:
        RACU in [-1, 1]: 1 as faithful as possible, 0 no better than random; NaN when the random
        curve encloses no area (nothing to compare with).
    """
    k, p, b = (np.asarray(a, dtype=np.float64) for a in (k, measure, random))
    if not (k.shape == p.shape == b.shape) or k.ndim != 1 or len(k) < 2:
        raise ValueError(f"RACU needs three equal 1-d curves of >= 2 points, got {k.shape}, {p.shape}, {b.shape}")
    if np.any(np.diff(k) <= 0):
        raise ValueError(f"masking ratios must increase, got {k.tolist()}")
    denominator = _trapezoid(b - b[-1], k)
    if denominator <= 0:
        return float("nan")
    return float(np.clip(_trapezoid(b - p, k) / denominator, -1.0, 1.0))


def mean_ci(values: np.ndarray, confidence: float = 0.95) -> MeanCI:
    """Mean of ``values`` (one per seed) with a BCa bootstrap CI of the mean.

    9,999 resamples with a fixed RNG, so the same values give the same interval. With fewer
    than two distinct values the interval collapses to the mean (nothing to resample).
    """
    from scipy.stats import bootstrap

    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    n = len(values)
    if n == 0:
        return MeanCI(float("nan"), float("nan"), float("nan"), 0)
    mean = float(values.mean())
    if n < 2 or np.ptp(values) == 0:
        return MeanCI(mean, mean, mean, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BCa warns on tiny samples; NaN bounds are handled below
        result = bootstrap((values,), np.mean, confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES,
                           method="BCa", rng=np.random.default_rng(BOOTSTRAP_SEED))
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if np.isnan(low) or np.isnan(high):
        low, high = float(values.min()), float(values.max())
    return MeanCI(mean, low, high, n)
