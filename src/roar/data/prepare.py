"""Prepare a dataset by name: read its source, tokenize, build the vocabulary, write the splits."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roar.data.storage import DatasetMeta, Split, write_dataset
from roar.data.tokenize import Vocabulary, tokenize

DATASETS = ("babi-1", "babi-2", "babi-3")


@dataclass(frozen=True)
class RawExample:
    """Text of one example before tokenisation; ``text2`` is '' for single-sequence tasks."""

    text: str
    label: str
    text2: str = ""


@dataclass
class PrepareConfig:
    """Options of ``prepare``; sizes apply to generated sources."""

    source: str = "generate"  # "generate" or a folder with the dataset's official files
    n_train: int = 10_000
    n_test: int = 1_000
    val_fraction: float = 0.15
    min_count: int = 1
    seed: int = 0


def _babi_raw(task: int, config: PrepareConfig) -> tuple[list[RawExample], list[RawExample]]:
    from roar.data import babi

    if config.source == "generate":
        train = babi.generate_task(task, config.n_train, config.seed)
        test = babi.generate_task(task, config.n_test, config.seed + 1_000_003)
    else:
        train, test = babi.read_task_files(Path(config.source), task)
    to_raw = lambda exs: [RawExample(" ".join(e.story), e.answer, e.question) for e in exs]  # noqa: E731
    return to_raw(train), to_raw(test)


def split_validation(examples: list, fraction: float, seed: int) -> tuple[list, list]:
    """Seeded random (train, val) split with ``round(fraction * n)`` validation examples."""
    if not 0 < fraction < 1:
        raise ValueError(f"val_fraction={fraction!r} must be between 0 and 1")
    order = np.random.default_rng(seed).permutation(len(examples))
    n_val = int(round(fraction * len(examples)))
    val_rows, train_rows = sorted(order[:n_val]), sorted(order[n_val:])
    return [examples[i] for i in train_rows], [examples[i] for i in val_rows]


def encode(examples: list[RawExample], vocab: Vocabulary, classes: list[str], paired: bool) -> Split:
    """Token ids of the examples; the first sequence gets ``[START]``/``[END]``."""
    class_id = {c: i for i, c in enumerate(classes)}
    unknown = sorted({e.label for e in examples} - set(class_id))
    if unknown:
        raise ValueError(f"labels {unknown[:5]} are not among the training classes {classes}")
    tokens = [vocab.encode(tokenize(e.text)) for e in examples]
    tokens2 = [vocab.encode(tokenize(e.text2), boundaries=False) for e in examples] if paired else None
    return Split.from_lists(tokens, [class_id[e.label] for e in examples], tokens2)


def prepare(dataset: str, out: Path, config: PrepareConfig) -> dict:
    """Prepare ``dataset`` into the folder ``out`` and return a summary (sizes, vocabulary)."""
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; allowed: {', '.join(DATASETS)}")
    task = int(dataset.split("-")[1])
    train_raw, test_raw = _babi_raw(task, config)
    train_raw, val_raw = split_validation(train_raw, config.val_fraction, config.seed)
    vocab = Vocabulary.build((tokenize(e.text) + tokenize(e.text2) for e in train_raw), config.min_count)
    classes = sorted({e.label for e in train_raw})
    meta = DatasetMeta(name=dataset, classes=classes, paired=True, metric="accuracy", select_metric="accuracy")
    splits = {name: encode(raw, vocab, classes, meta.paired)
              for name, raw in (("train", train_raw), ("val", val_raw), ("test", test_raw))}
    write_dataset(out, meta, json.dumps(vocab.tokens) + "\n", splits)
    return {"dataset": dataset, "vocab_size": len(vocab), "classes": len(classes),
            **{f"n_{k}": len(v) for k, v in splits.items()},
            "mean_length": float(np.mean(splits["train"].lengths))}

