"""On-disk format of prepared and masked datasets.

A dataset folder holds ``meta.json``, ``vocab.json`` and one Arrow IPC file per split
(``train.arrow``, ``val.arrow``, ``test.arrow``) with the columns ``tokens`` (list<int32>, the
first sequence, the one that is masked), ``tokens2`` (list<int32>, the second sequence; empty
for single-sequence tasks), ``label`` (int32) and ``index`` (int64, the example's position in the
prepared split, kept through masking). Arrow files are compact, memory-mappable and byte-stable,
so their content hash identifies a dataset version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from roar.core.errors import RoarError, one_line
from roar.core.fileio import atomic_dir

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Split:
    """One split, padded to its longest sequence.

    Attributes:
        tokens: ``[N, L]`` int64 ids of the first sequence, right-padded with 0.
        lengths: ``[N]`` lengths of the first sequence.
        tokens2: ``[N, L2]`` ids of the second sequence (``L2`` = 0 for single-sequence tasks).
        lengths2: ``[N]`` lengths of the second sequence.
        labels: ``[N]`` gold class ids.
        index: ``[N]`` example ids, stable through masking.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    tokens2: np.ndarray
    lengths2: np.ndarray
    labels: np.ndarray
    index: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def paired(self) -> bool:
        return self.tokens2.shape[1] > 0

    def with_tokens(self, tokens: np.ndarray) -> Split:
        """The same split with new first-sequence ids (same shape)."""
        if tokens.shape != self.tokens.shape:
            raise ValueError(f"tokens shape {tokens.shape} differs from {self.tokens.shape}")
        return replace(self, tokens=tokens)

    @classmethod
    def from_lists(cls, tokens: list[list[int]], labels: list[int],
                   tokens2: list[list[int]] | None = None, index: list[int] | None = None) -> Split:
        t, lengths = _pad(tokens)
        t2, lengths2 = _pad(tokens2 if tokens2 is not None else [[] for _ in tokens])
        idx = np.arange(len(tokens)) if index is None else np.asarray(index, dtype=np.int64)
        return cls(t, lengths, t2, lengths2, np.asarray(labels, dtype=np.int64), idx)


@dataclass(frozen=True)
class DatasetMeta:
    """What a model needs to know about a prepared dataset."""

    name: str
    classes: list[str]
    paired: bool
    metric: str  # test metric: "accuracy" or "macro-f1"
    select_metric: str  # checkpoint selection on validation: "accuracy" or "auroc"
    tokenizer: str = "word"  # "word" (our vocabulary) or the HF checkpoint whose tokenizer made the ids
    mask_id: int = 2  # id written over masked tokens
    unmaskable_ids: tuple[int, ...] = (0, 3, 4)  # padding and sequence boundaries: never masked

    def __post_init__(self):
        object.__setattr__(self, "unmaskable_ids", tuple(self.unmaskable_ids))

    def to_json(self) -> str:
        return json.dumps({**self.__dict__, "unmaskable_ids": list(self.unmaskable_ids)}, indent=2, sort_keys=True) + "\n"


def _pad(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.asarray([len(s) for s in seqs], dtype=np.int64)
    out = np.zeros((len(seqs), int(lengths.max(initial=0))), dtype=np.int64)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out, lengths


def _list_column(tokens: np.ndarray, lengths: np.ndarray):
    import pyarrow as pa

    keep = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    values = pa.array(tokens[keep].astype(np.int32))
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, values)


def _padded(column) -> tuple[np.ndarray, np.ndarray]:
    column = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = np.asarray(column.values, dtype=np.int64)
    lengths = np.diff(offsets)
    out = np.zeros((len(lengths), int(lengths.max(initial=0))), dtype=np.int64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    cols = np.arange(len(values)) - np.repeat(offsets[:-1], lengths)
    out[rows, cols] = values
    return out, lengths


def write_split(split: Split, path: Path) -> None:
    """Write a split as an uncompressed Arrow IPC file (caller makes the folder atomic)."""
    import pyarrow as pa

    table = pa.table({
        "tokens": _list_column(split.tokens, split.lengths),
        "tokens2": _list_column(split.tokens2, split.lengths2),
        "label": pa.array(split.labels.astype(np.int32)),
        "index": pa.array(split.index.astype(np.int64)),
    })
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


COLUMNS = ("tokens", "tokens2", "label", "index")
REDO = "re-run the stage that writes it (`dvc repro`, or the roar command that makes it)"


def _check_file(path: Path, redo: str = REDO) -> None:
    """One line for a missing or empty file; ``redo`` says how to make it again."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; {redo}")
    if path.stat().st_size == 0:
        raise RoarError(f"{path} is empty; {redo}")


def _read_table(path: Path):
    """The Arrow table of a split file, checked: readable, the four columns, valid offsets."""
    import pyarrow as pa

    _check_file(path)
    try:
        with pa.memory_map(str(path), "r") as source:
            table = pa.ipc.open_file(source).read_all()
        table.validate(full=True)
    except (pa.ArrowException, OSError, ValueError) as error:
        reason = one_line(str(error)) or type(error).__name__
        raise RoarError(f"{path} is not a readable Arrow split file ({reason[:160]}); {REDO}") from error
    names = tuple(table.column_names)
    if sorted(names) != sorted(COLUMNS):
        raise RoarError(f"{path} has columns {', '.join(names) or 'none'}; a split needs exactly "
                        f"{', '.join(COLUMNS)}; {REDO}")
    for name in ("tokens", "tokens2"):
        if not pa.types.is_list(table.schema.field(name).type):
            kind = table.schema.field(name).type
            raise RoarError(f"{path}: column {name} is {kind}, not a list of token ids; {REDO}")
    for name in ("label", "index"):
        if not pa.types.is_integer(table.schema.field(name).type):
            raise RoarError(f"{path}: column {name} is {table.schema.field(name).type}, not integers; {REDO}")
    return table


def read_split(path: Path) -> Split:
    """Read a split written by :func:`write_split` (memory-mapped); a missing, empty or corrupt
    file raises one line naming it."""
    return _split_from_table(_read_table(Path(path)))


def _split_from_table(table) -> Split:
    tokens, lengths = _padded(table.column("tokens"))
    tokens2, lengths2 = _padded(table.column("tokens2"))
    return Split(tokens, lengths, tokens2, lengths2,
                 table.column("label").to_numpy().astype(np.int64),
                 table.column("index").to_numpy().astype(np.int64))


def write_dataset(folder: Path, meta: DatasetMeta, vocab_json: str, splits: dict[str, Split]) -> None:
    """Write a whole dataset folder atomically (replacing an older one)."""
    with atomic_dir(folder) as tmp:
        (tmp / "meta.json").write_text(meta.to_json())
        (tmp / "vocab.json").write_text(vocab_json)
        for name, split in splits.items():
            write_split(split, tmp / f"{name}.arrow")


def _check_folder(folder: Path) -> None:
    if not folder.is_dir():
        raise FileNotFoundError(f"dataset folder {folder} not found; {REDO}")


def read_json_checked(path: Path, redo: str = REDO):
    """The JSON in ``path``; a missing, empty or invalid file raises one line naming it and ``redo``."""
    _check_file(path, redo)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RoarError(f"{path} is not valid JSON ({one_line(str(error))}); {redo}") from error


def read_meta(folder: Path) -> DatasetMeta:
    folder = Path(folder)
    _check_folder(folder)
    path = folder / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a prepared dataset (no meta.json); {REDO}")
    values = read_json_checked(path)
    try:
        return DatasetMeta(**values)
    except TypeError as error:
        allowed = ", ".join(f.name for f in fields(DatasetMeta))
        raise RoarError(f"{path} does not describe a dataset ({one_line(str(error))}); expected the keys "
                        f"{allowed}; {REDO}") from error


def read_vocab(folder: Path) -> list[str]:
    """The dataset's tokens in id order (``vocab.json``), checked to be a list of strings."""
    path = Path(folder) / "vocab.json"
    vocab = read_json_checked(path)
    if not isinstance(vocab, list) or not all(isinstance(token, str) for token in vocab):
        raise RoarError(f"{path} must hold a JSON list of tokens; {REDO}")
    return vocab


def _read_tables(folder: Path) -> tuple[DatasetMeta, dict]:
    """Meta and the checked Arrow table of every split; any missing, empty or corrupt file raises
    one line naming it."""
    folder = Path(folder)
    meta = read_meta(folder)
    read_vocab(folder)
    return meta, {name: _read_table(folder / f"{name}.arrow") for name in SPLITS}


def read_dataset(folder: Path) -> tuple[DatasetMeta, dict[str, Split]]:
    """Read the metadata and all splits of a dataset folder (every file checked before any split
    is converted)."""
    meta, tables = _read_tables(folder)
    return meta, {name: _split_from_table(table) for name, table in tables.items()}


def check_dataset(folder: Path) -> DatasetMeta:
    """Check that a dataset folder is complete and readable (no split is converted); returns its meta."""
    return _read_tables(folder)[0]


def vocab_size(folder: Path) -> int:
    return len(read_vocab(folder))
