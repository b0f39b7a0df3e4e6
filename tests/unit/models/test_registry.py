"""The model-family registry: a family added by one line is known to training config, prepare and
build_model; what it lacks is refused in one line."""

from __future__ import annotations

import pytest
import torch

from roar.data.storage import DatasetMeta
from roar.models.registry import build_model
from roar.config.catalog import MODEL_FAMILIES, ModelFamily, model_family
from roar.config.train_config import TrainConfig

SMALL = {"embedding_dim": 8, "hidden": 4, "attention_hidden": 4}


@pytest.fixture
def single_only(monkeypatch):
    """A family registered at run time: the BiLSTM's builder, single sequences only, no attention."""
    family = ModelFamily("tiny-single", "word", "roar.models.bilstm:build", frozenset())
    monkeypatch.setitem(MODEL_FAMILIES, family.name, family)
    return family


def test_unknown_family_is_one_line():
    with pytest.raises(ValueError, match="unknown model 'gpt'; allowed: bilstm-attention, roberta"):
        model_family("gpt")
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        TrainConfig.from_dict({"model": "gpt"})


def test_a_registered_family_builds_by_its_builder_and_refuses_what_it_lacks(single_only):
    config = TrainConfig.from_dict({"model": single_only.name, **SMALL})
    meta = DatasetMeta("tiny", ["a", "b"], False, "accuracy", "accuracy")
    torch.manual_seed(0)
    model = build_model(meta, 20, config)
    torch.manual_seed(0)
    reference = build_model(meta, 20, TrainConfig(**SMALL))  # the bilstm-attention family, same builder
    assert model.embedding_matrix().shape == (20, 8)
    for (name, a), (_, b) in zip(model.state_dict().items(), reference.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    paired = DatasetMeta("pairs", ["a", "b"], True, "accuracy", "accuracy")
    with pytest.raises(ValueError, match="model 'tiny-single' takes single sequences; dataset pairs has pairs"):
        build_model(paired, 20, config)


def test_measures_check_the_family_capabilities(single_only):
    from roar.config.catalog import check_supported

    check_supported("gradient", single_only.name)
    with pytest.raises(ValueError, match="'attention' is not defined for model 'tiny-single': it needs attention"):
        check_supported("attention", single_only.name)


def test_prepare_tokenizes_by_the_family_encoding(single_only, tmp_path):
    from roar.data.prepare import PrepareConfig, prepare
    from roar.data.storage import read_dataset

    summary = prepare("babi-1", tmp_path / "d", PrepareConfig(n_train=40, n_test=10), model=single_only.name)
    meta, _ = read_dataset(tmp_path / "d")
    assert summary["model"] == "tiny-single" and meta.tokenizer == "word"
    with pytest.raises(ValueError, match="unknown model 'gpt'"):
        prepare("babi-1", tmp_path / "e", PrepareConfig(n_train=40, n_test=10), model="gpt")
    assert not (tmp_path / "e").exists()
