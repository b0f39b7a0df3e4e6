"""Study folders: several studies side by side in one DVC project.

The embedded default study is the project root's ``params.yaml`` + ``dvc.yaml``. Every other study
is a folder ``studies/<name>/`` with its own ``params.yaml`` and a ``dvc.yaml`` generated from the
root's by :func:`study_dvc_yaml` (DVC reads a ``dvc.yaml``'s params and runs its commands in the
``dvc.yaml``'s folder, and has no way to include another file's stages), so the stage templates
are written once. The stages run inside the folder: its ``data/``, ``models/``, ``results/`` and
``reports/`` are its own, while the DVC cache, the remote and the MLflow store are the project's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from roar.core.errors import RoarError
from roar.core.fileio import write_text_atomic
from roar.config.layout import STUDIES, project_root

DEFAULT = "default"  # the name of the study at the project root
NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
HEADER = ("# Generated from the project's dvc.yaml by `roar study sync`: edit that one, then run `roar study sync`.\n"
          "# This study's grid and hyperparameters are in params.yaml beside this file.\n")


def study_dvc_yaml(top: str, up: str = "../..") -> str:
    """The ``dvc.yaml`` text of a study folder ``up`` levels below the root, from the root's ``dvc.yaml`` text:
    the same stages, metrics and plots, with the code fingerprints' file (the project's ``provenance.yaml``)
    made relative to the folder."""
    import yaml

    from roar.pipeline.provenance import PROVENANCE_FILE

    pipeline = yaml.safe_load(top)
    for stage in (pipeline.get("stages") or {}).values():
        stage["params"] = [{f"{up}/{PROVENANCE_FILE}": item[PROVENANCE_FILE]}
                           if isinstance(item, dict) and PROVENANCE_FILE in item else item
                           for item in stage.get("params", [])]
    return HEADER + yaml.safe_dump(pipeline, sort_keys=False, width=120)


def study_folders(root: Path = Path(".")) -> list[Path]:
    """The study folders of the project at ``root`` (those with a ``params.yaml``), by name."""
    folder = Path(root) / STUDIES
    return sorted(p for p in folder.iterdir() if (p / "params.yaml").is_file()) if folder.is_dir() else []


def study_names(root: Path = Path(".")) -> list[str]:
    return [DEFAULT] + [p.name for p in study_folders(root)]


def _expected(root: Path, folder: Path) -> str:
    up = Path(os.path.relpath(root, folder)).as_posix()
    return study_dvc_yaml((root / "dvc.yaml").read_text(encoding="utf-8"), up)


def stale_studies(root: Path = Path(".")) -> list[Path]:
    """The study folders whose ``dvc.yaml`` is missing or differs from what the root's ``dvc.yaml`` generates."""
    root = Path(root)
    return [folder for folder in study_folders(root)
            if not (folder / "dvc.yaml").is_file()
            or (folder / "dvc.yaml").read_text(encoding="utf-8") != _expected(root, folder)]


def sync_studies(root: Path = Path(".")) -> list[Path]:
    """Regenerate every stale study ``dvc.yaml`` from the root's; returns the folders written."""
    root = Path(root)
    stale = stale_studies(root)
    for folder in stale:
        write_text_atomic(folder / "dvc.yaml", _expected(root, folder))
    return stale


def new_study(name: str, source: Path, root: Path = Path(".")) -> Path:
    """Create ``studies/<name>/`` with a copy of the params file ``source`` (checked first, comments kept)
    and its generated ``dvc.yaml``; returns the folder."""
    from roar.config.params import load_params

    root = Path(root)
    if name == DEFAULT or not NAME.fullmatch(name):
        raise RoarError(f"study name {name!r} not allowed; use lower-case letters, digits, '.', '_' and '-' "
                        f"(starting with a letter or digit), not {DEFAULT!r}")
    folder = root / STUDIES / name
    if folder.exists():
        raise RoarError(f"study folder {folder} exists; pick another name or edit its params.yaml")
    if not (root / "dvc.yaml").is_file():
        raise FileNotFoundError(f"dvc.yaml not found in {root.resolve()}; run `roar study new` from the project root")
    load_params(source)
    folder.mkdir(parents=True)
    write_text_atomic(folder / "params.yaml", Path(source).read_text(encoding="utf-8"))
    write_text_atomic(folder / "dvc.yaml", _expected(root, folder))
    return folder


def resolve_study(name: str | None, cwd: Path = Path(".")) -> Path:
    """The folder that runs study ``name`` (``default``: the project root); ``None``: ``cwd`` itself.
    A study folder must hold a ``params.yaml`` and an up-to-date ``dvc.yaml``."""
    cwd = Path(cwd)
    if name is None:
        folder = cwd
    else:
        root = project_root(cwd)
        folder = root if name == DEFAULT else root / STUDIES / name
        if not (folder / "params.yaml").is_file():
            raise RoarError(f"study {name!r} not found ({folder / 'params.yaml'} missing); studies: "
                            f"{', '.join(study_names(root))}; create one with `roar study new NAME --from FILE`")
    if not (folder / "dvc.yaml").is_file():
        raise FileNotFoundError(f"dvc.yaml not found in {folder}; run from the project root or a study folder, "
                                "or pass --study NAME")
    root = project_root(folder)
    if folder.resolve() != root and folder.resolve() in {p.resolve() for p in stale_studies(root)}:
        raise RoarError(f"{folder / 'dvc.yaml'} differs from what the project's dvc.yaml generates; "
                        "run `roar study sync` (then commit it)")
    return folder
