"""roar study compare: the settings a study changes, its RACU against both random baselines, its curve points."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import pytest

from roar.config.params import load_params
from roar.report.comparison import changes, compare_studies, comparison_markdown, read_points, read_published

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


def test_a_racu_over_fewer_seeds_than_its_curve_says_its_own_n():
    # seed 1 has a gradient curve but no random chain yet (a study run in pieces): the RACU is seed 0's alone
    params = study_params(measures=["random", "gradient"], roar_measures=[], seeds=[0, 1])
    seed0 = points({("random", True): [1.0, 0.6, 0.2], ("gradient", True): [1.0, 0.2, 0.2]})
    seed1 = points({("gradient", True): [1.0, 0.4, 0.2]}).assign(seed=1)
    racu, curve_table = compare_studies([("ref", params, pd.concat([seed0, seed1], ignore_index=True))], [50])
    assert racu.iloc[0]["n_seeds"] == 1
    table = comparison_markdown(racu, curve_table, [50])
    assert "| gradient | recursive | ref | 2 | 50.0 (n=1) | — | 0.300 |" in table
    assert "| random | recursive | ref | 1 | — | — | 0.600 |" in table


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


def test_published_values_join_beside_the_chains_they_report(tmp_path):
    path = tmp_path / "paper.csv"
    path.write_text("dataset,model,measure,mode,racu_baseline,racu,racu_low,racu_high,n_seeds,source\n"
                    "babi-1,bilstm-attention,gradient,recursive,plain-random,0.661,,,5,Paper 2022\n"
                    "babi-1,bilstm-attention,attention,recursive,plain-random,0.665,0.6,0.7,5,Paper 2022\n")
    params = study_params(measures=["random", "gradient"], roar_measures=["random"])
    curves = {("random", True): [1.0, 0.6, 0.2], ("random", False): [1.0, 0.8, 0.2], ("gradient", True): [1.0, 0.2, 0.2]}
    racu, curve_table = compare_studies([("ref", params, points(curves))], [50], read_published(path))
    paper = racu[racu["study"] == "Paper 2022"]
    assert len(paper) == 1  # attention: no study has the chain
    assert paper.iloc[0]["racu_mean"] == pytest.approx(0.661) and paper.iloc[0]["interval"] == "not available"
    table = comparison_markdown(racu, curve_table, [50])
    assert "- **Paper 2022**: published values (interval not available)" in table
    # beside the study's row, in the plain-random column (ours: 60.0 % against the same baseline)
    assert ("| gradient | recursive | ref | 1 | 50.0 | 60.0 | 0.200 |\n"
            "| gradient | recursive | Paper 2022 | 5 | — | 66.1 | — |") in table


@pytest.mark.parametrize("text, message", [
    ("dataset,model,measure,mode,racu\n", r"lacks the column\(s\) racu_baseline, racu_low"),
    ("dataset,model,measure,mode,racu_baseline,racu,racu_low,racu_high,n_seeds,source\n"
     "babi-1,bilstm-attention,gradient,recursive,random,0.6,,,5,x\n",
     r"row 2 has mode 'recursive' and racu_baseline 'random'; allowed: recursive or roar, recursive-random or "
     r"plain-random"),
])
def test_a_bad_published_file_is_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "paper.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_published(path)


def test_the_committed_published_values_read():
    table = read_published(REPO / "configs/published/madsen-2022-racu.csv")
    assert set(table["measure"]) == {"attention", "gradient", "input-x-gradient", "integrated-gradient"}
