"""Prepare a dataset for a model: read its source, tokenize, write the splits.

Datasets are registered in :data:`DATASETS` with their task type and metrics and a loader that
returns raw text examples; the model decides the tokenisation (our word vocabulary, built
from the training split, for the BiLSTM; the checkpoint's own tokenizer for transformers).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from roar.data.storage import DatasetMeta, Split, write_dataset
from roar.data.tokenize import MASK_ID, UNMASKABLE_IDS, Vocabulary, tokenize


@dataclass(frozen=True)
class RawExample:
    """Text of one example before tokenisation; ``text2`` is '' for single-sequence tasks."""

    text: str
    label: str
    text2: str = ""


@dataclass
class RawSplits:
    """Raw examples of a dataset; ``val`` None means: split it off the training set."""

    train: list[RawExample]
    test: list[RawExample]
    val: list[RawExample] | None = None


@dataclass
class PrepareConfig:
    """Options of ``prepare`` (params.yaml ``prepare.<dataset>``).

    Attributes:
        source: where the data comes from: ``generate`` (bAbI), ``package`` (an embedded copy),
            ``hub`` (HF datasets, online), or a local path to the official distribution.
        n_train, n_test: sizes of generated sources.
        val_fraction: share of the training set held out for validation when the source has no
            validation split.
        min_count: minimum training-set count of a word to enter the vocabulary.
        max_length: longest first sequence, in tokens (longer ones are truncated).
        seed: seed of generation, the validation split and subsampling.
        limit: keep a seeded random subset of at most this many examples per split (0: all);
            for quick looks, e.g. a transformer on a few hundred examples.
        options: dataset-specific settings (documented by each loader).
    """

    source: str = "generate"
    n_train: int = 10_000
    n_test: int = 1_000
    val_fraction: float = 0.15
    min_count: int = 1
    max_length: int = 512
    seed: int = 0
    limit: int = 0
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset the pipeline knows: task type, metrics, and its raw loader."""

    name: str
    paired: bool
    metric: str
    select_metric: str
    load: Callable[[str, PrepareConfig], RawSplits]


def _babi(name: str, config: PrepareConfig) -> RawSplits:
    from roar.data import babi

    task = int(name.split("-")[1])
    if config.source == "generate":
        train = babi.generate_task(task, config.n_train, config.seed)
        test = babi.generate_task(task, config.n_test, config.seed + 1_000_003)
    else:
        train, test = babi.read_task_files(Path(config.source), task)
    to_raw = lambda exs: [RawExample(" ".join(e.story), e.answer, e.question) for e in exs]  # noqa: E731
    return RawSplits(to_raw(train), to_raw(test))


def _loader(module: str) -> Callable[[str, PrepareConfig], RawSplits]:
    """The ``load`` of ``roar.data.<module>``, imported only when called."""
    def load(name: str, config: PrepareConfig) -> RawSplits:
        return importlib.import_module(f"roar.data.{module}").load(name, config)
    return load


def _binary(name: str, module: str) -> DatasetSpec:
    """A single-sequence binary task: macro-F1, checkpoint by validation AUROC."""
    return DatasetSpec(name, paired=False, metric="macro-f1", select_metric="auroc", load=_loader(module))


DATASETS: dict[str, DatasetSpec] = {
    **{f"babi-{t}": DatasetSpec(f"babi-{t}", paired=True, metric="accuracy", select_metric="accuracy", load=_babi)
       for t in (1, 2, 3)},
    "rotten-tomatoes": _binary("rotten-tomatoes", "polarity"),
    "sst": _binary("sst", "sst"),
    "snli": DatasetSpec("snli", paired=True, metric="accuracy", select_metric="accuracy", load=_loader("snli")),
    "imdb": _binary("imdb", "imdb"),
    "mimic-anemia": _binary("mimic-anemia", "mimic"),
    "mimic-diabetes": _binary("mimic-diabetes", "mimic"),
}


def dataset_spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    return DATASETS[name]


def split_validation(examples: list, fraction: float, seed: int) -> tuple[list, list]:
    """Seeded random (train, val) split with ``round(fraction * n)`` validation examples."""
    if not 0 < fraction < 1:
        raise ValueError(f"val_fraction={fraction!r} must be between 0 and 1")
    order = np.random.default_rng(seed).permutation(len(examples))
    n_val = int(round(fraction * len(examples)))
    val_rows, train_rows = sorted(order[:n_val]), sorted(order[n_val:])
    return [examples[i] for i in train_rows], [examples[i] for i in val_rows]


def label_ids(examples: list[RawExample], classes: list[str], split_name: str) -> list[int]:
    """Class ids of the examples' labels; a label outside the training classes is an error."""
    class_id = {c: i for i, c in enumerate(classes)}
    unknown = sorted({e.label for e in examples} - set(class_id))
    if unknown:
        raise ValueError(f"{split_name} labels {unknown[:5]} are not among the training classes {classes}")
    return [class_id[e.label] for e in examples]


def encode_words(raw: dict[str, list[RawExample]], vocab: Vocabulary, classes: list[str], paired: bool,
                 max_length: int) -> dict[str, Split]:
    """Word ids of every split; the first sequence gets ``[START]``/``[END]`` and is truncated to
    ``max_length`` tokens (the end token kept)."""
    out = {}
    for name, examples in raw.items():
        labels = label_ids(examples, classes, name)
        tokens = [vocab.encode(tokenize(e.text)[: max(max_length - 2, 1)]) for e in examples]
        tokens2 = [vocab.encode(tokenize(e.text2), boundaries=False) for e in examples] if paired else None
        out[name] = Split.from_lists(tokens, labels, tokens2)
    return out


def prepare(dataset: str, out: Path, config: PrepareConfig, model: str = "bilstm-attention",
            checkpoint: str | None = None) -> dict:
    """Prepare ``dataset`` for ``model`` into the folder ``out``; returns a summary.

    Args:
        dataset: a name in :data:`DATASETS`.
        out: the dataset folder to write (atomically).
        config: source and sizes.
        model: ``bilstm-attention`` (word vocabulary) or a transformer (``roberta``).
        checkpoint: the transformer checkpoint whose tokenizer to use.
    """
    spec = dataset_spec(dataset)
    raw = spec.load(dataset, config)
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
    if model == "bilstm-attention":
        vocab = Vocabulary.build((tokenize(e.text) + tokenize(e.text2) for e in train_raw), config.min_count)
        splits = encode_words(splits_raw, vocab, classes, spec.paired, config.max_length)
        vocab_json = json.dumps(vocab.tokens) + "\n"
        meta = DatasetMeta(dataset, classes, spec.paired, spec.metric, spec.select_metric, "word", MASK_ID,
                           UNMASKABLE_IDS)
    else:
        from roar.models.transformer import encode_transformer

        if not checkpoint:
            raise ValueError(f"model {model!r} needs a checkpoint (train.{model}.{dataset}.checkpoint)")
        splits, vocab_json, ids = encode_transformer(splits_raw, classes, spec.paired, checkpoint, config.max_length)
        meta = DatasetMeta(dataset, classes, spec.paired, spec.metric, spec.select_metric, checkpoint, **ids)
    write_dataset(out, meta, vocab_json, splits)
    return {"dataset": dataset, "model": model, "vocab_size": len(json.loads(vocab_json)), "classes": len(classes),
            **{f"n_{k}": len(v) for k, v in splits.items()},
            "mean_length": round(float(np.mean(splits["train"].lengths)), 2)}
