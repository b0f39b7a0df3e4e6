"""The time budget: durations, which stages may start, the pace of this machine, what is left."""

from __future__ import annotations

import pytest

from roar.core.errors import RoarError
from roar.launch.budget import TimeBudget, opening_line, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [("2h30m", 9000), ("90m", 5400), ("1.5h", 5400), ("45s", 45),
                                               ("1h 5m 3s", 3903), ("10M", 600)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "2x", "h", "2h30", "-1h", "0m", "1h-5m"])
def test_a_bad_duration_is_named_with_examples(text: str) -> None:
    with pytest.raises(RoarError, match="--time-budget"):
        parse_duration(text)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_stage_starts_only_when_it_is_expected_to_finish_in_the_budget() -> None:
    clock = Clock()
    budget = TimeBudget(600.0, {"a": 300.0, "b": 400.0, "c": None}, clock)
    assert budget.expected("done") == 0.0  # up to date: DVC only checks it
    assert budget.admits("a") and budget.admits("done")
    clock.now += 150.0  # "a" took half its plan: this machine is twice as fast as planned
    budget.finished("a", 150.0)
    assert budget.pace == 0.5 and budget.expected("b") == 200.0
    assert budget.admits("b")  # 150 + 200 <= 600
    clock.now += 400.0  # "b" took twice its pace-scaled estimate
    budget.finished("b", 400.0)
    assert budget.pace == pytest.approx(550 / 700)
    assert budget.admits("c")  # unknown cost: starts while nothing was refused
    budget.planned["d"] = 100.0
    assert not budget.admits("d") and budget.refused[-1] == "d"  # 550 + 78.6 > 600
    assert not budget.admits("c")  # unknown cost, and a stage was refused
    assert budget.admits("done")  # up to date stages always start (the next waves need them)


def test_what_is_left_and_its_expected_wall_time() -> None:
    budget = TimeBudget(60.0, {"a": 30.0, "b": 100.0, "c": 100.0, "d": 50.0}, Clock())
    budget.finished("a", 60.0)  # pace 2
    left, expected = budget.left(["prepare", "a", "b", "c", "d"], jobs=2)
    assert left == ["b", "c", "d"]
    assert expected == pytest.approx(300.0)  # 200 | 200 + 100 on two workers
    assert TimeBudget(1.0, {"x": None}, Clock()).left(["x"], 1) == (["x"], None)


def test_the_pace_stays_within_a_factor_of_four() -> None:
    budget = TimeBudget(60.0, {"a": 10.0, "b": 10.0}, Clock())
    budget.finished("a", 1000.0)
    assert budget.pace == 4.0
    budget = TimeBudget(60.0, {"a": 1000.0}, Clock())
    budget.finished("a", 1.0)
    assert budget.pace == 0.25


def test_the_opening_line_states_the_budget_and_the_plans_wall_time():
    # 3600 and 1800 s on 2 workers: 1.0 h; one stage without a rate is named as such
    line = opening_line(5400, {"a": 3600.0, "b": 1800.0, "c": None}, 2)
    assert line == ("[roar] time budget 90 min: 3 stage(s) to do, about 1.0 h on 2 worker(s) by the plan "
                    "(1 without a rate); each starts only if it is expected to finish in time (a chain: its next step)")
    assert "about 1.5 h on 1 worker(s) by the plan;" in opening_line(60, {"a": 3600.0, "b": 1800.0}, 1)


def test_a_chain_starts_when_its_next_step_fits_and_gets_the_budgets_end_as_its_deadline() -> None:
    from roar.launch.plan import STAGE_OVERHEAD_S
    from roar.pipeline.deadline import DEADLINE_ENV, StepDeadline

    clock = Clock()
    budget = TimeBudget(1000.0, {"chain": 5000.0, "reference": 5000.0}, clock, step_planned={"chain": 500.0},
                        wall_clock=lambda: 1_765_000_000.0)
    clock.now += 400.0  # 600 s left: no whole stage fits, one step of the chain does
    assert budget.admits("chain") and not budget.admits("reference")
    assert budget.stage_env("reference") == {}
    deadline = StepDeadline.parse(budget.stage_env("chain")[DEADLINE_ENV])
    assert (deadline.ends_at, deadline.step_seconds) == (1_765_000_600.0, 500.0)
    clock.now += 600.0 - STAGE_OVERHEAD_S - 499.0  # the step and the stage's start no longer fit
    assert not budget.admits("chain")


def test_a_chain_stopped_at_its_deadline_is_left_with_its_plan_less_what_it_ran() -> None:
    budget = TimeBudget(1000.0, {"a": 400.0, "chain": 3000.0, "other": 3000.0}, Clock(), step_planned={"chain": 300.0})
    budget.finished("a", 800.0)  # pace 2
    budget.stopped_at_deadline("chain", 1000.0)
    assert budget.pace == 2.0  # a stopped stage ran only part of its plan: it says nothing of the pace
    left, expected = budget.left(["a", "chain", "other"], jobs=1)
    assert left == ["chain", "other"]
    assert expected == pytest.approx((6000.0 - 1000.0) + 6000.0)
    budget.stopped_at_deadline("chain", 5990.0)  # at least one step (600 s at this pace) is always left
    assert budget.left(["chain"], jobs=1)[1] == pytest.approx(600.0)
