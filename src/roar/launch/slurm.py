"""Run a study on a Slurm cluster: one batch job per DVC stage that is not up to date.

The stages to run are those ``dvc status`` reports changed plus everything downstream of them in
``dvc.yaml``'s graph; each becomes ``sbatch --dependency=afterok:<its upstream jobs>`` running
``dvc --wait-for-lock repro --single-item <stage>`` in the shared workspace (DVC's lock makes
parallel stages of one workspace safe, as in the local executor). A last ``finish`` job, after all
of them, runs ``roar pipeline-finish``: a final ``dvc repro`` that proves the study complete, the
optional ``dvc push``, and the end of the MLflow study run.

A chain job gets its time limit, less a margin, as its deadline (:mod:`roar.pipeline.deadline`): it stops
between steps before a step that would not end in time and exits 75, so that Slurm's kill at the limit
(TIMEOUT) does not cut a step or leave its MLflow runs open; its finished steps are kept and a resubmission
resumes it.

``--kill-on-invalid-dep=yes`` makes the dependents of a failed job leave the queue at once
(CANCELLED, DependencyNeverSatisfied) instead of pending forever. Each submission is recorded in
``.roar/slurm/<stamp>/submission.json`` beside the job scripts and logs; a new submission is refused
while jobs of the last one are still queued or running, and submits only what is still not done.
Job states come from ``sacct`` where accounting is enabled, else from ``scontrol`` (which knows
finished jobs for the cluster's ``MinJobAge``).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from roar.core.errors import RoarError
from roar.core.fileio import write_text_atomic
from roar.core.tools import tool_env
from roar.config.layout import stage_kind
from roar.launch.pending import pending_stages
from roar.launch.shared_trainings import share_finished_trainings
from roar.pipeline.deadline import CHAIN_STAGE_KINDS, DEADLINE_ENV, EXIT_MORE_TO_DO, STOPPED_IN_DVC

SUBMISSIONS = Path(".roar") / "slurm"
DEFAULTS = {"cpus": 1, "time": "04:00:00", "memory": "4G", "gpus": 0, "partition": None, "account": None,
            "extra": []}
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "UNKNOWN")
FINISH = "finish"
# A chain job stops between steps this long before its time limit: a minute, or 5 % of a limit over 20 minutes
# (the last step's no-retrain scores, the end of its MLflow runs and DVC's bookkeeping happen in it).
DEADLINE_MARGIN_S, DEADLINE_MARGIN_SHARE = 60.0, 0.05
SLURM_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")


@dataclass
class Job:
    """One submitted stage: its Slurm id, the jobs it waits for, its script and log."""

    stage: str
    job_id: str
    after: list[str]
    log: str
    state: str = "PENDING"
    reason: str = ""
    exit_code: str = ""
    elapsed: str = ""


@dataclass
class Submission:
    """What one ``roar pipeline --executor slurm`` submitted (``submission.json``)."""

    folder: str
    study_run_id: str
    submitted_at: str
    jobs: list[Job] = field(default_factory=list)

    def save(self) -> None:
        write_text_atomic(Path(self.folder) / "submission.json", json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> Submission:
        data = json.loads(path.read_text())
        return cls(data["folder"], data["study_run_id"], data["submitted_at"], [Job(**j) for j in data["jobs"]])


def job_resources(slurm: dict | None, kind: str) -> dict:
    """The resources of one stage kind: defaults < ``runtime.slurm`` < ``runtime.slurm.stages.<kind>``."""
    slurm = dict(slurm or {})
    per_kind = (slurm.pop("stages", None) or {}).get(kind) or {}
    return {**DEFAULTS, **slurm, **per_kind}


def sbatch_options(resources: dict) -> list[str]:
    """The ``sbatch`` options of :func:`job_resources`' result."""
    options = [f"--cpus-per-task={resources['cpus']}", f"--time={resources['time']}",
               f"--mem={resources['memory']}"]
    if resources["gpus"]:
        options.append(f"--gpus={resources['gpus']}")
    for key in ("partition", "account"):
        if resources[key]:
            options.append(f"--{key}={resources[key]}")
    return options + list(resources["extra"])


def limit_seconds(limit: str | int) -> float | None:
    """Seconds of a Slurm time limit (minutes, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``);
    None when unlimited. RoarError for anything else."""
    text = str(limit).strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    found = SLURM_TIME.fullmatch(text)
    if not found:
        raise RoarError(f"runtime.slurm time {limit!r} is not a Slurm time limit; use minutes, HH:MM:SS or "
                        "D-HH:MM:SS (e.g. 04:00:00)")
    days, first, second, third = (int(part) if part else None for part in found.groups())
    if days is not None:  # D-HH[:MM[:SS]]
        return days * 86400.0 + first * 3600 + (second or 0) * 60 + (third or 0)
    if third is not None:  # HH:MM:SS
        return first * 3600.0 + second * 60 + third
    return first * 60.0 + (second or 0)  # MM or MM:SS


def chain_deadline_s(limit: str | int) -> float | None:
    """Seconds after its start at which a chain job with time limit ``limit`` stops starting steps."""
    seconds = limit_seconds(limit)
    return None if seconds is None else seconds - max(DEADLINE_MARGIN_S, DEADLINE_MARGIN_SHARE * seconds)


def job_script(root: Path, stage: str, command: str, resources: dict, log: Path) -> str:
    """The batch script of one stage; a chain stage stops between steps before its time limit and then exits
    ``EXIT_MORE_TO_DO`` (DVC, which ran it, exits 255: its log tells the two apart)."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name=roar:{stage}", f"#SBATCH --output={log}",
             f"#SBATCH --chdir={root.resolve()}", "#SBATCH --export=ALL", "#SBATCH --kill-on-invalid-dep=yes",
             *(f"#SBATCH {option}" for option in sbatch_options(resources)),
             "set -euo pipefail", f'echo "[roar] {stage} on $(hostname), job $SLURM_JOB_ID"']
    stop_after = chain_deadline_s(resources["time"]) if stage_kind(stage) in CHAIN_STAGE_KINDS else None
    if stop_after is None:
        return "\n".join([*lines, f"exec {command}"]) + "\n"
    job_log = str(log).replace("%j", "$SLURM_JOB_ID")
    lines += [f'export {DEADLINE_ENV}="$(( $(date +%s) + {stop_after:.0f} )) 0"',
              f"{command} && exit 0 || code=$?",
              f'if grep -qE "{STOPPED_IN_DVC.pattern}" "{job_log}"; then exit {EXIT_MORE_TO_DO}; fi',
              'exit "$code"']
    return "\n".join(lines) + "\n"


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def sbatch(script: Path, after: list[str], env: dict) -> str:
    """Submit ``script`` after the jobs ``after``; returns the job id."""
    args = ["sbatch", "--parsable"]
    if after:
        args.append("--dependency=afterok:" + ":".join(after))
    proc = _run([*args, str(script)], env=env)
    if proc.returncode != 0:
        raise RoarError(f"sbatch {script.name} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout.strip().split(";")[0]  # "id" or "id;cluster"


def parse_sacct(text: str) -> dict[str, dict]:
    """``sacct -n -P -X -o JobID,State,ExitCode,Elapsed,Reason`` lines as job states."""
    states = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        job, state, code, elapsed, reason = (line.split("|") + [""] * 5)[:5]
        # "CANCELLED by 0" -> CANCELLED
        states[job] = {"state": state.split()[0] if state else "UNKNOWN", "reason": reason, "exit_code": code,
                       "elapsed": elapsed}
    return states


def parse_scontrol(text: str) -> dict[str, dict]:
    """``scontrol -o show job`` lines (one ``Key=Value ...`` line per job) as job states."""
    states = {}
    for line in text.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "JobId" in fields:
            states[fields["JobId"]] = {"state": fields.get("JobState", "UNKNOWN"), "reason": fields.get("Reason", ""),
                                       "exit_code": fields.get("ExitCode", ""), "elapsed": fields.get("RunTime", "")}
    return states


_SACCT: dict[str, bool | None] = {"works": None}


def job_states(job_ids: list[str]) -> dict[str, dict]:
    """``{id: {state, reason, exit_code, elapsed}}`` from ``sacct``, else ``scontrol`` (jobs it no
    longer knows are UNKNOWN)."""
    if not job_ids:
        return {}
    states: dict[str, dict] = {}
    if _SACCT["works"] is not False and shutil.which("sacct"):
        proc = _run(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State,ExitCode,Elapsed,Reason"])
        if proc.returncode == 0:
            states = parse_sacct(proc.stdout)
        elif "accounting storage is disabled" in proc.stderr + proc.stdout:
            _SACCT["works"] = False  # a cluster without slurmdbd: ask scontrol from now on
    if any(job not in states for job in job_ids):
        proc = _run(["scontrol", "-o", "show", "job"])
        if proc.returncode == 0:
            states = {**parse_scontrol(proc.stdout), **states}
    unknown = {"state": "UNKNOWN", "reason": "no longer known to Slurm", "exit_code": "", "elapsed": ""}
    return {job: states.get(job, unknown) for job in job_ids}


def refresh(submission: Submission) -> Submission:
    """Update every job's state in place (and return the submission)."""
    states = job_states([job.job_id for job in submission.jobs])
    for job in submission.jobs:
        for key, value in states[job.job_id].items():
            setattr(job, key, value)
    return submission


def last_submission(root: Path) -> Submission | None:
    """The most recent submission of this workspace, if any."""
    found = sorted((root / SUBMISSIONS).glob("*/submission.json"))
    return Submission.load(found[-1]) if found else None


def check_no_live_jobs(root: Path) -> None:
    """Refuse a new submission while jobs of the last one are queued or running."""
    previous = last_submission(root)
    if previous is None:
        return
    live = [job for job in refresh(previous).jobs if job.state not in TERMINAL]
    if live:
        ids = ", ".join(job.job_id for job in live[:10]) + (" ..." if len(live) > 10 else "")
        raise RoarError(f"{len(live)} job(s) of the last submission ({previous.folder}) are still queued or "
                        f"running ({ids}); wait for them (`roar jobs --wait`) or cancel them (scancel), then "
                        "submit again (finished stages are kept)")


def check_cluster() -> None:
    """One line if this machine cannot submit Slurm jobs."""
    missing = [tool for tool in ("sbatch", "scontrol") if not shutil.which(tool)]
    if missing:
        raise RoarError(f"--executor slurm needs Slurm's {' and '.join(missing)} on PATH; run on a cluster's "
                        "login node, or use --executor local")
    ping = _run(["scontrol", "ping"])
    if ping.returncode != 0 or "UP" not in ping.stdout:
        status = (ping.stdout.strip() or ping.stderr.strip()).splitlines()
        raise RoarError(f"the Slurm controller does not answer (`scontrol ping`: {status[0] if status else 'no output'}); "
                        "start it or ask the cluster's admins, or use --executor local")


def submit(root: Path, slurm: dict | None, study_run_id: str, env: dict, push: bool, log=print,
           remake_missing: bool = False) -> Submission:
    """Submit every stage that is not up to date, then the ``finish`` job; returns the submission
    (with no jobs when everything is up to date)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    folder = root / SUBMISSIONS / stamp
    submission = Submission(str(folder), study_run_id, stamp)
    stages = pending_stages(root, remake_missing, log)
    if not stages:
        return submission
    share_finished_trainings(root, stages, log)
    folder.mkdir(parents=True)
    ids: dict[str, str] = {}
    finish_cmd = f"roar pipeline-finish {shlex.quote(study_run_id)} {'--push' if push else '--no-push'}"
    for stage, after in [*stages.items(), (FINISH, list(stages))]:
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", stage)
        script, out = folder / f"{safe}.sh", folder / f"{safe}-%j.out"
        command = finish_cmd if stage == FINISH else f"dvc --wait-for-lock repro --single-item {shlex.quote(stage)}"
        script.write_text(job_script(root, stage, command, job_resources(slurm, stage_kind(stage)), out.resolve()))
        ids[stage] = sbatch(script, [ids[a] for a in after], env)
        submission.jobs.append(Job(stage, ids[stage], [ids[a] for a in after],
                                   str(out).replace("%j", ids[stage])))
        submission.save()  # after each job: an interrupted submission still lists what it submitted
    kinds: dict[str, int] = {}
    for job in submission.jobs:
        kinds[stage_kind(job.stage)] = kinds.get(stage_kind(job.stage), 0) + 1
    log(f"[roar] submitted {len(submission.jobs)} Slurm job(s), {submission.jobs[0].job_id}.."
        f"{submission.jobs[-1].job_id}: " + ", ".join(f"{kind} {n}" for kind, n in kinds.items()))
    log(f"[roar] scripts and logs: {folder.relative_to(root)}/; follow with `roar jobs` or `squeue`")
    return submission


def wait(submission: Submission, poll: float = 10.0, log=print) -> Submission:
    """Poll until every job is finished; logs the counts by state whenever they change."""
    last = ""
    while True:
        refresh(submission)
        counts: dict[str, int] = {}
        for job in submission.jobs:
            counts[job.state] = counts.get(job.state, 0) + 1
        line = ", ".join(f"{state.lower()} {n}" for state, n in sorted(counts.items()))
        if line != last:
            log(f"[roar] jobs: {line}")
            last = line
        if all(job.state in TERMINAL for job in submission.jobs):
            submission.save()
            return submission
        time.sleep(poll)


def summary(submission: Submission) -> str:
    """A table of the jobs, failures first, and what to do next."""
    failed = [job for job in submission.jobs if job.state not in ("COMPLETED", "PENDING", "RUNNING")]
    rows = sorted(submission.jobs, key=lambda j: (j.state == "COMPLETED", int(j.job_id)))
    width = max(len(job.stage) for job in rows)
    lines = [f"{'stage':<{width}}  {'job':>8}  {'state':<10} {'exit':<5} {'elapsed':<9} reason"]
    lines += [f"{job.stage:<{width}}  {job.job_id:>8}  {job.state:<10} {job.exit_code:<5} {job.elapsed:<9} "
              f"{job.reason if job.state != 'COMPLETED' else ''}".rstrip() for job in rows]
    stopped = [job for job in failed if job.exit_code.partition(":")[0] == str(EXIT_MORE_TO_DO)]
    if stopped:
        lines.append(f"{len(stopped)} chain job(s) stopped between steps before their time limit (exit "
                     f"{EXIT_MORE_TO_DO}): their finished steps are kept; run `roar pipeline --executor slurm` again "
                     "to resume them (a longer runtime.slurm.stages.<kind>.time needs fewer submissions).")
    others = [job for job in failed if job not in stopped]
    failures = [job for job in others if job.state != "CANCELLED"]
    if stopped and others and not failures:
        lines.append(f"{len(others)} job(s) after them were cancelled; the resubmission runs them.")
    elif others:
        first = (failures or others)[0]
        lines.append(f"{len(failed)} job(s) did not complete; first failure: {first.stage} (log {first.log}). "
                     "Fix it and run `roar pipeline --executor slurm` again: only stages that are not done "
                     "are submitted.")
    return "\n".join(lines)


def study_env(study_run_id: str, tracking_uri: str) -> dict:
    """The environment the jobs inherit (``--export=ALL``): the study run and tracking URI."""
    return tool_env(ROAR_STUDY_RUN_ID=study_run_id, MLFLOW_TRACKING_URI=tracking_uri)
