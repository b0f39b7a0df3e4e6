"""GPU readiness on a machine without one: runtime.device, rows per gradient pass, the cuDNN RNN
switch, Lightning's device settings, and bench/gpu_check.py (no GPU line; a CPU dry run)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from roar.core.errors import RoarError
from roar.importance.base import rnn_backward_allowed
from roar.importance.integrated_gradient import IntegratedGradientImportance
from roar.models.batching import Batch
from roar.models.bilstm import BiLSTMAttention
from roar.models.device import (
    CPU_ROWS,
    MAX_ROWS,
    device_problem,
    max_rows_per_pass,
    resolve_device,
)
from roar.models.training import trainer_device

REPO = Path(__file__).resolve().parents[3]
NO_CUDA = not torch.cuda.is_available()
needs_no_gpu = pytest.mark.skipif(not NO_CUDA, reason="checks the behaviour without a GPU")
CUDA = torch.device("cuda")  # a device object only: nothing below allocates on it
GIB = 2 ** 30

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- runtime.device

def test_auto_and_cpu_resolve_here():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(None) == resolve_device("auto") == torch.device("cuda" if not NO_CUDA else "cpu")
    with pytest.raises(RoarError, match="runtime.device = 'gpu' unknown; allowed: auto, cpu, cuda"):
        resolve_device("gpu")


@needs_no_gpu
def test_cuda_without_a_gpu_is_one_line():
    with pytest.raises(RoarError) as error:
        resolve_device("cuda")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("runtime.device = cuda but torch.cuda.is_available() is False here (torch ")
    assert message.endswith("; use auto or cpu, or run the stage on a GPU node")
    assert device_problem("cuda") == message
    assert device_problem("auto") is device_problem("cpu") is device_problem(None) is None


def project_params(tmp_path: Path, device: str) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params.setdefault("runtime", {})["device"] = device
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@needs_no_gpu
def test_a_stage_asking_for_cuda_stops_before_any_work(tmp_path, monkeypatch):
    from roar.pipeline.runner import Runner
    from roar.pipeline.stage import stage_runner

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    params = yaml.safe_load(project_params(tmp_path, "cuda").read_text())
    with pytest.raises(RoarError, match="runtime.device = cuda but torch.cuda.is_available"):
        stage_runner(Runner, params, tmp_path, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.yaml"]  # no tracking store, no outputs
    assert stage_runner(Runner, yaml.safe_load(project_params(tmp_path, "cpu").read_text()), tmp_path).device.type == "cpu"


@needs_no_gpu
def test_validate_warns_about_cuda_without_failing(tmp_path, monkeypatch):
    from roar.cli import app

    monkeypatch.chdir(tmp_path)
    project_params(tmp_path, "cuda")
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("params.yaml: ok (")
    assert result.stderr.strip().splitlines() == [
        f"params.yaml: warning: {device_problem('cuda')}; stages started on this machine will stop"]
    project_params(tmp_path, "auto")
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 0 and result.stderr == ""


def test_lightning_device_settings():
    assert trainer_device(torch.device("cpu")) == {"accelerator": "cpu", "devices": 1}
    assert trainer_device(torch.device("cuda")) == {"accelerator": "gpu", "devices": [0]}
    assert trainer_device(torch.device("cuda", 1)) == {"accelerator": "gpu", "devices": [1]}


# ---------------------------------------------------------------- rows per pass

def roberta_base():
    """RoBERTa-base's architecture on the meta device (no memory, no download)."""
    pytest.importorskip("transformers")
    from roar.models.transformer import TransformerClassifier

    with torch.device("meta"):
        return TransformerClassifier.from_config_dict({"model_type": "roberta"})


def test_rows_per_pass_hand_computed():
    free = 23 * GIB  # a 24 GiB GPU; the budget is half: 12,348,030,976 B
    bilstm = BiLSTMAttention(100, 3, paired=False, embedding_dim=300, hidden=128, attention_hidden=128)
    # 16 * 300 + 36 * 128 + 2 * 128 = 9,664 floats per token; 50 tokens * 4 B -> 1,932,800 B per row
    assert bilstm.saved_floats_per_row(50) == 483_200
    assert max_rows_per_pass(bilstm, 50, 0, CUDA, free) == 6388
    # a pair: both sequences' tokens count (40 + 10)
    paired = BiLSTMAttention(100, 3, paired=True, embedding_dim=300, hidden=128, attention_hidden=128)
    assert max_rows_per_pass(paired, 40, 10, CUDA, free) == 6388
    # bAbI's quick study (D 50, H 32, A 32) at 70 tokens: 2,016 floats per token, 564,480 B per row: capped
    small = BiLSTMAttention(30, 6, paired=True, embedding_dim=50, hidden=32, attention_hidden=32)
    assert max_rows_per_pass(small, 65, 5, CUDA, free) == MAX_ROWS
    # RoBERTa-base at 512 tokens: 12 * (10 * 768 + 2 * 3072) + 4 * 768 = 168,960 floats per token,
    # 346,030,080 B per row -> 35 rows (8,192 would need 2.6 TiB); 80 GiB free -> 124 rows
    roberta = roberta_base()
    assert roberta.saved_floats_per_row(512) == 512 * 168_960
    assert max_rows_per_pass(roberta, 512, 0, CUDA, free) == 35
    assert max_rows_per_pass(roberta, 512, 0, CUDA, 80 * GIB) == 124
    assert max_rows_per_pass(roberta, 512, 0, CUDA, 100 * 2 ** 20) == 1  # never 0
    # a pair is packed into one sequence: 128 + 128 tokens cost what 256 do
    assert roberta.saved_floats_per_row(128, 128) == roberta.saved_floats_per_row(256)
    # the CPU keeps its former default whatever the model
    assert max_rows_per_pass(roberta, 512, 0, torch.device("cpu"), free) == CPU_ROWS == 128
    assert max_rows_per_pass(bilstm, 50) == 128


def saved_floats(model: torch.nn.Module, rows: int, length: int, length2: int = 0) -> float:
    """Float32 values per row that autograd keeps when differentiating the logits with respect to the
    input embeddings (distinct storages, parameters excluded), measured with saved-tensor hooks."""
    storages: dict[int, int] = {}

    def keep(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(5, 50, (rows, length), generator=generator)
    tokens2 = torch.randint(5, 50, (rows, length2), generator=generator) if length2 else None
    embeddings = model.embed(tokens).detach().requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        model(tokens, torch.full((rows,), length), tokens2, torch.full((rows,), length2) if length2 else None,
              inputs_embeds=embeddings)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in weights) / 4 / rows


def tiny_transformer(attention: str):
    pytest.importorskip("transformers")
    from roar.models.transformer import TransformerClassifier

    model = TransformerClassifier.from_config_dict(
        {"model_type": "roberta", "vocab_size": 60, "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 256, "max_position_embeddings": 300,
         "attn_implementation": attention})
    assert model.hf.config._attn_implementation == attention
    return model


@pytest.mark.parametrize("name, build, length, length2", [
    ("bilstm", lambda: BiLSTMAttention(60, 3, False, 300, 128, 128), 100, 0),
    ("bilstm-small", lambda: BiLSTMAttention(60, 3, False, 50, 32, 32), 150, 0),
    ("bilstm-pair", lambda: BiLSTMAttention(60, 3, True, 50, 256, 64), 100, 20),
    ("transformer-sdpa", lambda: tiny_transformer("sdpa"), 128, 0),
    ("transformer-eager", lambda: tiny_transformer("eager"), 128, 0),
])
def test_the_estimate_bounds_what_autograd_keeps(name, build, length, length2):
    torch.manual_seed(0)
    model = build().eval()
    measured = saved_floats(model, 4, length, length2)
    ratio = model.saved_floats_per_row(length, length2) / measured
    print(f"{name}: estimate / measured = {ratio:.2f}")
    assert 1.0 <= ratio <= 1.5, (name, ratio)


# ---------------------------------------------------------------- integrated gradients in parts

def test_ig_splits_a_batch_larger_than_max_rows():
    torch.manual_seed(0)
    model = BiLSTMAttention(30, 3, paired=True, embedding_dim=8, hidden=6, attention_hidden=5).eval()
    generator = torch.Generator().manual_seed(1)
    lengths = torch.tensor([7, 5, 9, 3, 8])
    tokens = torch.randint(5, 30, (5, 9), generator=generator) * (torch.arange(9)[None] < lengths[:, None])
    batch = Batch(tokens, lengths, torch.randint(5, 30, (5, 4), generator=generator), torch.full((5,), 4),
                  torch.tensor([0, 1, 2, 1, 0]), np.arange(5))
    assert IntegratedGradientImportance(8).rows_per_pass(model, batch, torch.device("cpu")) == 128
    reference = IntegratedGradientImportance(8, batched=False).attribute(model, batch, batch.rows, "test")
    assert float(reference.abs().max()) > 0
    for max_rows in (1, 2, 3, 16):  # 2: parts of 2, 2 and 1 rows, one sample per pass; 16: 3 samples per pass
        got = IntegratedGradientImportance(8, max_rows=max_rows).attribute(model, batch, batch.rows, "test")
        torch.testing.assert_close(got, reference, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------- the cuDNN RNN switch

class DropoutLSTM(torch.nn.Module):
    """An RNN model whose LSTM has dropout between layers: training mode would change its output."""

    cudnn_rnn = True

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 4, num_layers=2, dropout=0.5)


def test_rnn_switch_only_for_declared_models_on_a_gpu():
    bilstm = BiLSTMAttention(30, 3, paired=True, embedding_dim=8, hidden=6, attention_hidden=5).eval()
    lstms = [m for m in bilstm.modules() if isinstance(m, torch.nn.LSTM)]
    assert len(lstms) == 4
    with rnn_backward_allowed(bilstm, torch.device("cpu")):  # the CPU: nothing changes
        assert not any(m.training for m in bilstm.modules())
    with rnn_backward_allowed(bilstm, CUDA):  # only the LSTMs switch, and back afterwards
        assert all(m.training == isinstance(m, torch.nn.LSTM) for m in bilstm.modules())
        assert torch.backends.cudnn.enabled
    assert not any(m.training for m in bilstm.modules())
    with pytest.raises(KeyError), rnn_backward_allowed(bilstm, CUDA):
        raise KeyError("restored on errors too")
    assert not any(m.training for m in bilstm.modules())

    dropout = DropoutLSTM().eval()
    with rnn_backward_allowed(dropout, CUDA):  # dropout: keep eval mode, run without cuDNN
        assert not dropout.lstm.training and not torch.backends.cudnn.enabled
    assert torch.backends.cudnn.enabled
    assert type(bilstm).cudnn_rnn and not tiny_transformer("sdpa").cudnn_rnn


# ---------------------------------------------------------------- bench/gpu_check.py

@needs_no_gpu
def test_gpu_check_says_no_gpu_and_exits_0():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, str(REPO / "bench" / "gpu_check.py")], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("gpu_check: no GPU (torch.cuda.is_available() is False; torch ")
    assert "nothing run. On a GPU it would run: bilstm-attention" in lines[0]
    assert "memory probe at 512 tokens" in lines[0]


def test_gpu_check_dry_run_on_the_cpu(capsys, monkeypatch, tmp_path):
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "bench" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    assert module.main(["--device", "cpu", "--small"]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:-1]}
    assert table["precision"] == ["32-true", "32-true"]
    assert table["rows_per_pass"] == ["128", "128"]
    assert all(float(v) <= 1e-6 for v in table["ig_batched_diff"] + table["device_vs_cpu_diff"])
    assert all(float(v) >= 0 for v in table["train_s"] + table["importance_s"] + table["retrain_s"])
    assert out.splitlines()[-1].startswith("gpu_check: done in ")
    assert table["train_peak_mib"] == ["-", "-"]  # no CUDA memory to read on the CPU
