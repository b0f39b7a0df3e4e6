"""mkdocs hook: the figures committed under studies/*/reports/ join the site as figures/<study>/<file>,
so the docs link to them without copies in docs/ (the default study's own figures are DVC outputs,
not in git, so the docs name their paths instead)."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]


def on_files(files, config):
    for png in sorted(ROOT.glob("studies/*/reports/retrain-comparison/*.png")):
        study = png.relative_to(ROOT / "studies").parts[0]
        files.append(File.generated(config, f"figures/{study}/{png.name}", abs_src_path=str(png)))
    return files
