"""The report's aggregation from a hand-made ``points.csv`` (tests/data) to ``racu.csv``, every value
computed by hand below, and the file compared with the golden ``tests/data/racu.csv``.

Points (k = 0, 50, 100; x = k / 100; one trapezoid of width 0.5 on each side of k = 50):
every curve starts at 1.0 and ends at 0.5, so area(random - measure) = 0.5 * d50 (d = b - p at k = 50)
and area(random - random at k = 100) = 0.5 * ((0.5 + b50 - 0.5) / 2 + (b50 - 0.5) / 2) = 0.25 * (2 b50 - 0.5).

* random b50 by seed: 0.8, 0.7, 0.9 -> areas 0.275, 0.225, 0.325
* attention p50: 0.6, 0.55, 0.95 -> 0.1 / 0.275 = 4/11, 0.075 / 0.225 = 1/3, -0.025 / 0.325 = -1/13
* gradient p50: 0.7, 0.4, (seed 2: no k = 50 point) -> 0.05 / 0.275 = 2/11, 0.15 / 0.225 = 2/3
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

from roar.config.params import study_from_params
from roar.report.tables import _csv, racu_per_seed, summarise_racu

DATA = Path(__file__).resolve().parents[2] / "data"
STUDY = study_from_params({"study": {"name": "golden", "datasets": ["babi-1"], "models": ["bilstm-attention"],
                                     "measures": ["random", "attention", "gradient"], "roar_measures": [],
                                     "seeds": [0, 1, 2], "strategy": "quantile", "steps": [50]}})
T_975 = {1: 12.706205, 2: 4.302653}  # Student-t quantiles by degrees of freedom
PER_SEED = {"attention": [4 / 11, 1 / 3, -1 / 13], "gradient": [2 / 11, 2 / 3]}


def racu_tables() -> tuple[pd.DataFrame, list[dict], pd.DataFrame]:
    points = pd.read_csv(DATA / "points.csv")
    per_seed, excluded = racu_per_seed(points, STUDY)
    return per_seed, excluded, summarise_racu(per_seed)


def test_per_seed_racu_is_the_hand_computed_value() -> None:
    per_seed, excluded, _ = racu_tables()
    for measure, values in PER_SEED.items():
        rows = per_seed[per_seed["measure"] == measure].sort_values("seed")
        assert rows["racu_unclipped"].tolist() == pytest.approx(values, abs=1e-12), measure
        assert rows["seed"].tolist() == list(range(len(values)))
    assert [(r["measure"], r["seed"], r["reason"]) for r in excluded] == [
        ("gradient", 2, "incomplete curve: missing k 50")]


def test_racu_mean_and_student_t_interval_by_hand() -> None:
    _, _, racu = racu_tables()
    assert racu["measure"].tolist() == ["attention", "gradient"]
    for _, row in racu.iterrows():
        values = PER_SEED[row["measure"]]
        n = len(values)
        half = T_975[n - 1] * statistics.stdev(values) / math.sqrt(n)
        assert row["racu_mean"] == pytest.approx(sum(values) / n, abs=1e-12)
        assert (row["racu_low"], row["racu_high"]) == pytest.approx((row["racu_mean"] - half, row["racu_mean"] + half),
                                                                    abs=1e-6)
        assert row["n_seeds"] == n and row["interval"] == f"student-t 95% (df={n - 1})"
    assert racu.set_index("measure").loc["attention", "racu_mean"] == pytest.approx(266 / 1287, abs=1e-12)


def test_racu_csv_equals_the_golden_file() -> None:
    _, _, racu = racu_tables()
    assert _csv(racu) == (DATA / "racu.csv").read_text()
