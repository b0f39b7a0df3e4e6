"""The ``fidelity`` preset of ``params.yaml``: roar's definitions (``roar``, the default) or those of the paper's
official code (``official``, github.com/AndreasMadsen/nlp-roar-interpretability).

Where roar and the official code compute something differently, an option of its own says which to use, at
roar's definition unless set (docs/method.md, "Fidelity to the official code", has the table with the
official code's files):

* ``importance.integrated-gradient.weighting``: ``textbook`` | ``official`` (each Riemann term times i/n)
* ``prepare.<babi-N>.tokens``: ``roar`` | ``official`` (case kept, statements joined by " . ")
* ``train.<model>.<dataset>.attend`` (families with attention): ``all`` | ``official`` (not the start and end
  tokens)
* ``train.<model>.<dataset>.batching``: ``buckets`` | ``shuffled``
* ``study.masking_count``: ``roar`` | ``official`` (the quantile count in float32)
* ``study.racu_baseline``: ``recursive-random`` | ``plain-random``

``fidelity: official`` sets each of them that the params leave unset to the official code's definition, where
it applies (tokens: the bAbI datasets; attend: families with attention; weighting: when
``importance.integrated-gradient`` is there). An option written in the params wins over the preset, so that
one difference can be switched back at a time. :func:`roar.config.params.load_params` applies the preset,
so that everything downstream (stages, step keys, reports) sees the options as if written out; with
``fidelity: roar`` or without the key the params stay exactly as written.

DVC does not see ``fidelity`` (nor ``study.masking_count``, see docs/method.md): it reads only params keys
that every params file holds, so changing either in a study that has run needs ``dvc repro --force``.
"""

from __future__ import annotations

import copy

from roar.config.catalog import IG_WEIGHTINGS, MASKING_COUNTS, RACU_BASELINES, model_family
from roar.config.datasets import DATASETS, TOKENS
from roar.config.train_config import ATTEND, BATCHING

PRESETS = ("roar", "official")


def with_fidelity(params: dict) -> dict:
    """``params`` (checked by :func:`roar.config.schema.check_params`) with its ``fidelity`` preset applied: for
    ``official`` a copy with every unset option at the official code's definition; ``params`` itself for
    ``roar`` or without the key."""
    if params.get("fidelity", PRESETS[0]) == PRESETS[0]:
        return params
    out = copy.deepcopy(params)
    for path, values in _options(out):
        parent = out
        for part in path[:-2]:
            parent = parent[part]
        node = parent[path[-2]] = dict(parent[path[-2]] or {})  # a null section is an empty one
        node.setdefault(path[-1], values[1])
    return out


def official_settings(params: dict) -> list[str]:
    """``key: value`` of every option of ``params`` that is not at roar's definition (the report lists them)."""
    found = []
    for path, values in _options(params):
        node: object = params
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None and node != values[0]:
            found.append(f"{'.'.join(path)}: {node}")
    return found


def _options(params: dict) -> list[tuple[tuple[str, ...], tuple[str, str]]]:
    """Where the params have room for an option (its key as a path), and its values: (roar's, the official's)."""
    found = [(("study", "masking_count"), MASKING_COUNTS), (("study", "racu_baseline"), RACU_BASELINES)]
    found += [(("prepare", dataset, "tokens"), TOKENS) for dataset in params.get("prepare") or {}
              if TOKENS[1] in DATASETS[dataset].tokens]
    for model, per_dataset in (params.get("train") or {}).items():
        for dataset in per_dataset:
            found.append((("train", model, dataset, "batching"), BATCHING))
            if model_family(model).supports("attention"):
                found.append((("train", model, dataset, "attend"), ATTEND))
    if "integrated-gradient" in (params.get("importance") or {}):
        found.append((("importance", "integrated-gradient", "weighting"), IG_WEIGHTINGS))
    return found
