"""Shared pieces of the dataset loaders: source selection, one-line errors, splits, the HF hub.

Every loader takes ``config.source`` as either a keyword (``hub``, ``package``) or a local path
to the dataset's official distribution; the helpers here make the failures uniform: an
unsupported keyword or option is a ``ValueError``, missing files a ``FileNotFoundError``, each
one line naming the dataset, what was expected and how to get it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from roar.config.datasets import PrepareConfig, RawExample, split_validation

HUB = "hub"
PACKAGE = "package"
KEYWORDS = ("generate", HUB, PACKAGE)
NEGATIVE, POSITIVE = "negative", "positive"


def source_kind(dataset: str, config: PrepareConfig, keywords: Iterable[str], path_hint: str) -> str:
    """``config.source`` if it is one of ``keywords``, else ``"path"``.

    Args:
        dataset: the dataset name (for the message).
        config: the prepare options.
        keywords: the keyword sources this dataset supports (``hub``, ``package``).
        path_hint: what a local path must hold, e.g. ``"the folder with trees/train.txt"``.

    Raises:
        ValueError: for an empty source or a keyword this dataset does not support.
    """
    allowed = tuple(keywords)
    source = (config.source or "").strip()
    if source in allowed:
        return source
    if not source or source in KEYWORDS:
        choices = " or ".join([*(repr(k) for k in allowed), f"a local path to {path_hint}"])
        raise ValueError(f"dataset {dataset!r} does not support source {config.source!r}; "
                         f"set prepare.{dataset}.source to {choices}")
    return "path"


def check_options(dataset: str, options: dict, allowed: Iterable[str]) -> None:
    """Refuse option names the loader does not know (likely typos)."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown prepare.{dataset}.options {unknown}; allowed: {sorted(allowed) or 'none'}")


def missing(dataset: str, expected: Path | str, how: str, setting: str | None = None) -> FileNotFoundError:
    """The one-line error for a local source without the expected files; ``setting`` is the
    params key to point at them (default ``prepare.<dataset>.source``)."""
    return FileNotFoundError(f"dataset {dataset!r}: {expected} not found; {how}, "
                             f"then set {setting or f'prepare.{dataset}.source'} to that location")


def find_folder(root: Path, marker: str, subfolders: Iterable[str] = ()) -> Path | None:
    """The first of ``root`` and ``root/<sub>`` that contains ``marker``, else None.

    Lets users point ``source`` at the unpacked archive or the folder inside it.
    """
    for folder in (root, *(root / sub for sub in subfolders)):
        if (folder / marker).exists():
            return folder
    return None


def seeded_subsample(examples: list, fraction: float, seed: int) -> list:
    """A seeded ``round(fraction * n)`` subset, in the original order (all of it for fraction 1)."""
    return list(examples) if fraction == 1 else split_validation(examples, fraction, seed)[1]


def stratified_split(examples: list[RawExample], fraction: float, seed: int) -> tuple[list[RawExample],
                                                                                      list[RawExample]]:
    """Seeded (rest, held-out) split holding out ``round(fraction * n_c)`` examples of each label c;
    both parts keep the original order."""
    held: set[int] = set()
    for offset, label in enumerate(sorted({e.label for e in examples})):
        rows = [i for i, e in enumerate(examples) if e.label == label]
        held.update(split_validation(rows, fraction, seed + offset)[1])
    return ([e for i, e in enumerate(examples) if i not in held],
            [e for i, e in enumerate(examples) if i in held])


def hub_splits(dataset: str, hub_id: str, config_name: str | None = None) -> dict[str, list[dict]]:
    """All splits of an HF hub dataset as lists of rows (online only; ``datasets`` imported lazily)."""
    try:
        import datasets
    except ImportError as error:  # pragma: no cover - datasets is a dependency
        raise ValueError(f"dataset {dataset!r}: source 'hub' needs the package datasets") from error
    try:
        loaded = datasets.load_dataset(hub_id, config_name)
    except Exception as error:  # noqa: BLE001 - any hub failure becomes one clear line
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ValueError(f"dataset {dataset!r}: could not load {hub_id!r} from the HF hub ({first_line}); "
                         f"offline, set prepare.{dataset}.source to a local copy") from error
    return {split: list(rows) for split, rows in loaded.items()}
