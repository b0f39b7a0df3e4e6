"""Benchmark: what training several seeds' models in one batched pass could gain on this CPU.

Run as ``PYTHONPATH=src python bench/bench_batch_scaling.py [--threads 1] [--steps 40]``.

Issue 22 proposed training the five seeds of a step together (``torch.func.stack_module_state`` +
``vmap``): each model's training unchanged, the matrices five times as large, the per-operation
overhead paid once. That pays only where a batch of 50 rows is overhead-bound. Stacking N models of
batch 50 does the arithmetic of one model on a batch of 50 N rows, so the per-row cost of a training
step (forward, backward, Adam) at 50 N rows bounds what stacking can reach from below. This times
roar's paper-settings bAbI-1 model (BiLSTM-attention, hidden 32, 50-d embeddings) on the generated
bAbI-1 training rows, batches drawn uniformly (the official schedule), at 50, 100, 250 and 500 rows
per batch in one process, interleaved over rounds so that a busy machine slows every size alike, and
prints the per-row time and the ceiling ratio against batches of 50.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch

from bench_step_throughput import ATTENTION, DIM, HIDDEN, LR, WEIGHT_DECAY, paper_babi1
from roar.models.bilstm import BiLSTMAttention

SIZES = (50, 100, 250, 500)


def batches(split, size: int, count: int, rng: np.random.Generator) -> list[tuple[torch.Tensor, ...]]:
    """``count`` batches of ``size`` rows drawn uniformly, each padded to its own longest story and question."""
    out = []
    for _ in range(count):
        rows = rng.choice(len(split.labels), size, replace=False)
        width, width2 = int(split.lengths[rows].max()), int(split.lengths2[rows].max())
        out.append((torch.from_numpy(split.tokens[rows, :width]), torch.from_numpy(split.lengths[rows]),
                    torch.from_numpy(split.tokens2[rows, :width2]), torch.from_numpy(split.lengths2[rows]),
                    torch.from_numpy(split.labels[rows])))
    return out


def step_seconds(model: BiLSTMAttention, optimizer: torch.optim.Optimizer, data: list) -> float:
    """Seconds per training step (forward, cross-entropy, backward, Adam) over ``data``."""
    start = time.perf_counter()
    for tokens, lengths, tokens2, lengths2, labels in data:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tokens, lengths, tokens2, lengths2).logits, labels)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=40, help="training steps per size and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = paper_babi1()
    train = data.splits["train"]
    model = BiLSTMAttention(data.vocab_size, len(data.meta.classes), True, DIM, HIDDEN, ATTENTION)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY, amsgrad=True)
    rng = np.random.default_rng(0)
    per_row = {size: [] for size in SIZES}
    step_seconds(model, optimizer, batches(train, 50, 5, rng))  # warm-up
    for _ in range(args.rounds):
        for size in SIZES:
            per_row[size].append(step_seconds(model, optimizer, batches(train, size, args.steps, rng)) / size)
    load = os.getloadavg()[0]
    print(f"# {args.threads} thread(s), {args.steps} steps x {args.rounds} rounds per size, load {load:.2f}; "
          "median over rounds")
    print(f"{'rows/batch':>10} {'ms/step':>8} {'us/row':>7} {'ceiling vs 50':>13}")
    base = float(np.median(per_row[50]))
    for size in SIZES:
        row = float(np.median(per_row[size]))
        print(f"{size:>10} {row * size * 1e3:>8.2f} {row * 1e6:>7.1f} {base / row:>12.2f}x")


if __name__ == "__main__":
    main()
