"""The model families, importance measures and masking strategies the library knows: one spec each,
holding every fact of it (what it offers or needs, its options, cost, colour, end point, axis label)
and where its code lives (``module:attribute``, imported only when used).

Plain data: no torch and no importlib here, so that the params schema, the CLI's name checks, the
planner and the report read these specs cheaply, and so that a step's code fingerprint
(:mod:`roar.pipeline.provenance`) holds only the measure it runs. A new model family or measure is
one module plus one spec below; a new strategy is one spec plus its masking rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from roar.config.rules import Rule, integer, one_of

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

# The class a measure with ``explains_class`` explains (``importance.target``): the gold label (the
# paper), or the class the model predicts (cannot put the gold label into the mask pattern; see
# docs/results.md, "The label leak").
TARGETS = ("gold", "predicted")


# importance.integrated-gradient.weighting: textbook IG (roar's default), or the official code's, which
# weights each Riemann term by its scale i/n (roar.importance.integrated_gradient).
IG_WEIGHTINGS = ("textbook", "official")


def _coalition_pairs(value: object) -> str | None:
    """KernelSHAP's ``samples``: coalitions are drawn in complementary pairs, so an even count."""
    return integer(2)(value) or (None if value % 2 == 0 else "must be an even integer >= 2 "
                                 "(coalitions come in complementary pairs)")


@dataclass(frozen=True)
class MeasureSpec:
    """An importance measure: everything the library knows of it without importing its code.

    Attributes:
        name: the measure's name in params.yaml, on the command line and in the reports.
        target: ``module:Class`` implementing it (:class:`roar.importance.base.ImportanceMeasure`),
            imported by name only where the measure is computed.
        needs_model: whether it reads the model (else the chain loads none).
        explains_class: whether it explains the logit of one class (:data:`TARGETS`).
        requires: the model-family capabilities (:data:`CAPABILITIES`) it needs.
        options: a rule per key of ``importance.<name>`` it reads (besides the free-form ``note``).
        cost_rank: its chains' cost among the measures, 0 the costliest (local waves start those first).
        color, linestyle: its line in the report figures (None: matplotlib's solid line).
        timed_as: the measure whose calibrated rate stands for this one's (``roar plan --calibrate``).
        timed_as_on: the model families where ``timed_as`` applies (None: every family).
    """

    name: str
    target: str
    needs_model: bool
    explains_class: bool
    cost_rank: int
    color: str
    linestyle: str | None = None
    requires: frozenset[str] = frozenset()
    options: dict[str, Rule] = field(default_factory=dict)
    timed_as: str | None = None
    timed_as_on: frozenset[str] | None = None

    @property
    def module(self) -> str:
        """The module that implements it (what its steps' code fingerprint holds)."""
        return self.target.partition(":")[0]

    @property
    def style(self) -> dict[str, str]:
        """Its matplotlib line keywords."""
        return {"color": self.color} | ({"linestyle": self.linestyle} if self.linestyle else {})

    def timed_on(self, model: str) -> str:
        """The measure whose calibrated rate stands for this one's on the family ``model``."""
        applies = self.timed_as_on is None or model in self.timed_as_on
        return self.timed_as if self.timed_as and applies else self.name


MEASURE_SPECS: dict[str, MeasureSpec] = {m.name: m for m in (
    MeasureSpec("random", "roar.importance.random:RandomImportance", needs_model=False, explains_class=False,
                cost_rank=7, color="black", linestyle="--"),  # the baseline: drawn distinct
    MeasureSpec("attention", "roar.importance.attention:AttentionImportance", needs_model=True,
                explains_class=False, cost_rank=5, color="tab:blue", requires=frozenset({"attention"})),
    MeasureSpec("gradient", "roar.importance.gradient:GradientImportance", needs_model=True, explains_class=True,
                cost_rank=3, color="tab:orange"),
    MeasureSpec("gradient-l1", "roar.importance.gradient_l1:GradientL1Importance", needs_model=True,
                explains_class=True, cost_rank=3, color="tab:olive", timed_as="gradient"),
    MeasureSpec("input-x-gradient", "roar.importance.input_x_gradient:InputXGradientImportance", needs_model=True,
                explains_class=True, cost_rank=4, color="tab:green", timed_as="gradient"),
    # On the transformer, IG's stacked samples cost ~0.6 of a gradient pass each on bAbI-1 (an upper
    # bound there); the BiLSTM's IG is timed with a few samples of its own.
    MeasureSpec("integrated-gradient", "roar.importance.integrated_gradient:IntegratedGradientImportance",
                needs_model=True, explains_class=True, cost_rank=1, color="tab:red",
                options={"samples": integer(1), "max_rows": integer(1, nullable=True),
                         "weighting": one_of(IG_WEIGHTINGS)},
                timed_as="gradient", timed_as_on=frozenset({"roberta"})),
    MeasureSpec("mutual-information", "roar.importance.mutual_information:MutualInformationImportance",
                needs_model=False, explains_class=False, cost_rank=6, color="tab:purple"),
    MeasureSpec("occlusion", "roar.importance.occlusion:OcclusionImportance", needs_model=True, explains_class=True,
                cost_rank=2, color="tab:brown", options={"max_rows": integer(1, nullable=True)}),
    MeasureSpec("kernel-shap", "roar.importance.kernel_shap:KernelShapImportance", needs_model=True,
                explains_class=True, cost_rank=0, color="tab:pink",
                options={"samples": _coalition_pairs, "max_rows": integer(1, nullable=True)}),
)}
MEASURES = tuple(MEASURE_SPECS)


@dataclass(frozen=True)
class StrategySpec:
    """A masking strategy (its masking rule: :data:`roar.method.masking.MASKING_RULES`).

    Attributes:
        name: the strategy's name (``study.strategy``).
        unit: what k counts, for messages.
        end_k: the largest k, where every maskable token is masked: a point shared by every measure,
            not a step (None: k is unbounded and there is no such point).
        axis_label: the x-axis label of curves over k.
    """

    name: str
    unit: str
    end_k: int | None
    axis_label: str


STRATEGY_SPECS: dict[str, StrategySpec] = {s.name: s for s in (
    StrategySpec("quantile", "percent of each example's maskable tokens", 100, "masked tokens (%)"),
    StrategySpec("count", "tokens", None, "masked tokens"),
)}
STRATEGIES = tuple(STRATEGY_SPECS)
# study.masking_count: how many tokens a step masks, roar's exact count (the default) or the official
# code's, which computes the quantile count in float32 (roar.method.masking.COUNT_RULES).
MASKING_COUNTS = ("roar", "official")
# study.racu_baseline: the random curve a measure's RACU is measured against: the Recursive ROAR random
# chain of the same seed (the default), or, as the official code (nlp-roar-interpretability,
# export/roar_plot.py), the plain ROAR random chain for the Recursive and the plain ROAR curves alike.
RACU_BASELINES = ("recursive-random", "plain-random")
# study.k0_models: where a study folder keeps its k = 0 models, the input of every chain: the DVC cache and
# remote (the default), or git (DVC outputs with cache: false, committed with the step records), so that a
# study run in pieces goes on where its machine and DVC remote are gone: remade on another kind of CPU, a
# k = 0 model has other bytes and would put every finished chain of its seed out of date.
K0_MODEL_STORES = ("dvc", "git")


def model_family(name: str) -> ModelFamily:
    """The family called ``name``, or a one-line error listing the known ones."""
    if name not in MODEL_FAMILIES:
        raise ValueError(f"unknown model {name!r}; allowed: {', '.join(MODELS)}")
    return MODEL_FAMILIES[name]


def measure_spec(name: str) -> MeasureSpec:
    """The measure called ``name``, or a one-line error listing the known ones."""
    if name not in MEASURE_SPECS:
        raise ValueError(f"unknown importance measure {name!r}; allowed: {', '.join(MEASURES)}")
    return MEASURE_SPECS[name]


def strategy_spec(name: str) -> StrategySpec:
    """The masking strategy called ``name``, or a one-line error listing the known ones."""
    if name not in STRATEGY_SPECS:
        raise ValueError(f"unknown masking strategy {name!r}; allowed: {', '.join(STRATEGIES)}")
    return STRATEGY_SPECS[name]


def check_supported(measure: str, model: str) -> None:
    """Raise a one-line error if ``measure`` needs a capability that the family ``model`` lacks, e.g.
    attention weights."""
    needs = measure_spec(measure).requires
    missing = sorted(needs - model_family(model).capabilities)
    if missing:
        having = [f.name for f in MODEL_FAMILIES.values() if needs <= f.capabilities]
        raise ValueError(f"importance measure {measure!r} is not defined for model {model!r}: it needs "
                         f"{', '.join(missing)}, which {model} lacks; models with it: {', '.join(having) or 'none'}")
