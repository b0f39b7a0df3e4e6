"""The report's label-leak table: joins, means over seeds and the rise flag, hand-computed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from roar.report.leakage_report import RISE, collect_leakage, leakage_markdown, summarise_leakage
from roar.config.params import study_from_params
from roar.report.tables import collect_points
from roar.pipeline.step_record import StepRecord

STUDY = study_from_params({"study": {"name": "t", "datasets": ["babi-1"], "models": ["bilstm-attention"],
                                     "measures": ["random", "gradient"], "roar_measures": [], "seeds": [0, 1],
                                     "strategy": "quantile", "steps": [10, 20]}})


def record(measure: str, seed: int, k: int, value: float, probe: float, absent: float | None = None) -> StepRecord:
    leak = {"mask_probe": probe, "majority": 0.2}
    if absent is not None:
        leak["label_word_absent"] = absent
    return StepRecord("babi-1", "bilstm-attention", measure, None if measure == "shared" else True, "quantile", seed,
                      k, "accuracy", value, leakage=leak)


RECORDS = [record("shared", s, 0, 1.0, 0.25, 0.0) for s in (0, 1)] + [
    record("shared", s, 100, 0.2, 0.2, 1.0) for s in (0, 1)] + [
    record("gradient", 0, 10, 0.30, 0.2, 0.5), record("gradient", 1, 10, 0.20, 0.3, 0.7),
    record("gradient", 0, 20, 0.40, 0.5, 0.9), record("gradient", 1, 20, 0.30, 0.6, 0.9),  # mean 0.35: +0.10
    record("random", 0, 10, 0.8, 0.2), record("random", 1, 10, 0.8, 0.2),
    record("random", 0, 20, 0.7, 0.2), record("random", 1, 20, 0.7, 0.2)]


def summary() -> pd.DataFrame:
    points = collect_points(RECORDS, STUDY)
    return summarise_leakage(collect_leakage(RECORDS, STUDY, points))


def one_curve(ks: list[int], values: list[float]) -> pd.DataFrame:
    """Per-seed rows of one gradient chain and seed, without the answer diagnostics."""
    return pd.DataFrame({"dataset": "d", "model": "m", "measure": "gradient", "recursive": True,
                         "strategy": "quantile", "seed": 0, "k": ks, "value": values, "mask_probe": 0.2,
                         "majority": 0.2, "label_word_absent": math.nan, "other_labels_visible": math.nan,
                         "predicted_is_gold_test": math.nan})


def row(frame: pd.DataFrame, measure: str, k: int) -> pd.Series:
    return frame[(frame["measure"] == measure) & (frame["k"] == k)].iloc[0]


def test_means_over_seeds_and_shared_points_joined() -> None:
    frame = summary()
    assert sorted(frame[frame["measure"] == "gradient"]["k"]) == [0, 10, 20, 100]
    r = row(frame, "gradient", 10)
    assert r["metric_mean"] == pytest.approx(0.25) and r["mask_probe"] == pytest.approx(0.25)
    assert r["label_word_absent"] == pytest.approx(0.6) and r["n_seeds"] == 2
    assert row(frame, "gradient", 0)["mask_probe"] == pytest.approx(0.25)  # the k = 0 reference's
    assert math.isnan(row(frame, "random", 10)["label_word_absent"])  # not recorded -> NaN


def test_rise_flag_hand_computed() -> None:
    frame = summary()
    r = row(frame, "gradient", 20)
    assert r["metric_rise"] == pytest.approx(0.10) and r["rises"]
    assert not row(frame, "gradient", 10)["rises"]  # 0.25 after 1.0: a fall
    assert not row(frame, "gradient", 100)["rises"]  # 0.2 after 0.35
    assert math.isnan(row(frame, "gradient", 0)["metric_rise"])
    assert RISE < 0.10  # the hand-made rise is above the threshold


def test_markdown_names_the_rise_and_the_target() -> None:
    text = leakage_markdown(summary(), "predicted")
    assert "Importance target: **predicted**" in text
    assert ("babi-1/bilstm-attention/gradient/recursive: up to +0.100 above its lowest point (to 0.350 at k = 20), "
            "flagged at k = 20; mask probe up to 0.550 vs majority 0.200") in text
    assert "| gradient | 25 (0) | 25 (60) | **55 (90)**↑ | 20 (100) |" in text


def test_a_slow_climb_is_flagged_against_the_lowest_point() -> None:
    frame = summarise_leakage(one_curve([0, 10, 20, 30, 40], [0.9, 0.20, 0.23, 0.26, 0.24])).set_index("k")
    # each step is +0.03 at most, but k = 30 is 0.06 above the lowest point (k = 10)
    assert frame.loc[30, "metric_rise"] == pytest.approx(0.06) and frame.loc[30, "rises"]
    assert frame.loc[40, "metric_rise"] == pytest.approx(0.04) and not frame.loc[40, "rises"]
    assert not frame.loc[20, "rises"]


def test_answer_absence_is_shown_only_where_answers_are_words_of_the_text() -> None:
    base = {"dataset": "d", "model": "m", "measure": "gradient", "recursive": True, "strategy": "quantile",
            "seed": 0, "k": [0, 10], "value": [0.9, 0.5], "mask_probe": 0.5, "majority": 0.5,
            "predicted_is_gold_test": math.nan}
    in_text = summarise_leakage(pd.DataFrame(base | {"label_word_absent": [0.0, 0.4],
                                                     "other_labels_visible": [2.0, 1.0]}))
    assert in_text["label_word_absent"].tolist() == [0.0, 0.4]
    # e.g. classes "negative"/"positive" that reviews rarely contain: absent at k = 0 already
    not_in_text = summarise_leakage(pd.DataFrame(base | {"label_word_absent": [0.97, 0.98],
                                                         "other_labels_visible": [0.01, 0.0]}))
    assert not_in_text["label_word_absent"].isna().all() and not_in_text["other_labels_visible"].isna().all()


def test_steps_at_the_floor_are_flagged_against_the_all_masked_model() -> None:
    per_seed = one_curve([0, 10, 20, 30, 100], [0.9, 0.17, 0.175, 0.30, 0.16])
    frame = summarise_leakage(per_seed).set_index("k")
    # 0.17 - 0.16 and 0.175 - 0.16 are within FLOOR = 0.02; 0.30 is not; k = 0 and k = 100 are never flagged
    assert list(frame["at_floor"]) == [False, True, True, False, False]
    text = leakage_markdown(summarise_leakage(per_seed), "gold")
    assert "* d/m/gradient/recursive: k = 10, 20 (all-masked 0.160)" in text


def test_no_step_at_the_floor_says_so() -> None:
    text = leakage_markdown(summary(), "gold")  # gradient at k = 10 and 20 is 0.25 and 0.35, the floor 0.2
    assert not summary()["at_floor"].any()
    assert "No step's model is at the floor" in text
