"""Run the recursion: whole chains of ROAR steps on top of the shared k = 0 model.

A chain is (dataset, model, measure, seed, recursive, strategy). Each step writes its masked
dataset, its model and its result beside the content hashes of what it came from; a step
whose recorded inputs still match is reused, so an interrupted chain resumes where it stopped.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from roar.data.storage import (
    DatasetMeta,
    Split,
    read_dataset,
    vocab_size,
    write_dataset,
)
from roar.core.errors import RoarError
from roar.core.faults import at_step, failpoint
from roar.core.fileio import content_hash, fingerprint
from roar.method.leakage import leakage
from roar.method.masking import mask_all, mask_split, masked_fraction
from roar.config.catalog import MASKING_COUNTS, check_supported, measure_spec
from roar.config.params import section
from roar.config.layout import Layout, mode_name, project_root
from roar.pipeline.deadline import NO_DEADLINE, StepDeadline
from roar.pipeline.provenance import chain_code_fingerprint, equivalent_fingerprints, library_versions, read_provenance
from roar.tracking.protocol import log_curve
from roar.pipeline.runner import Runner, chain_tags
from roar.pipeline.step_record import EXPLAINED_PREFIX, CurveScore, RunFacts, StepRecord
from roar.pipeline.step_store import StepStore


@dataclass(frozen=True)
class ChainSpec:
    dataset: str
    model: str
    measure: str
    seed: int
    recursive: bool

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.model}/{self.measure}/{mode_name(self.recursive)}/s{self.seed}"


def roar_step(data: dict[str, Split], model, measure, k: int, strategy: str,
              importance: dict[str, np.ndarray] | None = None, batch_size: int = 128,
              progress: bool = True, meta: DatasetMeta | None = None, target: str = "gold",
              masking_count: str = MASKING_COUNTS[0]) -> tuple[dict[str, Split], dict[str, np.ndarray], float]:
    """One (Recursive) ROAR step: importance on ``data`` by ``model``, then mask up to ``k``.

    Recursive ROAR passes the previous step's masked data and model; plain ROAR passes the
    unmasked data, the k = 0 model, and the importance computed once (``importance``), since
    it does not change with k. Masks accumulate: already-masked tokens count towards k.

    ``meta`` supplies the mask id and the never-masked ids (default: the word vocabulary's);
    ``target`` the class the gradient measures explain (``gold`` or ``predicted``); ``masking_count`` how
    many tokens k masks (:data:`roar.method.masking.COUNT_RULES`).

    Returns:
        The masked splits, the importance used (``{split: [N, L]}``) and the seconds spent on it.
    """
    from roar.importance.base import compute_importance

    start = time.perf_counter()
    if importance is None:
        importance = {}
        for name, split in data.items():
            importance[name] = compute_importance(measure, model, split, name, batch_size, progress, target)
            failpoint("importance")
    seconds = time.perf_counter() - start
    ids = {} if meta is None else {"mask_id": meta.mask_id, "unmaskable_ids": meta.unmaskable_ids}
    masked = {name: mask_split(split, importance[name], k, strategy, **ids, measure=getattr(measure, "name", ""),
                               masking_count=masking_count)
              for name, split in data.items()}
    return masked, importance, seconds


@dataclass
class StepInput:
    """What a step explains: a dataset folder and a model folder, with their content hashes
    (``splits``: the folder's data when already in memory)."""

    data_dir: Path
    data_hash: str
    model_dir: Path
    model_hash: str
    splits: dict[str, Split] | None = None

    @classmethod
    def output_of(cls, record: StepRecord, splits: dict[str, Split] | None = None) -> StepInput:
        """The masked data and model a step made (the next step's input in Recursive ROAR)."""
        return cls(Path(record.data_path), record.data_hash, Path(record.model_path), record.model_hash, splits)

    def test_split(self) -> Split:
        return self.splits["test"] if self.splits is not None else read_dataset(self.data_dir)[1]["test"]


@dataclass
class _ChainContext:
    """What every step of one chain shares."""

    spec: ChainSpec
    meta: DatasetMeta
    store: StepStore
    base: StepInput  # the unmasked data and the k = 0 model
    recipe: dict  # params, code and library fingerprints of the step key
    code_equivalents: set[str]  # recipe["code"] and the earlier code verified to compute the same
    tags: dict
    vocab_json: str
    n_vocab: int
    importance_cache: dict = field(default_factory=dict)
    scorers: dict = field(default_factory=dict)  # loaded models of the no-retrain curves, by content hash

    def step_key(self, k: int, source: StepInput, code: str | None = None) -> str:
        """Everything that makes step k's numbers: its input data and model, params, code, libraries."""
        recipe = self.recipe if code is None else {**self.recipe, "code": code}
        return fingerprint({"k": k, "data": source.data_hash, "model": source.model_hash, **recipe})

    def reusable_keys(self, k: int, source: StepInput) -> set[str]:
        """Step keys a finished step k may carry to be reused: made by this code or by code that
        ``roar provenance verify`` showed to compute the same."""
        return {self.step_key(k, source, code) for code in self.code_equivalents}


@dataclass(frozen=True)
class _Masked:
    """What a step's importance run gives: the masked splits, the share of examples whose predicted
    class is the gold one per split (target ``predicted``), the importance seconds and the run."""

    splits: dict[str, Split]
    explained: dict[str, float]
    seconds: float
    run_id: str


def _code_equivalents(code: str, root: Path, model: str) -> set[str]:
    """``code`` and the fingerprints that ``provenance.yaml`` records as verified to compute the same for
    the model family ``model``."""
    return equivalent_fingerprints(code, read_provenance(project_root(root)).get("verified") or [], model)


class ChainRunner(Runner):
    """Runs whole chains of (Recursive) ROAR steps in a stage process."""

    def run_chain(self, spec: ChainSpec, deadline: StepDeadline = NO_DEADLINE) -> list[StepRecord]:
        """Run every step of a chain (reusing finished ones whose inputs and code still match) and
        return its step records; before a step it computes, stop when ``deadline`` says it would not end in time
        (:class:`~roar.pipeline.deadline.StoppedAtDeadline`: the finished steps are kept)."""
        ctx = self._chain_context(spec)
        previous, records = ctx.base, []
        with self.tracker.run("chain", spec.name, self.study_run, ctx.tags,
                              {"steps": self.study.steps, **ctx.recipe["params"]}) as chain_run:
            for k in self.study.steps:
                record, previous = self._chain_step(chain_run, ctx, k, previous, deadline)
                records.append(record)
            log_curve(self.tracker, chain_run, [(r.k, r.metric, r.value) for r in records], ctx.base.model_dir)
        return records

    def _chain_context(self, spec: ChainSpec) -> _ChainContext:
        """Check the chain can run, drop steps of ks no longer studied, and gather what its steps share."""
        check_supported(spec.measure, spec.model)
        store = chain_store(self.layout, spec)
        store.remove_stale(self.study.steps)
        step_params = self._step_params(spec)
        code = chain_code_fingerprint(measure_spec(spec.measure).module)
        recipe = {"params": step_params, "spec": asdict(spec), "libraries": library_versions(), "code": code}
        prepared = self.layout.prepared(spec.dataset, spec.model)
        k0_model = self.layout.shared_model(spec.dataset, spec.model, "k0", spec.seed)
        if step_params["train"]["embeddings"]:
            recipe["embeddings"] = _check_vectors(k0_model, spec, step_params["train"]["embeddings"])
        meta, base_splits = read_dataset(prepared)
        base = StepInput(prepared, content_hash(prepared), k0_model, content_hash(k0_model), base_splits)
        tags = {**chain_tags(spec.dataset, spec.model, spec.measure, spec.seed, self.study.strategy, spec.recursive),
                "roar.target": step_params.get("target", "none")}
        return _ChainContext(spec, meta, store, base, recipe, _code_equivalents(code, self.layout.root, spec.model),
                             tags, (prepared / "vocab.json").read_text(), vocab_size(prepared))

    def _step_params(self, spec: ChainSpec) -> dict:
        """The params that make a step's numbers (and that the chain run logs)."""
        imp_params = dict(section(self.params, "importance"))
        step_params = {"strategy": self.study.strategy, "importance": dict(imp_params.get(spec.measure) or {}),
                       "batch_size": int(imp_params.get("batch_size", 128)),
                       "train": self.train_config(spec.model, spec.dataset).params()}
        # The explained class matters only to the measures that explain one (the gradient family).
        if measure_spec(spec.measure).explains_class:
            step_params["target"] = str(imp_params.get("target", "gold"))
        # Only when it is not roar's count: the step keys of studies that do not set it stay as they were.
        if self.study.masking_count != MASKING_COUNTS[0]:
            step_params["masking_count"] = self.study.masking_count
        return step_params

    def _chain_step(self, chain_run: str, ctx: _ChainContext, k: int, previous: StepInput,
                    deadline: StepDeadline) -> tuple[StepRecord, StepInput]:
        """Step k: reused when finished with the same step key, else computed; then its no-retrain points.
        Returns its record and its output (masked data and model)."""
        # Recursive ROAR explains the previous step's masked data with its model; plain ROAR
        # always explains the unmasked data with the k = 0 model.
        source = previous if ctx.spec.recursive else ctx.base
        step_key = ctx.step_key(k, source)
        record = ctx.store.load_done(k, ctx.reusable_keys(k, source), self.log)
        if record is not None:
            this = StepInput.output_of(record)
            step_run = self._log_reused_step(chain_run, ctx, record)
        else:
            with deadline.step(k):
                record, masked = self._run_step(chain_run, ctx, k, step_key, source)
            this = StepInput.output_of(record, masked)
            step_run = record.run.step_run_id
        record = self._score_without_retraining(chain_run, step_run, ctx, record, previous, this)
        return record, this

    def _run_step(self, chain_run: str, ctx: _ChainContext, k: int, step_key: str,
                  source: StepInput) -> tuple[StepRecord, dict[str, Split]]:
        """Importance of ``source`` (data and model), mask up to k, write the data, train and save a
        fresh model, write the step record; returns the record and the masked splits."""
        spec = ctx.spec
        at_step(k)  # names the step for the fault points (roar.core.faults)
        splits = source.splits if source.splits is not None else read_dataset(source.data_dir)[1]
        step_tags = {**ctx.tags, "roar.k": k, "roar.input_data_hash": source.data_hash,
                     "roar.input_model_hash": source.model_hash}
        with self.tracker.run("step", f"k={k}", chain_run, step_tags, {"k": k}) as step_run:
            masked = self._mask(step_run, ctx, k, source, splits, step_tags)
            out_data, out_model = ctx.store.data_dir(k), ctx.store.model_dir(k)
            write_dataset(out_data, ctx.meta, ctx.vocab_json, masked.splits)
            failpoint("data-written")
            data_hash = content_hash(out_data)
            leak = leakage(masked.splits, ctx.meta, json.loads(ctx.vocab_json), spec.seed)
            self.tracker.log_dataset(step_run, f"{spec.dataset}-k{k}", out_data, data_hash, "train")
            point, model_hash = self._train_and_save(step_run, {**step_tags, "roar.data_hash": data_hash}, ctx.meta,
                                                     out_data, masked.splits, spec.model, spec.seed, out_model)
            failpoint("model-written")
            self.tracker.log_metrics(step_run, {point.metric: point.value, "masked_fraction": masked_fraction(
                masked.splits["train"], ctx.meta.mask_id, ctx.meta.unmaskable_ids), **leak})
        record = StepRecord(
            spec.dataset, spec.model, spec.measure, spec.recursive, self.study.strategy, spec.seed, k, **point.result,
            leakage=leak, target=ctx.tags["roar.target"], masking_count=ctx.recipe["params"].get("masking_count"),
            explained=masked.explained, data_hash=data_hash,
            model_hash=model_hash, input_data_hash=source.data_hash, input_model_hash=source.model_hash,
            data_path=str(out_data), model_path=str(out_model), step_key=step_key, code_fingerprint=ctx.recipe["code"],
            libraries=ctx.recipe["libraries"],
            run=RunFacts(self.study_run, chain_run, step_run, point.run_id, masked.run_id, self.tracker.commit,
                         point.seconds, masked.seconds))
        record = ctx.store.as_committed(record, ctx.reusable_keys(k, source))
        ctx.store.write(record)
        at_step(None)
        return record, masked.splits

    def _mask(self, step_run: str, ctx: _ChainContext, k: int, source: StepInput, splits: dict[str, Split],
              tags: dict) -> _Masked:
        """A step's ``importance`` run: importance of ``splits`` by ``source``'s model (plain ROAR: computed
        once per chain), then the splits masked up to k."""
        from roar.importance.base import MeasureContext
        from roar.importance.registry import make_measure
        from roar.models.training import load_model

        spec, measure_params = ctx.spec, ctx.recipe["params"]["importance"]
        target = ctx.recipe["params"].get("target", "gold")
        with self.tracker.run("importance", f"{spec.measure} k={k}", step_run, tags) as imp_run:
            self.tracker.log_dataset(imp_run, spec.dataset, source.data_dir, source.data_hash, "importance")
            # (importance, share of predicted == gold per split) of inputs already explained
            cached, explained = ctx.importance_cache.get((source.data_hash, source.model_hash), (None, {}))
            measure = model = None
            if cached is None:
                measure = make_measure(spec.measure, measure_params,
                                       MeasureContext(spec.seed, splits["train"], ctx.n_vocab, len(ctx.meta.classes),
                                                      ctx.meta.mask_id, tuple(ctx.meta.unmaskable_ids)))
                if measure_spec(spec.measure).needs_model:
                    model = load_model(source.model_dir).to(self.device)
            masked, importance, seconds = roar_step(splits, model, measure, k, self.study.strategy, cached,
                                                    ctx.recipe["params"]["batch_size"], self.progress, ctx.meta,
                                                    target, self.study.masking_count)
            if model is not None and target == "predicted":
                from roar.importance.base import prediction_agreement

                explained = {name: prediction_agreement(model, split) for name, split in splits.items()}
            if not spec.recursive:  # plain ROAR explains the same inputs at every step
                ctx.importance_cache[(source.data_hash, source.model_hash)] = (importance, explained)
            n_examples = sum(len(split) for split in masked.values())
            self.tracker.log_params(imp_run, {"measure": spec.measure, **measure_params})
            self.tracker.log_metrics(imp_run, {"seconds": seconds, "examples": n_examples,
                                               "examples_per_second": n_examples / max(seconds, 1e-9),
                                               **{EXPLAINED_PREFIX + name: v for name, v in explained.items()}})
        return _Masked(masked, explained, seconds, imp_run)

    def _score_without_retraining(self, chain_run: str, step_run: str, ctx: _ChainContext, record: StepRecord,
                                  previous: StepInput, this: StepInput) -> StepRecord:
        """Add the no-retrain curves to a step record: its masked test split scored by the k = 0 model and by
        the previous step's model, and on the last step (quantile studies) the all-masked test split scored
        by the k = 0 model and by this step's model (the k = end_k point). Scores already in the record are
        kept only when made from the same data and model hashes (a record of older code, or whose previous
        step was retrained, is completed); the record is rewritten when anything was added. Logs the values
        on the step and chain runs."""
        scores, seconds = self._curve_scores(ctx, {"k0-model": ctx.base, "previous-model": previous},
                                             record.no_retrain, this.data_hash, this.test_split)
        record = replace(record, no_retrain=scores).with_run(scoring_seconds={**record.run.scoring_seconds, **seconds})
        points, changed = {record.k: scores}, bool(seconds)
        end_k = self.study.end_k
        if record.k == self.study.steps[-1] and end_k is not None:
            base = ctx.base
            end, end_seconds = self._curve_scores(
                ctx, {"k0-model": base, "previous-model": this}, record.end_scores(end_k), base.data_hash,
                lambda: mask_all(base.test_split(), ctx.meta.mask_id, ctx.meta.unmaskable_ids))
            record = replace(record, no_retrain_end_k=end_k, no_retrain_end=end).with_run(
                end_scoring_seconds={**record.run.end_scoring_seconds, **end_seconds})
            points[end_k] = end
            changed = changed or bool(end_seconds)
        if changed:
            ctx.store.write(record)
        metric = ctx.meta.metric
        self.tracker.log_metrics(step_run, {**{f"{_prefix(c)}_{metric}": s.value for c, s in scores.items()},
                                            **{f"{_prefix(c)}_seconds": s for c, s in seconds.items()}})
        for k, values in points.items():
            self.tracker.log_metrics(chain_run, {f"{_prefix(c)}_{metric}": s.value for c, s in values.items()}, k)
        return record

    def _curve_scores(self, ctx: _ChainContext, models: dict[str, StepInput], scores: dict[str, CurveScore] | None,
                      data_hash: str, split: Callable[[], Split]) -> tuple[dict[str, CurveScore], dict[str, float]]:
        """``scores`` with each curve of ``models`` scored on ``split()`` (made from the data ``data_hash``)
        unless its score was made from that data and model already; and the seconds of the curves scored."""
        scores, test, seconds = dict(scores or {}), None, {}
        for curve, source in models.items():
            if curve not in scores or not scores[curve].made_from(data_hash, source.model_hash):
                test = split() if test is None else test
                scores[curve], seconds[curve] = self._score(ctx, source, test, data_hash)
        return scores, seconds

    def _score(self, ctx: _ChainContext, model: StepInput, split: Split, data_hash: str) -> tuple[CurveScore, float]:
        """The test metric of the model in ``model`` on ``split`` (made from the data ``data_hash``), and the
        seconds it took (model load included, as a standalone scoring would pay it)."""
        from roar.models.training import load_model, score_split

        start = time.perf_counter()
        loaded = ctx.scorers.pop(model.model_hash, None) or load_model(model.model_dir).to(self.device)
        ctx.scorers[model.model_hash] = loaded  # most recently used last; keep the k = 0 model and one other
        while len(ctx.scorers) > 2:
            ctx.scorers.pop(next(iter(ctx.scorers)))
        value = score_split(loaded, split, ctx.meta.metric)
        return CurveScore(value, data_hash, model.model_hash), time.perf_counter() - start

    def _log_reused_step(self, chain_run: str, ctx: _ChainContext, record: StepRecord) -> str:
        """A step run for a reused step: marked, linked to the run that computed it, same metrics."""
        tags = {**ctx.tags, "roar.k": record.k, "roar.reused": "true", "roar.reused_from": record.run.step_run_id,
                "roar.data_hash": record.data_hash, "roar.model_hash": record.model_hash,
                "roar.input_data_hash": record.input_data_hash, "roar.input_model_hash": record.input_model_hash}
        with self.tracker.run("step", f"k={record.k} (reused)", chain_run, tags, {"k": record.k}) as step_run:
            self.tracker.log_metrics(step_run, {record.metric: record.value, **(record.leakage or {})})
        return step_run

    def log(self, message: str) -> None:
        print(f"[roar] {message}", file=sys.stderr)


def _prefix(curve: str) -> str:
    """``k0-model`` -> ``k0_model``: the MLflow metric prefix of a no-retrain curve."""
    return curve.replace("-", "_")


def chain_store(layout: Layout, spec: ChainSpec) -> StepStore:
    """The output folders of a chain."""
    key = _chain_key(spec)
    return StepStore(layout.chain_data(*key), layout.chain_models(*key), layout.chain_results(*key))


def write_unsupported(layout: Layout, spec: ChainSpec, reason: str) -> None:
    """Mark a chain whose measure is undefined for its model (e.g. attention for a transformer):
    its output folders hold only a note, and the report skips it. A study's grid crosses every
    model with every measure, so such chains exist whenever both model families are studied."""
    chain_store(layout, spec).mark_unsupported(reason)


def _chain_key(spec: ChainSpec) -> tuple:
    return spec.dataset, spec.model, spec.measure, spec.recursive, spec.seed


def _check_vectors(k0_model: Path, spec: ChainSpec, source: str) -> str:
    """The digest of the word vectors ``source`` names, after checking that the k = 0 model was
    trained with the same vectors (a file path in params cannot be a DVC dependency, so a file
    changed in place is caught here)."""
    from roar.data.embeddings import vectors_digest

    current = vectors_digest(source)
    result = k0_model / "result.json"
    used = json.loads(result.read_text()).get("embeddings_digest") if result.is_file() else None
    if used != current:
        raise RoarError(f"{k0_model} was trained with other word vectors ({used}) than "
                        f"train.{spec.model}.{spec.dataset}.embeddings = {source!r} now holds ({current}); retrain it: "
                        f"dvc repro --force train_k0@{spec.dataset}-{spec.model}-{spec.seed}")
    return current
