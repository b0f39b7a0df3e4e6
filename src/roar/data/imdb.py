"""IMDB movie reviews (Maas et al. 2011), binary, with the paper's filters and splits.

The paper follows Jain & Wallace (2019), who used the Keras copy of IMDB (lower-cased words,
punctuation removed): reviews of fewer than 400 words are kept (and, at training time, only
those of more than 6 words), the training set is split 80/20 into train/validation, and a
random 20 % of the (filtered) test set is the test split. Here, from the official
``aclImdb`` folder:

- text: the review with its ``<br />`` line breaks replaced by spaces;
- length: the number of words, i.e. tokens of :func:`roar.data.tokenize.tokenize` that start
  with a letter or digit (punctuation does not count, like the Keras copy); a review is kept
  if ``min_words <= words <= max_words`` (default 7..399, the paper's ``6 < words < 400``);
- train/validation: a seeded 80/20 split of the filtered training reviews;
- test: a seeded 20 % subsample of the filtered test reviews.
"""

from __future__ import annotations

import re
from pathlib import Path

from roar.config.datasets import PrepareConfig, RawExample, RawSplits, split_validation
from roar.data.sources import (HUB, NEGATIVE, POSITIVE, check_options, find_folder, hub_splits, missing,
                               seeded_subsample, source_kind)
from roar.data.tokenize import tokenize

HUB_ID = "stanfordnlp/imdb"
HOW_TO_GET = "download aclImdb_v1.tar.gz from https://ai.stanford.edu/~amaas/data/sentiment/ and unpack it"
DEFAULTS = {"min_words": 7, "max_words": 399, "val_fraction": 0.2, "test_fraction": 0.2}
_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_FILE_NAME = re.compile(r"(\d+)_(\d+)\.txt")


def clean_review(text: str) -> str:
    """The review with HTML line breaks turned into spaces."""
    return _LINE_BREAK.sub(" ", text).strip()


def count_words(text: str) -> int:
    """Words of ``text``: tokens that start with a letter or digit (punctuation excluded)."""
    return sum(tok[0].isalnum() for tok in tokenize(text))


def read_reviews(folder: Path) -> list[RawExample]:
    """Reviews of one ``aclImdb`` split folder (``neg/`` then ``pos/``, each by review id)."""
    out = []
    for sub, label in (("neg", NEGATIVE), ("pos", POSITIVE)):
        files = sorted(((int(m.group(1)), p) for p in (folder / sub).glob("*.txt")
                        if (m := _FILE_NAME.fullmatch(p.name))), key=lambda item: item[0])
        for _, path in files:
            try:
                out.append(RawExample(clean_review(path.read_text(encoding="utf-8")), label))
            except UnicodeDecodeError as error:
                raise ValueError(f"{path} is not UTF-8 text (byte {error.start}); {HOW_TO_GET}") from error
    return out


def load(name: str, config: PrepareConfig) -> RawSplits:
    """Length-filtered IMDB with a seeded 80/20 train/validation split and a 20 % test subsample.

    Sources:
        a local path: the ``aclImdb`` folder (or the folder that holds it);
        ``hub``: the HF dataset ``stanfordnlp/imdb`` (online only).

    Options:
        min_words, max_words (int, default 7 and 399): keep reviews with this many words.
        val_fraction (float, default 0.2): share of the filtered training set for validation.
        test_fraction (float, default 0.2): share of the filtered test set kept as test split.
    """
    check_options(name, config.options, DEFAULTS)
    opts = {**DEFAULTS, **config.options}
    kind = source_kind(name, config, (HUB,), "the aclImdb folder")
    if kind == HUB:
        rows = hub_splits(name, HUB_ID)
        raw = {split: [RawExample(clean_review(r["text"]), (NEGATIVE, POSITIVE)[r["label"]]) for r in rows[split]]
               for split in ("train", "test")}
    else:
        root = Path(config.source).expanduser()
        folder = find_folder(root, "train/pos", ("aclImdb",))
        if folder is None:
            raise missing(name, root / "train" / "pos", HOW_TO_GET)
        raw = {}
        for split in ("train", "test"):
            for sub in ("neg", "pos"):
                if not (folder / split / sub).is_dir():
                    raise missing(name, folder / split / sub, HOW_TO_GET)
            raw[split] = read_reviews(folder / split)
    low, high = int(opts["min_words"]), int(opts["max_words"])
    kept = {split: [e for e in exs if low <= count_words(e.text) <= high] for split, exs in raw.items()}
    train, val = split_validation(kept["train"], float(opts["val_fraction"]), config.seed)
    test = seeded_subsample(kept["test"], float(opts["test_fraction"]), config.seed)
    return RawSplits(train, test, val)
