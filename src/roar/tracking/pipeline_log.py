"""The pipeline log: one line per local ``roar pipeline`` call in ``runs/pipeline.jsonl``.

A paper-scale study runs in pieces, over days and machines, and the machines go away. The step records
say what each step computed and how long its parts took; this log says what each call ran, for how
long, with how many workers, on which hardware (CPU model and the instruction set torch picked: float
results can differ across CPU types, see docs/method.md) and how it ended. It lives beside the run
facts under ``runs/`` (git-tracked, no DVC output), so the wall time and process-hours a study took
travel with the study.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from roar.core.fileio import write_text_atomic

LOG = Path("runs") / "pipeline.jsonl"
FINISHED, STOPPED, FAILED = "finished", "stopped by the time budget", "failed"


def stopped_by(signal_name: str) -> str:
    """The outcome of a call that a signal stopped (``SIGTERM``, ``SIGINT``)."""
    return f"stopped by {signal_name}"


def machine() -> dict[str, object]:
    """The hardware a call ran on: CPU model, the cores this process may use, torch and its CPU
    instruction set, and the GPUs torch sees."""
    import torch

    info: dict[str, object] = {"cpu": _cpu_model(), "cores": len(os.sched_getaffinity(0)),
                               "torch": torch.__version__,
                               "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class PipelineCall:
    """One call in progress: the pipeline fills ``stage_seconds`` as stages finish; :meth:`end` logs it."""

    root: Path
    jobs: int
    git_commit: str = ""  # the checkout the call started from
    started: datetime = field(init=False, default_factory=lambda: datetime.now(timezone.utc))
    stage_seconds: dict[str, float] = field(default_factory=dict)
    _clock: float = field(init=False, repr=False, default_factory=time.perf_counter)

    def end(self, outcome: str) -> dict:
        """Append this call's line to the study's log (rewritten whole through a rename) and return it."""
        entry = {"started": self.started.isoformat(timespec="seconds"),
                 "wall_seconds": round(time.perf_counter() - self._clock, 1), "jobs": self.jobs,
                 "outcome": outcome, "git_commit": self.git_commit, "machine": machine(),
                 "stages": {name: round(seconds, 1) for name, seconds in self.stage_seconds.items()}}
        path = self.root / LOG
        earlier = path.read_text() if path.is_file() else ""
        write_text_atomic(path, earlier + json.dumps(entry, sort_keys=True) + "\n")
        return entry


def read_calls(root: Path) -> list[dict]:
    """The logged calls of the study at ``root``, oldest first."""
    path = root / LOG
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def totals(calls: list[dict]) -> tuple[float, float]:
    """Wall hours and stage-process hours over ``calls`` (a stage process is one worker: process-hours times
    the threads per stage, ``runtime.threads``, are core-hours)."""
    wall = sum(call["wall_seconds"] for call in calls) / 3600
    process = sum(sum(call["stages"].values()) for call in calls) / 3600
    return wall, process


def machine_label(info: dict) -> str:
    """A machine as one line: CPU model, torch's CPU instruction set, cores, and its GPUs if any."""
    label = f"{info.get('cpu', '?')} ({info.get('cpu_capability', '?')}), {info.get('cores', '?')} cores"
    return label + (f", {', '.join(info['gpus'])}" if info.get("gpus") else "")


def by_machine(calls: list[dict]) -> list[dict]:
    """Per machine the calls of ``calls`` ran on, in the order each first appears: how many calls, their wall
    and stage-process hours, and how many stages they ran (started, whether they finished or stopped)."""
    groups: dict[str, list[dict]] = {}
    for call in calls:
        groups.setdefault(machine_label(call.get("machine") or {}), []).append(call)
    rows = []
    for label, group in groups.items():
        wall, process = totals(group)
        stages = {name for call in group for name in call["stages"]}
        rows.append({"machine": label, "calls": len(group), "wall_hours": round(wall, 2),
                     "stage_process_hours": round(process, 2), "stages": len(stages)})
    return rows
