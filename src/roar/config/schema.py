"""The one schema of ``params.yaml``: every section, key, type and range, checked in one place.

:func:`parse_params` reads the YAML text; :func:`check_params` checks the whole file and
:func:`check_study` the ``study`` section. The first problem raises a :class:`~roar.core.errors.RoarError`
with one line such as::

    params.yaml: study.steps = [20, 10] must be strictly increasing integers in 1..99 (quantile)
    params.yaml: unknown key train.bilstm-attention.babi-1.epoch; allowed: attention_hidden, batch_size, ...

The names (datasets, models, measures) and the keys of ``prepare.<dataset>`` and
``train.<model>.<dataset>`` come from the library (:data:`roar.config.datasets.DATASETS`,
:class:`~roar.config.datasets.PrepareConfig`, :data:`roar.config.catalog.MODELS`,
:class:`~roar.config.train_config.TrainConfig`, :data:`roar.config.catalog.MEASURES`), so that a new dataset,
model, measure or option is known here without a second list. Those modules hold names and
settings only (no torch, no loader), so checking params is fast and the report stage does not
depend on model or loader code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields

from roar.core.errors import RoarError
from roar.config.datasets import TOKENS
from roar.config.fidelity import PRESETS, with_fidelity
from roar.config.catalog import (K0_MODEL_STORES, MASKING_COUNTS, MEASURE_SPECS, MODEL_FAMILIES, RACU_BASELINES,
                                 STRATEGY_SPECS, TARGETS)
from roar.config.rules import Rule, anything, integer, is_int, mapping, matches, number, one_of, text
from roar.config.train_config import ATTEND, BATCHING, DEVICES, attend_problem, mask_augment_problem

SECTIONS = ("study", "prepare", "train", "importance", "runtime")
FIDELITY = "fidelity"  # the top-level key of the preset (roar.config.fidelity), beside the sections
REQUIRED_SECTIONS = ("study", "prepare", "train", "importance")
STUDY_REQUIRED = ("name", "datasets", "models", "measures", "seeds", "strategy", "steps")
# study: the optional keys and their rules (roar_measures is checked as a list of names).
STUDY_RULES: dict[str, Rule] = {"masking_count": one_of(MASKING_COUNTS), "racu_baseline": one_of(RACU_BASELINES),
                                "k0_models": one_of(K0_MODEL_STORES)}
STUDY_KEYS = (*STUDY_REQUIRED, "roar_measures", *STUDY_RULES)
NOTE = "note"  # a free-form key allowed in every importance.<measure> (e.g. to force a params change)


def fmt(value: object) -> str:
    """A value as the user wrote it in YAML: ``true``, ``null``, ``'text'``, ``[20, 10]``, ``{...}``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {fmt(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def sbatch_lines(value: object) -> str | None:
    """A list of single-line sbatch options (``--qos=high``); a newline would inject script lines."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v.startswith("-") and "\n" not in v
                                              for v in value):
        return "must be a list of single-line sbatch options such as [--qos=high, --constraint=a100]"
    return None


# prepare.<dataset>: one rule per PrepareConfig field (a new field without a rule is refused by
# tests/unit/cli/test_bad_input.py, so that this table stays complete).
PREPARE_RULES: dict[str, Rule] = {
    "source": text(), "n_train": integer(1), "n_test": integer(1),
    "val_fraction": number(0, 1, low_open=True, high_open=True), "min_count": integer(1),
    "max_length": integer(3), "seed": integer(0), "limit": integer(0), "options": mapping,
    "tokens": one_of(TOKENS),  # the dataset's spec says which of them it offers (check_params)
}
# train.<model>.<dataset>: one rule per TrainConfig field but ``model`` (the section names it).
TRAIN_RULES: dict[str, Rule] = {
    "epochs": integer(1), "batch_size": integer(1), "lr": number(0, low_open=True), "weight_decay": number(0),
    "embedding_dim": integer(1), "hidden": integer(1), "attention_hidden": integer(1),
    "embeddings": text(nullable=True), "checkpoint": text(nullable=True),
    "warmup_ratio": number(0, 1, high_open=True), "threads": integer(0), "patience": integer(1, nullable=True),
    "mask_augment": mask_augment_problem, "attend": one_of(ATTEND), "batching": one_of(BATCHING),
}
TRAIN_NOT_IN_PARAMS = ("model",)
# importance.<measure>: the options each measure reads are on its spec (roar.config.catalog), plus
# the free-form ``note``.
IMPORTANCE_RULES: dict[str, Rule] = {"batch_size": integer(1), "target": one_of(TARGETS)}
IMPORTANCE_EXAMPLES = {"batch_size": 128, "target": "predicted"}  # what a missing key's message suggests
RUNTIME_RULES: dict[str, Rule] = {"threads": integer(0), "device": one_of(DEVICES), "slurm": mapping}
# runtime.slurm (and runtime.slurm.stages.<kind>): the resources of the Slurm executor's jobs.
SLURM_RULES: dict[str, Rule] = {
    "partition": text(nullable=True), "account": text(nullable=True),
    "time": matches(r"(\d+-)?\d{1,2}(:\d{2}){0,2}|\d+", "a Slurm time limit such as 04:00:00, 1-00:00:00 or 90 (minutes)"),
    "cpus": integer(1), "gpus": integer(0),
    "memory": matches(r"\d+[KMGT]?", "a Slurm memory size such as 8G or 500M"),
    "extra": sbatch_lines,
}
SLURM_STAGE_KINDS = ("prepare", "train_k0", "train_all_masked", "recursive", "roar", "report", "finish")


def known_names() -> dict[str, tuple[str, ...]]:
    """The names the library knows: datasets, models, measures, strategies."""
    from roar.config.datasets import DATASETS
    from roar.config.catalog import MEASURES, MODELS, STRATEGIES

    return {"dataset": tuple(DATASETS), "model": tuple(MODELS), "measure": tuple(MEASURES),
            "strategy": tuple(STRATEGIES)}


def prepare_keys() -> tuple[str, ...]:
    from roar.config.datasets import PrepareConfig

    return tuple(sorted(f.name for f in fields(PrepareConfig)))


def dataset_tokens(dataset: str) -> tuple[str, ...]:
    """The values of ``prepare.<dataset>.tokens`` that the dataset offers."""
    from roar.config.datasets import DATASETS

    return DATASETS[dataset].tokens


def train_keys() -> tuple[str, ...]:
    from roar.config.train_config import TrainConfig

    return tuple(sorted(f.name for f in fields(TrainConfig) if f.name not in TRAIN_NOT_IN_PARAMS))


class _Checker:
    """Checks one params mapping; ``where`` (the file name) starts every message."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, message: str) -> RoarError:
        return RoarError(f"{self.where}: {message}")

    def value(self, key: str, value: object, rule: Rule) -> None:
        problem = rule(value)
        if problem:
            raise self.fail(f"{key} = {fmt(value)} {problem}")

    def mapping(self, key: str, value: object, what: str, nullable: bool = False) -> dict:
        if value is None and nullable:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{key} = {fmt(value)} must be a mapping of {what}")
        return value

    def keys(self, key: str, node: dict, allowed: Iterable[str]) -> None:
        allowed = list(allowed)
        for name in node:
            if name not in allowed:
                what = f"key {key}.{name}" if key else f"section {name}"
                raise self.fail(f"unknown {what}; allowed: {', '.join(allowed) or 'none'}")

    def required(self, key: str, node: dict, names: Iterable[str], why: str = "") -> None:
        for name in names:
            if name not in node:
                what = f"key {key}.{name}" if key else f"section {name}"
                raise self.fail(f"missing {what}{why}")

    def rules(self, key: str, node: dict, rules: dict[str, Rule], allowed: Iterable[str] | None = None) -> None:
        self.keys(key, node, sorted(rules) if allowed is None else allowed)
        for name, value in node.items():
            self.value(f"{key}.{name}", value, rules.get(name, anything))

    def names(self, key: str, value: object, kind: str, allowed: tuple[str, ...], empty_ok: bool = False) -> list:
        """A list of distinct known names."""
        if value is None and empty_ok:
            return []
        if not isinstance(value, list) or (not value and not empty_ok):
            raise self.fail(f"{key} = {fmt(value)} must be a {'' if empty_ok else 'non-empty '}list of "
                            f"{kind} names; allowed: {', '.join(allowed)}")
        for name in value:
            if name not in allowed:
                raise self.fail(f"{key}: unknown {kind} {fmt(name)}; allowed: {', '.join(allowed)}")
        duplicates = sorted({name for name in value if value.count(name) > 1})
        if duplicates:
            raise self.fail(f"{key} = {fmt(value)} lists {', '.join(duplicates)} more than once; "
                            "each name must appear once")
        return list(value)


def check_study(section: object, where: str = "params.yaml") -> dict:
    """The ``study`` section, checked; returns it with ``roar_measures`` defaulted to ``[]``."""
    c = _Checker(where)
    names = known_names()
    study = c.mapping("study", section, "study settings (name, datasets, models, measures, seeds, strategy, steps)")
    c.keys("study", study, STUDY_KEYS)
    c.required("study", study, STUDY_REQUIRED, f"; required: {', '.join(STUDY_REQUIRED)}")
    c.value("study.name", study["name"], text())
    c.names("study.datasets", study["datasets"], "dataset", names["dataset"])
    c.names("study.models", study["models"], "model", names["model"])
    c.names("study.measures", study["measures"], "measure", names["measure"])
    roar_measures = c.names("study.roar_measures", study.get("roar_measures"), "measure", names["measure"],
                            empty_ok=True)
    seeds = study["seeds"]
    if (not isinstance(seeds, list) or not seeds or not all(is_int(s) and s >= 0 for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise c.fail(f"study.seeds = {fmt(seeds)} must be a non-empty list of distinct integers >= 0")
    strategy = study["strategy"]
    if strategy not in names["strategy"]:
        raise c.fail(f"study.strategy: unknown strategy {fmt(strategy)}; allowed: {', '.join(names['strategy'])}")
    steps = study["steps"]
    end = STRATEGY_SPECS[strategy].end_k
    high = None if end is None else end - 1
    ok = (isinstance(steps, list) and steps and all(is_int(k) and k >= 1 and (high is None or k <= high)
                                                    for k in steps)
          and all(a < b for a, b in zip(steps, steps[1:])))
    if not ok:
        span = f"1..{high}" if high else ">= 1"
        note = f" ({strategy}; k = 0 and k = {end} are shared points, not steps)" if high else f" ({strategy})"
        raise c.fail(f"study.steps = {fmt(steps)} must be strictly increasing integers {'in ' if high else ''}"
                     f"{span}{note}")
    for name, rule in STUDY_RULES.items():
        if name in study:
            c.value(f"study.{name}", study[name], rule)
    if study.get("racu_baseline") == "plain-random" and "random" not in roar_measures:
        raise c.fail("study.racu_baseline = 'plain-random' (set there or by fidelity: official) compares every "
                     "measure with the plain ROAR random chain, which the study lacks: add random to "
                     "study.roar_measures, or set study.racu_baseline: recursive-random")
    return {**study, "roar_measures": roar_measures}


def check_params(params: object, where: str = "params.yaml") -> dict:
    """The whole params mapping, checked (the first problem raises :class:`RoarError`); returns it."""
    c = _Checker(where)
    if params is None:
        raise RoarError(f"{where} is empty; it needs the sections {', '.join(REQUIRED_SECTIONS)} "
                        "(see params.yaml of the project)")
    if not isinstance(params, dict):
        raise RoarError(f"{where} holds {type(params).__name__} {fmt(params)}, not a mapping of sections; "
                        f"allowed sections: {', '.join(SECTIONS)}")
    c.keys("", params, (*SECTIONS, FIDELITY))
    c.required("", params, REQUIRED_SECTIONS, f"; required sections: {', '.join(REQUIRED_SECTIONS)}")
    if FIDELITY in params:
        c.value(FIDELITY, params[FIDELITY], one_of(PRESETS))
    study = check_study(params["study"], where)
    names = known_names()

    prepare = c.mapping("prepare", params["prepare"], "dataset names to prepare settings")
    c.keys("prepare", prepare, names["dataset"])
    prepare_allowed = prepare_keys()
    for dataset, node in prepare.items():
        node = c.mapping(f"prepare.{dataset}", node, "prepare settings", nullable=True)
        c.rules(f"prepare.{dataset}", node, PREPARE_RULES, prepare_allowed)
        offered = dataset_tokens(dataset)
        if "tokens" in node and node["tokens"] not in offered:
            raise c.fail(f"prepare.{dataset}.tokens = {fmt(node['tokens'])}: {dataset} has no {node['tokens']} tokens "
                         f"(the official code's are bAbI's); allowed: {', '.join(offered)}")
    for dataset in study["datasets"]:
        if dataset not in prepare:
            raise c.fail(f"missing key prepare.{dataset} (study.datasets lists {dataset}); add its prepare settings")

    train = c.mapping("train", params["train"], "model names to per-dataset training settings")
    c.keys("train", train, names["model"])
    train_allowed = train_keys()
    for model, per_dataset in train.items():
        per_dataset = c.mapping(f"train.{model}", per_dataset, "dataset names to training settings")
        c.keys(f"train.{model}", per_dataset, names["dataset"])
        for dataset, node in per_dataset.items():
            key = f"train.{model}.{dataset}"
            node = c.mapping(key, node, "training settings", nullable=True)
            c.rules(key, node, TRAIN_RULES, train_allowed)
            problem = attend_problem(model, node.get("attend", ATTEND[0]))
            if problem:
                raise c.fail(f"{key}.attend = {fmt(node['attend'])}: {problem}")
            if MODEL_FAMILIES[model].encoding == "checkpoint" and not node.get("checkpoint"):
                raise c.fail(f"missing key {key}.checkpoint; model {model} needs a HF checkpoint name or a local "
                             "checkpoint folder")
    for model in study["models"]:
        for dataset in study["datasets"]:
            if dataset not in (train.get(model) or {}):
                raise c.fail(f"missing key train.{model}.{dataset} (study.models lists {model} and study.datasets "
                             f"lists {dataset}); add its training settings")

    importance = c.mapping("importance", params["importance"], "batch_size and per-measure settings")
    c.keys("importance", importance, (*IMPORTANCE_RULES, *names["measure"]))
    for name, value in importance.items():
        if name in IMPORTANCE_RULES:
            c.value(f"importance.{name}", value, IMPORTANCE_RULES[name])
            continue
        node = c.mapping(f"importance.{name}", value, f"the {name} options", nullable=True)
        options = MEASURE_SPECS[name].options
        c.rules(f"importance.{name}", node, {**options, NOTE: anything}, (*sorted(options), NOTE))
    # dvc.yaml's chain stages read these as params: DVC stops on a missing one after prepare and k = 0
    # have run, and sees no default of ours, so they are required here.
    for name in IMPORTANCE_RULES:
        if name not in importance:
            raise c.fail(f"missing key importance.{name} (dvc.yaml's chain stages read it as a param); add it, "
                         f"e.g. {name}: {IMPORTANCE_EXAMPLES[name]}")
    for measure in (*study["measures"], *study["roar_measures"]):
        if measure not in importance:
            raise c.fail(f"missing key importance.{measure} (study lists {measure}; dvc.yaml's chain stages read "
                         f"it as a param); add `{measure}: {{}}` under importance for its default options")

    runtime = c.mapping("runtime", params.get("runtime"), "runtime settings", nullable=True)
    c.rules("runtime", runtime, RUNTIME_RULES)
    slurm = c.mapping("runtime.slurm", runtime.get("slurm"), "Slurm job settings", nullable=True)
    c.rules("runtime.slurm", slurm, {**SLURM_RULES, "stages": mapping}, (*SLURM_RULES, "stages"))
    stages = c.mapping("runtime.slurm.stages", slurm.get("stages"), "per-stage-kind settings", nullable=True)
    c.keys("runtime.slurm.stages", stages, SLURM_STAGE_KINDS)
    for kind, node in stages.items():
        node = c.mapping(f"runtime.slurm.stages.{kind}", node, "Slurm job settings", nullable=True)
        c.rules(f"runtime.slurm.stages.{kind}", node, SLURM_RULES, tuple(SLURM_RULES))
    if params.get(FIDELITY, PRESETS[0]) != PRESETS[0]:
        check_study(with_fidelity(params)["study"], where)  # the preset's settings must fit the study too
    return params


def stage_count(study: dict) -> int:
    """The DVC stages of a (checked) study: prepare, both references, the chains, the report (dvc.yaml)."""
    pairs = len(study["datasets"]) * len(study["models"])
    seeds = len(study["seeds"])
    return pairs * (1 + 2 * seeds + (len(study["measures"]) + len(study.get("roar_measures") or [])) * seeds) + 1


def parse_params(text: str, where: str = "params.yaml") -> object:
    """The YAML ``text`` as Python data; invalid YAML or a key given twice raises one line with
    the line number."""
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that refuses a key written twice in one mapping (YAML would keep the last)."""

    def construct_mapping(loader, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise RoarError(f"{where} line {key_node.start_mark.line + 1}: key {fmt(key)} appears twice "
                                    f"in one mapping (first on line {seen[key]}); keep one")
                seen[key] = key_node.start_mark.line + 1
            except TypeError:  # an unhashable key; the SafeLoader reports it below
                pass
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    try:
        return yaml.load(text, Loader=Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise RoarError(f"{where}{line}: invalid YAML ({problem}); fix the syntax there") from error

