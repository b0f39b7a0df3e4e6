"""What the stages need from experiment tracking, and a tracker that keeps runs in memory.

:class:`roar.tracking.mlflow_tracker.Tracker` (MLflow) is the real one; :class:`NullTracker` lets library code run
without a tracking store (unit tests, scripts), keeping the run tree it was given to inspect.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from roar.config.params import study_fingerprint


def open_study_run(tracker, params: dict, owned: bool = False) -> str:
    """The study run of ``params`` in an MLflow :class:`~roar.tracking.mlflow_tracker.Tracker`, found or created
    (``owned``: the caller keeps it RUNNING and ends it)."""
    from roar.config.params import study_from_params

    study = study_from_params(params)
    return tracker.study_run(study.name, study_fingerprint(params),
                             {"study": study.name, "seeds": study.seeds, "measures": study.measures,
                              "steps": study.steps}, owned)


class RunInterrupted(Exception):
    """Work stopped on purpose before its end, to be resumed (a chain at its time budget's deadline): the runs
    it leaves end KILLED, not FAILED."""


def ended_status(error: BaseException | None) -> str:
    """The status a run ends with: FINISHED, KILLED when ``error`` interrupted it on purpose, else FAILED."""
    if error is None:
        return "FINISHED"
    return "KILLED" if isinstance(error, RunInterrupted) else "FAILED"


class RunTracker(Protocol):
    """Runs with explicit parents and ``roar.*`` tags (set by :mod:`roar.pipeline.runner` and
    :mod:`roar.pipeline.chain`), their params, metrics and inputs."""

    commit: str  # the git commit every run is tagged with

    def run(self, kind: str, name: str, parent: str | None, tags: dict,
            params: dict | None = None) -> AbstractContextManager[str]: ...

    def log_params(self, run_id: str, params: dict) -> None: ...

    def log_metrics(self, run_id: str, metrics: dict, step: int = 0) -> None: ...

    def log_dataset(self, run_id: str, name: str, path: Path, digest: str, context: str) -> None: ...

    def set_tag(self, run_id: str, key: str, value: str) -> None: ...


@dataclass
class TrackedRun:
    """A run as :class:`NullTracker` keeps it."""

    kind: str
    name: str
    parent: str | None
    tags: dict
    params: dict = field(default_factory=dict)
    metrics: dict = field(default_factory=dict)  # name -> [(step, value)]
    datasets: list = field(default_factory=list)  # (name, digest, context)
    status: str = "RUNNING"


def log_curve(tracker: RunTracker, chain_run: str, points: list[tuple[int, str, float]],
              k0_model: Path | None = None) -> None:
    """A chain's retrained curve, ``points`` as (k, metric, value), as the metric history
    ``retrained_<metric>`` over step = k (MLflow's chart and compare views draw it beside other chains;
    the no-retrain curves are ``k0_model_<metric>`` and ``previous_model_<metric>``). It is led by the
    k = 0 point from the k = 0 model's ``result.json`` when ``k0_model`` is given and has one."""
    points = list(points)
    result = k0_model / "result.json" if k0_model is not None else None
    if result is not None and result.is_file():
        k0 = json.loads(result.read_text())
        points.insert(0, (0, k0["metric"], float(k0["test_metric"])))
    for k, metric, value in points:
        tracker.log_metrics(chain_run, {f"retrained_{metric}": value}, step=k)


@dataclass
class NullTracker:
    """Tracks into memory: ``runs`` by id (``run-1``, ``run-2``, ...), nothing written anywhere."""

    commit: str = ""
    runs: dict[str, TrackedRun] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    @contextmanager
    def run(self, kind: str, name: str, parent: str | None, tags: dict, params: dict | None = None):
        run_id = f"run-{next(self._ids)}"
        self.runs[run_id] = TrackedRun(kind, name, parent, dict(tags), dict(params or {}))
        try:
            yield run_id
        except BaseException as error:
            self.runs[run_id].status = ended_status(error)
            raise
        self.runs[run_id].status = ended_status(None)

    def log_params(self, run_id: str, params: dict) -> None:
        self.runs[run_id].params.update(params)

    def log_metrics(self, run_id: str, metrics: dict, step: int = 0) -> None:
        for name, value in metrics.items():
            self.runs[run_id].metrics.setdefault(name, []).append((step, float(value)))

    def log_dataset(self, run_id: str, name: str, path: Path, digest: str, context: str) -> None:
        self.runs[run_id].datasets.append((name, digest, context))

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.runs[run_id].tags[key] = value

    def of_kind(self, kind: str) -> dict[str, TrackedRun]:
        return {run_id: run for run_id, run in self.runs.items() if run.kind == kind}
