"""The ``roar`` command line: a thin typer layer over the library, one module per command group
(:mod:`~roar.cli.stages`, :mod:`~roar.cli.pipeline`, :mod:`~roar.cli.reports`, :mod:`~roar.cli.study`,
:mod:`~roar.cli.provenance`); :mod:`~roar.cli.common` holds the app and its one error layer."""

from roar.cli import pipeline, provenance, reports, stages, study  # noqa: F401 (each registers its commands)
from roar.cli.common import app

__all__ = ["app"]
