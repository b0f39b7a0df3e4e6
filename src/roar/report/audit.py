"""The chain of evidence behind one curve point, checked against ``dvc.lock``.

For each step from k = 0 to the point: the DVC stage, the masked dataset's and the model's
files with the md5 that ``dvc.lock`` (through the output's ``.dir`` manifest, read with DVC's API)
records, our sha256 content hashes, the stage's parameters, the MLflow run ids and the git
commit. Any workspace file whose md5 differs from the lock is reported as stale or tampered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from roar.core.fileio import file_digest
from roar.config.params import study_from_params
from roar.config.layout import Layout, mode_name
from roar.pipeline.step_record import StepRecord


class AuditError(RuntimeError):
    """The workspace does not match what ``dvc.lock`` records."""


@dataclass
class Evidence:
    k: int
    stage: str
    data_path: str
    model_path: str
    data_files: dict[str, str] = field(default_factory=dict)  # relpath -> md5 in dvc.lock
    model_files: dict[str, str] = field(default_factory=dict)
    data_sha256: str = ""
    model_sha256: str = ""
    params: dict = field(default_factory=dict)
    runs: dict = field(default_factory=dict)
    git_commit: str = ""
    metric: str = ""
    value: float | None = None


def _manifest(cache, md5: str) -> list[tuple[str, str]]:
    """(relpath, md5) of each file in the ``.dir`` manifest ``md5`` of DVC's local ``cache`` (an object
    database from DVC's API, so a ``cache.dir`` outside the project or a shared cache works as in DVC)."""
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.tree import Tree

    if not cache.exists(md5):
        raise FileNotFoundError(cache.oid_to_path(md5))
    return [("/".join(key), entry_hash.value) for key, _, entry_hash in Tree.load(cache, HashInfo("md5", md5))]


def _locked_files(root: Path, cache, lock: dict, stage: str, target: Path) -> dict[str, str]:
    """md5 of every file under ``target`` as ``dvc.lock`` records it (via the output's ``.dir`` manifest)."""
    entry = lock.get("stages", {}).get(stage)
    if entry is None:
        raise AuditError(f"stage {stage} is not in dvc.lock; run `dvc repro` first")
    rel = target.relative_to(root)
    for out in entry.get("outs", []):
        out_path = Path(out["path"])
        if rel == out_path or out_path in rel.parents:
            md5 = out["md5"]
            if not md5.endswith(".dir"):
                return {str(out_path): md5}
            try:
                manifest = _manifest(cache, md5)
            except FileNotFoundError:
                raise AuditError(f"the DVC cache lacks the manifest of {out_path} ({md5}); "
                                 f"run `dvc pull {stage}`") from None
            inner = rel.relative_to(out_path)
            return {str(out_path / relpath): file_md5 for relpath, file_md5 in manifest
                    if Path(relpath) == inner or inner in Path(relpath).parents or str(inner) == "."}
    raise AuditError(f"{rel} is not an output of stage {stage} in dvc.lock")


def _verify(root: Path, files: dict[str, str]) -> None:
    if not files:
        raise AuditError("dvc.lock records no files for this step")
    for rel, md5 in sorted(files.items()):
        path = root / rel
        if not path.is_file():
            raise AuditError(f"{rel} is missing from the workspace (dvc.lock md5 {md5}); run `dvc checkout`")
        actual = file_digest(path, "md5")
        if actual != md5:
            raise AuditError(f"{rel} is stale or tampered: md5 {actual} but dvc.lock records {md5}")


def audit_point(root: Path, params: dict, dataset: str, model: str, measure: str, seed: int, k: int,
                recursive: bool = True) -> list[Evidence]:
    """Evidence for each step from k = 0 to ``k`` of a chain, verified against ``dvc.lock``.

    Raises:
        AuditError: a file differs from ``dvc.lock``, or the lock or cache lacks the step.
        ValueError: the point is not part of the study.
    """
    from dvc.repo import Repo

    study = study_from_params(params)
    layout = Layout(root)
    valid = [0, *study.steps] + ([study.end_k] if study.end_k else [])
    if k not in valid:
        raise ValueError(f"k={k} is not a point of the study; allowed: {valid}")
    lock_path = root / "dvc.lock"
    if not lock_path.is_file():
        raise AuditError("dvc.lock not found; run `dvc repro` first")
    lock = yaml.safe_load(lock_path.read_text())
    with Repo(str(root)) as repo:  # finds the project root above a study folder, and its cache.dir
        cache = repo.cache.local
    chain_stage = f"{mode_name(recursive)}@{dataset}-{model}-{measure}-{seed}"
    ks = [0] + ([s for s in study.steps if s <= k] if recursive else [s for s in study.steps if s == k])
    if study.end_k and k == study.end_k:
        ks = [0, k]
    evidence = []
    for step in ks:
        if step == 0 or step == study.end_k:
            which = "k0" if step == 0 else "all"
            stage = f"{'train_k0' if step == 0 else 'train_all_masked'}@{dataset}-{model}-{seed}"
            data = layout.prepared(dataset, model) if step == 0 else layout.all_masked(dataset, model)
            model_dir = layout.shared_model(dataset, model, which, seed)
            record_path = layout.shared_result(dataset, model, which, seed)
            data_stage = f"prepare@{dataset}-{model}"
        else:
            stage = data_stage = chain_stage
            data = layout.chain_data(dataset, model, measure, recursive, seed) / f"k{step}"
            model_dir = layout.chain_models(dataset, model, measure, recursive, seed) / f"k{step}"
            record_path = layout.chain_results(dataset, model, measure, recursive, seed) / f"k{step}.json"
        if not record_path.is_file():
            raise AuditError(f"no result for {dataset}/{model}/{measure}/{mode_name(recursive)}/s{seed} k={step} "
                             f"({record_path}); run `dvc repro {stage}` or `dvc pull {stage}`")
        record = StepRecord.read(record_path)
        ev = Evidence(k=step, stage=stage, data_path=str(data.relative_to(root)),
                      model_path=str(model_dir.relative_to(root)),
                      data_files=_locked_files(root, cache, lock, data_stage, data),
                      model_files=_locked_files(root, cache, lock, stage, model_dir),
                      data_sha256=record.data_hash or "", model_sha256=record.model_hash or "",
                      params=lock["stages"][stage].get("params", {}).get("params.yaml", {}),
                      runs=record.run.run_ids(), git_commit=record.run.git_commit or "", metric=record.metric,
                      value=record.value)
        _verify(root, ev.data_files)
        _verify(root, ev.model_files)
        evidence.append(ev)
    return evidence


def format_evidence(evidence: list[Evidence]) -> str:
    lines = []
    for ev in evidence:
        lines += [f"k={ev.k}  stage {ev.stage}  {ev.metric}={ev.value:.4f}  commit {ev.git_commit or '?'}",
                  f"  data  {ev.data_path}  sha256 {ev.data_sha256[:16]}",
                  *[f"    {Path(p).name:<20} md5 {m}" for p, m in sorted(ev.data_files.items())],
                  f"  model {ev.model_path}  sha256 {ev.model_sha256[:16]}",
                  *[f"    {Path(p).name:<20} md5 {m}" for p, m in sorted(ev.model_files.items())],
                  "  runs  " + ", ".join(f"{k}={v}" for k, v in ev.runs.items()),
                  "  params " + json.dumps(ev.params, sort_keys=True)]
    lines.append("all files match dvc.lock")
    return "\n".join(lines)
