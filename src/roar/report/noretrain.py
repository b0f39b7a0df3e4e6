"""The no-retrain section of the report: what retraining buys.

Every chain step also scores its masked test data with the k = 0 model (``k0-model``: for plain
ROAR the classic deletion / comprehensiveness curve) and with the previous step's model
(``previous-model``: for Recursive ROAR the model whose importance made the mask; for plain ROAR
the model retrained one step earlier). This module gives those curves the RACU of the retrained
curve (same formula, against the random measure's same no-retrain curve), ranks the measures by
each curve and compares the rankings with Recursive ROAR's (Kendall's tau per seed), and sets the
compute each curve needs beside the retraining.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from roar.config.catalog import strategy_spec
from roar.config.params import Study
from roar.config.layout import mode_title
from roar.pipeline.step_record import StepRecord
from roar.report.markdown import markdown_table, number, percent
from roar.report.tables import (CHAIN_KEYS, RACU_SEED_COLUMNS, RETRAINED, racu_per_seed, summarise_curves,
                         summarise_racu)

NO_RETRAIN_CURVES = ("k0-model", "previous-model")
CURVE_STYLE = {RETRAINED: {"color": "black"}, "k0-model": {"color": "tab:orange", "linestyle": "--"},
               "previous-model": {"color": "tab:blue", "linestyle": ":"}}
NO_RETRAIN_FILES = ("noretrain", "noretrain_tau", "noretrain_compute")
SUMMARY_COLUMNS = [*CHAIN_KEYS, "curve", "racu_mean", "racu_low", "racu_high", "n_seeds", "interval"]
TAU_COLUMNS = ["dataset", "model", "strategy", "seed", "recursive", "curve", "n_measures", "tau", "p_value", "note"]
COMPUTE_COLUMNS = [*CHAIN_KEYS, "curve", "seconds", "scoring_seconds", "needs_retraining", "ratio"]
AGREE = 0.999  # tau at or above this: the same ranking (tau-b is 1 for identical strict rankings)


def curve_name(recursive: bool, curve: str) -> str:
    """``Recursive ROAR retrained``, ``ROAR k0-model`` (the deletion curve), ..."""
    return f"{mode_title(recursive)} {curve}" + (" (deletion curve)" if curve == "k0-model" and not recursive else "")


def no_retrain_tables(records: list[StepRecord], points: pd.DataFrame, study: Study,
                      per_seed: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The section's tables from the points (with ``curve``) and the retrained curve's per-seed RACU.

    Returns ``noretrain_racu_seeds`` (the no-retrain curves' per-seed RACU, ``RACU_SEED_COLUMNS``),
    ``noretrain`` (RACU summary of every curve, the retrained one included), ``noretrain_tau``,
    ``noretrain_compute`` and ``noretrain_curves`` (mean curves for the figure).
    """
    frames = [racu_per_seed(points, study, curve)[0] for curve in NO_RETRAIN_CURVES]
    no_retrain = pd.concat([f for f in frames if not f.empty], ignore_index=True) if any(
        not f.empty for f in frames) else pd.DataFrame(columns=RACU_SEED_COLUMNS)
    every = pd.concat([per_seed, no_retrain], ignore_index=True) if not no_retrain.empty else per_seed
    curves = []
    for curve, frame in points.groupby("curve", sort=True):
        curves.append(summarise_curves(frame.drop(columns="curve")).assign(curve=curve))
    return {"noretrain_racu_seeds": no_retrain, "noretrain": summarise_by_curve(every),
            "noretrain_tau": rank_agreement_with_recursive_roar(every),
            "noretrain_compute": compute_by_curve(records, study),
            "noretrain_curves": pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()}


def summarise_by_curve(per_seed: pd.DataFrame) -> pd.DataFrame:
    """:func:`roar.report.tables.summarise_racu` per curve (mean of the unclipped per-seed RACU, its interval)."""
    frames = [summarise_racu(frame).assign(curve=curve) for curve, frame in per_seed.groupby("curve", sort=True)]
    if not frames:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    return pd.concat(frames, ignore_index=True)[SUMMARY_COLUMNS]


def kendall(reference: pd.Series, other: pd.Series) -> tuple[float, float, int, str]:
    """Kendall's tau-b between two rankings of measures (``measure -> RACU``) over the measures both have.

    Returns ``(tau, p_value, n_measures, note)``; tau is NaN with a note when fewer than 2 measures
    are shared or one ranking is all ties (tau-b corrects for partial ties).
    """
    from scipy.stats import kendalltau

    both = pd.concat([reference.rename("a"), other.rename("b")], axis=1).dropna()
    n = len(both)
    if n < 2:
        return math.nan, math.nan, n, "fewer than 2 measures: no ranking to compare"
    if both["a"].nunique() == 1 or both["b"].nunique() == 1:
        return math.nan, math.nan, n, "one ranking is all ties: tau undefined"
    result = kendalltau(both["a"], both["b"])
    note = "ties in a ranking (tau-b)" if both["a"].nunique() < n or both["b"].nunique() < n else ""
    return float(result.statistic), float(result.pvalue), n, note


def rank_agreement_with_recursive_roar(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, model and seed: Kendall's tau between the measures' ranking by Recursive ROAR's RACU
    (unclipped) and by every other curve (plain ROAR's retrained curve and the no-retrain curves)."""
    rows = []
    for (dataset, model, strategy, seed), frame in per_seed.groupby(["dataset", "model", "strategy", "seed"],
                                                                    sort=True):
        ranked = {key: group.set_index("measure")["racu_unclipped"]
                  for key, group in frame.groupby(["recursive", "curve"], sort=True)}
        reference = ranked.get((True, RETRAINED))
        if reference is None:
            continue
        for (recursive, curve), values in sorted(ranked.items(), key=lambda item: (not item[0][0], item[0][1])):
            if (recursive, curve) == (True, RETRAINED):
                continue
            tau, p_value, n, note = kendall(reference, values)
            rows.append({"dataset": dataset, "model": model, "strategy": strategy, "seed": seed,
                         "recursive": recursive, "curve": curve, "n_measures": n, "tau": tau, "p_value": p_value,
                         "note": note})
    return pd.DataFrame(rows, columns=TAU_COLUMNS)


def compute_by_curve(records: list[StepRecord], study: Study) -> pd.DataFrame:
    """Seconds each curve of each chain needs, summed over the study's seeds and steps (step records).

    Retrained: training + importance. Plain ROAR's k0-model curve (deletion): its importance (one pass by
    the k = 0 model; the chain computes it on every split, a standalone curve needs only test) + scoring.
    Every other no-retrain curve scores masks or models that only the retrained chain makes, so it costs
    the chain's training and importance + its scoring (``needs_retraining``). ``ratio`` = seconds of the
    Recursive ROAR retrained curve of the same dataset/model/measure / the curve's seconds.
    """
    sums: dict[tuple, dict] = {}
    wanted = set(study.chain_modes)
    for r in records:
        if (r.is_shared or (r.measure, r.recursive) not in wanted or r.seed not in study.seeds
                or r.k not in study.steps or r.dataset not in study.datasets or r.model not in study.models
                or r.strategy != study.strategy):
            continue
        key = tuple(getattr(r, c) for c in CHAIN_KEYS)
        entry = sums.setdefault(key, {"train": 0.0, "importance": 0.0, **{c: 0.0 for c in NO_RETRAIN_CURVES},
                                      "scored": set()})
        entry["train"] += float(r.run.train_seconds or 0.0)
        entry["importance"] += float(r.run.importance_seconds or 0.0)
        for scores, seconds in ((r.no_retrain or {}, r.run.scoring_seconds),
                                (r.no_retrain_end or {}, r.run.end_scoring_seconds)):
            for curve in NO_RETRAIN_CURVES:
                if curve in scores:
                    entry[curve] += seconds.get(curve, 0.0)
                    entry["scored"].add(curve)
    rows = []
    for key, entry in sorted(sums.items()):
        info = dict(zip(CHAIN_KEYS, key))
        retraining = entry["train"] + entry["importance"]
        rows.append(info | {"curve": RETRAINED, "seconds": retraining, "scoring_seconds": 0.0,
                            "needs_retraining": True})
        for curve in sorted(entry["scored"]):
            deletion = curve == "k0-model" and not info["recursive"]
            base = entry["importance"] if deletion else retraining
            rows.append(info | {"curve": curve, "seconds": base + entry[curve], "scoring_seconds": entry[curve],
                                "needs_retraining": not deletion})
    frame = pd.DataFrame(rows, columns=COMPUTE_COLUMNS[:-1])
    reference = frame[frame["recursive"].astype(bool) & (frame["curve"] == RETRAINED)].set_index(
        ["dataset", "model", "measure", "strategy"])["seconds"]
    frame["ratio"] = [reference.get((r.dataset, r.model, r.measure, r.strategy), math.nan) / r.seconds
                      if r.seconds > 0 else math.nan for r in frame.itertuples()]
    return frame


def conclusions(tau: pd.DataFrame, compute: pd.DataFrame) -> list[str]:
    """One line per dataset/model and compared curve, from the numbers: in how many seeds it ranks the
    measures as Recursive ROAR does, its mean tau, and how much less compute it needs."""
    lines = []
    for (dataset, model, recursive, curve), frame in tau.groupby(["dataset", "model", "recursive", "curve"],
                                                                 sort=True):
        valid = frame.dropna(subset=["tau"])
        name = curve_name(recursive, curve)
        if valid.empty:
            lines.append(f"* {dataset}/{model}, {name}: no tau ({'; '.join(sorted(set(frame['note'])))}).")
            continue
        same = int((valid["tau"] >= AGREE).sum())
        cost = compute[(compute["dataset"] == dataset) & (compute["model"] == model)
                       & (compute["recursive"] == recursive) & (compute["curve"] == curve)]
        ratio = cost["ratio"].median() if not cost.empty else math.nan
        if curve == RETRAINED and not recursive:  # plain ROAR: a chain of its own, importance once
            price = (f"it retrains at every step but computes the importance once, with the k = 0 model: "
                     f"{ratio:.1f}× less compute than Recursive ROAR (median over measures)")
        elif cost.empty or cost["needs_retraining"].all():
            price = "it needs the retrained chain, so it saves no compute"
        else:
            price = f"at {ratio:.0f}× less compute than Recursive ROAR (median over measures)"
        verdict = ("ranks the measures as Recursive ROAR does" if same == len(valid) else
                   "ranks the measures differently from Recursive ROAR" if same == 0 else
                   "ranks the measures as Recursive ROAR does in some seeds only")
        lines.append(f"* {dataset}/{model}, {name}: {verdict}: same ranking in {same} of {len(valid)} seeds, "
                     f"mean τ = {valid['tau'].mean():+.2f} over {int(valid['n_measures'].max())} measures; {price}.")
    return lines


def no_retrain_markdown(tables: dict[str, pd.DataFrame]) -> str:
    """The README section: the three-way RACU table, tau per seed, compute, and what follows from them."""
    summary, tau, compute = tables["noretrain"], tables["noretrain_tau"], tables["noretrain_compute"]
    lines = [
        "Besides the retrained model, every step scores its masked test data with the **k = 0 model** (`k0-model`; "
        "on plain ROAR masks this is the classic deletion/comprehensiveness curve, out of distribution for the "
        "model) and with the **previous step's model** (`previous-model`; in Recursive ROAR the model whose "
        "importance made the mask, in plain ROAR the model retrained one step earlier; at the first step both are "
        "the k = 0 model). Their RACU uses the same formula against the random measure's same no-retrain curve "
        "(`noretrain.csv`, per seed in `racu_seeds.csv`, points in `points.csv` by `curve`).", ""]
    if summary.empty:
        return "\n".join(lines + ["No RACU of any curve (see Left out).", ""])
    columns = [(r, c) for r, c in sorted({(bool(r), c) for r, c in zip(summary["recursive"], summary["curve"])},
                                         key=lambda rc: (not rc[0], rc[1] != RETRAINED, rc[1]))]
    for (dataset, model), frame in summary.groupby(["dataset", "model"], sort=True):
        rows = []
        for measure, racu in frame.groupby("measure", sort=True):
            cells = []
            for recursive, curve in columns:
                cell = racu[(racu["recursive"] == recursive) & (racu["curve"] == curve)]
                cells.append("" if cell.empty
                             else f"{percent(cell.iloc[0]['racu_mean'])} (n={cell.iloc[0]['n_seeds']})")
            rows.append([measure, *cells])
        lines += [f"### RACU (%) by curve, {dataset}/{model}", "",
                  *markdown_table(["measure", *(curve_name(r, c) for r, c in columns)], rows)]
        lines += ["", "Mean over seeds of the unclipped per-seed RACU; intervals in `noretrain.csv`.", ""]
    if not tau.empty:
        seeds = sorted(tau["seed"].unique())
        rows = []
        for (dataset, model, recursive, curve), frame in tau.groupby(["dataset", "model", "recursive", "curve"],
                                                                     sort=True):
            cells = [number(frame[frame["seed"] == s]["tau"].iloc[0], "+.2f") if (frame["seed"] == s).any() else ""
                     for s in seeds]
            rows.append([dataset, model, curve_name(recursive, curve), *cells, str(int(frame["n_measures"].max()))])
        lines += ["### Rank agreement with Recursive ROAR (Kendall's τ over measures, per seed)", "",
                  *markdown_table(["dataset", "model", "curve", *(f"seed {s}" for s in seeds), "measures"], rows)]
        lines += ["", "τ-b (scipy.stats.kendalltau) between the measures' ranking by Recursive ROAR's unclipped RACU "
                  "and by the curve's, over the measures with a RACU in both (random excluded); — = undefined: fewer "
                  "than 2 measures or one ranking all ties (`noretrain_tau.csv`, column `note`). 1 = same order, "
                  "−1 = reversed.", ""]
    if not compute.empty:
        header = ["dataset", "model", "measure", "curve", "seconds", "of which scoring", "needs retraining",
                  "Recursive ROAR / curve"]
        rows = [[r.dataset, r.model, r.measure, curve_name(r.recursive, r.curve), f"{r.seconds:.1f}",
                 f"{r.scoring_seconds:.2f}", "yes" if r.needs_retraining else "no", number(r.ratio, ".1f")]
                for r in compute.itertuples()]
        lines += ["### Compute per curve", "", *markdown_table(header, rows)]
        lines += ["", "Seconds summed over seeds and steps from the step records: retraining = training + importance; "
                  "a no-retrain curve = its scoring (model load and forward pass over the masked test split) plus what "
                  "its masks need: the k = 0 model's importance once for plain ROAR's deletion curve (the chain "
                  "computes it on every split: an upper bound), the whole retrained chain otherwise. The shared "
                  "k = 0 model's training is common to all and not counted.", ""]
    if not tau.empty:
        lines += ["### What follows", "", *conclusions(tau, compute), ""]
    return "\n".join(lines)


def no_retrain_figures(curves: pd.DataFrame, out: Path) -> list[Path]:
    """Per dataset and model: a panel per mode and measure, a line per curve (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from roar.report.figures import legend_and_save

    written = []
    if curves.empty or curves["curve"].nunique() < 2:
        return written
    for (dataset, model), frame in curves.groupby(["dataset", "model"], sort=True):
        panels = sorted({(bool(r), m) for r, m in zip(frame["recursive"], frame["measure"])},
                        key=lambda p: (not p[0], p[1] != "random", p[1]))
        columns = min(len(panels), 4)
        rows = math.ceil(len(panels) / columns)
        fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.2 * rows), squeeze=False, sharey=True)
        for ax, (recursive, measure) in zip(axes.flat, panels):
            panel = frame[(frame["recursive"] == recursive) & (frame["measure"] == measure)]
            for curve, line in sorted(panel.groupby("curve"), key=lambda item: item[0] != RETRAINED):
                line = line.sort_values("k")
                ax.plot(line["k"], line["mean"], marker="o", markersize=2, label=curve, **CURVE_STYLE.get(curve, {}))
            ax.set_title(f"{measure} ({mode_title(recursive)})", fontsize=9)
            ax.set_xlabel(strategy_spec(panel["strategy"].iloc[0]).axis_label, fontsize=8)
            ax.grid(alpha=0.3)
        for ax in axes.flat[len(panels):]:
            ax.axis("off")
        for row in axes:
            row[0].set_ylabel(frame["metric"].iloc[0])
        fig.suptitle(f"{dataset}, {model}: retrained vs no-retrain curves (mean over seeds)", fontsize=10)
        written += legend_and_save(fig, axes.flat[0], out, f"noretrain-{dataset}-{model}")
    return written
