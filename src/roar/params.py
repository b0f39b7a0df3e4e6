"""Read and check ``params.yaml``: the study grid and every hyperparameter."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roar.importance import MEASURES
from roar.masking import STRATEGIES, check_k

DEFAULT_PARAMS = Path("params.yaml")


@dataclass(frozen=True)
class Study:
    """The grid of a study: which chains exist and their masking steps."""

    name: str
    datasets: list[str]
    models: list[str]
    measures: list[str]
    roar_measures: list[str]
    seeds: list[int]
    strategy: str
    steps: list[int]

    @property
    def end_k(self) -> int | None:
        """The shared all-masked point (k = 100) for quantile studies; count studies have none."""
        return 100 if self.strategy == "quantile" else None


def load_params(path: Path = DEFAULT_PARAMS) -> dict:
    import yaml

    if not path.is_file():
        raise FileNotFoundError(f"params file {path} not found")
    return yaml.safe_load(path.read_text())


def study_from_params(params: dict) -> Study:
    """The study section, checked: unknown names and bad steps fail with one line."""
    from roar.data.prepare import DATASETS
    from roar.training import MODELS

    s = params["study"]
    study = Study(name=s["name"], datasets=list(s["datasets"]), models=list(s["models"]),
                  measures=list(s["measures"]), roar_measures=list(s.get("roar_measures") or []),
                  seeds=[int(x) for x in s["seeds"]], strategy=s["strategy"], steps=[int(k) for k in s["steps"]])
    for kind, names, allowed in (("dataset", study.datasets, DATASETS), ("model", study.models, MODELS),
                                 ("measure", study.measures + study.roar_measures, MEASURES)):
        for name in names:
            if name not in allowed:
                raise ValueError(f"unknown {kind} {name!r} in params study; allowed: {', '.join(allowed)}")
    if study.strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {study.strategy!r}; allowed: {', '.join(STRATEGIES)}")
    if not study.steps or study.steps != sorted(set(study.steps)) or study.steps[0] <= 0:
        raise ValueError(f"study steps {study.steps} must be increasing and > 0")
    for k in study.steps:
        check_k(k, study.strategy)
    if study.end_k is not None and study.steps[-1] >= study.end_k:
        raise ValueError(f"quantile steps {study.steps} must stay below 100: k = 100 is the shared all-masked point")
    return study


def section(params: dict, *keys: str) -> dict:
    """``params[k1][k2]...`` or a one-line error naming the missing key."""
    node = params
    for i, key in enumerate(keys):
        if not isinstance(node, dict) or key not in node:
            raise KeyError(f"params.yaml has no {'.'.join(keys[: i + 1])}")
        node = node[key]
    return node or {}
