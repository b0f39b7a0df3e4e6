"""``roar plan``: counts from params, seconds from a real MLflow store of known timings, bad input."""

from __future__ import annotations

import copy
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from roar.cli import app
from roar.data.storage import DatasetMeta, Split, write_dataset
from roar.config.train_config import TrainConfig
from roar.launch.plan import STAGE_OVERHEAD_S, build_plan, format_plan, makespan, parse_speedup
from roar.pipeline.runner import chain_tags
from roar.config.schema import check_params, stage_count
from roar.tracking.mlflow_tracker import Tracker

PARAMS = {
    "study": {"name": "plan-test", "datasets": ["babi-1"], "models": ["bilstm-attention", "roberta"],
              "measures": ["random", "attention", "integrated-gradient"], "roar_measures": ["integrated-gradient"],
              "seeds": [0, 1], "strategy": "quantile", "steps": [30, 60, 90]},
    "prepare": {"babi-1": {"source": "generate", "n_train": 100, "n_test": 20, "val_fraction": 0.2}},
    "train": {"bilstm-attention": {"babi-1": {"epochs": 3, "batch_size": 4, "embedding_dim": 8, "hidden": 4,
                                              "attention_hidden": 4}},
              "roberta": {"babi-1": {"checkpoint": "roberta-base", "epochs": 2}}},
    "importance": {"batch_size": 16, "target": "gold", "random": {}, "attention": {}, "integrated-gradient": {"samples": 7}},
}
NO_STORE = "sqlite:////nonexistent-roar-plan/mlflow.db"


def by_kind(plan, kind, model=None):
    return [s for s in plan.stages if s.kind == kind and (model is None or s.model == model)]


def test_counts_by_hand(tmp_path):
    plan = build_plan(check_params(copy.deepcopy(PARAMS)), "p.yaml", tmp_path, NO_STORE)
    assert len(plan.stages) == stage_count(PARAMS["study"]) == 2 * (1 + 2 + 2 + 3 * 2 + 1 * 2) + 1 == 27
    lstm, rob = "bilstm-attention", "roberta"
    # per model: 2 + 2 references; recursive: 3 measures x 2 seeds x 3 steps, but attention is
    # undefined for the transformer (its stages only write a note); plain ROAR: 1 x 2 x 3
    assert sum(s.trainings for s in plan.stages if s.model == lstm) == 4 + 18 + 6
    assert sum(s.trainings for s in plan.stages if s.model == rob) == 4 + 12 + 6
    # importance: one pass per recursive step; plain ROAR explains once per chain (the k = 0 importance)
    assert sum(s.passes for s in by_kind(plan, "recursive", lstm)) == 18
    assert sum(s.passes for s in by_kind(plan, "roar", lstm)) == 2
    assert [s.passes for s in by_kind(plan, "roar", rob)] == [1, 1]
    # rows 80/20/20 from prepare (n_train 100, 20 % validation, n_test 20), 43.5 words per bAbI-1 example
    size = plan.sizes[("babi-1", lstm)]
    assert size.rows == {"train": 80, "val": 20, "test": 20}
    ig = next(s for s in by_kind(plan, "recursive", lstm) if "integrated-gradient" in s.name)
    assert ig.imp_units == {"integrated-gradient": pytest.approx(3 * 120 * size.tokens_per_row * 7)}
    random = next(s for s in by_kind(plan, "recursive", lstm) if "-random-" in s.name)
    assert random.imp_units == {"random": 0} and random.passes == 3  # random runs no model
    roar = by_kind(plan, "roar", lstm)[0]
    assert roar.imp_units["integrated-gradient"] == pytest.approx(1 * 120 * size.tokens_per_row * 7)
    assert roar.train_units == pytest.approx(3 * 80 * size.tokens_per_row * 3)  # steps x train tokens x epochs
    # nothing measured, no calibration: no seconds, and the plan says how to get them
    assert all(s.local_s is None for s in plan.stages if s.trainings)
    text = format_plan(plan)
    assert "total                                 27" in text and "add --calibrate" in text


def _prepared(root: Path) -> None:
    """babi-1 prepared with 8/2/2 examples of 5 + 3 tokens (8 per example)."""
    def split(n):
        return Split.from_lists([[5] * 5] * n, [0] * n, [[6] * 3] * n)

    meta = DatasetMeta("babi-1", ["a", "b"], True, "accuracy", "accuracy")
    write_dataset(root / "data" / "prepared" / "babi-1" / "bilstm-attention", meta, "[]",
                  {"train": split(8), "val": split(2), "test": split(2)})


def _store(root: Path, train_seconds: list[float], ig_seconds: float) -> None:
    """A real MLflow store with one study: one IG step (7 samples, 12 examples) and trainings of 3 epochs."""
    tracker = Tracker("measured", root)
    config = asdict(TrainConfig(**{"model": "bilstm-attention", **PARAMS["train"]["bilstm-attention"]["babi-1"]}))
    study = tracker.start("study", "measured", None, {})
    tags = chain_tags("babi-1", "bilstm-attention", "integrated-gradient", 0, "quantile", True)
    chain = tracker.start("chain", "c", study, tags)
    for i, seconds in enumerate(train_seconds):
        with tracker.run("step", f"k={i}", chain, tags) as step:
            if i == 0:
                with tracker.run("importance", "ig", step, tags) as imp:
                    tracker.log_params(imp, {"measure": "integrated-gradient", "samples": 7})
                    tracker.log_metrics(imp, {"seconds": ig_seconds, "examples": 12})
            with tracker.run("train", "t", step, tags, config) as run:
                for epoch in range(3):
                    tracker.log_metrics(run, {"train_loss": 1.0 / (epoch + 1)}, epoch)
                tracker.log_metrics(run, {"seconds": seconds, "best_epoch": 2})
    # a plain ROAR step reusing the k = 0 importance takes no time: it must not count
    roar_tags = {**tags, "roar.recursive": "false"}
    with tracker.run("step", "roar", chain, roar_tags) as step:
        with tracker.run("importance", "ig", step, roar_tags) as imp:
            tracker.log_metrics(imp, {"seconds": 0.0, "examples": 12})
        with tracker.run("train", "t", step, roar_tags, config) as run:
            tracker.log_metrics(run, {"train_loss": 1.0}, 0)
            tracker.log_metrics(run, {"seconds": 1.0})
    tracker.end(chain)
    tracker.end(study)


def test_estimate_from_measured_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _prepared(tmp_path)
    _store(tmp_path, [1.92, 3.84], 6.72)
    params = check_params(copy.deepcopy(PARAMS))
    params["study"]["models"] = ["bilstm-attention"]
    params["study"]["measures"] = ["integrated-gradient"]
    plan = build_plan(params, "p.yaml", tmp_path, jobs=2, speedup="4")
    # IG: 6.72 s for 12 examples x 8 tokens x 7 samples = 672 units; training: (1.92 + 3.84) s for
    # 2 x 8 train rows x 8 tokens x 3 epochs = 384 units, plus the 1-epoch plain ROAR one (1 s, 64 units)
    r_ig, r_train = 6.72 / 672, (1.92 + 3.84 + 1.0) / (384 + 64)
    assert plan.rates[("babi-1", "bilstm-attention", "integrated-gradient")].seconds_per_unit == pytest.approx(r_ig)
    assert plan.rates[("babi-1", "bilstm-attention", "train")].seconds_per_unit == pytest.approx(r_train)
    # epochs: measured mean of the three trainings (3, 3, 1)
    epochs = 7 / 3
    per_training, per_pass = 8 * 8 * epochs * r_train, 12 * 8 * 7 * r_ig
    # stages: prepare, 2 + 2 references, 2 recursive and 2 plain ROAR chains, report
    trainings, passes, stages = 4 + 2 * 3 + 2 * 3, 2 * 3 + 2 * 1, 10
    expected = trainings * per_training + passes * per_pass + stages * STAGE_OVERHEAD_S
    assert sum(s.local_s for s in plan.stages) == pytest.approx(expected)
    chain = next(s for s in plan.stages if s.kind == "recursive")
    assert chain.local_s == pytest.approx(3 * per_training + 3 * per_pass + STAGE_OVERHEAD_S)
    assert plan.gpu_seconds(chain) == pytest.approx((3 * per_training + 3 * per_pass) / 4 + STAGE_OVERHEAD_S)
    text = format_plan(plan)
    assert "measured: 3 runs in experiment measured" in text and "measured mean 2.3 of at most 3" in text
    # wall time: per wave, the longest-first schedule on 2 workers
    ref = per_training + STAGE_OVERHEAD_S
    chains = [s.local_s for s in plan.stages if s.kind in ("recursive", "roar")]
    wall = STAGE_OVERHEAD_S + makespan([ref, ref], 2) + makespan(chains + [ref, ref], 2) + STAGE_OVERHEAD_S
    assert plan.wall(False) == pytest.approx(wall)


def test_makespan_and_speedup():
    assert makespan([3, 3, 2, 2, 2], 2) == 7  # 3+2+2 and 3+2
    assert makespan([5], 4) == 5
    assert parse_speedup("bilstm-attention=5,roberta=40", ["bilstm-attention", "roberta"]) == {
        "bilstm-attention": 5.0, "roberta": 40.0}
    assert parse_speedup("2.5", ["roberta"]) == {"roberta": 2.5}


@pytest.mark.parametrize("text, message", [
    ("0", "--gpu-speedup '0' must be a number > 0"),
    ("fast", "--gpu-speedup 'fast' must be a number > 0"),
    ("lstm=3", "--gpu-speedup: unknown model 'lstm'; allowed: bilstm-attention, roberta"),
    ("bilstm-attention=3", "gives no factor for model roberta"),
])
def test_bad_speedup(text, message):
    with pytest.raises(ValueError) as error:
        parse_speedup(text, ["bilstm-attention", "roberta"])
    assert message in str(error.value)


def test_cli_plan_and_bad_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", NO_STORE)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(PARAMS))
    done = CliRunner().invoke(app, ["plan", "p.yaml", "--jobs", "3"])
    assert done.exit_code == 0, done.output
    assert "plan of p.yaml (study plan-test)" in done.output and "wall time with --jobs 3" in done.output
    for args, message in [(["plan", "missing.yaml"], "params file missing.yaml not found"),
                          (["plan", "p.yaml", "--gpu-speedup", "-1"], "--gpu-speedup '-1' must be a number > 0"),
                          (["plan", "p.yaml", "--jobs", "0"], "--jobs 0 must be an integer >= 1")]:
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2 and message in result.output
        assert len(result.output.strip().splitlines()) == 1
    bad = copy.deepcopy(PARAMS)
    bad["study"]["steps"] = [60, 30]
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    result = CliRunner().invoke(app, ["plan", "bad.yaml"])
    assert result.exit_code == 2 and "bad.yaml: study.steps = [60, 30] must be strictly increasing" in result.output
    assert not (tmp_path / "mlflow.db").exists() and not Path("/nonexistent-roar-plan").exists()


def test_cli_plan_of_a_study_folder_reads_that_study_s_prepared_data(tmp_path, monkeypatch):
    """``roar plan studies/x/params.yaml`` sizes the study from studies/x/data, not from the default study's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", NO_STORE)
    _prepared(tmp_path)  # the default study's data: 8/2/2 examples
    study = tmp_path / "studies" / "x"
    study.mkdir(parents=True)
    (study / "dvc.yaml").write_text("stages: {}\n")
    (study / "params.yaml").write_text(yaml.safe_dump(PARAMS))
    done = CliRunner().invoke(app, ["plan", "studies/x/params.yaml"])
    assert done.exit_code == 0, done.output
    assert "babi-1/bilstm-attention: rows 80/20/20" in done.output  # from prepare.babi-1 (100, val 0.2, test 20)
    _prepared(study)
    done = CliRunner().invoke(app, ["plan", "studies/x/params.yaml"])
    assert "babi-1/bilstm-attention: rows 8/2/2, 8.0 tokens per example (prepared data" in done.output, done.output
