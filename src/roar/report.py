"""Turn per-point results into the study's tables (points, curves, RACU)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from roar.fileio import write_text_atomic
from roar.params import Study, study_from_params
from roar.racu import mean_ci, racu

POINT_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "seed", "k", "metric", "value"]
CURVE_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "k", "metric", "mean", "low", "high", "n_seeds"]
RACU_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "racu_mean", "racu_low", "racu_high", "n_seeds"]
CHAIN_KEYS = ["dataset", "model", "measure", "recursive", "strategy"]


def read_records(results: Path) -> list[dict]:
    """Every per-point result JSON under ``results`` (sorted by path, so order is stable)."""
    if not results.is_dir():
        raise FileNotFoundError(f"results folder {results} not found; run the pipeline first (dvc repro)")
    return [json.loads(p.read_text()) for p in sorted(results.rglob("*.json"))]


def collect_points(records: list[dict], study: Study) -> pd.DataFrame:
    """One row per curve point and seed; shared points (k = 0, all masked) join every chain."""
    shared = [r for r in records if r["measure"] == "shared"]
    chains = [r for r in records if r["measure"] != "shared"]
    rows = []
    wanted = {(m, True) for m in study.measures} | {(m, False) for m in study.roar_measures}
    for r in chains:
        if (r["dataset"] in study.datasets and r["model"] in study.models and r["seed"] in study.seeds
                and (r["measure"], r["recursive"]) in wanted and r["k"] in study.steps
                and r["strategy"] == study.strategy):
            rows.append({c: r[c] for c in POINT_COLUMNS})
    chain_ids = {tuple(row[c] for c in CHAIN_KEYS) + (row["seed"],) for row in rows}
    for r in shared:
        if r["k"] not in (0, study.end_k) or r["strategy"] != study.strategy:
            continue
        for dataset, model, measure, recursive, strategy, seed in chain_ids:
            if (dataset, model, seed) == (r["dataset"], r["model"], r["seed"]):
                rows.append({**{c: r[c] for c in POINT_COLUMNS}, "measure": measure, "recursive": recursive})
    points = pd.DataFrame(rows, columns=POINT_COLUMNS)
    points["recursive"] = points["recursive"].astype(bool)
    return points.sort_values(["dataset", "model", "measure", "recursive", "strategy", "seed", "k"]).reset_index(drop=True)


def summarise_curves(points: pd.DataFrame) -> pd.DataFrame:
    """Mean and 95 % CI over seeds of every curve point."""
    rows = []
    for key, group in points.groupby(CHAIN_KEYS + ["k", "metric"], sort=True):
        ci = mean_ci(group["value"].to_numpy())
        rows.append(dict(zip(CHAIN_KEYS + ["k", "metric"], key)) | {"mean": ci.mean, "low": ci.low, "high": ci.high,
                                                                     "n_seeds": ci.n})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def racu_per_seed(points: pd.DataFrame) -> pd.DataFrame:
    """RACU of every (chain, seed) against the random chain of the same dataset, model and seed."""
    rows = []
    random = points[points["measure"] == "random"]
    for key, group in points[points["measure"] != "random"].groupby(CHAIN_KEYS + ["seed"], sort=True):
        info = dict(zip(CHAIN_KEYS + ["seed"], key))
        base = random[(random["dataset"] == info["dataset"]) & (random["model"] == info["model"])
                      & (random["strategy"] == info["strategy"]) & (random["seed"] == info["seed"])]
        base = base.drop_duplicates("k").set_index("k")["value"]
        curve = group.set_index("k")["value"].sort_index()
        if not curve.index.isin(base.index).all() or len(curve) < 2:
            continue  # no complete random curve of this seed to compare with
        rows.append(info | {"racu": racu(curve.index.to_numpy(), curve.to_numpy(), base.loc[curve.index].to_numpy())})
    return pd.DataFrame(rows, columns=CHAIN_KEYS + ["seed", "racu"])


def summarise_racu(per_seed: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for key, group in per_seed.groupby(CHAIN_KEYS, sort=True):
        ci = mean_ci(group["racu"].to_numpy())
        rows.append(dict(zip(CHAIN_KEYS, key)) | {"racu_mean": ci.mean, "racu_low": ci.low, "racu_high": ci.high,
                                                  "n_seeds": ci.n})
    return pd.DataFrame(rows, columns=RACU_COLUMNS)


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def _mode(recursive: bool) -> str:
    return "recursive" if recursive else "roar"


def _cell(row: pd.Series) -> str:
    """``mean (+up/-down)`` in percent, as the paper prints RACU."""
    mean, up, down = 100 * row["racu_mean"], 100 * (row["racu_high"] - row["racu_mean"]), 100 * (row["racu_mean"] - row["racu_low"])
    return f"{mean:.1f} (+{up:.1f}/−{down:.1f})"


def racu_markdown(racu: pd.DataFrame) -> str:
    """Paper-style tables: a row per dataset and measure, a column per model, one table per mode."""
    models = sorted(racu["model"].unique())
    parts = []
    for recursive, frame in racu.groupby("recursive", sort=False):
        parts.append(f"### RACU (%), {'Recursive ROAR' if recursive else 'ROAR'}\n")
        parts.append("| dataset | measure | " + " | ".join(models) + " |")
        parts.append("|---|---|" + "---|" * len(models))
        for (dataset, measure), rows in frame.groupby(["dataset", "measure"], sort=True):
            cells = [_cell(rows[rows["model"] == m].iloc[0]) if (rows["model"] == m).any() else "" for m in models]
            parts.append(f"| {dataset} | {measure} | " + " | ".join(cells) + " |")
        parts.append("")
    return "\n".join(parts)


def racu_tex(racu: pd.DataFrame) -> str:
    """The same tables as LaTeX tabulars."""
    models = sorted(racu["model"].unique())
    parts = []
    for recursive, frame in racu.groupby("recursive", sort=False):
        parts += [f"% RACU (%), {'Recursive ROAR' if recursive else 'ROAR'}",
                  "\\begin{tabular}{ll" + "r" * len(models) + "}", "\\toprule",
                  "Dataset & Measure & " + " & ".join(models) + " \\\\", "\\midrule"]
        for (dataset, measure), rows in frame.groupby(["dataset", "measure"], sort=True):
            cells = []
            for m in models:
                match = rows[rows["model"] == m]
                if match.empty:
                    cells.append("")
                    continue
                r = match.iloc[0]
                cells.append(f"${100 * r['racu_mean']:.1f}^{{+{100 * (r['racu_high'] - r['racu_mean']):.1f}}}"
                             f"_{{-{100 * (r['racu_mean'] - r['racu_low']):.1f}}}$")
            parts.append(f"{dataset} & {measure} & " + " & ".join(cells) + " \\\\")
        parts += ["\\bottomrule", "\\end{tabular}", ""]
    return "\n".join(parts)


def racu_metrics(racu: pd.DataFrame) -> dict:
    """Nested ``{dataset: {model: {mode: {measure: {mean, low, high}}}}}`` for ``dvc metrics``."""
    tree: dict = {}
    for _, r in racu.iterrows():
        leaf = tree.setdefault(r["dataset"], {}).setdefault(r["model"], {}).setdefault(_mode(r["recursive"]), {})
        leaf[r["measure"]] = {"racu_mean": round(float(r["racu_mean"]), 6), "racu_low": round(float(r["racu_low"]), 6),
                              "racu_high": round(float(r["racu_high"]), 6), "n_seeds": int(r["n_seeds"])}
    return tree


def write_plot_data(curves: pd.DataFrame, out: Path) -> None:
    """``plots/<dataset>_<model>_<mode>/<measure>.csv`` (k, mean, low, high): a line per measure in ``dvc plots``."""
    for (dataset, model, recursive, measure), frame in curves.groupby(["dataset", "model", "recursive", "measure"]):
        path = out / "plots" / f"{dataset}_{model}_{_mode(recursive)}" / f"{measure}.csv"
        write_text_atomic(path, _csv(frame[["k", "mean", "low", "high"]].sort_values("k")))


def report_readme(study: Study, params: dict, tables: dict[str, pd.DataFrame], figures: list[Path], commit: str) -> str:
    """The human report: settings, seeds, commit, tables, figures, and where each number comes from."""
    points = tables["points"]
    lines = [f"# Report: {study.name}", "",
             f"Generated by `roar report` at git commit `{commit or 'unknown'}` from the per-point results under "
             "`results/` (one JSON per curve point, written by the chain stages beside their outputs' content hashes).",
             "", "## Settings", "",
             f"* datasets: {', '.join(study.datasets)}; models: {', '.join(study.models)}",
             f"* measures (Recursive ROAR): {', '.join(study.measures)}",
             f"* measures (plain ROAR): {', '.join(study.roar_measures) or 'none'}",
             f"* seeds: {', '.join(map(str, study.seeds))} ({len(study.seeds)}); strategy: {study.strategy}; "
             f"steps: 0, {', '.join(map(str, study.steps))}" + (f", {study.end_k}" if study.end_k else ""),
             f"* curve points: {len(points)} (`points.csv`), metric: {', '.join(sorted(points['metric'].unique()))}",
             "", "## Faithfulness (RACU)", "",
             "RACU = area(random - measure) / area(random - random at 100 %), per seed against the random curve of "
             "the same seed, clipped to [-1, 1]; mean over seeds with a 95 % BCa bootstrap interval "
             "(9,999 resamples, fixed RNG). 100 % = as faithful as possible, 0 = no better than random.", "",
             racu_markdown(tables["racu"]), "## Performance curves", ""]
    for path in figures:
        if path.suffix == ".png":
            lines += [f"![{path.stem}](figures/{path.name})", ""]
    lines += ["## Files", "",
              "* `points.csv`: one row per curve point and seed (the numbers every other file is computed from)",
              "* `curves.csv`: mean and 95 % CI over seeds per point; `racu.csv`: RACU per chain (fractions)",
              "* `racu.md`, `racu.tex`: the RACU tables; `figures/`: PNG and PDF figures",
              "* `roar audit DATASET MODEL MEASURE SEED K` prints the data and model versions behind any point", ""]
    return "\n".join(lines)


def write_report(params: dict, results: Path, out: Path, commit: str = "") -> dict[str, pd.DataFrame]:
    """Write the tables, figures, DVC metrics/plots data and ``README.md`` under ``out`` (atomically)."""
    import json

    from roar.figures import curve_figures, racu_figure

    study = study_from_params(params)
    points = collect_points(read_records(results), study)
    if points.empty:
        raise ValueError(f"no results of study {study.name!r} under {results}")
    tables = {"points": points, "curves": summarise_curves(points), "racu": summarise_racu(racu_per_seed(points))}
    for name, frame in tables.items():
        write_text_atomic(out / f"{name}.csv", _csv(frame))
    write_text_atomic(out / "racu.md", racu_markdown(tables["racu"]))
    write_text_atomic(out / "racu.tex", racu_tex(tables["racu"]))
    write_text_atomic(out / "racu.json", json.dumps(racu_metrics(tables["racu"]), indent=2, sort_keys=True) + "\n")
    write_plot_data(tables["curves"], out)
    figures = curve_figures(tables["curves"], out / "figures") + racu_figure(tables["racu"], out / "figures")
    write_text_atomic(out / "README.md", report_readme(study, params, tables, figures, commit))
    return tables
