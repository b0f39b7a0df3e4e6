"""Named points where the fault tests kill a stage process with SIGKILL.

``ROAR_FAILPOINT=<point>@k<k>`` (e.g. ``data-written@k40``) makes a chain process kill itself
with SIGKILL, the signal nothing can catch, when it reaches that point of step k: the same
state as a node failure or ``kill -9`` at that moment. Unset (always, outside tests), a point costs
one dictionary lookup.

Points: ``importance`` (after the first split's importance, before the others), ``train``
(after the first training epoch), ``data-written`` (the step's masked data on disk, its model not
yet trained), ``model-written`` (model on disk, step record not yet written).

``ROAR_FAILPOINT=stall:<point>@k<k>`` makes the process sleep there instead, until something kills
it: a step that never ends, for the tests of wall-time limits (a Slurm job's ``--time``).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "ROAR_FAILPOINT"
_step = {"k": None}


def at_step(k: int | None) -> None:
    """Name the step the process works on (for points reached deep inside training)."""
    _step["k"] = k


def failpoint(point: str) -> None:
    """SIGKILL this process if ``ROAR_FAILPOINT`` names ``point`` at the current step; stall it (sleep until
    killed) if it names ``stall:`` and the point."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    here = f"{point}@k{_step['k']}"
    if wanted == here:
        os.kill(os.getpid(), signal.SIGKILL)
    if wanted == f"stall:{here}":
        while True:
            time.sleep(60)
