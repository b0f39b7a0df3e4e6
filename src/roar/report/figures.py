"""Report figures (matplotlib): performance curves with CI ribbons, and a RACU chart."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from roar.config.catalog import MEASURE_SPECS, strategy_spec
from roar.config.layout import mode_title


def measure_style(measure: str) -> dict[str, str]:
    """The line keywords of ``measure`` (its spec's colour and style); matplotlib's defaults for a
    name the catalog does not know (points of another version's measures)."""
    return MEASURE_SPECS[measure].style if measure in MEASURE_SPECS else {}


def save_figure(fig, out: Path, stem: str) -> list[Path]:
    """Write PNG and PDF without timestamps, so the same data gives the same files."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    fig.savefig(paths[0], dpi=120, metadata={"Software": None}, bbox_inches="tight")
    fig.savefig(paths[1], metadata={"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
                bbox_inches="tight")
    return paths


def curve_figures(curves: pd.DataFrame, out: Path) -> list[Path]:
    """One figure per dataset and model: a panel per mode (recursive, plain ROAR), a line per measure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for (dataset, model), frame in curves.groupby(["dataset", "model"], sort=True):
        modes = sorted(frame["recursive"].unique(), reverse=True)  # recursive first
        fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4), squeeze=False, sharey=True)
        for ax, recursive in zip(axes[0], modes):
            panel = panel_curves(frame, recursive)
            for measure, line in panel.groupby("measure", sort=True):
                line = line.sort_values("k")
                style = measure_style(measure)
                ax.plot(line["k"], line["mean"], marker="o", markersize=3, label=measure, **style)
                ax.fill_between(line["k"], line["low"], line["high"], alpha=0.2, color=style.get("color"))
            strategy = panel["strategy"].iloc[0]
            ax.set_xlabel(strategy_spec(strategy).axis_label)
            ax.set_title(f"{dataset}, {model}: {mode_title(recursive)}")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(frame["metric"].iloc[0])
        written += legend_and_save(fig, axes[0][-1], out, f"curves-{dataset}-{model}")
    return written


def panel_curves(frame: pd.DataFrame, recursive: bool) -> pd.DataFrame:
    """The curves of one mode's panel, with its random line: its own chain's, else the other mode's. Random
    scores do not depend on the step, so random masks are the same in both modes and a study runs the random
    chain in one of them (the default study recursively; the official preset as plain ROAR, its RACU baseline)."""
    panel = frame[frame["recursive"] == recursive]
    if (panel["measure"] == "random").any():
        return panel
    return pd.concat([panel, frame[frame["measure"] == "random"]])


def legend_and_save(fig, legend_axes, out: Path, stem: str) -> list[Path]:
    """Put ``legend_axes``'s legend right of the figure, save it (:func:`save_figure`) and close it."""
    import matplotlib.pyplot as plt

    handles, labels = legend_axes.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    written = save_figure(fig, out, stem)
    plt.close(fig)
    return written


def racu_figure(racu: pd.DataFrame, out: Path) -> list[Path]:
    """Bars of RACU (percent, mean of the unclipped per-seed values) with 95 % intervals, per dataset/model/mode,
    a bar per measure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if racu.empty:
        return []
    groups = list(racu.groupby(["dataset", "model", "recursive"], sort=True))
    measures = sorted(racu["measure"].unique())
    width = 0.8 / len(measures)
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(groups) * len(measures) ** 0.5), 4))
    for j, measure in enumerate(measures):
        xs, means, errors = [], [], [[], []]
        for i, (_, frame) in enumerate(groups):
            row = frame[frame["measure"] == measure]
            if row.empty:
                continue
            r = row.iloc[0]
            xs.append(i + (j - (len(measures) - 1) / 2) * width)
            means.append(100 * r["racu_mean"])
            # no interval (1 seed) draws no error bar; a bound on the wrong side of the mean draws none either
            errors[0].append(max(0.0, np.nan_to_num(100 * (r["racu_mean"] - r["racu_low"]))))
            errors[1].append(max(0.0, np.nan_to_num(100 * (r["racu_high"] - r["racu_mean"]))))
        ax.bar(xs, means, width, yerr=np.array(errors), capsize=2, label=measure,
               color=measure_style(measure).get("color"))
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([f"{d}\n{m}\n{mode_title(r)}" for (d, m, r), _ in groups], fontsize=8)
    ax.set_ylabel("RACU (%)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    written = save_figure(fig, out, "racu")
    plt.close(fig)
    return written
