"""Checks of a saved model folder (``model.safetensors`` and ``config.json``) before any tensor is read:
each problem is one line (:class:`~roar.core.errors.RoarError` or ``FileNotFoundError``) naming the file
and what to do.

Light on imports (no torch): the command line runs these before it loads the library that
does the work.
"""

from __future__ import annotations

import json
import struct
from dataclasses import fields
from pathlib import Path

from roar.core.errors import RoarError, one_line

REDO_MODEL = "re-run the stage that trains it (`dvc repro`, or `roar train-reference` / `roar chain`)"
CONFIG_KEYS = ("meta", "train", "vocab_size")


def check_safetensors(path: Path) -> int:
    """Check a safetensors file's header against its size (no tensor is read); returns the number
    of tensors. The format: 8-byte little-endian header length, a JSON header whose entries give
    each tensor's ``data_offsets`` into the data that follows."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; {REDO_MODEL}")
    size = path.stat().st_size
    if size == 0:
        raise RoarError(f"{path} is empty; {REDO_MODEL}")

    def corrupt(reason: str) -> RoarError:
        return RoarError(f"{path} is not a readable safetensors file ({reason}); {REDO_MODEL}")

    with path.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise corrupt(f"{size} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise corrupt(f"header length {n} exceeds the file size {size}")
        try:
            header = json.loads(fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise corrupt(f"header is not JSON: {one_line(str(error))}") from error
    if not isinstance(header, dict):
        raise corrupt("header is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    try:
        end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
    except (TypeError, KeyError, IndexError, ValueError) as error:
        raise corrupt(f"a tensor entry lacks data_offsets ({type(error).__name__})") from error
    if end != size - 8 - n:
        raise corrupt(f"tensor data ends at byte {end} of {size - 8 - n}; the file is truncated or padded")
    if not tensors:
        raise corrupt("no tensors")
    return len(tensors)


def read_model_config(folder: Path) -> dict:
    """``config.json`` of a saved model, checked: JSON with ``meta``, ``train``, ``vocab_size``."""
    from roar.data.storage import DatasetMeta, read_json_checked

    path = folder / "config.json"
    saved = read_json_checked(path, REDO_MODEL)
    if not isinstance(saved, dict) or any(key not in saved for key in CONFIG_KEYS):
        raise RoarError(f"{path} is not a saved model's config (needs the keys {', '.join(CONFIG_KEYS)}); "
                        f"{REDO_MODEL}")
    meta_keys = {f.name for f in fields(DatasetMeta)}
    if (not isinstance(saved["meta"], dict) or not set(saved["meta"]) <= meta_keys
            or not isinstance(saved["train"], dict) or not isinstance(saved["vocab_size"], int)):
        raise RoarError(f"{path}: meta, train or vocab_size has the wrong form; {REDO_MODEL}")
    return saved


def check_model_folder(folder: Path) -> dict:
    """Check a saved model folder (``model.safetensors`` and ``config.json``); returns the config."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} not found; {REDO_MODEL}")
    saved = read_model_config(folder)
    check_safetensors(folder / "model.safetensors")
    return saved
