"""What a stage process holds (params, layout, device, tracker), and the reference models of a seed.

:class:`Runner` holds the params, the output layout and the tracker of one stage process
(:func:`roar.pipeline.stage.stage_runner` sets a stage process up: device, torch threads, MLflow and its study run);
:meth:`Runner.run_reference` trains the k = 0 model (unmasked data) or the k = 100 model (all
masked). The chains build on it in :mod:`roar.pipeline.chain`.
"""

from __future__ import annotations

import json
from pathlib import Path

from roar.data.storage import DatasetMeta, Split, read_dataset, read_vocab
from roar.core.fileio import content_hash
from roar.method.leakage import leakage
from roar.models.device import resolve_device
from roar.config.params import Study, section, study_from_params
from roar.config.layout import Layout
from roar.tracking.protocol import RunTracker, log_curve
from roar.pipeline.step_record import RunFacts, StepRecord, TrainedPoint


def chain_tags(dataset: str, model: str, measure: str, seed: int, strategy: str,
                recursive: bool | None = None) -> dict:
    return {"roar.dataset": dataset, "roar.model": model, "roar.measure": measure, "roar.seed": seed,
            "roar.strategy": strategy, "roar.recursive": "" if recursive is None else str(recursive).lower()}


class Runner:
    """Everything a stage needs: params, layout, device, a tracker and the study run to put runs under."""

    def __init__(self, params: dict, tracker: RunTracker, study_run: str | None, root: Path = Path("."),
                 progress: bool = True, device=None):
        self.params = params
        self.study: Study = study_from_params(params)
        self.layout = Layout(root)
        self.progress = progress
        self.tracker = tracker
        self.study_run = study_run
        # a GPU asked for and missing stops here
        self.device = device if device is not None else resolve_device((params.get("runtime") or {}).get("device"))

    def train_config(self, model: str, dataset: str):
        from roar.config.train_config import TrainConfig

        values = dict(section(self.params, "train", model, dataset))
        values.setdefault("model", model)
        return TrainConfig.from_dict(values)

    def _train_and_save(self, step_run: str, tags: dict, meta: DatasetMeta, data_dir: Path,
                        splits: dict[str, Split], model: str, seed: int, out: Path) -> tuple[TrainedPoint, str]:
        """Train on ``splits``, save the model to ``out``, log a ``train`` run; returns (result, model hash)."""
        from roar.models.training import save_model, train

        config = self.train_config(model, meta.name)
        with self.tracker.run("train", f"train {tags.get('roar.k')}", step_run, tags, config.params()) as run_id:
            self.tracker.log_dataset(run_id, f"{meta.name}-k{tags['roar.k']}", data_dir, tags["roar.data_hash"], "train")
            vocab = json.loads((data_dir / "vocab.json").read_text())
            n_vocab = len(vocab)
            def log_epoch(entry: dict) -> None:  # live, so that each epoch carries its own timestamp
                self.tracker.log_metrics(run_id, {k: v for k, v in entry.items() if k != "epoch"}, entry["epoch"])

            trained, result = train(meta, n_vocab, splits, config, seed, self.progress, vocab, self.device, log_epoch)
            if result.embedding_coverage is not None:
                self.tracker.log_metrics(run_id, {"embedding_coverage": result.embedding_coverage})
            self.tracker.log_metrics(run_id, {f"test_{result.metric}": result.test_metric,
                                              "best_epoch": result.best_epoch, "seconds": result.seconds})
            save_model(out, trained, config, meta, n_vocab, result)
            model_hash = content_hash(out)
            self.tracker.set_tag(run_id, "roar.model_hash", model_hash)
        return TrainedPoint(result.metric, result.test_metric, result.val_metric, result.best_epoch, result.seconds,
                            run_id), model_hash

    def run_reference(self, dataset: str, model: str, seed: int, which: str) -> StepRecord:
        """Train the shared model on unmasked data (``k0``) or on all-masked data (``all``)."""
        if which not in ("k0", "all"):
            raise ValueError(f"reference {which!r} unknown; allowed: k0, all")
        data_dir = self.layout.prepared(dataset, model) if which == "k0" else self.layout.all_masked(dataset, model)
        k = 0 if which == "k0" else self.study.end_k or 100
        out = self.layout.shared_model(dataset, model, which, seed)
        meta, splits = read_dataset(data_dir)
        data_hash = content_hash(data_dir)
        tags = {**chain_tags(dataset, model, "shared", seed, self.study.strategy), "roar.k": k,
                "roar.data_hash": data_hash}
        with self.tracker.run("chain", f"{dataset}/{model}/shared-{which}/s{seed}", self.study_run, tags) as chain_run:
            with self.tracker.run("step", f"k={k}", chain_run, tags) as step_run:
                self.tracker.log_dataset(step_run, f"{dataset}-{which}", data_dir, data_hash, "train")
                point, model_hash = self._train_and_save(step_run, tags, meta, data_dir, splits, model, seed, out)
                leak = leakage(splits, meta, read_vocab(data_dir), seed)
                self.tracker.log_metrics(step_run, {point.metric: point.value, **leak})
            log_curve(self.tracker, chain_run, [(k, point.metric, point.value)])
        record = StepRecord(dataset, model, "shared", None, self.study.strategy, seed, k, **point.result,
                            leakage=leak, data_hash=data_hash, model_hash=model_hash, data_path=str(data_dir),
                            model_path=str(out),
                            run=RunFacts(self.study_run, chain_run, step_run, point.run_id,
                                         git_commit=self.tracker.commit, train_seconds=point.seconds))
        record.write(self.layout.shared_result(dataset, model, which, seed))
        return record
