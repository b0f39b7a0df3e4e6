"""A chain's finished steps on disk, and when one may be reused.

A chain writes each step's masked data under ``data/…/k<k>``, its model under ``models/…/k<k>``,
its record as ``results/…/k<k>.json`` and its run's facts as ``runs/…/k<k>.json``. A step is reused only when its record's step key (inputs,
params, code, libraries) matches and the data and model folders still hold what the record hashed.

The key names the whole computation, so a step is also taken from the same chain of another study folder
of the project when that one finished it with a key this chain accepts: two studies that differ only where
a chain does not look (the gold and the predicted target of `studies/paper-babi-1`, for the measures that
explain no class: random, attention, mutual information) then compute those chains once. The step is copied
with its record and run facts, which still name the study run that computed it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

from roar.core.fileio import content_hash
from roar.config.layout import project_root, run_facts_path, step_dir
from roar.config.study_folders import study_folders
from roar.pipeline.step_record import StepRecord


@dataclass(frozen=True)
class StepStore:
    """The three output folders of one chain."""

    data: Path
    models: Path
    results: Path

    @property
    def runs(self) -> Path:
        """The run facts of the chain's records (not a DVC output)."""
        return run_facts_path(self.results)

    def record_path(self, k: int) -> Path:
        return self.results / f"k{k}.json"

    def data_dir(self, k: int) -> Path:
        return step_dir(self.data, k)

    def model_dir(self, k: int) -> Path:
        return step_dir(self.models, k)

    def write(self, record: StepRecord) -> None:
        record.write(self.record_path(record.k))

    def as_committed(self, record: StepRecord, equivalent_keys: Collection[str]) -> StepRecord:
        """``record`` as the record already at its path, when that one was made by code that ``roar provenance
        verify`` showed to compute the same (its key one of ``equivalent_keys``) and holds the same result
        (hashes, scores, leakage; its no-retrain scores are kept). A fresh clone, which has the committed
        records but not the data and models, then recomputes a step and writes the committed bytes back:
        dvc.lock stays as committed instead of re-keying the step to today's code. Else ``record``."""
        path = self.record_path(record.k)
        if not path.is_file():
            return record
        try:
            committed = StepRecord.read(path)
        except ValueError:
            return record
        if committed.step_key not in equivalent_keys:
            return record
        made_here = replace(committed, step_key=record.step_key, code_fingerprint=record.code_fingerprint,
                            no_retrain=record.no_retrain, no_retrain_end_k=record.no_retrain_end_k,
                            no_retrain_end=record.no_retrain_end)
        if made_here.to_json() != record.to_json():
            return record
        # the committed no-retrain scores are kept, so the seconds their scoring took come with them
        return replace(committed, run=replace(record.run, scoring_seconds=committed.run.scoring_seconds,
                                              end_scoring_seconds=committed.run.end_scoring_seconds))

    def load_done(self, k: int, step_keys: Collection[str], log: Callable[[str], None]) -> StepRecord | None:
        """The record of step ``k`` if it was made by the same inputs, params, code and libraries
        (its key one of ``step_keys``) and its data and model on disk are still the ones it recorded, here or
        in the same chain of another study folder (then copied here); else None (the step is recomputed;
        ``log`` says why when files here differ, and when a step is taken from elsewhere)."""
        record = self._done_here(k, step_keys, log)
        if record is not None:
            return record
        for other in self.elsewhere():
            record = other._done_here(k, step_keys, lambda message: None, in_store=True)
            if record is not None:
                self._copy_step(other, record)
                log(f"step k={k}: the same step key is done in {other.study_folder()}; its data, model and "
                    "record copied here instead of recomputing it")
                return StepRecord.read(self.record_path(k))
        return None

    def _done_here(self, k: int, step_keys: Collection[str], log: Callable[[str], None],
                   in_store: bool = False) -> StepRecord | None:
        """Step ``k`` of this store if done with one of ``step_keys``. Its data and model are looked for where
        the record says (paths relative to the study folder a stage runs in), or with ``in_store`` in this
        store's folders (a chain of another study folder)."""
        path = self.record_path(k)
        if not path.is_file():
            return None
        try:
            record = StepRecord.read(path)
        except ValueError:
            log(f"{path}: unreadable step record; recomputing the step")
            return None
        if record.step_key not in step_keys:
            return None  # made by other inputs, params, code or libraries
        folders = ((self.data_dir(k), self.model_dir(k)) if in_store
                   else (Path(record.data_path), Path(record.model_path)))
        for folder, recorded in zip(folders, (record.data_hash, record.model_hash)):
            found = content_hash(folder) if folder.is_dir() else "missing"
            if found != recorded:
                log(f"{folder}: content hash {found[:12]} differs from the step record's {recorded[:12]}; "
                    "recomputing the step")
                return None
        return record

    def study_folder(self) -> Path:
        """The study folder this chain's outputs live in (the folder above ``results``)."""
        parts = self.results.resolve().parts
        if "results" not in parts:
            raise ValueError(f"{self.results} is not under a results folder; step records live under <study>/results")
        return Path(*parts[:len(parts) - 1 - parts[::-1].index("results")])

    def elsewhere(self) -> list[StepStore]:
        """The same chain in the project's other study folders: the root's (the default study) and every
        ``studies/<name>`` with a ``params.yaml``."""
        here = self.study_folder()
        root = project_root(here)
        folders = [root, *study_folders(root)]

        def moved(path: Path, folder: Path) -> Path:
            return folder / path.resolve().relative_to(here)

        return [StepStore(moved(self.data, folder), moved(self.models, folder), moved(self.results, folder))
                for folder in folders if folder.resolve() != here]

    def _copy_step(self, other: StepStore, record: StepRecord) -> None:
        """Copy step ``record.k`` of ``other`` here (each folder whole, then renamed into place), then its
        record and run facts with this chain's paths (as a step computed here records them: with a stage's
        relative paths, the bytes of the other record)."""
        k = record.k
        for source, target in ((other.data_dir(k), self.data_dir(k)), (other.model_dir(k), self.model_dir(k))):
            partial = target.with_name(f"{target.name}.tmp-copy")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(source, partial)
            if target.exists():
                shutil.rmtree(target)
            os.replace(partial, target)
        self.write(replace(record, data_path=str(self.data_dir(k)), model_path=str(self.model_dir(k))))

    def remove_stale(self, steps: list[int]) -> None:
        """Drop step outputs of ks no longer in the study (outputs persist between DVC runs)."""
        keep = {f"k{k}" for k in steps} | {f"k{k}.json" for k in steps}
        for folder in (self.data, self.models, self.results, self.runs):
            if folder.is_dir():
                for child in folder.iterdir():
                    if child.name not in keep:
                        shutil.rmtree(child) if child.is_dir() else child.unlink()

    def mark_unsupported(self, reason: str) -> None:
        """Leave only a note in every output folder: the chain's measure is undefined for its model."""
        shutil.rmtree(self.runs, ignore_errors=True)
        for folder in (self.data, self.models, self.results):
            if folder.is_dir():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            (folder / "UNSUPPORTED.txt").write_text(reason + "\n")
