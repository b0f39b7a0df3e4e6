"""roar study compare: the settings a study changes, its RACU against both random baselines, its curve points."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import pytest

from roar.config.params import load_params
from roar.report.comparison import changes, compare_studies, comparison_markdown, read_points

REPO = Path(__file__).resolve().parents[3]


def study_params(**study) -> dict:
    params = copy.deepcopy(load_params(REPO / "params.yaml"))
    params["study"] |= {"datasets": ["babi-1"], "models": ["bilstm-attention"], "seeds": [0],
                        "steps": [50]} | study
    return params


def points(curves: dict[tuple[str, bool], list[float]]) -> pd.DataFrame:
    """Points of seed 0 at k = 0, 50, 100 for each (measure, recursive)."""
    return pd.DataFrame([{"dataset": "babi-1", "model": "bilstm-attention", "measure": measure, "recursive": recursive,
                          "strategy": "quantile", "seed": 0, "k": k, "metric": "accuracy", "value": value,
                          "curve": "retrained"}
                         for (measure, recursive), values in curves.items() for k, value in zip((0, 50, 100), values)])


def test_racu_against_both_baselines_and_the_changes_by_hand():
    # ks 0, 50, 100. Recursive random b = 1.0, 0.6, 0.2: area(b - b_I) = 50 * (0.8 + 0.4) / 2 + 50 * 0.4 / 2 = 40;
    # gradient p = 1.0, 0.2, 0.2: area(b - p) = 50 * 0.4 / 2 * 2 = 20 -> RACU 0.5. Plain random b = 1.0, 0.8, 0.2:
    # area(b - b_I) = 50 * 1.4 / 2 + 50 * 0.6 / 2 = 50, area(b - p) = 50 * 0.6 / 2 * 2 = 30 -> RACU 0.6.
    reference = study_params(measures=["random", "gradient"], roar_measures=["random"])
    changed = copy.deepcopy(reference)
    changed["importance"]["batch_size"] = 7
    changed["study"]["name"] = "another"  # a name is no setting
    curves = {("random", True): [1.0, 0.6, 0.2], ("random", False): [1.0, 0.8, 0.2], ("gradient", True): [1.0, 0.2, 0.2]}
    racu, curve_table = compare_studies([("ref", reference, points(curves)), ("other", changed, points(curves))],
                                        [50])
    ref = racu[racu["study"] == "ref"].set_index("racu_baseline")
    assert ref.loc["recursive-random", "racu_mean"] == pytest.approx(0.5)
    assert ref.loc["plain-random", "racu_mean"] == pytest.approx(0.6)
    assert math.isnan(ref.loc["plain-random", "racu_low"]) and ref.loc["plain-random", "n_seeds"] == 1
    assert set(racu["changes"]) == {"(reference)", "importance.batch_size=7"}
    k50 = curve_table.set_index(["study", "measure", "mode"])["k50"]
    assert k50[("other", "random", "roar")] == pytest.approx(0.8) and k50[("ref", "gradient", "recursive")] == 0.2
    table = comparison_markdown(racu, curve_table, [50])
    assert "- **other**: importance.batch_size=7" in table
    assert "| gradient | recursive | ref | 1 | 50.0 | 60.0 | 0.200 |" in table
    assert "| random | roar | other | 1 | — | — | 0.800 |" in table


def test_a_study_without_the_plain_random_chain_has_no_plain_baseline_racu():
    params = study_params(measures=["random", "gradient"], roar_measures=[])
    racu, _ = compare_studies([("ref", params, points({("random", True): [1.0, 0.6, 0.2],
                                                      ("gradient", True): [1.0, 0.2, 0.2]}))], [50])
    assert list(racu["racu_baseline"]) == ["recursive-random"]


def test_changes_name_keys_one_side_lacks():
    assert changes({"fidelity": "official", "study": {"name": "a"}}, {"study": {"name": "b"}}) == "fidelity=official"
    assert changes({"study": {"name": "a"}}, {"fidelity": "official"}) == "fidelity=absent"


def test_a_study_without_a_report_is_refused_in_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"study x has no .*points.csv: run it first \(`roar pipeline --study x`\)"):
        read_points(tmp_path, "x")


def test_the_command_refuses_bad_steps_and_compares_the_committed_default_study(monkeypatch):
    from typer.testing import CliRunner

    from roar.cli import app

    monkeypatch.chdir(REPO)
    bad = CliRunner().invoke(app, ["study", "compare", "default", "--k", "ten"])
    assert bad.exit_code != 0 and "--k 'ten': give masking steps as integers" in bad.output, bad.output
    result = CliRunner().invoke(app, ["study", "compare", "default", "--k", "10"])
    assert result.exit_code == 0, result.output
    committed = pd.read_csv(REPO / "reports" / "racu.csv").set_index("measure")["racu_mean"]
    assert f"| gradient | recursive | default | 3 | {100 * committed['gradient']:.1f} [" in result.output
