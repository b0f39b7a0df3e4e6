"""The report's statistics on a small synthetic study, every number checked by hand.

Study: babi-1 / bilstm-attention, measures attention, gradient, input-x-gradient (no results at
all) and random; seeds 0-4; quantile steps 25, 50, 75 (curve points k = 0, 25, 50, 75, 100).

* seeds 0-2: random b = [1, .875, .75, .625, .5]; b - b_I = [.5, .375, .25, .125, 0]
  -> area 25 * (.5/2 + .375 + .25 + .125) = 25. A measure curve shares k = 0 (1.0) and k = 100
  (0.5) with it, so area(b - p) = 25 * (d25 + d50 + d75) and RACU = d25 + d50 + d75.
* seed 3: random curve flat at .6 -> encloses no area, RACU undefined for every measure.
* seed 4: attention ran, gradient and random did not.
* gradient seed 2 lacks its k = 75 point (incomplete curve).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import pytest

from roar.report.study import write_report

KS = [0, 25, 50, 75, 100]
RANDOM = [1.0, 0.875, 0.75, 0.625, 0.5]
CURVES = {  # measure -> seed -> values at k = 25, 50, 75 (None: point missing)
    "random": {0: RANDOM[1:4], 1: RANDOM[1:4], 2: RANDOM[1:4], 3: [0.6, 0.6, 0.6]},
    # d = b - p: seed 0 .3+.3+.2 = .8; seed 1 .4+.3+.3 = 1.0; seed 2 .4+.4+.4 = 1.2 (-> clipped 1.0)
    "attention": {0: [0.575, 0.45, 0.425], 1: [0.475, 0.45, 0.325], 2: [0.475, 0.35, 0.225],
                  3: [0.3, 0.3, 0.3], 4: [0.5, 0.5, 0.5]},
    # seed 0 .2+.1+.1 = .4; seed 1 .2+.2+.2 = .6; seed 2 incomplete
    "gradient": {0: [0.675, 0.65, 0.525], 1: [0.675, 0.55, 0.425], 2: [0.675, 0.55, None], 3: [0.3, 0.3, 0.3]},
}
SHARED = {0: (1.0, 0.5), 1: (1.0, 0.5), 2: (1.0, 0.5), 3: (0.6, 0.6), 4: (1.0, 0.5)}  # seed -> (k0, k100)
T_975 = {1: 12.706205, 2: 4.302653}  # Student-t quantiles by degrees of freedom


def params() -> dict:
    return {"study": {"name": "synthetic", "datasets": ["babi-1"], "models": ["bilstm-attention"],
                      "measures": ["random", "attention", "gradient", "input-x-gradient"], "roar_measures": [],
                      "seeds": [0, 1, 2, 3, 4], "strategy": "quantile", "steps": [25, 50, 75]}}


def record(measure: str, seed: int, k: int, value: float) -> dict:
    return {"dataset": "babi-1", "model": "bilstm-attention", "measure": measure, "recursive": True,
            "strategy": "quantile", "seed": seed, "k": k, "metric": "accuracy", "value": value}


def write_results(root: Path) -> Path:
    results = root / "results"
    for seed, (k0, k100) in SHARED.items():
        for k, value in ((0, k0), (100, k100)):
            path = results / "babi-1/bilstm-attention/all" / f"s{seed}-k{k}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record("shared", seed, k, value)))
    for measure, seeds in CURVES.items():
        for seed, values in seeds.items():
            for k, value in zip(KS[1:4], values):
                if value is not None:
                    path = results / f"babi-1/bilstm-attention/{measure}/recursive/s{seed}/k{k}.json"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(record(measure, seed, k, value)))
    return results


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    out = root / "reports"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        tables = write_report(params(), write_results(root), out, "abc123")
    return out, tables, stderr.getvalue()


def rows(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open()))


def test_racu_seeds_csv_by_hand(report):
    out, _, _ = report
    lines = (out / "racu_seeds.csv").read_text().splitlines()
    assert lines[0] == "dataset,model,measure,recursive,strategy,curve,seed,racu,racu_unclipped"
    got = [(r["measure"], int(r["seed"]), float(r["racu"]), float(r["racu_unclipped"]))
           for r in rows(out / "racu_seeds.csv")]
    expected = [("attention", 0, 0.8, 0.8), ("attention", 1, 1.0, 1.0),
                ("attention", 2, 1.0, 1.2),  # clipped at 1, unclipped 1.2
                ("gradient", 0, 0.4, 0.4), ("gradient", 1, 0.6, 0.6)]
    assert [g[:2] for g in got] == [e[:2] for e in expected]
    assert [g[2:] for g in got] == [pytest.approx(e[2:], abs=1e-6) for e in expected]
    assert {r["curve"] for r in rows(out / "racu_seeds.csv")} == {"retrained"}


def test_racu_csv_mean_of_unclipped_with_t_interval(report):
    out, _, _ = report
    lines = (out / "racu.csv").read_text().splitlines()
    assert lines[0] == "dataset,model,measure,recursive,strategy,racu_mean,racu_low,racu_high,n_seeds,interval"
    table = {r["measure"]: r for r in rows(out / "racu.csv")}
    assert set(table) == {"attention", "gradient"}  # input-x-gradient has no seed
    # attention: unclipped [.8, 1, 1.2] -> mean 1.0 (the clipped mean would be .933), s = .2
    attention = table["attention"]
    half = T_975[2] * 0.2 / math.sqrt(3)  # = 0.496828
    assert float(attention["racu_mean"]) == pytest.approx(1.0, abs=1e-6)
    assert float(attention["racu_low"]) == pytest.approx(1.0 - half, abs=1e-6)
    assert float(attention["racu_high"]) == pytest.approx(1.0 + half, abs=1e-6)
    assert attention["n_seeds"] == "3" and attention["interval"] == "student-t 95% (df=2)"
    # gradient: [.4, .6] -> mean .5, s = sqrt(.02), half = 12.706205 * sqrt(.02) / sqrt(2) = 1.2706205
    gradient = table["gradient"]
    assert float(gradient["racu_mean"]) == pytest.approx(0.5, abs=1e-6)
    assert float(gradient["racu_low"]) == pytest.approx(0.5 - 1.2706205, abs=1e-6)
    assert float(gradient["racu_high"]) == pytest.approx(0.5 + 1.2706205, abs=1e-6)
    assert gradient["n_seeds"] == "2" and gradient["interval"] == "student-t 95% (df=1)"
    metrics = json.loads((out / "racu.json").read_text())
    assert metrics["babi-1"]["bilstm-attention"]["recursive"]["attention"]["racu_mean"] == pytest.approx(1.0)


EXCLUDED = [
    ("attention", "3", "random curve encloses no area (RACU undefined)"),
    ("attention", "4", "no random chain of this seed (RACU compares with the same seed's random curve)"),
    ("gradient", "2", "incomplete curve: missing k 75"),
    ("gradient", "3", "random curve encloses no area (RACU undefined)"),
    ("gradient", "4", "no results for this seed (chain not run or its results missing); "
                      "no random chain of this seed (RACU compares with the same seed's random curve)"),
    *[("input-x-gradient", str(s), "no results for this seed (chain not run or its results missing)")
      for s in (0, 1, 2, 3)],
    ("input-x-gradient", "4", "no results for this seed (chain not run or its results missing); "
                              "no random chain of this seed (RACU compares with the same seed's random curve)"),
    ("input-x-gradient", "", "no seed has a RACU: measure left out of racu.csv"),
]


def test_excluded_csv_names_every_seed_left_out(report):
    out, tables, _ = report
    lines = (out / "excluded.csv").read_text().splitlines()
    assert lines[0] == "dataset,model,measure,recursive,strategy,seed,reason"
    got = [(r["measure"], r["seed"], r["reason"]) for r in rows(out / "excluded.csv")]
    assert got == EXCLUDED
    assert all(r["dataset"] == "babi-1" and r["recursive"] == "True" for r in rows(out / "excluded.csv"))
    assert len(tables["excluded"]) == len(EXCLUDED)


def test_warnings_on_stderr(report):
    _, _, stderr = report
    lines = stderr.splitlines()
    assert "warning: left out babi-1/bilstm-attention/attention/recursive seed 3: random curve encloses no area " \
           "(RACU undefined)" in lines
    assert ("warning: left out babi-1/bilstm-attention/gradient/recursive seed 2: incomplete curve: missing k 75"
            in lines)
    assert "warning: left out babi-1/bilstm-attention/input-x-gradient/recursive: no seed has a RACU: measure left " \
           "out of racu.csv" in lines
    assert len([line for line in lines if line.startswith("warning: left out ")]) == len(EXCLUDED)


def test_human_tables_flag_few_seeds_and_show_per_seed_values(report):
    out, _, _ = report
    md = (out / "racu.md").read_text()
    assert "| babi-1 | attention | 100.0 [50.3, 149.7] (n=3)† |" in md
    assert "| babi-1 | gradient | 50.0 [-77.1, 177.1] (n=2)† |" in md
    assert "† fewer than 5 seeds: interval is a t-interval over 2, 3 seeds and is wide/indicative." in md
    assert "Interval of babi-1/bilstm-attention/gradient: student-t 95% (df=1): mean ± t·s/√n over the seeds; " \
           "assumes roughly normal per-seed values." in md
    # per seed: clipped, the unclipped value in parentheses where it differs; — where left out
    assert "| babi-1 | bilstm-attention | recursive | attention | 80.0 | 100.0 | 100.0 (120.0) | — | — |" in md
    assert "| babi-1 | bilstm-attention | recursive | gradient | 40.0 | 60.0 | — | — | — |" in md
    assert "| babi-1 | bilstm-attention | recursive | input-x-gradient | — | — | — | — | — |" in md
    tex = (out / "racu.tex").read_text()
    assert "babi-1 & attention & $100.0\\,[50.3, 149.7]^{\\dagger}$ \\\\" in tex
    assert "†" not in tex and "±" not in tex
    readme = (out / "README.md").read_text()
    assert "## Left out" in readme
    assert "* babi-1/bilstm-attention/gradient/recursive seed 2: incomplete curve: missing k 75" in readme
    assert "mean is over the unclipped per-seed values" in readme and "Student-t interval" in readme
    assert "100.0 (120.0)" in readme


def test_curves_csv_names_its_interval(report):
    out, _, _ = report
    lines = (out / "curves.csv").read_text().splitlines()
    assert lines[0] == "dataset,model,measure,recursive,strategy,k,metric,mean,low,high,n_seeds,interval"
    curves = {(r["measure"], int(r["k"])): r for r in rows(out / "curves.csv")}
    # gradient at k = 75: seeds 0, 1, 3 -> [.525, .425, .3], mean .416667
    g75 = curves[("gradient", 75)]
    assert g75["n_seeds"] == "3" and g75["interval"] == "student-t 95% (df=2)"
    assert float(g75["mean"]) == pytest.approx((0.525 + 0.425 + 0.3) / 3, abs=1e-6)
    # random at k = 25: seeds 0-3 -> [.875, .875, .875, .6]
    assert curves[("random", 25)]["n_seeds"] == "4" and curves[("random", 25)]["interval"] == "student-t 95% (df=3)"


def test_one_seed_and_many_seeds(tmp_path):
    """One seed: no interval, flagged; the flag is gone from 5 seeds on."""
    import pandas as pd

    from roar.report.tables import racu_markdown, summarise_racu

    def per_seed(values):
        return pd.DataFrame([{"dataset": "babi-1", "model": "bilstm-attention", "measure": "gradient",
                              "recursive": True, "strategy": "quantile", "curve": "retrained", "seed": s,
                              "racu": min(v, 1.0), "racu_unclipped": v} for s, v in enumerate(values)])

    one = summarise_racu(per_seed([0.3]))
    assert one.iloc[0]["interval"] == "none (1 seed)" and math.isnan(one.iloc[0]["racu_low"])
    md = racu_markdown(one)
    assert "| babi-1 | gradient | 30.0 (no interval) (n=1)† |" in md
    assert "† fewer than 5 seeds: with 1 seed there is no interval." in md
    five = racu_markdown(summarise_racu(per_seed([0.1, 0.2, 0.3, 0.4, 0.5])))
    assert "(n=5) |" in five and "†" not in five


def test_compute_by_chain_sums_seconds_per_chain_over_the_studys_seeds_and_steps() -> None:
    from roar.config.params import study_from_params
    from roar.report.tables import compute_by_chain, compute_markdown
    from roar.pipeline.step_record import RunFacts, StepRecord

    study = study_from_params({"study": {"name": "t", "datasets": ["babi-1"], "models": ["bilstm-attention"],
                                         "measures": ["random", "gradient"], "roar_measures": [], "seeds": [0, 1],
                                         "strategy": "quantile", "steps": [10, 20]}})

    def rec(measure, seed, k, train, importance=None):
        return StepRecord("babi-1", "bilstm-attention", measure, None if measure == "shared" else True, "quantile",
                          seed, k, "accuracy", 0.5, run=RunFacts(train_seconds=train, importance_seconds=importance))

    records = [rec("shared", 0, 0, 100.0), rec("shared", 1, 0, 80.0), rec("shared", 0, 100, 20.0),
               rec("gradient", 0, 10, 30.0, 5.0), rec("gradient", 1, 20, 40.0, 7.0),
               rec("gradient", 2, 10, 999.0, 999.0),  # seed 2 is not in the study
               rec("gradient", 0, 30, 999.0, 999.0)]  # k = 30 is not a step of the study
    frame = compute_by_chain(records, study).set_index("measure")
    assert frame.loc["gradient", "steps"] == 2
    assert frame.loc["gradient", "train_seconds"] == 70.0 and frame.loc["gradient", "importance_seconds"] == 12.0
    assert frame.loc["shared", "total_seconds"] == 200.0
    assert "| all | | | 5 | 0.07 | 0.00 | 0.08 |" in compute_markdown(compute_by_chain(records, study))


@pytest.mark.parametrize("baseline, expected", [
    # b (Recursive ROAR random) = [1, .5, 0]: area(b - b_I) = .75 * 50 + .25 * 50 = 50;
    # Recursive attention p = [1, .2, 0]: area(b - p) = 2 * .15 * 50 = 15 -> .3; plain attention [1, .4, 0]: 5 -> .1
    ("recursive-random", {True: 0.3, False: 0.1}),
    # b (plain ROAR random) = [1, .7, 0]: area(b - b_I) = .85 * 50 + .35 * 50 = 60;
    # Recursive attention: area(b - p) = 2 * .25 * 50 = 25 -> 25/60; plain attention: 2 * .15 * 50 = 15 -> .25
    ("plain-random", {True: 25 / 60, False: 0.25}),
])
def test_racu_baseline_recursive_or_plain_random_by_hand(baseline, expected):
    """``study.racu_baseline: plain-random`` measures both chain kinds against the plain ROAR random chain (the
    official code's baseline); both baselines end at the shared all-masked point."""
    import pandas as pd

    from roar.config.params import Study
    from roar.report.tables import POINT_COLUMNS, racu_per_seed

    at_50 = {("random", True): 0.5, ("random", False): 0.7, ("attention", True): 0.2, ("attention", False): 0.4}
    points = pd.DataFrame([{**record(measure, 0, k, value), "recursive": recursive, "curve": "retrained"}
                           for (measure, recursive), middle in at_50.items()
                           for k, value in ((0, 1.0), (50, middle), (100, 0.0))], columns=POINT_COLUMNS + ["curve"])
    study = Study("baseline", ["babi-1"], ["bilstm-attention"], ["random", "attention"], ["random", "attention"], [0],
                  "quantile", [50], racu_baseline=baseline)
    per_seed, excluded = racu_per_seed(points, study)
    assert not excluded
    assert {r.recursive: r.racu_unclipped for r in per_seed.itertuples()} == pytest.approx(expected)


def test_plain_random_baseline_without_the_plain_random_chain_is_refused_in_one_line():
    from roar.config.schema import check_study
    from roar.core.errors import RoarError

    study = {**params()["study"], "racu_baseline": "plain-random"}
    with pytest.raises(RoarError, match=r"^params.yaml: study.racu_baseline = 'plain-random' \(set there or by "
                                        r"fidelity: official\) compares every measure with the plain ROAR random "
                                        r"chain, which the study lacks: add random to study.roar_measures"):
        check_study(study)
    check_study({**study, "roar_measures": ["random"]})
    with pytest.raises(RoarError, match=r"^params.yaml: study.racu_baseline = 'plain' must be one of "
                                        r"recursive-random, plain-random$"):
        check_study({**study, "racu_baseline": "plain"})


def test_readme_names_the_official_definitions_in_use(tmp_path, report):
    out, _, _ = report
    assert "official code" not in (out / "README.md").read_text()  # roar's definitions: no line
    official = {**params(), "train": {"bilstm-attention": {"babi-1": {"batching": "shuffled"}}}}
    with contextlib.redirect_stderr(io.StringIO()):
        write_report(official, write_results(tmp_path), tmp_path / "reports", "abc123")
    assert ("* the official code's definitions (docs: method, \"Fidelity to the official code\"): "
            "train.bilstm-attention.babi-1.batching: shuffled\n") in (tmp_path / "reports" / "README.md").read_text()


def test_points_hold_only_steps_masked_by_the_studys_count():
    """A step record names a count other than roar's (``masking_count``); the report leaves out the steps of
    another count than the study's, since DVC does not rerun the chains when ``study.masking_count`` changes."""
    from roar.config.params import Study
    from roar.pipeline.step_record import StepRecord
    from roar.report.tables import collect_points

    records = [StepRecord.from_json(record("attention", 0, 25, 0.5)),
               StepRecord.from_json({**record("gradient", 0, 25, 0.6), "masking_count": "official"})]
    assert "masking_count" not in records[0].to_json() and records[1].to_json()["masking_count"] == "official"
    for count, kept in (("roar", {"attention"}), ("official", {"gradient"})):
        study = Study("count", ["babi-1"], ["bilstm-attention"], ["attention", "gradient"], [], [0], "quantile", [25],
                      masking_count=count)
        assert set(collect_points(records, study)["measure"]) == kept


def test_the_machines_of_the_pipeline_log_in_machines_csv_and_the_readme(tmp_path: Path) -> None:
    """Where a study's calls ran, from runs/pipeline.jsonl; no section for a study no `roar pipeline` call ran."""
    results, out = write_results(tmp_path), tmp_path / "reports"
    with contextlib.redirect_stderr(io.StringIO()):
        write_report(params(), results, out)
    assert not (out / "machines.csv").exists() and "### Machines" not in (out / "README.md").read_text()
    xeon, epyc = ({"cpu": cpu, "cpu_capability": isa, "cores": 2} for cpu, isa in (("Xeon", "AVX512"), ("EPYC", "AVX2")))
    calls = [{"machine": xeon, "wall_seconds": 7200.0, "stages": {"a": 7200.0, "b": 5400.0}},
             {"machine": epyc, "wall_seconds": 900.0, "stages": {"b": 900.0}}]
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "pipeline.jsonl").write_text("".join(json.dumps(call) + "\n" for call in calls))
    with contextlib.redirect_stderr(io.StringIO()):
        write_report(params(), results, out)
    assert rows(out / "machines.csv") == [
        {"machine": "Xeon (AVX512), 2 cores", "calls": "1", "wall_hours": "2.000000", "stage_process_hours": "3.500000",
         "stages": "2"},
        {"machine": "EPYC (AVX2), 2 cores", "calls": "1", "wall_hours": "0.250000", "stage_process_hours": "0.250000",
         "stages": "1"}]
    assert "| Xeon (AVX512), 2 cores | 1 | 2.00 | 3.50 | 2 |" in (out / "README.md").read_text()
