"""Importance measures, one module each, behind one registry (:func:`make_measure`)."""

from __future__ import annotations

from roar.data.storage import Split

MEASURES = ("random", "attention", "gradient", "input-x-gradient", "integrated-gradient", "mutual-information")


def check_supported(measure: str, model: str) -> None:
    """Raise a one-line error if ``measure`` is not defined for ``model`` (attention needs the
    BiLSTM's attention layer; the transformer has none)."""
    if measure == "attention" and model != "bilstm-attention":
        raise ValueError(f"importance measure 'attention' is not defined for model {model!r}: only "
                         "bilstm-attention has an attention layer to read")


def make_measure(name: str, *, seed: int = 0, train_split: Split | None = None, vocab_size: int = 0,
                 n_classes: int = 0, ig_samples: int = 50, ig_max_rows: int | None = None):
    """The importance measure called ``name``, configured.

    Args:
        name: one of :data:`MEASURES`.
        seed: seed of ``random``.
        train_split, vocab_size, n_classes: the training data that ``mutual-information`` counts.
        ig_samples, ig_max_rows: Riemann samples and memory budget of ``integrated-gradient``.
    """
    if name == "random":
        from roar.importance.random import RandomImportance

        return RandomImportance(seed)
    if name == "attention":
        from roar.importance.attention import AttentionImportance

        return AttentionImportance()
    if name == "gradient":
        from roar.importance.gradient import GradientImportance

        return GradientImportance()
    if name == "input-x-gradient":
        from roar.importance.input_x_gradient import InputXGradientImportance

        return InputXGradientImportance()
    if name == "integrated-gradient":
        from roar.importance.integrated_gradient import IntegratedGradientImportance

        return IntegratedGradientImportance(ig_samples, ig_max_rows)
    if name == "mutual-information":
        from roar.importance.mutual_information import MutualInformationImportance

        if train_split is None:
            raise ValueError("mutual-information needs the training split")
        return MutualInformationImportance(train_split, vocab_size, n_classes)
    raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
