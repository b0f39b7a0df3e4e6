"""Is a masked-trained model's no-retrain curve a substitute for Recursive ROAR?

Compares two finished studies' reports: a *plain* study and its *masked* variant (the same study with
``train.<model>.<dataset>.mask_augment``, masked fine-tuning after Madsen et al. 2023). Per dataset,
model and measure it sets side by side (each as the mean of the unclipped per-seed RACU with its 95 %
interval, :func:`roar.report.noretrain.summarise_by_curve`):

* Recursive ROAR's RACU (plain study, retrained curve): the reference;
* the plain k = 0 model's no-retrain curve, and the masked-trained k = 0 model's, each over plain-ROAR
  masks (the k = 0 model's own importance: no retraining at all) and, where the study has them, over
  Recursive ROAR's masks (which only the retrained chain makes);
* the masked variant's own Recursive ROAR.

Rank agreement is Kendall's tau over the measures, per seed, between every pair of these rankings
(:func:`roar.report.noretrain.kendall`); compute is the seconds of each curve from the studies'
``noretrain_compute.csv`` (step records: training, importance, scoring; the shared k = 0 and
all-masked models' training, from ``compute.csv``, beside it).
"""

from __future__ import annotations

import math
from itertools import combinations
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from roar.core.errors import RoarError
from roar.report.noretrain import kendall, summarise_by_curve
from roar.config.catalog import strategy_spec
from roar.config.params import Study
from roar.report.markdown import MISSING, markdown_table, number, percent
from roar.report.tables import CHAIN_KEYS, RETRAINED, racu_per_seed

POINT_COLUMNS = ("dataset", "model", "measure", "recursive", "strategy", "seed", "k", "metric", "value", "curve")
SUMMARY_COLUMNS = ["dataset", "model", "measure", "contender", "study", "recursive", "curve", "racu_mean",
                   "racu_low", "racu_high", "n_seeds", "interval"]
SEED_COLUMNS = ["dataset", "model", "measure", "contender", "seed", "racu", "racu_unclipped"]
TAU_COLUMNS = ["dataset", "model", "seed", "first", "second", "n_measures", "tau", "p_value", "note"]
COMPUTE_COLUMNS = ["dataset", "model", "measure", "contender", "seconds", "scoring_seconds", "needs_retraining",
                   "ratio", "shared_train_seconds"]
STUDIES = ("plain", "masked")


class Contender(NamedTuple):
    """One ranking of the measures: a curve of one of the two studies."""

    name: str
    study: str  # plain or masked
    recursive: bool  # whose masks: Recursive ROAR's chain (True) or plain ROAR's (False)
    curve: str  # retrained, k0-model


REFERENCE = Contender("Recursive ROAR", "plain", True, RETRAINED)
CONTENDERS = (
    REFERENCE,
    Contender("plain k0 model, ROAR masks", "plain", False, "k0-model"),
    Contender("masked-trained k0 model, ROAR masks", "masked", False, "k0-model"),
    Contender("plain k0 model, Recursive ROAR masks", "plain", True, "k0-model"),
    Contender("masked-trained k0 model, Recursive ROAR masks", "masked", True, "k0-model"),
    Contender("masked-trained Recursive ROAR", "masked", True, RETRAINED),
)
STYLE = {c.name: color for c, color in zip(CONTENDERS, ("black", "tab:orange", "tab:blue", "moccasin", "lightblue",
                                                        "tab:gray"))}


def read_points(path: Path) -> tuple[pd.DataFrame, Path]:
    """A report's ``points.csv`` (``path`` is the file or its report folder) and the report folder;
    a missing file or column raises one line."""
    path = Path(path)
    file = path / "points.csv" if path.is_dir() else path
    if not file.is_file():
        raise RoarError(f"{file} not found; pass a study's report folder (reports/) or its points.csv")
    try:
        points = pd.read_csv(file)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise RoarError(f"{file} is not a points table ({str(error).splitlines()[0]}); rerun `roar report`") from error
    missing = [c for c in POINT_COLUMNS if c not in points]
    if missing:
        raise RoarError(f"{file} lacks column(s) {', '.join(missing)}; it needs {', '.join(POINT_COLUMNS)} "
                        "(a report of this version: rerun `roar report`)")
    points["recursive"] = points["recursive"].astype(str).str.lower() == "true"
    return points, file.parent


def study_of(points: pd.DataFrame, name: str) -> Study:
    """The study grid that made ``points``: its datasets, models, seeds and steps, the measures of its
    Recursive ROAR chains (``measures``) and of its plain ROAR chains (``roar_measures``)."""
    strategies = sorted(points["strategy"].unique())
    if len(strategies) != 1:
        raise RoarError(f"{name} points hold strategies {strategies}; compare studies of one strategy")
    strategy = strategies[0]
    end = strategy_spec(strategy).end_k
    ks = sorted(int(k) for k in points["k"].unique())
    return Study(name=name, datasets=sorted(points["dataset"].unique()), models=sorted(points["model"].unique()),
                 measures=sorted(points[points["recursive"]]["measure"].unique()),
                 roar_measures=sorted(points[~points["recursive"]]["measure"].unique()),
                 seeds=sorted(int(s) for s in points["seed"].unique()), strategy=strategy,
                 steps=[k for k in ks if k not in (0, end)])


def per_seed_racu(points: pd.DataFrame, study: Study, label: str) -> pd.DataFrame:
    """Per-seed RACU (:func:`roar.report.tables.racu_per_seed`) of every contender of study ``label``."""
    frames = []
    for contender in CONTENDERS:
        if contender.study != label:
            continue
        table = racu_per_seed(points, study, contender.curve)[0]
        table = table[table["recursive"] == contender.recursive]
        if not table.empty:
            frames.append(table.assign(contender=contender.name, study=label))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def compare(plain: pd.DataFrame, masked: pd.DataFrame, compute: dict[str, pd.DataFrame] | None = None,
            shared: dict[str, pd.DataFrame] | None = None) -> dict[str, pd.DataFrame]:
    """The comparison tables from the two studies' points (and their ``noretrain_compute.csv`` /
    ``compute.csv`` tables, by study label, where there are any).

    Returns ``seeds`` (per-seed RACU per contender), ``summary`` (mean and interval), ``tau`` (Kendall's tau
    per seed between every pair of contenders) and ``compute``.
    """
    studies = {"plain": plain, "masked": masked}
    grids = {label: study_of(points, label) for label, points in studies.items()}
    if grids["plain"].strategy != grids["masked"].strategy:
        raise RoarError(f"the plain study masks by {grids['plain'].strategy}, the masked one by "
                        f"{grids['masked'].strategy}; compare studies of one strategy")
    seeds = pd.concat([per_seed_racu(studies[s], grids[s], s) for s in STUDIES], ignore_index=True)
    if seeds.empty:
        raise RoarError("neither study has a complete curve with a RACU (see the reports' excluded.csv)")
    summary = []
    for contender in CONTENDERS:
        frame = seeds[seeds["contender"] == contender.name]
        if not frame.empty:
            summary.append(summarise_by_curve(frame.drop(columns=["contender", "study"])).assign(
                contender=contender.name, study=contender.study))
    return {"seeds": seeds[SEED_COLUMNS].reset_index(drop=True),
            "summary": pd.concat(summary, ignore_index=True)[SUMMARY_COLUMNS],
            "tau": rank_agreement_between_contenders(seeds),
            "compute": compute_by_contender(seeds, compute or {}, shared or {})}


def rank_agreement_between_contenders(seeds: pd.DataFrame) -> pd.DataFrame:
    """Kendall's tau-b per dataset, model and seed between every pair of contenders' rankings of the measures
    (by the unclipped per-seed RACU, over the measures both rank); the reference first."""
    order = {c.name: i for i, c in enumerate(CONTENDERS)}
    rows = []
    for (dataset, model, seed), frame in seeds.groupby(["dataset", "model", "seed"], sort=True):
        ranked = {name: group.set_index("measure")["racu_unclipped"]
                  for name, group in frame.groupby("contender", sort=False)}
        for first, second in combinations(sorted(ranked, key=order.get), 2):
            tau, p_value, n, note = kendall(ranked[first], ranked[second])
            rows.append({"dataset": dataset, "model": model, "seed": seed, "first": first, "second": second,
                         "n_measures": n, "tau": tau, "p_value": p_value, "note": note})
    return pd.DataFrame(rows, columns=TAU_COLUMNS)


def compute_by_contender(seeds: pd.DataFrame, compute: dict[str, pd.DataFrame],
                         shared: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Seconds of each contender per dataset/model/measure from its study's ``noretrain_compute.csv`` (NaN where
    the study has none), the Recursive ROAR / contender ratio, and the study's shared-model training seconds."""
    rows = []
    contenders = {c.name: c for c in CONTENDERS}
    order = {c.name: i for i, c in enumerate(CONTENDERS)}
    keys = sorted(seeds.groupby(["dataset", "model", "measure", "contender"]).groups,
                  key=lambda key: (*key[:3], order[key[3]]))
    for dataset, model, measure, name in keys:
        contender = contenders[name]
        table = compute.get(contender.study)
        match = pd.DataFrame() if table is None else table[
            (table["dataset"] == dataset) & (table["model"] == model) & (table["measure"] == measure)
            & (table["recursive"] == contender.recursive) & (table["curve"] == contender.curve)]
        models = shared.get(contender.study)
        models = pd.DataFrame() if models is None else models[
            (models["dataset"] == dataset) & (models["model"] == model) & (models["measure"] == "shared")]
        rows.append({"dataset": dataset, "model": model, "measure": measure, "contender": name,
                     "seconds": float(match["seconds"].iloc[0]) if len(match) else math.nan,
                     "scoring_seconds": float(match["scoring_seconds"].iloc[0]) if len(match) else math.nan,
                     "needs_retraining": bool(match["needs_retraining"].iloc[0]) if len(match) else contender.recursive,
                     "shared_train_seconds": float(models["train_seconds"].iloc[0]) if len(models) else math.nan})
    frame = pd.DataFrame(rows, columns=[c for c in COMPUTE_COLUMNS if c != "ratio"])
    reference = frame[frame["contender"] == REFERENCE.name].set_index(["dataset", "model", "measure"])["seconds"]
    frame.insert(COMPUTE_COLUMNS.index("ratio"), "ratio", [
        reference.get((r.dataset, r.model, r.measure), math.nan) / r.seconds if r.seconds > 0 else math.nan
        for r in frame.itertuples()])
    return frame


def read_table(folder: Path, name: str, columns: tuple[str, ...]) -> pd.DataFrame | None:
    """``folder/name`` (a report CSV) or None when the report has none; a table without ``columns`` raises."""
    file = folder / name
    if not file.is_file():
        return None
    table = pd.read_csv(file)
    missing = [c for c in columns if c not in table]
    if missing:
        raise RoarError(f"{file} lacks column(s) {', '.join(missing)}; rerun `roar report`")
    if "recursive" in table:
        table["recursive"] = table["recursive"].astype(str).str.lower() == "true"
    return table


def markdown(tables: dict[str, pd.DataFrame]) -> str:
    """The comparison as markdown: RACU per contender, tau per seed against Recursive ROAR, compute."""
    summary, tau, compute = tables["summary"], tables["tau"], tables["compute"]
    names = [c.name for c in CONTENDERS if c.name in set(summary["contender"])]
    lines = ["# Recursive ROAR beside no-retrain curves of a plain and a masked-trained model", ""]
    for (dataset, model), frame in summary.groupby(["dataset", "model"], sort=True):
        rows = []
        for measure, racu in frame.groupby("measure", sort=True):
            cells = []
            for name in names:
                cell = racu[racu["contender"] == name]
                cells.append("" if cell.empty else f"{percent(cell.iloc[0]['racu_mean'])} "
                             f"[{percent(cell.iloc[0]['racu_low'])}, {percent(cell.iloc[0]['racu_high'])}] "
                             f"(n={cell.iloc[0]['n_seeds']})")
            rows.append([measure, *cells])
        lines += [f"## RACU (%), {dataset}/{model}", "", *markdown_table(["measure", *names], rows)]
        lines += ["", "Mean over seeds of the unclipped per-seed RACU [95 % interval] (methods in "
                  "`retrain_comparison.csv`).", ""]
    versus = tau[tau["first"] == REFERENCE.name]
    if not versus.empty:
        seed_list = sorted(versus["seed"].unique())
        rows = []
        for (dataset, model, second), frame in versus.groupby(["dataset", "model", "second"], sort=False):
            cells = [number(frame[frame["seed"] == s]["tau"].iloc[0], "+.2f") if (frame["seed"] == s).any()
                     else MISSING for s in seed_list]
            rows.append([dataset, model, second, *cells, str(int(frame["n_measures"].max()))])
        lines += ["## Rank agreement with Recursive ROAR (Kendall's τ over measures, per seed)", "",
                  *markdown_table(["dataset", "model", "ranking", *(f"seed {s}" for s in seed_list), "measures"],
                                  rows)]
        lines += ["", "τ-b (scipy.stats.kendalltau) over the measures both rank (random excluded); — = undefined "
                  "(fewer than 2 measures or a ranking all ties). Every pair in `retrain_comparison_tau.csv`.", ""]
    if not compute.empty:
        header = ["dataset", "model", "measure", "ranking", "seconds", "of which scoring", "needs retraining",
                  "Recursive ROAR / ranking", "shared models' training (s)"]
        rows = [[r.dataset, r.model, r.measure, r.contender, number(r.seconds, ".1f"), number(r.scoring_seconds, ".2f"),
                 "yes" if r.needs_retraining else "no", number(r.ratio, ".1f"), number(r.shared_train_seconds, ".1f")]
                for r in compute.itertuples()]
        lines += ["## Compute", "", *markdown_table(header, rows)]
        lines += ["", "Seconds summed over seeds and steps from each study's `noretrain_compute.csv` (step records: "
                  "retraining = training + importance; a no-retrain curve = its scoring plus what its masks need). The "
                  "k = 0 model's training is not in them: the last column is the study's shared k = 0 and all-masked "
                  "models' training (`compute.csv`), where masked fine-tuning costs what it costs.", ""]
    return "\n".join(lines)


def figure(summary: pd.DataFrame, out: Path) -> list[Path]:
    """Per dataset and model: grouped bars, RACU per measure and contender, with the 95 % intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from roar.report.figures import legend_and_save

    written = []
    names = [c.name for c in CONTENDERS if c.name in set(summary["contender"])]
    for (dataset, model), frame in summary.groupby(["dataset", "model"], sort=True):
        measures = sorted(frame["measure"].unique())
        width = 0.8 / len(names)
        fig, ax = plt.subplots(figsize=(1.2 + 1.3 * len(measures), 3.6))
        for i, name in enumerate(names):
            rows = frame[frame["contender"] == name].set_index("measure").reindex(measures)
            x = np.arange(len(measures)) + (i - (len(names) - 1) / 2) * width
            mean = rows["racu_mean"].to_numpy(dtype=float) * 100
            error = np.vstack([mean - rows["racu_low"].to_numpy(dtype=float) * 100,
                               rows["racu_high"].to_numpy(dtype=float) * 100 - mean])
            ax.bar(x, mean, width, label=name, color=STYLE[name], edgecolor="black", linewidth=0.3)
            ax.errorbar(x, mean, yerr=np.nan_to_num(error), fmt="none", ecolor="black", linewidth=0.7, capsize=2)
        ax.set_xticks(np.arange(len(measures)), measures, fontsize=8)
        ax.set_ylabel("RACU (%)")
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_title(f"{dataset}, {model}: Recursive ROAR vs no-retrain curves", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
        written += legend_and_save(fig, ax, out, f"retrain-comparison-{dataset}-{model}")
    return written


def write_comparison(plain: Path, masked: Path, out: Path) -> dict[str, pd.DataFrame]:
    """Read both studies' reports, compare them and write ``retrain_comparison*.csv``, ``retrain_comparison.md``
    and the figures to ``out`` (each file atomically)."""
    from roar.core.fileio import write_text_atomic
    from roar.report.tables import _csv

    studies = {"plain": read_points(plain), "masked": read_points(masked)}
    compute = {s: read_table(folder, "noretrain_compute.csv", (*CHAIN_KEYS, "curve", "seconds", "scoring_seconds",
                                                               "needs_retraining"))
               for s, (_, folder) in studies.items()}
    shared = {s: read_table(folder, "compute.csv", ("dataset", "model", "measure", "train_seconds"))
              for s, (_, folder) in studies.items()}
    tables = compare(studies["plain"][0], studies["masked"][0], {s: t for s, t in compute.items() if t is not None},
                     {s: t for s, t in shared.items() if t is not None})
    out.mkdir(parents=True, exist_ok=True)
    for name, file in (("summary", "retrain_comparison"), ("seeds", "retrain_comparison_seeds"),
                       ("tau", "retrain_comparison_tau"), ("compute", "retrain_comparison_compute")):
        write_text_atomic(out / f"{file}.csv", _csv(tables[name]))
    write_text_atomic(out / "retrain_comparison.md", markdown(tables))
    figure(tables["summary"], out)
    return tables
