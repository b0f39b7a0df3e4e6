"""Build an importance measure by name: each measure's module is imported only when it is used."""

from __future__ import annotations

import importlib
from types import ModuleType

from roar.data.storage import Split
from roar.importance import MEASURE_MODULES, MEASURES


def measure_module(name: str) -> ModuleType:
    """The module that implements the measure ``name``."""
    if name not in MEASURE_MODULES:
        raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
    return importlib.import_module(MEASURE_MODULES[name])


def make_measure(name: str, *, seed: int = 0, train_split: Split | None = None, vocab_size: int = 0,
                 n_classes: int = 0, ig_samples: int = 50, ig_max_rows: int | None = None):
    """The importance measure called ``name``, configured.

    Args:
        name: one of :data:`MEASURES`.
        seed: seed of ``random``.
        train_split, vocab_size, n_classes: the training data that ``mutual-information`` counts.
        ig_samples, ig_max_rows: Riemann samples and memory budget of ``integrated-gradient``.
    """
    if name == "random":
        return measure_module(name).RandomImportance(seed)
    if name == "attention":
        return measure_module(name).AttentionImportance()
    if name == "gradient":
        return measure_module(name).GradientImportance()
    if name == "input-x-gradient":
        return measure_module(name).InputXGradientImportance()
    if name == "integrated-gradient":
        return measure_module(name).IntegratedGradientImportance(ig_samples, ig_max_rows)
    if name == "mutual-information":
        if train_split is None:
            raise ValueError("mutual-information needs the training split")
        return measure_module(name).MutualInformationImportance(train_split, vocab_size, n_classes)
    raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
