"""RACU on hand-computed trapezoid areas (clipped and unclipped), and the interval of the mean over seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roar.method.racu import BOOTSTRAP_RESAMPLES, mean_interval, racu_seed


def racu(k, measure, random) -> float:
    """The clipped RACU of one seed."""
    return racu_seed(k, measure, random).racu


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


def test_unclipped_above_one_when_the_measure_falls_below_the_random_end_point():
    k = [0, 50, 100]
    b = [1.0, 0.9, 0.8]  # b - b_I = [.2, .1, 0] -> (.2+.1)/2*50 + (.1+0)/2*50 = 7.5 + 2.5 = 10
    p = [1.0, 0.7, 0.7]  # 0.7 < b_I = 0.8; b - p = [0, .2, .1] -> (0+.2)/2*50 + (.2+.1)/2*50 = 5 + 7.5 = 12.5
    value = racu_seed(k, p, b)
    assert value.unclipped == pytest.approx(1.25)
    assert value.racu == 1.0
    # inside [-1, 1] both agree
    both = racu_seed([0, 50, 100], [1, 0, 0], [1, 0.5, 0])
    assert both.racu == both.unclipped == pytest.approx(0.5)
    # far above the random curve: unclipped -> (0 - .9)/2*50 + (-.9 - 1)/2*50 = -22.5 - 47.5 = -70 -> -7
    assert racu_seed(k, [1.0, 1.8, 1.8], b) == pytest.approx((-1.0, -7.0))
    assert all(math.isnan(v) for v in racu_seed([0, 50, 100], [1.0, 0.2, 0.5], [0.5, 0.5, 0.5]))


def test_t_interval_by_hand():
    # mean .3; deviations -.2, -.1, .3 -> s^2 = (.04 + .01 + .09) / 2 = .07; s/sqrt(3) = sqrt(.07/3)
    # t_{0.975, 2} = 4.302653 -> half width 4.302653 * 0.1527525 = 0.6572411
    result = mean_interval(np.array([0.1, 0.2, 0.6]))
    half = 4.302653 * math.sqrt(0.07 / 3)
    assert result.mean == pytest.approx(0.3)
    assert result.low == pytest.approx(0.3 - half, abs=1e-6) and result.high == pytest.approx(0.3 + half, abs=1e-6)
    assert result.low == pytest.approx(-0.357241, abs=1e-6) and result.high == pytest.approx(0.957241, abs=1e-6)
    assert result.n == 3 and result.method == "student-t 95% (df=2)"


def test_t_interval_two_values():
    # [.4, .6]: s = sqrt(.02) = .141421; t_{0.975, 1} = 12.706205 -> half 12.706205 * .141421 / sqrt(2) = 1.2706205
    result = mean_interval(np.array([0.4, 0.6]))
    assert (result.low, result.high) == pytest.approx((0.5 - 1.2706205, 0.5 + 1.2706205), abs=1e-6)
    assert result.method == "student-t 95% (df=1)"


def test_bca_from_ten_values_deterministic():
    values = np.array([0.1, 0.3, 0.2, 0.5, 0.4, 0.35, 0.15, 0.6, 0.25, 0.45])
    result = mean_interval(values)
    assert result.method == f"bca bootstrap 95% ({BOOTSTRAP_RESAMPLES} resamples)" and result.n == 10
    assert result.mean == pytest.approx(values.mean())
    assert values.min() < result.low < result.mean < result.high < values.max()
    assert mean_interval(values.copy()) == result
    # nine values are still a t-interval
    assert mean_interval(values[:9]).method == "student-t 95% (df=8)"


def test_percentile_bootstrap_when_bca_fails(monkeypatch):
    import scipy.stats

    real = scipy.stats.bootstrap

    def bca_fails(*args, method, **kwargs):
        result = real(*args, method=method, **kwargs)
        if method == "BCa":
            result.confidence_interval = type(result.confidence_interval)(float("nan"), float("nan"))
        return result

    monkeypatch.setattr(scipy.stats, "bootstrap", bca_fails)
    values = np.linspace(0.1, 0.9, 12)
    result = mean_interval(values)
    assert result.method == f"percentile bootstrap 95% ({BOOTSTRAP_RESAMPLES} resamples; BCa gave no bounds)"
    assert values.min() < result.low < result.mean < result.high < values.max()
    assert (result.low, result.high) != (values.min(), values.max())  # no min/max fallback


def test_one_value_has_no_interval():
    result = mean_interval(np.array([0.25]))
    assert result.mean == 0.25 and result.n == 1 and result.method == "none (1 seed)"
    assert math.isnan(result.low) and math.isnan(result.high)


def test_zero_spread_collapses_and_says_so():
    result = mean_interval(np.array([0.4, 0.4, 0.4]))
    assert result.n == 3 and result.mean == pytest.approx(0.4) and result.low == result.mean == result.high
    assert result.method == "none (zero spread over 3 seeds: interval = mean)"


def test_mean_interval_ignores_nan_and_handles_empty():
    result = mean_interval(np.array([0.2, np.nan, 0.4]))
    assert result.n == 2 and result.mean == pytest.approx(0.3) and result.method == "student-t 95% (df=1)"
    empty = mean_interval(np.array([np.nan]))
    assert empty.n == 0 and math.isnan(empty.mean) and empty.method == "none (no seeds)"
