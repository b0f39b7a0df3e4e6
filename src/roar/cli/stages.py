"""The DVC stage commands: one process per stage (prepare, the reference models, a chain)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from roar.cli.common import (PARAMS, PROGRESS, Dataset, Measure, Model, check_names, completion, load_checked_params,
                             model_names, command)
from roar.pipeline.deadline import DEADLINE_ENV


@contextmanager
def stoppable(name: str) -> Iterator[None]:
    """A long stage that stops cleanly: at its chain's deadline between steps, or on SIGTERM/SIGINT mid-work
    (:mod:`roar.pipeline.deadline`), its runs end KILLED and it exits 75 (resumable), not 1 (failed)."""
    from roar.pipeline.deadline import EXIT_MORE_TO_DO, stop_on_signals
    from roar.tracking.protocol import RunInterrupted

    try:
        with stop_on_signals():
            yield
    except RunInterrupted as stop:
        typer.echo(f"{name}: {stop}", err=True)
        raise typer.Exit(EXIT_MORE_TO_DO) from None


@command()
def prepare(dataset: Dataset,
            model: str = typer.Option("bilstm-attention", help="Model whose tokenisation to use.",
                                      autocompletion=completion(model_names)),
            params: Path = PARAMS) -> None:
    """Prepare DATASET for MODEL (tokenize, splits) and its all-masked (k = 100) copy."""
    from roar.data.prepare import PrepareConfig
    from roar.data.prepare import prepare as prepare_dataset
    from roar.method.masking import write_all_masked
    from roar.config.params import section
    from roar.config.layout import Layout

    check_names(dataset=dataset, model=model)
    loaded = load_checked_params(params)
    config = PrepareConfig(**section(loaded, "prepare", dataset))
    checkpoint = (loaded["train"].get(model, {}).get(dataset) or {}).get("checkpoint")
    from roar.config.catalog import model_family

    if model_family(model).encoding == "checkpoint" and not checkpoint:
        from roar.core.errors import RoarError

        raise RoarError(f"{params}: missing key train.{model}.{dataset}.checkpoint; model {model} tokenizes with "
                        "its checkpoint's tokenizer (a HF checkpoint name or a local folder)")
    layout = Layout()
    summary = prepare_dataset(dataset, layout.prepared(dataset, model), config, model, checkpoint)
    write_all_masked(layout.prepared(dataset, model), layout.all_masked(dataset, model))
    typer.echo(" ".join(f"{k}={v}" for k, v in summary.items()))


@command("train-reference")
def train_reference(dataset: Dataset, model: Model, seed: int, which: str = typer.Option(
        "k0", help="k0: unmasked data; all: every maskable token masked (k = 100).",
        autocompletion=completion(lambda: ("k0", "all"))),
        params: Path = PARAMS, progress: bool = PROGRESS) -> None:
    """Train the shared model of DATASET/MODEL/SEED at k = 0 or k = 100."""
    from roar.data.storage import check_dataset
    from roar.core.errors import RoarError
    from roar.config.params import section
    from roar.config.layout import Layout

    if which not in ("k0", "all"):
        raise RoarError(f"reference {which!r} unknown; allowed: k0, all")
    check_names(dataset=dataset, model=model)
    loaded = load_checked_params(params)
    section(loaded, "train", model, dataset)
    layout = Layout()
    check_dataset(layout.prepared(dataset, model) if which == "k0" else layout.all_masked(dataset, model))

    from roar.pipeline.runner import Runner
    from roar.pipeline.stage import stage_runner

    with stoppable(f"{dataset} {model} seed={seed} {which}"):
        record = stage_runner(Runner, loaded, progress=progress).run_reference(dataset, model, seed, which)
    typer.echo(f"{dataset} {model} seed={seed} {which}: test {record.metric}={record.value:.4f}")


@command()
def chain(dataset: Dataset, model: Model, measure: Measure, seed: int,
          recursive: bool = typer.Option(True, "--recursive/--roar", help="Recursive ROAR or plain ROAR."),
          skip_unsupported: bool = typer.Option(False, help="Write a note instead of failing when the measure "
                                                "is not defined for the model (the DVC grid uses this)."),
          params: Path = PARAMS, progress: bool = PROGRESS,
          deadline: str = typer.Option(None, envvar=DEADLINE_ENV, hidden=True,
                                       help="'<end, unix seconds> <seconds per step>': stop between steps before "
                                            "a step that would not end by then (set by `roar pipeline "
                                            "--time-budget`).")) -> None:
    """Run every ROAR step of one chain (importance -> mask -> train), resuming finished steps."""
    from roar.models.saved_model import check_model_folder
    from roar.data.storage import check_dataset
    from roar.config.params import section
    from roar.config.layout import Layout
    from roar.config.catalog import check_supported, measure_spec

    from roar.pipeline.deadline import StepDeadline

    check_names(measure=measure, dataset=dataset, model=model)
    stop_by = StepDeadline.parse(deadline)
    loaded = load_checked_params(params)
    if skip_unsupported:
        try:
            check_supported(measure, model)
        except ValueError as reason:
            from roar.pipeline.chain import ChainSpec, write_unsupported

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
    elif measure_spec(measure).needs_model:
        raise FileNotFoundError(f"k = 0 model {k0_model} not found; train it first: `roar train-reference "
                                f"{dataset} {model} {seed}` (or `dvc repro`)")

    from roar.pipeline.chain import ChainRunner, ChainSpec
    from roar.pipeline.stage import stage_runner

    spec = ChainSpec(dataset, model, measure, seed, recursive)
    with stoppable(spec.name):
        records = stage_runner(ChainRunner, loaded, progress=progress).run_chain(spec, stop_by)
    for r in records:
        typer.echo(f"k={r.k:>3} {r.metric}={r.value:.4f}")
