"""Occlusion and KernelSHAP against hand-computed values, brute-force Shapley values and Captum."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch

from roar.data.storage import Split
from roar.data.tokenize import END_ID, MASK_ID, PAD_ID, START_ID, UNMASKABLE_IDS
from roar.importance.base import compute_importance
from roar.importance.kernel_shap import KernelShapImportance, all_coalitions, constrained_least_squares
from roar.importance.occlusion import OcclusionImportance
from roar.importance.base import MeasureContext
from roar.importance.registry import make_measure
from roar.models.batching import Batch
from roar.models.bilstm import BiLSTMAttention, ModelOutput

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB, CLASSES = 12, 3


class BagOfWords(torch.nn.Module):
    """``logit_c = (sum_{i < length} W[x_i, c] + 0.5) ^ power`` (additive for power 1)."""

    def __init__(self, weight: torch.Tensor, power: int = 1):
        super().__init__()
        self.weight, self.power = torch.nn.Parameter(weight.double()), power

    def forward(self, tokens, lengths, tokens2=None, lengths2=None, inputs_embeds=None) -> ModelOutput:
        inside = (torch.arange(tokens.shape[1])[None, :] < lengths[:, None]).double()
        logits = (self.weight[tokens] * inside[..., None]).sum(1) + 0.5
        return ModelOutput(logits ** self.power, None, None)


def bag_weight() -> torch.Tensor:
    """``W[t, c] = t * (c + 1) / 2`` for t >= 5; the mask row holds 0.25 * (c + 1); other specials 0."""
    weight = torch.arange(VOCAB, dtype=torch.float64)[:, None] * (torch.arange(CLASSES) + 1)[None, :] / 2
    weight[[PAD_ID, START_ID, END_ID, 1]] = 0.0
    weight[MASK_ID] = 0.25 * (torch.arange(CLASSES) + 1)
    return weight


def batch_of(rows: list[list[int]], labels: list[int], ids: list[int] | None = None) -> Batch:
    width = max(map(len, rows))
    tokens = torch.tensor([r + [PAD_ID] * (width - len(r)) for r in rows])
    ids = np.arange(len(rows)) if ids is None else np.asarray(ids)
    return Batch(tokens, torch.tensor([len(r) for r in rows]), None, None, torch.tensor(labels), ids)


def tiny_bilstm(seed: int = 0) -> BiLSTMAttention:
    torch.manual_seed(seed)
    return BiLSTMAttention(VOCAB, CLASSES, paired=False, embedding_dim=4, hidden=3, attention_hidden=3).double().eval()


def random_batch(n: int = 9, seed: int = 1, low: int = 1, high: int = 9) -> Batch:
    """``n`` sequences ``[START] w.. [END]`` of lengths ``low..high`` with a mask token in some."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        words = rng.integers(5, VOCAB, size=int(rng.integers(low, high + 1))).tolist()
        if len(words) > 2 and rng.random() < 0.5:
            words[int(rng.integers(len(words)))] = MASK_ID
        rows.append([START_ID, *words, END_ID])
    return batch_of(rows, rng.integers(0, CLASSES, size=n).tolist())


def players_of(batch: Batch) -> torch.Tensor:
    inside = torch.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
    return inside & ~torch.isin(batch.tokens, torch.tensor(UNMASKABLE_IDS)) & (batch.tokens != MASK_ID)


# --- occlusion -------------------------------------------------------------------------------------------------


def test_occlusion_hand_computed_on_a_bag_of_words():
    # class 0: W[t] = t / 2, W[mask] = 0.25, so a word t drops the logit by t / 2 - 0.25
    # class 2: W[t] = 3 t / 2, W[mask] = 0.75
    batch = batch_of([[START_ID, 5, 6, MASK_ID, END_ID], [START_ID, 11, END_ID]], [0, 2])
    scores = OcclusionImportance().attribute(BagOfWords(bag_weight()), batch, batch.rows, "test")
    expected = torch.tensor([[0.0, 2.25, 2.75, 0.0, 0.0], [0.0, 15.75, 0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(scores, expected, rtol=0, atol=1e-12)


def test_occlusion_is_a_plain_loop_of_masked_copies_for_any_rows_per_pass():
    model, batch = tiny_bilstm(), random_batch()
    with torch.no_grad():
        full = model(batch.tokens, batch.lengths).logits.gather(1, batch.labels[:, None]).squeeze(1)
        expected = torch.zeros(batch.tokens.shape, dtype=torch.float64)
        for b, i in players_of(batch).nonzero().tolist():
            tokens = batch.tokens[b:b + 1].clone()
            tokens[0, i] = MASK_ID
            expected[b, i] = full[b] - model(tokens, batch.lengths[b:b + 1]).logits[0, batch.labels[b]]
    assert (expected != 0).sum() >= 20
    for max_rows in (None, 1, 7):
        got = OcclusionImportance(max_rows).attribute(model, batch, batch.rows, "test")
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


def test_occlusion_uses_the_datasets_mask_token():
    weight = bag_weight()
    weight[1] = torch.tensor([1.0, 2.0, 3.0])  # a stand-in "[MASK]" of another vocabulary
    batch = batch_of([[START_ID, 5, 6, END_ID]], [1])
    scores = make_measure("occlusion", {}, MeasureContext(mask_id=1)).attribute(BagOfWords(weight), batch, batch.rows, "test")
    torch.testing.assert_close(scores, torch.tensor([[0.0, 5.0 - 2.0, 6.0 - 2.0, 0.0]], dtype=torch.float64))


# --- kernel SHAP -----------------------------------------------------------------------------------------------


def masked_value(model, batch: Batch, b: int, players: tuple[int, ...], kept: frozenset) -> float:
    """The explained logit of example ``b`` with the players outside ``kept`` masked."""
    tokens = batch.tokens[b:b + 1].clone()
    for p in players:
        if p not in kept:
            tokens[0, p] = MASK_ID
    return float(model(tokens, batch.lengths[b:b + 1]).logits[0, batch.labels[b]])


def brute_force_shapley(model, batch: Batch) -> torch.Tensor:
    """Shapley values by the subset formula, players = the positions masking may choose."""
    out = torch.zeros(batch.tokens.shape, dtype=torch.float64)
    with torch.no_grad():
        for b in range(len(batch.tokens)):
            players = tuple(players_of(batch)[b].nonzero().squeeze(1).tolist())
            m = len(players)
            value = functools.cache(functools.partial(masked_value, model, batch, b, players))
            for p in players:
                others = [q for q in players if q != p]
                for size in range(m):
                    for subset in itertools.combinations(others, size):
                        weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
                        out[b, p] += weight * (value(frozenset(subset) | {p}) - value(frozenset(subset)))
    return out


def test_kernel_shap_is_exact_on_an_additive_model_and_efficient():
    """Linear in the kept tokens: phi_i = W[x_i, c] - W[mask, c], from sampled coalitions (12 players,
    64 of the 4,094 coalitions), and the values sum to f(x) - f(all masked)."""
    batch = batch_of([[START_ID, *range(5, 12), 5, 6, 7, 8, 9, END_ID], [START_ID, 9, MASK_ID, 6, END_ID]], [2, 1])
    model = BagOfWords(bag_weight())
    scores = KernelShapImportance(samples=64).attribute(model, batch, batch.rows, "test")
    weight = bag_weight()
    expected = torch.where(players_of(batch), weight[batch.tokens, batch.labels[:, None]] - weight[MASK_ID][
        batch.labels][:, None], torch.zeros((), dtype=torch.float64))
    assert expected[0, 1] == pytest.approx(3 * 5 / 2 - 0.75)
    torch.testing.assert_close(scores, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("samples", [64, 100])
def test_kernel_shap_against_brute_force_shapley_on_a_bilstm(samples):
    """Up to 6 players: 2^6 - 2 = 62 <= 64 coalitions, all enumerated: exact. With 7-8 players and 100
    samples (of 126-254 coalitions) the sampled estimate is close; efficiency holds exactly either way."""
    model = tiny_bilstm()
    batch = random_batch(n=6, low=1, high=6, seed=3) if samples == 64 else random_batch(n=6, low=7, high=8, seed=3)
    exact = brute_force_shapley(model, batch)
    got = KernelShapImportance(samples).attribute(model, batch, batch.rows, "test")
    with torch.no_grad():
        logits = model(batch.tokens, batch.lengths).logits.gather(1, batch.labels[:, None]).squeeze(1)
        empty = model(batch.tokens.masked_fill(players_of(batch), MASK_ID), batch.lengths).logits
    torch.testing.assert_close(got.sum(1), logits - empty.gather(1, batch.labels[:, None]).squeeze(1))
    assert torch.all(got[~players_of(batch)] == 0)
    if samples == 64:
        torch.testing.assert_close(got, exact, rtol=1e-7, atol=1e-10)
    else:
        scale = exact.abs().amax(1, keepdim=True)
        assert players_of(batch).sum(1).min() >= 6 and players_of(batch).sum(1).max() == 8
        error = float(((got - exact).abs() / scale).max())
        print(f"kernel-shap, {samples} samples, 6-8 players: max |error| / row max = {error:.3f}")
        assert error < 0.05


def test_kernel_weights_matter_for_a_non_additive_model():
    """The regression with the Shapley kernel gives the Shapley values of a cubed bag of words (three-way
    interactions); the same coalitions weighted equally do not (so the tests above can tell a wrong
    kernel; for a squared bag, with pairwise interactions only, both would be exact)."""
    model = BagOfWords(bag_weight(), power=3)
    batch = batch_of([[START_ID, 5, 8, 11, 7, END_ID]], [1])
    exact = brute_force_shapley(model, batch)[0, 1:5]
    present, kernel = all_coalitions(4)
    values = []
    for weights in (kernel, np.ones_like(kernel)):
        tokens = batch.tokens.repeat(len(present), 1)
        tokens[:, 1:5] = torch.where(torch.from_numpy(present), tokens[:, 1:5], MASK_ID)
        with torch.no_grad():
            y = model(tokens, batch.lengths.repeat(len(present))).logits[:, 1].numpy()
            full = float(model(batch.tokens, batch.lengths).logits[0, 1])
            empty_tokens = batch.tokens.clone()
            empty_tokens[0, 1:5] = MASK_ID
            empty = float(model(empty_tokens, batch.lengths).logits[0, 1])
        values.append(constrained_least_squares(present, weights, y - empty, full - empty))
    np.testing.assert_allclose(values[0], exact.numpy(), rtol=1e-9)
    assert np.abs(values[1] - exact.numpy()).max() > 1.0


def test_kernel_shap_bad_samples():
    for bad in (0, 1, 63, 2.0, True):
        with pytest.raises(ValueError, match="must be an even integer >= 2"):
            KernelShapImportance(bad)
    assert make_measure("kernel-shap", {"samples": 8}, MeasureContext(seed=3)).samples == 8


# --- both ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["occlusion", "kernel-shap"])
def test_scores_do_not_depend_on_batching_or_order(name):
    """Through compute_importance: batch sizes 1, 4 and 20 and a permuted split give every example the
    same scores; padding, specials and masked tokens score 0; another seed draws other coalitions."""
    model, batch = tiny_bilstm(), random_batch(n=20, high=12, seed=5)
    rows = [batch.tokens[b, :n].tolist() for b, n in enumerate(batch.lengths.tolist())]
    split = Split.from_lists(rows, batch.labels.tolist())
    measure = make_measure(name, {"samples": 16})
    runs = [compute_importance(measure, model, split, "val", size, progress=False) for size in (1, 4, 20)]
    order = np.random.default_rng(0).permutation(len(rows))
    permuted = Split.from_lists([rows[i] for i in order], batch.labels[order].tolist(), index=order.tolist())
    unpermuted = np.empty_like(runs[0])
    unpermuted[order] = compute_importance(measure, model, permuted, "val", 3, progress=False)
    for other in (*runs[1:], unpermuted):
        np.testing.assert_allclose(other, runs[0], rtol=1e-5, atol=1e-7)
    players = players_of(batch).numpy()
    assert np.all(runs[0][~players] == 0) and np.count_nonzero(runs[0][players]) == players.sum()
    if name == "kernel-shap":
        reseeded = compute_importance(make_measure(name, {"samples": 16}, MeasureContext(seed=1)), model, split, "val", 20, False)
        assert not np.allclose(reseeded, runs[0])  # sampled: > 4 players in most examples


def test_both_explain_the_predicted_class_when_asked():
    model, batch = tiny_bilstm(), random_batch(n=12, seed=7)
    split = Split.from_lists([batch.tokens[b, :n].tolist() for b, n in enumerate(batch.lengths.tolist())],
                             batch.labels.tolist())
    predicted = model(batch.tokens, batch.lengths).logits.argmax(-1)
    assert (predicted != batch.labels).any()
    for measure in (OcclusionImportance(), KernelShapImportance(16)):
        got = compute_importance(measure, model, split, "test", 12, False, target="predicted")
        direct = measure.attribute(model, batch._replace(labels=predicted), batch.rows, "test").numpy()
        np.testing.assert_allclose(got, direct, rtol=1e-5, atol=1e-7)


# --- Captum ----------------------------------------------------------------------------------------------------


def captum_setup(model: BiLSTMAttention, batch: Batch):
    """Captum on the input embeddings: each position one feature, whose "absent" value is the mask
    token's embedding at a player and the token's own embedding elsewhere (a dummy player)."""
    embeds = model.embed(batch.tokens).detach()
    baseline = torch.where(players_of(batch)[..., None], model.embed(torch.tensor(MASK_ID)).detach(), embeds)
    features = torch.arange(batch.tokens.shape[1])[None, :, None].expand_as(embeds).contiguous()
    forward = lambda e, tokens, lengths: model(tokens, lengths, inputs_embeds=e).logits
    return forward, embeds, baseline, features, (batch.tokens, batch.lengths)


def test_occlusion_and_kernel_shap_match_captum():
    """Occlusion = ``FeatureAblation``; exact KernelSHAP (<= 4 players, all coalitions) =
    ``ShapleyValues`` (all permutations of the 6 positions, dummies included)."""
    captum_attr = pytest.importorskip("captum.attr")
    model, batch = tiny_bilstm(), random_batch(n=8, low=1, high=4, seed=11)
    forward, embeds, baseline, features, args = captum_setup(model, batch)
    ablation = captum_attr.FeatureAblation(forward).attribute(embeds, baselines=baseline, target=batch.labels,
                                                              additional_forward_args=args, feature_mask=features,
                                                              perturbations_per_eval=4)[..., 0]
    ours = OcclusionImportance().attribute(model, batch, batch.rows, "test")
    torch.testing.assert_close(ours, ablation, rtol=1e-9, atol=1e-12)
    shapley = captum_attr.ShapleyValues(forward).attribute(embeds, baselines=baseline, target=batch.labels,
                                                           additional_forward_args=args, feature_mask=features,
                                                           perturbations_per_eval=64)[..., 0]
    ours = KernelShapImportance(16).attribute(model, batch, batch.rows, "test")
    assert players_of(batch).sum(1).max() == 4
    # Captum sums the permutations' marginals in float32
    torch.testing.assert_close(ours, shapley.double(), rtol=1e-5, atol=1e-7)


def test_occlusion_on_a_paired_transformer_with_its_own_mask_token():
    """A tiny random BERT on pairs, mask id 7 and specials (0, 5, 6) as a tokenizer would give them:
    occlusion is the plain loop over masked copies; the second sequence is never occluded."""
    transformers = pytest.importorskip("transformers")
    from roar.models.transformer import TransformerClassifier

    config = transformers.BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=32, num_labels=CLASSES, max_position_embeddings=64,
                                     initializer_range=0.3)
    torch.manual_seed(0)
    model = TransformerClassifier(transformers.AutoModelForSequenceClassification.from_config(config)).eval()
    rows = [[5, 12, 7, 30, 6], [5, 9, 10, 11, 13, 14, 6], [5, 20, 6]]
    batch = batch_of(rows, [0, 2, 1])
    tokens2 = torch.tensor([[15, 16, 6], [17, 6, 0], [18, 19, 6]])
    batch = batch._replace(tokens2=tokens2, lengths2=torch.tensor([3, 2, 3]))
    measure = make_measure("occlusion", {}, MeasureContext(mask_id=7, unmaskable_ids=(0, 5, 6)))
    got = measure.attribute(model, batch, batch.rows, "test")
    expected = torch.zeros(batch.tokens.shape)
    with torch.no_grad():
        for b, row in enumerate(rows):
            args = (batch.lengths[b:b + 1], tokens2[b:b + 1], batch.lengths2[b:b + 1])
            full = model(torch.tensor([row]), *args).logits[0, batch.labels[b]]
            for i, token in enumerate(row):
                if token not in (0, 5, 6, 7):
                    masked = torch.tensor([row[:i] + [7] + row[i + 1:]])
                    expected[b, i] = full - model(masked, *args).logits[0, batch.labels[b]]
    assert (expected != 0).sum() == 8  # 2 + 5 + 1 words
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
