"""A short calibration of throughput (``roar plan --calibrate``) for what no earlier run measured.

For each dataset and model it builds the study's model (the BiLSTM with its dimensions; the
transformer's architecture from its checkpoint's config, randomly initialised, so no weights are
needed), makes a synthetic batch of random token ids at the dataset's mean length (at most
:data:`CAL_LENGTH`), times optimiser steps, and times one importance batch (a gradient pass for the
gradient family, a forward pass for attention) with the project's own importance code. Results are
seconds per token (training) and per token and model
evaluation (importance), the units of :mod:`roar.launch.plan`.

It times the model's arithmetic only: the measured rates of real stages also hold data loading,
validation and Lightning's loop, so calibrated rates read low (README: the calibration on bAbI-1
next to the measured default study).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

CAL_LENGTH = 128  # calibrated tokens per example (shorter when the data's examples are shorter)
TRANSFORMER_LENGTH = 64
TOKENS_PER_BATCH = {"bilstm-attention": 4096, "roberta": 256}  # calibration batch budget (tokens)
# Samples of a measure timed with its own options (the BiLSTM's integrated gradients; the measures
# timed as another are on their specs: roar.config.catalog.MeasureSpec.timed_as).
IG_SAMPLES = 4
N_VOCAB = 1000


def _length(tokens_per_row: float, model: str) -> int:
    """The calibrated length: a power of two from 16 up to :data:`CAL_LENGTH`, near the data's mean.
    Per-token cost barely depends on length below 512 (the BiLSTM's recurrence is linear in it; in
    RoBERTa-base attention is ~5 % of the arithmetic at 256 tokens, ~10 % at 512), so longer data use
    CAL_LENGTH, and the transformer one short length for every dataset (one model, two timings)."""
    if model != "bilstm-attention":
        return TRANSFORMER_LENGTH
    length = 16
    while length < min(tokens_per_row, CAL_LENGTH):
        length *= 2
    return length


def build_model(model: str, train: dict, paired: bool, n_classes: int = 2):
    """The study's model with random weights (a transformer from its checkpoint's config only)."""
    import torch

    from roar.config.train_config import TrainConfig

    config = TrainConfig.from_dict({"model": model, **train})
    if model == "bilstm-attention":
        from roar.models.bilstm import BiLSTMAttention

        return config, BiLSTMAttention(N_VOCAB, n_classes, paired, config.embedding_dim, config.hidden,
                                       config.attention_hidden)
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from roar.core.errors import RoarError
    from roar.models.transformer import TransformerClassifier, resolve_checkpoint

    checkpoint = resolve_checkpoint(str(config.checkpoint))
    if (Path(checkpoint) / "config.json").is_file():
        hf_config = AutoConfig.from_pretrained(checkpoint, num_labels=n_classes)
    elif "roberta" in checkpoint.lower():  # transformers' RobertaConfig defaults are roberta-base's sizes
        hf_config = AutoConfig.for_model("roberta", num_labels=n_classes, max_position_embeddings=514,
                                         pad_token_id=1, bos_token_id=0, eos_token_id=2)
    else:
        raise RoarError(f"cannot calibrate checkpoint {config.checkpoint!r} offline: give a local checkpoint folder "
                        "(with config.json), or run a few stages and plan from their measured runs")
    hf = AutoModelForSequenceClassification.from_config(hf_config, dtype=torch.float32)
    return config, TransformerClassifier(hf)


def synthetic_split(rows: int, length: int, paired: bool, seed: int = 0):
    """``rows`` examples of ``length`` tokens in all (a pair: 8 of them in the second sequence)."""
    import numpy as np

    from roar.data.storage import Split

    rng = np.random.default_rng(seed)
    second = min(8, length // 2) if paired else 0
    first = [list(rng.integers(5, N_VOCAB, length - second)) for _ in range(rows)]
    other = [list(rng.integers(5, N_VOCAB, second)) for _ in range(rows)] if paired else None
    return Split.from_lists(first, list(rng.integers(0, 2, rows)), other)


def time_training(model, config, split, steps: int = 2) -> float:
    """Seconds per token of optimiser steps on ``split`` as one batch (after one untimed step)."""
    import numpy as np
    import torch

    from roar.models.batching import make_batch

    batch = make_batch(split, np.arange(len(split)))
    optimizer, scheduler = model.make_optimizer(config, 1000)
    model.train()

    def step() -> None:
        logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
        loss = torch.nn.functional.cross_entropy(logits, batch.labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()

    step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    tokens = int(split.lengths.sum() + split.lengths2.sum())
    return (time.perf_counter() - start) / (steps * tokens)


def time_importance(model, measure: str, split) -> float:
    """Seconds per token and model evaluation of one importance batch of ``measure``."""
    from roar.importance.base import MeasureContext, compute_importance
    from roar.importance.registry import make_measure, model_passes

    context = MeasureContext(train_split=split, vocab_size=N_VOCAB, n_classes=2)
    built = make_measure(measure, {"samples": IG_SAMPLES}, context)
    warm = synthetic_split(1, int(split.lengths[0]), split.paired)  # first-call costs (imports, allocations)
    compute_importance(built, model, warm, "calibration", batch_size=1, progress=False, target="gold")
    start = time.perf_counter()
    compute_importance(built, model, split, "calibration", batch_size=len(split), progress=False, target="gold")
    tokens = int(split.lengths.sum() + split.lengths2.sum())
    return (time.perf_counter() - start) / (tokens * max(model_passes(measure, {"samples": IG_SAMPLES}), 1))


def calibrate(params: dict, needed: list[tuple], sizes: dict) -> tuple[dict, str]:
    """Rates for the needed ``(dataset, model, what, arch)`` of :func:`roar.launch.plan.build_plan`:
    ``{(dataset, model, what): (seconds per unit, where it comes from)}`` (a :class:`roar.launch.plan.Rate`'s
    fields) and a one-line note (threads, seconds spent)."""
    import torch

    from roar.config.catalog import measure_spec
    from roar.config.datasets import dataset_spec
    from roar.config.params import section

    threads = int((params.get("runtime") or {}).get("threads") or 0)
    imp = section(params, "importance")
    if threads:
        torch.set_num_threads(threads)
    started = time.perf_counter()
    cache: dict[tuple, float] = {}
    rates = {}
    torch.manual_seed(0)
    by_pair: dict[tuple, list[tuple]] = {}
    for dataset, model, what, arch in needed:
        by_pair.setdefault((dataset, model), []).append((what, arch))
    for (dataset, model), whats in by_pair.items():
        train = dict(section(params, "train", model, dataset))
        paired = dataset_spec(dataset).paired
        length = _length(sizes[(dataset, model)].tokens_per_row, model)
        budget = TOKENS_PER_BATCH[model] // length
        batch = {"train": int(train.get("batch_size", 32)), "importance": int(imp.get("batch_size", 128))}
        splits = {k: synthetic_split(max(1, min(v, budget)), length, paired) for k, v in batch.items()}
        config = built = None
        for what, arch in whats:
            timed = what if what == "train" else measure_spec(what).timed_on(model)
            split = splits["train" if what == "train" else "importance"]
            key = (timed, arch, length, paired)
            if key not in cache:
                if built is None:
                    config, built = build_model(model, train, paired)
                    config = replace(config, threads=0)
                cache[key] = (time_training(built, config, split, 2 if model == "bilstm-attention" else 1)
                              if what == "train" else time_importance(built, timed, split))
            how = "as a gradient pass, " if timed != what else ""
            rates[(dataset, model, what)] = (cache[key], f"calibrated {how}{len(split)} synthetic rows x "
                                                         f"{length} tokens")
    note = (f"{len(cache)} timings in {time.perf_counter() - started:.1f} s on {torch.get_num_threads()} thread(s); "
            "model arithmetic only (no data loading, validation or training loop)")
    return rates, note
