"""What the unit and the pipeline tests share: the tiny study's params, and the ``services`` mark."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PIPELINE = Path(__file__).resolve().parent / "pipeline"


def tiny_params(name: str = "tiny", *, n_train: int = 600, n_test: int = 100, epochs: int = 4, **study) -> dict:
    """The repository's params.yaml shrunk to a tiny study on small bAbI-1 (the pipeline tests' default:
    measures random and attention, seeds 0 and 1, steps 40 and 70).

    Args:
        name: the study's name (its MLflow experiment).
        n_train, n_test: the bAbI-1 examples prepared; the default is big enough to learn something
            (k = 0 well above chance), so that RACU is defined.
        epochs: training epochs of each model (lr 0.01).
        **study: other ``study`` keys, e.g. ``measures``, ``seeds``, ``steps``, ``roar_measures``.

    Returns:
        A fresh params dict, free to change.
    """
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["study"].update({"name": name, "measures": ["random", "attention"], "seeds": [0, 1], "steps": [40, 70],
                            **study})
    params["prepare"]["babi-1"].update(n_train=n_train, n_test=n_test)
    params["train"]["bilstm-attention"]["babi-1"].update(epochs=epochs, lr=0.01)
    return params


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/pipeline/ needs real services (DVC pipelines, an MLflow server, Slurm, a
    browser): ``make test`` leaves them out, ``make test-services`` runs them."""
    for item in items:
        if PIPELINE in item.path.parents:
            item.add_marker(pytest.mark.services)
