"""Stanford Sentiment Treebank (SST), binary, as in the paper (and Jain & Wallace 2019).

Reads the PTB-format tree files of the official distribution (``trees/train.txt``,
``trees/dev.txt``, ``trees/test.txt``; one tree per line, every node ``(label ...)`` with the
sentiment 0-4). A sentence's text is the leaves of its tree; its label is the root's: 0-1
negative, 3-4 positive, 2 (neutral) dropped. Sentences with 5 or fewer leaves are dropped
(the paper keeps sentences of more than 5 tokens). The dev file is the validation split.
"""

from __future__ import annotations

import re
from pathlib import Path

from roar.config.datasets import PrepareConfig, RawExample, RawSplits
from roar.data.sources import HUB, NEGATIVE, POSITIVE, check_options, find_folder, hub_splits, missing, source_kind

SPLIT_FILES = {"train": "train.txt", "val": "dev.txt", "test": "test.txt"}
HUB_ID = "stanfordnlp/sst"
HUB_SPLITS = {"train": "train", "val": "validation", "test": "test"}
HOW_TO_GET = ("download trainDevTestTrees_PTB.zip from https://nlp.stanford.edu/sentiment/ and unzip it "
              "(it holds trees/train.txt, dev.txt, test.txt)")
MIN_TOKENS = 6  # "more than 5 tokens"
# PTB escapes in the leaves, mapped back to the characters they stand for.
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
_TREE_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_tree(line: str) -> tuple[int, list[str]]:
    """Root label and leaves of one PTB-format tree such as ``(3 (2 It) (4 (4 works) (2 .)))``.

    Raises:
        ValueError: for a line that is not a well-formed tree.
    """
    tokens = _TREE_TOKEN.findall(line)
    if len(tokens) < 4 or tokens[0] != "(" or not tokens[1].isdigit():
        raise ValueError(f"not a PTB tree: {line[:80]!r}")
    depth, leaves = 0, []
    for prev, tok in zip(["("] + tokens, tokens):
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced PTB tree: {line[:80]!r}")
        elif prev != "(":  # a word, not the label that follows an opening bracket
            leaves.append(_PTB_ESCAPES.get(tok, tok.replace("\\/", "/").replace("\\*", "*")))
    if depth != 0 or not leaves:
        raise ValueError(f"unbalanced PTB tree: {line[:80]!r}")
    return int(tokens[1]), leaves


def binary_examples(trees: list[str], min_tokens: int = MIN_TOKENS, where: str = "") -> list[RawExample]:
    """Binary examples of PTB tree lines: neutral roots and sentences under ``min_tokens`` leaves dropped.

    Raises:
        ValueError: for a malformed tree, naming ``where`` (the file) and the line number.
    """
    out = []
    for number, line in enumerate(trees, start=1):
        if not line.strip():
            continue
        try:
            label, leaves = parse_tree(line)
        except ValueError as error:
            if not where:
                raise
            raise ValueError(f"{where} line {number}: {error}") from error
        if label == 2 or len(leaves) < min_tokens:
            continue
        out.append(RawExample(" ".join(leaves), NEGATIVE if label < 2 else POSITIVE))
    return out


def load(name: str, config: PrepareConfig) -> RawSplits:
    """Binary SST with the paper's filter (more than 5 tokens); dev = validation split.

    Sources:
        a local path: the folder holding ``trees/`` (or the ``trees`` folder itself);
        ``hub``: the HF dataset ``stanfordnlp/sst`` (config ``ptb``; online only).

    Options:
        min_tokens (int, default 6): keep sentences with at least this many leaves.
    """
    options = dict(config.options)
    check_options(name, options, ("min_tokens",))
    min_tokens = int(options.get("min_tokens", MIN_TOKENS))
    kind = source_kind(name, config, (HUB,), "the folder with trees/train.txt, dev.txt, test.txt")
    if kind == HUB:
        rows = hub_splits(name, HUB_ID, "ptb")
        trees = {split: [r["ptb_tree"] for r in rows[hub]] for split, hub in HUB_SPLITS.items()}
    else:
        root = Path(config.source).expanduser()
        folder = find_folder(root, SPLIT_FILES["train"], ("trees",))
        if folder is None:
            raise missing(name, root / "trees" / SPLIT_FILES["train"], HOW_TO_GET)
        trees = {}
        for split, file in SPLIT_FILES.items():
            if not (folder / file).is_file():
                raise missing(name, folder / file, HOW_TO_GET)
            try:
                trees[split] = (folder / file).read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as error:
                raise ValueError(f"{folder / file} is not UTF-8 text (byte {error.start}); {HOW_TO_GET}") from error
    where = {} if kind == HUB else {split: str(folder / file) for split, file in SPLIT_FILES.items()}
    data = {split: binary_examples(lines, min_tokens, where.get(split, f"{HUB_ID} {split}"))
            for split, lines in trees.items()}
    return RawSplits(data["train"], data["test"], data["val"])
