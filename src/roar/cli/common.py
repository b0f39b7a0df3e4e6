"""The ``roar`` app and what every command group shares: the one error layer (bad input is one line
on stderr, ``error: ...``, naming the key or file, what is wrong and what to do, and exit status 2,
without a traceback; ``roar --debug`` or ``ROAR_DEBUG=1`` also prints it), argument types with shell
completion, and the checked params loader. Heavy imports are deferred to the commands.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Recursive ROAR: how faithful are NLP importance measures?", no_args_is_help=True,
                  pretty_exceptions_enable=False)

PARAMS = typer.Option(Path("params.yaml"), "--params", help="Study and hyperparameters file.")
PROGRESS = typer.Option(True, "--progress/--no-progress", help="Show progress bars.")


def completion(names: Callable[[], Iterable[str]]) -> Callable[[str], list[str]]:
    """Shell completion (``roar --install-completion``) from a registry; the names are still checked by
    :func:`check_names`, which gives the project's one-line error."""
    return lambda incomplete: [name for name in names() if name.startswith(incomplete)]


def dataset_names() -> Iterable[str]:
    from roar.config.datasets import DATASETS

    return DATASETS


def model_names() -> Iterable[str]:
    from roar.config.catalog import MODELS

    return MODELS


def measure_names() -> Iterable[str]:
    from roar.config.catalog import MEASURES

    return MEASURES


Dataset = Annotated[str, typer.Argument(help="Dataset name, e.g. babi-1.", autocompletion=completion(dataset_names))]
Model = Annotated[str, typer.Argument(help="Model name, e.g. bilstm-attention.", autocompletion=completion(model_names))]
Measure = Annotated[str, typer.Argument(help="Importance measure, e.g. attention.",
                                        autocompletion=completion(measure_names))]
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


def error_message(error: BaseException) -> str:
    from roar.core.errors import one_line

    if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
        text = error.args[0]  # str(KeyError) would quote it
    else:
        text = str(error)
    return one_line(text) or type(error).__name__


def fail(error: BaseException, multiline: bool = False) -> None:
    """Print ``error`` (one line unless ``multiline``) and exit 2; with --debug, the traceback first."""
    if _debug:
        import traceback

        traceback.print_exception(error)
    text = str(error).strip() if multiline else error_message(error)
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
                fail(error)
        return (group or app).command(*args, **kwargs)(run)
    return register


def check_names(dataset: str | None = None, model: str | None = None, measure: str | None = None) -> None:
    """One line for an unknown dataset, model or measure argument."""
    from roar.core.errors import RoarError

    if measure is not None:
        from roar.config.catalog import MEASURES

        if measure not in MEASURES:
            raise RoarError(f"unknown measure {measure!r}; allowed: {', '.join(MEASURES)}")
    if dataset is not None:
        from roar.config.datasets import dataset_spec

        dataset_spec(dataset)
    if model is not None:
        from roar.config.catalog import MODELS

        if model not in MODELS:
            raise RoarError(f"unknown model {model!r}; allowed: {', '.join(MODELS)}")


def load_checked_params(params: Path) -> dict:
    from roar.config.params import load_params

    return load_params(params)


STUDY = typer.Option(None, "--study", help="Study to run: `default` (the project root) or a folder name under "
                     "studies/ (`roar study list`); default: the current folder.")
