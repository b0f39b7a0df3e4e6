"""A study on a new machine: the clone has ``dvc.lock`` and the committed step records (``cache: false``) but
neither the DVC cache nor its remote. ``roar pipeline`` there runs no finished chain again; a chain whose
records were never committed runs with only the inputs it lacks (prepared data, its k = 0 model), and what
it remakes is byte for byte what ``dvc.lock`` and the records hold; the report's figures are remade.
``--remake-missing`` reproduces everything from scratch, to the same bytes. With ``study.k0_models: git`` a
plain git clone has the k = 0 models too, and a missing chain runs without remaking them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml
from tests.conftest import tiny_params
from tests.pipeline.conftest import commit, make_project, sh

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


K0 = "models/babi-1/bilstm-attention/k0/s0"


def test_a_study_with_k0_models_in_git_goes_on_in_a_git_clone_without_remaking_them(tmp_path) -> None:
    """``study.k0_models: git``: the k = 0 model is committed with the records, so a plain ``git clone`` (no DVC
    cache, no remote: another machine, possibly another kind of CPU) runs a missing chain from that model
    instead of remaking it."""
    root = make_project(tmp_path / "project", tiny_params())
    params = tiny_params()
    params["study"].update(name="micro", seeds=[0], steps=[50], k0_models="git")
    params["prepare"]["babi-1"].update(n_train=300, n_test=100)
    (root / "micro.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("roar", "study", "new", "micro", "--from", "micro.yaml", cwd=root)
    sh("roar", "pipeline", "--study", "micro", "--no-push", cwd=root)
    study = root / "studies" / "micro"
    model = study / K0 / "model.safetensors"
    assert model.is_file() and subprocess.run(["git", "check-ignore", "-q", str(model)], cwd=root).returncode == 1
    commit(root, "micro, k = 0 models in git")
    assert f"studies/micro/{K0}/model.safetensors" in sh("git", "ls-files", "studies/micro/models", cwd=root)
    committed = _files(study)

    clone = tmp_path / "clone"
    sh("git", "clone", "-q", str(root), str(clone), cwd=tmp_path)
    sh("dvc", "remote", "remove", "storage", cwd=clone)
    chain = clone / "studies/micro/results/babi-1/bilstm-attention/attention/recursive/s0"
    shutil.rmtree(chain)  # a chain whose machine was lost before its records were committed
    out = sh("roar", "pipeline", "--study", "micro", "--no-push", cwd=clone)
    assert _ran(out) == {"prepare@babi-1-bilstm-attention", "recursive@babi-1-bilstm-attention-attention-0",
                         "report"}, out  # the prepared data (the same bytes on any CPU), not the k = 0 model
    assert (clone / "studies/micro" / K0 / "model.safetensors").read_bytes() == model.read_bytes()
    assert _files(clone / "studies/micro") == committed
