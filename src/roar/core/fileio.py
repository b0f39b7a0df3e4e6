"""Atomic writes and content hashes: every output appears whole or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def write_json_atomic(path: Path, obj: object) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextmanager
def atomic_dir(folder: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``folder`` in one rename."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old{os.getpid()}")
        folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old)
    else:
        tmp.rename(folder)


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of one file's bytes, read in 1 MiB blocks."""
    digest = hashlib.new(algorithm)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_hash(path: Path) -> str:
    """sha256 of a file, or of a folder's relative paths and file contents (sorted)."""
    digest = hashlib.sha256()
    if path.is_file():
        files = [path]
        base = path.parent
    else:
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        base = path
    for file in files:
        digest.update(str(file.relative_to(base)).encode() + b"\0")
        with file.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def fingerprint(obj: object) -> str:
    """Short stable hash of a JSON-able object (params of a study or a step)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]
