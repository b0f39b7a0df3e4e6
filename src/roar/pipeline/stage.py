"""A DVC stage process's setup: the device checked first, torch threads, the MLflow tracker and the
study run its runs go under, handed to a :class:`~roar.pipeline.runner.Runner` (the steps below know only the
:class:`~roar.tracking.protocol.RunTracker` protocol, not MLflow)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from roar.models.device import resolve_device
from roar.config.params import study_from_params
from roar.tracking.protocol import open_study_run
from roar.pipeline.runner import Runner
from roar.tracking.mlflow_tracker import Tracker

R = TypeVar("R", bound=Runner)


def stage_runner(runner: type[R], params: dict, root: Path = Path("."), progress: bool = True) -> R:
    """A ``runner`` (:class:`Runner` or :class:`~roar.pipeline.chain.ChainRunner`) for this stage process, with
    ``runtime.device`` resolved (a GPU asked for and missing stops here, before MLflow is touched) and
    ``runtime.threads`` torch threads."""
    runtime = params.get("runtime") or {}
    device = resolve_device(runtime.get("device"))
    if runtime.get("threads"):
        import torch

        torch.set_num_threads(int(runtime["threads"]))
    tracker = Tracker(study_from_params(params).name, root)
    return runner(params, tracker, open_study_run(tracker, params), root, progress, device)
