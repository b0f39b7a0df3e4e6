"""Train a classifier with Lightning, keep the best validation epoch, score the test split."""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from roar.data.storage import DatasetMeta, Split
from roar.core.faults import failpoint
from roar.core.fileio import atomic_dir
from roar.models.metrics import compute_metric
from roar.models.batching import Batch, BucketBatchSampler, SplitDataset, iterate_batches
from roar.models.device import resolve_device
from roar.models.registry import build_model  # noqa: F401 (also the training API)
from roar.config.catalog import model_family
from roar.config.train_config import TrainConfig  # noqa: F401 (re-exported: the training API)


@dataclass
class TrainResult:
    """What a training run produced; ``history`` has one dict per epoch."""

    best_epoch: int
    val_metric: float
    test_metric: float
    metric: str
    seconds: float
    history: list[dict] = field(default_factory=list)
    embedding_coverage: float | None = None  # share of the vocabulary found in the pretrained vectors
    embeddings_digest: str | None = None  # which pretrained vectors (roar.data.embeddings.vectors_digest)

    def reproducible(self) -> dict:
        """The fields that the inputs determine (everything but the wall time)."""
        return {k: v for k, v in asdict(self).items() if k != "seconds"}


def trainer_precision(model: torch.nn.Module, device: torch.device) -> str:
    """Lightning precision: mixed (bf16 where supported, else fp16) on a GPU for a model whose class
    declares ``mixed_precision`` (the transformer), else full float32 (the BiLSTM, the CPU)."""
    if device.type == "cuda" and getattr(type(model), "mixed_precision", False):
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "32-true"


def trainer_device(device: torch.device) -> dict:
    """Lightning's ``accelerator`` and ``devices`` for ``device``."""
    if device.type == "cuda":
        return {"accelerator": "gpu", "devices": [device.index or 0]}
    return {"accelerator": "cpu", "devices": 1}


def _make_module(model: torch.nn.Module, select_metric: str, config: TrainConfig,
                 on_epoch: Callable[[dict], None] | None = None):
    import lightning as L

    class ClassifierModule(L.LightningModule):
        """Cross-entropy training; logs ``val_select`` (the validation metric) for the checkpoint and
        early-stopping callbacks and keeps one history entry per epoch (passed to ``on_epoch`` live)."""

        def __init__(self):
            super().__init__()
            self.model = model
            self.history: list[dict] = []
            self._loss_sum, self._loss_n = 0.0, 0
            self._val_logits: list[torch.Tensor] = []
            self._val_labels: list[torch.Tensor] = []

        def training_step(self, batch, _):
            logits = self.model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
            loss = torch.nn.functional.cross_entropy(logits, batch.labels)
            self._loss_sum += float(loss.detach()) * len(batch.labels)
            self._loss_n += len(batch.labels)
            return loss

        def validation_step(self, batch, _):
            self._val_logits.append(self.model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits)
            self._val_labels.append(batch.labels)

        def on_validation_epoch_end(self):
            logits = torch.cat(self._val_logits).cpu()
            # Non-finite logits (a diverged model) score NaN: argmax would hide them.
            score = (compute_metric(select_metric, logits, torch.cat(self._val_labels).cpu())
                     if bool(torch.isfinite(logits).all()) else float("nan"))
            self._val_logits, self._val_labels = [], []
            entry = {"epoch": self.current_epoch, "train_loss": self._loss_sum / max(self._loss_n, 1),
                     f"val_{select_metric}": score}
            self.history.append(entry)
            self._loss_sum, self._loss_n = 0.0, 0
            # float64, so that the callbacks compare the metric exactly (a float32 copy could tie two epochs)
            self.log("val_select", torch.tensor(score, dtype=torch.float64))
            if on_epoch is not None:
                on_epoch(dict(entry))
            if self.current_epoch == 0:
                failpoint("train")

        def configure_optimizers(self):
            optimizer, scheduler = self.model.make_optimizer(config, self.trainer.estimated_stepping_batches)
            if scheduler is None:
                return optimizer
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    return ClassifierModule()


def best_checkpoint(folder: Path):
    """Lightning's ``ModelCheckpoint`` keeping the best-validation weights in ``folder``: an epoch is
    kept when its ``val_select`` is strictly higher than the best so far (the earliest of equal epochs
    wins); a NaN epoch never is (Lightning stores it as -inf, so an all-NaN run ends with a -inf best)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    return ModelCheckpoint(dirpath=folder, monitor="val_select", mode="max", save_top_k=1, save_weights_only=True,
                           save_on_train_epoch_end=False, save_last=False, enable_version_counter=False)


def load_best(module: torch.nn.Module, checkpoint) -> int:
    """Load the weights of ``checkpoint``'s best epoch into ``module`` (on the CPU); returns that epoch."""
    saved = torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=True)
    module.load_state_dict(saved["state_dict"])
    return int(saved["epoch"])


@torch.no_grad()
def predict_logits(model: torch.nn.Module, split: Split, batch_size: int = 256) -> torch.Tensor:
    """``[N, C]`` logits of ``model`` on ``split``, in split order."""
    model.eval()
    device = next(model.parameters()).device
    out = [model(*(b.to(device)[:4])).logits.cpu() for b in iterate_batches(split, batch_size)]
    return torch.cat(out)


def score_split(model: torch.nn.Module, split: Split, metric: str) -> float:
    """``metric`` of ``model`` (on its device) on ``split``'s gold labels; NaN when a logit is not finite."""
    logits = predict_logits(model, split)
    if not bool(torch.isfinite(logits).all()):
        return float("nan")
    return compute_metric(metric, logits, torch.from_numpy(split.labels))


def init_word_vectors(model: torch.nn.Module, config: TrainConfig, vocab: list[str]) -> float:
    """Copy pretrained vectors (``config.embeddings``) into the embeddings of a family with the
    ``word-vectors`` capability; returns the coverage."""
    from roar.data.embeddings import load_word_vectors

    vectors = load_word_vectors(config.embeddings, vocab)
    if vectors.matrix.shape[1] != config.embedding_dim:
        raise ValueError(f"embeddings {config.embeddings!r} have {vectors.matrix.shape[1]} dimensions but "
                         f"embedding_dim={config.embedding_dim}; set embedding_dim to match")
    model.set_word_vectors(torch.from_numpy(vectors.matrix))
    return vectors.coverage


def train_loader(train_set: SplitDataset, config: TrainConfig, seed: int,
                 collate: Callable[[list[int]], Batch]) -> torch.utils.data.DataLoader:
    """The training batches of ``config.batching``: ``buckets`` of similar lengths
    (:class:`~roar.models.batching.BucketBatchSampler`), or ``shuffled``: each epoch a uniform permutation of
    the examples cut into consecutive batches of ``batch_size`` (the last one smaller), as the official code's
    ``DataLoader(shuffle=True)`` (nlproar/dataset/_dataset.py); both drawn from ``seed``."""
    if config.batching == "shuffled":
        return torch.utils.data.DataLoader(train_set, config.batch_size, shuffle=True, collate_fn=collate,
                                           generator=torch.Generator().manual_seed(seed))
    sampler = BucketBatchSampler(train_set.split.lengths, config.batch_size, seed)
    return torch.utils.data.DataLoader(train_set, batch_sampler=sampler, collate_fn=collate)


def train(meta: DatasetMeta, vocab_size: int, splits: dict[str, Split], config: TrainConfig, seed: int,
          progress: bool = True, vocab: list[str] | None = None,
          device: torch.device | None = None,
          on_epoch: Callable[[dict], None] | None = None) -> tuple[torch.nn.Module, TrainResult]:
    """Train a fresh model on ``splits['train']``, select by validation, score on test.

    ``vocab`` (the dataset's tokens in id order) is needed when ``config.embeddings`` names
    pretrained word vectors (the ``word-vectors`` capability). ``device``: where to train and score (None: the GPU
    when torch sees one, else the CPU; :func:`roar.models.device.resolve_device`). ``on_epoch``: called
    after every validation with that epoch's history entry (``epoch``, ``train_loss``, ``val_<metric>``),
    so that a tracker logs it live. ``config.mask_augment`` masks the training batches at random
    (:mod:`roar.models.augment`; validation and test are left as they are).

    Returns:
        The model (on the CPU) with its best-validation weights, and the run's :class:`TrainResult`.
    """
    import lightning as L

    device = resolve_device("auto") if device is None else device
    if config.threads:
        torch.set_num_threads(config.threads)
    start = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    model = build_model(meta, vocab_size, config)
    coverage = digest = None
    if config.embeddings and model_family(config.model).supports("word-vectors"):
        if vocab is None:
            raise ValueError(f"embeddings {config.embeddings!r} need the dataset vocabulary")
        coverage = init_word_vectors(model, config, vocab)
        from roar.data.embeddings import vectors_digest

        digest = vectors_digest(config.embeddings)
    module = _make_module(model, meta.select_metric, config, on_epoch)
    train_set, val_set = SplitDataset(splits["train"]), SplitDataset(splits["val"])
    collate = train_set.collate
    if config.mask_augment is not None:  # masked fine-tuning: the training batches only
        from roar.models.augment import masking_collate

        collate = masking_collate(collate, config.mask_augment, seed, meta.mask_id, tuple(meta.unmaskable_ids))
    loaders = (
        train_loader(train_set, config, seed, collate),
        torch.utils.data.DataLoader(val_set, 256, collate_fn=val_set.collate),
    )
    # Deterministic kernels: on the CPU the same inputs, seed and thread count give byte-identical
    # weights (so a retrained model folder keeps its content hash). On a GPU, cuDNN's LSTM and
    # scatter/index kernels have no deterministic implementation; Lightning then warns instead.
    on_gpu = device.type == "cuda"
    with tempfile.TemporaryDirectory(prefix="roar-best-") as folder:
        checkpoint = best_checkpoint(Path(folder))
        callbacks = [checkpoint]
        if config.patience:
            from lightning.pytorch.callbacks import EarlyStopping

            # Same rule as the checkpoint: strictly better is an improvement; NaN never is.
            callbacks.append(EarlyStopping("val_select", mode="max", patience=config.patience, min_delta=0.0,
                                           check_finite=False))
        trainer = L.Trainer(max_epochs=config.epochs, logger=False, callbacks=callbacks, default_root_dir=folder,
                            enable_model_summary=False, enable_progress_bar=progress, num_sanity_val_steps=0,
                            deterministic="warn" if on_gpu else True, precision=trainer_precision(model, device),
                            **trainer_device(device))
        trainer.fit(module, *loaders)
        best_score = checkpoint.best_model_score
        if not checkpoint.best_model_path or best_score is None or not math.isfinite(float(best_score)):
            scores = [entry[f"val_{meta.select_metric}"] for entry in module.history]
            raise ValueError(f"training {config.model} on {meta.name} (seed {seed}) gave a non-finite validation "
                             f"{meta.select_metric} in every epoch ({scores[:5]}); the loss diverged or the data are "
                             "degenerate: lower lr or check the dataset")
        best_epoch = load_best(module, checkpoint)  # Lightning hands the model back on the CPU
    best = next(entry for entry in module.history if entry["epoch"] == best_epoch)
    test_metric = score_split(model.to(device), splits["test"], meta.metric)
    model.cpu()
    if not math.isfinite(test_metric):
        raise ValueError(f"test {meta.metric} of {config.model} on {meta.name} (seed {seed}) is {test_metric}; "
                         "the model's logits are not finite")
    result = TrainResult(best_epoch=best_epoch, val_metric=best[f"val_{meta.select_metric}"],
                         test_metric=test_metric, metric=meta.metric, seconds=time.perf_counter() - start, history=module.history,
                         embedding_coverage=coverage, embeddings_digest=digest)
    return model, result


def save_model(folder: Path, model: torch.nn.Module, config: TrainConfig, meta: DatasetMeta, vocab_size: int,
               result: TrainResult) -> None:
    """Write ``model.safetensors``, ``config.json`` and ``result.json`` atomically.

    A transformer's HF config goes into ``config.json`` under ``hf_config``, so that
    :func:`load_model` rebuilds the architecture without the checkpoint (or network).
    """
    from safetensors.torch import save_file

    saved = {"train": config.params(), "meta": meta.__dict__, "vocab_size": vocab_size}
    if hasattr(model, "config_dict"):
        saved["hf_config"] = model.config_dict()
    with atomic_dir(folder) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
        # Only what the inputs determine: wall time and run ids belong to the step's record, so that
        # retraining on the same inputs gives the same folder hash.
        (tmp / "result.json").write_text(json.dumps(result.reproducible(), indent=2, sort_keys=True) + "\n")


def load_model(folder: Path) -> torch.nn.Module:
    """Rebuild a model saved by :func:`save_model` (safetensors: no pickled code is loaded).

    Raises:
        FileNotFoundError: the folder, ``model.safetensors`` or ``config.json`` is missing.
        roar.core.errors.RoarError: a file is empty, corrupt, or does not fit the saved architecture;
            one line naming the file and the stage to re-run.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from roar.models.saved_model import REDO_MODEL, check_model_folder
    from roar.core.errors import RoarError, shorten

    folder = Path(folder)
    saved = check_model_folder(folder)
    try:
        model = build_model(DatasetMeta(**saved["meta"]), saved["vocab_size"], TrainConfig(**saved["train"]),
                            saved.get("hf_config"))
    except (TypeError, ValueError, KeyError) as error:
        raise RoarError(f"{folder / 'config.json'} does not describe a model this code builds "
                        f"({shorten(str(error))}); {REDO_MODEL}") from error
    try:
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
    except (SafetensorError, RuntimeError, OSError) as error:
        reason = str(error).split(":", 1)[1] if str(error).startswith("Error(s) in loading") else str(error)
        raise RoarError(f"{folder / 'model.safetensors'} does not load into the model of config.json "
                        f"({shorten(reason)}); {REDO_MODEL}") from error
    model.eval()
    return model
