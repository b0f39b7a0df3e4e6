"""`roar compare-retraining` on hand-made reports, every number checked by hand.

Both studies: babi-1 / bilstm-attention, seeds 0 and 1, one quantile step (k = 0, 50, 100). Every random
curve is b = [1, .75, .5] and every measure's curve p = [1, .75 - d, .5], so
area(b - b_I) = 25 * .5 + 50 * .25 = 25 and area(b - p) = 50 * d: RACU = 2 d.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roar.cli import app

MEASURES = ("attention", "gradient", "input-x-gradient")
T_975_DF1 = 12.706204736174707  # Student t, 97.5 %, 1 degree of freedom
# (study, recursive, curve) -> seed -> d at k = 50 per measure (attention, gradient, input-x-gradient)
D = {
    ("plain", True, "retrained"): {0: (.2, .1, .05), 1: (.3, .1, .05)},  # the reference order a > g > ixg
    ("plain", False, "k0-model"): {0: (.05, .1, .15), 1: (.15, .1, .05)},  # seed 0 reversed (tau -1), seed 1 +1
    ("plain", True, "k0-model"): {0: (.1, .1, 0), 1: (.1, .1, 0)},  # a = g tie: tau-b = 2 / sqrt(3 * 2)
    ("masked", False, "k0-model"): {0: (.2, .1, 0), 1: (.1, .2, 0)},  # seed 0 +1; seed 1 one swap: 1/3
    ("masked", True, "retrained"): {0: (.2, .1, .05), 1: (.3, .1, .05)},
}


def write_report(folder: Path, study: str) -> None:
    folder.mkdir(parents=True)
    rows = []
    for (owner, recursive, curve), per_seed in D.items():
        if owner != study:
            continue
        for seed, ds in per_seed.items():
            for measure, d in zip(MEASURES, ds):
                for k, value in zip((0, 50, 100), (1.0, 0.75 - d, 0.5)):
                    rows.append(("babi-1", "bilstm-attention", measure, recursive, "quantile", seed, k, "accuracy",
                                 value, curve))
    for curve in ("retrained", "k0-model"):
        for seed in (0, 1):
            for k, value in zip((0, 50, 100), (1.0, 0.75, 0.5)):
                rows.append(("babi-1", "bilstm-attention", "random", True, "quantile", seed, k, "accuracy", value,
                             curve))
    with (folder / "points.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["dataset", "model", "measure", "recursive", "strategy", "seed", "k", "metric", "value",
                         "curve"])
        writer.writerows(rows)
    seconds = {("plain", True, "retrained"): 300.0, ("plain", False, "k0-model"): 12.0,
               ("masked", False, "k0-model"): 15.0}
    with (folder / "noretrain_compute.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["dataset", "model", "measure", "recursive", "strategy", "curve", "seconds", "scoring_seconds",
                         "needs_retraining", "ratio"])
        for (owner, recursive, curve), value in seconds.items():
            if owner == study:
                writer.writerow(["babi-1", "bilstm-attention", "attention", recursive, "quantile", curve, value, 2.0,
                                 curve == "retrained", ""])
    (folder / "compute.csv").write_text(
        "dataset,model,measure,recursive,steps,train_seconds,importance_seconds,total_seconds\n"
        f"babi-1,bilstm-attention,shared,,4,{80.0 if study == 'plain' else 90.0},0,0\n")


@pytest.fixture()
def reports(tmp_path: Path) -> tuple[Path, Path]:
    write_report(tmp_path / "plain", "plain")
    write_report(tmp_path / "masked", "masked")
    return tmp_path / "plain", tmp_path / "masked"


def read(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_compare_retraining_tables(reports, tmp_path: Path):
    plain, masked = reports
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["compare-retraining", "--plain", str(plain), "--masked", str(masked / "points.csv"),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = {(r["contender"], r["measure"]): r for r in read(out / "retrain_comparison.csv")}
    reference = summary[("Recursive ROAR", "attention")]
    # RACU = 2 d: seeds .4 and .6, mean .5, t-interval .5 -+ 12.706 * .1
    assert math.isclose(float(reference["racu_mean"]), 0.5, abs_tol=1e-6)
    assert math.isclose(float(reference["racu_low"]), 0.5 - T_975_DF1 * 0.1, abs_tol=1e-5)
    assert reference["n_seeds"] == "2" and reference["study"] == "plain"
    assert math.isclose(float(summary[("plain k0 model, ROAR masks", "input-x-gradient")]["racu_mean"]), 0.2,
                        abs_tol=1e-6)  # (.3 + .1) / 2
    masked_k0 = summary[("masked-trained k0 model, ROAR masks", "gradient")]
    assert math.isclose(float(masked_k0["racu_mean"]), 0.3, abs_tol=1e-6) and masked_k0["study"] == "masked"
    # no Recursive ROAR masks' k0 curve in the masked study: that contender is absent, not empty
    assert not any(c == "masked-trained k0 model, Recursive ROAR masks" for c, _ in summary)

    tau = {(r["first"], r["second"], r["seed"]): r for r in read(out / "retrain_comparison_tau.csv")}
    expected = {("plain k0 model, ROAR masks", "0"): -1.0, ("plain k0 model, ROAR masks", "1"): 1.0,
                ("masked-trained k0 model, ROAR masks", "0"): 1.0,
                ("masked-trained k0 model, ROAR masks", "1"): 1 / 3,
                ("plain k0 model, Recursive ROAR masks", "0"): 2 / math.sqrt(6),
                ("masked-trained Recursive ROAR", "1"): 1.0}
    for (second, seed), value in expected.items():
        row = tau[("Recursive ROAR", second, seed)]
        assert math.isclose(float(row["tau"]), value, abs_tol=1e-6), (second, seed, row)
        assert row["n_measures"] == "3"
    # pairs among the substitutes too: plain vs masked k0 over ROAR masks, seed 0: (.1,.2,.3) vs (.4,.2,0): -1
    pair = tau[("plain k0 model, ROAR masks", "masked-trained k0 model, ROAR masks", "0")]
    assert math.isclose(float(pair["tau"]), -1.0, abs_tol=1e-6)

    compute = {(r["contender"], r["measure"]): r for r in read(out / "retrain_comparison_compute.csv")}
    assert math.isclose(float(compute[("plain k0 model, ROAR masks", "attention")]["ratio"]), 25.0)  # 300 / 12
    assert math.isclose(float(compute[("masked-trained k0 model, ROAR masks", "attention")]["ratio"]), 20.0)
    assert compute[("masked-trained k0 model, ROAR masks", "attention")]["needs_retraining"] == "False"
    assert float(compute[("masked-trained k0 model, ROAR masks", "attention")]["shared_train_seconds"]) == 90.0
    assert compute[("plain k0 model, ROAR masks", "gradient")]["seconds"] == ""  # no timing in the fixture: NaN

    assert [r["contender"] for r in read(out / "retrain_comparison_compute.csv")][:2] == [
        "Recursive ROAR", "plain k0 model, ROAR masks"]  # in the contenders' order
    text = (out / "retrain_comparison.md").read_text()
    assert "| attention | 50.0 [" in text and "| babi-1 | bilstm-attention | plain k0 model, ROAR masks | -1.00 | +1.00 | 3 |" in text
    assert (out / "retrain-comparison-babi-1-bilstm-attention.png").stat().st_size > 0


def test_bad_input_is_one_line(reports, tmp_path: Path):
    plain, _ = reports
    result = CliRunner().invoke(app, ["compare-retraining", "--plain", str(plain), "--masked", str(tmp_path / "nope"),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "nope not found; pass a study's report folder (reports/) or its points.csv" in " ".join(result.output.split())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "points.csv").write_text("dataset,model\nbabi-1,bilstm-attention\n")
    result = CliRunner().invoke(app, ["compare-retraining", "--plain", str(plain), "--masked", str(tmp_path / "bad"),
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "lacks column(s) measure, recursive" in result.output
    assert not (tmp_path / "out").exists()
