"""Turn per-point results into the study's tables (points, curves, RACU per seed and summary).

Nothing is dropped silently: every seed or measure that gets no RACU is returned as a record
(``excluded.csv``), printed as a warning, and listed in the README under "Left out".
"""

from __future__ import annotations

import math
import sys

import pandas as pd

from roar.config.catalog import MASKING_COUNTS
from roar.config.params import Study
from roar.config.layout import mode_name, mode_title
from roar.method.racu import (
    BOOTSTRAP_RESAMPLES,
    MIN_BOOTSTRAP_VALUES,
    mean_interval,
    racu_seed,
)
from roar.pipeline.step_record import StepRecord
from roar.report.markdown import markdown_table, percent

POINT_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "seed", "k", "metric", "value"]
RETRAINED = "retrained"  # the (Recursive) ROAR curve; the no-retrain curves are named in the step records
CURVE_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "k", "metric", "mean", "low", "high",
                 "n_seeds", "interval"]
RACU_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "racu_mean", "racu_low", "racu_high", "n_seeds",
                "interval"]
RACU_SEED_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "curve", "seed", "racu", "racu_unclipped"]
EXCLUDED_COLUMNS = ["dataset", "model", "measure", "recursive", "strategy", "seed", "reason"]
CHAIN_KEYS = ["dataset", "model", "measure", "recursive", "strategy"]
FEW_SEEDS = 5  # results over fewer seeds carry the flag below
FLAG = "†"


def _point(r: StepRecord) -> dict:
    return {c: getattr(r, c) for c in POINT_COLUMNS}


def _no_retrain_rows(r: StepRecord, study: Study) -> list[dict]:
    """The no-retrain points of a step record: its k, and k = end_k from the last step's record."""
    rows = [{**_point(r), "value": score.value, "curve": curve} for curve, score in (r.no_retrain or {}).items()]
    if r.k == study.steps[-1] and study.end_k is not None:
        rows += [{**_point(r), "k": study.end_k, "value": score.value, "curve": curve}
                 for curve, score in r.end_scores(study.end_k).items()]
    return rows


def collect_points(records: list[StepRecord], study: Study) -> pd.DataFrame:
    """One row per curve point and seed (``curve``: ``retrained`` or a no-retrain curve); shared points join
    every chain: k = 0 (the k = 0 model on unmasked data) every curve, all-masked the retrained one. A step
    masked by another count than ``study.masking_count`` is left out (DVC does not rerun the chains when that
    key changes)."""
    shared = [r for r in records if r.is_shared]
    chains = [r for r in records if not r.is_shared]
    rows = []
    wanted = set(study.chain_modes)
    for r in chains:
        if (r.dataset in study.datasets and r.model in study.models and r.seed in study.seeds
                and (r.measure, r.recursive) in wanted and r.k in study.steps and r.strategy == study.strategy
                and (r.masking_count or MASKING_COUNTS[0]) == study.masking_count):
            rows.append({**_point(r), "curve": RETRAINED})
            rows += _no_retrain_rows(r, study)
    chain_curves = {tuple(row[c] for c in CHAIN_KEYS) + (row["seed"], row["curve"]) for row in rows}
    for r in shared:
        if r.k not in (0, study.end_k) or r.strategy != study.strategy:
            continue
        for dataset, model, measure, recursive, strategy, seed, curve in chain_curves:
            if (dataset, model, seed) == (r.dataset, r.model, r.seed) and (r.k == 0 or curve == RETRAINED):
                rows.append({**_point(r), "measure": measure, "recursive": recursive, "curve": curve})
    points = pd.DataFrame(rows, columns=POINT_COLUMNS + ["curve"])
    points["recursive"] = points["recursive"].astype(bool)
    return points.sort_values(["dataset", "model", "measure", "recursive", "strategy", "curve", "seed", "k"],
                              key=lambda c: c.map({RETRAINED: ""}).fillna(c) if c.name == "curve" else c
                              ).reset_index(drop=True)


def retrained(points: pd.DataFrame) -> pd.DataFrame:
    """The (Recursive) ROAR points: the rows of the ``retrained`` curve (all rows of a table without ``curve``)."""
    if "curve" not in points:
        return points
    return points[points["curve"] == RETRAINED].drop(columns="curve").reset_index(drop=True)


def expected_ks(study: Study) -> list[int]:
    """The points of a complete curve: k = 0, the steps, and k = 100 for quantile studies."""
    return [0, *study.steps] + ([study.end_k] if study.end_k is not None else [])


def racu_chains(study: Study) -> list[tuple[str, str, str, bool]]:
    """``(dataset, model, measure, recursive)`` of every chain of the study that should get a RACU
    (every measure but random, skipping measures undefined for the model: those have no chain at all)."""
    from roar.config.catalog import check_supported

    chains = []
    for dataset in study.datasets:
        for model in study.models:
            for measure, recursive in study.chain_modes:
                if measure == "random":
                    continue
                try:
                    check_supported(measure, model)
                except ValueError:
                    continue
                chains.append((dataset, model, measure, recursive))
    return chains


def summarise_curves(points: pd.DataFrame) -> pd.DataFrame:
    """Mean and 95 % interval over seeds of every curve point (method per :func:`roar.method.racu.mean_interval`)."""
    rows = []
    for key, group in points.groupby(CHAIN_KEYS + ["k", "metric"], sort=True):
        ci = mean_interval(group["value"].to_numpy())
        rows.append(dict(zip(CHAIN_KEYS + ["k", "metric"], key)) | {"mean": ci.mean, "low": ci.low, "high": ci.high,
                                                                     "n_seeds": ci.n, "interval": ci.method})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def _missing(curve: pd.Series, ks: list[int]) -> list[int]:
    return [k for k in ks if k not in curve.index]


def _ks(ks: list[int]) -> str:
    return ", ".join(map(str, ks))


def racu_per_seed(points: pd.DataFrame, study: Study, which: str = RETRAINED) -> tuple[pd.DataFrame, list[dict]]:
    """RACU of every (chain, seed) against the random chain of the same dataset, model and seed: the
    Recursive ROAR one, or with ``study.racu_baseline: plain-random`` the plain ROAR one (the official code's
    baseline for both chain kinds). Either way the curves share the all-masked point (the shared model).

    Only complete curves (every k of :func:`expected_ks`, for the measure and for its random
    baseline) get a RACU. ``which`` picks the curve of both (a no-retrain curve is compared with
    the random measure's same no-retrain curve). Returns the per-seed table (``RACU_SEED_COLUMNS``)
    and one record (``EXCLUDED_COLUMNS``) per seed or measure left out, with why; ``seed`` is None
    in a record that concerns the whole measure.
    """
    if "curve" in points:
        points = points[points["curve"] == which]
    ks = expected_ks(study)
    rows, excluded = [], []
    random = points[points["measure"] == "random"]
    for dataset, model, measure, recursive in racu_chains(study):
        chain = points[(points["dataset"] == dataset) & (points["model"] == model) & (points["measure"] == measure)
                       & (points["recursive"] == recursive) & (points["strategy"] == study.strategy)]
        info = {"dataset": dataset, "model": model, "measure": measure, "recursive": recursive,
                "strategy": study.strategy}
        n_before = len(rows)
        for seed in study.seeds:
            reasons = []
            curve = chain[chain["seed"] == seed].drop_duplicates("k").set_index("k")["value"].sort_index()
            if curve.empty:
                reasons.append("no results for this seed (chain not run or its results missing)")
            elif missing := _missing(curve, ks):
                reasons.append(f"incomplete curve: missing k {_ks(missing)}")
            base = random[(random["dataset"] == dataset) & (random["model"] == model)
                          & (random["strategy"] == study.strategy) & (random["seed"] == seed)]
            plain = study.racu_baseline == "plain-random"
            if plain:
                base = base[~base["recursive"]]
            elif base["recursive"].any():  # the random chain is run once (recursive) and reused by plain ROAR
                base = base[base["recursive"]]
            base = base.drop_duplicates("k").set_index("k")["value"].sort_index()
            if base.empty:
                reasons.append(f"no {'plain ROAR ' if plain else ''}random chain of this seed (RACU compares with "
                               "the same seed's random curve)")
            elif missing := _missing(base, ks):
                reasons.append(f"random curve of this seed incomplete: missing k {_ks(missing)}")
            if not reasons:
                value = racu_seed(ks, curve.loc[ks].to_numpy(), base.loc[ks].to_numpy())
                if math.isnan(value.unclipped):
                    reasons.append("random curve encloses no area (RACU undefined)")
                else:
                    rows.append(info | {"curve": which, "seed": seed, "racu": value.racu,
                                        "racu_unclipped": value.unclipped})
            if reasons:
                excluded.append(info | {"seed": seed, "reason": "; ".join(reasons)})
        if len(rows) == n_before:
            excluded.append(info | {"seed": None, "reason": "no seed has a RACU: measure left out of racu.csv"})
    return pd.DataFrame(rows, columns=RACU_SEED_COLUMNS), excluded


def summarise_racu(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean of the *unclipped* per-seed RACU and its interval (method named in ``interval``)."""
    rows = []
    for key, group in per_seed.groupby(CHAIN_KEYS, sort=True):
        ci = mean_interval(group["racu_unclipped"].to_numpy())
        rows.append(dict(zip(CHAIN_KEYS, key)) | {"racu_mean": ci.mean, "racu_low": ci.low, "racu_high": ci.high,
                                                  "n_seeds": ci.n, "interval": ci.method})
    return pd.DataFrame(rows, columns=RACU_COLUMNS)


COMPUTE_COLUMNS = ["dataset", "model", "measure", "recursive", "steps", "train_seconds", "importance_seconds",
                   "total_seconds"]


def compute_by_chain(records: list[StepRecord], study: Study) -> pd.DataFrame:
    """Where the compute went: per chain (and the shared k = 0 / all-masked models) the seconds spent
    training and computing importance, summed over the study's seeds and steps, as the step records
    measured them (their run facts; a reused step counts the time of the run that made it)."""
    rows: dict[tuple, dict] = {}
    wanted = set(study.chain_modes) | {("shared", None)}
    for r in records:
        if (r.dataset not in study.datasets or r.model not in study.models or r.seed not in study.seeds
                or (r.measure, r.recursive) not in wanted or r.run.train_seconds is None):
            continue
        if not r.is_shared and r.k not in study.steps:
            continue
        key = (r.dataset, r.model, r.measure, r.recursive)
        row = rows.setdefault(key, dict(zip(COMPUTE_COLUMNS[:4], key)) | {"steps": 0, "train_seconds": 0.0,
                                                                          "importance_seconds": 0.0})
        row["steps"] += 1
        row["train_seconds"] += float(r.run.train_seconds)
        row["importance_seconds"] += float(r.run.importance_seconds or 0.0)
    frame = pd.DataFrame(list(rows.values()), columns=COMPUTE_COLUMNS[:-1])
    frame["total_seconds"] = frame["train_seconds"] + frame["importance_seconds"]
    frame["recursive"] = frame["recursive"].astype(object)
    return frame.sort_values(["dataset", "model", "measure"], key=lambda s: s.astype(str)).reset_index(drop=True)


def compute_markdown(compute: pd.DataFrame) -> str:
    """:func:`compute_by_chain`'s table in hours, with the total."""
    if compute.empty:
        return "No step records with timings.\n"
    rows = [[r.dataset, r.model,
             "k = 0 and all-masked models" if r.measure == "shared" else f"{r.measure} ({mode_name(bool(r.recursive))})",
             str(r.steps), f"{r.train_seconds / 3600:.2f}", f"{r.importance_seconds / 3600:.2f}",
             f"{r.total_seconds / 3600:.2f}"] for r in compute.itertuples(index=False)]
    lines = markdown_table(["dataset", "model", "chain", "steps", "training (h)", "importance (h)", "total (h)"], rows)
    total = compute[["train_seconds", "importance_seconds", "total_seconds"]].sum() / 3600
    lines.append(f"| all | | | {int(compute['steps'].sum())} | {total['train_seconds']:.2f} | "
                 f"{total['importance_seconds']:.2f} | {total['total_seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def excluded_frame(excluded: list[dict]) -> pd.DataFrame:
    """The records as a table; ``seed`` is empty where a record concerns the whole measure."""
    frame = pd.DataFrame(excluded, columns=EXCLUDED_COLUMNS)
    frame["seed"] = pd.array([r["seed"] for r in excluded], dtype="Int64")
    return frame


def excluded_line(record: dict) -> str:
    """``babi-1/bilstm-attention/gradient/recursive seed 2: random curve encloses no area (RACU undefined)``."""
    name = f"{record['dataset']}/{record['model']}/{record['measure']}/{mode_name(record['recursive'])}"
    seed = "" if record["seed"] is None else f" seed {record['seed']}"
    return f"{name}{seed}: {record['reason']}"


def warn_excluded(excluded: list[dict], stream=None) -> None:
    """One ``warning: left out ...`` line per record on stderr."""
    stream = stream or sys.stderr
    for record in excluded:
        print(f"warning: left out {excluded_line(record)}", file=stream)


def _csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, float_format="%.6f", lineterminator="\n")


def _flag(row: pd.Series) -> str:
    return FLAG if row["n_seeds"] < FEW_SEEDS else ""


def _cell(row: pd.Series) -> str:
    """``mean [low, high] (n=3)†`` in percent; no bounds when there is no interval."""
    interval = (f" [{percent(row['racu_low'])}, {percent(row['racu_high'])}]" if not math.isnan(row["racu_low"])
                else " (no interval)")
    return f"{percent(row['racu_mean'])}{interval} (n={row['n_seeds']}){_flag(row)}"


def method_note(method: str) -> str:
    """A sentence on what an interval method means."""
    if method.startswith("student-t"):
        return f"{method}: mean ± t·s/√n over the seeds; assumes roughly normal per-seed values"
    if method.startswith("bca"):
        return f"{method}: bias-corrected and accelerated bootstrap of the mean, fixed RNG"
    if method.startswith("percentile"):
        return f"{method}: percentile bootstrap of the mean, fixed RNG (BCa gave no bounds)"
    return method


def _method_lines(frame: pd.DataFrame, label) -> list[str]:
    """Which interval method each cell of a table used: one line when all share it, else one per method."""
    methods = sorted(frame["interval"].unique())
    if len(methods) == 1:
        return [f"Interval: {method_note(methods[0])}."]
    return [f"Interval of {', '.join(label(r) for _, r in frame[frame['interval'] == m].iterrows())}: "
            f"{method_note(m)}." for m in methods]


def _flag_note(frame: pd.DataFrame) -> str | None:
    few = frame[frame["n_seeds"] < FEW_SEEDS]
    if few.empty:
        return None
    several = sorted(n for n in few["n_seeds"].unique() if n >= 2)
    parts = [f"interval is a t-interval over {_ks(several)} seeds and is wide/indicative"] if several else []
    if (few["n_seeds"] == 1).any():
        parts.append("with 1 seed there is no interval")
    return f"{FLAG} fewer than {FEW_SEEDS} seeds: " + "; ".join(parts) + "."


def _label(r: pd.Series) -> str:
    return f"{r['dataset']}/{r['model']}/{r['measure']}"


def racu_markdown(racu: pd.DataFrame) -> str:
    """Paper-style tables: a row per dataset and measure, a column per model, one table per mode,
    with the interval method and the few-seeds flag explained under each table."""
    models = sorted(racu["model"].unique())
    parts = []
    for recursive, frame in racu.groupby("recursive", sort=False):
        rows = [[dataset, measure, *(_cell(group[group["model"] == m].iloc[0]) if (group["model"] == m).any() else ""
                                     for m in models)]
                for (dataset, measure), group in frame.groupby(["dataset", "measure"], sort=True)]
        parts.append(f"### RACU (%), {mode_title(recursive)}\n")
        parts += markdown_table(["dataset", "measure", *models], rows)
        notes = ["Mean over seeds of the unclipped per-seed RACU, 95 % interval of the mean in brackets.",
                 *_method_lines(frame, _label)]
        if note := _flag_note(frame):
            notes.append(note)
        for line in notes:  # a paragraph each
            parts += ["", line]
        parts.append("")
    return "\n".join(parts)


def _seed_cell(values: pd.DataFrame) -> str:
    if values.empty:
        return "—"
    r = values.iloc[0]
    cell = percent(r["racu"])
    if r["racu"] != r["racu_unclipped"]:
        cell += f" ({percent(r['racu_unclipped'])})"
    return cell


def _seed_rows(per_seed: pd.DataFrame, study: Study):
    """``(dataset, model, mode, measure, [cell per seed])`` for every chain that should have a RACU."""
    for dataset, model, measure, recursive in sorted(racu_chains(study), key=lambda c: (c[0], c[1], not c[3], c[2])):
        chain = per_seed[(per_seed["dataset"] == dataset) & (per_seed["model"] == model)
                         & (per_seed["measure"] == measure) & (per_seed["recursive"] == recursive)]
        yield dataset, model, mode_name(recursive), measure, [_seed_cell(chain[chain["seed"] == s]) for s in study.seeds]


SEED_TABLE_NOTE = ("Clipped RACU (%) of each seed, the unclipped value in parentheses where it lies outside "
                   "[-100, 100]; — = left out (see Left out).")


def racu_seeds_markdown(per_seed: pd.DataFrame, study: Study) -> str:
    """One row per dataset/model/mode/measure, one column per seed."""
    header = ["dataset", "model", "mode", "measure", *(f"seed {s}" for s in study.seeds)]
    rows = [[dataset, model, mode, measure, *cells] for dataset, model, mode, measure, cells in _seed_rows(per_seed, study)]
    parts = ["### RACU (%) per seed\n", *markdown_table(header, rows)]
    return "\n".join(parts + ["", SEED_TABLE_NOTE, ""])


def excluded_markdown(excluded: list[dict]) -> str:
    if not excluded:
        return "Nothing was left out: every seed of every measure has a RACU.\n"
    return "\n".join(f"* {excluded_line(r)}" for r in excluded) + "\n"


TEX = {"%": "\\%", "_": "\\_", "†": "$^\\dagger$", "±": "$\\pm$", "·": "$\\cdot$", "√n": "$\\sqrt{n}$",
       "—": "--", "−": "-"}


def _tex(text: str) -> str:
    """Plain text for LaTeX: escapes and the few non-ASCII signs the notes use."""
    for plain, tex in TEX.items():
        text = text.replace(plain, tex)
    return text


def _tex_cell(match: pd.DataFrame) -> str:
    """``$mean\\,[low, high]^{\\dagger}$`` in percent (no bounds without an interval); empty without a row."""
    if match.empty:
        return ""
    r = match.iloc[0]
    flag = "^{\\dagger}" if r["n_seeds"] < FEW_SEEDS else ""
    if math.isnan(r["racu_low"]):
        return f"${percent(r['racu_mean'])}{flag}$"
    return f"${percent(r['racu_mean'])}\\,[{percent(r['racu_low'])}, {percent(r['racu_high'])}]{flag}$"


def racu_tex(racu: pd.DataFrame, per_seed: pd.DataFrame | None = None, study: Study | None = None) -> str:
    """The same tables as LaTeX tabulars (the per-seed one when ``per_seed`` and ``study`` are given)."""
    models = sorted(racu["model"].unique())
    parts = []
    for recursive, frame in racu.groupby("recursive", sort=False):
        parts += [f"% RACU (%), {mode_title(recursive)}",
                  "\\begin{tabular}{ll" + "r" * len(models) + "}", "\\toprule",
                  "Dataset & Measure & " + " & ".join(models) + " \\\\", "\\midrule"]
        for (dataset, measure), rows in frame.groupby(["dataset", "measure"], sort=True):
            cells = [_tex_cell(rows[rows["model"] == m]) for m in models]
            parts.append(f"{dataset} & {measure} & " + " & ".join(cells) + " \\\\")
        parts += ["\\bottomrule", "\\end{tabular}", ""]
        notes = ["Mean over seeds of the unclipped per-seed RACU, 95 % interval of the mean in brackets."]
        notes += _method_lines(frame, _label)
        if note := _flag_note(frame):
            notes.append(note)
        parts += [_tex(n) + "\\\\" for n in notes] + [""]
    if per_seed is not None and study is not None:
        parts += ["% RACU (%) per seed", "\\begin{tabular}{llll" + "r" * len(study.seeds) + "}", "\\toprule",
                  "Dataset & Model & Mode & Measure & " + " & ".join(f"seed {s}" for s in study.seeds) + " \\\\",
                  "\\midrule"]
        for dataset, model, mode, measure, cells in _seed_rows(per_seed, study):
            parts.append(f"{dataset} & {model} & {mode} & {measure} & "
                         + " & ".join("--" if c == "—" else c for c in cells) + " \\\\")
        parts += ["\\bottomrule", "\\end{tabular}", "", _tex(SEED_TABLE_NOTE), ""]
    return "\n".join(parts)


def _number(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 6)


def racu_metrics(racu: pd.DataFrame) -> dict:
    """Nested ``{dataset: {model: {mode: {measure: {mean, low, high}}}}}`` for ``dvc metrics`` (null: no interval)."""
    tree: dict = {}
    for _, r in racu.iterrows():
        leaf = tree.setdefault(r["dataset"], {}).setdefault(r["model"], {}).setdefault(mode_name(r["recursive"]), {})
        leaf[r["measure"]] = {"racu_mean": _number(r["racu_mean"]), "racu_low": _number(r["racu_low"]),
                              "racu_high": _number(r["racu_high"]), "n_seeds": int(r["n_seeds"])}
    return tree


def statistics_text() -> list[str]:
    """The README's account of RACU and its interval."""
    return [
        "RACU (relative area between curves) of one seed = area(random − measure) / area(random − random at the "
        "last point), by the trapezoid rule over the masking ratios, against the random curve of the **same seed**. "
        "100 % = as faithful as possible, 0 = no better than random, < 0 = worse than random. The per-seed value "
        "can leave [−100, 100] %: above 100 % when the measure's curve falls below the random curve's all-masked "
        "point, below −100 % when it runs far above the random curve. The paper clips each seed to [−100, 100] %; "
        "the per-seed table shows that clipped value (the unclipped one in parentheses where they differ).",
        "",
        "The **mean is over the unclipped per-seed values** (clipping before averaging biases the mean towards 0), "
        "so a mean may lie outside [−100, 100] %. Its 95 % interval is chosen by the number of seeds n with a RACU, "
        "and named under each table and in the `interval` column of `racu.csv` and `curves.csv`:",
        "",
        "* n = 1: no interval;",
        "* all n values equal: the interval collapses to the mean;",
        f"* 2 ≤ n < {MIN_BOOTSTRAP_VALUES}: Student-t interval, mean ± t(0.975, n − 1) · s / √n (s the sample "
        "standard deviation), which assumes roughly normal per-seed values (a bootstrap of so few values has too "
        "few distinct resamples to give a 95 % interval);",
        f"* n ≥ {MIN_BOOTSTRAP_VALUES}: BCa bootstrap of the mean, {BOOTSTRAP_RESAMPLES:,} resamples, fixed RNG; "
        "if BCa yields no bounds, the percentile bootstrap, named as such.",
        "",
        f"Results over fewer than {FEW_SEEDS} seeds carry {FLAG}: their interval is wide and only indicative.",
    ]


def importance_target(params: dict) -> str:
    """The study's ``importance.target`` (gold when unset, as in the paper)."""
    return str((params.get("importance") or {}).get("target", "gold"))
