"""Benchmark: batched vs sequential integrated gradients on a quick-study-sized BiLSTM-attention.

Run as ``python bench/bench_integrated_gradients.py [--device cpu|cuda] [--repeats N] [--threads N]``.

Builds the paired BiLSTM-attention of the quick bAbI study (vocabulary 26, embedding 50, hidden
32, attention hidden 32, 6 classes) with random weights, a random bAbI-like batch (128 stories of
length ~60 with [START]/[END], questions of 5 tokens), checks that the batched computation
(samples stacked along the batch axis, ``max_rows`` per pass) gives the sequential one's
importance (one pass per sample) to 1e-5, and times both (median of a few repeats).

On CPU it uses one intra-op thread unless ``--threads`` says otherwise: these small LSTM
kernels gain little from threads, and on a machine busy with other work extra threads slow
them down by an order of magnitude (spinning), which would make the figures meaningless.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from roar.data.tokenize import END_ID, START_ID
from roar.importance.integrated_gradient import IntegratedGradientImportance
from roar.models.batching import Batch
from roar.models.bilstm import BiLSTMAttention

VOCAB, CLASSES, BATCH, QUESTION = 26, 6, 128, 5


def make_batch(seed: int, device: str) -> Batch:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 71, size=BATCH)  # ~60 tokens, START and END included
    tokens = np.zeros((BATCH, lengths.max()), dtype=np.int64)
    for i, n in enumerate(lengths):
        tokens[i, :n] = np.r_[START_ID, rng.integers(5, VOCAB, size=n - 2), END_ID]
    tokens2 = rng.integers(5, VOCAB, size=(BATCH, QUESTION))
    labels = rng.integers(0, CLASSES, size=BATCH)
    return Batch(torch.from_numpy(tokens), torch.from_numpy(lengths), torch.from_numpy(tokens2),
                 torch.full((BATCH,), QUESTION), torch.from_numpy(labels), np.arange(BATCH)).to(device)


def timed(measure: IntegratedGradientImportance, model, batch: Batch, repeats: int, device: str):
    times, out = [], None
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = measure.attribute(model, batch, batch.rows, "test")
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times), times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--max-rows", type=int, nargs="+", default=[0, 1024, 4096],
                        help="rows per pass to compare (0: the library's device default)")
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    model = BiLSTMAttention(VOCAB, CLASSES, paired=True, embedding_dim=50, hidden=32,
                            attention_hidden=32).to(args.device).eval()
    batch = make_batch(0, args.device)
    print(f"device {args.device}, torch {torch.__version__}, threads {torch.get_num_threads()}; batch {BATCH}, "
          f"story length {int(batch.lengths.min())}-{int(batch.lengths.max())}, question {QUESTION}, "
          f"IG samples {args.samples}")

    sequential = IntegratedGradientImportance(args.samples, batched=False)
    timed(IntegratedGradientImportance(2), model, batch, 1, args.device)  # warm-up
    out_s, t_s, all_s = timed(sequential, model, batch, args.repeats, args.device)
    print(f"sequential (one pass per sample): median {t_s:.3f} s ({BATCH / t_s:8.1f} examples/s) "
          f"runs {[round(t, 3) for t in all_s]}")
    real = torch.arange(batch.tokens.shape[1], device=batch.tokens.device)[None, :] < batch.lengths[:, None]
    scale = float(out_s[real].abs().max())
    worst = 0.0
    for max_rows in args.max_rows:
        batched = IntegratedGradientImportance(args.samples, max_rows or None, batched=True)
        out_b, t_b, all_b = timed(batched, model, batch, args.repeats, args.device)
        diff = float((out_b - out_s)[real].abs().max())
        worst = max(worst, diff)
        label = f"{max_rows}" if max_rows else "default"
        print(f"batched, max_rows {label:>7}: median {t_b:.3f} s ({BATCH / t_b:8.1f} examples/s) "
              f"speed ratio batched/sequential {t_s / t_b:.2f}x, max |diff| {diff:.1e} "
              f"(largest importance {scale:.1e})")
    if worst > 1e-5:
        raise SystemExit(f"batched and sequential integrated gradients differ by {worst:.3e} > 1e-5")

if __name__ == "__main__":
    main()
