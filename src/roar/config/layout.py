"""Where every output lives, in one place (relative to the project root)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


STUDIES = "studies"  # the study folders under the project root, each a params.yaml and a generated dvc.yaml


def project_root(start: Path = Path(".")) -> Path:
    """The DVC project holding ``start`` (the nearest folder with a ``.dvc`` folder, as DVC finds it),
    or ``start`` itself outside one; resolved. A study folder's outputs live under the folder, while
    the MLflow store and the DVC cache and remote belong to the project."""
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / ".dvc").is_dir():
            return folder
    return start


def mode_name(recursive: bool) -> str:
    """``recursive`` or ``roar``: a chain's mode in paths, stage names and tables."""
    return "recursive" if recursive else "roar"


def mode_title(recursive: bool) -> str:
    """``Recursive ROAR`` or ``ROAR``: a chain's mode in headings and figures."""
    return "Recursive ROAR" if recursive else "ROAR"


@dataclass(frozen=True)
class Layout:
    """Paths of a project's DVC outputs, laid out by dataset, model, chain, seed and k."""

    root: Path = Path(".")

    def prepared(self, dataset: str, model: str) -> Path:
        """Tokenised splits; the tokenizer belongs to the model (word vocabulary or HF tokenizer)."""
        return self.root / "data" / "prepared" / dataset / model

    def all_masked(self, dataset: str, model: str) -> Path:
        """The k = 100 data: every maskable token masked, shared by all measures and seeds."""
        return self.root / "data" / "masked" / dataset / model / "all"

    def chain_data(self, dataset: str, model: str, measure: str, recursive: bool, seed: int) -> Path:
        return self.root / "data" / "masked" / dataset / model / measure / mode_name(recursive) / f"s{seed}"

    def chain_models(self, dataset: str, model: str, measure: str, recursive: bool, seed: int) -> Path:
        return self.root / "models" / dataset / model / measure / mode_name(recursive) / f"s{seed}"

    def chain_results(self, dataset: str, model: str, measure: str, recursive: bool, seed: int) -> Path:
        return self.root / "results" / dataset / model / measure / mode_name(recursive) / f"s{seed}"

    def shared_model(self, dataset: str, model: str, which: str, seed: int) -> Path:
        """``which`` shared model: ``k0`` (trained on unmasked data) or ``all`` (everything masked)."""
        return self.root / "models" / dataset / model / which / f"s{seed}"

    def shared_result(self, dataset: str, model: str, which: str, seed: int) -> Path:
        return self.root / "results" / dataset / model / which / f"s{seed}.json"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def runs(self) -> Path:
        """The run facts of the records in :attr:`results` (run ids, commit, seconds), by the same paths."""
        return self.root / "runs"

    @property
    def reports(self) -> Path:
        return self.root / "reports"


def run_facts_path(record: Path) -> Path:
    """Where the run facts of the record at ``record`` (under a ``results`` folder) live: the same path under
    the ``runs`` folder beside it. Records are DVC outputs; the run facts are not (they change with every run)."""
    parts = record.parts
    if "results" not in parts:
        raise ValueError(f"{record} is not under a results folder; step records live under <study>/results")
    at = len(parts) - 1 - parts[::-1].index("results")
    return Path(*parts[:at], "runs", *parts[at + 1:])


def step_dir(chain_dir: Path, k: int) -> Path:
    return chain_dir / f"k{k}"


def stage_kind(stage: str) -> str:
    """The DVC stage template a stage instance comes from: ``recursive`` for ``recursive@babi-1-bilstm-attention-random-0``."""
    return stage.split("@")[0]
