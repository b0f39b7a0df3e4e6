"""A time budget for ``roar pipeline``: start no stage that cannot finish before it ends.

Long studies (the paper's settings take hours of CPU per target) run in pieces: each call runs the
stages that fit, stops cleanly between stages (no step half done, every MLflow run closed, the
workspace lock released), writes a partial report (it names the chains and seeds still missing) and
says what is left; the next call resumes, reusing every finished stage and step.

A stage's expected seconds come from :mod:`roar.launch.plan` (measured or calibrated rates),
scaled to the part of a chain not yet done (its step records on disk) and, once stages have run
here, by how long they took against their plan (the machine's load today). The budget bounds when
stages *start*. A chain stage gets the budget's end as its deadline (:mod:`roar.pipeline.deadline`): it
may start when one of its steps fits, and stops between steps before one that would not end in time, so
that no worker idles through the last hours of a budget because no whole chain fits in them. A step that
runs past its estimate is not stopped (keep a margin below a hard wall-time limit such as Slurm's
``--time``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from roar.core.errors import RoarError
from roar.launch.plan import STAGE_OVERHEAD_S, makespan
from roar.pipeline.deadline import CHAIN_STAGE_KINDS, DEADLINE_ENV, StepDeadline

UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
DURATION = re.compile(r"(\d+(?:\.\d+)?)([hms])")


def parse_duration(text: str) -> float:
    """Seconds of a duration such as ``2h30m``, ``90m``, ``1.5h`` or ``45s``; RoarError otherwise."""
    compact = text.strip().lower().replace(" ", "")
    parts = DURATION.findall(compact)
    if not compact or "".join(n + u for n, u in parts) != compact:
        raise RoarError(f"--time-budget {text!r} is not a duration; use hours, minutes and seconds such as "
                        "2h30m, 90m or 45s")
    seconds = sum(float(n) * UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise RoarError(f"--time-budget {text!r} must be longer than 0 s")
    return seconds


@dataclass
class TimeBudget:
    """The budget of one pipeline call, and the planned seconds of each stage still to do (stages absent
    from ``planned`` are up to date and cost only their process; None where no rate is known) and of one
    step of each chain stage still to do (``step_planned``: such a stage may stop between steps)."""

    seconds: float
    planned: dict[str, float | None]
    clock: Callable[[], float] = time.monotonic
    step_planned: dict[str, float] = field(default_factory=dict)
    wall_clock: Callable[[], float] = time.time  # the deadline a stage process gets is wall-clock time
    started_at: float = field(default=0.0)
    ran: dict[str, float] = field(default_factory=dict)  # stage -> seconds it took, stages with a plan
    stopped: dict[str, float] = field(default_factory=dict)  # chain stage -> seconds it ran before its deadline
    refused: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    @property
    def seconds_left(self) -> float:
        return self.seconds - (self.clock() - self.started_at)

    @property
    def pace(self) -> float:
        """Seconds stages took here per planned second (1 until a planned stage has run), within [0.25, 4]."""
        planned = sum(self.planned[s] for s in self.ran if self.planned.get(s))
        return min(4.0, max(0.25, sum(self.ran.values()) / planned)) if planned else 1.0

    def expected(self, stage: str) -> float | None:
        """Seconds ``stage`` is expected to take here (0 when up to date: DVC only checks it); None when no
        rate is known."""
        if stage not in self.planned:
            return 0.0
        planned = self.planned[stage]
        return None if planned is None else planned * self.pace

    def step_expected(self, stage: str) -> float | None:
        """Seconds one step of chain stage ``stage`` is expected to take here; None for other stages."""
        planned = self.step_planned.get(stage)
        return None if planned is None else planned * self.pace

    def admits(self, stage: str) -> bool:
        """Whether ``stage`` may start: up to date, expected to finish before the budget ends, or a chain stage
        whose next step is (it stops between steps at its deadline: :meth:`stage_env`). A stage of unknown cost
        starts while nothing has been refused. A refused stage is remembered for :meth:`left`."""
        if stage not in self.planned:
            return True
        expected, step = self.expected(stage), self.step_expected(stage)
        if expected is None:
            fits = not self.refused
        else:
            fits = expected <= self.seconds_left or (step is not None and STAGE_OVERHEAD_S + step <= self.seconds_left)
        if not fits:
            self.refused.append(stage)
        return fits

    def stage_env(self, stage: str) -> dict[str, str]:
        """The environment of ``stage``'s process: a chain stage's deadline, the budget's end."""
        step = self.step_expected(stage)
        if step is None:
            return {}
        return {DEADLINE_ENV: StepDeadline(self.wall_clock() + self.seconds_left, step).format()}

    def finished(self, stage: str, seconds: float) -> None:
        if self.planned.get(stage):
            self.ran[stage] = seconds

    def stopped_at_deadline(self, stage: str, seconds: float) -> None:
        """``stage`` stopped between steps after ``seconds`` with steps left (not counted in the pace: it ran
        only part of its plan)."""
        self.stopped[stage] = seconds

    def left(self, stages: list[str], jobs: int) -> tuple[list[str], float | None]:
        """The stages of ``stages`` not finished (refused, never reached or stopped at the deadline) that still
        have work, and their expected wall time on ``jobs`` workers (None when a rate is missing)."""
        todo = [s for s in stages if s in self.planned and s not in self.ran]
        expected = [self._left_of(s) for s in todo]
        return todo, None if any(e is None for e in expected) else makespan(expected, jobs)

    def _left_of(self, stage: str) -> float | None:
        """Expected seconds of what is left of ``stage``: all of it, or after a stop at the deadline its plan less
        the time it ran (at least one step)."""
        expected = self.expected(stage)
        if stage not in self.stopped or expected is None:
            return expected
        return max(self.step_expected(stage) or 0.0, expected - self.stopped[stage])


def _done_share(root: Path, stage) -> float:
    """The share of a chain stage's steps whose records are on disk (reused when the chain runs again)."""
    from roar.config.layout import Layout

    if stage.kind not in CHAIN_STAGE_KINDS or not stage.trainings:
        return 0.0
    folder = Layout(root).chain_results(stage.dataset, stage.model, stage.measure, stage.kind == "recursive",
                                        stage.seed)
    done = len(list(folder.glob("k*.json"))) if folder.is_dir() else 0
    return min(1.0, done / stage.trainings)


def plan_budget(root: Path, params: dict, seconds: float, jobs: int, log=print,
                remake_missing: bool = False) -> TimeBudget:
    """The budget of a pipeline call in ``root``: ``seconds``, the plan's seconds of every stale stage
    (calibrated when no finished runs give a rate), less the part of each chain already done."""
    from roar.launch.plan import build_plan

    from roar.launch.pending import pending_stages

    stale = set(pending_stages(root, remake_missing, log))
    plan = build_plan(params, str(root), root, jobs=jobs)
    if any(s.local_s is None for s in plan.stages if s.name in stale):
        log("[roar] time budget: no measured rate for some stages; calibrating (`roar plan --calibrate`)")
        plan = build_plan(params, str(root), root, jobs=jobs, calibrate=True)
    planned, step_planned = {}, {}
    for stage in plan.stages:
        if stage.name in stale:
            planned[stage.name] = None if stage.local_s is None else (
                STAGE_OVERHEAD_S + stage.compute_s * (1.0 - _done_share(root, stage)))
            if stage.local_s is not None and stage.kind in CHAIN_STAGE_KINDS and stage.trainings:
                step_planned[stage.name] = stage.compute_s / stage.trainings
    log(opening_line(seconds, planned, jobs))
    return TimeBudget(seconds, planned, step_planned=step_planned)


def opening_line(seconds: float, planned: dict[str, float | None], jobs: int) -> str:
    """What a budgeted call starts with: its budget and the plan's wall time for every stage still to do."""
    known = [s for s in planned.values() if s is not None]
    wall = f"about {makespan(known, jobs) / 3600:.1f} h on {jobs} worker(s) by the plan" + (
        f" ({len(planned) - len(known)} without a rate)" if len(known) < len(planned) else "")
    return (f"[roar] time budget {seconds / 60:.0f} min: {len(planned)} stage(s) to do, {wall}; "
            "each starts only if it is expected to finish in time (a chain: its next step)")
