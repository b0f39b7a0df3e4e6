"""BiLSTM-attention classifiers of Jain & Wallace (2019) as used by Madsen et al. (2022).

Both take the first sequence's embeddings from outside when asked (``inputs_embeds``), so that
gradient-based importance measures can differentiate with respect to them and integrated
gradients can scale them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from roar.models.base import ModelOutput

if TYPE_CHECKING:
    from roar.data.storage import DatasetMeta
    from roar.config.train_config import TrainConfig


def padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """``[B, L]`` bool, True on real tokens."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis with masked-out positions at exactly 0."""
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence of ``[B, L, ...]`` within its length; padding stays in place."""
    positions = torch.arange(x.shape[1], device=x.device)[None, :]
    index = torch.where(positions < lengths[:, None], lengths[:, None] - 1 - positions, positions)
    return x.gather(1, index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x))


class BiLSTMEncoder(nn.Module):
    """One-layer bidirectional LSTM over right-padded sequences.

    The backward direction runs a second LSTM over each sequence reversed within its length, so
    both directions run on plain padded tensors (the fused CPU/GPU kernels) instead of packed
    sequences, whose CPU backward pass is several times slower; outputs at real positions are
    exactly those of a packed bidirectional LSTM.
    """

    def __init__(self, input_dim: int, hidden: int):
        super().__init__()
        self.forward_lstm = nn.LSTM(input_dim, hidden, batch_first=True)
        self.backward_lstm = nn.LSTM(input_dim, hidden, batch_first=True)

    def forward(self, embeddings: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns states ``[B, L, 2H]`` (0 on padding) and the final state ``[B, 2H]`` (forward ++ backward)."""
        lengths = lengths.clamp(min=1)
        forward_states, _ = self.forward_lstm(embeddings)
        width = embeddings.shape[1]
        if bool((lengths == width).all()):
            # No padding (batches of one length, roar.models.batching.length_batches): a flip is the
            # reversal and nothing needs masking; the same values as the general path, fewer copies.
            backward_states = self.backward_lstm(embeddings.flip(1))[0].flip(1)
            final = torch.cat([forward_states[:, -1], backward_states[:, 0]], dim=-1)
            return torch.cat([forward_states, backward_states], dim=-1), final
        backward_states = reverse_padded(self.backward_lstm(reverse_padded(embeddings, lengths))[0], lengths)
        last = (lengths - 1)[:, None, None].expand(-1, 1, forward_states.shape[-1])
        final = torch.cat([forward_states.gather(1, last).squeeze(1), backward_states[:, 0]], dim=-1)
        states = torch.cat([forward_states, backward_states], dim=-1)
        return states * padding_mask(lengths, width)[..., None], final


class BiLSTMAttention(nn.Module):
    """BiLSTM-attention for one sequence (SST, IMDB, MIMIC) or a pair (SNLI, bAbI).

    Single: embedding -> BiLSTM -> additive tanh attention -> linear.
    Paired: separate embeddings and BiLSTMs for both sequences; attention over the first conditioned on the
    second's final state q, ``v . tanh(W1 h_t + W1' q)``; decoder ``tanh(Wp c + Wq q)`` -> linear.

    Args:
        vocab_size: number of token ids.
        n_classes: number of output classes.
        paired: whether a second sequence conditions the attention.
        embedding_dim: word vector size.
        hidden: LSTM hidden size per direction.
        attention_hidden: size of the additive attention's hidden layer.
        embeddings: optional ``[V, D]`` pretrained vectors (rows of pad/special/OOV are zero).
        unattended: token ids the attention leaves out besides padding: none (roar), or the start and end
            tokens (``attend: official``: the official code attends only to ids >= [MASK], so to words,
            [UNK] and [MASK]; nlproar/dataset/_vocab_tokenizer.py ``mask``).
    """

    # cuDNN computes an LSTM's backward pass only in training mode; the gradient measures
    # differentiate this model in eval mode (roar.importance.base.rnn_backward_allowed). Its LSTMs
    # have no dropout, so training mode changes nothing else.
    cudnn_rnn = True
    # Full float32 training: the model is small and its time is the sequential recurrence, not
    # matrix throughput, so mixed precision gains little, and rounding to 16 bits would compound
    # over hundreds of recurrent steps (bAbI, IMDB), moving GPU runs away from CPU runs.
    mixed_precision = False

    def __init__(self, vocab_size: int, n_classes: int, paired: bool, embedding_dim: int = 300,
                 hidden: int = 128, attention_hidden: int = 128, embeddings: torch.Tensor | None = None,
                 unattended: tuple[int, ...] = ()):
        super().__init__()
        self.paired = paired
        self.unattended = unattended  # a plain tuple, not a buffer: the saved weights stay as they were
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
        if embeddings is not None:
            self.embedding.weight.data.copy_(embeddings)
        self.encoder = BiLSTMEncoder(embedding_dim, hidden)
        self.attention_in = nn.Linear(2 * hidden, attention_hidden)
        self.attention_out = nn.Linear(attention_hidden, 1, bias=False)
        if paired:
            # The second sequence has its own embedding matrix, starting from the same vectors (the
            # paper's setup); the gradient measures use the first sequence's matrix.
            self.embedding2 = nn.Embedding(vocab_size, embedding_dim, padding_idx=0)
            self.embedding2.weight.data.copy_(self.embedding.weight.data)
            self.encoder2 = BiLSTMEncoder(embedding_dim, hidden)
            self.attention_query = nn.Linear(2 * hidden, attention_hidden, bias=False)
            self.decoder_context = nn.Linear(2 * hidden, hidden)
            self.decoder_query = nn.Linear(2 * hidden, hidden, bias=False)
            self.output = nn.Linear(hidden, n_classes)
        else:
            self.output = nn.Linear(2 * hidden, n_classes)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """``[B, L]`` ids -> ``[B, L, D]`` embeddings of the first sequence."""
        return self.embedding(tokens)

    def embedding_matrix(self) -> torch.Tensor:
        """``[V, D]`` the first sequence's embedding table."""
        return self.embedding.weight

    @torch.no_grad()
    def set_word_vectors(self, vectors: torch.Tensor) -> None:
        """Start both sequences' embeddings from the ``[V, D]`` pretrained ``vectors``."""
        for embedding in (self.embedding, getattr(self, "embedding2", None)):
            if embedding is not None:
                embedding.weight.copy_(vectors)

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor, tokens2: torch.Tensor | None = None,
                lengths2: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> ModelOutput:
        """Classify a batch.

        Args:
            tokens: ``[B, L]`` first-sequence ids, right-padded.
            lengths: ``[B]`` first-sequence lengths.
            tokens2: ``[B, L2]``, the second sequence (paired models only).
            lengths2: ``[B]``, its lengths.
            inputs_embeds: ``[B, L, D]`` first-sequence embeddings to use instead of ``embed(tokens)``.
        """
        embeddings = self.embed(tokens) if inputs_embeds is None else inputs_embeds
        states, _ = self.encoder(embeddings, lengths)
        mask = padding_mask(lengths, tokens.shape[1])
        if self.unattended:
            mask = mask & ~torch.isin(tokens, torch.tensor(self.unattended, device=tokens.device))
        hidden = self.attention_in(states)
        if self.paired:
            _, query = self.encoder2(self.embedding2(tokens2), lengths2)
            hidden = hidden + self.attention_query(query)[:, None, :]
        attention = masked_softmax(self.attention_out(torch.tanh(hidden)).squeeze(-1), mask)
        context = torch.einsum("bl,bld->bd", attention, states)
        if self.paired:
            logits = self.output(torch.tanh(self.decoder_context(context) + self.decoder_query(query)))
        else:
            logits = self.output(context)
        return ModelOutput(logits, attention, embeddings)

    def saved_floats_per_row(self, length: int, length2: int = 0) -> int:
        """Float32 values the forward pass keeps for a backward pass, for one row of ``length``
        (+ ``length2``) tokens: ``(length + length2) * (16 D + 36 H + 2 A)``.

        Per token: the LSTM inputs (time-major and reversed copies), the LSTM kernels' workspace
        (gates and cell states of both directions, the larger part), the states and the attention
        layer. The coefficients bound what torch's CPU (oneDNN) kernels keep, measured with
        ``torch.autograd.graph.saved_tensors_hooks`` (tests/unit/models/test_device.py); cuDNN keeps less.
        """
        dim, hidden = self.embedding.embedding_dim, self.encoder.forward_lstm.hidden_size
        return (length + length2) * (16 * dim + 36 * hidden + 2 * self.attention_in.out_features)

    def make_optimizer(self, config, total_steps: int):
        """Adam with amsgrad; weight decay on everything for pairs, on all but the embedding for
        single sequences (the paper's setup). No schedule."""
        embedding = {id(p) for p in self.embedding.parameters()}
        decayed = [p for p in self.parameters() if self.paired or id(p) not in embedding]
        groups = [{"params": decayed, "weight_decay": config.weight_decay}]
        if not self.paired:
            groups.append({"params": list(self.embedding.parameters()), "weight_decay": 0.0})
        return torch.optim.Adam(groups, lr=config.lr, amsgrad=True), None


def build(meta: DatasetMeta, vocab_size: int, config: TrainConfig,
          architecture: dict | None = None) -> BiLSTMAttention:
    """A randomly initialised BiLSTM-attention for ``meta``'s task (the family's builder in
    :mod:`roar.config.catalog`; ``architecture`` is unused: ``config`` describes the whole model). With
    ``config.attend: official`` its attention leaves out ``meta``'s never-masked ids (padding, start, end)."""
    unattended = tuple(meta.unmaskable_ids) if config.attend == "official" else ()
    return BiLSTMAttention(vocab_size, len(meta.classes), meta.paired, config.embedding_dim, config.hidden,
                           config.attention_hidden, unattended=unattended)
