"""mask_top_k: hand-computed cases of the masking rules (roar.method.masking's docstring)."""

from __future__ import annotations

import numpy as np
import pytest

from roar.data.tokenize import END_ID, MASK_ID, PAD_ID, START_ID
from roar.method.masking import mask_top_k, masked_fraction, mask_split, target_masked
from roar.data.storage import Split

M, S, E, P = MASK_ID, START_ID, END_ID, PAD_ID


def test_quantile_floor_of_maskable_tokens():
    # 8 maskable tokens (ids 10..17) between START and END, then padding.
    tokens = np.array([[S, 10, 11, 12, 13, 14, 15, 16, 17, E, P, P]])
    lengths = np.array([10])
    importance = np.array([[9.0, 0.1, 0.8, 0.3, 0.9, 0.2, 0.7, 0.4, 0.6, 9.0, 9.0, 9.0]])
    # floor(30/100 * 8) = floor(2.4) = 2 -> the two best maskable: 0.9 (pos 4) and 0.8 (pos 2).
    out = mask_top_k(tokens, lengths, importance, 30, "quantile")
    np.testing.assert_array_equal(out, [[S, 10, M, 12, M, 14, 15, 16, 17, E, P, P]])
    # floor(0.49 * 8) = floor(3.92) = 3 -> adds 0.7 (pos 6).
    out = mask_top_k(tokens, lengths, importance, 49, "quantile")
    np.testing.assert_array_equal(out, [[S, 10, M, 12, M, 14, M, 16, 17, E, P, P]])
    # floor(0.12 * 8) = 0 -> nothing.
    np.testing.assert_array_equal(mask_top_k(tokens, lengths, importance, 12, "quantile"), tokens)
    # 100 % -> all 8 maskable, specials and padding untouched.
    out = mask_top_k(tokens, lengths, importance, 100, "quantile")
    np.testing.assert_array_equal(out, [[S, M, M, M, M, M, M, M, M, E, P, P]])


def test_quantile_per_row_counts():
    tokens = np.array([[S, 10, 11, 12, E, P, P],
                       [S, 10, 11, 12, 13, 14, E]])
    lengths = np.array([5, 7])
    importance = np.array([[0, 1, 3, 2, 0, 0, 0],
                           [0, 5, 4, 3, 2, 1, 0]], dtype=float)
    # row 0: floor(0.5*3)=1; row 1: floor(0.5*5)=2
    out = mask_top_k(tokens, lengths, importance, 50, "quantile")
    np.testing.assert_array_equal(out, [[S, 10, M, 12, E, P, P],
                                        [S, M, M, 12, 13, 14, E]])
    np.testing.assert_array_equal(target_masked(np.array([3, 5, 7, 199]), 50, "quantile"), [1, 2, 3, 99])


def test_count_strategy_is_min_k_maskable():
    tokens = np.array([[S, 10, 11, 12, E, P],
                       [S, 10, E, P, P, P]])
    lengths = np.array([5, 3])
    importance = np.array([[0, 0.5, 0.2, 0.9, 0, 0],
                           [0, 0.3, 0, 0, 0, 0]])
    out = mask_top_k(tokens, lengths, importance, 2, "count")
    # row 0: 2 tokens: 0.9 (pos 3), 0.5 (pos 1); row 1: min(2, 1) = 1
    np.testing.assert_array_equal(out, [[S, M, 11, M, E, P],
                                        [S, M, E, P, P, P]])
    out = mask_top_k(tokens, lengths, importance, 1, "count")
    np.testing.assert_array_equal(out, [[S, 10, 11, M, E, P],
                                        [S, M, E, P, P, P]])
    out = mask_top_k(tokens, lengths, importance, 0, "count")
    np.testing.assert_array_equal(out, tokens)
    np.testing.assert_array_equal(target_masked(np.array([3, 1, 0]), 2, "count"), [2, 1, 0])


def test_ties_go_to_the_earlier_position():
    tokens = np.array([[10, 11, 12, 13, 14, 15]])
    lengths = np.array([6])
    importance = np.array([[0.5, 0.7, 0.7, 0.5, 0.7, 0.5]])
    out = mask_top_k(tokens, lengths, importance, 2, "count")
    np.testing.assert_array_equal(out, [[10, M, M, 13, 14, 15]])
    out = mask_top_k(tokens, lengths, importance, 4, "count")
    np.testing.assert_array_equal(out, [[M, M, M, 13, M, 15]])
    # all equal: the first ones
    out = mask_top_k(tokens, lengths, np.zeros((1, 6)), 3, "count")
    np.testing.assert_array_equal(out, [[M, M, M, 13, 14, 15]])


def test_special_tokens_and_padding_never_masked_even_if_most_important():
    # special tokens sit inside the length too (START/END), padding beyond it
    tokens = np.array([[S, 10, E, 11, S, 12, E, P, P]])
    lengths = np.array([7])
    importance = np.array([[100, 1, 100, 2, 100, 3, 100, 100, 100]], dtype=float)
    out = mask_top_k(tokens, lengths, importance, 100, "count")
    np.testing.assert_array_equal(out, [[S, M, E, M, S, M, E, P, P]])
    out = mask_top_k(tokens, lengths, importance, 1, "count")
    np.testing.assert_array_equal(out, [[S, 10, E, 11, S, M, E, P, P]])
    # a non-special id beyond the length is padding too
    tokens = np.array([[10, 11, 12, 13]])
    out = mask_top_k(tokens, np.array([2]), np.array([[0.0, 0.1, 5.0, 6.0]]), 4, "count")
    np.testing.assert_array_equal(out, [[M, M, 12, 13]])


def test_already_masked_tokens_stay_and_count_towards_k():
    tokens = np.array([[S, M, 11, 12, M, 14, E]])
    lengths = np.array([7])
    # already-masked positions have low importance: they are still kept masked
    importance = np.array([[0, 0.0, 0.3, 0.9, 0.0, 0.5, 0]])
    # count 3: 2 already masked -> one more (0.9 at pos 3)
    out = mask_top_k(tokens, lengths, importance, 3, "count")
    np.testing.assert_array_equal(out, [[S, M, 11, M, M, 14, E]])
    # count 1 < already masked: nothing is unmasked, nothing added
    out = mask_top_k(tokens, lengths, importance, 1, "count")
    np.testing.assert_array_equal(out, tokens)
    # quantile: 5 maskable (masks count as maskable); floor(0.8*5) = 4 -> 2 more (0.9, 0.5)
    out = mask_top_k(tokens, lengths, importance, 80, "quantile")
    np.testing.assert_array_equal(out, [[S, M, 11, M, M, M, E]])
    # a masked token with the highest importance is not "re-masked" in place of a new one
    importance = np.array([[0, 9.0, 0.3, 0.1, 9.0, 0.5, 0]])
    out = mask_top_k(tokens, lengths, importance, 3, "count")
    np.testing.assert_array_equal(out, [[S, M, 11, 12, M, M, E]])


def test_input_not_modified():
    tokens = np.array([[S, 10, 11, 12, E]])
    lengths = np.array([5])
    importance = np.array([[0, 0.3, 0.2, 0.1, 0]])
    tokens_before, importance_before = tokens.copy(), importance.copy()
    out = mask_top_k(tokens, lengths, importance, 2, "count")
    np.testing.assert_array_equal(tokens, tokens_before)
    np.testing.assert_array_equal(importance, importance_before)
    assert out is not tokens
    assert (out != tokens).sum() == 2


def test_mask_split_and_masked_fraction():
    split = Split.from_lists([[S, 10, 11, 12, E], [S, 10, E]], [0, 1], index=[7, 3])
    importance = np.array([[0, 0.1, 0.3, 0.2, 0], [0, 1.0, 0, 0, 0]])
    masked = mask_split(split, importance, 1, "count")
    np.testing.assert_array_equal(masked.tokens, [[S, 10, M, 12, E], [S, M, E, P, P]])
    np.testing.assert_array_equal(masked.index, [7, 3])
    np.testing.assert_array_equal(masked.labels, split.labels)
    assert masked_fraction(split) == 0.0
    assert masked_fraction(masked) == pytest.approx(2 / 4)


@pytest.mark.parametrize("k, strategy", [(-1, "quantile"), (101, "quantile"), (-3, "count")])
def test_bad_k_raises_with_value(k, strategy):
    tokens = np.array([[10, 11]])
    with pytest.raises(ValueError, match=f"k={k}"):
        mask_top_k(tokens, np.array([2]), np.zeros((1, 2)), k, strategy)


def test_bad_strategy_raises_with_value():
    tokens = np.array([[10, 11]])
    with pytest.raises(ValueError, match="'percentile'"):
        mask_top_k(tokens, np.array([2]), np.zeros((1, 2)), 1, "percentile")


def test_importance_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        mask_top_k(np.array([[10, 11]]), np.array([2]), np.zeros((1, 3)), 1, "count")


# Property tests: many seeded random cases (scores with ties, rows of every length) instead of a few
# hand-picked ones; each failure names its case.

def random_rows(rng: np.random.Generator, n: int = 12, width: int = 14) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows ``START w.. END PAD..`` with 0..width-2 words (ids >= 10) and their lengths."""
    tokens = np.full((n, width), P)
    lengths = np.zeros(n, dtype=np.int64)
    for row in range(n):
        words = rng.integers(10, 50, size=int(rng.integers(0, width - 1)))
        sequence = [S, *words, E]
        tokens[row, : len(sequence)] = sequence
        lengths[row] = len(sequence)
    return tokens, lengths


def masked_positions(tokens: np.ndarray) -> np.ndarray:
    return tokens == M


@pytest.mark.parametrize("strategy", ["quantile", "count"])
def test_masks_are_nested_in_k_for_the_same_scores(strategy):
    """With the same importance, masking at k2 > k1 keeps every token masked at k1, and masking the
    k1-masked rows further to k2 gives exactly the rows masked at k2 from scratch."""
    rng = np.random.default_rng(0)
    ks = [0, 1, 10, 25, 33, 50, 67, 90, 99, 100] if strategy == "quantile" else [0, 1, 2, 3, 5, 8, 13]
    for case in range(40):
        tokens, lengths = random_rows(rng)
        importance = rng.integers(0, 4, size=tokens.shape).astype(float)  # few values: many ties
        for k1, k2 in zip(ks, ks[1:]):
            at_k1 = mask_top_k(tokens, lengths, importance, k1, strategy)
            at_k2 = mask_top_k(tokens, lengths, importance, k2, strategy)
            lost = masked_positions(at_k1) & ~masked_positions(at_k2)
            assert not lost.any(), f"case {case}: k={k1} masks {np.argwhere(lost).tolist()} that k={k2} unmasks"
            np.testing.assert_array_equal(mask_top_k(at_k1, lengths, importance, k2, strategy), at_k2,
                                          err_msg=f"case {case}: k={k1} then k={k2}")


@pytest.mark.parametrize("strategy", ["quantile", "count"])
def test_recursive_chain_masked_set_only_grows(strategy):
    """Recursive ROAR: each step masks the previous step's output by new scores (a new model). The
    masked set only grows, each row reaches exactly its target count, and specials and padding
    are never masked."""
    rng = np.random.default_rng(1)
    steps = [10, 20, 40, 60, 80, 90, 100] if strategy == "quantile" else [1, 2, 4, 7, 11]
    for case in range(40):
        tokens, lengths = random_rows(rng)
        maskable = (np.arange(tokens.shape[1])[None, :] < lengths[:, None]) & (tokens != S) & (tokens != E)
        current = tokens
        for k in steps:
            importance = rng.normal(size=tokens.shape)
            following = mask_top_k(current, lengths, importance, k, strategy)
            assert not (masked_positions(current) & ~masked_positions(following)).any(), f"case {case}, k={k}"
            assert not (masked_positions(following) & ~maskable).any(), f"case {case}, k={k}: special masked"
            np.testing.assert_array_equal(masked_positions(following).sum(1),
                                          target_masked(maskable.sum(1), k, strategy), err_msg=f"case {case}, k={k}")
            np.testing.assert_array_equal(np.where(masked_positions(following), tokens, following), tokens)
            current = following


def test_quantile_exact_counts_per_example():
    """floor(k * n / 100) masked tokens per example, n its maskable tokens (hand-computed)."""
    n_maskable = [0, 1, 3, 7, 10]
    tokens = np.full((len(n_maskable), 12), P)
    for row, n in enumerate(n_maskable):
        tokens[row, : n + 2] = [S, *range(10, 10 + n), E]
    lengths = np.array(n_maskable) + 2
    importance = np.random.default_rng(2).normal(size=tokens.shape)
    expected = {  # k -> masked tokens of the rows with 0, 1, 3, 7, 10 maskable tokens
        0: [0, 0, 0, 0, 0],
        10: [0, 0, 0, 0, 1],    # 0.1, 0.3, 0.7, 1.0
        15: [0, 0, 0, 1, 1],    # 0.15, 0.45, 1.05, 1.5
        33: [0, 0, 0, 2, 3],    # 0.33, 0.99, 2.31, 3.3
        34: [0, 0, 1, 2, 3],    # 1.02, 2.38, 3.4
        50: [0, 0, 1, 3, 5],    # 0.5, 1.5, 3.5, 5
        66: [0, 0, 1, 4, 6],    # 0.66, 1.98, 4.62, 6.6
        67: [0, 0, 2, 4, 6],    # 2.01, 4.69, 6.7
        99: [0, 0, 2, 6, 9],    # 0.99, 2.97, 6.93, 9.9
        100: [0, 1, 3, 7, 10],
    }
    for k, counts in expected.items():
        out = mask_top_k(tokens, lengths, importance, k, "quantile")
        assert (out == M).sum(1).tolist() == counts, f"k={k}"
        assert target_masked(np.array(n_maskable), k, "quantile").tolist() == counts, f"k={k}"


def test_official_count_is_float32_quantile_truncated():
    """``study.masking_count: official`` counts int(float32(k/100) * float32(n)), as the official code's
    ``(torch.tensor(k / 100) * n).int()``."""
    n = np.array([10, 100, 100, 300, 8])
    # k = 30: float32(0.3) = 0.30000001192..., times 10 rounds to 3.0 in float32 -> 3 (roar: 3)
    np.testing.assert_array_equal(target_masked(n[:1], 30, "quantile", "official"), [3])
    # k = 53, n = 100: float32(0.53) = 0.52999997138..., times 100 rounds to 52.999996 -> 52 (roar's exact floor: 53;
    # float64 0.53 * 100 = 53.0 -> 53: the float32 rounding is what differs)
    assert int(0.53 * 100) == 53
    np.testing.assert_array_equal(target_masked(n[1:2], 53, "quantile", "official"), [52])
    np.testing.assert_array_equal(target_masked(n[1:2], 53, "quantile"), [53])
    # k = 29, n = 100: float32(0.29) * 100 rounds to 29.0 -> 29 (as roar), where float64 gives 28.999999999999996 -> 28
    assert int(0.29 * 100) == 28
    np.testing.assert_array_equal(target_masked(n[1:2], 29, "quantile", "official"), [29])
    # k = 21, n = 300: exactly 63, in float32 62.999996 -> 62
    np.testing.assert_array_equal(target_masked(n[3:4], 21, "quantile", "official"), [62])
    np.testing.assert_array_equal(target_masked(n[3:4], 21, "quantile"), [63])
    # the count strategy is the same under both: min(k, n)
    np.testing.assert_array_equal(target_masked(n, 9, "count", "official"), target_masked(n, 9, "count"))


def test_official_count_equals_roars_at_the_studys_steps():
    """For k = 10, 20, ..., 90 the float32 count is the exact floor at every length up to 20,000: the option
    changes nothing at a study's usual steps."""
    n = np.arange(0, 20_001)
    for k in range(0, 101, 10):
        np.testing.assert_array_equal(target_masked(n, k, "quantile", "official"), target_masked(n, k, "quantile"))


def test_official_count_includes_already_masked_tokens():
    # 10 maskable tokens, 2 of them already masked: k = 30 -> int(float32(0.3) * 10) = 3 over all 10
    # (not over the 8 unmasked, which would give 2): one more token, the most important unmasked one.
    tokens = np.array([[S, M, 11, 12, 13, M, 15, 16, 17, 18, 19, E]])
    importance = np.array([[0, 9.0, 0.1, 0.8, 0.3, 9.0, 0.2, 0.7, 0.4, 0.6, 0.5, 0]])
    out = mask_top_k(tokens, np.array([12]), importance, 30, "quantile", masking_count="official")
    np.testing.assert_array_equal(out, [[S, M, 11, M, 13, M, 15, 16, 17, 18, 19, E]])
    # k = 53 over 100 maskable tokens, none masked: 52 tokens (roar: 53)
    row = np.array([[S, *range(10, 110), E]])
    scores = np.arange(102, dtype=float)[None, :]
    official = mask_top_k(row, np.array([102]), scores, 53, "quantile", masking_count="official")
    assert (official == M).sum() == 52 and (mask_top_k(row, np.array([102]), scores, 53, "quantile") == M).sum() == 53


def test_unknown_masking_count_raises_with_value():
    with pytest.raises(ValueError, match="masking_count='float' unknown; allowed: roar, official"):
        target_masked(np.array([4]), 50, "quantile", "float")
