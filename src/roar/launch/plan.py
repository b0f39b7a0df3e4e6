"""Cost plan of a study before it runs: what ``roar plan`` prints.

Counts come from params alone (the stage grid of ``dvc.yaml``, as :func:`roar.config.schema.stage_count`
counts it). Seconds are *work units x seconds per unit*, with two units:

- **training**: train-split tokens x epochs (a token is one position of either sequence of an
  example; validation each epoch and the test pass are folded into the measured rate);
- **importance**: tokens of all three splits x model evaluations per example (1 for attention,
  gradient and input x gradient; ``importance.integrated-gradient.samples`` for integrated
  gradients; 0 for random and mutual information, which run no model).

A Recursive ROAR chain trains once and explains once per step; a plain ROAR chain trains once per
step but explains once (it reuses the k = 0 model's importance at every step, :mod:`roar.pipeline.chain`);
the reference stages train once; prepare and report only pay the stage overhead.

Seconds per unit (a :class:`Rate`) come from, in this order: finished ``train`` and ``importance``
runs of the MLflow store for the same dataset, model and architecture (:func:`measured_rates`);
the same model and architecture measured on another dataset (scaled by tokens); a short
calibration on synthetic batches (:mod:`roar.launch.calibration`, ``--calibrate``). Epochs: the mean
number run by measured trainings of the same settings, else the configured ``epochs`` (a maximum
when ``patience`` may stop training early). Every source is printed with the plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from roar.core.errors import RoarError
from roar.launch.local import WAVES  # the pipeline's waves, the report's last
from roar.config.params import section, study_from_params
from roar.config.layout import mode_name
from roar.config.catalog import model_family

SPLITS = ("train", "val", "test")
STAGE_OVERHEAD_S = 10.0  # per stage process: imports and DVC bookkeeping (dvc.yaml: "~5-15 s")
SUBWORDS_PER_WORD = 1.3  # a BPE tokenizer's tokens per word (assumed) when a transformer's data is not prepared
# Approximate sizes of the paper's splits (rows train/val/test) and words per example (both sequences),
# used only when the dataset is not prepared in this workspace. bAbI: words of the generated tasks;
# rows follow prepare (n_train/n_test when generated, else the official 10,000 / 1,000).
APPROX_SIZES: dict[str, tuple[tuple[int, int, int] | None, float]] = {
    "babi-1": (None, 43.5), "babi-2": (None, 99.1), "babi-3": (None, 273.5),
    "sst": ((6_400, 800, 1_800), 19), "snli": ((549_000, 9_800, 9_800), 22),
    "imdb": ((17_200, 4_300, 4_400), 179), "mimic-anemia": ((4_300, 700, 1_200), 2_200),
    "mimic-diabetes": ((8_100, 1_600, 1_700), 1_860), "rotten-tomatoes": ((8_500, 1_050, 1_050), 21),
}
TRANSFORMER_POSITIONS = 512  # longest input of the transformer (RoBERTa-base)
BABI_OFFICIAL = (10_000, 1_000)  # en-10k questions per task: train (validation split off it), test


@dataclass(frozen=True)
class DataSize:
    """Rows per split and mean tokens per example (both sequences) of one prepared dataset."""

    rows: dict[str, int]
    tokens_per_row: float
    source: str

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def train_share(self) -> float:
        return self.rows["train"] / max(self.total_rows, 1)


def data_size(params: dict, dataset: str, model: str, root: Path = Path(".")) -> DataSize:
    """The size of ``dataset`` prepared for ``model``: read from the prepared data when it exists,
    else derived from ``prepare.<dataset>`` and :data:`APPROX_SIZES`."""
    folder = root / "data" / "prepared" / dataset / model
    if all((folder / f"{s}.arrow").is_file() for s in SPLITS):
        return _prepared_size(folder)
    from roar.config.datasets import PrepareConfig

    config = PrepareConfig(**((params.get("prepare") or {}).get(dataset) or {}))
    rows, words = APPROX_SIZES.get(dataset, ((10_000, 1_000, 1_000), 50))
    source = f"approximate size of {dataset} (not prepared here)"
    if rows is None:  # bAbI
        n_train, n_test = (config.n_train, config.n_test) if config.source == "generate" else BABI_OFFICIAL
        n_val = round(config.val_fraction * n_train)
        rows = (n_train - n_val, n_val, n_test)
        source = f"bAbI rows from prepare.{dataset}, words per example of the generated tasks"
    if config.limit:
        rows = tuple(min(r, config.limit) for r in rows)
    tokens = min(float(words), config.max_length)
    if model_family(model).encoding == "checkpoint":  # subword tokens, within the model's positions
        tokens = min(words * SUBWORDS_PER_WORD + 4, config.max_length, TRANSFORMER_POSITIONS)
        source += f", {SUBWORDS_PER_WORD} subwords per word"
    return DataSize(dict(zip(SPLITS, rows)), tokens, source)


def _prepared_size(folder: Path) -> DataSize:
    import pyarrow as pa
    import pyarrow.compute as pc

    rows, tokens = {}, 0
    for split in SPLITS:
        with pa.memory_map(str(folder / f"{split}.arrow")) as source:
            table = pa.ipc.open_file(source).read_all()
        rows[split] = table.num_rows
        tokens += sum(pc.sum(pc.list_value_length(table[c])).as_py() or 0 for c in ("tokens", "tokens2"))
    return DataSize(rows, tokens / max(sum(rows.values()), 1), f"prepared data {folder}")


def supported(measure: str, model: str) -> bool:
    """Whether the chain of ``measure`` runs for ``model`` (else its stage only writes a note)."""
    from roar.config.catalog import check_supported

    try:
        check_supported(measure, model)
    except ValueError:
        return False
    return True


def evals_per_row(measure: str, params: dict, options: dict | None = None) -> int:
    """Model evaluations (forward, or forward and backward) per example of one importance pass, with
    the measure's options from ``params`` (``importance.<measure>``), updated by ``options``."""
    from roar.importance.registry import model_passes

    return model_passes(measure, {**(section(params, "importance").get(measure) or {}), **(options or {})})


def arch_key(train: dict, with_batch: bool) -> tuple:
    """What fixes a model's cost per token: its architecture (and for training, the batch size).
    ``train`` holds train.<model>.<dataset> settings, or an MLflow train run's params (strings)."""
    keys = ("model", "embedding_dim", "hidden", "attention_hidden", "checkpoint") + (("batch_size",) if with_batch else ())
    from roar.config.train_config import TrainConfig

    defaults = TrainConfig()
    values = []
    for key in keys:
        value = train.get(key, getattr(defaults, key))
        if key != "model" and str(train.get("model", "bilstm-attention")) != "bilstm-attention" and key in (
                "embedding_dim", "hidden", "attention_hidden"):
            value = None  # not used by the transformer
        if key == "checkpoint" and str(train.get("model", "bilstm-attention")) == "bilstm-attention":
            value = None
        values.append(None if value in (None, "None") else str(value))
    return tuple(values)


@dataclass
class Stage:
    """One DVC stage of the plan and its work."""

    kind: str
    name: str
    dataset: str = ""
    model: str = ""
    trainings: int = 0
    passes: int = 0  # importance passes over all splits
    train_units: float = 0.0  # train tokens x epochs
    imp_units: dict[str, float] = field(default_factory=dict)  # measure -> tokens x evaluations
    local_s: float | None = 0.0
    compute_s: float | None = 0.0  # local_s without the stage overhead
    measure: str = ""  # chain stages
    seed: int | None = None  # chain and reference stages


@dataclass(frozen=True)
class Rate:
    """Seconds per work unit, and where the number comes from."""

    seconds_per_unit: float
    source: str


@dataclass
class Epochs:
    value: float
    source: str


def plan_stages(params: dict, sizes: dict, epochs: dict) -> list[Stage]:
    """Every stage of the study with its trainings, importance passes and work units.

    ``sizes[(dataset, model)]``: :class:`DataSize`; ``epochs[(dataset, model)]``: :class:`Epochs`.
    """
    study = study_from_params(params)
    steps = len(study.steps)
    stages = [Stage("prepare", f"prepare@{d}-{m}", d, m) for d in study.datasets for m in study.models]
    for d in study.datasets:
        for m in study.models:
            size, n_epochs = sizes[(d, m)], epochs[(d, m)].value
            per_training = size.rows["train"] * size.tokens_per_row * n_epochs
            per_pass = size.total_rows * size.tokens_per_row
            for which in ("train_k0", "train_all_masked"):
                stages += [Stage(which, f"{which}@{d}-{m}-{s}", d, m, 1, 0, per_training, seed=s) for s in study.seeds]
            for measure, recursive in study.chain_modes:
                kind = mode_name(recursive)
                passes = (steps if recursive else 1) if supported(measure, m) else 0
                trainings = steps if supported(measure, m) else 0
                units = passes * per_pass * evals_per_row(measure, params)
                for s in study.seeds:
                    stages.append(Stage(kind, f"{kind}@{d}-{m}-{measure}-{s}", d, m, trainings, passes,
                                        trainings * per_training, {measure: units} if passes else {},
                                        measure=measure, seed=s))
    stages.append(Stage("report", "report"))
    return stages


def planned_epochs(params: dict, dataset: str, model: str, measured: dict) -> Epochs:
    """Epochs per training: measured mean of the same settings, else the configured (maximum)."""
    train = section(params, "train", model, dataset)
    epochs, patience = int(train.get("epochs", 8)), train.get("patience")
    found = measured.get((dataset, model, epochs, patience))
    if found:
        mean = sum(found) / len(found)
        return Epochs(mean, f"measured mean {mean:.1f} of at most {epochs} over {len(found)} trainings")
    if patience:
        return Epochs(float(epochs), f"configured maximum {epochs} (patience {patience}: early stopping may end sooner)")
    return Epochs(float(epochs), f"configured {epochs} (no early stopping)")


def _stage_seconds(stage: Stage, rates: dict) -> float | None:
    """Compute seconds of ``stage`` (without overhead), or None when a rate is missing."""
    total = 0.0
    if stage.train_units:
        rate = rates.get((stage.dataset, stage.model, "train"))
        if rate is None:
            return None
        total += stage.train_units * rate.seconds_per_unit
    for measure, units in stage.imp_units.items():
        if units:
            rate = rates.get((stage.dataset, stage.model, measure))
            if rate is None:
                return None
            total += units * rate.seconds_per_unit
    return total


def resolve_rates(needed: list[tuple], measured: dict, calibrated: dict) -> dict:
    """A rate for each needed ``(dataset, model, what, arch)``: measured on the same dataset, else
    measured on another dataset with the same model and architecture, else calibrated."""
    rates = {}
    for dataset, model, what, arch in needed:
        exact = measured.get((dataset, model, what, arch))
        if exact is not None:
            rates[(dataset, model, what)] = Rate(exact[0] / exact[1], f"measured: {exact[2]}")
            continue
        others = [(d, v) for (d, m, w, a), v in measured.items() if m == model and w == what and a == arch]
        if others:
            seconds, units = sum(v[0] for _, v in others), sum(v[1] for _, v in others)
            where = ", ".join(sorted({d for d, _ in others}))
            runs = sum(v[3] for _, v in others)
            rates[(dataset, model, what)] = Rate(seconds / units, f"measured on {where} ({runs} runs), scaled by tokens")
            continue
        if (dataset, model, what) in calibrated:
            rates[(dataset, model, what)] = calibrated[(dataset, model, what)]
    return rates


def measured_rates(uri: str, params: dict, root: Path = Path(".")) -> tuple[dict, dict, str]:
    """Seconds and work units of the finished ``train`` and ``importance`` runs of the MLflow store
    at ``uri``, pooled per ``(dataset, model, what, arch)`` as ``(seconds, units, description, runs)``;
    the epochs each training ran, per ``(dataset, model, epochs, patience)``; and a one-line summary.

    Rows of a measured dataset come from its importance runs (the ``examples`` metric, all splits)
    in the same experiment; tokens per row and the train share from :func:`data_size`. Plain ROAR
    importance runs are left out (they reuse the k = 0 importance, so most took no time).
    """
    client = _client(uri)
    if client is None:
        return {}, {}, f"no MLflow store at {uri}"
    experiments = [e.experiment_id for e in client.search_experiments()]
    if not experiments:
        return {}, {}, f"no experiments in {uri}"
    found = {kind: client.search_runs(experiments, f"tags.`roar.kind` = '{kind}' and attributes.status = 'FINISHED'",
                                      max_results=50_000) for kind in ("importance", "train")}
    # the train settings of each step (the importance run's sibling), and rows per experiment/dataset/model
    step_train = {r.data.tags.get("mlflow.parentRunId"): r.data.params for r in found["train"]}
    rows: dict[tuple, list[float]] = {}
    for run in found["importance"]:
        tags = run.data.tags
        if "examples" in run.data.metrics:
            rows.setdefault((run.info.experiment_id, tags.get("roar.dataset"), tags.get("roar.model")),
                            []).append(run.data.metrics["examples"])
    sizes: dict[tuple, DataSize] = {}

    def size(dataset: str, model: str) -> DataSize:
        if (dataset, model) not in sizes:
            sizes[(dataset, model)] = data_size(params, dataset, model, root)
        return sizes[(dataset, model)]

    pooled: dict[tuple, list] = {}

    def add(key: tuple, seconds: float, units: float, experiment: str) -> None:
        entry = pooled.setdefault(key, [0.0, 0.0, set(), 0])
        entry[0] += seconds
        entry[1] += units
        entry[2].add(experiment)
        entry[3] += 1

    names = {e.experiment_id: e.name for e in client.search_experiments()}
    for run in found["importance"]:
        tags, metrics = run.data.tags, run.data.metrics
        dataset, model, measure = tags.get("roar.dataset"), tags.get("roar.model"), tags.get("roar.measure")
        train = step_train.get(tags.get("mlflow.parentRunId"))
        if tags.get("roar.recursive") != "true" or train is None or "seconds" not in metrics:
            continue
        # the options this run logged (e.g. integrated-gradient's samples) over those of params
        evals = evals_per_row(measure, params, {k: v for k, v in run.data.params.items() if k != "measure"})
        units = metrics.get("examples", 0) * size(dataset, model).tokens_per_row * evals
        if units > 0:
            add((dataset, model, measure, arch_key(train, False)), metrics["seconds"], units,
                names[run.info.experiment_id])
    epochs_run: dict[tuple, list[int]] = {}
    for run in found["train"]:
        tags, metrics, train = run.data.tags, run.data.metrics, run.data.params
        dataset, model = tags.get("roar.dataset"), tags.get("roar.model")
        if "seconds" not in metrics or not dataset or not model:
            continue
        n_epochs = len(client.get_metric_history(run.info.run_id, "train_loss"))
        if n_epochs == 0:
            continue
        patience = None if train.get("patience") in (None, "None") else int(train["patience"])
        epochs_run.setdefault((dataset, model, int(train.get("epochs", 0)), patience), []).append(n_epochs)
        measured_rows = rows.get((run.info.experiment_id, dataset, model))
        data = size(dataset, model)
        total = sorted(measured_rows)[len(measured_rows) // 2] if measured_rows else data.total_rows
        # the measured data's train split: the planned data's share of its rows (exact when the sizes agree)
        note = "" if total == data.total_rows else " (train share of the planned data)"
        add((dataset, model, "train", arch_key(train, True)), metrics["seconds"],
            total * data.train_share * data.tokens_per_row * n_epochs, names[run.info.experiment_id] + note)
    out = {key: (s, u, f"{n} runs in experiment {', '.join(sorted(exps))}", n)
           for key, (s, u, exps, n) in pooled.items() if u > 0}
    return out, epochs_run, f"{len(found['train'])} train and {len(found['importance'])} importance runs in {uri}"


def _client(uri: str):
    """An MLflow client for ``uri``, or None for a SQLite file that does not exist (not created)."""
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        return None
    import logging

    from mlflow.tracking import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    return MlflowClient(uri)


def parse_speedup(text: str | None, models: list[str]) -> dict[str, float]:
    """``--gpu-speedup``: one factor for every model (``40``) or per model (``bilstm-attention=5,roberta=40``)."""
    if text is None:
        return {}
    from roar.config.catalog import MODELS

    try:
        if "=" not in text:
            return dict.fromkeys(models, _positive(float(text)))
        out = {}
        for part in text.split(","):
            name, _, value = part.partition("=")
            if name.strip() not in MODELS:
                raise RoarError(f"--gpu-speedup: unknown model {name.strip()!r}; allowed: {', '.join(MODELS)}")
            out[name.strip()] = _positive(float(value))
    except ValueError as error:
        if isinstance(error, RoarError):
            raise
        raise RoarError(f"--gpu-speedup {text!r} must be a number > 0 or MODEL=NUMBER,... (e.g. "
                        "bilstm-attention=5,roberta=40)") from error
    missing = [m for m in models if m not in out]
    if missing:
        raise RoarError(f"--gpu-speedup {text!r} gives no factor for model {', '.join(missing)}; add {missing[0]}=X")
    return out


def _positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(value)
    return value


def makespan(durations: list[float], workers: int) -> float:
    """Wall time of independent jobs on ``workers`` (longest first, each to the least loaded worker)."""
    loads = [0.0] * max(1, workers)
    for duration in sorted(durations, reverse=True):
        i = loads.index(min(loads))
        loads[i] += duration
    return max(loads)


@dataclass
class Plan:
    """A study's plan: its stages with seconds, and where the numbers come from."""

    where: str
    study: str
    stages: list[Stage]
    sizes: dict
    epochs: dict
    rates: dict
    store: str
    speedup: dict[str, float]
    jobs: int
    calibration: str = ""

    def gpu_seconds(self, stage: Stage) -> float | None:
        if stage.compute_s is None or not self.speedup:
            return None
        return STAGE_OVERHEAD_S + stage.compute_s / self.speedup.get(stage.model, 1.0)

    def wall(self, gpu: bool) -> float | None:
        total = 0.0
        for wave in WAVES:
            durations = [self.gpu_seconds(s) if gpu else s.local_s for s in self.stages if s.kind in wave]
            if any(d is None for d in durations):
                return None
            total += makespan(durations, self.jobs)
        return total


def build_plan(params: dict, where: str, root: Path = Path("."), uri: str | None = None, jobs: int = 1,
               speedup: str | None = None, calibrate: bool = False) -> Plan:
    """The plan of the (checked) ``params``: counts, measured or calibrated rates, seconds per stage."""
    from roar.tracking.mlflow_tracker import tracking_uri

    if jobs < 1:
        raise RoarError(f"--jobs {jobs} must be an integer >= 1")
    study = study_from_params(params, where)
    factors = parse_speedup(speedup, study.models)
    uri = uri or tracking_uri(root)
    pairs = [(d, m) for d in study.datasets for m in study.models]
    sizes = {p: data_size(params, *p, root) for p in pairs}
    measured, measured_epochs, store = measured_rates(uri, params, root)
    epochs = {p: planned_epochs(params, *p, measured_epochs) for p in pairs}
    stages = plan_stages(params, sizes, epochs)
    needed = []
    for d, m in pairs:
        train = {"model": m, **section(params, "train", m, d)}
        whats = {"train"} | {meas for meas, _ in study.chain_modes if evals_per_row(meas, params) and supported(meas, m)}
        needed += [(d, m, w, arch_key(train, w == "train")) for w in sorted(whats)]
    calibrated, note = {}, ""
    if calibrate:
        from roar.launch.calibration import calibrate as run_calibration

        missing = [n for n in needed if n[:3] not in resolve_rates(needed, measured, {})]
        timings, note = run_calibration(params, missing, sizes)
        calibrated = {key: Rate(*timing) for key, timing in timings.items()}
    rates = resolve_rates(needed, measured, calibrated)
    for stage in stages:
        stage.compute_s = _stage_seconds(stage, rates)
        stage.local_s = None if stage.compute_s is None else STAGE_OVERHEAD_S + stage.compute_s
    return Plan(where, study.name, stages, sizes, epochs, rates, store, factors, jobs, note)


LABEL = 32  # width of the first column


def _hours(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds / 3600:,.2f}"


def format_plan(plan: Plan) -> str:
    """The plan as text: sources, a table per stage kind and per dataset/model, total and wall time."""
    gpu = bool(plan.speedup)
    factor = ", ".join(f"{m} x{f:g}" for m, f in plan.speedup.items())
    head = f"{'':<{LABEL}}{'stages':>8}{'trainings':>11}{'imp. passes':>13}{'local h':>14}" + (f"{'GPU h':>12}" if gpu else "")
    lines = [f"plan of {plan.where} (study {plan.study})", "", ("throughput (seconds per unit; units: train tokens x "
             "epochs, all-split tokens x model evaluations):")]
    for (d, m, w), rate in sorted(plan.rates.items()):
        lines.append(f"  {d}/{m} {w}: {rate.seconds_per_unit:.3g} s, {rate.source}")
    lines.append(f"  store: {plan.store}")
    if plan.calibration:
        lines.append(f"  calibration: {plan.calibration}")
    lines.append("data and epochs per training:")
    for (d, m), size in plan.sizes.items():
        rows = "/".join(f"{size.rows[s]:,}" for s in SPLITS)
        lines.append(f"  {d}/{m}: rows {rows}, {size.tokens_per_row:.1f} tokens per example ({size.source}); "
                     f"epochs {plan.epochs[(d, m)].source}")
    lines += ["", head]

    def row(label: str, stages: list[Stage]) -> str:
        local = None if any(s.local_s is None for s in stages) else sum(s.local_s for s in stages)
        text = (f"{label:<{LABEL}}{len(stages):>8,}{sum(s.trainings for s in stages):>11,}"
                f"{sum(s.passes for s in stages):>13,}{_hours(local):>14}")
        if gpu:
            g = [plan.gpu_seconds(s) for s in stages]
            text += f"{_hours(None if None in g else sum(g)):>12}"
        return text

    for kind in [k for wave in WAVES for k in wave]:
        chosen = [s for s in plan.stages if s.kind == kind]
        if chosen:
            lines.append(row(kind, chosen))
    lines.append(row("total", plan.stages))
    lines += ["", head.replace(" " * LABEL, f"{'by dataset/model':<{LABEL}}", 1)]
    for d, m in plan.sizes:
        lines.append(row(f"{d}/{m}", [s for s in plan.stages if (s.dataset, s.model) == (d, m)]))
    missing = sorted({f"{s.dataset}/{s.model}" for s in plan.stages if s.local_s is None})
    lines.append("")
    if missing:
        lines.append(f"no throughput for {', '.join(missing)}: run earlier stages of it, or add --calibrate")
    lines.append(f"local h: one stage process at the thread count the rates were measured with, plus "
                 f"{STAGE_OVERHEAD_S:g} s per stage")
    if gpu:
        lines.append(f"GPU h: compute divided by the given speed-up ({factor}), plus the stage overhead")
    wall = f"wall time with --jobs {plan.jobs}: local {_hours(plan.wall(False))} h"
    lines.append(wall + (f", on {plan.jobs} GPU(s) {_hours(plan.wall(True))} h" if gpu else ""))
    return "\n".join(lines)
