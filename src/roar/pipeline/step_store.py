"""A chain's finished steps on disk, and when one may be reused.

A chain writes each step's masked data under ``data/…/k<k>``, its model under ``models/…/k<k>``,
its record as ``results/…/k<k>.json`` and its run's facts as ``runs/…/k<k>.json``. A step is reused only when its record's step key (inputs,
params, code, libraries) matches and the data and model folders still hold what the record hashed.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path

from roar.core.fileio import content_hash
from roar.config.layout import run_facts_path, step_dir
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
        (its key one of ``step_keys``) and its data and model on disk are still the ones it recorded; else None
        (the step is recomputed; ``log`` says why when files differ)."""
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
        for folder, recorded in ((Path(record.data_path), record.data_hash),
                                 (Path(record.model_path), record.model_hash)):
            found = content_hash(folder) if folder.is_dir() else "missing"
            if found != recorded:
                log(f"{folder}: content hash {found[:12]} differs from the step record's {recorded[:12]}; "
                    "recomputing the step")
                return None
        return record

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
