"""Word tokenizer and vocabulary for the BiLSTM models (built from the training split only)."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

PAD, UNK, MASK, START, END = "[PAD]", "[UNK]", "[MASK]", "[START]", "[END]"
SPECIALS = (PAD, UNK, MASK, START, END)
PAD_ID, UNK_ID, MASK_ID, START_ID, END_ID = range(len(SPECIALS))
# Ids that masking never touches: padding and sequence boundaries.
UNMASKABLE_IDS = (PAD_ID, START_ID, END_ID)

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[^\sa-z0-9]")


def tokenize(text: str) -> list[str]:
    """Lower-cased word and punctuation tokens."""
    return _WORD.findall(text.lower())


def split_words(text: str) -> list[str]:
    """Whitespace-separated tokens, case kept: the official code's bAbI tokenizer (``sentence.split()``)."""
    return text.split()


# The word tokenizer of each ``prepare.<dataset>.tokens`` (roar.config.datasets.TOKENS).
WORD_TOKENIZERS: dict[str, Callable[[str], list[str]]] = {"roar": tokenize, "official": split_words}


class Vocabulary:
    """Token <-> id mapping with the special tokens first."""

    def __init__(self, tokens: list[str]):
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with the special tokens {SPECIALS}")
        self.tokens = tokens
        self.index = {tok: i for i, tok in enumerate(tokens)}

    @classmethod
    def build(cls, texts: Iterable[list[str]], min_count: int = 1) -> Vocabulary:
        """Vocabulary of tokens seen at least ``min_count`` times, most frequent first (ties A-Z)."""
        counts = Counter(tok for toks in texts for tok in toks)
        words = sorted((t for t, c in counts.items() if c >= min_count and t not in SPECIALS),
                       key=lambda t: (-counts[t], t))
        return cls(list(SPECIALS) + words)

    def encode(self, tokens: list[str], boundaries: bool = True) -> list[int]:
        """Ids of ``tokens`` (unknown -> ``[UNK]``), wrapped in ``[START]``/``[END]`` if asked."""
        ids = [self.index.get(t, UNK_ID) for t in tokens]
        return [START_ID, *ids, END_ID] if boundaries else ids

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.tokens[i] for i in ids]

    def __len__(self) -> int:
        return len(self.tokens)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.tokens, indent=0) + "\n")

    @classmethod
    def load(cls, path: Path) -> Vocabulary:
        return cls(json.loads(path.read_text()))


def maskable_positions(tokens: np.ndarray, lengths: np.ndarray,
                       unmaskable_ids: tuple[int, ...] = UNMASKABLE_IDS) -> np.ndarray:
    """``[N, L]`` bool: inside the sequence and not a special token (mask tokens count as maskable)."""
    inside = np.arange(tokens.shape[1])[None, :] < lengths[:, None]
    return inside & ~np.isin(tokens, unmaskable_ids)
