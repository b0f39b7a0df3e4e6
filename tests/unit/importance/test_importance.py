"""Importance measures against independent computations on a tiny BiLSTM-attention model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from roar.data.storage import Split
from roar.importance.attention import AttentionImportance
from roar.importance.base import (
    MeasureContext,
    compute_importance,
    explained_batch,
    prediction_agreement,
)
from roar.importance import gradient_l1
from roar.importance.gradient import GradientImportance
from roar.importance.gradient_l1 import GradientL1Importance
from roar.importance.input_x_gradient import InputXGradientImportance
from roar.importance.integrated_gradient import IntegratedGradientImportance
from roar.importance.mutual_information import (
    MutualInformationImportance,
    word_label_mutual_information,
)
from roar.importance.random import RandomImportance
from roar.importance.registry import make_measure
from roar.models.batching import Batch, make_batch
from roar.models.bilstm import BiLSTMAttention, BiLSTMEncoder, ModelOutput
from roar.config.catalog import MEASURES

VOCAB, CLASSES = 12, 3

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(paired: bool, seed: int = 0) -> BiLSTMAttention:
    torch.manual_seed(seed)
    model = BiLSTMAttention(vocab_size=VOCAB, n_classes=CLASSES, paired=paired, embedding_dim=4, hidden=3,
                            attention_hidden=3).double().eval()
    return model


def tiny_batch(paired: bool, seed: int = 1) -> Batch:
    """5 examples of lengths 7, 3, 5, 1, 6 (right-padded to 7) with random ids 1..11."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 3, 5, 1, 6])
    tokens = torch.randint(1, VOCAB, (5, 7), generator=gen)
    tokens = tokens.masked_fill(torch.arange(7)[None, :] >= lengths[:, None], 0)
    tokens2 = lengths2 = None
    if paired:
        lengths2 = torch.tensor([2, 4, 1, 3, 4])
        tokens2 = torch.randint(1, VOCAB, (5, 4), generator=gen)
        tokens2 = tokens2.masked_fill(torch.arange(4)[None, :] >= lengths2[:, None], 0)
    labels = torch.tensor([0, 2, 1, 1, 0])
    return Batch(tokens, lengths, tokens2, lengths2, labels, np.arange(5))


def real_positions(batch: Batch) -> torch.Tensor:
    return torch.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]


def one_hot_gradient(model: BiLSTMAttention, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(one-hot x [B, L, V], d gold logit / dx) by autograd through inputs_embeds = x @ W."""
    x = torch.nn.functional.one_hot(batch.tokens, VOCAB).double().requires_grad_(True)
    embeds = x @ model.embedding.weight
    logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2, inputs_embeds=embeds).logits
    gold = logits[torch.arange(len(batch.labels)), batch.labels]
    (grad,) = torch.autograd.grad(gold.sum(), x)
    return x.detach(), grad


def gold_gradient_at(model: BiLSTMAttention, batch: Batch, embeds: torch.Tensor) -> torch.Tensor:
    """d gold logit / d embeddings, one example at a time (no batching tricks)."""
    out = torch.zeros_like(embeds)
    for b in range(len(batch.labels)):
        e = embeds[b:b + 1].detach().clone().requires_grad_(True)
        t2 = None if batch.tokens2 is None else batch.tokens2[b:b + 1]
        l2 = None if batch.lengths2 is None else batch.lengths2[b:b + 1]
        logits = model(batch.tokens[b:b + 1], batch.lengths[b:b + 1], t2, l2, inputs_embeds=e).logits
        (g,) = torch.autograd.grad(logits[0, batch.labels[b]], e)
        out[b] = g[0]
    return out


@pytest.mark.parametrize("paired", [False, True])
def test_gradient_is_l2_norm_of_one_hot_gradient(paired):
    model, batch = tiny_model(paired), tiny_batch(paired)
    _, grad = one_hot_gradient(model, batch)
    expected = grad.norm(dim=-1)
    got = GradientImportance().attribute(model, batch, batch.rows, "test")
    assert got.shape == batch.tokens.shape
    real = real_positions(batch)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-6, atol=1e-9)
    assert expected[real].min() > 0  # non-trivial comparison


@pytest.mark.parametrize("paired", [False, True])
def test_input_x_gradient_is_abs_x_dot_one_hot_gradient(paired):
    model, batch = tiny_model(paired), tiny_batch(paired)
    x, grad = one_hot_gradient(model, batch)
    expected = (x * grad).sum(-1).abs()
    got = InputXGradientImportance().attribute(model, batch, batch.rows, "test")
    real = real_positions(batch)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-8, atol=1e-12)
    # x . grad picks the gradient entry of the token's own id
    own = grad.gather(2, batch.tokens[..., None]).squeeze(-1).abs()
    torch.testing.assert_close(got[real], own[real], rtol=1e-8, atol=1e-12)


def reference_ig(model: BiLSTMAttention, batch: Batch, samples: int) -> torch.Tensor:
    """Right Riemann sum, scales i/n (i = 1..n), one sample and one example at a time."""
    embeds = model.embed(batch.tokens).detach()
    total = torch.zeros_like(embeds)
    for i in range(1, samples + 1):
        total += gold_gradient_at(model, batch, embeds * (i / samples))
    return ((total / samples) * embeds).sum(-1).abs()


@pytest.fixture(scope="module")
def ig_reference_50():
    model, batch = tiny_model(True), tiny_batch(True)
    return model, batch, reference_ig(model, batch, 50)


@pytest.mark.parametrize("batched, max_rows", [(True, 17), (True, 10), (True, 4096), (False, 4096)])
def test_integrated_gradient_matches_sequential_reference(ig_reference_50, batched, max_rows):
    # 5 rows: max_rows 17 -> 3 samples per pass (16 full passes and a last one of 2), 10 -> 2 per pass
    model, batch, expected = ig_reference_50
    got = IntegratedGradientImportance(samples=50, max_rows=max_rows, batched=batched).attribute(
        model, batch, batch.rows, "test")
    real = real_positions(batch)
    assert (got[real] - expected[real]).abs().max() < 1e-5
    torch.testing.assert_close(got[real], expected[real], rtol=1e-7, atol=1e-10)


def test_integrated_gradient_single_sample_is_input_x_gradient():
    model, batch = tiny_model(False), tiny_batch(False)
    ig = IntegratedGradientImportance(samples=1).attribute(model, batch, batch.rows, "test")
    ixg = InputXGradientImportance().attribute(model, batch, batch.rows, "test")
    torch.testing.assert_close(ig, ixg)


def test_integrated_gradient_many_samples_against_plain_loop():
    model, batch = tiny_model(False), tiny_batch(False)
    n = 1000
    embeds = model.embed(batch.tokens).detach()
    total = torch.zeros_like(embeds)
    for i in range(1, n + 1):
        e = (embeds * (i / n)).requires_grad_(True)
        logits = model(batch.tokens, batch.lengths, inputs_embeds=e).logits
        (g,) = torch.autograd.grad(logits.gather(1, batch.labels[:, None]).sum(), e)
        total += g
    expected = ((total / n) * embeds).sum(-1).abs()
    got = IntegratedGradientImportance(samples=n, max_rows=512).attribute(model, batch, batch.rows, "test")
    real = real_positions(batch)
    torch.testing.assert_close(got[real], expected[real], rtol=1e-9, atol=1e-12)
    # The 50-sample sum approximates the same integral (loosely: its own discretisation error).
    coarse = IntegratedGradientImportance(samples=50).attribute(model, batch, batch.rows, "test")
    assert (coarse[real] - expected[real]).abs().max() < 0.05 * expected[real].abs().max()


def test_integrated_gradient_bad_samples():
    with pytest.raises(ValueError, match="samples=0"):
        IntegratedGradientImportance(samples=0)


@pytest.mark.parametrize("paired", [False, True])
def test_attention_measure_is_model_attention(paired):
    model, batch = tiny_model(paired), tiny_batch(paired)
    got = AttentionImportance().attribute(model, batch, batch.rows, "test")
    expected = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).attention
    torch.testing.assert_close(got, expected)
    real = real_positions(batch)
    torch.testing.assert_close(got.sum(1), torch.ones(5, dtype=got.dtype))
    assert torch.all(got[~real] == 0)
    assert torch.all(got[real] > 0)
    # by hand: softmax of v . tanh(W1 h_t (+ W1' q)) over the real positions
    states, _ = model.encoder(model.embed(batch.tokens), batch.lengths)
    hidden = model.attention_in(states)
    if paired:
        _, q = model.encoder2(model.embedding(batch.tokens2), batch.lengths2)
        hidden = hidden + model.attention_query(q)[:, None]
    scores = model.attention_out(torch.tanh(hidden)).squeeze(-1)
    for b, n in enumerate(batch.lengths.tolist()):
        torch.testing.assert_close(got[b, :n], torch.softmax(scores[b, :n], 0))


def test_random_importance_properties():
    ids = np.array([4, 17, 3])
    batch = Batch(torch.zeros(3, 6, dtype=torch.long), torch.tensor([6, 2, 4]), None, None,
                  torch.zeros(3, dtype=torch.long), np.arange(3))
    measure = RandomImportance(seed=7)
    a = measure.attribute(None, batch, ids, "train")
    b = RandomImportance(seed=7).attribute(None, batch, ids, "train")
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert a.shape == (3, 6)
    assert torch.all((a >= 0) & (a < 1))
    assert len(torch.unique(a)) == a.numel()
    # another seed or another split gives other values
    assert not torch.any(RandomImportance(seed=8).attribute(None, batch, ids, "train") == a)
    assert not torch.any(measure.attribute(None, batch, ids, "test") == a)
    # padding length and batch composition do not matter: the score is fixed by (seed, split, id, position)
    longer = Batch(torch.zeros(2, 11, dtype=torch.long), torch.tensor([2, 6]), None, None,
                   torch.zeros(2, dtype=torch.long), np.arange(2))
    c = measure.attribute(None, longer, np.array([17, 4]), "train")
    torch.testing.assert_close(c[0, :6], a[1], rtol=0, atol=0)
    torch.testing.assert_close(c[1, :6], a[0], rtol=0, atol=0)


def test_random_importance_is_roughly_uniform():
    batch = Batch(torch.zeros(400, 50, dtype=torch.long), torch.full((400,), 50), None, None,
                  torch.zeros(400, dtype=torch.long), np.arange(400))
    scores = RandomImportance(seed=0).attribute(None, batch, np.arange(400), "val").numpy().ravel()
    assert abs(scores.mean() - 0.5) < 0.01
    hist, _ = np.histogram(scores, bins=10, range=(0, 1))
    assert np.all(np.abs(hist / len(scores) - 0.1) < 0.01)


def test_random_importance_independent_of_batch_size_through_compute_importance():
    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(5, 12, size=n)) for n in rng.integers(1, 15, size=23)]
    split = Split.from_lists(seqs, [0] * 23, index=list(range(100, 123)))
    valid = np.arange(split.tokens.shape[1])[None, :] < split.lengths[:, None]
    # (values beyond a row's length are unspecified: masking never reads them)
    a = compute_importance(RandomImportance(3), None, split, "train", batch_size=4, progress=False)
    b = compute_importance(RandomImportance(3), None, split, "train", batch_size=23, progress=False)
    np.testing.assert_array_equal(a[valid], b[valid])
    # only the example id matters, not the row: reversing the split reverses the scores
    rev = Split.from_lists(seqs[::-1], [0] * 23, index=list(range(122, 99, -1)))
    c = compute_importance(RandomImportance(3), None, rev, "train", batch_size=5, progress=False)
    np.testing.assert_array_equal(np.where(valid, a, 0), np.where(valid[::-1], c, 0)[::-1])


def reference_mutual_information(docs: list[list[int]], labels: list[int], vocab: int, n_classes: int):
    """Explicit loops: MI of word presence with the one-vs-rest label, +1 smoothing, prior-weighted."""
    out = []
    n_docs = len(docs)
    for w in range(vocab):
        total = 0.0
        for c in range(n_classes):
            table = [[1, 1], [1, 1]]  # [present][is class c]
            for doc, y in zip(docs, labels):
                table[int(w in doc)][int(y == c)] += 1
            n = sum(map(sum, table))
            mi = 0.0
            for x in (0, 1):
                for y in (0, 1):
                    p_xy = table[x][y] / n
                    p_x = (table[x][0] + table[x][1]) / n
                    p_y = (table[0][y] + table[1][y]) / n
                    mi += p_xy * math.log(p_xy / (p_x * p_y))
            total += sum(1 for y in labels if y == c) / n_docs * mi
        out.append(total)
    return np.array(out)


def test_mutual_information_hand_computed_2x2():
    # class 0: {5, 6}, {5}; class 1: {6}, {7}. V = 9: word 8, the last id, never occurs.
    split = Split.from_lists([[5, 6], [5], [6], [7]], [0, 0, 1, 1])
    mi = word_label_mutual_information(split, 9, 2)
    # word 5 vs class 0: (present, c)=2, (present, not c)=0, (absent, c)=0, (absent, not c)=2;
    # +1 -> 3, 1, 1, 3 (n=8), p(present)=p(c)=1/2. Class 1 is the mirror table, same MI.
    mi5 = 2 * 3 / 8 * math.log((3 / 8) / (1 / 2 * 1 / 2)) + 2 * 1 / 8 * math.log((1 / 8) / (1 / 2 * 1 / 2))
    assert mi[5] == pytest.approx(mi5)
    assert mi5 == pytest.approx(0.130812035941)
    # word 6 (once in each class): 2, 2, 2, 2 -> independent -> 0
    assert mi[6] == pytest.approx(0.0, abs=1e-15)
    # word 7 vs class 0: 1, 2, 3, 2 -> p(present)=3/8; class 1 is the mirror (2, 1, 2, 3), same MI
    mi7 = (1 / 8 * math.log((1 / 8) / (3 / 8 * 1 / 2)) + 2 / 8 * math.log((2 / 8) / (3 / 8 * 1 / 2))
           + 3 / 8 * math.log((3 / 8) / (5 / 8 * 1 / 2)) + 2 / 8 * math.log((2 / 8) / (5 / 8 * 1 / 2)))
    assert mi[7] == pytest.approx(mi7)
    assert mi7 == pytest.approx(0.033822075569)
    # absent words (0..4 and the last id 8): 1, 1, 3, 3 -> p(x, y) = p(x) p(y) in every cell -> 0
    np.testing.assert_allclose(mi[[0, 1, 2, 3, 4, 8]], 0.0, atol=1e-15)
    # the class prior weights the per-class MI: with priors 3/4, 1/4 the word of the big class
    split = Split.from_lists([[5], [5], [5], [6]], [0, 0, 0, 1])
    mi = word_label_mutual_information(split, 7, 2)
    # word 5 vs class 0: 4, 1, 1, 2 (n=8); vs class 1: 1, 4, 2, 1 (the same cells permuted)
    p = {(1, 1): 4 / 8, (1, 0): 1 / 8, (0, 1): 1 / 8, (0, 0): 2 / 8}
    px = {1: 5 / 8, 0: 3 / 8}
    py = {1: 5 / 8, 0: 3 / 8}
    mi_0 = sum(p[x, y] * math.log(p[x, y] / (px[x] * py[y])) for x in (0, 1) for y in (0, 1))
    assert mi[5] == pytest.approx(3 / 4 * mi_0 + 1 / 4 * mi_0)


def test_mutual_information_against_explicit_loops_with_padding_and_repeats():
    # uneven lengths (padding in the matrix), repeated words within a document, three classes,
    # and a last vocabulary id (9) that never occurs
    docs = [[5, 6, 5, 5], [5], [6, 7, 8], [7], [8, 8, 5, 6, 7], [3], [4, 4]]
    labels = [0, 0, 1, 2, 1, 2, 0]
    split = Split.from_lists(docs, labels)
    expected = reference_mutual_information(docs, labels, 10, 3)
    got = word_label_mutual_information(split, 10, 3)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert got[5] > got[9]
    # the measure looks the word's MI up for each token
    measure = MutualInformationImportance(split, 10, 3)
    batch = make_batch(split, np.arange(len(docs)))
    scores = measure.attribute(None, batch, split.index, "test")
    np.testing.assert_allclose(scores.numpy(), expected[batch.tokens.numpy()])


def test_make_measure_names():
    for name in MEASURES:
        context = MeasureContext(train_split=Split.from_lists([[5]], [0]), vocab_size=6, n_classes=1)
        assert make_measure(name, {}, context).name == name
    with pytest.raises(ValueError, match="'saliency'.*random.*attention.*gradient.*mutual-information"):
        make_measure("saliency")
    with pytest.raises(ValueError, match="training split"):
        make_measure("mutual-information")
    assert make_measure("integrated-gradient", {"samples": 7}).samples == 7
    assert make_measure("integrated-gradient").samples == 50
    assert make_measure("random", {}, MeasureContext(seed=5)).seed == 5


def test_every_measure_spec_names_its_class_and_known_needs():
    """Each spec names a class whose ``name`` is the spec's, and needs known capabilities."""
    from roar.importance.registry import measure_class, model_passes
    from roar.config.catalog import CAPABILITIES, MEASURE_SPECS

    for name, spec in MEASURE_SPECS.items():
        assert measure_class(name).name == name == spec.name
        assert spec.requires <= set(CAPABILITIES), name
        expected = {"integrated-gradient": 7, "kernel-shap": 9, "occlusion": 21}
        assert model_passes(name, {"samples": 7}) == (expected.get(name, 1) if spec.needs_model else 0), name


def test_check_supported_compares_needs_with_the_family():
    from roar.config.catalog import MODELS, check_supported

    for model in MODELS:
        for name in MEASURES:
            if name == "attention" and model == "roberta":
                with pytest.raises(ValueError, match="'attention' is not defined for model 'roberta'.*bilstm-attention"):
                    check_supported(name, model)
            else:
                check_supported(name, model)
    with pytest.raises(ValueError, match="unknown model 'gpt'; allowed: bilstm-attention, roberta"):
        check_supported("gradient", "gpt")


def test_compute_importance_fills_rows_and_zero_padding():
    model = tiny_model(True)
    batch = tiny_batch(True)
    lengths = batch.lengths.tolist()
    split = Split.from_lists([batch.tokens[b, :n].tolist() for b, n in enumerate(lengths)], batch.labels.tolist(),
                             [batch.tokens2[b, :n].tolist() for b, n in enumerate(batch.lengths2.tolist())])
    out = compute_importance(GradientImportance(), model, split, "test", batch_size=2, progress=False)
    assert out.dtype == np.float32 and out.shape == split.tokens.shape
    direct = GradientImportance().attribute(model, batch, batch.rows, "test").numpy()
    real = real_positions(batch).numpy()
    np.testing.assert_allclose(out[real], direct[real], rtol=1e-5)
    assert np.all(out[~real] == 0)


def test_predicted_target_explains_the_class_the_model_predicts():
    model, batch = tiny_model(True), tiny_batch(True)
    predicted = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits.argmax(-1)
    assert (predicted != batch.labels).any()  # else the test could not tell the targets apart
    assert explained_batch(model, batch, "gold") is batch
    explained = explained_batch(model, batch, "predicted")
    assert explained.labels.tolist() == predicted.tolist()
    _, grad = one_hot_gradient(model, batch._replace(labels=predicted))
    real = real_positions(batch)
    got = GradientImportance().attribute(model, explained, batch.rows, "test")
    torch.testing.assert_close(got[real], grad.norm(dim=-1)[real], rtol=1e-6, atol=1e-9)
    gold = GradientImportance().attribute(model, batch, batch.rows, "test")
    differs = predicted != batch.labels
    assert not torch.allclose(got[differs], gold[differs])


def test_compute_importance_target_reaches_class_measures_only():
    model = tiny_model(True)
    batch = tiny_batch(True)
    split = Split.from_lists([batch.tokens[b, :n].tolist() for b, n in enumerate(batch.lengths.tolist())],
                             batch.labels.tolist(),
                             [batch.tokens2[b, :n].tolist() for b, n in enumerate(batch.lengths2.tolist())])
    predicted = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits.argmax(-1)
    out = compute_importance(GradientImportance(), model, split, "test", 2, False, target="predicted")
    direct = GradientImportance().attribute(model, batch._replace(labels=predicted), batch.rows, "test").numpy()
    real = real_positions(batch).numpy()
    np.testing.assert_allclose(out[real], direct[real], rtol=1e-5)
    assert prediction_agreement(model, split) == pytest.approx(float((predicted == batch.labels).float().mean()))
    for measure in (AttentionImportance(), RandomImportance(3)):  # they explain no class: target is moot
        np.testing.assert_array_equal(compute_importance(measure, model, split, "test", 2, False, "predicted"),
                                      compute_importance(measure, model, split, "test", 2, False, "gold"))
    with pytest.raises(ValueError, match="importance target 'silver' unknown; allowed: gold, predicted"):
        explained_batch(model, batch, "silver")


def test_only_the_gradient_family_and_the_perturbation_measures_explain_a_class():
    from roar.config.catalog import MEASURE_SPECS

    assert {name for name, spec in MEASURE_SPECS.items() if spec.explains_class} == {
        "gradient", "gradient-l1", "input-x-gradient", "integrated-gradient", "occlusion", "kernel-shap"}


def test_paired_model_has_its_own_second_embedding_from_the_same_vectors():
    model, batch = tiny_model(True), tiny_batch(True)
    torch.testing.assert_close(model.embedding2.weight, model.embedding.weight)
    before = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
    with torch.no_grad():
        model.embedding2.weight.mul_(2.0)  # the question's vectors only
    after = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
    assert not torch.allclose(before, after)
    assert not hasattr(tiny_model(False), "embedding2")


# --- the encoder -----------------------------------------------------------------------------

def packed_reference(encoder: BiLSTMEncoder, embeds: torch.Tensor, lengths: torch.Tensor):
    input_dim, hidden = encoder.forward_lstm.input_size, encoder.forward_lstm.hidden_size
    lstm = torch.nn.LSTM(input_dim, hidden, batch_first=True, bidirectional=True).double()
    with torch.no_grad():
        for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(lstm, name).copy_(getattr(encoder.forward_lstm, name))
            getattr(lstm, name + "_reverse").copy_(getattr(encoder.backward_lstm, name))
    packed = torch.nn.utils.rnn.pack_padded_sequence(embeds, lengths, batch_first=True, enforce_sorted=False)
    out, (h_n, _) = lstm(packed)
    states, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=embeds.shape[1])
    return states, torch.cat([h_n[0], h_n[1]], dim=-1)


def test_encoder_matches_packed_bidirectional_lstm():
    torch.manual_seed(0)
    encoder = BiLSTMEncoder(4, 3).double()
    lengths = torch.tensor([6, 2, 4, 1, 5])
    embeds = torch.randn(5, 6, 4, dtype=torch.float64)
    states, final = encoder(embeds, lengths)
    ref_states, ref_final = packed_reference(encoder, embeds, lengths)
    real = torch.arange(6)[None, :] < lengths[:, None]
    torch.testing.assert_close(states[real], ref_states[real], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(final, ref_final, rtol=1e-10, atol=1e-12)
    assert torch.all(states[~real] == 0)


def test_encoder_and_model_do_not_depend_on_padding_length():
    torch.manual_seed(0)
    encoder = BiLSTMEncoder(4, 3).double()
    lengths = torch.tensor([3, 1, 2])
    embeds = torch.randn(3, 3, 4, dtype=torch.float64)
    states, final = encoder(embeds, lengths)
    # 5 extra columns of garbage (not zeros) beyond every length, and garbage in the short rows' padding
    padded = torch.cat([embeds, torch.randn(3, 5, 4, dtype=torch.float64)], dim=1)
    padded[1, 1:] = 7.0
    states2, final2 = encoder(padded, lengths)
    torch.testing.assert_close(states2[:, :3], states * 1.0, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(final2, final, rtol=1e-12, atol=1e-14)
    assert torch.all(states2[:, 3:] == 0)

    model, batch = tiny_model(True), tiny_batch(True)
    out = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2)
    pad = torch.zeros(5, 4, dtype=torch.long)
    out2 = model(torch.cat([batch.tokens, pad], 1), batch.lengths, torch.cat([batch.tokens2, pad], 1),
                 batch.lengths2)
    torch.testing.assert_close(out2.logits, out.logits, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(out2.attention[:, :7], out.attention)
    # and each example alone (no padding at all) gives the same logits
    for b in range(5):
        n, n2 = int(batch.lengths[b]), int(batch.lengths2[b])
        alone = model(batch.tokens[b:b + 1, :n], batch.lengths[b:b + 1], batch.tokens2[b:b + 1, :n2],
                      batch.lengths2[b:b + 1])
        torch.testing.assert_close(alone.logits[0], out.logits[b], rtol=1e-12, atol=1e-14)


# --- gradient-l1: sum_v |dy_c/dx_v| per token ----------------------------------------------------

# Embedding W [V=3, D=2] and read-out U [D=2, C=2] of the linear model below.
L1_W = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, -1.0]], dtype=torch.float64)
L1_U = torch.tensor([[3.0, 0.5], [-1.0, 1.0]], dtype=torch.float64)


class LinearBag(torch.nn.Module):
    """``logits = (sum_{i < length} e_i) U``: every token's ``dy_c/de`` is ``U[:, c]``, so
    ``dy_c/dx_v = W_v . U[:, c]`` whatever the input (W, U: :data:`L1_W`, :data:`L1_U`)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(L1_W.clone())

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.weight[tokens]

    def embedding_matrix(self) -> torch.Tensor:
        return self.weight

    def forward(self, tokens, lengths, tokens2=None, lengths2=None, inputs_embeds=None) -> ModelOutput:
        embeds = self.embed(tokens) if inputs_embeds is None else inputs_embeds
        inside = (torch.arange(tokens.shape[1])[None, :] < lengths[:, None]).double()
        return ModelOutput((embeds * inside[..., None]).sum(1) @ L1_U, None, None)


def linear_batch() -> Batch:
    tokens = torch.tensor([[0, 1, 2], [2, 1, 0]])
    return Batch(tokens, torch.tensor([3, 2]), None, None, torch.tensor([0, 1]), torch.arange(2).numpy())


def test_gradient_l1_by_hand():
    """Class 0: W U[:, 0] = (3, -2, 4), L1 9 (L2 sqrt 29); class 1: W U[:, 1] = (0.5, 2, -0.5), L1 3."""
    model, batch = LinearBag(), linear_batch()
    got = make_measure("gradient-l1").attribute(model, batch, batch.rows, "test")
    torch.testing.assert_close(got[0], torch.full((3,), 9.0, dtype=torch.float64))
    torch.testing.assert_close(got[1, :2], torch.full((2,), 3.0, dtype=torch.float64))
    l2 = GradientImportance().attribute(model, batch, batch.rows, "test")
    torch.testing.assert_close(l2[0], torch.full((3,), 29.0 ** 0.5, dtype=torch.float64))


@pytest.mark.parametrize("paired", [False, True])
def test_gradient_l1_is_l1_norm_of_one_hot_gradient(paired):
    model, batch = tiny_model(paired), tiny_batch(paired)
    _, grad = one_hot_gradient(model, batch)
    got = GradientL1Importance().attribute(model, batch, batch.rows, "test")
    real = real_positions(batch)
    torch.testing.assert_close(got[real], grad.abs().sum(-1)[real], rtol=1e-6, atol=1e-9)
    assert grad.abs().sum(-1)[real].min() > 0  # non-trivial comparison


def test_gradient_l1_same_in_vocabulary_chunks(monkeypatch):
    """One vocabulary row per chunk gives the one-chunk scores."""
    model, batch = tiny_model(False), tiny_batch(False)
    whole = GradientL1Importance().attribute(model, batch, batch.rows, "test")
    monkeypatch.setattr(gradient_l1, "CHUNK_ELEMENTS", 1)
    torch.testing.assert_close(GradientL1Importance().attribute(model, batch, batch.rows, "test"), whole)
