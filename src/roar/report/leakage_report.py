"""The label-leak section of the report: the diagnostics of :mod:`roar.method.leakage` per chain and k,
beside the curves, with every step where the curve rises although more is masked."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from roar.config.catalog import strategy_spec
from roar.config.params import Study
from roar.config.layout import mode_name, mode_title
from roar.pipeline.step_record import StepRecord
from roar.report.markdown import markdown_table, percent

CHAIN_KEYS = ["dataset", "model", "measure", "recursive", "strategy"]
DIAGNOSTICS = ["mask_probe", "majority", "label_word_absent", "other_labels_visible", "predicted_is_gold_test"]
LEAK_COLUMNS = [*CHAIN_KEYS, "k", "metric_mean", "metric_rise", "rises", "at_floor", *DIAGNOSTICS, "n_seeds"]
# A curve "rises" at k when its mean over seeds is this much above the mean at the previous k (absolute,
# in metric units). Near chance, retrained bAbI models move by 2-3 points from step to step (the
# default study's attention and random curves); the leak's rises are 30-40 points.
RISE = 0.05
# "answer absent" is reported only where the gold answer word is in (nearly) every unmasked first
# sequence at the smallest k (bAbI: the answer is a location named in the story).
ANSWER_IN_TEXT = 0.01
# A step's model is "at the floor" when its mean score is at most this much above the all-masked (k = 100)
# model's: it has learnt nothing the question alone does not give, as a constant prediction. Two standard errors
# of a share near 0.15 on bAbI's 1,000 test questions are 0.023.
FLOOR = 0.02


def collect_leakage(records: list[StepRecord], study: Study, points: pd.DataFrame) -> pd.DataFrame:
    """One row per curve point and seed of ``points`` with the diagnostics of its dataset (shared k = 0 and
    all-masked points take the reference records' values)."""
    by_point: dict[tuple, dict] = {}
    for r in records:
        if r.leakage is None:
            continue
        values = {**r.leakage, "predicted_is_gold_test": r.explained.get("test", math.nan)}
        if r.is_shared:
            by_point[("shared", r.dataset, r.model, r.seed, r.k)] = values
        else:
            by_point[(r.measure, r.recursive, r.dataset, r.model, r.seed, r.k)] = values
    rows = []
    for p in points.itertuples(index=False):
        values = by_point.get((p.measure, p.recursive, p.dataset, p.model, p.seed, p.k),
                              by_point.get(("shared", p.dataset, p.model, p.seed, p.k)))
        if values is None:
            continue
        rows.append({**{c: getattr(p, c) for c in [*CHAIN_KEYS, "seed", "k", "value"]},
                     **{d: values.get(d, math.nan) for d in DIAGNOSTICS}})
    return pd.DataFrame(rows, columns=[*CHAIN_KEYS, "seed", "k", "value", *DIAGNOSTICS])


def summarise_leakage(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Means over seeds per chain and k; ``metric_rise`` = the mean curve at k minus its lowest value at
    any smaller k (a slow climb counts as much as a jump), and the ``rises`` flag above :data:`RISE`;
    ``at_floor`` flags 0 < k < 100 where the mean is within :data:`FLOOR` of the all-masked model's."""
    rows = []
    for key, chain in per_seed.groupby(CHAIN_KEYS, sort=True):
        means = chain.groupby("k").mean(numeric_only=True).sort_index()
        counts = chain.groupby("k")["seed"].nunique()
        floor = means["value"].get(100, math.nan)
        if not means.empty and not means["label_word_absent"].iloc[0] <= ANSWER_IN_TEXT:
            # Class names that are words but not answers taken from the text (e.g. "positive" in a
            # review): their absence says nothing about a leak.
            means[["label_word_absent", "other_labels_visible"]] = math.nan
        lowest = math.nan
        for k, row in means.iterrows():
            rise = row["value"] - lowest if not math.isnan(lowest) else math.nan
            rows.append(dict(zip(CHAIN_KEYS, key)) | {
                "k": int(k), "metric_mean": row["value"], "metric_rise": rise,
                "rises": bool(not math.isnan(rise) and rise > RISE),
                "at_floor": bool(0 < k < 100 and row["value"] - floor <= FLOOR),
                **{d: row[d] for d in DIAGNOSTICS}, "n_seeds": int(counts[k])})
            lowest = row["value"] if math.isnan(lowest) else min(lowest, row["value"])
    return pd.DataFrame(rows, columns=LEAK_COLUMNS)


def _probe_cell(row: pd.DataFrame) -> str:
    """Mask probe accuracy (%) of one measure at one k, answer absent (%) in parentheses, in bold with an
    arrow where the curve rises; empty where the measure has no point at that k."""
    if row.empty:
        return ""
    r = row.iloc[0]
    cell = percent(r["mask_probe"], 0)
    if not math.isnan(r["label_word_absent"]):
        cell += f" ({percent(r['label_word_absent'], 0)})"
    return f"**{cell}**↑" if r["rises"] else cell


def leakage_markdown(summary: pd.DataFrame, target: str) -> str:
    """The README section: what the diagnostics mean, the flagged rises, and a table per dataset/model."""
    lines = [
        f"Importance target: **{target}** (`importance.target`; the gradient measures explain the "
        f"{'gold class, as in the paper' if target == 'gold' else 'class the model predicts'}; random and attention "
        "explain no class).",
        "",
        "A measure that explains the gold class can put the label into the mask pattern; the next model may then "
        "read the label from *where* the masks are, and its curve rises although more is masked. Two diagnostics "
        "per masked dataset (test split; `leakage.csv`): **mask probe** = accuracy of a logistic regression that "
        "sees only which positions are masked (from the start and from the end) and the second sequence's words, "
        "against **majority** = always the most frequent class; a mask pattern chosen without the label stays near "
        "majority. **answer absent** = share of test questions whose gold answer word is masked everywhere (tasks "
        "whose answers are words of the unmasked text, such as bAbI).",
        "",
    ]
    flagged = summary[summary["rises"] & (summary["measure"] != "random")]
    if flagged.empty:
        lines.append(f"No curve rises more than {RISE:.2f} above its lowest point when more is masked "
                     "(mean over seeds).")
    else:
        lines.append(f"Curves that **rise** more than {RISE:.2f} above their lowest point when more is masked "
                     "(mean over seeds):")
        lines.append("")
        for (dataset, model, measure, recursive, _), points in flagged.groupby(CHAIN_KEYS, sort=True):
            top = points.loc[points["metric_rise"].idxmax()]
            ks = ", ".join(str(k) for k in points["k"])
            lines.append(f"* {dataset}/{model}/{measure}/{mode_name(recursive)}: up to "
                         f"+{top['metric_rise']:.3f} above its lowest point (to {top['metric_mean']:.3f} at k = "
                         f"{top['k']}), flagged at k = {ks}; mask probe up to {points['mask_probe'].max():.3f} vs "
                         f"majority {points['majority'].max():.3f}")
    lines += ["", *_floor_lines(summary), ""]
    for (dataset, model), frame in summary.groupby(["dataset", "model"], sort=True):
        for recursive, panel in frame.groupby("recursive", sort=False):
            ks = sorted(panel["k"].unique())
            rows = [[measure, *(_probe_cell(points[points["k"] == k]) for k in ks)]
                    for measure, points in panel.groupby("measure", sort=True)]
            lines += [f"#### Mask probe accuracy (%), {dataset}/{model}, "
                      f"{mode_title(recursive)} (majority "
                      f"{percent(panel['majority'].mean(), 0)} %)", "",
                      *markdown_table(["measure", *(f"k={k}" for k in ks)], rows)]
            lines += ["", f"In parentheses: answer absent (%). ↑ = the curve is more than {RISE:.2f} above its "
                      "lowest point at a smaller k.", ""]
    return "\n".join(lines)


def _floor_lines(summary: pd.DataFrame) -> list[str]:
    """The steps whose models score no better than the all-masked model: where a curve sits at the floor, the
    next step explains a model that learnt nothing, and its importance says nothing about the text."""
    lines = []
    for (dataset, model, measure, recursive, _), chain in summary.groupby(CHAIN_KEYS, sort=True):
        floored = chain[chain["at_floor"]]
        if not floored.empty:
            ks = ", ".join(str(k) for k in floored["k"])
            floor = chain[chain["k"] == 100]["metric_mean"].iloc[0]
            lines.append(f"* {dataset}/{model}/{measure}/{mode_name(recursive)}: k = {ks} (all-masked {floor:.3f})")
    if not lines:
        return [f"No step's model is at the floor (mean score within {FLOOR:.2f} of the all-masked model's)."]
    return [f"Steps whose models are **at the floor**, their mean score within {FLOOR:.2f} of the all-masked "
            "model's (what the second sequence alone gives, as a constant prediction would):", "", *lines]


def leakage_figures(summary: pd.DataFrame, out: Path) -> list[Path]:
    """Per dataset and model: the curves (top) above the mask probe (bottom), a column per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from roar.report.figures import legend_and_save, measure_style

    written = []
    for (dataset, model), frame in summary.groupby(["dataset", "model"], sort=True):
        modes = sorted(frame["recursive"].unique(), reverse=True)
        random = frame[frame["measure"] == "random"]
        fig, axes = plt.subplots(2, len(modes), figsize=(5.5 * len(modes), 7), squeeze=False, sharex=True)
        for column, recursive in enumerate(modes):
            panel = frame[frame["recursive"] == recursive]
            if not recursive:
                panel = pd.concat([panel, random])
            for measure, line in panel.groupby("measure", sort=True):
                line = line.sort_values("k")
                style = measure_style(measure)
                axes[0][column].plot(line["k"], line["metric_mean"], marker="o", markersize=3, label=measure, **style)
                rises = line[line["rises"] & (line["measure"] != "random")]
                axes[0][column].scatter(rises["k"], rises["metric_mean"], s=80, facecolors="none",
                                        edgecolors="crimson", zorder=3)
                axes[1][column].plot(line["k"], line["mask_probe"], marker="o", markersize=3, label=measure, **style)
            axes[1][column].plot(panel.sort_values("k")["k"].unique(),
                                 [panel["majority"].mean()] * len(panel["k"].unique()), color="grey", linestyle=":",
                                 label="majority class")
            axes[0][column].set_title(f"{dataset}, {model}: {mode_title(recursive)}")
            axes[1][column].set_xlabel(strategy_spec(panel["strategy"].iloc[0]).axis_label)
            for ax in axes[:, column]:
                ax.grid(alpha=0.3)
        # A common scale from 0: noise around the majority level should look as small as it is.
        top = max(0.5, 1.1 * float(frame["mask_probe"].max()))
        for ax in axes[1]:
            ax.set_ylim(0, top)
        axes[0][0].set_ylabel("test metric (circled: rises)")
        axes[1][0].set_ylabel("mask-pattern probe accuracy")
        written += legend_and_save(fig, axes[1][-1], out, f"leakage-{dataset}-{model}")
    return written
