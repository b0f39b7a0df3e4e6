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


def write_report(params: dict, results: Path, out: Path) -> dict[str, pd.DataFrame]:
    """Write ``points.csv``, ``curves.csv`` and ``racu.csv`` under ``out`` (atomically)."""
    study = study_from_params(params)
    points = collect_points(read_records(results), study)
    if points.empty:
        raise ValueError(f"no results of study {study.name!r} under {results}")
    tables = {"points": points, "curves": summarise_curves(points), "racu": summarise_racu(racu_per_seed(points))}
    for name, frame in tables.items():
        write_text_atomic(out / f"{name}.csv", _csv(frame))
    return tables

