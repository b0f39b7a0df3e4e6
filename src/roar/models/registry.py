"""Build a model by its family's name: each family's module is imported only when it is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from roar.config.catalog import model_family

if TYPE_CHECKING:
    from roar.data.storage import DatasetMeta
    from roar.models.base import Classifier
    from roar.config.train_config import TrainConfig


def build_model(meta: DatasetMeta, vocab_size: int, config: TrainConfig,
                architecture: dict | None = None) -> Classifier:
    """A fresh model of the family ``config.model`` for ``meta``'s task: randomly initialised (the
    BiLSTM), or pretrained with a fresh classification head (a transformer's checkpoint).

    Args:
        meta: the prepared dataset's facts (classes, paired, tokenizer).
        vocab_size: number of token ids of the dataset.
        config: the training hyperparameters.
        architecture: a saved model's architecture description (a transformer's HF config, see
            :func:`roar.models.training.save_model`): rebuild it without network instead of loading weights.
    """
    family = model_family(config.model)
    if meta.paired and not family.supports("paired"):
        raise ValueError(f"model {family.name!r} takes single sequences; dataset {meta.name} has pairs")
    module, _, function = family.builder.partition(":")
    return getattr(importlib.import_module(module), function)(meta, vocab_size, config, architecture)
