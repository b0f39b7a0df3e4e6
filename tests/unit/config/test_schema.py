"""The params schema agrees with DVC on the params it reads: every key dvc.yaml names is required."""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from roar.cli import app
from roar.config.schema import check_params
from roar.core.errors import RoarError

REPO = Path(__file__).resolve().parents[3]
ITEM = re.compile(r"\$\{item\.(\w+)\}")


def _params() -> dict:
    """The project's params with a plain ROAR measure too, so that the ``roar`` stages have items."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["study"]["roar_measures"] = ["mutual-information"]
    return params


def dvc_param_keys(params: dict) -> list[str]:
    """Every ``params.yaml`` key that ``dvc.yaml``'s stages read, for the study of ``params``: each stage's
    string params with ``${item.*}`` expanded over its matrix (``${study.*}`` lists of ``params``)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    keys: set[str] = set()
    for stage in stages.values():
        matrix = {name: params["study"][ref.removeprefix("${study.").removesuffix("}")]
                  for name, ref in (stage.get("matrix") or {}).items()}
        for values in itertools.product(*matrix.values()) if matrix else [()]:
            item = dict(zip(matrix, values))
            keys |= {ITEM.sub(lambda m: str(item[m.group(1)]), entry)
                     for entry in stage.get("params", []) if isinstance(entry, str)}
    return sorted(keys)


def _without(params: dict, key: str) -> dict:
    """``params`` less the dotted ``key`` (names hold '-' but no '.')."""
    out = copy.deepcopy(params)
    *parents, last = key.split(".")
    node = out
    for part in parents:
        node = node[part]
    del node[last]
    return out


def test_the_derived_keys_cover_every_stage_kind():
    keys = dvc_param_keys(_params())
    for key in ("study", "study.strategy", "study.steps", "importance.batch_size", "importance.target",
                "importance.attention", "importance.mutual-information", "prepare.babi-1",
                "train.bilstm-attention.babi-1"):
        assert key in keys


@pytest.mark.parametrize("key", dvc_param_keys(_params()))
def test_every_param_dvc_reads_is_required_by_the_schema(key):
    """Validation refuses, in one line naming the key, a params file without a key that DVC reads as a param
    (DVC would stop with "Parameters ... are missing" only after prepare and k = 0 ran)."""
    params = _params()
    check_params(params)
    with pytest.raises(RoarError) as refused:
        check_params(_without(params, key))
    message = str(refused.value)
    assert "\n" not in message and "missing" in message and key.split(".")[-1] in message


def test_validate_refuses_params_without_importance_target(tmp_path, monkeypatch):
    text = (REPO / "params.yaml").read_text()
    (tmp_path / "params.yaml").write_text(re.sub(r"(?m)^  target: .*\n", "", text))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 2, result.output
    assert "missing key importance.target" in result.output and "ok (" not in result.output
    assert len(result.output.strip().splitlines()) == 1
