"""Which study folders a project holds.

Its own module rather than part of :mod:`roar.config.layout`: no stage computes with it (the launcher lists
studies, the step store looks in other studies for a finished step), so it stays off the computing path and
changing it re-keys no step (:mod:`roar.pipeline.provenance`).
"""

from __future__ import annotations

from pathlib import Path

from roar.config.layout import STUDIES


def study_folders(root: Path = Path(".")) -> list[Path]:
    """The study folders of the project at ``root`` (those under ``studies/`` with a ``params.yaml``), by name."""
    folder = Path(root) / STUDIES
    return sorted(p for p in folder.iterdir() if (p / "params.yaml").is_file()) if folder.is_dir() else []
