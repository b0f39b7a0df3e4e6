"""Running a study: validate, plan, launch (locally or on Slurm), follow jobs, find its MLflow runs."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from roar.cli.common import PARAMS, STUDY, fail, load_checked_params, command
from roar.core.errors import RoarError

if TYPE_CHECKING:
    from roar.launch.local import StoppedEarly


@command()
def validate(params: Path = PARAMS) -> None:
    """Check PARAMS against the schema and that the data and model files the study would read are
    readable where they exist; prints `<file>: ok (N stages)` or the one-line error."""
    from roar.pipeline.checks import check_outputs
    from roar.config.schema import check_study, stage_count

    loaded = load_checked_params(params)
    check_outputs(loaded)
    typer.echo(f"{params}: ok ({stage_count(check_study(loaded['study'], str(params)))} stages)")
    from roar.models.device import device_problem

    # A warning, not a failure: a login node without a GPU may submit stages to GPU nodes.
    problem = device_problem((loaded.get("runtime") or {}).get("device"))
    if problem:
        typer.echo(f"{params}: warning: {problem}; stages started on this machine will stop", err=True)


class Executor(str, Enum):
    """Where ``roar pipeline`` runs the stages."""

    local = "local"
    slurm = "slurm"


@command()
def plan(params_file: Path = typer.Argument(Path("params.yaml"), metavar="[PARAMS]", help="Study to plan."),
         jobs: int = typer.Option(1, "--jobs", help="Stages run at once (for the wall time)."),
         gpu_speedup: str = typer.Option(None, "--gpu-speedup", help="GPU speed-up over one local stage process: "
                                         "X for every model, or MODEL=X,... (e.g. bilstm-attention=5,roberta=40)."),
         calibrate: bool = typer.Option(False, "--calibrate", help="Time synthetic batches (about 30 s) for what "
                                        "no earlier run in the MLflow store measured."),
         mlflow_uri: str = typer.Option(None, "--mlflow", help="MLflow store with earlier runs (default: the "
                                        "project's tracking URI).")) -> None:
    """Print the stages, trainings and importance passes of PARAMS and an estimate of their compute."""
    from roar.launch.plan import build_plan, format_plan

    loaded = load_checked_params(params_file)
    # a study folder's params: sizes from its own prepared data (rates from the project's one MLflow store)
    root = params_file.parent if (params_file.parent / "dvc.yaml").is_file() else Path(".")
    typer.echo(format_plan(build_plan(loaded, str(params_file), root, mlflow_uri, jobs, gpu_speedup, calibrate)))


@command()
def pipeline(jobs: int = typer.Option(2, min=1, help="Stages run at once (local executor)."),
             push: bool = typer.Option(True, "--push/--no-push", help="Push outputs to the DVC remote."),
             executor: Executor = typer.Option(Executor.local, help="local: on this machine; slurm: one "
                                               "Slurm job per stage that is not done (runtime.slurm)."),
             wait: bool = typer.Option(False, "--wait/--no-wait", help="slurm: wait for the jobs and print "
                                       "their states."),
             poll: float = typer.Option(10.0, min=0.1, help="slurm --wait: seconds between state checks."),
             time_budget: str = typer.Option(None, "--time-budget", help="local: start no stage that would not "
                                             "finish within this time (e.g. 2h30m, 90m); then stop cleanly, write "
                                             "the partial report, say what is left and exit 75. Run again to "
                                             "resume."),
             remake_missing: bool = typer.Option(False, "--remake-missing", help="Also rerun finished stages whose "
                                                 "cached outputs (models, masked data) this machine lacks; by "
                                                 "default their committed records stand for them."),
             study: str = STUDY) -> None:
    """Run the whole study (dvc repro, chains in parallel, or Slurm jobs), then push to the DVC remote."""
    import subprocess
    import time

    from roar.launch.budget import parse_duration
    from roar.launch.studies import resolve_study

    budget_seconds = None if time_budget is None else parse_duration(time_budget)
    if budget_seconds is not None and executor is Executor.slurm:
        raise RoarError("--time-budget applies to the local executor; Slurm jobs keep their own time limit "
                        "(runtime.slurm), and a resubmission resumes the stages that did not finish")
    root = resolve_study(study)
    loaded = load_checked_params(root / "params.yaml")

    from roar.config.layout import project_root
    from roar.pipeline.provenance import refresh_provenance

    for key in refresh_provenance(project_root(root)):
        typer.echo(f"[roar] the code of {key} changed: its stages run again (`roar provenance verify` proves "
                   "them unchanged by recomputing a sample instead)")

    from roar.launch.local import StoppedEarly, push_study, run_pipeline, submit_pipeline

    start = time.perf_counter()
    if executor is Executor.slurm:
        from roar.launch.slurm import summary

        submission = submit_pipeline(root, push=push, wait=wait, poll=poll, log=typer.echo,
                                     remake_missing=remake_missing)
        if wait and submission.jobs:
            typer.echo(summary(submission))
            typer.echo(f"[roar] Slurm jobs finished in {time.perf_counter() - start:.0f} s")
            if any(job.state != "COMPLETED" for job in submission.jobs):
                raise typer.Exit(1)
        return
    budget = None
    if budget_seconds is not None:
        from roar.launch.budget import plan_budget

        budget = plan_budget(root, loaded, budget_seconds, jobs, log=typer.echo, remake_missing=remake_missing)
    try:
        run_pipeline(root, jobs=jobs, log=typer.echo, gate=budget, remake_missing=remake_missing)
    except StoppedEarly as stop:
        if stop.signal_name:
            _stopped_by_signal(root, stop, time.perf_counter() - start)
        else:
            _stopped_by_budget(root, budget, jobs, time.perf_counter() - start)
    except RuntimeError as error:  # a stage failed: its output follows the first line
        fail(error, multiline=True)
    except subprocess.CalledProcessError as error:
        fail(error)
    _rewrite_run_facts(root)
    typer.echo(f"[roar] pipeline finished in {time.perf_counter() - start:.0f} s")
    _print_log_totals(root)
    _print_runs_link(root)
    if push:
        code = push_study(root)
        if code != 0:
            fail(RuntimeError(f"`dvc push` failed (exit {code}); check the DVC remote "
                               "(`dvc remote list`), or run with --no-push"))
        typer.echo("[roar] outputs pushed to the DVC remote")


def _stopped_by_budget(root: Path, budget, jobs: int, seconds: float) -> None:
    """Say what the time budget left and how long it is expected to take, then exit 75 (run again to resume)."""
    from roar.pipeline.deadline import EXIT_MORE_TO_DO
    from roar.launch.local import chain_steps_done, stage_names

    left, expected = budget.left(stage_names(root), jobs)
    if (root / "reports").is_dir() and chain_steps_done(root):
        _rewrite_run_facts(root)
    hours = "unknown (no rate)" if expected is None else f"about {expected / 3600:.1f} h on {jobs} worker(s)"
    typer.echo(f"[roar] time budget reached after {seconds / 60:.0f} min: {len(left)} stage(s) left, {hours} "
               f"at this machine's pace (x{budget.pace:.2f} of the plan):")
    for stage in left:
        typer.echo(f"[roar]   {stage}")
    typer.echo("[roar] finished stages and steps are kept; run the same command again to resume")
    _print_log_totals(root)
    raise typer.Exit(EXIT_MORE_TO_DO)


def _stopped_by_signal(root: Path, stop: StoppedEarly, seconds: float) -> None:
    """Say which stages a signal stopped or kept from starting, then exit 75 (run again to resume)."""
    from roar.pipeline.deadline import EXIT_MORE_TO_DO

    typer.echo(f"[roar] stopped by {stop.signal_name} after {seconds / 60:.0f} min: {len(stop.refused)} stage(s) of "
               "this wave stopped or not started:")
    for stage in stop.refused:
        typer.echo(f"[roar]   {stage}")
    typer.echo("[roar] finished stages and steps are kept, the stopped ones' MLflow runs ended KILLED; run the same "
               "command again to resume (it writes the report)")
    _print_log_totals(root)
    raise typer.Exit(EXIT_MORE_TO_DO)


def _print_log_totals(root: Path) -> None:
    """What the study's logged calls took so far (commit ``runs/pipeline.jsonl`` with the records)."""
    from roar.tracking.pipeline_log import LOG, read_calls, totals

    calls = read_calls(root)
    wall, process = totals(calls)
    typer.echo(f"[roar] {LOG} (commit it with the records): {len(calls)} call(s) so far, {wall:.2f} h wall, "
               f"{process:.2f} stage-process hours")


def _rewrite_run_facts(root: Path) -> None:
    """The report files written from the run facts (``compute.csv``, ``noretrain_compute.csv``,
    ``machines.csv``, ``README.md``) are no DVC outputs: a rerun whose results came out the same skips the
    report stage, and this call's own facts (``runs/pipeline.jsonl``) come after it, so they are rewritten
    here (the other report files come out byte for byte the same) and logged again to the report run."""
    from roar.config.params import load_params
    from roar.report.study import write_report
    from roar.tracking.mlflow_tracker import git_commit, refresh_report

    params = load_params(root / "params.yaml")
    tables = write_report(params, root / "results", root / "reports", git_commit(root))
    refresh_report(params, root / "reports", tables["racu"], root)


def _print_runs_link(root: Path) -> None:
    """The MLflow UI link to the study's runs: MLflow 3.17's UI opens an experiment on its GenAI overview
    unless the link (or the browser's Model training switch) says otherwise."""
    from roar.config.params import load_params, study_from_params
    from roar.tracking.mlflow_tracker import is_local_store, study_runs_url, tracking_uri

    name, uri = study_from_params(load_params(root / "params.yaml")).name, tracking_uri(root)
    if is_local_store(uri):
        typer.echo(f"[roar] MLflow runs: `mlflow ui --backend-store-uri {uri}`, then open "
                   f"{study_runs_url(name, root=root)}")
    else:
        typer.echo(f"[roar] MLflow runs: {study_runs_url(name, uri, root)}")


@command()
def jobs(wait: bool = typer.Option(False, "--wait/--no-wait", help="Wait until every job has finished."),
         poll: float = typer.Option(10.0, min=0.1, help="Seconds between state checks.")) -> None:
    """Show the states of the last Slurm submission's jobs (`roar pipeline --executor slurm`)."""
    from roar.core.errors import RoarError
    from roar.launch.slurm import check_cluster, last_submission, refresh, summary
    from roar.launch.slurm import wait as wait_jobs

    check_cluster()
    submission = last_submission(Path("."))
    if submission is None:
        raise RoarError("no Slurm submission in this workspace (.roar/slurm/); run `roar pipeline --executor slurm`")
    if wait:
        wait_jobs(submission, poll, typer.echo)
    typer.echo(summary(refresh(submission)))


@command("pipeline-finish", hidden=True)
def pipeline_finish(study_run_id: str,
                    push: bool = typer.Option(True, "--push/--no-push", help="Push outputs to the DVC remote.")) -> None:
    """The last job of a Slurm submission: final dvc repro, push, end the study run."""
    from roar.launch.local import finish_pipeline

    try:
        finish_pipeline(Path("."), study_run_id, push)
    except RuntimeError as error:
        fail(error)
    _rewrite_run_facts(Path("."))
    typer.echo("[roar] study complete")


@command("mlflow-url")
def mlflow_url(params: Path = PARAMS,
               base: str = typer.Option("http://127.0.0.1:5000", help="Where `mlflow ui` or the server answers.")) -> None:
    """Print the MLflow UI page of the study's runs (the model-training view, not MLflow 3's GenAI overview)."""
    from roar.config.params import study_from_params
    from roar.tracking.mlflow_tracker import study_runs_url

    typer.echo(study_runs_url(study_from_params(load_checked_params(params)).name, base))
