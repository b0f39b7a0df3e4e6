"""The ``roar`` command line: a thin typer layer over the library, heavy imports deferred."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Recursive ROAR: how faithful are NLP importance measures?", no_args_is_help=True,
                  pretty_exceptions_enable=False)

PARAMS = typer.Option(Path("params.yaml"), "--params", help="Study and hyperparameters file.")
PROGRESS = typer.Option(True, "--progress/--no-progress", help="Show progress bars.")


def _fail(error: Exception) -> None:
    typer.secho(f"error: {error}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


@app.command()
def prepare(dataset: str = typer.Argument(..., help="Dataset name, e.g. babi-1."),
            model: str = typer.Option("bilstm-attention", help="Model whose tokenisation to use."),
            params: Path = PARAMS) -> None:
    """Prepare DATASET for MODEL (tokenize, splits) and its all-masked (k = 100) copy."""
    from roar.masking import write_all_masked
    from roar.data.prepare import PrepareConfig, dataset_spec, prepare as prepare_dataset
    from roar.params import load_params, section
    from roar.paths import Layout
    from roar.training import MODELS

    try:
        dataset_spec(dataset)
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")
        loaded = load_params(params)
        config = PrepareConfig(**section(loaded, "prepare", dataset))
        checkpoint = (loaded.get("train", {}).get(model, {}).get(dataset) or {}).get("checkpoint")
        layout = Layout()
        summary = prepare_dataset(dataset, layout.prepared(dataset, model), config, model, checkpoint)
        write_all_masked(layout.prepared(dataset, model), layout.all_masked(dataset, model))
    except (ValueError, KeyError, FileNotFoundError, TypeError) as error:
        _fail(error)
    typer.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


@app.command("train-reference")
def train_reference(dataset: str, model: str, seed: int, which: str = typer.Option(
        "k0", help="k0: unmasked data; all: every maskable token masked (k = 100)."),
        params: Path = PARAMS, progress: bool = PROGRESS) -> None:
    """Train the shared model of DATASET/MODEL/SEED at k = 0 or k = 100."""
    from roar.chain import Runner
    from roar.params import load_params

    try:
        if which not in ("k0", "all"):
            raise ValueError(f"reference {which!r} unknown; allowed: k0, all")
        record = Runner(load_params(params), progress=progress).run_reference(dataset, model, seed, which)
    except (ValueError, KeyError, FileNotFoundError) as error:
        _fail(error)
    typer.echo(f"{dataset} {model} seed={seed} {which}: test {record['metric']}={record['value']:.4f}")


@app.command()
def chain(dataset: str, model: str, measure: str, seed: int,
          recursive: bool = typer.Option(True, "--recursive/--roar", help="Recursive ROAR or plain ROAR."),
          skip_unsupported: bool = typer.Option(False, help="Write a note instead of failing when the measure "
                                                "is not defined for the model (the DVC grid uses this)."),
          params: Path = PARAMS, progress: bool = PROGRESS) -> None:
    """Run every ROAR step of one chain (importance -> mask -> train), resuming finished steps."""
    from roar.chain import ChainSpec, Runner, write_unsupported
    from roar.importance import MEASURES, check_supported
    from roar.params import load_params
    from roar.paths import Layout

    spec = ChainSpec(dataset, model, measure, seed, recursive)
    try:
        if measure not in MEASURES:
            raise ValueError(f"unknown measure {measure!r}; allowed: {', '.join(MEASURES)}")
        if skip_unsupported:
            try:
                check_supported(measure, model)
            except ValueError as reason:
                write_unsupported(Layout(), spec, str(reason))
                typer.echo(f"skipped: {reason}")
                return
        records = Runner(load_params(params), progress=progress).run_chain(spec)
    except (ValueError, KeyError, FileNotFoundError) as error:
        _fail(error)
    for r in records:
        typer.echo(f"k={r['k']:>3} {r['metric']}={r['value']:.4f}")


@app.command()
def report(params: Path = PARAMS, results: Path = typer.Option(Path("results"), help="Per-point results folder."),
           out: Path = typer.Option(Path("reports"), help="Report folder."),
           track: bool = typer.Option(True, "--track/--no-track", help="Log a `report` run to MLflow.")) -> None:
    """Write the report: points/curves/racu tables, RACU table (md, tex), figures, README.md."""
    from roar.params import load_params
    from roar.report import write_report
    from roar.tracking import git_commit

    try:
        loaded = load_params(params)
        tables = write_report(loaded, results, out, git_commit())
        if track:
            from roar.tracking import log_report

            log_report(loaded, out, tables["racu"])
    except (ValueError, KeyError, FileNotFoundError) as error:
        _fail(error)
    typer.echo(f"report written to {out}/")


@app.command()
def audit(dataset: str, model: str, measure: str, seed: int, k: int,
          recursive: bool = typer.Option(True, "--recursive/--roar", help="Recursive ROAR or plain ROAR chain."),
          as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
          params: Path = PARAMS) -> None:
    """Print the data and model versions behind one curve point, checked against dvc.lock."""
    import dataclasses
    import json

    from roar.audit import AuditError, audit_point, format_evidence
    from roar.params import load_params

    try:
        evidence = audit_point(Path("."), load_params(params), dataset, model, measure, seed, k, recursive)
    except (AuditError, ValueError, KeyError, FileNotFoundError) as error:
        _fail(error)
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(e) for e in evidence], indent=2, sort_keys=True))
    else:
        typer.echo(format_evidence(evidence))


@app.command()
def pipeline(jobs: int = typer.Option(2, min=1, help="Stages run at once."),
             push: bool = typer.Option(True, "--push/--no-push", help="Push outputs to the DVC remote.")) -> None:
    """Run the whole study (dvc repro, chains in parallel), then push to the DVC remote."""
    import subprocess
    import time

    from roar.launch import run_pipeline

    start = time.perf_counter()
    try:
        run_pipeline(jobs=jobs, log=typer.echo)
    except (ValueError, KeyError, FileNotFoundError, RuntimeError) as error:
        _fail(error)
    typer.echo(f"[roar] pipeline finished in {time.perf_counter() - start:.0f} s")
    if push:
        subprocess.run(["dvc", "push", "-q"], check=True)
        typer.echo("[roar] outputs pushed to the DVC remote")


@app.command("reproduce-report")
def reproduce_report(remote: str = typer.Option(None, "--remote", "-r", help="DVC remote to pull from.")) -> None:
    """Pull only this commit's per-point results and re-run the report stage (then `git diff reports/`)."""
    import subprocess

    from roar.launch import reproduce_report as run

    try:
        run(remote=remote)
    except (FileNotFoundError, subprocess.CalledProcessError) as error:
        _fail(error)
    typer.echo("report reproduced; `git diff --stat reports/` shows any difference from the commit")


if __name__ == "__main__":
    app()
