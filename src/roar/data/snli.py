"""Stanford Natural Language Inference (SNLI 1.0), three classes, premise masked.

Reads the JSON-lines files of the official distribution (``snli_1.0_train.jsonl``,
``snli_1.0_dev.jsonl``, ``snli_1.0_test.jsonl``; fields ``sentence1`` premise, ``sentence2``
hypothesis, ``gold_label``). Pairs without a gold label (``gold_label`` ``-``, no annotator
majority) are dropped, as in the paper. The premise is the first (masked) sequence, the
hypothesis the second. The dev file is the validation split.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from roar.config.datasets import PrepareConfig, RawExample, RawSplits
from roar.data.sources import HUB, check_options, find_folder, hub_splits, missing, source_kind

LABELS = ("entailment", "neutral", "contradiction")  # the HF dataset's label ids 0, 1, 2
SPLIT_FILES = {"train": "snli_1.0_train.jsonl", "val": "snli_1.0_dev.jsonl", "test": "snli_1.0_test.jsonl"}
HUB_ID = "stanfordnlp/snli"
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
HOW_TO_GET = "download snli_1.0.zip from https://nlp.stanford.edu/projects/snli/ and unzip it"


def parse_jsonl(lines: Iterable[str], where: str = "snli") -> list[RawExample]:
    """Examples of SNLI JSON lines, skipping pairs whose ``gold_label`` is ``-``.

    Raises:
        ValueError: for a line that is not JSON, lacks a field, or has a label outside :data:`LABELS`.
    """
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{where} line {number} is not JSON: {error}") from error
        if not isinstance(row, dict) or any(not isinstance(row.get(key), str)
                                            for key in ("gold_label", "sentence1", "sentence2")):
            raise ValueError(f"{where} line {number} needs the string fields gold_label, sentence1, sentence2: "
                             f"{line.strip()[:60]!r}")
        label = row["gold_label"]
        if label == "-":
            continue
        if label not in LABELS:
            raise ValueError(f"{where} line {number}: gold_label {label!r} is not one of {LABELS} or '-'")
        out.append(RawExample(row["sentence1"], label, row["sentence2"]))
    return out


def load(name: str, config: PrepareConfig) -> RawSplits:
    """SNLI without unlabelled pairs; dev = validation split.

    Sources:
        a local path: the ``snli_1.0`` folder (or the folder that holds it);
        ``hub``: the HF dataset ``stanfordnlp/snli`` (online only; label -1 dropped).

    Options: none.
    """
    check_options(name, config.options, ())
    kind = source_kind(name, config, (HUB,), "the snli_1.0 folder")
    if kind == HUB:
        rows = hub_splits(name, HUB_ID)
        data = {split: [RawExample(r["premise"], LABELS[r["label"]], r["hypothesis"])
                        for r in rows[hub] if r["label"] in range(len(LABELS))]
                for split, hub in HUB_SPLITS.items()}
    else:
        root = Path(config.source).expanduser()
        folder = find_folder(root, SPLIT_FILES["train"], ("snli_1.0",))
        if folder is None:
            raise missing(name, root / SPLIT_FILES["train"], HOW_TO_GET)
        data = {}
        for split, file in SPLIT_FILES.items():
            path = folder / file
            if not path.is_file():
                raise missing(name, path, HOW_TO_GET)
            try:
                with path.open(encoding="utf-8") as lines:  # streamed: the train file is ~0.5 GB
                    data[split] = parse_jsonl(lines, str(path))
            except UnicodeDecodeError as error:
                raise ValueError(f"{path} is not UTF-8 text (byte {error.start}); {HOW_TO_GET}") from error
    return RawSplits(data["train"], data["test"], data["val"])
