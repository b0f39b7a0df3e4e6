"""A study on a new machine: the clone has ``dvc.lock`` and the committed step records (``cache: false``) but
neither the DVC cache nor its remote. ``roar pipeline`` there runs no finished chain again; a chain whose
records were never committed runs with only the inputs it lacks (prepared data, its k = 0 model), and what
it remakes is byte for byte what ``dvc.lock`` and the records hold; the report's figures are remade.
``--remake-missing`` reproduces everything from scratch, to the same bytes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.pipeline.conftest import sh

CHAIN = "results/babi-1/bilstm-attention/attention/recursive/s1"


def _clone_without_cache(root: Path, clone: Path) -> Path:
    """What a new machine has of ``root``: its files less the DVC-cached outputs, cache, remote and MLflow store."""
    shutil.copytree(root, clone, ignore=shutil.ignore_patterns("cache", "mlflow.db", "mlruns", "dvc-storage"))
    for cached in ("data", "models", "reports/figures"):
        shutil.rmtree(clone / cached)
    sh("dvc", "remote", "remove", "storage", cwd=clone)
    return clone


def _ran(out: str) -> set[str]:
    return set(re.findall(r"\] (\S+): ok in", out))


def _files(root: Path) -> dict[Path, bytes]:
    return {p.relative_to(root): p.read_bytes() for p in [root / "dvc.lock", *(root / "results").rglob("*.json")]}


def test_a_new_machine_skips_committed_chains_and_remakes_only_what_a_missing_chain_needs(tiny_study, tmp_path) -> None:
    clone = _clone_without_cache(tiny_study.root, tmp_path / "clone")
    committed = _files(clone)

    out = sh("roar", "pipeline", "--no-push", cwd=clone)
    assert _ran(out) == {"report"}, out  # only the figures, which a clone lacks
    assert re.search(r"\[roar\] (\d+) of \d+ stage\(s\) done", out), out
    assert _files(clone) == committed
    assert not (clone / "models").exists()  # nothing was retrained
    assert (clone / "reports" / "figures" / "racu.png").is_file()

    shutil.rmtree(clone / CHAIN)  # a chain that ran on a machine that was lost before its records were committed
    out = sh("roar", "pipeline", "--no-push", cwd=clone)
    assert _ran(out) == {"prepare@babi-1-bilstm-attention", "train_k0@babi-1-bilstm-attention-1",
                         "recursive@babi-1-bilstm-attention-attention-1", "report"}, out  # report: checked by DVC
    assert _files(clone) == committed  # the remade records and dvc.lock are the committed bytes
    assert (clone / "reports" / "racu.csv").read_text() == tiny_study.racu


def test_remake_missing_reproduces_a_clone_from_scratch_to_the_committed_bytes(tiny_study, tmp_path) -> None:
    clone = _clone_without_cache(tiny_study.root, tmp_path / "clone")
    committed = _files(clone)
    out = sh("roar", "pipeline", "--no-push", "--remake-missing", cwd=clone)
    assert {s for s in _ran(out) if s.startswith("recursive@")} == {
        f"recursive@babi-1-bilstm-attention-{m}-{seed}" for m in ("random", "attention") for seed in (0, 1)}, out
    assert _files(clone) == committed
    assert all((clone / f"models/babi-1/bilstm-attention/k0/s{seed}").is_dir() for seed in (0, 1))
