"""One worker of paper-settings bAbI-1 Recursive ROAR steps (integrated gradients), for a time budget.

Run as ``PYTHONPATH=src python bench/gpu_chain_steps.py --worker I --seconds S --out steps.jsonl``;
bench/gpu_session.sh starts several at once on one GPU. It runs what a chain of studies/paper-babi-1
runs, through roar's library and in memory (no MLflow, DVC or dataset files, so it needs none of
them): prepare bAbI-1 (generated), train the k = 0 model (paper settings: batch 50, lr 1e-3, up to
100 epochs, patience 5), then steps k = 10, 20, ...: IG-50 importance on train+val+test with the
previous model, mask up to k, train a fresh model. Each finished part appends one JSON line to
``--out`` at once (a budget cut short still leaves every finished step): seconds, epochs, rows/s,
test accuracy and peak GPU memory (``torch.cuda.max_memory_allocated``). A step that would start
after the budget is not started.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step_throughput import (ATTENTION, BATCH, DIM, HIDDEN, LR, WEIGHT_DECAY, paper_babi1,  # noqa: E402
                                   quiet_lightning)

from roar.pipeline.chain import roar_step  # noqa: E402
from roar.importance.integrated_gradient import IntegratedGradientImportance  # noqa: E402
from roar.models.training import TrainConfig, train  # noqa: E402

CONFIG = TrainConfig(model="bilstm-attention", epochs=100, patience=5, batch_size=BATCH, lr=LR,
                     weight_decay=WEIGHT_DECAY, embedding_dim=DIM, hidden=HIDDEN, attention_hidden=ATTENTION)


def peak_mib(device: torch.device) -> float | None:
    """Peak allocated GPU memory since the last reset, in MiB (None on the CPU); resets it."""
    if device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated(device) / 2 ** 20
    torch.cuda.reset_peak_memory_stats(device)
    return round(peak, 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=int, default=0, help="worker number (also the chain's seed)")
    parser.add_argument("--seconds", type=float, default=150.0, help="budget: no step starts after it")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads of this process")
    parser.add_argument("--n-train", type=int, default=10_000, help="bAbI-1 training questions (paper: 10,000)")
    parser.add_argument("--n-test", type=int, default=1_000)
    parser.add_argument("--epochs", type=int, default=CONFIG.epochs, help="most training epochs (paper: 100)")
    parser.add_argument("--samples", type=int, default=50, help="IG samples (paper: 50)")
    parser.add_argument("--out", required=True, help="JSON lines file to append to")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    quiet_lightning()
    device = torch.device(args.device)
    config = TrainConfig(**{**CONFIG.params(), "epochs": args.epochs})
    data = paper_babi1(args.n_train, args.n_test)
    n_rows = sum(len(s) for s in data.splits.values())
    seed = args.worker

    def record(entry: dict) -> None:
        entry = {"worker": args.worker, "seed": seed, "device": args.device,
                 "t_end_s": round(time.perf_counter() - start, 2), **entry}
        with open(args.out, "a") as f:
            f.write(json.dumps(entry) + "\n")

    peak_mib(device)
    model, result = train(data.meta, data.vocab_size, data.splits, config, seed, progress=False, device=device)
    record({"part": "train", "k": 0, "seconds": round(result.seconds, 2), "epochs": len(result.history),
            "best_epoch": result.best_epoch, "test_accuracy": result.test_metric,
            "train_rows_per_s": round(len(data.splits["train"]) * len(result.history) / result.seconds, 1),
            "peak_mib": peak_mib(device)})
    splits, measure = data.splits, IntegratedGradientImportance(args.samples)
    for k in range(10, 100, 10):
        if time.perf_counter() - start > args.seconds:
            break
        model = model.to(device).eval()
        splits, _, importance_s = roar_step(splits, model, measure, k, "quantile", batch_size=128, progress=False,
                                            meta=data.meta)
        record({"part": "importance", "k": k, "seconds": round(importance_s, 2), "rows": n_rows,
                "ig_rows_per_s": round(n_rows / importance_s, 1), "peak_mib": peak_mib(device)})
        model, result = train(data.meta, data.vocab_size, splits, config, seed, progress=False, device=device)
        record({"part": "train", "k": k, "seconds": round(result.seconds, 2), "epochs": len(result.history),
                "best_epoch": result.best_epoch, "test_accuracy": result.test_metric,
                "train_rows_per_s": round(len(splits["train"]) * len(result.history) / result.seconds, 1),
                "peak_mib": peak_mib(device), "step_s": round(importance_s + result.seconds, 2)})


if __name__ == "__main__":
    main()
