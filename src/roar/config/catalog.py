"""The model families, importance measures and masking strategies the library knows: their names,
what each offers or needs, and where its code lives (``module:attribute``, imported only when used).

Plain data: no torch and no importlib here, so that the params schema, the CLI's name checks and
the planner read these tables cheaply, and so that a step's code fingerprint (:mod:`roar.pipeline.provenance`)
holds only the measure it runs. A new model family or measure is one module plus one line below.
"""

from __future__ import annotations

from dataclasses import dataclass

# How prepare tokenizes for a family: our word vocabulary built from the training split, or the
# tokenizer of the HF checkpoint in train.<model>.<dataset>.checkpoint (roar.data.prepare).
ENCODINGS = ("word", "checkpoint")
# What a family can offer to measures and to training:
#   attention     the forward pass returns attention weights over the first sequence
#   paired        it takes a second sequence (SNLI, bAbI)
#   word-vectors  its embeddings can start from pretrained word vectors (train.<m>.<d>.embeddings)
CAPABILITIES = ("attention", "paired", "word-vectors")


@dataclass(frozen=True)
class ModelFamily:
    """A model family.

    Attributes:
        name: the model's name in params.yaml and on the command line.
        encoding: one of :data:`ENCODINGS`.
        builder: ``module:function`` with the signature of :func:`roar.models.registry.build_model`
            (``meta, vocab_size, config, architecture``) returning a fresh
            :class:`~roar.models.base.Classifier`.
        capabilities: a subset of :data:`CAPABILITIES`.
    """

    name: str
    encoding: str
    builder: str
    capabilities: frozenset[str]

    def supports(self, capability: str) -> bool:
        return capability in self.capabilities


MODEL_FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (
    ModelFamily("bilstm-attention", "word", "roar.models.bilstm:build",
                frozenset({"attention", "paired", "word-vectors"})),
    ModelFamily("roberta", "checkpoint", "roar.models.transformer:build", frozenset({"paired"})),
)}
MODELS = tuple(MODEL_FAMILIES)

# Each measure's class (``module:Class``), imported by name when the measure is used (the class declares
# its parameters: roar.importance.base.ImportanceMeasure), and the model-family capabilities it needs
# (read here without importing the measure, so that the report stage does not run measure code).
MEASURES_BY_NAME: dict[str, str] = {
    "random": "roar.importance.random:RandomImportance",
    "attention": "roar.importance.attention:AttentionImportance",
    "gradient": "roar.importance.gradient:GradientImportance",
    "input-x-gradient": "roar.importance.input_x_gradient:InputXGradientImportance",
    "integrated-gradient": "roar.importance.integrated_gradient:IntegratedGradientImportance",
    "mutual-information": "roar.importance.mutual_information:MutualInformationImportance",
    "occlusion": "roar.importance.occlusion:OcclusionImportance",
    "kernel-shap": "roar.importance.kernel_shap:KernelShapImportance",
}
MEASURE_REQUIRES: dict[str, frozenset[str]] = {"attention": frozenset({"attention"})}  # the rest need none
MEASURES = tuple(MEASURES_BY_NAME)

# Masking strategies (roar.method.masking): k percent of each example's maskable tokens, or k tokens.
STRATEGIES = ("quantile", "count")


def model_family(name: str) -> ModelFamily:
    """The family called ``name``, or a one-line error listing the known ones."""
    if name not in MODEL_FAMILIES:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    return MODEL_FAMILIES[name]


def measure_target(name: str) -> str:
    """``module:Class`` of the measure ``name``, or a one-line error listing the known ones."""
    if name not in MEASURES_BY_NAME:
        raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
    return MEASURES_BY_NAME[name]


def measure_module(name: str) -> str:
    """The module that implements the measure ``name`` (what its steps' code fingerprint holds)."""
    return measure_target(name).partition(":")[0]


def measure_requires(name: str) -> frozenset[str]:
    """The capabilities (:data:`CAPABILITIES`) a model family needs for the measure ``name``."""
    measure_target(name)
    return MEASURE_REQUIRES.get(name, frozenset())


def check_supported(measure: str, model: str) -> None:
    """Raise a one-line error if ``measure`` needs a capability that the family ``model`` lacks, e.g.
    attention weights."""
    needs = measure_requires(measure)
    missing = sorted(needs - model_family(model).capabilities)
    if missing:
        having = [f.name for f in MODEL_FAMILIES.values() if needs <= f.capabilities]
        raise ValueError(f"importance measure {measure!r} is not defined for model {model!r}: it needs "
                         f"{', '.join(missing)}, which {model} lacks; models with it: {', '.join(having) or 'none'}")
