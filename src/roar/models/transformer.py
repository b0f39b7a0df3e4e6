"""Transformer classifier over any Hugging Face encoder checkpoint (RoBERTa-base in the paper).

Token ids come from the checkpoint's own tokenizer (:mod:`roar.data.checkpoint_tokenizer`): the
first sequence with its start and end tokens, the second with the rest of the pair encoding.

:class:`TransformerClassifier` is a :class:`~roar.models.base.Classifier`: it takes the first
sequence's word embeddings from outside (``inputs_embeds``) for the gradient measures; the model
adds position and token-type embeddings itself. Each row's two sequences are packed contiguously and padded at the end, so
that the first sequence's padding never sits between them and the logits equal those of the
Hugging Face model on the tokenizer's padded pair encoding.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from roar.data.checkpoint_tokenizer import resolve_checkpoint
from roar.models.base import ModelOutput

if TYPE_CHECKING:
    from roar.data.storage import DatasetMeta
    from roar.config.train_config import TrainConfig


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
        """The HF config as a JSON-able dict (saved beside the weights to rebuild the model offline),
        without ``_name_or_path``: the checkpoint's folder on the machine that trained it, which would make
        the saved model's bytes, and so its content hash, depend on where the project lives."""
        return {k: v for k, v in self.hf.config.to_dict().items() if k != "_name_or_path"}

    @property
    def embedding(self) -> nn.Embedding:
        """The word-embedding table ``[V, D]`` (a property, so the weights are stored once)."""
        return self.hf.get_input_embeddings()

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` word embeddings of the first sequence."""
        return self.embedding(tokens)

    def embedding_matrix(self) -> torch.Tensor:
        """``[V, D]`` the word-embedding table (shared by both sequences)."""
        return self.embedding.weight

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, tokens2: torch.Tensor | None = None,
                lengths2: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> ModelOutput:
        """Classify a batch.

        Args:
            tokens: ``[B, L]`` first-sequence ids (with start and end tokens), right-padded.
            lengths: ``[B]`` first-sequence lengths.
            tokens2: ``[B, L2]``, the rest of the pair encoding (pairs only).
            lengths2: ``[B]``, its lengths.
            inputs_embeds: ``[B, L, D]`` first-sequence word embeddings to use instead of ``embed(tokens)``.

        Returns:
            :class:`~roar.models.base.ModelOutput` with ``[B, C]`` logits, no attention, and the
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
        probabilities. Measured against ``saved_tensors_hooks`` in tests/unit/models/test_device.py.
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


def build(meta: DatasetMeta, vocab_size: int, config: TrainConfig,
          architecture: dict | None = None) -> TransformerClassifier:
    """The pretrained ``config.checkpoint`` with a fresh classification head for ``meta``'s task (the
    family's builder in :mod:`roar.config.catalog`).

    Args:
        architecture: a saved model's HF config (``TransformerClassifier.config_dict``): rebuild that
            architecture, randomly initialised and without network, instead of loading the checkpoint.
    """
    if architecture is not None:
        return TransformerClassifier.from_config_dict(architecture)
    if not config.checkpoint:
        raise ValueError(f"model {config.model!r} needs a checkpoint (train.{config.model}.{meta.name}.checkpoint: "
                         "a HF checkpoint name or a local directory)")
    if meta.tokenizer != config.checkpoint:
        raise ValueError(f"dataset {meta.name} was tokenized for {meta.tokenizer!r}, not for checkpoint "
                         f"{config.checkpoint!r}; prepare it for this model")
    model = TransformerClassifier.from_checkpoint(config.checkpoint, len(meta.classes))
    if vocab_size > model.embedding.num_embeddings:
        raise ValueError(f"tokenizer vocabulary ({vocab_size}) exceeds the embedding rows of "
                         f"{config.checkpoint!r} ({model.embedding.num_embeddings})")
    return model


def is_layer_norm(module: nn.Module) -> bool:
    """LayerNorm modules, including architectures' own classes (``*LayerNorm``, ``*RMSNorm``)."""
    return isinstance(module, nn.LayerNorm) or type(module).__name__.lower().endswith("norm")
