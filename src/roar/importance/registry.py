"""Build an importance measure by name: each measure's module is imported only when it is used.

Each measure's ``module:Class`` and needs are on its spec (:data:`roar.config.catalog.MEASURE_SPECS`); the
class declares its parameters (``from_params``) and, optionally, its model passes per example.
"""

from __future__ import annotations

import importlib

from roar.importance.base import ImportanceMeasure, MeasureContext
from roar.config.catalog import measure_spec


def measure_class(name: str) -> type[ImportanceMeasure]:
    """The class that implements the measure ``name`` (its module imported now)."""
    module, _, attribute = measure_spec(name).target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def make_measure(name: str, params: dict | None = None, context: MeasureContext | None = None) -> ImportanceMeasure:
    """The importance measure called ``name``, configured.

    Args:
        name: one of :data:`roar.config.catalog.MEASURES`.
        params: its options (params.yaml ``importance.<name>``); missing keys take the class's defaults.
        context: what the run knows (seed, training split, vocabulary size, classes).
    """
    return measure_class(name).from_params(dict(params or {}), context or MeasureContext())


def model_passes(name: str, params: dict | None = None) -> int:
    """Model evaluations (forward, or forward and backward) per example of one importance pass of the
    measure ``name`` with options ``params``: 0 without a model, else the class's ``model_passes``
    (optional; 1 when absent)."""
    if not measure_spec(name).needs_model:
        return 0
    cls = measure_class(name)
    passes = getattr(cls, "model_passes", None)
    return 1 if passes is None else passes(dict(params or {}))
