"""Build an importance measure by name: each measure's module is imported only when it is used."""

from __future__ import annotations

import importlib

from roar.data.storage import Split
from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS
from roar.importance import MEASURE_MODULES, MEASURES

MEASURE_CLASSES = {"random": "RandomImportance", "attention": "AttentionImportance",
                   "gradient": "GradientImportance", "input-x-gradient": "InputXGradientImportance",
                   "integrated-gradient": "IntegratedGradientImportance",
                   "mutual-information": "MutualInformationImportance",
                   "occlusion": "OcclusionImportance", "kernel-shap": "KernelShapImportance"}


def measure_class(name: str) -> type:
    """The class that implements the measure ``name`` (its module imported now)."""
    if name not in MEASURE_MODULES:
        raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
    return getattr(importlib.import_module(MEASURE_MODULES[name]), MEASURE_CLASSES[name])


def make_measure(name: str, *, seed: int = 0, train_split: Split | None = None, vocab_size: int = 0,
                 n_classes: int = 0, ig_samples: int = 50, ig_max_rows: int | None = None,
                 mask_id: int = MASK_ID, unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS):
    """The importance measure called ``name``, configured.

    Args:
        name: one of :data:`MEASURES`.
        seed: seed of ``random`` and of ``kernel-shap``'s coalition draws.
        train_split, vocab_size, n_classes: the training data that ``mutual-information`` counts.
        ig_samples, ig_max_rows: Riemann samples and memory budget of ``integrated-gradient``; coalitions
            and rows per pass of ``kernel-shap`` (``occlusion`` takes the rows per pass).
        mask_id, unmaskable_ids: the dataset's mask token and never-masked ids (``occlusion``, ``kernel-shap``).
    """
    if name == "random":
        return measure_class(name)(seed)
    if name == "attention":
        return measure_class(name)()
    if name == "gradient":
        return measure_class(name)()
    if name == "input-x-gradient":
        return measure_class(name)()
    if name == "integrated-gradient":
        return measure_class(name)(ig_samples, ig_max_rows)
    if name == "mutual-information":
        if train_split is None:
            raise ValueError("mutual-information needs the training split")
        return measure_class(name)(train_split, vocab_size, n_classes)
    if name == "occlusion":
        return measure_class(name)(ig_max_rows, mask_id, unmaskable_ids)
    if name == "kernel-shap":
        return measure_class(name)(ig_samples, ig_max_rows, seed, mask_id, unmaskable_ids)
    raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
