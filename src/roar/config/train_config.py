"""The hyperparameters of a training run and the compute devices (no torch: the params schema and
the report read these without loading any model code). The model families are in :mod:`roar.config.catalog`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from roar.config.catalog import model_family

# runtime.device: the GPU when torch sees one (auto), the CPU, or the GPU or fail (cuda); see roar.models.device.
DEVICES = ("auto", "cpu", "cuda")
# train.<model>.<dataset>.attend (families with attention): the first sequence's attention covers all its
# tokens (roar), or, as the official code, only ids >= [MASK]: not its start and end tokens (roar.models.bilstm).
ATTEND = ("all", "official")
# train.<model>.<dataset>.batching: training batches of similar lengths (roar), or uniformly shuffled batches,
# as the official code (roar.models.training.train_loader).
BATCHING = ("buckets", "shuffled")


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
    # Masked fine-tuning (Madsen et al. 2023): ``{p_max: 0.9}`` or ``{p_max: 1.0, share: 0.5}``. Each
    # training example is augmented with probability ``share`` (default 1); an augmented example draws
    # p ~ U(0, p_max) and masks each maskable first-sequence token with probability p
    # (roar.models.augment). None (the default) trains on the data as given.
    mask_augment: dict | None = None
    attend: str = ATTEND[0]  # one of ATTEND
    batching: str = BATCHING[0]  # one of BATCHING

    def params(self) -> dict:
        """The settings as a dict, without those of :data:`ADDED_LATER` at their defaults: the step keys,
        saved model configs and MLflow params of studies that do not use them stay as they were before
        they existed."""
        return {name: value for name, value in asdict(self).items()
                if not (name in ADDED_LATER and value == ADDED_LATER[name])}

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
        if config.mask_augment is not None:
            problem = mask_augment_problem(config.mask_augment)
            if problem:
                raise ValueError(f"training parameter mask_augment={config.mask_augment!r} {problem}")
        for name, allowed in (("attend", ATTEND), ("batching", BATCHING)):
            if getattr(config, name) not in allowed:
                raise ValueError(f"training parameter {name}={getattr(config, name)!r} unknown; "
                                 f"allowed: {', '.join(allowed)}")
        problem = attend_problem(config.model, config.attend)
        if problem:
            raise ValueError(f"training parameter attend={config.attend!r}: {problem}")
        return config


# The settings added after studies had run, at their defaults (TrainConfig.params leaves them out there).
ADDED_LATER = {"mask_augment": None, "attend": ATTEND[0], "batching": BATCHING[0]}


def attend_problem(model: str, attend: str) -> str | None:
    """None when the family ``model`` can attend as ``attend`` says, else why not (only a family with
    attention over the first sequence has tokens to leave out of it)."""
    if attend == ATTEND[0] or model_family(model).supports("attention"):
        return None
    return f"{model} has no attention over the first sequence to restrict; allowed: {ATTEND[0]}"


MASK_AUGMENT_KEYS = ("p_max", "share")


def mask_augment_problem(value: object) -> str | None:
    """None for a valid ``mask_augment`` setting (null, or ``{p_max: (0, 1], share: (0, 1]}`` with
    ``share`` optional), else what it must be."""
    wanted = "must be null or a mapping {p_max: number in (0, 1], share: number in (0, 1] (optional, default 1)}"
    if value is None:
        return None
    if not isinstance(value, dict) or "p_max" not in value or set(value) - set(MASK_AUGMENT_KEYS):
        return wanted
    for key, number in value.items():
        if isinstance(number, bool) or not isinstance(number, int | float) or not 0 < number <= 1:
            return f"{wanted}; {key} = {number!r} is not"
    return None
