"""Bad input: every case is refused by the real command line with exit status 2 and exactly one
stderr line that names the key or file and the offending value, without a traceback, and before
anything is written.

Each case: a command, a setup that breaks one thing in a fresh project folder, and the pieces the
error line must contain.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from roar.cli import app

REPO = Path(__file__).resolve().parents[3]
# The line of the committed params.yaml's study.seeds (1-based), where a duplicate key is reported.
SEEDS_LINE = (REPO / "params.yaml").read_text().splitlines().index("  seeds: [0, 1, 2]") + 1
PREPARED = Path("data/prepared/babi-1/bilstm-attention")
K0_MODEL = Path("models/babi-1/bilstm-attention/k0/s0")
ROAR = Path(sys.executable).parent / "roar"


# ---------------------------------------------------------------- fixtures: a tiny dataset and model

@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A prepared generated bAbI-1 (60 questions) and an untrained small BiLSTM saved for it."""
    import torch

    from roar.data.prepare import PrepareConfig, prepare
    from roar.data.storage import read_meta, vocab_size
    from roar.models.training import TrainConfig, TrainResult, build_model, save_model

    root = tmp_path_factory.mktemp("tiny")
    data = root / "data"
    prepare("babi-1", data, PrepareConfig(n_train=60, n_test=20, seed=0))
    meta, n_vocab = read_meta(data), vocab_size(data)
    config = TrainConfig(embedding_dim=8, hidden=8, attention_hidden=8)
    torch.manual_seed(0)
    model = build_model(meta, n_vocab, config)
    result = TrainResult(best_epoch=0, val_metric=0.0, test_metric=0.0, metric="accuracy", seconds=0.0)
    save_model(root / "model", model, config, meta, n_vocab, result)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    save_model(root / "nan-model", model, config, meta, n_vocab, result)
    bigger = build_model(meta, n_vocab, TrainConfig(embedding_dim=8, hidden=16, attention_hidden=8))
    save_model(root / "mismatch-model", bigger, config, meta, n_vocab, result)  # config says hidden 8
    return {"data": data, "model": root / "model", "nan-model": root / "nan-model",
            "mismatch-model": root / "mismatch-model"}


@pytest.fixture()
def project(tmp_path, monkeypatch):
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ROAR_DEBUG", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return tmp_path


# ---------------------------------------------------------------- setups

Setup = Callable[[Path, dict], None]


def params(change: Callable[[dict], None]) -> Setup:
    """Edit the project's params.yaml (as data)."""
    def setup(root: Path, _tiny: dict) -> None:
        loaded = yaml.safe_load((root / "params.yaml").read_text())
        change(loaded)
        (root / "params.yaml").write_text(yaml.safe_dump(loaded, sort_keys=False))
    return setup


def params_text(text: str | bytes) -> Setup:
    def setup(root: Path, _tiny: dict) -> None:
        path = root / "params.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return setup


def replace_text(old: str, new: str) -> Setup:
    def setup(root: Path, _tiny: dict) -> None:
        path = root / "params.yaml"
        assert old in path.read_text()
        path.write_text(path.read_text().replace(old, new, 1))
    return setup


def setitem(*keys_and_value) -> Callable[[dict], None]:
    *keys, value = keys_and_value

    def change(loaded: dict) -> None:
        node = loaded
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return change


def delitem(*keys) -> Callable[[dict], None]:
    def change(loaded: dict) -> None:
        node = loaded
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]
    return change


def with_data(*breaks: Callable[[Path], None], model: str | None = None) -> Setup:
    """Copy the tiny prepared dataset (and a model into k0/s0), then break them."""
    def setup(root: Path, tiny: dict) -> None:
        shutil.copytree(tiny["data"], root / PREPARED)
        if model:
            shutil.copytree(tiny[model], root / K0_MODEL)
        for broken in breaks:
            broken(root)
    return setup


def remove(relpath: str) -> Callable[[Path], None]:
    return lambda root: (root / relpath).unlink()


def write(relpath: str, content: bytes) -> Callable[[Path], None]:
    return lambda root: (root / relpath).write_bytes(content)


def truncate(relpath: str, keep: float = 0.5) -> Callable[[Path], None]:
    def broken(root: Path) -> None:
        path = root / relpath
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])
    return broken


def wrong_columns(relpath: str) -> Callable[[Path], None]:
    def broken(root: Path) -> None:
        import pyarrow as pa

        table = pa.table({"words": pa.array([[1, 2]]), "label": pa.array([0], pa.int32())})
        with pa.OSFile(str(root / relpath), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
    return broken


def source_files(dataset: str, files: dict[str, str | bytes], source: str = "") -> Setup:
    """Write raw source files under ``raw/`` and point ``prepare.<dataset>.source`` at them."""
    def setup(root: Path, _tiny: dict) -> None:
        for rel, content in files.items():
            path = root / "raw" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else content.encode())
        loaded = yaml.safe_load((root / "params.yaml").read_text())
        loaded["study"]["datasets"] = [dataset]
        loaded["prepare"] = {dataset: {"source": str(root / "raw" / source), "min_count": 1, "seed": 0}}
        loaded["train"]["bilstm-attention"] = {dataset: loaded["train"]["bilstm-attention"]["babi-1"]}
        (root / "params.yaml").write_text(yaml.safe_dump(loaded, sort_keys=False))
    return setup


BABI_OK = "1 Mary moved to the bathroom.\n2 John went to the hallway.\n3 Where is Mary? \tbathroom\t1\n"
SNLI_OK = '{"gold_label": "neutral", "sentence1": "A man sleeps.", "sentence2": "A person rests."}\n'


# ---------------------------------------------------------------- the cases

@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    setup: Setup
    expect: tuple[str, ...]  # pieces of the error line: the key or file, the value, what to do
    writes: tuple[str, ...] = ()  # outputs the command would write: must not exist afterwards


def case(id: str, args: str, setup: Setup, *expect: str, writes: tuple[str, ...] = ()) -> Case:
    return Case(id, tuple(args.split()), setup, expect, writes)


VALIDATE = "validate"
PREPARE = "prepare babi-1"
PREPARE_OUT = (str(PREPARED), "data/masked")
TRAIN = "train-reference babi-1 bilstm-attention 0 --no-progress"
TRAIN_OUT = ("models", "results", "mlflow.db")
CHAIN = "chain babi-1 bilstm-attention gradient 0 --no-progress"
CHAIN_OUT = ("data/masked", "models/babi-1/bilstm-attention/gradient", "results", "mlflow.db")

CASES = [
    # --- params: study
    case("steps-order", VALIDATE, params(setitem("study", "steps", [20, 10])),
         "params.yaml: study.steps = [20, 10] must be strictly increasing integers in 1..99 (quantile"),
    case("steps-100", VALIDATE, params(setitem("study", "steps", [50, 100])), "study.steps = [50, 100]", "1..99"),
    case("steps-zero", VALIDATE, params(setitem("study", "steps", [0, 10])), "study.steps = [0, 10]"),
    case("steps-empty", VALIDATE, params(setitem("study", "steps", [])), "study.steps = []"),
    case("steps-text", VALIDATE, params(setitem("study", "steps", ["10", "20"])), "study.steps = ['10', '20']"),
    case("steps-count-order", VALIDATE, params(lambda p: p["study"].update(strategy="count", steps=[3, 3])),
         "study.steps = [3, 3]", "(count)"),
    case("strategy", "report", params(setitem("study", "strategy", "percent")),
         "study.strategy: unknown strategy 'percent'; allowed: quantile, count", writes=("reports", "mlflow.db")),
    case("dataset-name", VALIDATE, params(setitem("study", "datasets", ["babi-1", "yelp"])),
         "study.datasets: unknown dataset 'yelp'; allowed: babi-1, babi-2"),
    case("model-name", VALIDATE, params(setitem("study", "models", ["lstm"])),
         "study.models: unknown model 'lstm'; allowed: bilstm-attention, roberta"),
    case("measure-name", VALIDATE, params(setitem("study", "measures", ["random", "saliency"])),
         "study.measures: unknown measure 'saliency'; allowed: random, attention"),
    case("roar-measure-name", VALIDATE, params(setitem("study", "roar_measures", ["shap"])),
         "study.roar_measures: unknown measure 'shap'"),
    case("measure-twice", VALIDATE, params(setitem("study", "measures", ["random", "random"])),
         "study.measures = ['random', 'random']", "more than once"),
    case("seeds-repeated", VALIDATE, params(setitem("study", "seeds", [0, 0])),
         "study.seeds = [0, 0] must be a non-empty list of distinct integers >= 0"),
    case("seeds-negative", VALIDATE, params(setitem("study", "seeds", [-1])), "study.seeds = [-1]"),
    case("seeds-bool", VALIDATE, params(setitem("study", "seeds", [True])), "study.seeds = [true]"),
    case("name-empty", VALIDATE, params(setitem("study", "name", "")),
         "study.name = '' must be a non-empty string"),
    case("study-unknown-key", VALIDATE, params(setitem("study", "seed", 3)),
         "unknown key study.seed; allowed: name, datasets"),
    case("study-missing-key", VALIDATE, params(delitem("study", "steps")), "missing key study.steps; required:"),
    case("study-not-mapping", VALIDATE, params(setitem("study", ["babi-1"])),
         "study = ['babi-1'] must be a mapping"),
    # --- params: train
    case("train-unknown-key", TRAIN, params(setitem("train", "bilstm-attention", "babi-1", "epoch", 3)),
         "params.yaml: unknown key train.bilstm-attention.babi-1.epoch; allowed: attend, attention_hidden, batch_size",
         writes=TRAIN_OUT),
    case("epochs-zero", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "epochs", 0)),
         "train.bilstm-attention.babi-1.epochs = 0 must be an integer >= 1"),
    case("epochs-bool", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "epochs", True)),
         "train.bilstm-attention.babi-1.epochs = true must be an integer >= 1 (true/false is not a number)"),
    case("batch-size-float", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "batch_size", 2.5)),
         "train.bilstm-attention.babi-1.batch_size = 2.5 must be an integer >= 1"),
    case("lr-yaml-text", VALIDATE, replace_text("lr: 0.003", "lr: 1e-3"),
         "train.bilstm-attention.babi-1.lr = '1e-3' must be a number > 0", "1.0e-3"),
    case("lr-negative", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "lr", -0.1)),
         "train.bilstm-attention.babi-1.lr = -0.1 must be a number > 0"),
    case("lr-nan", VALIDATE, replace_text("lr: 0.003", "lr: .nan"), "train.bilstm-attention.babi-1.lr = nan"),
    case("weight-decay-negative", VALIDATE,
         params(setitem("train", "bilstm-attention", "babi-1", "weight_decay", -1.0e-5)),
         "train.bilstm-attention.babi-1.weight_decay = -1e-05 must be a number >= 0"),
    case("warmup-one", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "warmup_ratio", 1.0)),
         "train.bilstm-attention.babi-1.warmup_ratio = 1.0 must be a number in [0, 1)"),
    case("train-model-key", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "model", "roberta")),
         "unknown key train.bilstm-attention.babi-1.model"),
    case("train-unknown-model", VALIDATE, params(setitem("train", "lstm", {"babi-1": {}})),
         "unknown key train.lstm; allowed: bilstm-attention, roberta"),
    case("train-missing", TRAIN, params(delitem("train", "bilstm-attention", "babi-1")),
         "missing key train.bilstm-attention.babi-1 (study.models lists bilstm-attention", writes=TRAIN_OUT),
    case("train-not-mapping", VALIDATE, params(setitem("train", "bilstm-attention", [1, 2])),
         "train.bilstm-attention = [1, 2] must be a mapping"),
    case("roberta-checkpoint", VALIDATE, params(lambda p: (p["study"].update(models=["bilstm-attention", "roberta"]),
                                                          p["train"].update(roberta={"babi-1": {"epochs": 3}}))),
         "missing key train.roberta.babi-1.checkpoint"),
    # --- params: prepare
    case("val-fraction", PREPARE, params(setitem("prepare", "babi-1", "val_fraction", 1.5)),
         "prepare.babi-1.val_fraction = 1.5 must be a number in (0, 1)", writes=PREPARE_OUT),
    case("n-train-zero", PREPARE, params(setitem("prepare", "babi-1", "n_train", 0)),
         "prepare.babi-1.n_train = 0 must be an integer >= 1", writes=PREPARE_OUT),
    case("max-length", VALIDATE, params(setitem("prepare", "babi-1", "max_length", 2)),
         "prepare.babi-1.max_length = 2 must be an integer >= 3"),
    case("limit-negative", VALIDATE, params(setitem("prepare", "babi-1", "limit", -1)),
         "prepare.babi-1.limit = -1 must be an integer >= 0"),
    case("min-count-text", VALIDATE, params(setitem("prepare", "babi-1", "min_count", "1")),
         "prepare.babi-1.min_count = '1' must be an integer >= 1"),
    case("prepare-unknown-key", PREPARE, params(setitem("prepare", "babi-1", "n_trian", 10)),
         "unknown key prepare.babi-1.n_trian; allowed: limit, max_length", writes=PREPARE_OUT),
    case("prepare-unknown-dataset", VALIDATE, params(setitem("prepare", "yelp", {})),
         "unknown key prepare.yelp; allowed: babi-1"),
    case("prepare-missing", PREPARE, params(delitem("prepare", "babi-1")),
         "missing key prepare.babi-1 (study.datasets lists babi-1)", writes=PREPARE_OUT),
    # --- params: importance, runtime, sections
    case("importance-batch-size", VALIDATE, params(setitem("importance", "batch_size", 0)),
         "importance.batch_size = 0 must be an integer >= 1"),
    case("importance-target", VALIDATE, params(setitem("importance", "target", "silver")),
         "importance.target = 'silver' must be one of gold, predicted"),
    case("train-patience", VALIDATE, params(setitem("train", "bilstm-attention", "babi-1", "patience", 0)),
         "train.bilstm-attention.babi-1.patience = 0 must be null or an integer >= 1"),
    case("train-mask-augment-range", VALIDATE,
         params(setitem("train", "bilstm-attention", "babi-1", "mask_augment", {"p_max": 1.5})),
         "train.bilstm-attention.babi-1.mask_augment = {p_max: 1.5} must be null or a mapping {p_max: number in "
         "(0, 1], share: number in (0, 1] (optional, default 1)}; p_max = 1.5 is not"),
    case("train-mask-augment-scalar", VALIDATE,
         params(setitem("train", "bilstm-attention", "babi-1", "mask_augment", 0.9)),
         "train.bilstm-attention.babi-1.mask_augment = 0.9 must be null or a mapping {p_max: number in (0, 1]"),
    case("ig-samples", VALIDATE, params(setitem("importance", "integrated-gradient", "samples", 0)),
         "importance.integrated-gradient.samples = 0 must be an integer >= 1"),
    case("ig-max-rows", VALIDATE, params(setitem("importance", "integrated-gradient", "max_rows", 0)),
         "importance.integrated-gradient.max_rows = 0 must be null or an integer >= 1"),
    case("kernel-shap-odd", VALIDATE, params(setitem("importance", "kernel-shap", {"samples": 63})),
         "importance.kernel-shap.samples = 63 must be an even integer >= 2 (coalitions come in complementary pairs)"),
    case("kernel-shap-one", VALIDATE, params(setitem("importance", "kernel-shap", {"samples": 1})),
         "importance.kernel-shap.samples = 1 must be an integer >= 2"),
    case("occlusion-max-rows", VALIDATE, params(setitem("importance", "occlusion", {"max_rows": 0})),
         "importance.occlusion.max_rows = 0 must be null or an integer >= 1"),
    case("measure-option", VALIDATE, params(setitem("importance", "gradient", {"steps": 3})),
         "unknown key importance.gradient.steps; allowed: note"),
    case("importance-unknown", VALIDATE, params(setitem("importance", "shap", {})),
         "unknown key importance.shap; allowed: batch_size, target, random"),
    case("threads-negative", VALIDATE, params(setitem("runtime", "threads", -1)),
         "runtime.threads = -1 must be an integer >= 0"),
    case("runtime-unknown", VALIDATE, params(setitem("runtime", "cores", 2)),
         "unknown key runtime.cores; allowed: device, slurm, threads"),
    case("slurm-time", VALIDATE, params(setitem("runtime", "slurm", {"time": "4h"})),
         "runtime.slurm.time = '4h' must be a Slurm time limit such as 04:00:00, 1-00:00:00 or 90 (minutes)"),
    case("slurm-memory", VALIDATE, params(setitem("runtime", "slurm", {"stages": {"recursive": {"memory": "8GB"}}})),
         "runtime.slurm.stages.recursive.memory = '8GB' must be a Slurm memory size such as 8G or 500M"),
    case("slurm-stage-kind", VALIDATE, params(setitem("runtime", "slurm", {"stages": {"chain": {"cpus": 2}}})),
         "unknown key runtime.slurm.stages.chain; allowed: prepare, train_k0, train_all_masked, recursive, roar, "
         "report, finish"),
    case("slurm-extra-newline", VALIDATE, params(setitem("runtime", "slurm", {"extra": ["--qos=a\necho hi"]})),
         "runtime.slurm.extra = ['--qos=a\\necho hi'] must be a list of single-line sbatch options"),
    case("runtime-device", VALIDATE, params(setitem("runtime", "device", "gpu")),
         "runtime.device = 'gpu' must be one of auto, cpu, cuda"),
    case("unknown-section", VALIDATE, params(setitem("extra", {"a": 1})),
         "unknown section extra; allowed: study, prepare, train, importance, runtime"),
    case("missing-section", VALIDATE, params(delitem("importance")),
         "missing section importance; required sections: study, prepare, train, importance"),
    # --- params: the file itself
    case("yaml-invalid", CHAIN, params_text("study:\n  name: x\n  steps: [10, 20\nprepare: {}\n"),
         "params.yaml line 4: invalid YAML", writes=CHAIN_OUT),
    case("yaml-duplicate-key", VALIDATE, replace_text("  seeds: [0, 1, 2]\n", "  seeds: [0, 1, 2]\n  seeds: [3]\n"),
         f"params.yaml line {SEEDS_LINE + 1}: key 'seeds' appears twice", f"first on line {SEEDS_LINE}"),
    case("yaml-empty", "report", params_text(""), "params.yaml is empty; it needs the sections study",
         writes=("reports",)),
    case("yaml-list", VALIDATE, params_text("- study\n- prepare\n"),
         "params.yaml holds list ['study', 'prepare'], not a mapping of sections"),
    case("yaml-not-utf8", VALIDATE, params_text(b"study: \xff\xfe\n"), "params.yaml: not UTF-8 text (byte 7)"),
    case("params-missing", "validate --params nope.yaml", lambda root, tiny: None,
         "params file nope.yaml not found; run from the project root or pass --params FILE"),
    case("params-folder", "validate --params data", lambda root, tiny: (root / "data").mkdir(),
         "params file data is a folder"),
    # --- prepared data
    case("data-missing", TRAIN, lambda root, tiny: None,
         f"dataset folder {PREPARED} not found; re-run the stage that writes it", writes=TRAIN_OUT),
    case("meta-missing", TRAIN, with_data(remove(f"{PREPARED}/meta.json")),
         f"{PREPARED} is not a prepared dataset (no meta.json)", writes=TRAIN_OUT),
    case("meta-corrupt", TRAIN, with_data(write(f"{PREPARED}/meta.json", b'{"name": "babi-1",')),
         f"{PREPARED}/meta.json is not valid JSON", writes=TRAIN_OUT),
    case("vocab-missing", TRAIN, with_data(remove(f"{PREPARED}/vocab.json")),
         f"{PREPARED}/vocab.json not found", writes=TRAIN_OUT),
    case("split-missing", CHAIN, with_data(remove(f"{PREPARED}/test.arrow"), model="model"),
         f"{PREPARED}/test.arrow not found", writes=CHAIN_OUT),
    case("split-empty", TRAIN, with_data(write(f"{PREPARED}/train.arrow", b"")),
         f"{PREPARED}/train.arrow is empty; re-run the stage that writes it", writes=TRAIN_OUT),
    case("split-garbage", TRAIN, with_data(write(f"{PREPARED}/val.arrow", b"not an arrow file at all\n" * 20)),
         f"{PREPARED}/val.arrow is not a readable Arrow split file", writes=TRAIN_OUT),
    case("split-truncated", TRAIN, with_data(truncate(f"{PREPARED}/train.arrow")),
         f"{PREPARED}/train.arrow is not a readable Arrow split file", writes=TRAIN_OUT),
    case("split-columns", TRAIN, with_data(wrong_columns(f"{PREPARED}/train.arrow")),
         f"{PREPARED}/train.arrow has columns words, label; a split needs exactly tokens, tokens2, label, index",
         writes=TRAIN_OUT),
    case("validate-corrupt-data", VALIDATE, with_data(truncate(f"{PREPARED}/test.arrow", 0.3)),
         f"{PREPARED}/test.arrow is not a readable Arrow split file"),
    # --- saved models
    case("k0-model-missing", CHAIN, with_data(),
         f"k = 0 model {K0_MODEL} not found; train it first: `roar train-reference babi-1 bilstm-attention 0`",
         writes=CHAIN_OUT),
    case("model-garbage", CHAIN, with_data(write(f"{K0_MODEL}/model.safetensors", b"\x00garbage" * 9), model="model"),
         f"{K0_MODEL}/model.safetensors is not a readable safetensors file", "re-run the stage that trains it",
         writes=CHAIN_OUT),
    case("model-empty", CHAIN, with_data(write(f"{K0_MODEL}/model.safetensors", b""), model="model"),
         f"{K0_MODEL}/model.safetensors is empty", writes=CHAIN_OUT),
    case("model-truncated", CHAIN, with_data(truncate(f"{K0_MODEL}/model.safetensors", 0.8), model="model"),
         f"{K0_MODEL}/model.safetensors is not a readable safetensors file (tensor data ends at byte",
         "the file is truncated", writes=CHAIN_OUT),
    case("model-config-missing", CHAIN, with_data(remove(f"{K0_MODEL}/config.json"), model="model"),
         f"{K0_MODEL}/config.json not found", writes=CHAIN_OUT),
    case("model-config-corrupt", VALIDATE, with_data(write(f"{K0_MODEL}/config.json", b"[1, 2]"), model="model"),
         f"{K0_MODEL}/config.json is not a saved model's config"),
    # --- raw dataset sources (prepare)
    case("babi-bad-line", PREPARE, source_files("babi-1", {
        "qa1_single-supporting-fact_train.txt": BABI_OK + "4 Sandra went home.\nthree Where is John?\thallway\t2\n",
        "qa1_single-supporting-fact_test.txt": BABI_OK}),
         "raw/qa1_single-supporting-fact_train.txt line 5", "'three Where is John?", writes=PREPARE_OUT),
    case("babi-bad-support", PREPARE, source_files("babi-1", {
        "qa1_single-supporting-fact_train.txt": BABI_OK,
        "qa1_single-supporting-fact_test.txt": "1 Mary moved to the bathroom.\n2 Where is Mary?\tbathroom\tx\n"}),
         "raw/qa1_single-supporting-fact_test.txt line 2", writes=PREPARE_OUT),
    case("babi-file-missing", PREPARE, source_files("babi-1", {"qa1_single-supporting-fact_train.txt": BABI_OK}),
         "raw/qa1_single-supporting-fact_test.txt not found", writes=PREPARE_OUT),
    case("polarity-bad-row", "prepare rotten-tomatoes", source_files("rotten-tomatoes", {
        "snippets.txt": "1\t2.5\tA fine film.\nsix\t-1.0\tDull.\n"}, "snippets.txt"),
         "raw/snippets.txt line 2 is not 'id<TAB>rating<TAB>sentence'", "'six", writes=("data",)),
    case("snli-file-missing", "prepare snli", source_files("snli", {"snli_1.0/snli_1.0_train.jsonl": SNLI_OK}),
         "snli_1.0/snli_1.0_dev.jsonl not found", writes=("data",)),
    case("snli-bad-line", "prepare snli", source_files("snli", {
        "snli_1.0/snli_1.0_train.jsonl": SNLI_OK + '{"gold_label": "neutral", "sentence1": "x"}\n',
        "snli_1.0/snli_1.0_dev.jsonl": SNLI_OK, "snli_1.0/snli_1.0_test.jsonl": SNLI_OK}),
         "snli_1.0/snli_1.0_train.jsonl line 2 needs the string fields", writes=("data",)),
    case("sst-bad-tree", "prepare sst", source_files("sst", {
        "trees/train.txt": "(3 (2 It) (4 works))\n(4 (2 unbalanced (3 tree)\n", "trees/dev.txt": "",
        "trees/test.txt": ""}), "raw/trees/train.txt line 2: unbalanced PTB tree", writes=("data",)),
]


def _snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_and_exit_2(project, tiny, c):
    c.setup(project, tiny)
    before = _snapshot(project)
    result = CliRunner().invoke(app, list(c.args))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    print(f"{c.id} | roar {' '.join(c.args)} | {lines[0] if lines else ''}")  # the table, with pytest -s
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for piece in c.expect:
        assert piece in lines[0], (piece, lines[0])
    assert "Traceback" not in result.output
    assert _snapshot(project) == before, "the command wrote something before failing"
    for out in c.writes:
        assert not (project / out).exists() or str(Path(out)) in before


def test_the_cases_are_distinct():
    assert len({c.id for c in CASES}) == len(CASES) >= 30
    assert len({c.expect[0] for c in CASES}) == len(CASES)


def test_nan_importance_is_refused_before_masked_data_is_written(project, tiny):
    """A diverged (NaN) k = 0 model makes gradient importance NaN: refused, nothing masked written."""
    with_data(model="nan-model")(project, tiny)
    result = CliRunner().invoke(app, CHAIN.split())
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "importance measure 'gradient' produced" in lines[0] and "NaN" in lines[0] and "non-finite" in lines[0]
    assert "Traceback" not in result.output
    masked = project / "data/masked/babi-1/bilstm-attention/gradient"
    assert not list(masked.rglob("*.arrow")) and not (project / "models/babi-1/bilstm-attention/gradient").exists()


def test_model_that_does_not_fit_its_config_is_one_line(project, tiny):
    """Weights of another architecture pass the header check; loading them names the file."""
    with_data(model="mismatch-model")(project, tiny)
    result = CliRunner().invoke(app, CHAIN.split())
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"{K0_MODEL}/model.safetensors does not load into the model of config.json" in lines[0]
    assert not list((project / "data/masked").rglob("*.arrow"))


@pytest.mark.parametrize("values, message", [
    ([[1.0, np.nan, 0.5]], "1 non-finite value(s) (1 NaN, 0 inf)"),
    ([[np.inf, 0.2, -np.inf]], "2 non-finite value(s) (0 NaN, 2 inf)"),
])
def test_mask_top_k_refuses_non_finite_importance(values, message):
    from roar.method.masking import mask_top_k

    tokens = np.array([[3, 10, 11, 12, 4]])
    importance = np.array([[0.0, *values[0], 0.0]])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        mask_top_k(tokens, np.array([5]), importance, 50, "quantile", measure="gradient")
    # NaN on special tokens or padding is ignored (never a candidate).
    importance[0, 1:4] = [0.1, 0.3, 0.2]
    importance[0, [0, 4]] = np.nan
    assert (mask_top_k(tokens, np.array([5]), importance, 34, "quantile") == [[3, 10, 2, 12, 4]]).all()


def test_good_params_validate_and_note_is_allowed(project):
    loaded = yaml.safe_load((project / "params.yaml").read_text())
    loaded["importance"]["attention"] = {"note": 1}
    (project / "params.yaml").write_text(yaml.safe_dump(loaded, sort_keys=False))
    result = CliRunner().invoke(app, ["validate"])
    assert result.exit_code == 0 and result.stdout == "params.yaml: ok (23 stages)\n"
    for config in sorted([*(REPO / "configs").glob("*.yaml"), *(REPO / "studies").glob("*/params.yaml")]):
        result = CliRunner().invoke(app, ["validate", "--params", str(config)])
        assert result.exit_code == 0, result.output


def test_schema_covers_every_config_field():
    from roar.data.prepare import PrepareConfig
    from roar.config.schema import PREPARE_RULES, TRAIN_NOT_IN_PARAMS, TRAIN_RULES
    from roar.models.training import TrainConfig

    assert set(PREPARE_RULES) == {f.name for f in fields(PrepareConfig)}
    assert set(TRAIN_RULES) | set(TRAIN_NOT_IN_PARAMS) == {f.name for f in fields(TrainConfig)}


def test_debug_shows_the_traceback(project):
    params(setitem("study", "steps", [20, 10]))(project, {})
    result = CliRunner().invoke(app, ["--debug", "validate"])
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and result.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize("setup, args, expect", [
    (params(setitem("study", "steps", [20, 10])), ["validate"], "study.steps = [20, 10]"),
    (with_data(write(f"{PREPARED}/train.arrow", b"\x00" * 100)), TRAIN.split(), f"{PREPARED}/train.arrow"),
])
def test_installed_command_exit_status_and_one_stderr_line(project, tiny, setup, args, expect):
    setup(project, tiny)
    done = subprocess.run([str(ROAR), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and expect in done.stderr
    assert "Traceback" not in done.stderr
    assert not (project / "models").exists() and not (project / "mlflow.db").exists()


def test_roar_help_stays_light():
    code = "import sys; import roar.cli; print('torch' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_corrupt_json_in_model_config_is_named(tmp_path, tiny):
    from roar.core.errors import RoarError
    from roar.models.training import load_model

    shutil.copytree(tiny["model"], tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{not json")
    with pytest.raises(RoarError, match=r"m/config.json is not valid JSON.*re-run the stage that trains it"):
        load_model(tmp_path / "m")
    assert json.loads((tiny["model"] / "config.json").read_text())["vocab_size"] > 0
