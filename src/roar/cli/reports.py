"""Reports and their audits: tables and figures from records, comparisons, DVC plots."""

from __future__ import annotations

from pathlib import Path

import typer

from roar.cli.common import PARAMS, STUDY, Dataset, Measure, Model, check_names, fail, load_checked_params, command


@command()
def report(params: Path = PARAMS, results: Path = typer.Option(Path("results"), help="Per-point results folder."),
           out: Path = typer.Option(Path("reports"), help="Report folder."),
           track: bool = typer.Option(True, "--track/--no-track", help="Log a `report` run to MLflow.")) -> None:
    """Write the report: points/curves/racu tables, RACU table (md, tex), figures, README.md."""
    loaded = load_checked_params(params)
    if not results.is_dir():
        raise FileNotFoundError(f"results folder {results} not found; run the study first (`roar pipeline` or "
                                "`dvc repro`), or pass --results FOLDER")

    from roar.report.study import write_report
    from roar.tracking.mlflow_tracker import git_commit

    tables = write_report(loaded, results, out, git_commit())
    if track:
        from roar.tracking.mlflow_tracker import log_report

        log_report(loaded, out, tables["racu"])
    typer.echo(f"report written to {out}/")


@command("compare-retraining")
def compare_retraining(plain: Path = typer.Option(..., "--plain", help="Report folder (or points.csv) of a study."),
                       masked: Path = typer.Option(..., "--masked", help="Report folder (or points.csv) of the same "
                                                   "study with train.<model>.<dataset>.mask_augment."),
                       out: Path = typer.Option(Path("reports/retrain-comparison"), help="Output folder.")) -> None:
    """Recursive ROAR's RACU beside the no-retrain curves of the plain and the masked-trained k = 0 models:
    RACU with intervals, Kendall's tau per seed, compute, a figure."""
    from roar.report.retrain_comparison import write_comparison

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

    from roar.report.audit import AuditError, audit_point, format_evidence

    check_names(measure=measure, dataset=dataset, model=model)
    loaded = load_checked_params(params)
    try:
        evidence = audit_point(Path("."), loaded, dataset, model, measure, seed, k, recursive)
    except AuditError as error:
        fail(error)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(e) for e in evidence], indent=2, sort_keys=True))
    else:
        typer.echo(format_evidence(evidence))


@command("reproduce-report")
def reproduce_report(remote: str = typer.Option(None, "--remote", "-r", help="DVC remote to pull from."),
                     study: str = STUDY) -> None:
    """Re-run the report stage from this commit's per-point results, pulling those not here (then `git diff reports/`)."""
    import subprocess

    from roar.launch.studies import resolve_study

    root = resolve_study(study)
    load_checked_params(root / "params.yaml")

    from roar.launch.local import reproduce_report as run

    try:
        run(root, remote=remote)
    except subprocess.CalledProcessError as error:
        fail(error)
    typer.echo("report reproduced; `git diff --stat reports/` shows any difference from the commit")


@command("plots-offline")
def plots_offline(configure: bool = typer.Option(True, "--configure/--no-configure", help="Also set it as this "
                                                 "workspace's plots.html_template (.dvc/config.local).")) -> None:
    """Write .dvc/plots/offline.html: `dvc plots show/diff` pages with vega inlined (from npm), for machines
    without internet."""
    from roar.report.dvc_plots import vega_libraries, write_offline_template

    path = write_offline_template(configure=configure)
    typer.echo(f"{path}: {', '.join(f'{n} {v}' for n, v in vega_libraries())} inlined; "
               + ("`dvc plots show` and `dvc plots diff` pages now render offline" if configure else
                  f"use it with `dvc plots show --html-template {path}`"))
