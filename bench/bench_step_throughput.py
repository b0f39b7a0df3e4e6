"""Benchmark: throughput of one paper-settings bAbI-1 step, roar beside a bare torch reference.

Run as ``PYTHONPATH=src python bench/bench_step_throughput.py [--device cpu|cuda] [--quick] [--threads N]``.

A step of the paper-babi-1 study is a training run (BiLSTM-attention paired model, hidden 32,
random 50-d embeddings, batch 50, Adam lr 1e-3 with amsgrad, weight decay 1e-5; up to 100 epochs,
patience 5) and an integrated-gradients pass (50 samples) over train+val+test. On the same
generated data (10,000 questions 85/15 train/val, 1,000 test; made in memory, nothing written)
this times, in one process so that the ratio holds on a busy machine:

- roar: ``roar.training.train`` for ``--epochs`` epochs (no early stopping) and
  ``roar.importance.base.compute_importance`` with ``IntegratedGradientImportance(50)`` on
  ``--ig-rows`` rows drawn from train+val+test (the library's defaults, as a chain step runs them);
- the reference: the same model and data with no framework around it, tuned: rows grouped by
  exact story length (no padding, no masking, one fused bidirectional LSTM call), training
  batches of 50 drawn within a length, evaluation and the question encoder under
  ``torch.inference_mode``/``no_grad``, IG samples stacked into passes of ``--ref-rows`` rows with
  the question encoded once per row, and the weights frozen during IG (no weight gradients).

Throughput is in rows per second (an IG row is one example explained with all samples) and in
achieved GFLOP/s of useful work: F, the forward pass of a row (2 x multiply-adds of both LSTMs,
attention and decoder at its own length); a training row costs 3F (forward, input and weight
gradients), a validation row F, an IG row ``samples x 2F`` on the story side (forward and input
gradient) plus the question encoder once. Per-step seconds are extrapolated, and say so: training
from the measured per-epoch time (epochs 2.. of the run) times ``--epochs-per-step`` plus the
run's fixed cost; IG from rows/s (the second of two rounds, see ``run``) to all 11,000 rows. The
reference's IG attributions are checked against roar's (largest relative difference printed): both
compute the same quantity.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from roar.data.storage import DatasetMeta, Split
from roar.models.bilstm import BiLSTMAttention

SAMPLES = 50
BATCH = 50
LR, WEIGHT_DECAY = 1e-3, 1e-5
DIM, HIDDEN, ATTENTION = 50, 32, 32


@dataclass(frozen=True)
class StepData:
    """The prepared paper-settings bAbI-1 splits (in memory) and what a model needs to know of them."""

    meta: DatasetMeta
    vocab_size: int
    splits: dict[str, Split]


def paper_babi1(n_train: int = 10_000, n_test: int = 1_000, seed: int = 0) -> StepData:
    """bAbI-1 as ``roar prepare`` makes it for studies/paper-babi-1 (generated, word vocabulary), without
    writing files (the prepared format needs pyarrow, which a GPU node may lack)."""
    from roar.data.prepare import encode_word_dataset, load_raw, split_validation
    from roar.config.datasets import PrepareConfig, dataset_spec

    spec = dataset_spec("babi-1")
    config = PrepareConfig(source="generate", n_train=n_train, n_test=n_test, val_fraction=0.15, seed=seed)
    raw = load_raw(spec, config)
    train_raw, val_raw = split_validation(raw.train, config.val_fraction, config.seed)
    classes = sorted({e.label for e in train_raw})
    splits, vocab_json, meta = encode_word_dataset(spec, {"train": train_raw, "val": val_raw, "test": raw.test},
                                                   train_raw, classes, config, "bilstm-attention", None)
    return StepData(meta, len(json.loads(vocab_json)), splits)


def subset(split: Split, rows: np.ndarray) -> Split:
    """Rows of ``split``, padded to their own longest sequences."""
    width, width2 = max(int(split.lengths[rows].max()), 1), max(int(split.lengths2[rows].max()), 0)
    return Split(split.tokens[rows, :width], split.lengths[rows], split.tokens2[rows, :width2],
                 split.lengths2[rows], split.labels[rows], split.index[rows])


def concat(splits: list[Split]) -> Split:
    """One split of all rows of ``splits`` (re-padded)."""
    width = max(s.tokens.shape[1] for s in splits)
    width2 = max(s.tokens2.shape[1] for s in splits)
    pad = lambda a, w: np.pad(a, ((0, 0), (0, w - a.shape[1])))  # noqa: E731
    return Split(np.concatenate([pad(s.tokens, width) for s in splits]), np.concatenate([s.lengths for s in splits]),
                 np.concatenate([pad(s.tokens2, width2) for s in splits]),
                 np.concatenate([s.lengths2 for s in splits]), np.concatenate([s.labels for s in splits]),
                 np.arange(sum(len(s) for s in splits)))


def forward_flops(lengths: np.ndarray, lengths2: np.ndarray, classes: int) -> np.ndarray:
    """``[N]`` FLOPs (2 x multiply-adds) of one forward pass per row: both directions of both LSTMs,
    attention (per token and the query), decoder and output layer."""
    lstm_per_token = 2 * 4 * HIDDEN * (DIM + HIDDEN)  # two directions, four gates
    attention_per_token = 2 * HIDDEN * ATTENTION + ATTENTION + 2 * HIDDEN  # W1 h_t, v . tanh, context
    fixed = 2 * HIDDEN * ATTENTION + 2 * (2 * HIDDEN * HIDDEN) + HIDDEN * classes  # W1' q, decoder, output
    macs = (lstm_per_token + attention_per_token) * lengths + lstm_per_token * lengths2 + fixed
    return 2.0 * macs


def question_flops(lengths2: np.ndarray) -> np.ndarray:
    """``[N]`` FLOPs of the question encoder alone (both directions)."""
    return 2.0 * 2 * 4 * HIDDEN * (DIM + HIDDEN) * lengths2


class Timer:
    """Wall time of a block, synchronising the GPU at both ends."""

    def __init__(self, device: torch.device):
        self.device = device

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


# --- the bare reference -------------------------------------------------------------------------------------


class BareModel(nn.Module):
    """The paired BiLSTM-attention of roar.models.bilstm for rows of one exact length: fused
    bidirectional LSTMs, no padding, no masks (what the math needs and nothing else)."""

    def __init__(self, source: BiLSTMAttention):
        super().__init__()
        self.embedding, self.embedding2 = source.embedding, source.embedding2
        self.story = self._bidirectional(source.encoder)
        self.question = self._bidirectional(source.encoder2)
        self.attention_in, self.attention_query = source.attention_in, source.attention_query
        self.attention_out = source.attention_out
        self.decoder_context, self.decoder_query, self.output = (source.decoder_context, source.decoder_query,
                                                                 source.output)

    @staticmethod
    def _bidirectional(encoder) -> nn.LSTM:
        """One ``nn.LSTM(bidirectional=True)`` holding roar's two directional LSTMs' weights."""
        forward, backward = encoder.forward_lstm, encoder.backward_lstm
        lstm = nn.LSTM(forward.input_size, forward.hidden_size, batch_first=True, bidirectional=True)
        with torch.no_grad():
            for name, value in forward.named_parameters():
                getattr(lstm, name).copy_(value)
                getattr(lstm, name + "_reverse").copy_(getattr(backward, name))
        return lstm

    def encode_question(self, tokens2: torch.Tensor) -> torch.Tensor:
        """``[B, 2H]`` final states of the question (forward's last, backward's first)."""
        states, _ = self.question(self.embedding2(tokens2))
        return torch.cat([states[:, -1, :HIDDEN], states[:, 0, HIDDEN:]], dim=-1)

    def forward(self, embeddings: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """``[B, C]`` logits of stories ``[B, L, D]`` of one length given their questions' ``[B, 2H]``."""
        states, _ = self.story(embeddings)
        hidden = self.attention_in(states) + self.attention_query(query)[:, None, :]
        attention = torch.softmax(self.attention_out(torch.tanh(hidden)).squeeze(-1), dim=-1)
        context = torch.bmm(attention[:, None, :], states).squeeze(1)
        return self.output(torch.tanh(self.decoder_context(context) + self.decoder_query(query)))


def length_groups(split: Split) -> list[np.ndarray]:
    """Row indices of ``split`` grouped by (story, question) length."""
    keys = split.lengths.astype(np.int64) * 10_000 + split.lengths2
    return [np.flatnonzero(keys == key) for key in np.unique(keys)]


def tensors(split: Split, rows: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Story ids, question ids and labels of ``rows`` (all of one length), on ``device``."""
    length, length2 = int(split.lengths[rows[0]]), int(split.lengths2[rows[0]])
    return tuple(torch.from_numpy(a).to(device) for a in (split.tokens[rows, :length],
                                                           split.tokens2[rows, :length2], split.labels[rows]))


def reference_train(model: BareModel, data: StepData, epochs: int, device: torch.device, seed: int) -> list[float]:
    """Train ``epochs`` epochs (batches of 50 within a length, shuffled), validating after each under
    inference mode; returns the wall time at the end of each epoch (from the start)."""
    train, val = data.splits["train"], data.splits["val"]
    rng = np.random.default_rng(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, amsgrad=True)
    groups, val_groups = length_groups(train), length_groups(val)
    timer = Timer(device)
    start, stamps = timer.now(), []
    for _ in range(epochs):
        batches = [chunk for group in groups for chunk in np.array_split(rng.permutation(group),
                                                                         -(-len(group) // BATCH))]
        model.train()
        for i in rng.permutation(len(batches)):
            tokens, tokens2, labels = tensors(train, batches[i], device)
            logits = model(model.embedding(tokens), model.encode_question(tokens2))
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        model.eval()
        correct = 0
        with torch.inference_mode():
            for rows in val_groups:
                tokens, tokens2, labels = tensors(val, rows, device)
                correct += int((model(model.embedding(tokens), model.encode_question(tokens2)).argmax(-1)
                                == labels).sum())
        stamps.append(timer.now() - start)
    return stamps


def reference_ig(model: BareModel, split: Split, rows_per_pass: int, device: torch.device) -> np.ndarray:
    """``[N, L]`` IG-50 attributions (zero baseline, right Riemann sum, ``|mean grad . e|``), rows
    grouped by length, samples stacked into passes of about ``rows_per_pass`` rows."""
    out = np.zeros(split.tokens.shape, dtype=np.float32)
    scales = torch.arange(1, SAMPLES + 1, dtype=torch.float32, device=device) / SAMPLES
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    # cuDNN computes an LSTM's backward pass only in training mode (no dropout here: nothing else changes)
    model.story.train(device.type == "cuda")
    try:
        for group in length_groups(split):
            per_pass = max(1, rows_per_pass // SAMPLES)  # rows whose samples all fit one pass
            for start in range(0, len(group), per_pass):
                rows = group[start:start + per_pass]
                tokens, tokens2, labels = tensors(split, rows, device)
                with torch.no_grad():
                    embeddings = model.embedding(tokens)
                    query = model.encode_question(tokens2)
                n, m = len(rows), min(SAMPLES, max(1, rows_per_pass // len(rows)))
                total = torch.zeros_like(embeddings)
                for first in range(0, SAMPLES, m):
                    chunk = scales[first:first + m]
                    scaled = (chunk[:, None, None, None] * embeddings[None]).reshape(-1, *embeddings.shape[1:])
                    scaled.requires_grad_(True)
                    with torch.enable_grad():
                        logits = model(scaled, query.repeat(len(chunk), 1))
                        gold = logits.gather(1, labels.repeat(len(chunk))[:, None]).sum()
                        (grad,) = torch.autograd.grad(gold, scaled)
                    total += grad.reshape(len(chunk), n, *embeddings.shape[1:]).sum(0)
                scores = ((total / SAMPLES) * embeddings).sum(-1).abs()
                out[rows, : scores.shape[1]] = scores.cpu().numpy()
    finally:
        model.story.train(False)
        for parameter in model.parameters():
            parameter.requires_grad_(True)
    return out


# --- roar ------------------------------------------------------------------------------------------------------


def roar_train(data: StepData, epochs: int, device: torch.device, seed: int):
    """roar's training of a step for ``epochs`` epochs; returns the model and the wall time at the end of each
    epoch's validation (from the start) and in total."""
    from roar.models.training import TrainConfig, train

    config = TrainConfig(model="bilstm-attention", epochs=epochs, batch_size=BATCH, lr=LR, weight_decay=WEIGHT_DECAY,
                         embedding_dim=DIM, hidden=HIDDEN, attention_hidden=ATTENTION)
    timer = Timer(device)
    start, stamps = timer.now(), []
    model, _ = train(data.meta, data.vocab_size, data.splits, config, seed, progress=False, device=device,
                     on_epoch=lambda entry: stamps.append(timer.now() - start))
    return model, stamps, timer.now() - start


def roar_ig(model: BiLSTMAttention, split: Split, device: torch.device) -> np.ndarray:
    """roar's IG-50 importance of ``split`` as a chain step computes it (importance batch size 128)."""
    from roar.importance.base import compute_importance
    from roar.importance.integrated_gradient import IntegratedGradientImportance

    return compute_importance(IntegratedGradientImportance(SAMPLES), model.to(device), split, "bench", 128,
                              progress=False)


# --- the benchmark ---------------------------------------------------------------------------------------------


def per_epoch(stamps: list[float]) -> float:
    """Seconds per epoch from epoch 2 on (the first pays warm-up), or the first epoch's time."""
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1) if len(stamps) > 1 else stamps[0]


def run(args: argparse.Namespace) -> dict:
    """Time roar and the reference; returns the figures (also printed)."""
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    quiet_lightning()
    data = paper_babi1(args.n_train, args.n_test)
    train, val, test = (data.splits[name] for name in ("train", "val", "test"))
    classes = len(data.meta.classes)
    everything = concat([train, val, test])
    rng = np.random.default_rng(args.seed)
    ig_split = subset(everything, np.sort(rng.choice(len(everything), args.ig_rows, replace=False)))
    flops = lambda s: forward_flops(s.lengths, s.lengths2, classes)  # noqa: E731
    train_flops_epoch = 3 * flops(train).sum() + flops(val).sum()
    ig_flops = (SAMPLES * 2 * (flops(ig_split) - question_flops(ig_split.lengths2)) + question_flops(ig_split.lengths2))
    conditions = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({os.cpu_count()} cores)",
        "torch": torch.__version__, "threads": torch.get_num_threads(), "python": platform.python_version(),
        "rows": {"train": len(train), "val": len(val), "test": len(test), "ig": len(ig_split)},
        "mean_story_tokens": round(float(everything.lengths.mean()), 2),
        "mean_question_tokens": round(float(everything.lengths2.mean()), 2),
        "epochs_timed": args.epochs, "epochs_per_step": args.epochs_per_step, "ig_samples": SAMPLES,
        "reference_rows_per_pass": args.ref_rows,
        "forward_mflop_per_row": round(float(flops(everything).mean()) / 1e6, 3),
    }
    print("conditions: " + json.dumps(conditions))
    timer = Timer(device)

    # training: roar, then the reference from the same initial weights
    torch.manual_seed(args.seed)
    initial = BiLSTMAttention(data.vocab_size, classes, True, DIM, HIDDEN, ATTENTION)
    model, stamps, total = roar_train(data, args.epochs, device, args.seed)
    roar_epoch = per_epoch(stamps)
    roar_fixed = max(total - roar_epoch * len(stamps), 0.0)
    reference = BareModel(initial).to(device)
    ref_stamps = reference_train(reference, data, args.epochs, device, args.seed)
    ref_epoch = per_epoch(ref_stamps)

    # IG-50 on the trained roar model, roar and the reference (same weights) in turn, twice: the first round
    # pays oneDNN's/cuDNN's set-up of each new (rows, length) shape, which a whole step amortises; the
    # second (warm) round is the figure
    reference = BareModel(model.to(device)).to(device)
    cold = {}
    for round_ in ("cold", "warm"):
        start = timer.now()
        roar_scores = roar_ig(model, ig_split, device)
        roar_ig_s = timer.now() - start
        start = timer.now()
        ref_scores = reference_ig(reference, ig_split, args.ref_rows, device)
        ref_ig_s = timer.now() - start
        cold = cold or {"roar_ig_rows_per_s": len(ig_split) / roar_ig_s,
                        "reference_ig_rows_per_s": len(ig_split) / ref_ig_s}
    relative_diff = float(np.abs(roar_scores - ref_scores).max() / max(np.abs(ref_scores).max(), 1e-30))

    n_rows = len(everything)  # the step explains every row
    result = {"conditions": conditions, "ig_reference_vs_roar_max_relative_diff": relative_diff, "ig_cold_round": cold}
    for who, epoch_s, fixed_s, ig_s in (("roar", roar_epoch, roar_fixed, roar_ig_s),
                                        ("reference", ref_epoch, 0.0, ref_ig_s)):
        result[who] = {
            "train_rows_per_s": len(train) / epoch_s, "train_gflops": train_flops_epoch / epoch_s / 1e9,
            "train_epoch_s": epoch_s, "train_fixed_s": fixed_s,
            "ig_rows_per_s": len(ig_split) / ig_s, "ig_gflops": ig_flops.sum() / ig_s / 1e9,
            "train_step_s": fixed_s + args.epochs_per_step * epoch_s,
            "ig_step_s": n_rows * ig_s / len(ig_split),
        }
        result[who]["step_s"] = result[who]["train_step_s"] + result[who]["ig_step_s"]
    result["ratio_roar_over_reference"] = {key: result["roar"][key] / result["reference"][key]
                                           for key in ("train_step_s", "ig_step_s", "step_s")}
    print_result(result)
    return result


def print_result(result: dict) -> None:
    """A small table: one row per (part, who)."""
    print(f"{'':10s} {'part':6s} {'rows/s':>9s} {'GFLOP/s':>8s} {'per step (s, extrapolated)':>27s}")
    for who in ("roar", "reference"):
        r = result[who]
        print(f"{who:10s} {'train':6s} {r['train_rows_per_s']:9.0f} {r['train_gflops']:8.2f} {r['train_step_s']:27.1f}"
              f"   ({r['train_epoch_s']:.2f} s/epoch + {r['train_fixed_s']:.1f} s fixed)")
        print(f"{who:10s} {'IG-50':6s} {r['ig_rows_per_s']:9.1f} {r['ig_gflops']:8.2f} {r['ig_step_s']:27.1f}")
        print(f"{who:10s} {'step':6s} {'':9s} {'':8s} {r['step_s']:27.1f}")
    cold = result["ig_cold_round"]
    print(f"IG-50 first (cold) round: roar {cold['roar_ig_rows_per_s']:.1f} rows/s, reference "
          f"{cold['reference_ig_rows_per_s']:.1f} rows/s (the table shows the second, warm round)")
    ratio = result["ratio_roar_over_reference"]
    print(f"roar / reference time: train {ratio['train_step_s']:.2f}x, IG-50 {ratio['ig_step_s']:.2f}x, "
          f"step {ratio['step_s']:.2f}x; IG attributions, largest relative difference "
          f"{result['ig_reference_vs_roar_max_relative_diff']:.1e}")


def quiet_lightning() -> None:
    """Keep Lightning's banners out of the table."""
    import logging

    import lightning  # noqa: F401 (its import sets its loggers' levels: set them after it)

    for name in ("lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--quick", action="store_true", help="2 epochs and 300 IG rows (a minute or two on 2 cores)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (0: torch's default); 1, as a study runs one job per core: on "
                             "2 cores two 1-thread IG jobs gave 2.4-5x the rows/s of one 2-thread job")
    parser.add_argument("--epochs", type=int, default=3, help="training epochs timed (at least 2)")
    parser.add_argument("--epochs-per-step", type=float, default=10.0,
                        help="epochs a step trains, for the extrapolation (patience 5 after the best epoch)")
    parser.add_argument("--ig-rows", type=int, default=1500, help="rows of train+val+test explained (of 11,000)")
    parser.add_argument("--ref-rows", type=int, default=0,
                        help="reference IG rows per pass (0: 128 on the CPU, 16384 on a GPU)")
    parser.add_argument("--n-train", type=int, default=10_000, help="bAbI-1 training questions (paper: 10,000)")
    parser.add_argument("--n-test", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.ig_rows = 2, 300
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_step_throughput: --device cuda but torch sees no GPU")
    args.ref_rows = args.ref_rows or (16384 if args.device == "cuda" else 128)
    result = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
