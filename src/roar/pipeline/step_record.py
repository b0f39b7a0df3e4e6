"""The result record of one curve point (``results/**/k<k>.json`` and ``results/<d>/<m>/{k0,all}/s<seed>.json``),
written and read here only.

A chain step's record says what the step computed (its masked data and model, with their content
hashes), from what (its input data and model, the step key of params, code and libraries), the
test metric of its retrained model and of the no-retrain models, and the MLflow runs. The shared
k = 0 and all-masked models' records (``measure`` = ``shared``, ``recursive`` = null) carry the
training part only. Keys absent from older records stay absent (None here) when rewritten.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from roar.core.fileio import write_json_atomic

EXPLAINED_PREFIX = "predicted_is_gold_"  # + split: share of examples whose predicted class is the gold one
NO_RETRAIN = "no_retrain"  # key: {curve: CurveScore} at the step's k
NO_RETRAIN_END = "no_retrain_end"  # key on the last step's record: {"k": end_k, curve: CurveScore}


@dataclass(frozen=True)
class CurveScore:
    """A no-retrain point: the test metric of a model on masked test data, the seconds it took, and the
    content hashes of the data the masked split came from and of the model."""

    value: float
    seconds: float
    data_hash: str
    model_hash: str

    def made_from(self, data_hash: str, model_hash: str) -> bool:
        return (self.data_hash, self.model_hash) == (data_hash, model_hash)


@dataclass(frozen=True)
class TrainedPoint:
    """What training a step's model gives its record."""

    metric: str
    value: float
    val_metric: float
    best_epoch: int
    train_seconds: float
    train_run_id: str


@dataclass(frozen=True)
class StepRecord:
    """One curve point's record; :meth:`to_json` / :meth:`from_json` give its on-disk keys, which
    the step store and the report read back."""

    dataset: str
    model: str
    measure: str  # ``shared`` for the k = 0 and all-masked models
    recursive: bool | None  # None for the shared models
    strategy: str
    seed: int
    k: int
    metric: str
    value: float  # the test metric of the step's retrained model
    data_hash: str | None = None  # content hashes and paths of the step's data and model folders
    model_hash: str | None = None
    data_path: str | None = None
    model_path: str | None = None
    chain_run_id: str | None = None
    step_run_id: str | None = None
    study_run_id: str | None = None
    git_commit: str | None = None
    val_metric: float | None = None
    best_epoch: int | None = None
    train_seconds: float | None = None
    train_run_id: str | None = None
    leakage: dict[str, float] | None = None
    # chain steps only
    target: str | None = None
    explained: dict[str, float] = field(default_factory=dict)  # split -> share predicted == gold
    importance_seconds: float | None = None
    input_data_hash: str | None = None
    input_model_hash: str | None = None
    step_key: str | None = None
    code_fingerprint: str | None = None
    libraries: dict[str, str] | None = None
    importance_run_id: str | None = None
    no_retrain: dict[str, CurveScore] | None = None
    no_retrain_end_k: int | None = None
    no_retrain_end: dict[str, CurveScore] | None = None
    extra: dict = field(default_factory=dict)  # keys of newer code, kept when rewritten

    @property
    def is_shared(self) -> bool:
        return self.measure == "shared"

    def run_ids(self) -> dict[str, str]:
        """``{chain_run_id: ..., step_run_id: ..., ...}``: the MLflow runs behind the point, by key."""
        return {key: value for key, value in sorted(self.to_json().items()) if key.endswith("run_id")}

    def end_scores(self, end_k: int) -> dict[str, CurveScore]:
        """The all-masked no-retrain points when they were made for ``end_k``, else none."""
        return dict(self.no_retrain_end or {}) if self.no_retrain_end_k == end_k else {}

    def to_json(self) -> dict:
        """The record's JSON object: the dataclass fields by name (``recursive`` always, other fields
        when set), ``explained`` as ``predicted_is_gold_<split>`` keys, the no-retrain scores nested."""
        out = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", "explained", "no_retrain", "no_retrain_end", "no_retrain_end_k"):
                continue
            if value is not None or f.default is MISSING:  # the required ones (``recursive`` too) always
                out[f.name] = value
        out |= {EXPLAINED_PREFIX + split: share for split, share in self.explained.items()}
        if self.no_retrain is not None:
            out[NO_RETRAIN] = {curve: asdict(score) for curve, score in self.no_retrain.items()}
        if self.no_retrain_end is not None:
            out[NO_RETRAIN_END] = {"k": self.no_retrain_end_k,
                                   **{curve: asdict(score) for curve, score in self.no_retrain_end.items()}}
        return out

    @classmethod
    def from_json(cls, obj: dict) -> StepRecord:
        """The record of a JSON object written by :meth:`to_json` (or by older code, with fewer keys)."""
        names = {f.name for f in fields(cls)} - {"extra", "explained", "no_retrain_end_k"}
        values = {key: value for key, value in obj.items() if key in names}
        values["explained"] = {key[len(EXPLAINED_PREFIX):]: value for key, value in obj.items()
                               if key.startswith(EXPLAINED_PREFIX)}
        values["extra"] = {key: value for key, value in obj.items()
                           if key not in names and not key.startswith(EXPLAINED_PREFIX)}
        if obj.get(NO_RETRAIN) is not None:
            values["no_retrain"] = {curve: CurveScore(**score) for curve, score in obj[NO_RETRAIN].items()}
        if obj.get(NO_RETRAIN_END) is not None:
            end = dict(obj[NO_RETRAIN_END])
            values["no_retrain_end_k"] = end.pop("k", None)
            values["no_retrain_end"] = {curve: CurveScore(**score) for curve, score in end.items()}
        missing = [f.name for f in fields(cls)
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in values]
        if missing:
            raise ValueError(f"step record lacks {', '.join(missing)}")
        return cls(**values)

    def write(self, path: Path) -> None:
        """Write the record to ``path`` atomically."""
        write_json_atomic(path, self.to_json())

    @classmethod
    def read(cls, path: Path) -> StepRecord:
        """The record in ``path``; ValueError naming the file when it is not one."""
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}: not a step record ({error})") from None


def read_records(results: Path) -> list[StepRecord]:
    """Every record under ``results`` (sorted by path, so order is stable)."""
    if not results.is_dir():
        raise FileNotFoundError(f"results folder {results} not found; run the pipeline first (dvc repro)")
    return [StepRecord.read(path) for path in sorted(results.rglob("*.json"))]
