"""The datasets the pipeline knows, the raw examples their loaders return, and prepare's options.

Names and task facts only (no loader is imported here): the params schema and the report read
these without pulling in any dataset's reading code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


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


# prepare.<dataset>.tokens: roar's (lower-cased words and punctuation, each bAbI statement ending in its
# '.', the question in its '?'), or the official code's, for the datasets whose spec offers it (bAbI):
# see roar.data.babi.official_text and roar.data.tokenize.WORD_TOKENIZERS.
TOKENS = ("roar", "official")


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
        tokens: the tokens of the word encoding, one of :data:`TOKENS` that the dataset's spec offers
            (``official``: bAbI as the official code writes and splits it).
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
    tokens: str = TOKENS[0]


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset the pipeline knows: task type, metrics, and where its raw loader lives.

    ``loader`` names the module ``roar.data.<loader>`` whose ``load(name, config)`` reads the
    raw examples; it is imported by :func:`roar.data.prepare.prepare` only when the dataset is
    prepared. ``load`` (a callable) takes its place for datasets registered at run time.
    ``tokens``: the values of ``prepare.<name>.tokens`` it offers (:data:`TOKENS`).
    """

    name: str
    paired: bool
    metric: str
    select_metric: str
    loader: str = ""
    load: Callable[[str, PrepareConfig], RawSplits] | None = None
    tokens: tuple[str, ...] = TOKENS[:1]


def _binary(name: str, module: str) -> DatasetSpec:
    """A single-sequence binary task: macro-F1, checkpoint by validation AUROC."""
    return DatasetSpec(name, paired=False, metric="macro-f1", select_metric="auroc", loader=module)


DATASETS: dict[str, DatasetSpec] = {
    **{f"babi-{t}": DatasetSpec(f"babi-{t}", paired=True, metric="accuracy", select_metric="accuracy", loader="babi",
                                tokens=TOKENS) for t in (1, 2, 3)},
    "rotten-tomatoes": _binary("rotten-tomatoes", "polarity"),
    "sst": _binary("sst", "sst"),
    "snli": DatasetSpec("snli", paired=True, metric="accuracy", select_metric="accuracy", loader="snli"),
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
