"""Prepare a dataset for a model: read its source, tokenize, write the splits.

Datasets are registered in :data:`DATASETS` with their task type and metrics and a loader that
returns raw text examples; the model family's ``encoding`` (:mod:`roar.config.catalog`) decides the
tokenisation: our word vocabulary built from the training split (``word``), or the checkpoint's
own tokenizer (``checkpoint``).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from roar.data.storage import DatasetMeta, Split, write_dataset
from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS, WORD_TOKENIZERS, Vocabulary, tokenize
from roar.config.datasets import (DATASETS, DatasetSpec, PrepareConfig, RawExample, RawSplits, dataset_spec,  # noqa: F401
                           label_ids, split_validation)
from roar.config.catalog import model_family


def load_raw(spec: DatasetSpec, config: PrepareConfig) -> RawSplits:
    """The raw examples of a dataset, from its loader module (imported here, by name)."""
    if spec.load is not None:
        return spec.load(spec.name, config)
    return importlib.import_module(f"roar.data.{spec.loader}").load(spec.name, config)


def encode_words(raw: dict[str, list[RawExample]], vocab: Vocabulary, classes: list[str], paired: bool,
                 max_length: int, words: Callable[[str], list[str]] = tokenize) -> dict[str, Split]:
    """Word ids of every split (``words`` splits a text); the first sequence gets ``[START]``/``[END]`` and
    is truncated to ``max_length`` tokens (the end token kept)."""
    out = {}
    for name, examples in raw.items():
        labels = label_ids(examples, classes, name)
        tokens = [vocab.encode(words(e.text)[: max(max_length - 2, 1)]) for e in examples]
        tokens2 = [vocab.encode(words(e.text2), boundaries=False) for e in examples] if paired else None
        out[name] = Split.from_lists(tokens, labels, tokens2)
    return out


def encode_word_dataset(spec: DatasetSpec, splits_raw: dict[str, list[RawExample]], train_raw: list[RawExample],
                        classes: list[str], config: PrepareConfig, model: str,
                        checkpoint: str | None) -> tuple[dict[str, Split], str, DatasetMeta]:
    """The ``word`` encoding: a vocabulary of the training split's words (``config.min_count``), split by
    the tokenizer of ``config.tokens``."""
    words = WORD_TOKENIZERS[config.tokens]
    vocab = Vocabulary.build((words(e.text) + words(e.text2) for e in train_raw), config.min_count)
    splits = encode_words(splits_raw, vocab, classes, spec.paired, config.max_length, words)
    meta = DatasetMeta(spec.name, classes, spec.paired, spec.metric, spec.select_metric, "word", MASK_ID,
                       UNMASKABLE_IDS)
    return splits, json.dumps(vocab.tokens) + "\n", meta


def encode_checkpoint_dataset(spec: DatasetSpec, splits_raw: dict[str, list[RawExample]],
                              train_raw: list[RawExample], classes: list[str], config: PrepareConfig, model: str,
                              checkpoint: str | None) -> tuple[dict[str, Split], str, DatasetMeta]:
    """The ``checkpoint`` encoding: the tokenizer of the HF ``checkpoint``."""
    from roar.data.checkpoint_tokenizer import encode_checkpoint

    if not checkpoint:
        raise ValueError(f"model {model!r} needs a checkpoint (train.{model}.{spec.name}.checkpoint)")
    splits, vocab_json, ids = encode_checkpoint(splits_raw, classes, spec.paired, checkpoint, config.max_length)
    meta = DatasetMeta(spec.name, classes, spec.paired, spec.metric, spec.select_metric, checkpoint, **ids)
    return splits, vocab_json, meta


def prepare(dataset: str, out: Path, config: PrepareConfig, model: str = "bilstm-attention",
            checkpoint: str | None = None) -> dict:
    """Prepare ``dataset`` for ``model`` into the folder ``out``; returns a summary.

    Args:
        dataset: a name in :data:`DATASETS`.
        out: the dataset folder to write (atomically).
        config: source and sizes.
        model: a model family (:data:`roar.config.catalog.MODEL_FAMILIES`); its ``encoding`` decides
            the tokenisation.
        checkpoint: the checkpoint whose tokenizer the ``checkpoint`` encoding uses.
    """
    spec = dataset_spec(dataset)
    if config.tokens not in spec.tokens:
        raise ValueError(f"prepare.{dataset}.tokens={config.tokens!r} is not offered by {dataset}; "
                         f"allowed: {', '.join(spec.tokens)}")
    encode = {"word": encode_word_dataset, "checkpoint": encode_checkpoint_dataset}[model_family(model).encoding]
    raw = load_raw(spec, config)
    train_raw, val_raw = (raw.train, raw.val) if raw.val is not None else split_validation(
        raw.train, config.val_fraction, config.seed)
    splits_raw = {"train": train_raw, "val": val_raw, "test": raw.test}
    if config.limit < 0:
        raise ValueError(f"limit={config.limit!r} must be >= 0 (0 keeps every example)")
    if config.limit:
        rng = np.random.default_rng(config.seed)
        splits_raw = {name: [examples[i] for i in sorted(rng.permutation(len(examples))[: config.limit])]
                      for name, examples in splits_raw.items()}
    classes = sorted({e.label for e in train_raw})
    splits, vocab_json, meta = encode(spec, splits_raw, train_raw, classes, config, model, checkpoint)
    write_dataset(out, meta, vocab_json, splits)
    return {"dataset": dataset, "model": model, "vocab_size": len(json.loads(vocab_json)), "classes": len(classes),
            **{f"n_{k}": len(v) for k, v in splits.items()},
            "mean_length": round(float(np.mean(splits["train"].lengths)), 2)}
