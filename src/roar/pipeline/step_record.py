"""The result record of one curve point (``results/**/k<k>.json`` and ``results/<d>/<m>/{k0,all}/s<seed>.json``)
and the facts of the run that made it (the same path under ``runs/``), written and read here only.

A record holds what the step's inputs determine: its masked data and model (with their content
hashes), what they were made from (input data and model, the step key of params, code and libraries),
the test metric of its retrained model and of the no-retrain models. Rerunning unchanged inputs writes
the same bytes, so the records are DVC outputs (``cache: false``: they travel with git) whose hashes
in ``dvc.lock`` change only when a result does. What one run happened to be (its MLflow runs, git
commit and seconds) is kept apart in :class:`RunFacts`, beside the records in ``runs/`` (committed, no
DVC output). The shared k = 0 and all-masked models' records (``measure`` = ``shared``,
``recursive`` = null) carry the training part only. Keys absent from older records stay absent (None
here) when rewritten; the run keys that older records held inside them are read into the run facts.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path

from roar.config.layout import run_facts_path
from roar.core.fileio import write_json_atomic

EXPLAINED_PREFIX = "predicted_is_gold_"  # + split: share of examples whose predicted class is the gold one
NO_RETRAIN = "no_retrain"  # key: {curve: CurveScore} at the step's k
NO_RETRAIN_END = "no_retrain_end"  # key on the last step's record: {"k": end_k, curve: CurveScore}


@dataclass(frozen=True)
class CurveScore:
    """A no-retrain point: the test metric of a model on masked test data, and the content hashes of the
    data the masked split came from and of the model."""

    value: float
    data_hash: str
    model_hash: str

    def made_from(self, data_hash: str, model_hash: str) -> bool:
        return (self.data_hash, self.model_hash) == (data_hash, model_hash)


@dataclass(frozen=True)
class RunFacts:
    """What the run of a step happened to be, not what its inputs determine: the MLflow runs behind the
    point, the git commit and the seconds it took (no-retrain scorings per curve, ``end_`` for the
    all-masked point of the last step)."""

    study_run_id: str | None = None
    chain_run_id: str | None = None
    step_run_id: str | None = None
    train_run_id: str | None = None
    importance_run_id: str | None = None
    git_commit: str | None = None
    train_seconds: float | None = None
    importance_seconds: float | None = None
    scoring_seconds: dict[str, float] = field(default_factory=dict)
    end_scoring_seconds: dict[str, float] = field(default_factory=dict)

    def run_ids(self) -> dict[str, str]:
        """``{chain_run_id: ..., step_run_id: ..., ...}``: the MLflow runs behind the point, by key."""
        return {f.name: getattr(self, f.name) for f in sorted(fields(self), key=lambda f: f.name)
                if f.name.endswith("run_id") and getattr(self, f.name) is not None}

    def to_json(self) -> dict:
        return {key: value for key, value in asdict(self).items() if value not in (None, {})}

    @classmethod
    def from_json(cls, obj: dict) -> RunFacts:
        return cls(**{f.name: obj[f.name] for f in fields(cls) if obj.get(f.name) is not None})


RUN_KEYS = frozenset(f.name for f in fields(RunFacts))


@dataclass(frozen=True)
class TrainedPoint:
    """What training a step's model gives its record, and the seconds and run it took."""

    metric: str
    value: float
    val_metric: float
    best_epoch: int
    seconds: float
    run_id: str

    @property
    def result(self) -> dict:
        """The record's fields of the point."""
        return {"metric": self.metric, "value": self.value, "val_metric": self.val_metric,
                "best_epoch": self.best_epoch}


@dataclass(frozen=True)
class StepRecord:
    """One curve point's record and its run's facts; :meth:`to_json` / :meth:`from_json` give the
    record's on-disk keys, which the step store and the report read back."""

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
    val_metric: float | None = None
    best_epoch: int | None = None
    leakage: dict[str, float] | None = None
    # chain steps only
    target: str | None = None
    masking_count: str | None = None  # set only when not roar's count (study.masking_count)
    explained: dict[str, float] = field(default_factory=dict)  # split -> share predicted == gold
    input_data_hash: str | None = None
    input_model_hash: str | None = None
    step_key: str | None = None
    code_fingerprint: str | None = None
    libraries: dict[str, str] | None = None
    no_retrain: dict[str, CurveScore] | None = None
    no_retrain_end_k: int | None = None
    no_retrain_end: dict[str, CurveScore] | None = None
    extra: dict = field(default_factory=dict)  # keys of newer code, kept when rewritten
    run: RunFacts = field(default_factory=RunFacts)  # not in the record's JSON: written to ``runs/``

    @property
    def is_shared(self) -> bool:
        return self.measure == "shared"

    def end_scores(self, end_k: int) -> dict[str, CurveScore]:
        """The all-masked no-retrain points when they were made for ``end_k``, else none."""
        return dict(self.no_retrain_end or {}) if self.no_retrain_end_k == end_k else {}

    def with_run(self, **facts) -> StepRecord:
        """The record with ``facts`` replaced in its run facts."""
        return replace(self, run=replace(self.run, **facts))

    def to_json(self) -> dict:
        """The record's JSON object: the dataclass fields by name (``recursive`` always, other fields
        when set), ``explained`` as ``predicted_is_gold_<split>`` keys, the no-retrain scores nested."""
        out = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", "explained", "no_retrain", "no_retrain_end", "no_retrain_end_k", "run"):
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
    def from_json(cls, obj: dict, run: dict | None = None) -> StepRecord:
        """The record of a JSON object written by :meth:`to_json` (or by older code, with fewer keys, or
        with its run's keys inside, which then make its run facts unless ``run`` is given)."""
        names = {f.name for f in fields(cls)} - {"extra", "explained", "no_retrain_end_k", "run"}
        legacy_run = {key: value for key, value in obj.items() if key in RUN_KEYS}
        values = {key: value for key, value in obj.items() if key in names}
        values["explained"] = {key[len(EXPLAINED_PREFIX):]: value for key, value in obj.items()
                               if key.startswith(EXPLAINED_PREFIX)}
        values["extra"] = {key: value for key, value in obj.items()
                           if key not in names and key not in RUN_KEYS and not key.startswith(EXPLAINED_PREFIX)}
        if obj.get(NO_RETRAIN) is not None:
            values["no_retrain"], legacy_run["scoring_seconds"] = _scores(obj[NO_RETRAIN])
        if obj.get(NO_RETRAIN_END) is not None:
            end = dict(obj[NO_RETRAIN_END])
            values["no_retrain_end_k"] = end.pop("k", None)
            values["no_retrain_end"], legacy_run["end_scoring_seconds"] = _scores(end)
        missing = [f.name for f in fields(cls)
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in values]
        if missing:
            raise ValueError(f"step record lacks {', '.join(missing)}")
        return cls(**values, run=RunFacts.from_json(legacy_run if run is None else run))

    def write(self, path: Path) -> None:
        """Write the record to ``path`` and its run facts to the same path under ``runs/``, atomically."""
        write_json_atomic(path, self.to_json())
        write_json_atomic(run_facts_path(path), self.run.to_json())

    @classmethod
    def read(cls, path: Path) -> StepRecord:
        """The record in ``path`` with its run facts where they were kept; ValueError naming the file when
        it is not one."""
        facts = run_facts_path(path)
        try:
            run = json.loads(facts.read_text()) if facts.is_file() else None
            return cls.from_json(json.loads(path.read_text()), run)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{path}: not a step record ({error})") from None


def _scores(obj: dict) -> tuple[dict[str, CurveScore], dict[str, float]]:
    """No-retrain scores by curve, and the seconds that records of older code kept inside them."""
    scores = {curve: CurveScore(score["value"], score["data_hash"], score["model_hash"]) for curve, score in obj.items()}
    return scores, {curve: score["seconds"] for curve, score in obj.items() if "seconds" in score}


def read_records(results: Path) -> list[StepRecord]:
    """Every record under ``results`` (sorted by path, so order is stable)."""
    if not results.is_dir():
        raise FileNotFoundError(f"results folder {results} not found; run the pipeline first (dvc repro)")
    return [StepRecord.read(path) for path in sorted(results.rglob("*.json"))]
