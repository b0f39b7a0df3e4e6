"""A stage process's shared setup, and the reference models every chain of a seed shares.

:class:`Runner` holds the params, the output layout and the MLflow tracker of one stage process;
:meth:`Runner.run_reference` trains the k = 0 model (unmasked data) or the k = 100 model (all
masked). The chains build on it in :mod:`roar.chain`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from roar.data.storage import DatasetMeta, Split, read_dataset, read_vocab
from roar.fileio import content_hash, write_json_atomic
from roar.leakage import leakage
from roar.models.device import resolve_device
from roar.params import Study, section, study_from_params
from roar.paths import Layout
from roar.tracking import Tracker, fingerprint


def chain_tags(dataset: str, model: str, measure: str, seed: int, strategy: str,
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
        self.device = resolve_device(runtime.get("device"))  # a GPU asked for and missing stops here
        if runtime.get("threads"):
            import torch

            torch.set_num_threads(int(runtime["threads"]))
        self.tracker = Tracker(self.study.name, root)
        study_params = {k: params[k] for k in ("study", "prepare", "train", "importance") if k in params}
        self.study_run = self.tracker.study_run(self.study.name, fingerprint(study_params),
                                                {"study": self.study.name, "seeds": self.study.seeds,
                                                 "measures": self.study.measures, "steps": self.study.steps})

    def train_config(self, model: str, dataset: str):
        from roar.models.config import TrainConfig

        values = dict(section(self.params, "train", model, dataset))
        values.setdefault("model", model)
        return TrainConfig.from_dict(values)

    def _train_and_save(self, step_run: str, tags: dict, meta: DatasetMeta, data_dir: Path,
                        splits: dict[str, Split], model: str, seed: int, out: Path) -> tuple[dict, str]:
        """Train on ``splits``, save the model to ``out``, log a ``train`` run; returns (result, model hash)."""
        from roar.training import save_model, train

        config = self.train_config(model, meta.name)
        with self.tracker.run("train", f"train {tags.get('roar.k')}", step_run, tags, asdict(config)) as run_id:
            self.tracker.log_dataset(run_id, f"{meta.name}-k{tags['roar.k']}", data_dir, tags["roar.data_hash"], "train")
            vocab = json.loads((data_dir / "vocab.json").read_text())
            n_vocab = len(vocab)
            trained, result = train(meta, n_vocab, splits, config, seed, self.progress, vocab, self.device)
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
        tags = {**chain_tags(dataset, model, "shared", seed, self.study.strategy), "roar.k": k,
                "roar.data_hash": data_hash}
        with self.tracker.run("chain", f"{dataset}/{model}/shared-{which}/s{seed}", self.study_run, tags) as chain_run:
            with self.tracker.run("step", f"k={k}", chain_run, tags) as step_run:
                self.tracker.log_dataset(step_run, f"{dataset}-{which}", data_dir, data_hash, "train")
                point, model_hash = self._train_and_save(step_run, tags, meta, data_dir, splits, model, seed, out)
                leak = leakage(splits, meta, read_vocab(data_dir), seed)
                self.tracker.log_metrics(step_run, {point["metric"]: point["value"], **leak})
            self.tracker.log_curve(chain_run, [{**point, "k": k}])
        record = {"dataset": dataset, "model": model, "measure": "shared", "recursive": None,
                  "strategy": self.study.strategy, "seed": seed, "k": k, **point, "leakage": leak, "data_hash": data_hash,
                  "model_hash": model_hash, "data_path": str(data_dir), "model_path": str(out),
                  "chain_run_id": chain_run, "step_run_id": step_run, "study_run_id": self.study_run,
                  "git_commit": self.tracker.commit}
        write_json_atomic(result_path, record)
        return record
