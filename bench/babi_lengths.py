"""Generated bAbI tasks 1-3 beside the official statistics (``roar.data.babi.OFFICIAL_STATS``).

Usage: ``PYTHONPATH=src python bench/babi_lengths.py [n_questions] [seed]``. Prints, per task,
statements before each question, first-sequence tokens (as ``roar prepare`` counts them) and
distractors: mean, quantiles 10/25/50/75/90 and max; then the statement mix and the vocabulary
size (with the 5 special tokens, as prepared).
"""

from __future__ import annotations

import sys

import numpy as np

from roar.data.babi import OFFICIAL_STATS, generate_task, story_statistics
from roar.data.tokenize import SPECIALS, tokenize

COLUMNS = ("mean", "q10", "q25", "q50", "q75", "q90", "max")


def summary(values: list[int]) -> dict[str, float]:
    a = np.asarray(values, dtype=float)
    q = np.percentile(a, [10, 25, 50, 75, 90])
    return dict(zip(COLUMNS, [a.mean(), *q, a.max()]))


def fmt(row: dict[str, float]) -> str:
    return " ".join(f"{row[c]:7.1f}" if c in row else f"{'-':>7}" for c in COLUMNS)


def main(n: int = 3000, seed: int = 0) -> None:
    print(f"generated: {n} questions per task, seed {seed}; official: see OFFICIAL_STATS in roar/data/babi.py")
    for task in (1, 2, 3):
        examples = generate_task(task, n, seed)
        stats = story_statistics(examples)
        official = OFFICIAL_STATS[task]
        print(f"\nbAbI-{task}{'':14s}" + " ".join(f"{c:>7}" for c in COLUMNS))
        for key in ("statements", "tokens", "distractors"):
            print(f"  {key:12s} gen  {fmt(summary(stats[key]))}")
            if key in official:
                print(f"  {'':12s} off  {fmt(official[key])}")
        kinds = " ".join(f"{k} {v:.3f}" for k, v in stats["kinds"].items())
        print(f"  kinds gen {kinds}; off " + " ".join(f"{k} {v:.3f}" for k, v in official["kinds"].items()))
        if task > 1:
            print(f"  'there' gen take {stats['there']['take']:.2f} drop {stats['there']['drop']:.2f}; "
                  f"off take {official['there']['take']:.2f} drop {official['there']['drop']:.2f}")
        words = {t for ex in examples for t in tokenize(" ".join(ex.story)) + tokenize(ex.question)}
        print(f"  vocabulary gen {len(words) + len(SPECIALS)}; off {official['vocab']}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
