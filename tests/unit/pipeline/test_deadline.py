"""A chain stage's deadline: the value `roar pipeline` hands down, and when a step may start; the signals that
stop a stage."""

from __future__ import annotations

import math
import os
import signal
import time

import pytest

from roar.pipeline.deadline import (DEADLINE_ENV, STOP_SIGNALS, Interrupted, StepDeadline, StoppedAtDeadline,
                                    stop_on_signals)
from roar.tracking.protocol import ended_status


class Ticks:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, start: float, step: float) -> None:
        self.now, self.step = start - step, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_the_value_round_trips_and_an_empty_one_means_no_deadline() -> None:
    deadline = StepDeadline.parse(StepDeadline(1765000000.25, 412.5).format())
    assert (deadline.ends_at, deadline.step_seconds) == (1765000000.25, 412.5)
    for empty in (None, "", "  "):
        assert StepDeadline.parse(empty).ends_at == math.inf


@pytest.mark.parametrize("text", ["soon", "1765000000", "1765000000 12 3", "1765000000 -5", "1765000000 nan"])
def test_a_bad_value_is_named_with_its_form(text: str) -> None:
    with pytest.raises(ValueError, match=DEADLINE_ENV):
        StepDeadline.parse(text)


def test_a_step_starts_only_when_expected_to_end_by_the_deadline() -> None:
    # 1000 s left; a step is planned at 300 s but the first one takes 400 s (the clock moves 400 s per reading)
    deadline = StepDeadline(ends_at=1000.0, step_seconds=300.0, clock=Ticks(0.0, 400.0))
    with deadline.step(10):  # read at 0: 300 s expected, 1000 left
        pass
    assert deadline.longest == 400.0 and deadline.expected() == 400.0  # the longest step ran sets the bar
    with pytest.raises(StoppedAtDeadline) as stop:  # read at 800: 400 s expected, 200 left
        with deadline.step(20):
            pytest.fail("the step must not start")
    assert (stop.value.k, stop.value.expected, stop.value.left) == (20, 400.0, 200.0)
    assert "stopped before step k=20" in str(stop.value) and "resumes" in str(stop.value)


def test_a_step_that_fails_is_not_timed_and_no_deadline_never_stops() -> None:
    deadline = StepDeadline(ends_at=10_000.0, step_seconds=1.0, clock=Ticks(0.0, 5000.0))
    with pytest.raises(RuntimeError):
        with deadline.step(10):
            raise RuntimeError("the step failed")
    assert deadline.longest == 0.0
    with StepDeadline().step(90):  # the default: no deadline
        pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_raises_once_ends_runs_killed_and_later_ones_wait_for_the_unwinding(signum: int) -> None:
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    unwound = False
    with pytest.raises(Interrupted) as stopped:
        with stop_on_signals():
            installed = signal.getsignal(signal.SIGTERM)
            try:
                os.kill(os.getpid(), signum)
                time.sleep(5)  # the handler raises here, in the main thread, at once
            finally:
                signal.signal(signal.SIGTERM, installed)  # as Lightning's Trainer puts it back when a fit unwinds
                os.kill(os.getpid(), signal.SIGTERM)  # a second signal (Slurm signals every process) is ignored
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                unwound = True
    assert unwound and stopped.value.signum == signum
    assert signal.Signals(signum).name in str(stopped.value)
    assert ended_status(stopped.value) == "KILLED" and ended_status(RuntimeError()) == "FAILED"
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before


def test_no_signal_no_stop_and_the_handlers_come_back_after_an_error() -> None:
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    with stop_on_signals():
        pass
    with pytest.raises(ValueError), stop_on_signals():
        raise ValueError("not a stop")
    assert {s: signal.getsignal(s) for s in STOP_SIGNALS} == before
