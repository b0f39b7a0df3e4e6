"""RACU on hand-computed trapezoid areas, and the bootstrap mean/CI over seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roar.racu import mean_ci, racu


def test_hand_computed_half():
    # area(b - p) over [0,50,100]: b-p = [0, .5, 0] -> (0+.5)/2*50 + (.5+0)/2*50 = 25
    # area(b - b_I): b - 0 = [1, .5, 0] -> (1+.5)/2*50 + (.5+0)/2*50 = 50   => 0.5
    assert racu([0, 50, 100], [1, 0, 0], [1, 0.5, 0]) == pytest.approx(0.5)


def test_hand_computed_uneven_spacing():
    # k = [0, 10, 40]; b = [0.9, 0.7, 0.3]; p = [0.9, 0.5, 0.3]
    # b - p = [0, .2, 0] -> .1*10 + .1*30 = 4
    # b - b_I = [.6, .4, 0] -> .5*10 + .2*30 = 11 => 4/11
    assert racu([0, 10, 40], [0.9, 0.5, 0.3], [0.9, 0.7, 0.3]) == pytest.approx(4 / 11)


def test_perfect_curve_is_one():
    # the measure drops to the all-masked level right after k=0
    k = np.arange(0, 101, 10)
    b = np.linspace(0.9, 0.5, 11)
    p = np.full(11, 0.5)
    p[0] = 0.9
    # b - b_I = [.4, .36, ..., .04, 0] -> 10 * (.4/2 + (.36 + ... + .04)) = 10 * (.2 + 1.8) = 20
    # b - p   = [0,  .36, ..., .04, 0] -> 10 * 1.8 = 18   => 0.9 (the k=0 point cannot differ)
    assert racu(k, p, b) == pytest.approx(0.9)
    # a curve at the all-masked level everywhere (even at k=0) encloses exactly the random area
    assert racu(k, np.full(11, 0.5), b) == pytest.approx(1.0)


def test_clip_at_plus_and_minus_one():
    k = [0, 50, 100]
    b = [1.0, 0.9, 0.8]  # area(b - b_I) = (.2+.1)/2*50 + .1/2*50 = 10
    # p far below b: area(b - p) = (0 + .8)/2*50 + (.8+.8)/2*50 = 60 -> 6 -> clipped to 1
    assert racu(k, [1.0, 0.1, 0.0], b) == 1.0
    # p far above b: area = -(.2+ ...) -> strongly negative, clipped to -1
    assert racu(k, [1.0, 1.9, 1.8], b) == -1.0


def test_worse_than_random_is_negative():
    k = [0, 50, 100]
    b = [1.0, 0.5, 0.0]  # denominator 50
    # p above b in the middle: b - p = [0, -.2, 0] -> area -10 -> -0.2
    assert racu(k, [1.0, 0.7, 0.0], b) == pytest.approx(-0.2)


def test_unit_invariance_percent_vs_tokens():
    p = [0.9, 0.6, 0.55, 0.5, 0.5]
    b = [0.9, 0.8, 0.7, 0.6, 0.5]
    tokens = [0, 1, 2, 3, 4]
    percent = [0, 25, 50, 75, 100]
    # by hand: b-p = [0,.2,.15,.1,0] -> (.1+.175+.125+.05) = .45 ; b-b_I = [.4,.3,.2,.1,0] -> .35+.25+.15+.05 = .8
    assert racu(tokens, p, b) == pytest.approx(0.45 / 0.8)
    assert racu(percent, p, b) == pytest.approx(racu(tokens, p, b))


def test_flat_random_curve_is_nan():
    assert math.isnan(racu([0, 50, 100], [1.0, 0.2, 0.5], [0.5, 0.5, 0.5]))
    # a random curve that ends higher than it runs also encloses no positive area
    assert math.isnan(racu([0, 50, 100], [1.0, 0.2, 0.5], [0.4, 0.4, 0.6]))


@pytest.mark.parametrize("k, p, b", [
    ([0, 50, 100], [1, 0], [1, 0.5, 0]),            # unequal lengths
    ([0], [1], [1]),                                # one point
    ([[0, 1]], [[1, 0]], [[1, 0]]),                 # 2-d
    ([0, 50, 50], [1, 0.5, 0], [1, 0.5, 0]),        # not increasing
    ([0, 100, 50], [1, 0.5, 0], [1, 0.5, 0]),       # decreasing
])
def test_bad_shapes_raise(k, p, b):
    with pytest.raises(ValueError):
        racu(k, p, b)


def test_mean_ci_mean_and_interval():
    values = np.array([0.1, 0.3, 0.2, 0.5, 0.4, 0.35, 0.15])
    result = mean_ci(values)
    assert result.mean == pytest.approx(values.mean())
    assert result.n == 7
    assert result.low < result.mean < result.high
    assert values.min() <= result.low and result.high <= values.max()
    # a 95 % interval of the mean is narrower than the data range but not degenerate
    assert 0 < result.high - result.low < np.ptp(values)


def test_mean_ci_is_deterministic():
    values = np.array([0.61, 0.42, 0.55, 0.7, 0.38])
    first, second = mean_ci(values), mean_ci(values.copy())
    assert first == second


def test_mean_ci_single_value_and_constant_values_collapse():
    assert tuple(mean_ci(np.array([0.25]))) == (0.25, 0.25, 0.25, 1)
    mean, low, high, n = mean_ci(np.array([0.4, 0.4, 0.4]))
    assert n == 3 and mean == pytest.approx(0.4) and low == mean and high == mean


def test_mean_ci_ignores_nan_and_handles_empty():
    result = mean_ci(np.array([0.2, np.nan, 0.4]))
    assert result.n == 2 and result.mean == pytest.approx(0.3)
    empty = mean_ci(np.array([np.nan]))
    assert empty.n == 0 and math.isnan(empty.mean)
