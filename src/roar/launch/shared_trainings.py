"""Reference trainings shared between study folders, through DVC's run cache.

Two study folders that differ only where a training does not look (the gold and the predicted target of
``studies/paper-babi-1``) have ``train_k0`` stages with the same command, inputs and params. DVC restores a
stage's outputs from its run cache instead of running it when a stage with the same command, dependencies and
params ran before. But the run cache lives in this machine's DVC cache: on a fresh clone, where the finished
study's trainings came through git, it is empty, and the second study would train its k = 0 models again. On
another kind of CPU that gives other bytes, so none of its chain steps could be taken from the first study
either (a step key names its k = 0 model's hash).

:func:`share_finished_trainings` saves the runs of the other study folders' finished, up-to-date trainings to
the run cache first; DVC then restores a pending stage with the same lock entry ("Stage ... is cached -
skipping run"). Nothing is written to the other folders.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from roar.config.layout import project_root, stage_kind
from roar.config.study_folders import study_folders
from roar.launch.studies import dvc_warnings_off

SHARED_KINDS = ("train_k0", "train_all_masked")


def share_finished_trainings(root: Path, pending: Iterable[str], log=print) -> list[str]:
    """Save to DVC's run cache each finished, up-to-date stage of the project's other study folders that bears
    the name of a training in ``pending`` (a stage of ``root``'s ``dvc.yaml`` still to run); returns those saved,
    as ``<folder>/dvc.yaml:<stage>``."""
    from dvc.repo import Repo, lock_repo

    names = sorted(name for name in pending if stage_kind(name) in SHARED_KINDS)
    project, here = project_root(root), Path(root).resolve()
    folders = [f for f in (project, *study_folders(project)) if f.resolve() != here and (f / "dvc.lock").is_file()]
    if not names or not folders:
        return []
    saved = []
    # DVC resolves paths from the cwd, and says per stage what changed: only what is shared is news here
    with contextlib.chdir(project), dvc_warnings_off(), Repo(".") as repo, lock_repo(repo):
        for folder in folders:
            for name in names:
                stage = _finished_stage(repo, folder / "dvc.yaml", name)
                if stage is not None:
                    stage.save(run_cache=True)  # the run cache and the object cache only; no lock file written
                    saved.append(f"{folder.relative_to(project)}/dvc.yaml:{name}")
    if saved:
        log(f"[roar] {len(saved)} finished training(s) of other study folders saved to DVC's run cache: a stage "
            "here with the same command, inputs and params is restored from it instead of trained "
            f"({', '.join(saved)})")
    return saved


def _finished_stage(repo, dvcfile: Path, name: str):
    """Stage ``name`` of ``dvcfile`` when it ran (locked) and is up to date with its outputs present; else None."""
    from dvc.exceptions import DvcException

    try:
        stages = repo.stage.collect(f"{dvcfile.resolve()}:{name}")
    except DvcException:  # no such stage there: another grid
        return None
    for stage in stages:
        if all(out.hash_info for out in stage.outs) and not stage.changed():
            return stage
    return None
