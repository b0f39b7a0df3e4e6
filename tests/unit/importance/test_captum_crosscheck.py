"""The gradient family against an independent implementation: Captum on trained models.

A small paired BiLSTM-attention (val accuracy ~0.9) and a tiny 2-layer BERT-style transformer
(weakly trained: ~0.37, majority class 0.21) are trained for a few epochs on generated bAbI-1
data; on one test batch (stories of different lengths, so padding is present) each project measure is compared with Captum applied to the first sequence's input
embeddings (the models' ``inputs_embeds`` path), explaining the gold class (``batch.labels``):

- gradient:            ``||W g||_2`` with g from ``Saliency(abs=False)`` and the full
                       ``[B, L, V]`` product ``g W^T`` (the project uses the Gram matrix ``W^T W``);
- gradient-l1:         ``||W g||_1`` of the same product (the project sums it in vocabulary chunks);
- input x gradient:    ``|sum_d InputXGradient|``;
- integrated gradient: ``|sum_d IntegratedGradients|`` with a zero baseline,
                       ``method="riemann_right"`` (alphas i/n, i = 1..n) and the same n.

Both sides run in float32. Scores are compared only at non-padding positions, per example
relative to that example's largest score (``|p - c| <= ATOL * max_c + RTOL * |c|``): a gold
logit's gradient passes through ~70 LSTM steps (or 2 attention layers) and the dot products
with e cancel, so small scores carry an absolute float32 error of the order of eps times the
large terms, not of themselves. Tolerances (float32 eps = 1.2e-7): ATOL = 1e-4, RTOL = 1e-4,
i.e. ~1000 eps; measured differences are far smaller (``pytest -s`` prints them: gradient
~2e-7 of the row max, from the Gram-matrix route; input x gradient bit-identical, the same
autograd graph; IG <= ~1e-6, from summing the samples in another order), and the
deliberately wrong variants (left Riemann rule, a non-zero baseline, another target class)
miss by orders of magnitude more than the tolerance, so the comparison is not vacuous.
Rankings must agree too: Spearman >= 0.99 per example and the same top-3 tokens (unless the
3rd and 4th scores are within the tolerance of each other).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

captum_attr = pytest.importorskip("captum.attr")
scipy_stats = pytest.importorskip("scipy.stats")

from roar.data.prepare import PrepareConfig, prepare
from roar.data.storage import read_dataset
from roar.importance.registry import make_measure
from roar.models.batching import Batch, iterate_batches, make_batch
from roar.models.bilstm import BiLSTMAttention

ATOL = 1e-4  # relative to the example's largest score
RTOL = 1e-4
MIN_SPEARMAN = 0.99
TOP_K = 3
EXPLAINED = 24  # test examples explained

RESULTS: list[tuple[str, str, float, float]] = []  # (model, measure, max abs diff / row max, max rel diff)
ACCURACY: dict[str, float] = {}  # validation accuracy of the trained models


@pytest.fixture(scope="module", autouse=True)
def single_thread_and_table():
    """Tiny models run fastest on one thread; at the end print the difference table (pytest -s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
    if RESULTS:
        trained = ", ".join(f"{name} {acc:.2f}" for name, acc in ACCURACY.items())
        print(f"\n\nCaptum cross-check, float32, {EXPLAINED} bAbI-1 test examples (val accuracy: {trained}); "
              f"tolerance |p - c| <= {ATOL:g} x row max + {RTOL:g} x |c|")
        print(f"{'model':<12} {'measure':<34} {'max |p-c|/rowmax':>17} {'max |p-c|/|c|':>14}")
        for model, measure, abs_diff, rel_diff in RESULTS:
            print(f"{model:<12} {measure:<34} {abs_diff:>17.2e} {rel_diff:>14.2e}")


@pytest.fixture(scope="module")
def babi(tmp_path_factory):
    """Generated bAbI-1 (850 train / 150 val / 100 test examples), as the project prepares it."""
    out = tmp_path_factory.mktemp("babi") / "babi-1"
    prepare("babi-1", out, PrepareConfig(n_train=1000, n_test=100))
    meta, splits = read_dataset(out)
    vocab_size = 1 + max(int(s.tokens.max()) for s in splits.values())
    vocab_size = max(vocab_size, 1 + max(int(s.tokens2.max()) for s in splits.values()))
    return meta, splits, vocab_size


def train(model: torch.nn.Module, splits, epochs: int, lr: float) -> tuple[float, list[float]]:
    """A plain Adam loop (no Lightning); returns the validation accuracy and each epoch's mean loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, amsgrad=True)
    losses = []
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for batch in iterate_batches(splits["train"], 50, shuffle_seed=epoch):
            logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
            loss = torch.nn.functional.cross_entropy(logits, batch.labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(loss.detach()) * len(batch.labels)
        losses.append(total / len(splits["train"]))
    model.eval()
    correct = 0
    with torch.no_grad():
        for batch in iterate_batches(splits["val"], 200):
            logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
            correct += int((logits.argmax(1) == batch.labels).sum())
    return correct / len(splits["val"]), losses


@pytest.fixture(scope="module")
def bilstm(babi):
    meta, splits, vocab_size = babi
    torch.manual_seed(0)
    model = BiLSTMAttention(vocab_size, len(meta.classes), paired=True, embedding_dim=16, hidden=16,
                            attention_hidden=16)
    accuracy, _ = train(model, splits, epochs=20, lr=1e-2)
    ACCURACY["bilstm"] = accuracy
    assert accuracy > 0.6, f"the BiLSTM did not learn bAbI-1 (val accuracy {accuracy:.2f})"
    return model.eval()


@pytest.fixture(scope="module")
def transformer(babi):
    transformers = pytest.importorskip("transformers")
    from roar.models.transformer import TransformerClassifier

    meta, splits, vocab_size = babi
    config = transformers.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, initializer_range=0.1, num_labels=len(meta.classes),
                                     max_position_embeddings=128, pad_token_id=0, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = TransformerClassifier(transformers.AutoModelForSequenceClassification.from_config(config))
    # A tiny transformer learns bAbI-1 slowly (val accuracy ~0.37 after 6 epochs, majority class 0.21,
    # training loss 1.82 -> 1.52): what matters here is weights that training moved from their start.
    accuracy, losses = train(model, splits, epochs=6, lr=3e-3)
    ACCURACY["transformer"] = accuracy
    assert losses[-1] < losses[0] - 0.1, f"the transformer's training loss did not fall: {losses}"
    return model.eval()


@pytest.fixture(scope="module")
def batch(babi) -> Batch:
    _, splits, _ = babi
    out = make_batch(splits["test"], np.arange(EXPLAINED))
    assert len(set(out.lengths.tolist())) > 3  # padding present and of different amounts
    return out


# --- the independent side: Captum on the inputs_embeds path ---------------------------------------

def captum_forward(model):
    def logits(embeds, tokens, lengths, tokens2, lengths2):
        return model(tokens, lengths, tokens2, lengths2, inputs_embeds=embeds).logits
    return logits


def captum_scores(model, batch: Batch, measure: str, steps: int = 50, method: str = "riemann_right",
                  baseline: torch.Tensor | float = 0.0, target: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, L]`` Captum scores of the first sequence's tokens (float32)."""
    embeds = model.embed(batch.tokens).detach().requires_grad_(True)
    args = (batch.tokens, batch.lengths, batch.tokens2, batch.lengths2)
    target = batch.labels if target is None else target
    f = captum_forward(model)
    if measure in ("gradient", "gradient-l1"):
        g = captum_attr.Saliency(f).attribute(embeds, target=target, additional_forward_args=args, abs=False)
        one_hot_gradient = g @ model.embedding.weight.detach().T  # [B, L, V]: d y / d x_v = W_v . g
        return torch.linalg.vector_norm(one_hot_gradient, ord=2 if measure == "gradient" else 1, dim=-1).detach()
    if measure == "input-x-gradient":
        a = captum_attr.InputXGradient(f).attribute(embeds, target=target, additional_forward_args=args)
        return a.sum(-1).abs().detach()
    if measure == "integrated-gradient":
        a = captum_attr.IntegratedGradients(f).attribute(embeds, baselines=baseline, target=target,
                                                         additional_forward_args=args, n_steps=steps,
                                                         method=method)
        return a.sum(-1).abs().detach()
    raise ValueError(measure)


def project_scores(model, batch: Batch, measure: str, steps: int = 50) -> torch.Tensor:
    m = make_measure(measure, {"samples": steps})
    return m.attribute(model, batch, np.arange(len(batch.labels)), "test").detach()


# --- comparison -----------------------------------------------------------------------------------

def differences(project: torch.Tensor, captum: torch.Tensor, batch: Batch) -> tuple[float, float, bool]:
    """(max |p - c| / row max, max |p - c| / |c|, within tolerance) over non-padding positions."""
    worst_abs = worst_rel = 0.0
    ok = True
    for b, n in enumerate(batch.lengths.tolist()):
        p, c = project[b, :n].double(), captum[b, :n].double()
        scale = float(c.max())
        assert scale > 0
        diff = (p - c).abs()
        worst_abs = max(worst_abs, float(diff.max()) / scale)
        worst_rel = max(worst_rel, float((diff / c.abs().clamp(min=1e-30)).max()))
        ok &= bool((diff <= ATOL * scale + RTOL * c.abs()).all())
    return worst_abs, worst_rel, ok


def assert_rankings_agree(project: torch.Tensor, captum: torch.Tensor, batch: Batch):
    for b, n in enumerate(batch.lengths.tolist()):
        p, c = project[b, :n].double().numpy(), captum[b, :n].double().numpy()
        rho = scipy_stats.spearmanr(p, c).statistic
        assert rho >= MIN_SPEARMAN, f"example {b}: Spearman {rho:.4f} < {MIN_SPEARMAN}"
        order = np.sort(c)[::-1]
        if n > TOP_K and order[TOP_K - 1] - order[TOP_K] > ATOL * order[0]:
            top_p = set(np.argsort(-p, kind="stable")[:TOP_K])
            top_c = set(np.argsort(-c, kind="stable")[:TOP_K])
            assert top_p == top_c, f"example {b}: top-{TOP_K} {sorted(top_p)} != Captum's {sorted(top_c)}"


def check(model_name, model, batch, measure, steps=50):
    label = measure if measure != "integrated-gradient" else f"integrated-gradient/{steps}"
    project = project_scores(model, batch, measure, steps)
    captum = captum_scores(model, batch, measure, steps)
    assert project.shape == captum.shape == batch.tokens.shape
    assert project.dtype == captum.dtype == torch.float32
    worst_abs, worst_rel, ok = differences(project, captum, batch)
    RESULTS.append((model_name, label, worst_abs, worst_rel))
    assert ok, (f"{model_name} {label}: project vs Captum differ beyond atol={ATOL} x row max + rtol={RTOL} "
                f"(max abs/row max {worst_abs:.2e}, max rel {worst_rel:.2e})")
    assert_rankings_agree(project, captum, batch)


CASES = [("gradient", 50), ("gradient-l1", 50), ("input-x-gradient", 50), ("integrated-gradient", 20), ("integrated-gradient", 50)]


@pytest.mark.parametrize("measure, steps", CASES)
def test_bilstm_matches_captum(bilstm, batch, measure, steps):
    check("bilstm", bilstm, batch, measure, steps)


@pytest.mark.parametrize("measure, steps", CASES)
def test_transformer_matches_captum(transformer, batch, measure, steps):
    check("transformer", transformer, batch, measure, steps)


@pytest.mark.parametrize("model_name", ["bilstm", "transformer"])
def test_cross_check_detects_wrong_variants(request, batch, model_name):
    """Captum set up differently from the paper's definition misses the project's IG by far more than
    the tolerance: the check above would catch a left Riemann rule, a non-zero baseline or the
    wrong target class in the project's measure."""
    model = request.getfixturevalue(model_name)
    steps = 20
    project = project_scores(model, batch, "integrated-gradient", steps)
    mean_embedding = model.embedding.weight.detach().mean(0)
    n_classes = int(model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits.shape[1])
    variants = {
        "left Riemann": captum_scores(model, batch, "integrated-gradient", steps, method="riemann_left"),
        "mean-embedding baseline": captum_scores(model, batch, "integrated-gradient", steps,
                                                 baseline=mean_embedding.expand_as(model.embed(batch.tokens))),
        "other class": captum_scores(model, batch, "integrated-gradient", steps,
                                     target=(batch.labels + 1) % n_classes),
    }
    for name, captum in variants.items():
        worst_abs, worst_rel, ok = differences(project, captum, batch)
        RESULTS.append((model_name, f"IG/{steps} vs {name}", worst_abs, worst_rel))
        assert not ok, f"{model_name}: Captum with {name} agrees with the project's IG: the check is vacuous"
        assert worst_abs > 10 * ATOL, f"{model_name}: {name} differs by only {worst_abs:.2e} x row max"
