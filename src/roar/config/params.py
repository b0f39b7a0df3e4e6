"""Read and check ``params.yaml``: the study grid and every hyperparameter."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roar.config.catalog import MASKING_COUNTS, RACU_BASELINES, strategy_spec
from roar.core.errors import RoarError

DEFAULT_PARAMS = Path("params.yaml")


@dataclass(frozen=True)
class Study:
    """The grid of a study: which chains exist, their masking steps and how a step counts the tokens it
    masks (``masking_count``); and the random curve the RACU compares with (``racu_baseline``)."""

    name: str
    datasets: list[str]
    models: list[str]
    measures: list[str]
    roar_measures: list[str]
    seeds: list[int]
    strategy: str
    steps: list[int]
    masking_count: str = MASKING_COUNTS[0]
    racu_baseline: str = RACU_BASELINES[0]

    @property
    def chain_modes(self) -> list[tuple[str, bool]]:
        """``(measure, recursive)`` of every chain kind: Recursive ROAR for ``measures``, plain ROAR
        for ``roar_measures``."""
        return [(m, True) for m in self.measures] + [(m, False) for m in self.roar_measures]

    @property
    def end_k(self) -> int | None:
        """The shared all-masked point of the study's strategy (k = 100 for quantile; count has none)."""
        return strategy_spec(self.strategy).end_k


def load_params(path: Path = DEFAULT_PARAMS) -> dict:
    """``path`` read and checked against the schema (:mod:`roar.config.schema`), with its ``fidelity`` preset
    applied (:func:`roar.config.fidelity.with_fidelity`); a bad file raises one line
    (:class:`~roar.core.errors.RoarError`, a ``ValueError``; ``FileNotFoundError`` for a missing file)."""
    from roar.config.fidelity import with_fidelity
    from roar.config.schema import check_params, parse_params

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"params file {path} not found; run from the project root or pass --params FILE")
    if path.is_dir():
        raise RoarError(f"params file {path} is a folder; pass a YAML file with --params FILE")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise RoarError(f"{path}: not UTF-8 text (byte {error.start}); save it as UTF-8 YAML") from error
    return with_fidelity(check_params(parse_params(text, str(path)), str(path)))


def study_from_params(params: dict, where: str = "params.yaml") -> Study:
    """The study section, checked against the schema: unknown names and bad steps fail with one line."""
    from roar.config.schema import check_study

    if not isinstance(params, dict) or "study" not in params:
        raise RoarError(f"{where}: missing section study; required sections: study, prepare, train, importance")
    s = check_study(params["study"], where)
    return Study(name=s["name"], datasets=list(s["datasets"]), models=list(s["models"]),
                 measures=list(s["measures"]), roar_measures=list(s["roar_measures"]), seeds=list(s["seeds"]),
                 strategy=s["strategy"], steps=list(s["steps"]),
                 masking_count=s.get("masking_count", MASKING_COUNTS[0]),
                 racu_baseline=s.get("racu_baseline", RACU_BASELINES[0]))


def section(params: dict, *keys: str) -> dict:
    """``params[k1][k2]...`` or a one-line error naming the missing key."""
    node = params
    for i, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"params.yaml: missing key {'.'.join(keys[: i + 1])}; add it to params.yaml")
        node = node[key]
    return node or {}


STUDY_SECTIONS = ("study", "prepare", "train", "importance")  # the params that make a study's numbers


def study_fingerprint(params: dict) -> str:
    """The key of a study's run: a hash of the params sections that make its numbers."""
    from roar.core.fileio import fingerprint

    return fingerprint({name: params[name] for name in STUDY_SECTIONS if name in params})
