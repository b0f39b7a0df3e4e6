"""The pipeline log: one line per call, appended whole, with the hardware and the stages' seconds."""

from __future__ import annotations

import json
import os

import pytest
import torch

from roar.tracking.pipeline_log import FINISHED, LOG, STOPPED, PipelineCall, by_machine, machine, read_calls, totals


def test_machine_names_the_cores_this_process_may_use_and_torchs_cpu_instruction_set() -> None:
    info = machine()
    assert info["cores"] == len(os.sched_getaffinity(0))
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["torch"] == torch.__version__
    assert isinstance(info["cpu"], str) and info["cpu"]
    assert ("gpus" in info) == torch.cuda.is_available()


def test_each_call_appends_one_line_and_keeps_the_earlier_ones(tmp_path) -> None:
    first = PipelineCall(tmp_path, jobs=2, git_commit="abc")
    first.stage_seconds.update({"train_k0@a-0": 12.34, "recursive@a-random-0": 100.0})
    entry = first.end(STOPPED)
    assert entry["outcome"] == STOPPED and entry["jobs"] == 2 and entry["git_commit"] == "abc"
    assert entry["stages"] == {"train_k0@a-0": 12.3, "recursive@a-random-0": 100.0}
    second = PipelineCall(tmp_path, jobs=1)
    second.end(FINISHED)
    lines = (tmp_path / LOG).read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == entry
    calls = read_calls(tmp_path)
    assert [call["outcome"] for call in calls] == [STOPPED, FINISHED]
    assert calls[1]["stages"] == {} and calls[1]["wall_seconds"] >= 0


def test_totals_sum_wall_and_stage_process_hours_over_calls() -> None:
    calls = [{"wall_seconds": 1800.0, "stages": {"a": 1800.0, "b": 1800.0}},
             {"wall_seconds": 5400.0, "stages": {"c": 7200.0}}]
    assert totals(calls) == (2.0, 3.0)
    assert totals([]) == (0.0, 0.0)


def test_a_study_without_a_log_has_no_calls(tmp_path) -> None:
    assert read_calls(tmp_path) == []


def test_a_call_refused_before_any_stage_ran_leaves_no_line(tmp_path) -> None:
    from roar.launch.local import run_pipeline

    with pytest.raises(FileNotFoundError):  # no params.yaml: refused before the study run opens
        run_pipeline(tmp_path, log=lambda line: None)
    assert not (tmp_path / LOG).exists()


def test_by_machine_sums_the_calls_of_each_machine_in_order_of_first_use() -> None:
    xeon = {"cpu": "Intel Xeon", "cpu_capability": "AVX512", "cores": 2}
    epyc = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "cores": 2}
    calls = [{"machine": xeon, "wall_seconds": 3600.0, "stages": {"a": 1800.0, "b": 3600.0}},
             {"machine": epyc, "wall_seconds": 1800.0, "stages": {"b": 900.0, "c": 1800.0}},
             {"machine": xeon, "wall_seconds": 7200.0, "stages": {"a": 3600.0}},
             {"machine": {**epyc, "gpus": ["NVIDIA H200"]}, "wall_seconds": 360.0, "stages": {}}]
    assert by_machine(calls) == [
        {"machine": "Intel Xeon (AVX512), 2 cores", "calls": 2, "wall_hours": 3.0, "stage_process_hours": 2.5,
         "stages": 2},
        {"machine": "AMD EPYC (AVX2), 2 cores", "calls": 1, "wall_hours": 0.5, "stage_process_hours": 0.75,
         "stages": 2},
        {"machine": "AMD EPYC (AVX2), 2 cores, NVIDIA H200", "calls": 1, "wall_hours": 0.1,
         "stage_process_hours": 0.0, "stages": 0}]
