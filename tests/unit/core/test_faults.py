"""Fault points: a named point SIGKILLs the process, ``stall:`` makes it hang there, any other step passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

REACH = ("from roar.core.faults import at_step, failpoint; at_step(20); print('at the point', flush=True); "
         "failpoint('data-written'); print('passed')")


def reach(wanted: str) -> subprocess.Popen:
    env = {**os.environ, "ROAR_FAILPOINT": wanted}
    return subprocess.Popen([sys.executable, "-c", REACH], env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("wanted", ["data-written@k40", "model-written@k20", "stall:data-written@k40"])
def test_other_points_and_steps_pass(wanted: str) -> None:
    proc = reach(wanted)
    assert proc.communicate(timeout=60)[0].split() == ["at", "the", "point", "passed"] and proc.returncode == 0


def test_the_named_point_kills_with_sigkill() -> None:
    proc = reach("data-written@k20")
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def test_stall_hangs_at_the_point_until_killed() -> None:
    proc = reach("stall:data-written@k20")
    try:
        assert proc.stdout.readline().strip() == "at the point"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)  # past the point it would print and exit at once
    finally:
        proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGTERM and "passed" not in out
