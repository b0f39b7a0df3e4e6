"""When a chain stage stops between steps: the end of the time budget that ``roar pipeline`` hands down.

A chain of the paper's settings runs for hours, and a time budget that admitted only whole chains left a
worker idle for most of its last chain's length. Under a budget a chain stage may therefore start when one
of its steps fits; before each step it computes (a reused step costs nothing) it asks its
:class:`StepDeadline` whether the step is expected to end in time, and stops cleanly when not: every
finished step keeps its record, data and model (the next call reuses them), its runs end KILLED, and the
stage exits with ``EXIT_MORE_TO_DO``. This decides whether a step runs, never what it computes, so it is
off the computing path that the step key fingerprints.
"""

from __future__ import annotations

import math
import re
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
