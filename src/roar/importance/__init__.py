"""Importance measures, one module each; their names here, the registry that builds them in
:mod:`roar.importance.registry` (imported only where a measure is computed)."""

from __future__ import annotations

# Each measure's module, imported by name when the measure is used (so that a stage's code
# fingerprint holds only the measure it runs; see roar.provenance).
MEASURE_MODULES = {"random": "roar.importance.random", "attention": "roar.importance.attention",
                   "gradient": "roar.importance.gradient", "input-x-gradient": "roar.importance.input_x_gradient",
                   "integrated-gradient": "roar.importance.integrated_gradient",
                   "mutual-information": "roar.importance.mutual_information",
                   "occlusion": "roar.importance.occlusion", "kernel-shap": "roar.importance.kernel_shap"}
MEASURES = tuple(MEASURE_MODULES)


def check_supported(measure: str, model: str) -> None:
    """Raise a one-line error if ``measure`` is not defined for ``model`` (attention needs the
    BiLSTM's attention layer; the transformer has none)."""
    if measure == "attention" and model != "bilstm-attention":
        raise ValueError(f"importance measure 'attention' is not defined for model {model!r}: only "
                         "bilstm-attention has an attention layer to read")
