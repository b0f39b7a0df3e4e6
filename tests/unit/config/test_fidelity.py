"""The ``fidelity`` preset: ``official`` fills in the official code's definition of every option left unset,
an option written in the params wins, and without the key (or with ``roar``) nothing changes, down to the
step keys."""

from __future__ import annotations

import copy

import pytest
import yaml

from roar.config.fidelity import official_settings, with_fidelity
from roar.config.params import load_params
from roar.config.schema import check_params
from roar.core.errors import RoarError
from roar.pipeline.chain import ChainRunner, ChainSpec
from roar.tracking.protocol import NullTracker
from tests.conftest import tiny_params

OFFICIAL = {"study.masking_count": "official", "study.racu_baseline": "plain-random",
            "prepare.babi-1.tokens": "official", "train.bilstm-attention.babi-1.attend": "official",
            "train.bilstm-attention.babi-1.batching": "shuffled",
            "importance.integrated-gradient.weighting": "official"}


def official_params(**study) -> dict:
    """The tiny study with a plain ROAR random chain (the official RACU baseline) and ``fidelity: official``."""
    params = tiny_params(**{"roar_measures": ["random"], **study})
    params["fidelity"] = "official"
    return params


def value(params: dict, key: str) -> object:
    node = params
    for part in key.split("."):
        node = (node or {}).get(part)
    return node


def test_without_the_key_or_with_roar_the_params_stay_as_written():
    params = tiny_params()
    assert with_fidelity(params) is params and official_settings(params) == []
    params["fidelity"] = "roar"
    assert with_fidelity(params) is params


def test_official_sets_every_option_left_unset():
    params = official_params()
    before = copy.deepcopy(params)
    effective = with_fidelity(check_params(params))
    assert {key: value(effective, key) for key in OFFICIAL} == OFFICIAL
    assert params == before  # the params as written are not changed
    assert sorted(official_settings(effective)) == sorted(f"{key}: {v}" for key, v in OFFICIAL.items())
    # the rest is untouched
    for key in ("importance.integrated-gradient.samples", "train.bilstm-attention.babi-1.epochs"):
        assert value(effective, key) == value(params, key)


def test_an_option_written_in_the_params_wins_over_the_preset():
    params = official_params()
    params["train"]["bilstm-attention"]["babi-1"]["batching"] = "buckets"
    params["study"]["masking_count"] = "roar"
    params["importance"]["integrated-gradient"]["weighting"] = "textbook"
    effective = with_fidelity(check_params(params))
    assert value(effective, "train.bilstm-attention.babi-1.batching") == "buckets"
    assert value(effective, "study.masking_count") == "roar"
    assert value(effective, "importance.integrated-gradient.weighting") == "textbook"
    assert value(effective, "train.bilstm-attention.babi-1.attend") == "official"  # the others still official
    assert "study.masking_count: roar" not in official_settings(effective)


def test_the_preset_applies_where_the_official_definition_exists():
    params = official_params()
    params["prepare"]["sst"] = None
    params["train"]["roberta"] = {"sst": {"checkpoint": "tiny"}}
    params["train"]["bilstm-attention"]["sst"] = {"epochs": 1}
    del params["importance"]["integrated-gradient"]  # the tiny study does not run it
    effective = with_fidelity(check_params(params))
    assert effective["prepare"]["sst"] is None  # no official tokens outside bAbI
    assert effective["train"]["roberta"]["sst"] == {"checkpoint": "tiny", "batching": "shuffled"}  # no attention
    assert "integrated-gradient" not in effective["importance"]


def test_load_params_applies_the_preset(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(official_params()))
    assert {key: value(load_params(path), key) for key in OFFICIAL} == OFFICIAL
    path.write_text(yaml.safe_dump(tiny_params()))
    assert load_params(path) == tiny_params()


@pytest.mark.parametrize("key, bad, message", [
    ("fidelity", "paper", "fidelity = 'paper' must be one of roar, official"),
    ("study.masking_count", "float32", "study.masking_count = 'float32' must be one of roar, official"),
    ("train.bilstm-attention.babi-1.batching", "sorted",
     "train.bilstm-attention.babi-1.batching = 'sorted' must be one of buckets, shuffled"),
    ("train.bilstm-attention.babi-1.attend", "words",
     "train.bilstm-attention.babi-1.attend = 'words' must be one of all, official"),
    ("prepare.babi-1.tokens", "lower", "prepare.babi-1.tokens = 'lower' must be one of roar, official"),
])
def test_a_bad_value_is_one_line_naming_it_and_what_is_allowed(key, bad, message):
    params = tiny_params()
    *parents, last = key.split(".")
    node = params
    for part in parents:
        node = node[part]
    node[last] = bad
    with pytest.raises(RoarError) as refused:
        check_params(params)
    assert str(refused.value) == f"params.yaml: {message}"


def test_options_without_an_official_definition_there_are_refused_in_one_line():
    params = tiny_params()
    params["train"]["roberta"] = {"babi-1": {"checkpoint": "tiny", "attend": "official"}}
    with pytest.raises(RoarError, match=r"^params.yaml: train.roberta.babi-1.attend = 'official': roberta has no "
                                        r"attention over the first sequence to restrict; allowed: all$"):
        check_params(params)
    params = tiny_params()
    params["prepare"]["sst"] = {"tokens": "official"}
    with pytest.raises(RoarError, match=r"^params.yaml: prepare.sst.tokens = 'official': sst has no official tokens"):
        check_params(params)


def test_official_baseline_without_a_plain_random_chain_names_the_fix():
    params = official_params(roar_measures=[])
    with pytest.raises(RoarError) as refused:
        check_params(params)
    assert "fidelity: official" in str(refused.value) and "add random to study.roar_measures" in str(refused.value)
    assert "set study.racu_baseline: recursive-random" in str(refused.value)
    params["study"]["racu_baseline"] = "recursive-random"
    check_params(params)


def step_params(params: dict, tmp_path, measure: str) -> dict:
    runner = ChainRunner(params, NullTracker(), None, tmp_path, progress=False)
    return runner._step_params(ChainSpec("babi-1", "bilstm-attention", measure, 0, True))


def test_step_keys_change_only_with_the_options(tmp_path):
    """The step params (what a step key hashes) hold an option only when it is set: without the preset they
    are what they were before the options existed."""
    plain = step_params(tiny_params(), tmp_path, "integrated-gradient")
    assert "masking_count" not in plain
    assert not {"attend", "batching"} & set(plain["train"]) and "weighting" not in plain["importance"]
    official = step_params(with_fidelity(check_params(official_params())), tmp_path, "integrated-gradient")
    assert official["masking_count"] == "official" and official["importance"]["weighting"] == "official"
    assert (official["train"]["attend"], official["train"]["batching"]) == ("official", "shuffled")
    assert {k: v for k, v in official.items() if k not in ("masking_count", "importance", "train")} == \
        {k: v for k, v in plain.items() if k not in ("importance", "train")}
