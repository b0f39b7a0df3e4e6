"""When a chain stage stops before its end: at the time budget's deadline that ``roar pipeline`` hands down, or
on a signal.

A chain of the paper's settings runs for hours, and a time budget that admitted only whole chains left a
worker idle for most of its last chain's length. Under a budget a chain stage may therefore start when one
of its steps fits; before each step it computes (a reused step costs nothing) it asks its
:class:`StepDeadline` whether the step is expected to end in time, and stops cleanly when not: every
finished step keeps its record, data and model (the next call reuses them), its runs end KILLED, and the
stage exits with ``EXIT_MORE_TO_DO``.

A machine can also go away mid-step: Slurm signals a job at its time limit or when it is preempted, a
preemptible cloud machine is shut down, a user presses Ctrl-C or stops ``roar pipeline``. Under
:func:`stop_on_signals` SIGTERM and SIGINT end the stage the same way, dropping the step under way (its
outputs are written atomically and its record last, so nothing half-written counts as done).
This decides whether a step runs, never what it computes, so it is off the computing path that the step key
fingerprints.
"""

from __future__ import annotations

import math
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from roar.tracking.protocol import RunInterrupted

# The environment variable ``roar pipeline`` sets for a chain stage under a time budget:
# "<end, unix seconds> <expected seconds of one step>".
DEADLINE_ENV = "ROAR_CHAIN_DEADLINE"
# The exit status of a pipeline call stopped by its budget with stages left, and of a chain stage stopped at its
# deadline with steps left: EX_TEMPFAIL ("try again later"), so that a job script can tell "run me again" from
# success and from failure.
EXIT_MORE_TO_DO = 75
# The DVC stage kinds of chains: the stages that stop between steps.
CHAIN_STAGE_KINDS = ("recursive", "roar")
# How `dvc repro` reports a stage command that stopped at its deadline (DVC itself then exits 255).
STOPPED_IN_DVC = re.compile(rf"exited with {EXIT_MORE_TO_DO}\b")


class StoppedAtDeadline(RunInterrupted):
    """A chain stopped before step ``k``: it was expected to take ``expected`` seconds, ``left`` were left."""

    def __init__(self, k: int, expected: float, left: float):
        super().__init__(f"stopped before step k={k}: it is expected to take {expected:.0f} s and "
                         f"{max(left, 0.0):.0f} s are left before the time budget ends; the finished steps are "
                         "kept and the next `roar pipeline` resumes from them")
        self.k, self.expected, self.left = k, expected, left


@dataclass
class StepDeadline:
    """Steps start only when expected to end by ``ends_at`` (unix seconds): a step is expected to take
    ``step_seconds`` (the plan's, at this machine's pace) or as long as the longest step this process ran."""

    ends_at: float = math.inf
    step_seconds: float = 0.0
    clock: Callable[[], float] = field(default=time.time, repr=False)
    longest: float = 0.0

    @classmethod
    def parse(cls, text: str | None) -> StepDeadline:
        """The deadline of a ``DEADLINE_ENV`` value; no deadline for None or an empty value."""
        if not text or not text.strip():
            return cls()
        try:
            ends_at, step_seconds = (float(part) for part in text.split())
        except ValueError:
            raise ValueError(f"{DEADLINE_ENV}={text!r} is not '<end, unix seconds> <seconds per step>' "
                             "(roar pipeline sets it)") from None
        if not step_seconds >= 0:
            raise ValueError(f"{DEADLINE_ENV}={text!r}: the seconds per step must be 0 or more")
        return cls(ends_at, step_seconds)

    def format(self) -> str:
        """The ``DEADLINE_ENV`` value of this deadline."""
        return f"{self.ends_at:.3f} {self.step_seconds:.3f}"

    def expected(self) -> float:
        return max(self.step_seconds, self.longest)

    @contextmanager
    def step(self, k: int) -> Iterator[None]:
        """Around the computation of step ``k``: raises :class:`StoppedAtDeadline` before it when it is not
        expected to end in time, and remembers how long it took."""
        started = self.clock()
        left = self.ends_at - started
        if self.expected() > left:
            raise StoppedAtDeadline(k, self.expected(), left)
        yield
        self.longest = max(self.longest, self.clock() - started)


NO_DEADLINE = StepDeadline()

# The signals that stop a stage cleanly: SIGTERM (Slurm at a job's time limit or on preemption, a machine
# shutting down, `kill`) and SIGINT (Ctrl-C, and `roar pipeline` stopping its stages: DVC ignores SIGINT while
# its stage command runs and reports the command's exit status).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(RunInterrupted):
    """A stage stopped by a signal (one of ``STOP_SIGNALS``): the work under way is dropped, what it finished is
    kept."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by {signal.Signals(signum).name}: the work under way is dropped, what was "
                         "finished is kept and the next `roar pipeline` resumes from it")
        self.signum = signum


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Inside, the first SIGTERM or SIGINT raises :class:`Interrupted` (in the main thread, where Python runs
    signal handlers), so the runs it unwinds end KILLED; later ones are ignored until the block is left, because
    Slurm and a shutdown signal every process while ``roar pipeline`` forwards its own (SIGKILL still ends it
    at once). Lightning's ``Trainer.fit`` calls this handler after its own SIGTERM handler (which alone would end
    the fit with ``SIGTERMException`` at the next batch's end, its runs FAILED) and reinstalls it when the fit
    unwinds, so "ignored" is a flag of the handler, not a handler swapped in."""
    stopped: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not stopped:
            stopped.append(signum)
            raise Interrupted(signum)

    with on_stop_signals(stop):
        yield


@contextmanager
def on_stop_signals(handler: Callable[[int, object], None]) -> Iterator[None]:
    """``handler`` handles ``STOP_SIGNALS`` inside; the handlers before it come back after."""
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
