"""Run the recursion: whole chains of ROAR steps on top of the shared k = 0 model.

A chain is (dataset, model, measure, seed, recursive, strategy). Each step writes its masked
dataset, its model and its result beside the content hashes of what it came from; a step
whose recorded inputs still match is reused, so an interrupted chain resumes where it stopped.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from roar.data.storage import DatasetMeta, Split, read_dataset, vocab_size, write_dataset
from roar.errors import RoarError
from roar.faults import at_step, failpoint
from roar.fileio import content_hash, write_json_atomic
from roar.leakage import leakage
from roar.masking import mask_all, mask_split, masked_fraction
from roar.params import section
from roar.paths import Layout, step_dir
from roar.provenance import chain_code_fingerprint, library_versions
from roar.runner import Runner, chain_tags
from roar.tracking import fingerprint


@dataclass(frozen=True)
class ChainSpec:
    dataset: str
    model: str
    measure: str
    seed: int
    recursive: bool

    @property
    def name(self) -> str:
        mode = "recursive" if self.recursive else "roar"
        return f"{self.dataset}/{self.model}/{self.measure}/{mode}/s{self.seed}"


def roar_step(data: dict[str, Split], model, measure, k: int, strategy: str,
              importance: dict[str, np.ndarray] | None = None, batch_size: int = 128,
              progress: bool = True, meta: DatasetMeta | None = None,
              target: str = "gold") -> tuple[dict[str, Split], dict[str, np.ndarray], float]:
    """One (Recursive) ROAR step: importance on ``data`` by ``model``, then mask up to ``k``.

    Recursive ROAR passes the previous step's masked data and model; plain ROAR passes the
    unmasked data, the k = 0 model, and the importance computed once (``importance``), since
    it does not change with k. Masks accumulate: already-masked tokens count towards k.

    ``meta`` supplies the mask id and the never-masked ids (default: the word vocabulary's);
    ``target`` the class the gradient measures explain (``gold`` or ``predicted``).

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
    masked = {name: mask_split(split, importance[name], k, strategy, **ids, measure=getattr(measure, "name", ""))
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


@dataclass
class _ChainContext:
    """What every step of one chain shares."""

    spec: ChainSpec
    meta: DatasetMeta
    folders: tuple[Path, Path, Path]  # data, models, results of the chain
    recipe: dict  # params, code and library fingerprints of the step key
    tags: dict
    vocab_json: str
    n_vocab: int
    importance_cache: dict = field(default_factory=dict)
    last_masked: dict | None = None  # the previous step's masked splits, when computed in this process
    scorers: dict = field(default_factory=dict)  # loaded models of the no-retrain curves, by content hash


class ChainRunner(Runner):
    """Runs whole chains of (Recursive) ROAR steps in a stage process."""

    def run_chain(self, spec: ChainSpec) -> list[dict]:
        """Run every step of a chain (reusing finished ones whose inputs and code still match) and
        return its result records."""
        from roar.importance import MEASURE_MODULES, check_supported
        from roar.importance.registry import measure_class

        check_supported(spec.measure, spec.model)
        layout, key = self.layout, _chain_key(spec)
        folders = (layout.chain_data(*key), layout.chain_models(*key), layout.chain_results(*key))
        _remove_stale_steps(folders, self.study.steps)
        imp_params = dict(section(self.params, "importance"))
        step_params = {"strategy": self.study.strategy, "importance": dict(imp_params.get(spec.measure) or {}),
                       "batch_size": int(imp_params.get("batch_size", 128)),
                       "train": asdict(self.train_config(spec.model, spec.dataset))}
        # The explained class matters only to the measures that explain one (the gradient family).
        target = str(imp_params.get("target", "gold")) if measure_class(spec.measure).explains_class else "none"
        if target != "none":
            step_params["target"] = target
        # Everything that makes a step's numbers, besides its input data and model.
        recipe = {"params": step_params, "spec": asdict(spec), "libraries": library_versions(),
                  "code": chain_code_fingerprint(MEASURE_MODULES[spec.measure])}
        prepared = layout.prepared(spec.dataset, spec.model)
        k0_model = layout.shared_model(spec.dataset, spec.model, "k0", spec.seed)
        if step_params["train"]["embeddings"]:
            recipe["embeddings"] = _check_vectors(k0_model, spec, step_params["train"]["embeddings"])
        meta, base_splits = read_dataset(prepared)
        base = StepInput(prepared, content_hash(prepared), k0_model, content_hash(k0_model), base_splits)
        tags = {**chain_tags(spec.dataset, spec.model, spec.measure, spec.seed, self.study.strategy, spec.recursive),
                "roar.target": target}
        context = _ChainContext(spec, meta, folders, recipe, tags, (prepared / "vocab.json").read_text(),
                                vocab_size(prepared))
        previous, records = base, []
        last = self.study.steps[-1]
        with self.tracker.run("chain", spec.name, self.study_run, tags,
                              {"steps": self.study.steps, **step_params}) as chain_run:
            for k in self.study.steps:
                # Recursive ROAR explains the previous step's masked data with its model; plain ROAR
                # always explains the unmasked data with the k = 0 model.
                source = previous if spec.recursive else base
                step_key = fingerprint({"k": k, "data": source.data_hash, "model": source.model_hash, **recipe})
                record = _load_done(folders[2] / f"k{k}.json", step_key, self.log)
                if record is not None:
                    step_run = self._log_reused_step(chain_run, context, k, record)
                else:
                    record = self._run_step(chain_run, context, k, step_key, source)
                    step_run = record["step_run_id"]
                this = StepInput(Path(record["data_path"]), record["data_hash"], Path(record["model_path"]),
                                 record["model_hash"], context.last_masked)
                # the k = 100 point of the no-retrain curves is scored with the last step
                end = (base, this) if k == last and self.study.end_k is not None else None
                record = self._score_without_retraining(chain_run, step_run, context, k, record,
                                                        {"k0-model": base, "previous-model": previous}, end)
                records.append(record)
                previous = this
                context.last_masked = None
            self.tracker.log_curve(chain_run, records, k0_model)
        return records

    def _score_without_retraining(self, chain_run: str, step_run: str, ctx: _ChainContext, k: int, record: dict,
                                  models: dict[str, StepInput], end: tuple[StepInput, StepInput] | None) -> dict:
        """Add the no-retrain curves to a step record: its masked test split scored by the k = 0 model and by
        the previous step's model (``models``), and with ``end`` = (k = 0 model, this step's model) the
        all-masked test split too. Entries already in the record are kept only when made from the same
        data and model hashes (a record of older code, or whose previous step was retrained, is completed);
        the record is rewritten when anything was added. Logs the values on the step and chain runs."""
        data = ctx.last_masked["test"] if ctx.last_masked else None
        scores = dict(record.get(NO_RETRAIN) or {})
        changed = False
        for curve, source in models.items():
            if not _current(scores.get(curve), record["data_hash"], source.model_hash):
                if data is None:
                    data = read_dataset(Path(record["data_path"]))[1]["test"]
                scores[curve] = self._score(ctx, source, data, record["data_hash"])
                changed = True
        metrics = {f"{_prefix(c)}_{ctx.meta.metric}": e["value"] for c, e in scores.items()}
        steps = {k: metrics}
        if end is not None:
            base, this = end
            end_scores = dict(record.get(NO_RETRAIN_END) or {})
            if end_scores.get("k") != self.study.end_k:
                end_scores = {"k": self.study.end_k}
            all_masked = None
            for curve, source in (("k0-model", base), ("previous-model", this)):
                if not _current(end_scores.get(curve), base.data_hash, source.model_hash):
                    if all_masked is None:
                        test = base.splits["test"] if base.splits else read_dataset(base.data_dir)[1]["test"]
                        all_masked = mask_all(test, ctx.meta.mask_id, ctx.meta.unmaskable_ids)
                    end_scores[curve] = self._score(ctx, source, all_masked, base.data_hash)
                    changed = True
            steps[self.study.end_k] = {f"{_prefix(c)}_{ctx.meta.metric}": end_scores[c]["value"]
                                       for c in ("k0-model", "previous-model")}
            record = {**record, NO_RETRAIN_END: end_scores}
        record = {**record, NO_RETRAIN: scores}
        if changed:
            write_json_atomic(ctx.folders[2] / f"k{k}.json", record)
        self.tracker.log_metrics(step_run, {**metrics, **{f"{_prefix(c)}_seconds": e["seconds"]
                                                          for c, e in scores.items()}})
        for step, values in steps.items():
            self.tracker.log_metrics(chain_run, values, step)
        return record

    def _score(self, ctx: _ChainContext, model: StepInput, split: Split, data_hash: str) -> dict:
        """The test metric of the model in ``model`` on ``split`` (made from the data ``data_hash``), with the
        seconds it took (model load included, as a standalone scoring would pay it)."""
        from roar.training import load_model, score_split

        start = time.perf_counter()
        loaded = ctx.scorers.pop(model.model_hash, None) or load_model(model.model_dir).to(self.device)
        ctx.scorers[model.model_hash] = loaded  # most recently used last; keep the k = 0 model and one other
        while len(ctx.scorers) > 2:
            ctx.scorers.pop(next(iter(ctx.scorers)))
        value = score_split(loaded, split, ctx.meta.metric)
        return {"value": value, "seconds": time.perf_counter() - start, "data_hash": data_hash,
                "model_hash": model.model_hash}

    def _run_step(self, chain_run: str, ctx: _ChainContext, k: int, step_key: str, source: StepInput) -> dict:
        """Importance of ``source`` (data and model), mask up to k, write the data, train and save a
        fresh model, write the step record; returns the record."""
        from roar.importance.registry import make_measure
        from roar.training import load_model

        spec = ctx.spec
        at_step(k)  # names the step for the fault points (roar.faults)
        splits = source.splits if source.splits is not None else read_dataset(source.data_dir)[1]
        step_tags = {**ctx.tags, "roar.k": k, "roar.input_data_hash": source.data_hash,
                     "roar.input_model_hash": source.model_hash}
        measure_params = ctx.recipe["params"]["importance"]
        with self.tracker.run("step", f"k={k}", chain_run, step_tags, {"k": k}) as step_run:
            with self.tracker.run("importance", f"{spec.measure} k={k}", step_run, step_tags) as imp_run:
                self.tracker.log_dataset(imp_run, spec.dataset, source.data_dir, source.data_hash, "importance")
                # (importance, share of predicted == gold per split) of inputs already explained
                cached, explained = ctx.importance_cache.get((source.data_hash, source.model_hash), (None, {}))
                measure = model = None
                if cached is None:
                    measure = make_measure(spec.measure, seed=spec.seed, train_split=splits["train"],
                                           vocab_size=ctx.n_vocab, n_classes=len(ctx.meta.classes),
                                           ig_samples=int(measure_params.get("samples", 50)),
                                           ig_max_rows=measure_params.get("max_rows"))
                    model = load_model(source.model_dir).to(self.device) if measure.needs_model else None
                target = ctx.recipe["params"].get("target", "gold")
                masked, importance, seconds = roar_step(splits, model, measure, k, self.study.strategy, cached,
                                                        ctx.recipe["params"]["batch_size"], self.progress, ctx.meta,
                                                        target)
                if model is not None and target == "predicted":
                    from roar.importance.base import prediction_agreement

                    explained = {f"predicted_is_gold_{name}": prediction_agreement(model, split)
                                 for name, split in splits.items()}
                if not spec.recursive:  # plain ROAR explains the same inputs at every step
                    ctx.importance_cache[(source.data_hash, source.model_hash)] = (importance, explained)
                n_examples = sum(len(split) for split in masked.values())
                self.tracker.log_params(imp_run, {"measure": spec.measure, **measure_params})
                self.tracker.log_metrics(imp_run, {"seconds": seconds, "examples": n_examples,
                                                   "examples_per_second": n_examples / max(seconds, 1e-9),
                                                   **explained})
            out_data, out_model = step_dir(ctx.folders[0], k), step_dir(ctx.folders[1], k)
            write_dataset(out_data, ctx.meta, ctx.vocab_json, masked)
            failpoint("data-written")
            data_hash = content_hash(out_data)
            leak = leakage(masked, ctx.meta, json.loads(ctx.vocab_json), spec.seed)
            self.tracker.log_dataset(step_run, f"{spec.dataset}-k{k}", out_data, data_hash, "train")
            point, model_hash = self._train_and_save(step_run, {**step_tags, "roar.data_hash": data_hash}, ctx.meta,
                                                     out_data, masked, spec.model, spec.seed, out_model)
            failpoint("model-written")
            self.tracker.log_metrics(step_run, {point["metric"]: point["value"], "masked_fraction": masked_fraction(
                masked["train"], ctx.meta.mask_id, ctx.meta.unmaskable_ids), **leak})
        record = {"dataset": spec.dataset, "model": spec.model, "measure": spec.measure, "recursive": spec.recursive,
                  "strategy": self.study.strategy, "seed": spec.seed, "k": k, "target": ctx.tags["roar.target"], **point,
                  "leakage": leak, **explained, "importance_seconds": seconds,
                  "data_hash": data_hash, "model_hash": model_hash, "input_data_hash": source.data_hash,
                  "input_model_hash": source.model_hash, "data_path": str(out_data), "model_path": str(out_model),
                  "step_key": step_key, "code_fingerprint": ctx.recipe["code"], "libraries": ctx.recipe["libraries"],
                  "chain_run_id": chain_run, "step_run_id": step_run, "importance_run_id": imp_run,
                  "study_run_id": self.study_run, "git_commit": self.tracker.commit}
        write_json_atomic(ctx.folders[2] / f"k{k}.json", record)
        ctx.last_masked = masked
        at_step(None)
        return record

    def _log_reused_step(self, chain_run: str, ctx: _ChainContext, k: int, record: dict) -> str:
        """A step run for a reused step: marked, linked to the run that computed it, same metrics."""
        tags = {**ctx.tags, "roar.k": k, "roar.reused": "true", "roar.reused_from": record.get("step_run_id", ""),
                "roar.data_hash": record["data_hash"], "roar.model_hash": record["model_hash"],
                "roar.input_data_hash": record["input_data_hash"], "roar.input_model_hash": record["input_model_hash"]}
        with self.tracker.run("step", f"k={k} (reused)", chain_run, tags, {"k": k}) as step_run:
            self.tracker.log_metrics(step_run, {record["metric"]: record["value"], **record.get("leakage", {})})
        return step_run

    def log(self, message: str) -> None:
        print(f"[roar] {message}", file=sys.stderr)


NO_RETRAIN = "no_retrain"  # record key: {curve: {value, seconds, data_hash, model_hash}} at the step's k
NO_RETRAIN_END = "no_retrain_end"  # on the last step's record: the same at k = end_k (all masked), with "k"


def _prefix(curve: str) -> str:
    """``k0-model`` -> ``k0_model``: the MLflow metric prefix of a no-retrain curve."""
    return curve.replace("-", "_")


def _current(entry: dict | None, data_hash: str, model_hash: str) -> bool:
    """Whether a stored no-retrain score was made from this data and this model."""
    return bool(entry) and entry.get("data_hash") == data_hash and entry.get("model_hash") == model_hash


def write_unsupported(layout: Layout, spec: ChainSpec, reason: str) -> None:
    """Mark a chain whose measure is undefined for its model (e.g. attention for a transformer):
    its output folders hold only a note, and the report skips it. A study's grid crosses every
    model with every measure, so such chains exist whenever both model families are studied."""
    for folder in (layout.chain_data(*_chain_key(spec)), layout.chain_models(*_chain_key(spec)),
                   layout.chain_results(*_chain_key(spec))):
        if folder.is_dir():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / "UNSUPPORTED.txt").write_text(reason + "\n")


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


def _load_done(path: Path, step_key: str, log) -> dict | None:
    """The record of a finished step made by the same inputs, params, code and libraries, whose
    data and model on disk are still the ones it recorded; else None (the step is recomputed)."""
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except ValueError:
        log(f"{path}: unreadable step record; recomputing the step")
        return None
    if record.get("step_key") != step_key:
        return None  # made by other inputs, params, code or libraries
    for kind in ("data", "model"):
        folder = Path(record[f"{kind}_path"])
        found = content_hash(folder) if folder.is_dir() else "missing"
        if found != record[f"{kind}_hash"]:
            log(f"{folder}: content hash {found[:12]} differs from the step record's {record[f'{kind}_hash'][:12]}; "
                "recomputing the step")
            return None
    return record


def _remove_stale_steps(folders: tuple[Path, ...], steps: list[int]) -> None:
    """Drop step outputs of ks no longer in the study (outputs persist between DVC runs)."""
    keep = {f"k{k}" for k in steps} | {f"k{k}.json" for k in steps}
    for folder in folders:
        if folder.is_dir():
            for child in folder.iterdir():
                if child.name not in keep:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
