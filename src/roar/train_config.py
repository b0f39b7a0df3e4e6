"""The hyperparameters of a training run and the compute devices (no torch: the params schema and
the report read these without loading any model code). The model families are in :mod:`roar.registry`."""

from __future__ import annotations

from dataclasses import dataclass, fields

from roar.registry import model_family

# runtime.device: the GPU when torch sees one (auto), the CPU, or the GPU or fail (cuda); see roar.models.device.
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class TrainConfig:
    """Hyperparameters of one training run (paper defaults for the single-sequence BiLSTM)."""

    model: str = "bilstm-attention"
    epochs: int = 8
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 1e-5
    embedding_dim: int = 300
    hidden: int = 128
    attention_hidden: int = 128
    embeddings: str | None = None  # BiLSTM: pretrained word vectors (a file path, or "glove-6b-50d")
    checkpoint: str | None = None  # transformer: HF checkpoint name or local directory
    warmup_ratio: float = 0.06  # transformer: linear warm-up share of the steps, then linear decay
    threads: int = 0  # torch CPU threads; 0 keeps torch's default
    # Early stopping: stop when the validation metric has not improved for this many epochs
    # (the best-validation weights are kept either way); None trains all ``epochs``.
    patience: int | None = None

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown training parameter(s) {unknown}; allowed: {sorted(known)}")
        config = cls(**values)
        model_family(config.model)
        for name in ("epochs", "batch_size", "embedding_dim", "hidden", "attention_hidden"):
            if getattr(config, name) < 1:
                raise ValueError(f"training parameter {name}={getattr(config, name)!r} must be >= 1")
        if config.patience is not None and config.patience < 1:
            raise ValueError(f"training parameter patience={config.patience!r} must be >= 1 or null")
        if not 0 <= config.warmup_ratio < 1:
            raise ValueError(f"training parameter warmup_ratio={config.warmup_ratio!r} must be in [0, 1)")
        return config
