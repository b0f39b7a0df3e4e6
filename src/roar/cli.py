"""The ``roar`` command line: a thin typer layer over the library, heavy imports deferred.

Every command checks its arguments, ``params.yaml`` (against :mod:`roar.schema`) and the files
it reads before any expensive work. Bad input is one line on stderr (``error: ...``, naming the
key or file, what is wrong and what to do) and exit status 2, without a traceback;
``roar --debug`` (or ``ROAR_DEBUG=1``) also prints the traceback.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Recursive ROAR: how faithful are NLP importance measures?", no_args_is_help=True,
                  pretty_exceptions_enable=False)

PARAMS = typer.Option(Path("params.yaml"), "--params", help="Study and hyperparameters file.")
PROGRESS = typer.Option(True, "--progress/--no-progress", help="Show progress bars.")


def _completion(names: Callable[[], Iterable[str]]) -> Callable[[str], list[str]]:
    """Shell completion (``roar --install-completion``) from a registry; the names are still checked by
    :func:`_check_names`, which gives the project's one-line error."""
    return lambda incomplete: [name for name in names() if name.startswith(incomplete)]


def _datasets() -> Iterable[str]:
    from roar.datasets import DATASETS

    return DATASETS


def _models() -> Iterable[str]:
    from roar.registry import MODELS

    return MODELS


def _measures() -> Iterable[str]:
    from roar.registry import MEASURES

    return MEASURES


Dataset = Annotated[str, typer.Argument(help="Dataset name, e.g. babi-1.", autocompletion=_completion(_datasets))]
Model = Annotated[str, typer.Argument(help="Model name, e.g. bilstm-attention.", autocompletion=_completion(_models))]
Measure = Annotated[str, typer.Argument(help="Importance measure, e.g. attention.",
                                        autocompletion=_completion(_measures))]
EXIT_BAD_INPUT = 2
# Errors that mean bad input (params, arguments, files): one line and exit 2. RoarError is a
# ValueError; corrupt-file errors of the libraries are turned into RoarError where files are read.
USER_ERRORS = (ValueError, KeyError, OSError)

_debug = False


@app.callback()
def main(debug: bool = typer.Option(False, "--debug", envvar="ROAR_DEBUG",
                                    help="On errors, also print the traceback (or set ROAR_DEBUG=1).")) -> None:
    """Recursive ROAR: how faithful are NLP importance measures?"""
    global _debug
    _debug = debug


def _message(error: BaseException) -> str:
    from roar.errors import one_line

    if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
        text = error.args[0]  # str(KeyError) would quote it
    else:
        text = str(error)
    return one_line(text) or type(error).__name__


def _fail(error: BaseException, multiline: bool = False) -> None:
    """Print ``error`` (one line unless ``multiline``) and exit 2; with --debug, the traceback first."""
    if _debug:
        import traceback

        traceback.print_exception(error)
    text = str(error).strip() if multiline else _message(error)
    typer.secho(f"error: {text}", fg=typer.colors.RED, err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def command(*args, group: typer.Typer | None = None, **kwargs):
    """``app.command`` (or ``group``'s) with the one error layer: bad input becomes one line and exit status 2."""
    def register(function):
        @functools.wraps(function)
        def run(*a, **kw):
            try:
                return function(*a, **kw)
            except USER_ERRORS as error:
                _fail(error)
        return (group or app).command(*args, **kwargs)(run)
    return register


def _check_names(dataset: str | None = None, model: str | None = None, measure: str | None = None) -> None:
    """One line for an unknown dataset, model or measure argument."""
    from roar.errors import RoarError

    if measure is not None:
        from roar.registry import MEASURES

        if measure not in MEASURES:
            raise RoarError(f"unknown measure {measure!r}; allowed: {', '.join(MEASURES)}")
    if dataset is not None:
        from roar.datasets import dataset_spec

        dataset_spec(dataset)
    if model is not None:
        from roar.registry import MODELS

        if model not in MODELS:
            raise RoarError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")


def _load(params: Path) -> dict:
    from roar.params import load_params

    return load_params(params)


@command()
def prepare(dataset: Dataset,
            model: str = typer.Option("bilstm-attention", help="Model whose tokenisation to use.",
                                      autocompletion=_completion(_models)),
            params: Path = PARAMS) -> None:
    """Prepare DATASET for MODEL (tokenize, splits) and its all-masked (k = 100) copy."""
    from roar.data.prepare import PrepareConfig
    from roar.data.prepare import prepare as prepare_dataset
    from roar.masking import write_all_masked
    from roar.params import section
    from roar.paths import Layout

    _check_names(dataset=dataset, model=model)
    loaded = _load(params)
    config = PrepareConfig(**section(loaded, "prepare", dataset))
    checkpoint = (loaded["train"].get(model, {}).get(dataset) or {}).get("checkpoint")
    from roar.registry import model_family

    if model_family(model).encoding == "checkpoint" and not checkpoint:
        from roar.errors import RoarError

        raise RoarError(f"{params}: missing key train.{model}.{dataset}.checkpoint; model {model} tokenizes with "
                        "its checkpoint's tokenizer (a HF checkpoint name or a local folder)")
    layout = Layout()
    summary = prepare_dataset(dataset, layout.prepared(dataset, model), config, model, checkpoint)
    write_all_masked(layout.prepared(dataset, model), layout.all_masked(dataset, model))
    typer.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


@command("train-reference")
def train_reference(dataset: Dataset, model: Model, seed: int, which: str = typer.Option(
        "k0", help="k0: unmasked data; all: every maskable token masked (k = 100).",
        autocompletion=_completion(lambda: ("k0", "all"))),
        params: Path = PARAMS, progress: bool = PROGRESS) -> None:
    """Train the shared model of DATASET/MODEL/SEED at k = 0 or k = 100."""
    from roar.data.storage import check_dataset
    from roar.errors import RoarError
    from roar.params import section
    from roar.paths import Layout

    if which not in ("k0", "all"):
        raise RoarError(f"reference {which!r} unknown; allowed: k0, all")
    _check_names(dataset=dataset, model=model)
    loaded = _load(params)
    section(loaded, "train", model, dataset)
    layout = Layout()
    check_dataset(layout.prepared(dataset, model) if which == "k0" else layout.all_masked(dataset, model))

    from roar.runner import Runner
    from roar.stage import stage_runner

    record = stage_runner(Runner, loaded, progress=progress).run_reference(dataset, model, seed, which)
    typer.echo(f"{dataset} {model} seed={seed} {which}: test {record.metric}={record.value:.4f}")


@command()
def chain(dataset: Dataset, model: Model, measure: Measure, seed: int,
          recursive: bool = typer.Option(True, "--recursive/--roar", help="Recursive ROAR or plain ROAR."),
          skip_unsupported: bool = typer.Option(False, help="Write a note instead of failing when the measure "
                                                "is not defined for the model (the DVC grid uses this)."),
          params: Path = PARAMS, progress: bool = PROGRESS) -> None:
    """Run every ROAR step of one chain (importance -> mask -> train), resuming finished steps."""
    from roar.checks import check_model_folder
    from roar.data.storage import check_dataset
    from roar.importance.registry import measure_class
    from roar.params import section
    from roar.paths import Layout
    from roar.registry import check_supported

    _check_names(measure=measure, dataset=dataset, model=model)
    loaded = _load(params)
    if skip_unsupported:
        try:
            check_supported(measure, model)
        except ValueError as reason:
            from roar.chain import ChainSpec, write_unsupported

            write_unsupported(Layout(), ChainSpec(dataset, model, measure, seed, recursive), str(reason))
            typer.echo(f"skipped: {reason}")
            return
    check_supported(measure, model)
    section(loaded, "train", model, dataset)
    layout = Layout()
    check_dataset(layout.prepared(dataset, model))
    k0_model = layout.shared_model(dataset, model, "k0", seed)
    if k0_model.exists():
        check_model_folder(k0_model)
    elif measure_class(measure).needs_model:
        raise FileNotFoundError(f"k = 0 model {k0_model} not found; train it first: `roar train-reference "
                                f"{dataset} {model} {seed}` (or `dvc repro`)")

    from roar.chain import ChainRunner, ChainSpec
    from roar.stage import stage_runner

    records = stage_runner(ChainRunner, loaded, progress=progress).run_chain(ChainSpec(dataset, model, measure, seed,
                                                                                  recursive))
    for r in records:
        typer.echo(f"k={r.k:>3} {r.metric}={r.value:.4f}")


@command()
def report(params: Path = PARAMS, results: Path = typer.Option(Path("results"), help="Per-point results folder."),
           out: Path = typer.Option(Path("reports"), help="Report folder."),
           track: bool = typer.Option(True, "--track/--no-track", help="Log a `report` run to MLflow.")) -> None:
    """Write the report: points/curves/racu tables, RACU table (md, tex), figures, README.md."""
    loaded = _load(params)
    if not results.is_dir():
        raise FileNotFoundError(f"results folder {results} not found; run the study first (`roar pipeline` or "
                                "`dvc repro`), or pass --results FOLDER")

    from roar.study_report import write_report
    from roar.tracking import git_commit

    tables = write_report(loaded, results, out, git_commit())
    if track:
        from roar.tracking import log_report

        log_report(loaded, out, tables["racu"])
    typer.echo(f"report written to {out}/")


@command("compare-retraining")
def compare_retraining(plain: Path = typer.Option(..., "--plain", help="Report folder (or points.csv) of a study."),
                       masked: Path = typer.Option(..., "--masked", help="Report folder (or points.csv) of the same "
                                                   "study with train.<model>.<dataset>.mask_augment."),
                       out: Path = typer.Option(Path("reports/retrain-comparison"), help="Output folder.")) -> None:
    """Recursive ROAR's RACU beside the no-retrain curves of the plain and the masked-trained k = 0 models:
    RACU with intervals, Kendall's tau per seed, compute, a figure."""
    from roar.retrain_comparison import write_comparison

    tables = write_comparison(plain, masked, out)
    typer.echo(f"{len(tables['summary'])} RACU rows, {len(tables['tau'])} tau rows written to {out}/")


@command()
def audit(dataset: Dataset, model: Model, measure: Measure, seed: int, k: int,
          recursive: bool = typer.Option(True, "--recursive/--roar", help="Recursive ROAR or plain ROAR chain."),
          as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
          params: Path = PARAMS) -> None:
    """Print the data and model versions behind one curve point, checked against dvc.lock."""
    import dataclasses
    import json

    from roar.audit import AuditError, audit_point, format_evidence

    _check_names(measure=measure, dataset=dataset, model=model)
    loaded = _load(params)
    try:
        evidence = audit_point(Path("."), loaded, dataset, model, measure, seed, k, recursive)
    except AuditError as error:
        _fail(error)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(e) for e in evidence], indent=2, sort_keys=True))
    else:
        typer.echo(format_evidence(evidence))


@command()
def validate(params: Path = PARAMS) -> None:
    """Check PARAMS against the schema and that the data and model files the study would read are
    readable where they exist; prints `<file>: ok (N stages)` or the one-line error."""
    from roar.checks import check_outputs
    from roar.schema import check_study, stage_count

    loaded = _load(params)
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
    from roar.plan import build_plan, format_plan

    loaded = _load(params_file)
    typer.echo(format_plan(build_plan(loaded, str(params_file), Path("."), mlflow_uri, jobs, gpu_speedup,
                                      calibrate)))


STUDY = typer.Option(None, "--study", help="Study to run: `default` (the project root) or a folder name under "
                     "studies/ (`roar study list`); default: the current folder.")


@command()
def pipeline(jobs: int = typer.Option(2, min=1, help="Stages run at once (local executor)."),
             push: bool = typer.Option(True, "--push/--no-push", help="Push outputs to the DVC remote."),
             executor: Executor = typer.Option(Executor.local, help="local: on this machine; slurm: one "
                                               "Slurm job per stage that is not done (runtime.slurm)."),
             wait: bool = typer.Option(False, "--wait/--no-wait", help="slurm: wait for the jobs and print "
                                       "their states."),
             poll: float = typer.Option(10.0, min=0.1, help="slurm --wait: seconds between state checks."),
             study: str = STUDY) -> None:
    """Run the whole study (dvc repro, chains in parallel, or Slurm jobs), then push to the DVC remote."""
    import subprocess
    import time

    from roar.studies import resolve_study

    root = resolve_study(study)
    _load(root / "params.yaml")

    from roar.launch import push_study, run_pipeline, submit_pipeline

    start = time.perf_counter()
    if executor is Executor.slurm:
        from roar.slurm import summary

        submission = submit_pipeline(root, push=push, wait=wait, poll=poll, log=typer.echo)
        if wait and submission.jobs:
            typer.echo(summary(submission))
            typer.echo(f"[roar] Slurm jobs finished in {time.perf_counter() - start:.0f} s")
            if any(job.state != "COMPLETED" for job in submission.jobs):
                raise typer.Exit(1)
        return
    try:
        run_pipeline(root, jobs=jobs, log=typer.echo)
    except RuntimeError as error:  # a stage failed: its output follows the first line
        _fail(error, multiline=True)
    except subprocess.CalledProcessError as error:
        _fail(error)
    typer.echo(f"[roar] pipeline finished in {time.perf_counter() - start:.0f} s")
    if push:
        code = push_study(root)
        if code != 0:
            _fail(RuntimeError(f"`dvc push` failed (exit {code}); check the DVC remote "
                               "(`dvc remote list`), or run with --no-push"))
        typer.echo("[roar] outputs pushed to the DVC remote")


@command()
def jobs(wait: bool = typer.Option(False, "--wait/--no-wait", help="Wait until every job has finished."),
         poll: float = typer.Option(10.0, min=0.1, help="Seconds between state checks.")) -> None:
    """Show the states of the last Slurm submission's jobs (`roar pipeline --executor slurm`)."""
    from roar.errors import RoarError
    from roar.slurm import check_cluster, last_submission, refresh, summary
    from roar.slurm import wait as wait_jobs

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
    from roar.launch import finish_pipeline

    try:
        finish_pipeline(Path("."), study_run_id, push)
    except RuntimeError as error:
        _fail(error)
    typer.echo("[roar] study complete")


@command("reproduce-report")
def reproduce_report(remote: str = typer.Option(None, "--remote", "-r", help="DVC remote to pull from."),
                     study: str = STUDY) -> None:
    """Pull only this commit's per-point results and re-run the report stage (then `git diff reports/`)."""
    import subprocess

    from roar.studies import resolve_study

    root = resolve_study(study)
    _load(root / "params.yaml")

    from roar.launch import reproduce_report as run

    try:
        run(root, remote=remote)
    except subprocess.CalledProcessError as error:
        _fail(error)
    typer.echo("report reproduced; `git diff --stat reports/` shows any difference from the commit")


@command("plots-offline")
def plots_offline(configure: bool = typer.Option(True, "--configure/--no-configure", help="Also set it as this "
                                                 "workspace's plots.html_template (.dvc/config.local).")) -> None:
    """Write .dvc/plots/offline.html: `dvc plots show/diff` pages with vega inlined (from npm), for machines
    without internet."""
    from roar.dvcplots import vega_libraries, write_offline_template

    path = write_offline_template(configure=configure)
    typer.echo(f"{path}: {', '.join(f'{n} {v}' for n, v in vega_libraries())} inlined; "
               + ("`dvc plots show` and `dvc plots diff` pages now render offline" if configure else
                  f"use it with `dvc plots show --html-template {path}`"))


study_app = typer.Typer(help="Studies side by side: the default at the project root, others under studies/.",
                        no_args_is_help=True)
app.add_typer(study_app, name="study")


@command("list", group=study_app)
def study_list() -> None:
    """The studies of this project, each with its folder and study name."""
    from roar.params import load_params
    from roar.paths import STUDIES, project_root
    from roar.studies import DEFAULT, study_names

    root = project_root()
    for name in study_names(root):
        folder = root if name == DEFAULT else root / STUDIES / name
        typer.echo(f"{name:<28} {folder.relative_to(root).as_posix():<36} "
                   f"study.name={load_params(folder / 'params.yaml')['study']['name']}")


@command("new", group=study_app)
def study_new(name: str = typer.Argument(..., help="Folder name under studies/."),
              source: Path = typer.Option(..., "--from", help="Params file to start from (copied, comments kept).")) -> None:
    """Create studies/NAME with a copy of a params file and the generated dvc.yaml."""
    from roar.paths import project_root
    from roar.studies import new_study

    folder = new_study(name, source, project_root())
    typer.echo(f"{folder}: params.yaml, dvc.yaml; run it with `roar pipeline --study {name}`")


@command("sync", group=study_app)
def study_sync() -> None:
    """Regenerate every study folder's dvc.yaml from the project's dvc.yaml (after editing that one)."""
    from roar.paths import project_root
    from roar.studies import sync_studies

    root = project_root()
    written = sync_studies(root)
    typer.echo("\n".join(f"{folder.relative_to(root)}/dvc.yaml: regenerated" for folder in written)
               or "every study dvc.yaml is up to date")

@command("mlflow-url")
def mlflow_url(params: Path = PARAMS,
               base: str = typer.Option("http://127.0.0.1:5000", help="Where `mlflow ui` or the server answers.")) -> None:
    """Print the MLflow UI page of the study's runs (the model-training view, not MLflow 3's GenAI overview)."""
    from roar.params import study_from_params
    from roar.tracking import study_runs_url

    typer.echo(study_runs_url(study_from_params(_load(params)).name, base))


if __name__ == "__main__":
    app()
