"""Studies side by side: one table of every study's RACU and curve points, with the settings each study
changes against the first one named (an ablation: one option switched back per study).

Each study's RACU is recomputed from its committed ``reports/points.csv`` against both random baselines
(the Recursive ROAR random curve, roar's, and the plain ROAR one, the official code's) where the study has
the chains for them, so that the baseline is one more row of an ablation, not another study to run.
Published values (a paper's RACU table, ``configs/published/``) join as rows of their own beside the
chains they report, against the baseline they were computed with.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd

from roar.config.catalog import RACU_BASELINES
from roar.config.layout import mode_name
from roar.config.params import STUDY_SECTIONS, Study, study_from_params
from roar.report.markdown import markdown_table, number, percent
from roar.report.tables import racu_per_seed, summarise_racu

COMPARISON_COLUMNS = ["study", "changes", "dataset", "model", "measure", "mode", "racu_baseline", "racu_mean",
                      "racu_low", "racu_high", "n_seeds", "interval"]
SETTINGS = ("fidelity", *STUDY_SECTIONS)  # the params that make a study's numbers
PUBLISHED_COLUMNS = ["dataset", "model", "measure", "mode", "racu_baseline", "racu", "racu_low", "racu_high",
                     "n_seeds", "source"]
IGNORED = {"study.name", "study.seeds"}  # a study's name and seeds are not settings of the method


def flat_settings(params: dict) -> dict[str, object]:
    """The params that make a study's numbers as ``section.key.key: value`` (a list is one value)."""
    flat: dict[str, object] = {}

    def walk(prefix: str, node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat[prefix] = node

    for name in SETTINGS:
        if name in params:
            walk(name, params[name])
    return {key: value for key, value in flat.items() if key not in IGNORED}


def changes(params: dict, reference: dict) -> str:
    """What ``params`` sets differently from ``reference``: ``key=value`` pairs, ``absent`` for a key it lacks."""
    mine, theirs = flat_settings(params), flat_settings(reference)
    diff = [f"{key}={mine.get(key, 'absent')}" for key in sorted(mine.keys() | theirs.keys())
            if mine.get(key, "absent") != theirs.get(key, "absent")]
    return ", ".join(diff) or "(reference)"


def racu_both_baselines(points: pd.DataFrame, study: Study) -> pd.DataFrame:
    """The study's RACU summary (mean and interval over its seeds) against each random baseline its points hold,
    with a column naming the baseline; a baseline without its random chain gives no rows."""
    tables = []
    for baseline in RACU_BASELINES:
        per_seed, _ = racu_per_seed(points, dataclasses.replace(study, racu_baseline=baseline))
        if not per_seed.empty:
            tables.append(summarise_racu(per_seed).assign(racu_baseline=baseline))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=COMPARISON_COLUMNS)


def compare_studies(studies: list[tuple[str, dict, pd.DataFrame]], ks: list[int],
                    published: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``studies``: (name, resolved params, points) with the reference first. Returns the RACU table
    (``COMPARISON_COLUMNS``) and the curve table: the mean retrained score at each of ``ks`` per chain.
    ``published`` (:func:`read_published`) adds its rows for the chains the studies have, without curve points."""
    reference = studies[0][1]
    racu_rows, curve_rows = [], []
    for name, params, points in studies:
        study = study_from_params(params)
        changed = changes(params, reference)
        racu = racu_both_baselines(points, study)
        for row in racu.to_dict("records"):
            racu_rows.append({"study": name, "changes": changed, "dataset": row["dataset"], "model": row["model"],
                              "measure": row["measure"], "mode": mode_name(row["recursive"])}
                             | {c: row[c] for c in COMPARISON_COLUMNS[6:]})
        retrained = points[points["curve"] == "retrained"] if "curve" in points else points
        for key, group in retrained.groupby(["dataset", "model", "measure", "recursive"], sort=True):
            means = group.groupby("k")["value"].mean()
            curve_rows.append({"study": name, "changes": changed, "dataset": key[0], "model": key[1], "measure": key[2],
                               "mode": mode_name(key[3]), "n_seeds": group["seed"].nunique()}
                              | {f"k{k}": means.get(k, math.nan) for k in ks})
    chains = {(c["dataset"], c["model"], c["measure"], c["mode"]) for c in curve_rows}
    for row in ([] if published is None else published.to_dict("records")):
        if (row["dataset"], row["model"], row["measure"], row["mode"]) not in chains:
            continue
        interval = "not available" if math.isnan(row["racu_low"]) else "published"
        info = {"study": row["source"], "changes": f"published values (interval {interval})",
                **{c: row[c] for c in ("dataset", "model", "measure", "mode")}}
        racu_rows.append(info | {"racu_baseline": row["racu_baseline"], "racu_mean": row["racu"],
                                 "racu_low": row["racu_low"], "racu_high": row["racu_high"], "n_seeds": row["n_seeds"],
                                 "interval": interval})
        curve_rows.append(info | {"n_seeds": row["n_seeds"]} | {f"k{k}": math.nan for k in ks})
    return pd.DataFrame(racu_rows, columns=COMPARISON_COLUMNS), pd.DataFrame(curve_rows)


def read_published(path: Path) -> pd.DataFrame:
    """Published RACU values (``PUBLISHED_COLUMNS``; the interval may be empty), or a one-line error naming
    what is wrong with the file."""
    if not path.is_file():
        raise FileNotFoundError(f"--published {path}: no such file")
    table = pd.read_csv(path)
    missing = [c for c in PUBLISHED_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(f"--published {path}: lacks the column(s) {', '.join(missing)}; "
                         f"expected {', '.join(PUBLISHED_COLUMNS)}")
    bad = table[~table["racu_baseline"].isin(RACU_BASELINES) | ~table["mode"].isin(("recursive", "roar"))]
    if not bad.empty:
        raise ValueError(f"--published {path}: row {bad.index[0] + 2} has mode {bad['mode'].iloc[0]!r} and "
                         f"racu_baseline {bad['racu_baseline'].iloc[0]!r}; allowed: recursive or roar, "
                         f"{' or '.join(RACU_BASELINES)}")
    return table.astype({"racu": float, "racu_low": float, "racu_high": float})


def comparison_markdown(racu: pd.DataFrame, curves: pd.DataFrame, ks: list[int]) -> str:
    """What each study changes against the first, then one table grouped by chain: each study's RACU against
    each baseline (mean and interval over its seeds; none for the random chains) and its mean score at ``ks``.
    ``seeds`` counts the seeds with curve points; a RACU over fewer (a seed whose random chain has not run yet)
    says its own ``n``, so a partial study never reads as averaged over more seeds than it is."""
    def cell(rows: pd.DataFrame, curve_seeds: int) -> str:
        """The RACU with its interval, and its seed count where fewer seeds than the curve's have a baseline."""
        if rows.empty:
            return "—"
        r = rows.iloc[0]
        interval = "" if math.isnan(r["racu_low"]) else f" [{percent(r['racu_low'])}, {percent(r['racu_high'])}]"
        fewer = f" (n={r['n_seeds']})" if r["n_seeds"] < curve_seeds else ""
        return f"{percent(r['racu_mean'])}{interval}{fewer}"

    order = list(dict.fromkeys(curves["study"]))
    lines = [f"- **{name}**: {curves.loc[curves['study'] == name, 'changes'].iloc[0]}" for name in order] + [""]
    header = ["measure", "mode", "study", "seeds", "RACU % vs recursive random", "RACU % vs plain random",
              *(f"k = {k}" for k in ks)]
    rows = []
    chains = curves.assign(position=curves["study"].map(order.index)).sort_values(
        ["dataset", "model", "measure", "mode", "position"], kind="stable")
    for c in chains.to_dict("records"):
        mine = racu[(racu["study"] == c["study"]) & (racu["dataset"] == c["dataset"]) & (racu["model"] == c["model"])
                    & (racu["measure"] == c["measure"]) & (racu["mode"] == c["mode"])]
        rows.append([c["measure"], c["mode"], c["study"], str(c["n_seeds"]),
                     *(cell(mine[mine["racu_baseline"] == b], c["n_seeds"]) for b in RACU_BASELINES),
                     *(number(c[f"k{k}"], ".3f") for k in ks)])
    return "\n".join(lines + markdown_table(header, rows)) + "\n"


def read_points(folder: Path, name: str) -> pd.DataFrame:
    """A study's committed ``reports/points.csv``, or a one-line error saying how to make it."""
    path = folder / "reports" / "points.csv"
    if not path.is_file():
        raise FileNotFoundError(f"study {name} has no {path}: run it first (`roar pipeline --study {name}`)")
    return pd.read_csv(path)
