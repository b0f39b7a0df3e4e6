"""GPU check: one ROAR step of a BiLSTM and of a RoBERTa-base-shaped transformer on the GPU.

Run as ``python bench/gpu_check.py`` on a machine with a GPU (about 1-2 minutes on one modern
GPU; it must stay under 5). Without a GPU it prints one line saying so and what it would have
run, and exits 0. ``--device cpu --small`` runs the same code on the CPU with tiny models (a dry
run of the script itself; tests/unit/models/test_device.py runs both).

For each model, on small synthetic data made here (no download; the transformer is randomly
initialised with RoBERTa-base's shape and saved as a local checkpoint):

1. a ROAR step through the library: train (Lightning, the model's precision: bf16-mixed for the
   transformer, float32 for the BiLSTM), integrated gradients on every split with the device's
   default rows per pass, mask 10 %, train again on the masked data;
2. integrated gradients on one batch, samples stacked (the default) vs one pass per sample: the
   time ratio and the largest difference;
3. the same attributions on the CPU, to check the GPU path (the cuDNN LSTM in training mode);
4. a memory probe: one IG pass at the longest length (512 tokens for the transformer), its peak
   memory (``torch.cuda.max_memory_allocated``) per row against the model's estimate
   (``saved_floats_per_row``), and the rows per pass derived from free memory.

Prints one table row per model.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_integrated_gradients import timed  # noqa: E402

from roar.pipeline.chain import roar_step  # noqa: E402
from roar.data.storage import DatasetMeta, Split  # noqa: E402
from roar.importance.integrated_gradient import IntegratedGradientImportance  # noqa: E402
from roar.models.batching import make_batch  # noqa: E402
from roar.models.device import FLOAT_BYTES, max_rows_per_pass  # noqa: E402
from roar.models.training import TrainConfig, train, trainer_precision  # noqa: E402

MIB = 2 ** 20
START, END = 3, 4  # boundary ids: never masked (DatasetMeta.unmaskable_ids with padding 0)


@dataclass(frozen=True)
class Sizes:
    """How much each check runs."""

    n_train: int = 512
    n_eval: int = 128
    length: int = 60  # tokens of the first sequence
    length2: int = 0  # tokens of the second (0: single sequences)
    probe_length: int = 60  # the memory probe's sequence length
    probe_rows: int = 64  # examples in the memory probe
    samples: int = 20  # IG samples
    compare_rows: int = 64  # examples of the batched vs sequential comparison
    cpu_rows: int = 4  # examples of the GPU vs CPU comparison
    vocab: int = 40
    classes: int = 4


@dataclass(frozen=True)
class Check:
    """One model's check: its training settings, data sizes and (transformer) HF config."""

    name: str
    config: TrainConfig
    sizes: Sizes
    hf_config: dict | None = None


BILSTM = Check("bilstm-attention (bAbI-like pairs)",
               TrainConfig(model="bilstm-attention", epochs=1, batch_size=32, lr=3e-3, embedding_dim=50, hidden=32,
                           attention_hidden=32),
               Sizes(n_train=1024, n_eval=256, length=60, length2=5, probe_length=1000, probe_rows=256,
                     samples=50, compare_rows=128, vocab=40))
ROBERTA = Check("roberta-base shape (random init)",
                TrainConfig(model="roberta", epochs=1, batch_size=16, lr=2e-5, weight_decay=0.01),
                Sizes(n_train=256, n_eval=64, length=128, probe_length=512, probe_rows=16, samples=20,
                      compare_rows=32, vocab=1000),
                {"model_type": "roberta", "vocab_size": 1000, "max_position_embeddings": 514, "pad_token_id": 1,
                 "bos_token_id": 0, "eos_token_id": 2, "type_vocab_size": 1})
TINY = Sizes(n_train=64, n_eval=16, length=12, length2=3, probe_length=24, probe_rows=4, samples=4, compare_rows=8,
             cpu_rows=2, vocab=30)
SMALL = (replace(BILSTM, config=replace(BILSTM.config, embedding_dim=8, hidden=8, attention_hidden=8), sizes=TINY),
         replace(ROBERTA, sizes=replace(TINY, length2=0, vocab=60),
                 hf_config={**ROBERTA.hf_config, "vocab_size": 60, "hidden_size": 16, "num_hidden_layers": 2,
                            "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 64}))


def synthetic_split(rng: np.random.Generator, n: int, s: Sizes, length: int | None = None) -> Split:
    """``n`` examples of ``length`` tokens (START ... END); the label's token (5 + label) sits at a
    random position among random filler tokens, so the data can be learnt and explained."""
    length = length or s.length
    labels = rng.integers(0, s.classes, size=n)
    tokens = rng.integers(5 + s.classes, s.vocab, size=(n, length))
    tokens[:, 0], tokens[:, -1] = START, END
    tokens[np.arange(n), rng.integers(1, length - 1, size=n)] = 5 + labels
    second = rng.integers(5, s.vocab, size=(n, s.length2)).tolist() if s.length2 else None
    return Split.from_lists(tokens.tolist(), labels.tolist(), second)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_mib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / MIB if device.type == "cuda" else float("nan")


def reset_peak(device: torch.device) -> int:
    """Start a peak-memory window; returns the bytes allocated now (0 on the CPU)."""
    if device.type != "cuda":
        return 0
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def run_check(check: Check, device: torch.device, workdir: Path) -> dict:
    """Train, explain, mask and retrain once; compare IG batched vs sequential and GPU vs CPU; probe memory."""
    s, config = check.sizes, check.config
    rng = np.random.default_rng(0)
    splits = {"train": synthetic_split(rng, s.n_train, s), "val": synthetic_split(rng, s.n_eval, s),
              "test": synthetic_split(rng, s.n_eval, s)}
    meta = DatasetMeta(name="synthetic", classes=[str(c) for c in range(s.classes)], paired=s.length2 > 0,
                       metric="accuracy", select_metric="accuracy", mask_id=2, unmaskable_ids=(0, START, END))
    if check.hf_config is not None:
        from transformers import AutoConfig, AutoModelForSequenceClassification

        checkpoint = workdir / "checkpoint"
        torch.manual_seed(0)
        hf_config = AutoConfig.for_model(**check.hf_config, num_labels=s.classes)
        AutoModelForSequenceClassification.from_config(hf_config).save_pretrained(checkpoint)
        config = replace(config, checkpoint=str(checkpoint))
        meta = replace(meta, tokenizer=str(checkpoint))
    row = {"model": check.name, "device": device.type}

    # 1. a ROAR step: train, IG on every split, mask 10 %, train on the masked data
    base = reset_peak(device)
    start = time.perf_counter()
    model, result = train(meta, s.vocab, splits, config, seed=0, progress=False, device=device)
    row["precision"] = trainer_precision(model, device)
    row["train_s"] = time.perf_counter() - start
    row["train_peak_mib"] = peak_mib(device)
    model = model.to(device).eval()
    measure = IntegratedGradientImportance(s.samples)
    base = reset_peak(device)
    masked, _, row["importance_s"] = roar_step(splits, model, measure, 10, "quantile", batch_size=128,
                                               progress=False, meta=meta)
    row["importance_peak_mib"] = peak_mib(device)
    start = time.perf_counter()
    train(meta, s.vocab, masked, config, seed=0, progress=False, device=device)
    row["retrain_s"] = time.perf_counter() - start
    row["test_accuracy"] = result.test_metric

    # 2. batched vs sequential IG on one batch (the bench's timing helper)
    batch = make_batch(splits["test"], np.arange(min(s.compare_rows, s.n_eval))).to(device)
    batched_out, t_batched, _ = timed(IntegratedGradientImportance(s.samples), model, batch, 2, device.type)
    sequential_out, t_sequential, _ = timed(IntegratedGradientImportance(s.samples, batched=False), model, batch, 2,
                                            device.type)
    row["ig_sequential_over_batched"] = t_sequential / t_batched
    scale = float(sequential_out.abs().max())
    row["ig_batched_diff"] = float((batched_out - sequential_out).abs().max()) / scale

    # 3. the same attributions on the CPU
    few = make_batch(splits["test"], np.arange(s.cpu_rows))
    on_device = IntegratedGradientImportance(s.samples).attribute(model, few.to(device), few.rows, "test").cpu()
    cpu_model = model.to("cpu")
    on_cpu = IntegratedGradientImportance(s.samples).attribute(cpu_model, few, few.rows, "test")
    model = cpu_model.to(device)
    row["device_vs_cpu_diff"] = float((on_device - on_cpu).abs().max()) / float(on_cpu.abs().max())

    # 4. memory probe: one IG pass at the longest length
    probe = make_batch(synthetic_split(np.random.default_rng(1), s.probe_rows, s, s.probe_length),
                       np.arange(s.probe_rows)).to(device)
    length2 = 0 if probe.tokens2 is None else probe.tokens2.shape[1]
    per_row = FLOAT_BYTES * model.saved_floats_per_row(probe.tokens.shape[1], length2)
    rows_per_pass = max_rows_per_pass(model, probe.tokens.shape[1], length2, device)
    samples = max(1, min(s.samples, rows_per_pass // s.probe_rows))  # one pass, within the derived budget
    base = reset_peak(device)
    sync(device)
    start = time.perf_counter()
    row["probe"] = f"{s.probe_rows}x{samples} rows at {probe.tokens.shape[1] + length2} tokens"
    row["rows_per_pass"] = rows_per_pass
    row["estimate_mib_per_row"] = per_row / MIB
    try:
        IntegratedGradientImportance(samples, max_rows=samples * s.probe_rows).attribute(model, probe, probe.rows, "p")
    except torch.OutOfMemoryError:  # the estimate was too low: say so in the table
        row["probe"] += " OUT OF MEMORY"
        return row
    sync(device)
    row["probe_s"] = time.perf_counter() - start
    if device.type == "cuda":
        measured = (torch.cuda.max_memory_allocated(device) - base) / (samples * s.probe_rows)
        row["measured_mib_per_row"] = measured / MIB
        row["estimate_over_measured"] = per_row / measured
    return row


COLUMNS = (("model", "{}"), ("precision", "{}"), ("train_s", "{:.1f}"), ("importance_s", "{:.1f}"),
           ("retrain_s", "{:.1f}"), ("train_peak_mib", "{:.0f}"), ("importance_peak_mib", "{:.0f}"),
           ("ig_sequential_over_batched", "{:.2f}x"), ("ig_batched_diff", "{:.1e}"), ("device_vs_cpu_diff", "{:.1e}"),
           ("probe", "{}"), ("probe_s", "{:.2f}"), ("rows_per_pass", "{}"), ("estimate_mib_per_row", "{:.2f}"),
           ("measured_mib_per_row", "{:.2f}"), ("estimate_over_measured", "{:.2f}"))


def print_table(rows: list[dict]) -> None:
    """One line per quantity, one column per check (values missing on the CPU print as -)."""
    lines = [["", *(row["model"] for row in rows)]]
    for name, fmt in COLUMNS[1:]:
        lines.append([name, *(fmt.format(row[name]) if name in row and row[name] == row[name] else "-"
                              for row in rows)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    for line in lines:
        print("  ".join([line[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(line[1:], widths[1:],
                                                                                    strict=True))]))


def quiet() -> None:
    """Keep Lightning's and Hugging Face's banners and progress bars out of the table."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import lightning  # noqa: F401 (its import sets its loggers' levels: set them after it)

    for name in ("lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cuda (default; without a GPU the script says so and exits 0) or cpu (a dry run)")
    parser.add_argument("--small", action="store_true", help="tiny models and data (for a dry run)")
    args = parser.parse_args(argv)
    checks = SMALL if args.small else (BILSTM, ROBERTA)
    plan = "; ".join(f"{c.name}: train + IG ({c.sizes.samples} samples) + mask + retrain, IG batched vs sequential, "
                     f"memory probe at {c.sizes.probe_length + c.sizes.length2} tokens" for c in checks)
    if args.device == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
        print(f"gpu_check: no GPU (torch.cuda.is_available() is False; torch {torch.__version__}, {build}); "
              f"nothing run. On a GPU it would run: {plan}")
        return 0
    device = torch.device(args.device)
    quiet()
    if device.type == "cuda":
        print(f"gpu_check: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
              f"{torch.cuda.mem_get_info(device)[0] / 2 ** 30:.1f} GiB free")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="roar-gpu-check-") as tmp:
        rows = [run_check(check, device, Path(tmp)) for check in checks]
    print_table(rows)
    print(f"gpu_check: done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
