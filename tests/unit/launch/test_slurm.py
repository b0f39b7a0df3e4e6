"""The Slurm executor's pieces that need no cluster: resources, scripts, states."""

from __future__ import annotations

from pathlib import Path

import pytest

from roar.core.errors import RoarError
from roar.launch.slurm import (
    DEFAULTS,
    Job,
    Submission,
    chain_deadline_s,
    job_resources,
    job_script,
    limit_seconds,
    parse_sacct,
    parse_scontrol,
    sbatch_options,
    summary,
)

SLURM = {"cpus": 2, "memory": "8G", "partition": "gpu", "extra": ["--qos=high"],
         "stages": {"recursive": {"time": "1-00:00:00", "gpus": 1}, "report": {"cpus": 1}}}


def test_resources_layer_defaults_then_runtime_slurm_then_the_stage_kind() -> None:
    assert job_resources(None, "recursive") == DEFAULTS
    assert job_resources(SLURM, "recursive") == {**DEFAULTS, "cpus": 2, "memory": "8G", "partition": "gpu",
                                                 "extra": ["--qos=high"], "time": "1-00:00:00", "gpus": 1}
    assert job_resources(SLURM, "report")["cpus"] == 1
    assert job_resources(SLURM, "prepare")["time"] == DEFAULTS["time"]
    assert "stages" in SLURM  # not consumed


def test_sbatch_options() -> None:
    assert sbatch_options(job_resources(SLURM, "recursive")) == [
        "--cpus-per-task=2", "--time=1-00:00:00", "--mem=8G", "--gpus=1", "--partition=gpu", "--qos=high"]
    assert sbatch_options(DEFAULTS) == ["--cpus-per-task=1", "--time=04:00:00", "--mem=4G"]


def test_job_script_runs_one_stage_with_its_resources(tmp_path: Path) -> None:
    script = job_script(tmp_path, "train_k0@a-b-0", "dvc --wait-for-lock repro --single-item 'train_k0@a-b-0'",
                        job_resources(SLURM, "report"), tmp_path / "log-%j.out")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert f"#SBATCH --chdir={tmp_path.resolve()}" in lines
    assert "#SBATCH --kill-on-invalid-dep=yes" in lines and "#SBATCH --export=ALL" in lines
    assert [line for line in lines if line.startswith("#SBATCH --cpus")] == ["#SBATCH --cpus-per-task=1"]
    assert lines[-1] == "exec dvc --wait-for-lock repro --single-item 'train_k0@a-b-0'"


def test_states_from_sacct_and_scontrol_output() -> None:
    sacct = "41|COMPLETED|0:0|00:01:02|None\n42|CANCELLED by 0|0:0|00:00:00|DependencyNeverSatisfied\n"
    assert parse_sacct(sacct) == {
        "41": {"state": "COMPLETED", "reason": "None", "exit_code": "0:0", "elapsed": "00:01:02"},
        "42": {"state": "CANCELLED", "reason": "DependencyNeverSatisfied", "exit_code": "0:0", "elapsed": "00:00:00"}}
    scontrol = ("JobId=7 JobName=roar:report UserId=root(0) JobState=FAILED Reason=NonZeroExitCode "
                "Dependency=(null) ExitCode=3:0 RunTime=00:00:05 TimeLimit=00:30:00\n"
                "JobId=8 JobName=roar:finish JobState=PENDING Reason=Dependency Dependency=afterok:7(unfulfilled) "
                "ExitCode=0:0 RunTime=00:00:00\n")
    assert parse_scontrol(scontrol) == {
        "7": {"state": "FAILED", "reason": "NonZeroExitCode", "exit_code": "3:0", "elapsed": "00:00:05"},
        "8": {"state": "PENDING", "reason": "Dependency", "exit_code": "0:0", "elapsed": "00:00:00"}}


def test_summary_lists_failures_first_and_says_how_to_resume() -> None:
    sub = Submission("f", "run", "now", [
        Job("prepare@x", "1", [], "f/prepare@x-1.out", "COMPLETED", "None", "0:0", "00:00:10"),
        Job("recursive@x-0", "2", ["1"], "f/recursive-2.out", "FAILED", "NonZeroExitCode", "0:9", "00:01:00"),
        Job("finish", "3", ["1", "2"], "f/finish-3.out", "CANCELLED", "DependencyNeverSatisfied", "0:0", "00:00:00")])
    lines = summary(sub).splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["recursive@x-0", "finish", "prepare@x"]
    assert "FAILED" in lines[1] and "0:9" in lines[1] and "NonZeroExitCode" in lines[1]
    assert lines[-1].startswith("2 job(s) did not complete; first failure: recursive@x-0 (log f/recursive-2.out)")
    assert "only stages that are not done are submitted" in lines[-1]


@pytest.mark.parametrize(("limit", "seconds"), [("30", 1800), (45, 2700), ("10:30", 630), ("04:00:00", 14400),
                                                 ("1-00:00:00", 86400), ("2-12", 216000), ("1-02:30", 95400),
                                                 ("UNLIMITED", None), ("infinite", None)])
def test_slurm_time_limits(limit, seconds) -> None:
    assert limit_seconds(limit) == seconds


@pytest.mark.parametrize("limit", ["", "4h", "1:2:3:4", "-5", "1-"])
def test_a_bad_time_limit_is_named_with_its_forms(limit) -> None:
    with pytest.raises(RoarError, match="runtime.slurm time"):
        limit_seconds(limit)


def test_a_chain_job_stops_between_steps_before_its_time_limit(tmp_path: Path) -> None:
    command = "dvc --wait-for-lock repro --single-item 'recursive@a-b-c-0'"
    script = job_script(tmp_path, "recursive@a-b-c-0", command, {**DEFAULTS, "time": "04:00:00"},
                        tmp_path / "log-%j.out").splitlines()
    # 4 h less 5 %: 13,680 s after the job starts; no step estimate (0): the chain times the steps it runs
    assert 'export ROAR_CHAIN_DEADLINE="$(( $(date +%s) + 13680 )) 0"' in script
    assert script[-3:] == [f"{command} && exit 0 || code=$?",
                           f'if grep -qE "exited with 75\\b" "{tmp_path}/log-$SLURM_JOB_ID.out"; then exit 75; fi',
                           'exit "$code"']
    assert chain_deadline_s("00:10:00") == 540.0  # a minute's margin under 20 minutes
    assert chain_deadline_s("UNLIMITED") is None
    assert job_script(tmp_path, "recursive@a-b-c-0", command, {**DEFAULTS, "time": "UNLIMITED"},
                      tmp_path / "log-%j.out").splitlines()[-1] == f"exec {command}"
    report = job_script(tmp_path, "report", "dvc repro report", DEFAULTS, tmp_path / "r-%j.out").splitlines()
    assert report[-1] == "exec dvc repro report" and not any("ROAR_CHAIN_DEADLINE" in line for line in report)


def test_the_summary_tells_a_chain_stopped_at_its_time_limit_from_a_failure() -> None:
    sub = Submission("f", "run", "now", [
        Job("recursive@x-0", "2", [], "f/recursive-2.out", "FAILED", "NonZeroExitCode", "75:0", "03:48:00"),
        Job("report", "3", ["2"], "f/report-3.out", "CANCELLED", "DependencyNeverSatisfied", "0:0", "00:00:00")])
    lines = summary(sub).splitlines()
    assert lines[-2].startswith("1 chain job(s) stopped between steps before their time limit (exit 75)")
    assert "resume" in lines[-2]
    assert lines[-1] == "1 job(s) after them were cancelled; the resubmission runs them."  # no failure to fix
