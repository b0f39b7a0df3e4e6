"""Which stages of a study must run: the changed ones, those downstream of them, and the inputs they need.

A clone on another machine has a study's ``dvc.lock`` and its step records (``cache: false`` outputs that
travel with git), but its DVC-cached models and masked data only where the DVC remote is reachable. A
stage whose only change is that those cached outputs are missing is done: its committed records are what
the report reads, so it is skipped (DVC's ``--allow-missing``). It runs again only when a stage that must
run needs its outputs (a chain still to run needs the prepared data and its k = 0 model); on the kind of
CPU that made them it makes the same bytes that ``dvc.lock`` holds, on another kind it may not
(:func:`unreproduced`, and the pipeline stops before anything is computed from them). A stage whose
records are missing is never done, nor is the report (its figures are cheap to remake and are what a
reader opens). ``remake_missing`` turns the rule off: every stage whose outputs are absent runs (a
reproduction from scratch, as ``make run`` does on a fresh clone).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from roar.config.layout import stage_kind


def pending_stages(root: Path, remake_missing: bool = False, log=print) -> dict[str, list[str]]:
    """Each stage of ``root``'s own ``dvc.yaml`` that must run, mapped to the stages among them it depends
    on, in an order where every stage follows its dependencies."""
    import networkx as nx
    from dvc.repo import Repo, lock_repo

    # DVC names stages relative to the working directory (``recursive@...`` only from the root). Only
    # ``root``'s own dvc.yaml counts: the project's other study folders are pipelines of their own.
    with contextlib.chdir(root), Repo(".") as repo, lock_repo(repo):
        if clear_corrupt_rwlock(repo):
            log(f"[roar] removed {os.path.relpath(os.path.join(repo.tmp_dir, 'rwlock'))}: a DVC process killed while "
                "writing it (a job at its time limit, a kill -9) had left it unreadable; DVC rebuilds it")
        not_up_to_date = set(repo.status(targets=["dvc.yaml"]))
        graph = repo.index.graph  # an edge a -> b: stage a depends on stage b
        names = {stage: stage.addressing for stage in graph.nodes}
        stale = {stage for stage in graph.nodes
                 if names[stage] in not_up_to_date and stage.dvcfile.relpath == "dvc.yaml"}
        todo = {stage for stage in stale
                if remake_missing or stage_kind(names[stage]) == "report" or not _done_without_cache(stage, graph)}
        for stage in list(todo):
            todo |= nx.ancestors(graph, stage)
        needed = list(todo)
        while needed:  # the stages that make inputs of a stage to run which this workspace lacks
            stage = needed.pop()
            for dependency in graph.successors(stage):
                if dependency in stale and dependency not in todo and _lacks_input_of(stage, dependency):
                    todo.add(dependency)
                    needed.append(dependency)
        order = [s for s in reversed(list(nx.topological_sort(graph))) if s in todo]
        return {names[s]: sorted(names[d] for d in graph.successors(s) if d in todo) for s in order}


def clear_corrupt_rwlock(repo) -> bool:
    """Remove DVC's per-path lock file (``.dvc/tmp/rwlock``) if it is not valid JSON; whether it did.

    DVC truncates and rewrites that file on every stage start and end; a process killed in between (Slurm
    signals a job's processes one by one at its time limit) leaves it empty, and every later DVC command then
    fails with "RWLockFileCorruptedError" until someone deletes it by hand, which is DVC's own advice. Read
    under DVC's guard of that file, so a writer still at work is waited for, not mistaken for a dead one.
    """
    from dvc.lock import make_lock

    path = os.path.join(repo.tmp_dir, "rwlock")
    if not os.path.exists(path):
        return False
    guard = make_lock(os.path.join(repo.tmp_dir, "rwlock.lock"), tmp_dir=repo.tmp_dir,
                      hardlink_lock=repo.config["core"].get("hardlink_lock", False))
    with guard:
        try:
            with open(path, encoding="utf-8") as file:
                json.load(file)
            return False
        except (json.JSONDecodeError, UnicodeDecodeError):
            os.unlink(path)
            return True


def lacks_records(stage) -> bool:
    """Whether an uncached output of ``stage`` (its step records: what git carries, no DVC remote) is absent."""
    return any(not out.use_cache and not out.exists for out in stage.outs)


def _lacks_input_of(stage, producer) -> bool:
    """Whether a dependency of ``stage`` that ``producer`` outputs is missing from the workspace."""
    return any(not dep.exists and _overlap(dep.fs_path, out.fs_path) for dep in stage.deps for out in producer.outs)


def _overlap(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _done_without_cache(stage, graph) -> bool:
    """Whether ``stage`` differs from its ``dvc.lock`` entry only by DVC-cached outputs (or their copies as
    dependencies) missing from this workspace, with every uncached output (its records) present."""
    if any(not out.hash_info for out in stage.outs):  # never ran here: no dvc.lock entry to stand for it
        return False
    if lacks_records(stage):
        return False
    return not stage.changed(allow_missing=True, upstream=list(graph.successors(stage)))


@dataclass(frozen=True)
class Unreproduced:
    """A stage run again with the command, dependencies and params of its ``dvc.lock`` entry whose outputs
    came out different: another kind of CPU picks other float kernels (docs/method.md), so the stages
    computed from the committed outputs no longer follow from the remade ones."""

    stage: str
    outputs: tuple[str, ...]  # the paths whose hashes differ
    dependents: tuple[str, ...]  # the locked stages that read them


def _hashes(entries: list[dict] | None) -> dict[str, str | None]:
    return {entry["path"]: entry.get("md5") for entry in entries or []}


def unreproduced(before: dict, after: dict, stages: Collection[str]) -> list[Unreproduced]:
    """The stages among ``stages`` whose ``dvc.lock`` entry (``before`` and ``after`` a run: parsed lock files)
    kept its command, dependencies and params but changed an output's hash, with the locked stages that
    depend on those outputs (the report, remade at every call, not counted). A stage whose code, params or
    inputs changed is not one: its outputs may move."""
    found = []
    old_stages, new_stages = before.get("stages") or {}, after.get("stages") or {}
    for stage in sorted(stages):
        old, new = old_stages.get(stage), new_stages.get(stage)
        if old is None or new is None:
            continue
        same_inputs = (old.get("cmd"), _hashes(old.get("deps")), old.get("params")) == (
            new.get("cmd"), _hashes(new.get("deps")), new.get("params"))
        old_outs, new_outs = _hashes(old.get("outs")), _hashes(new.get("outs"))
        moved = tuple(path for path in old_outs if path in new_outs and old_outs[path] != new_outs[path])
        if same_inputs and moved:
            dependents = tuple(sorted(
                name for name, entry in old_stages.items()
                if name != stage and stage_kind(name) != "report"  # the report is remade at every call anyway
                and any(_overlap(dep, out) for dep in _hashes(entry.get("deps")) for out in moved)))
            found.append(Unreproduced(stage, moved, dependents))
    return found
