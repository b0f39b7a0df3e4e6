"""Classification metrics by name (test metric and checkpoint-selection metric)."""

from __future__ import annotations

import torch

METRICS = ("accuracy", "macro-f1", "auroc")


def compute_metric(name: str, logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Score ``[N, C]`` logits against ``[N]`` gold labels.

    ``auroc`` is the binary AUROC of the class-1 probability (single-sequence binary tasks).
    """
    from torchmetrics.functional.classification import binary_auroc, multiclass_accuracy, multiclass_f1_score

    n_classes = logits.shape[1]
    if name == "accuracy":
        return float((logits.argmax(-1) == labels).float().mean())
    if name == "macro-f1":
        return float(multiclass_f1_score(logits.argmax(-1), labels, num_classes=n_classes, average="macro"))
    if name == "auroc":
        if n_classes != 2:
            return float(multiclass_accuracy(logits, labels, num_classes=n_classes, average="micro"))
        return float(binary_auroc(torch.softmax(logits.float(), -1)[:, 1], labels))
    raise ValueError(f"unknown metric {name!r}; allowed: {', '.join(METRICS)}")
