"""Run the recursion: shared reference models (k = 0, all masked) and whole chains of ROAR steps.

A chain is (dataset, model, measure, seed, recursive, strategy). Each step writes its masked
dataset, its model and its result beside the content hashes of what it came from; a step
whose recorded inputs still match is reused, so an interrupted chain resumes where it stopped.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from roar.data.storage import DatasetMeta, Split, read_dataset, vocab_size, write_dataset
from roar.fileio import content_hash, write_json_atomic
from roar.masking import mask_split, masked_fraction
from roar.params import Study, section, study_from_params
from roar.paths import Layout, step_dir
from roar.tracking import Tracker, fingerprint


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
              progress: bool = True, meta: DatasetMeta | None = None) -> tuple[dict[str, Split], dict[str, np.ndarray], float]:
    """One (Recursive) ROAR step: importance on ``data`` by ``model``, then mask up to ``k``.

    Recursive ROAR passes the previous step's masked data and model; plain ROAR passes the
    unmasked data, the k = 0 model, and the importance computed once (``importance``), since
    it does not change with k. Masks accumulate: already-masked tokens count towards k.

    ``meta`` supplies the mask id and the never-masked ids (default: the word vocabulary's).

    Returns:
        The masked splits, the importance used (``{split: [N, L]}``) and the seconds spent on it.
    """
    from roar.importance.base import compute_importance

    start = time.perf_counter()
    if importance is None:
        importance = {name: compute_importance(measure, model, split, name, batch_size, progress)
                      for name, split in data.items()}
    seconds = time.perf_counter() - start
    ids = {} if meta is None else {"mask_id": meta.mask_id, "unmaskable_ids": meta.unmaskable_ids}
    return {name: mask_split(split, importance[name], k, strategy, **ids) for name, split in data.items()}, importance, seconds


def _chain_tags(dataset: str, model: str, measure: str, seed: int, strategy: str,
                recursive: bool | None = None) -> dict:
    return {"roar.dataset": dataset, "roar.model": model, "roar.measure": measure, "roar.seed": seed,
            "roar.strategy": strategy, "roar.recursive": "" if recursive is None else str(recursive).lower()}


class Runner:
    """Everything a stage process needs: params, layout, tracker, and the prepared data."""

    def __init__(self, params: dict, root: Path = Path("."), progress: bool = True):
        self.params = params
        self.study: Study = study_from_params(params)
        self.layout = Layout(root)
        self.progress = progress
        runtime = params.get("runtime") or {}
        if runtime.get("threads"):
            import torch

            torch.set_num_threads(int(runtime["threads"]))
        self.tracker = Tracker(self.study.name, root)
        study_params = {k: params[k] for k in ("study", "prepare", "train", "importance") if k in params}
        self.study_run = self.tracker.study_run(self.study.name, fingerprint(study_params),
                                                {"study": self.study.name, "seeds": self.study.seeds,
                                                 "measures": self.study.measures, "steps": self.study.steps})

    def train_config(self, model: str, dataset: str):
        from roar.training import TrainConfig

        values = dict(section(self.params, "train", model, dataset))
        values.setdefault("model", model)
        return TrainConfig.from_dict(values)

    def _train_and_save(self, step_run: str, tags: dict, meta: DatasetMeta, data_dir: Path,
                        splits: dict[str, Split], model: str, seed: int, out: Path) -> tuple[dict, str]:
        """Train on ``splits``, save the model to ``out``, log a ``train`` run; returns (result, model hash)."""
        from roar.training import save_model, train

        config = self.train_config(model, meta.name)
        with self.tracker.run("train", f"train {tags.get('roar.k')}", step_run, tags, asdict(config)) as run_id:
            vocab = json.loads((data_dir / "vocab.json").read_text())
            n_vocab = len(vocab)
            trained, result = train(meta, n_vocab, splits, config, seed, self.progress, vocab)
            if result.embedding_coverage is not None:
                self.tracker.log_metrics(run_id, {"embedding_coverage": result.embedding_coverage})
            for entry in result.history:
                self.tracker.log_metrics(run_id, {k: v for k, v in entry.items() if k != "epoch"}, entry["epoch"])
            self.tracker.log_metrics(run_id, {f"test_{result.metric}": result.test_metric,
                                              "best_epoch": result.best_epoch, "seconds": result.seconds})
            save_model(out, trained, config, meta, n_vocab, result)
            model_hash = content_hash(out)
            self.tracker.client.set_tag(run_id, "roar.model_hash", model_hash)
        return {"metric": result.metric, "value": result.test_metric, "val_metric": result.val_metric,
                "best_epoch": result.best_epoch, "train_seconds": result.seconds, "train_run_id": run_id}, model_hash

    def run_reference(self, dataset: str, model: str, seed: int, which: str) -> dict:
        """Train the shared model on unmasked data (``k0``) or on all-masked data (``all``)."""
        if which not in ("k0", "all"):
            raise ValueError(f"reference {which!r} unknown; allowed: k0, all")
        data_dir = self.layout.prepared(dataset, model) if which == "k0" else self.layout.all_masked(dataset, model)
        k = 0 if which == "k0" else self.study.end_k or 100
        out = self.layout.shared_model(dataset, model, which, seed)
        result_path = self.layout.shared_result(dataset, model, which, seed)
        meta, splits = read_dataset(data_dir)
        data_hash = content_hash(data_dir)
        tags = {**_chain_tags(dataset, model, "shared", seed, self.study.strategy), "roar.k": k,
                "roar.data_hash": data_hash}
        with self.tracker.run("chain", f"{dataset}/{model}/shared-{which}/s{seed}", self.study_run, tags) as chain_run:
            with self.tracker.run("step", f"k={k}", chain_run, tags) as step_run:
                self.tracker.log_dataset(step_run, f"{dataset}-{which}", data_dir, data_hash, "train")
                point, model_hash = self._train_and_save(step_run, tags, meta, data_dir, splits, model, seed, out)
                self.tracker.log_metrics(step_run, {point["metric"]: point["value"]})
        record = {"dataset": dataset, "model": model, "measure": "shared", "recursive": None,
                  "strategy": self.study.strategy, "seed": seed, "k": k, **point, "data_hash": data_hash,
                  "model_hash": model_hash, "data_path": str(data_dir), "model_path": str(out),
                  "chain_run_id": chain_run, "step_run_id": step_run, "study_run_id": self.study_run,
                  "git_commit": self.tracker.commit}
        write_json_atomic(result_path, record)
        return record

    def run_chain(self, spec: ChainSpec) -> list[dict]:
        """Run every step of a chain (resuming finished ones) and return its result records."""
        from roar.importance import check_supported, make_measure
        from roar.training import load_model

        check_supported(spec.measure, spec.model)
        study, layout = self.study, self.layout
        prepared = layout.prepared(spec.dataset, spec.model)
        k0_model_dir = layout.shared_model(spec.dataset, spec.model, "k0", spec.seed)
        meta, base = read_dataset(prepared)
        data_dirs = layout.chain_data(spec.dataset, spec.model, spec.measure, spec.recursive, spec.seed)
        model_dirs = layout.chain_models(spec.dataset, spec.model, spec.measure, spec.recursive, spec.seed)
        result_dir = layout.chain_results(spec.dataset, spec.model, spec.measure, spec.recursive, spec.seed)
        _remove_stale_steps((data_dirs, model_dirs, result_dir), study.steps)
        imp_params = dict(section(self.params, "importance"))
        measure_params = dict(imp_params.get(spec.measure) or {})
        batch_size = int(imp_params.get("batch_size", 128))
        step_params = {"strategy": study.strategy, "importance": measure_params, "batch_size": batch_size,
                       "train": asdict(self.train_config(spec.model, spec.dataset))}

        vocab_json = (prepared / "vocab.json").read_text()
        n_vocab = vocab_size(prepared)
        prev_data, prev_data_dir = base, prepared
        prev_data_hash, prev_model_hash = content_hash(prepared), content_hash(k0_model_dir)
        k0_model_hash, base_hash = prev_model_hash, prev_data_hash
        prev_model_dir = k0_model_dir
        cached_importance = None
        tags = _chain_tags(spec.dataset, spec.model, spec.measure, spec.seed, study.strategy, spec.recursive)
        records = []
        with self.tracker.run("chain", spec.name, self.study_run, tags, {"steps": study.steps, **step_params}) as chain_run:
            for k in study.steps:
                imp_data_hash = prev_data_hash if spec.recursive else base_hash
                imp_model_hash = prev_model_hash if spec.recursive else k0_model_hash
                step_key = fingerprint({"k": k, "params": step_params, "data": imp_data_hash,
                                        "model": imp_model_hash, "spec": asdict(spec)})
                result_path = result_dir / f"k{k}.json"
                done = _load_done(result_path, step_key)
                if done is not None:
                    records.append(done)
                    prev_data_hash, prev_model_hash = done["data_hash"], done["model_hash"]
                    prev_data_dir, prev_model_dir = Path(done["data_path"]), Path(done["model_path"])
                    prev_data = None  # loaded lazily if a later step needs it
                    continue
                # Recursive ROAR explains the previous step's data with its model; plain ROAR always
                # explains the unmasked data with the k = 0 model, so its importance is computed once.
                if spec.recursive and prev_data is None:
                    _, prev_data = read_dataset(prev_data_dir)
                source, source_dir, source_model = ((prev_data, prev_data_dir, prev_model_dir) if spec.recursive
                                                    else (base, prepared, k0_model_dir))
                step_tags = {**tags, "roar.k": k, "roar.input_data_hash": imp_data_hash,
                             "roar.input_model_hash": imp_model_hash}
                with self.tracker.run("step", f"k={k}", chain_run, step_tags, {"k": k}) as step_run:
                    with self.tracker.run("importance", f"{spec.measure} k={k}", step_run, step_tags) as imp_run:
                        self.tracker.log_dataset(imp_run, spec.dataset, source_dir, imp_data_hash, "importance")
                        measure = imp_model = None
                        if cached_importance is None:
                            measure = make_measure(spec.measure, seed=spec.seed, train_split=source["train"],
                                                   vocab_size=n_vocab, n_classes=len(meta.classes),
                                                   ig_samples=int(measure_params.get("samples", 50)),
                                                   ig_max_rows=measure_params.get("max_rows"))
                            if measure.needs_model:
                                imp_model = load_model(source_model)
                        masked, importance, seconds = roar_step(source, imp_model, measure, k, study.strategy,
                                                                cached_importance, batch_size, self.progress, meta)
                        if not spec.recursive:
                            cached_importance = importance
                        n_examples = sum(len(s) for s in masked.values())
                        self.tracker.log_params(imp_run, {"measure": spec.measure, **measure_params})
                        self.tracker.log_metrics(imp_run, {"seconds": seconds, "examples": n_examples,
                                                           "examples_per_second": n_examples / max(seconds, 1e-9)})
                    out_data = step_dir(data_dirs, k)
                    write_dataset(out_data, meta, vocab_json, masked)
                    data_hash = content_hash(out_data)
                    self.tracker.log_dataset(step_run, f"{spec.dataset}-k{k}", out_data, data_hash, "train")
                    train_tags = {**step_tags, "roar.data_hash": data_hash}
                    point, model_hash = self._train_and_save(step_run, train_tags, meta, out_data, masked,
                                                             spec.model, spec.seed, step_dir(model_dirs, k))
                    self.tracker.log_metrics(step_run, {point["metric"]: point["value"],
                                                        "masked_fraction": masked_fraction(masked["train"], meta.mask_id,
                                                                                           meta.unmaskable_ids)})
                record = {"dataset": spec.dataset, "model": spec.model, "measure": spec.measure,
                          "recursive": spec.recursive, "strategy": study.strategy, "seed": spec.seed, "k": k, **point,
                          "importance_seconds": seconds, "data_hash": data_hash, "model_hash": model_hash,
                          "input_data_hash": imp_data_hash, "input_model_hash": imp_model_hash,
                          "data_path": str(out_data), "model_path": str(step_dir(model_dirs, k)),
                          "step_key": step_key, "chain_run_id": chain_run, "step_run_id": step_run,
                          "importance_run_id": imp_run, "study_run_id": self.study_run,
                          "git_commit": self.tracker.commit}
                write_json_atomic(result_path, record)
                records.append(record)
                prev_data, prev_data_dir = masked, out_data
                prev_data_hash, prev_model_hash, prev_model_dir = data_hash, model_hash, step_dir(model_dirs, k)
        return records


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


def _load_done(path: Path, step_key: str) -> dict | None:
    """The recorded result of a finished step whose inputs still match, else None."""
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if record.get("step_key") != step_key:
        return None
    if not (Path(record["data_path"]).is_dir() and Path(record["model_path"]).is_dir()):
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
