"""The no-retrain section of the report on hand-made step records, every number checked by hand.

Study: babi-1 / bilstm-attention, measures random, attention, gradient, input-x-gradient (Recursive
ROAR) and gradient (plain ROAR); seeds 0, 1; quantile steps 25, 50, 75 (points k = 0 ... 100).

* retrained: random b = [1, .875, .75, .625, .5] (shared k = 0 and k = 100), so RACU = d25 + d50 + d75
  with d = b - p (area(b - b_I) = 25).
* no-retrain curves: random = [1, .9, .8, .7, .6] (k = 0 shared, k = 100 from the last step's record), a
  measure ends at .6 too, so area(b - b_I) = 25 * .8 and RACU = (d25 + d50 + d75) / .8.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from roar.report.study import write_report

RANDOM = {"retrained": [0.875, 0.75, 0.625], "k0-model": [0.9, 0.8, 0.7], "previous-model": [0.9, 0.8, 0.7]}
END = 0.6  # no-retrain curves at k = 100
D = {  # (curve, seed) -> measure -> d at k = 25, 50, 75
    ("retrained", 0): {"attention": (.3, .3, .2), "gradient": (.2, .1, .1), "input-x-gradient": (.1, .05, .05)},
    ("retrained", 1): {"attention": (.3, .3, .2), "gradient": (.2, .1, .1), "input-x-gradient": (.1, .05, .05)},
    # seed 0 reverses the order (tau = -1); seed 1 keeps it (tau = +1)
    ("k0-model", 0): {"attention": (.1, .1, 0), "gradient": (.2, .2, 0), "input-x-gradient": (.2, .2, .2)},
    ("k0-model", 1): {"attention": (.2, .2, .2), "gradient": (.2, .2, 0), "input-x-gradient": (.1, .1, 0)},
    # seed 0 the same order (tau = +1); seed 1 ties attention with gradient: tau-b = 2 / sqrt(3 * 2)
    ("previous-model", 0): {"attention": (.2, .1, .1), "gradient": (.1, .05, .05), "input-x-gradient": (0, 0, .08)},
    ("previous-model", 1): {"attention": (.2, .1, .1), "gradient": (.2, .1, .1), "input-x-gradient": (.1, .05, .05)},
}
STEPS = [25, 50, 75]


def params() -> dict:
    return {"study": {"name": "noretrain", "datasets": ["babi-1"], "models": ["bilstm-attention"],
                      "measures": ["random", "attention", "gradient", "input-x-gradient"],
                      "roar_measures": ["gradient"], "seeds": [0, 1], "strategy": "quantile", "steps": STEPS}}


def curve(name: str, seed: int, measure: str) -> list[float]:
    if measure == "random":
        return RANDOM[name]
    return [b - d for b, d in zip(RANDOM[name], D[(name, seed)][measure])]


def step_record(measure: str, recursive: bool, seed: int, i: int) -> dict:
    k = STEPS[i]
    hashes = {"data_hash": "d", "model_hash": "m"}  # what a score was made from (unused by the report)
    scores = {c: {"value": curve(c, seed, measure)[i], "seconds": 0.5, **hashes}
              for c in ("k0-model", "previous-model")}
    record = {"dataset": "babi-1", "model": "bilstm-attention", "measure": measure, "recursive": recursive,
              "strategy": "quantile", "seed": seed, "k": k, "metric": "accuracy",
              "value": curve("retrained", seed, measure)[i], "train_seconds": 10.0,
              # plain ROAR computes its importance once (the first step) and reuses it
              "importance_seconds": 2.0 if recursive else (6.0 if i == 0 else 0.0), "no_retrain": scores}
    if i == len(STEPS) - 1:
        record["no_retrain_end"] = {"k": 100, **{c: {"value": END, "seconds": 0.5, **hashes} for c in scores}}
    return record


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("noretrain")
    results = root / "results"
    for seed in (0, 1):
        for k, value in ((0, 1.0), (100, 0.5)):
            path = results / "babi-1/bilstm-attention/shared" / f"s{seed}-k{k}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"dataset": "babi-1", "model": "bilstm-attention", "measure": "shared",
                                        "recursive": None, "strategy": "quantile", "seed": seed, "k": k,
                                        "metric": "accuracy", "value": value}))
        for measure, recursive in [(m, True) for m in params()["study"]["measures"]] + [("gradient", False)]:
            for i, k in enumerate(STEPS):
                path = results / f"babi-1/bilstm-attention/{measure}/{recursive}/s{seed}/k{k}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(step_record(measure, recursive, seed, i)))
    out = root / "reports"
    tables = write_report(params(), results, out)
    return out, tables


def rows(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def test_points_csv_keeps_the_old_columns_first_and_adds_curve(report) -> None:
    out, _ = report
    points = rows(out / "points.csv")
    assert list(points[0]) == ["dataset", "model", "measure", "recursive", "strategy", "seed", "k", "metric", "value",
                               "curve"]
    # 5 chains x 2 seeds x 5 points x 3 curves
    assert len(points) == 5 * 2 * 5 * 3
    k0 = [p for p in points if p["measure"] == "attention" and p["seed"] == "0" and p["curve"] == "k0-model"]
    assert [(int(p["k"]), float(p["value"])) for p in k0] == [(0, 1.0), (25, 0.8), (50, 0.7), (75, 0.7), (100, 0.6)]
    # curves.csv and racu.csv stay the retrained curve's
    curves = rows(out / "curves.csv")
    assert len(curves) == 5 * 5 and "curve" not in curves[0]
    assert len(rows(out / "racu.csv")) == 4


def test_racu_per_curve_by_hand(report) -> None:
    out, _ = report
    per_seed = {(r["measure"], r["recursive"], r["curve"], r["seed"]): float(r["racu_unclipped"])
                for r in rows(out / "racu_seeds.csv")}
    for (name, seed), measures in D.items():
        scale = 1.0 if name == "retrained" else 0.8
        for measure, d in measures.items():
            assert per_seed[(measure, "True", name, str(seed))] == pytest.approx(sum(d) / scale), (name, seed, measure)
    summary = {(r["measure"], r["recursive"], r["curve"]): float(r["racu_mean"]) for r in rows(out / "noretrain.csv")}
    assert summary[("attention", "True", "k0-model")] == pytest.approx((0.2 / 0.8 + 0.6 / 0.8) / 2)
    assert summary[("gradient", "False", "k0-model")] == pytest.approx(0.5)  # plain ROAR: same curves as recursive


def test_kendall_tau_per_seed_by_hand(report) -> None:
    out, _ = report
    tau = {(r["recursive"], r["curve"], r["seed"]): r for r in rows(out / "noretrain_tau.csv")}
    assert float(tau[("True", "k0-model", "0")]["tau"]) == pytest.approx(-1.0)
    assert float(tau[("True", "k0-model", "1")]["tau"]) == pytest.approx(1.0)
    assert float(tau[("True", "previous-model", "0")]["tau"]) == pytest.approx(1.0)
    assert float(tau[("True", "previous-model", "1")]["tau"]) == pytest.approx(2 / math.sqrt(6))
    assert "ties" in tau[("True", "previous-model", "1")]["note"]
    single = tau[("False", "k0-model", "0")]  # plain ROAR has one measure: no ranking
    assert single["tau"] == "" and single["n_measures"] == "1" and "fewer than 2" in single["note"]


def test_compute_per_curve_by_hand(report) -> None:
    out, _ = report
    compute = {(r["measure"], r["recursive"], r["curve"]): r for r in rows(out / "noretrain_compute.csv")}
    # recursive: 2 seeds x 3 steps x (10 train + 2 importance) = 72; scoring 2 seeds x 4 points x .5 = 4
    assert float(compute[("gradient", "True", "retrained")]["seconds"]) == pytest.approx(72)
    assert float(compute[("gradient", "True", "k0-model")]["seconds"]) == pytest.approx(76)
    assert compute[("gradient", "True", "k0-model")]["needs_retraining"] == "True"
    # plain ROAR's deletion curve: importance once per seed (6) + scoring, no training
    deletion = compute[("gradient", "False", "k0-model")]
    assert float(deletion["seconds"]) == pytest.approx(12 + 4) and deletion["needs_retraining"] == "False"
    assert float(deletion["ratio"]) == pytest.approx(72 / 16)


def test_readme_section_states_the_comparison_from_the_numbers(report) -> None:
    out, _ = report
    readme = (out / "README.md").read_text()
    assert "## What retraining buys: no-retrain curves" in readme
    assert "![noretrain-babi-1-bilstm-attention](figures/noretrain-babi-1-bilstm-attention.png)" in readme
    assert (out / "figures/noretrain-babi-1-bilstm-attention.png").stat().st_size > 10_000
    assert ("babi-1/bilstm-attention, Recursive ROAR k0-model: ranks the measures as Recursive ROAR does in some "
            "seeds only: same ranking in 1 of 2 seeds, mean τ = +0.00 over 3 measures") in readme
    assert "ROAR k0-model (deletion curve): no tau (fewer than 2 measures" in readme
    # the three-way table row of attention (RACU %, mean over seeds)
    assert "| attention | 80.0 (n=2) | 50.0 (n=2) | 50.0 (n=2) |" in readme


def test_plain_roar_is_priced_as_a_chain_of_its_own_by_hand() -> None:
    """Plain ROAR retrained is a contender with its own cost (importance once), not a curve of the recursive
    chain: its price line says how much less it needs. Compute: Recursive ROAR 300 s and 90 s for the two
    measures, plain ROAR 100 s and 60 s: ratios 3.0 and 1.5, median 2.25."""
    import pandas as pd

    from roar.report.noretrain import conclusions

    tau = pd.DataFrame([{"dataset": "d", "model": "m", "strategy": "quantile", "seed": seed, "recursive": False,
                         "curve": "retrained", "n_measures": 2, "tau": 1.0, "p_value": 1.0, "note": ""}
                        for seed in (0, 1)])
    compute = pd.DataFrame([{"dataset": "d", "model": "m", "measure": measure, "recursive": False,
                             "strategy": "quantile", "curve": "retrained", "seconds": seconds, "scoring_seconds": 0.0,
                             "needs_retraining": True, "ratio": ratio}
                            for measure, seconds, ratio in (("gradient", 100.0, 3.0), ("attention", 60.0, 1.5))])
    assert conclusions(tau, compute) == [
        "* d/m, ROAR retrained: ranks the measures as Recursive ROAR does: same ranking in 2 of 2 seeds, mean "
        "τ = +1.00 over 2 measures; it retrains at every step but computes the importance once, with the k = 0 "
        "model: 2.2× less compute than Recursive ROAR (median over measures)."]
