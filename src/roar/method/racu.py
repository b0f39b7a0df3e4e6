"""RACU (relative area between curves) and intervals of the mean over seeds.

Per seed, :func:`racu_seed` gives both the raw ratio and the value clipped to [-1, 1]; a
study's mean is taken over the *unclipped* per-seed values (clipping each seed before averaging
biases the mean towards 0). :func:`mean_interval` picks a 95 % interval of that mean that is
valid for the number of seeds at hand, and names the method it used:

* 1 value: no interval (low = high = NaN);
* all values equal: the interval collapses to the mean (nothing varies);
* 2 to 9 values: Student-t interval, mean ± t_{0.975, n-1} · s / √n, which assumes roughly
  normal per-seed values (a bootstrap of so few values has too few distinct resamples);
* 10 or more values: BCa bootstrap, 9,999 resamples, fixed RNG; if BCa gives no bounds the
  percentile bootstrap is used instead and named as such.
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple

import numpy as np

BOOTSTRAP_RESAMPLES = 9_999
BOOTSTRAP_SEED = 0
MIN_BOOTSTRAP_VALUES = 10  # below this, the t-interval; a bootstrap of n values has only C(2n-1, n) resamples


class SeedRacu(NamedTuple):
    """RACU of one seed: ``racu`` clipped to [-1, 1] (as the paper prints it), ``unclipped`` the raw ratio."""

    racu: float
    unclipped: float


class MeanInterval(NamedTuple):
    """Mean over seeds, the bounds of its 95 % interval, the number of values and the interval's method."""

    mean: float
    low: float
    high: float
    n: int
    method: str


def _trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


def racu_seed(k: np.ndarray, measure: np.ndarray, random: np.ndarray) -> SeedRacu:
    """RACU of one seed's measure curve against the same seed's random curve, clipped and unclipped.

    ``area(b - p) / area(b - b_I)`` by the trapezoid rule over the masking ratios ``k``, where
    ``b_I`` is the random curve's last point (everything masked). The ratio does not depend on the
    unit of k (percent or tokens). It exceeds 1 when the measure's curve falls below ``b_I`` and
    -1 when it runs far above the random curve; the clipped value is the paper's per-seed RACU.

    Args:
        k: ``[I]`` increasing masking ratios of the curve points.
        measure: ``[I]`` performance p_i of the measure's models.
        random: ``[I]`` performance b_i of the random-masking models.

    Returns:
        ``(racu, unclipped)``; both NaN when the random curve encloses no area (nothing to compare with).
    """
    k, p, b = (np.asarray(a, dtype=np.float64) for a in (k, measure, random))
    if not (k.shape == p.shape == b.shape) or k.ndim != 1 or len(k) < 2:
        raise ValueError(f"RACU needs three equal 1-d curves of >= 2 points, got {k.shape}, {p.shape}, {b.shape}")
    if np.any(np.diff(k) <= 0):
        raise ValueError(f"masking ratios must increase, got {k.tolist()}")
    denominator = _trapezoid(b - b[-1], k)
    if not denominator > 0:
        return SeedRacu(float("nan"), float("nan"))
    unclipped = _trapezoid(b - p, k) / denominator
    return SeedRacu(float(np.clip(unclipped, -1.0, 1.0)), float(unclipped))


def _percent(confidence: float) -> str:
    return f"{100 * confidence:g}%"


def mean_interval(values: np.ndarray, confidence: float = 0.95) -> MeanInterval:
    """Mean of ``values`` (one per seed; NaN ignored) and an interval of the mean valid for their number.

    See the module docstring for the rule. ``method`` names what was done, e.g.
    ``"student-t 95% (df=2)"``, ``"bca bootstrap 95% (9999 resamples)"``, ``"none (1 seed)"``.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    values = values[~np.isnan(values)]
    n = len(values)
    nan = float("nan")
    if n == 0:
        return MeanInterval(nan, nan, nan, 0, "none (no seeds)")
    mean = float(values.mean())
    if n == 1:
        return MeanInterval(mean, nan, nan, 1, "none (1 seed)")
    if np.ptp(values) == 0:
        return MeanInterval(mean, mean, mean, n, f"none (zero spread over {n} seeds: interval = mean)")
    if n < MIN_BOOTSTRAP_VALUES:
        from scipy.stats import t

        half = float(t.ppf(0.5 + confidence / 2, n - 1)) * float(values.std(ddof=1)) / math.sqrt(n)
        return MeanInterval(mean, mean - half, mean + half, n, f"student-t {_percent(confidence)} (df={n - 1})")
    return _bootstrap(values, mean, confidence)


def _bootstrap(values: np.ndarray, mean: float, confidence: float) -> MeanInterval:
    """BCa bootstrap of the mean; the percentile bootstrap (named) when BCa yields no bounds."""
    from scipy.stats import bootstrap

    n = len(values)
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa warns on degenerate samples; NaN bounds are checked below
            try:
                result = bootstrap((values,), np.mean, confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES,
                                   method=method, rng=np.random.default_rng(BOOTSTRAP_SEED))
            except (ValueError, FloatingPointError):
                continue
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
        if math.isfinite(low) and math.isfinite(high):
            name = f"{method.lower()} bootstrap {_percent(confidence)} ({BOOTSTRAP_RESAMPLES} resamples)"
            if method != "BCa":
                name = name[:-1] + "; BCa gave no bounds)"
            return MeanInterval(mean, low, high, n, name)
    raise ValueError(f"no bootstrap interval for {n} values {values.tolist()}")
