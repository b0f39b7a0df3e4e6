"""The Slurm executor on a real one-node Slurm cluster (munged, slurmctld, slurmd on this machine).

The cluster is started by ``scripts/slurm/start-cluster.sh`` (root; installs ``slurm-wlm`` and
``munge`` when missing). Without root or Slurm these tests are skipped, except where
``ROAR_REQUIRE_SLURM=1`` (CI sets it): there a missing cluster fails them.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_params
from tests.pipeline.conftest import (
    REPO,
    REPORT,
    TINY_RUN_KINDS,
    TinyStudy,
    make_project,
    mlflow_runs,
    project_env,
    sh,
)


def _controller_up() -> bool:
    if not shutil.which("scontrol"):
        return False
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    return ping.returncode == 0 and "UP" in ping.stdout


@pytest.fixture(scope="module")
def cluster() -> None:
    """A running cluster: the one already up (.ci/run starts it), else started here as root."""
    if _controller_up():
        return
    why = ("not root, and no cluster is running" if os.geteuid() != 0 else
           "no apt-get to install slurm-wlm" if not shutil.which("slurmctld") and not shutil.which("apt-get") else "")
    if why:
        if os.environ.get("ROAR_REQUIRE_SLURM") == "1":
            pytest.fail(f"ROAR_REQUIRE_SLURM=1 but the Slurm test cluster cannot start here ({why})")
        pytest.skip(f"the Slurm test cluster needs root and Debian's slurm-wlm ({why})")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "slurm" / "start-cluster.sh")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def slurm_params(**study) -> dict:
    params = tiny_params()
    params["study"].update(study)
    # one CPU and 2 GB per job, so that the two-CPU node runs two stages at once
    params["runtime"] = {**params.get("runtime", {}), "threads": 1,
                         "slurm": {"cpus": 1, "memory": "2G", "time": "00:30:00",
                                   "stages": {"report": {"time": "00:10:00"}}}}
    return params


def submit(root: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["roar", "pipeline", "--executor", "slurm", "--wait", "--poll", "1", "--no-push", *extra],
                          cwd=root, env=project_env(root, **env), capture_output=True, text=True, timeout=1800)


def report(title: str, output: str) -> None:
    """Add a submission's output to the session summary, without the progress lines."""
    REPORT.extend([title, *(line for line in output.splitlines() if not line.startswith("[roar] jobs:"))])


def submission(root: Path) -> dict:
    found = sorted((root / ".roar" / "slurm").glob("*/submission.json"))
    return json.loads(found[-1].read_text())


def test_study_through_slurm_matches_the_local_run(cluster, tiny_study: TinyStudy, tmp_path: Path) -> None:
    root = make_project(tmp_path / "slurm", slurm_params())
    proc = submit(root)
    report("test_slurm: the tiny study through `roar pipeline --executor slurm --wait`:", proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    jobs = {job["stage"]: job for job in submission(root)["jobs"]}
    stages = sh("dvc", "stage", "list", "--name-only", cwd=root).split()
    assert sorted(jobs) == sorted([*stages, "finish"])  # one job per stage, and the finish job
    assert {job["state"] for job in jobs.values()} == {"COMPLETED"}
    squeue = subprocess.run(["squeue", "--state=all", "-j", ",".join(j["job_id"] for j in jobs.values()),
                             "-o", "%.6i %.45j %.10T %.8M %r"], capture_output=True, text=True, check=True).stdout
    REPORT.extend(["test_slurm: squeue --state=all:", *squeue.splitlines()])
    assert squeue.count("COMPLETED") == len(jobs)
    # afterok edges follow dvc.yaml: a chain waits for its data and its seed's k = 0 model
    chain = jobs["recursive@babi-1-bilstm-attention-attention-1"]
    assert sorted(chain["after"]) == sorted([jobs["prepare@babi-1-bilstm-attention"]["job_id"],
                                             jobs["train_k0@babi-1-bilstm-attention-1"]["job_id"]])
    assert jobs["prepare@babi-1-bilstm-attention"]["after"] == []
    assert sorted(jobs["finish"]["after"]) == sorted(j["job_id"] for s, j in jobs.items() if s != "finish")
    log = (root / jobs["recursive@babi-1-bilstm-attention-random-0"]["log"]).read_text()
    assert "[roar] recursive@babi-1-bilstm-attention-random-0 on" in log

    # the same numbers as the local executor's run of the same study
    assert (root / "reports" / "racu.csv").read_text() == tiny_study.racu
    REPORT.append("test_slurm: reports/racu.csv is byte-identical to the local executor's:")
    REPORT.extend("  " + line for line in (root / "reports" / "racu.csv").read_text().splitlines())
    # one study run, ended by the finish job, holding every chain
    runs = mlflow_runs(root, "tiny")
    study = [r for r in runs if r.data.tags["roar.kind"] == "study"]
    assert len(study) == 1 and study[0].info.status == "FINISHED"
    assert study[0].data.tags["roar.executor"] == "slurm"
    assert collections.Counter(r.data.tags["roar.kind"] for r in runs) == TINY_RUN_KINDS
    chains = [r for r in runs if r.data.tags["roar.kind"] == "chain"]
    assert {r.data.tags["mlflow.parentRunId"] for r in chains} == {study[0].info.run_id}
    assert [r.info.run_name for r in runs if r.info.status != "FINISHED"] == []

    again = submit(root)
    assert again.returncode == 0 and "every stage is up to date; nothing submitted" in again.stdout


def test_a_killed_stage_cancels_its_dependents_and_a_resubmission_resumes(cluster, tmp_path: Path) -> None:
    root = make_project(tmp_path / "killed", slurm_params(measures=["random"], seeds=[0]))
    # every chain process SIGKILLs itself after writing step 70's masked data (a node failure)
    proc = submit(root, ROAR_FAILPOINT="data-written@k70")
    report("test_slurm: a chain SIGKILLed at step 70 (ROAR_FAILPOINT=data-written@k70):", proc.stdout)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    states = {job["stage"]: job["state"] for job in submission(root)["jobs"]}
    assert states == {"prepare@babi-1-bilstm-attention": "COMPLETED", "train_k0@babi-1-bilstm-attention-0": "COMPLETED",
                      "train_all_masked@babi-1-bilstm-attention-0": "COMPLETED",
                      "recursive@babi-1-bilstm-attention-random-0": "FAILED",
                      "report": "CANCELLED", "finish": "CANCELLED"}
    assert "did not complete; first failure: recursive@babi-1-bilstm-attention-random-0" in proc.stdout
    step40 = root / "results/babi-1/bilstm-attention/random/recursive/s0/k40.json"
    finished_40 = step40.read_text()

    resumed = submit(root)
    report("test_slurm: resubmitted:", resumed.stdout)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # only what was not done is submitted again, and the finished step 40 is reused as it was
    assert sorted(job["stage"] for job in submission(root)["jobs"]) == [
        "finish", "recursive@babi-1-bilstm-attention-random-0", "report"]
    assert step40.read_text() == finished_40
    assert (root / "reports" / "racu.csv").is_file()
    study = [r for r in mlflow_runs(root, "tiny") if r.data.tags["roar.kind"] == "study"]
    assert len(study) == 1 and study[0].info.status == "FINISHED"


def test_a_job_past_its_time_limit_is_stopped_and_a_resubmission_finishes_the_study(cluster, tmp_path: Path) -> None:
    """A chain job that outlives its wall-time limit (``runtime.slurm.stages.recursive.time``): Slurm ends it
    (TIMEOUT) with SIGTERM, which the chain answers by ending its runs KILLED; its dependents are cancelled,
    the steps it finished are kept, and submitting again finishes the study, as on a cluster whose jobs are cut
    at their time limit or preempted."""
    params = slurm_params(measures=["random"], seeds=[0])
    # the chain's deadline is 90 s after the job starts (2.5 min less a minute): step 40 fits before it, and
    # step 70, expected to take as long as step 40, starts and never ends: the job runs into its limit
    params["runtime"]["slurm"]["stages"]["recursive"] = {"time": "00:02:30"}
    root = make_project(tmp_path / "timeout", params)
    proc = submit(root, ROAR_FAILPOINT="stall:data-written@k70")
    report("test_slurm: a chain job past its 2.5-minute time limit (ROAR_FAILPOINT=stall:data-written@k70):",
           proc.stdout)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    states = {job["stage"]: job["state"] for job in submission(root)["jobs"]}
    assert states == {"prepare@babi-1-bilstm-attention": "COMPLETED", "train_k0@babi-1-bilstm-attention-0": "COMPLETED",
                      "train_all_masked@babi-1-bilstm-attention-0": "COMPLETED",
                      "recursive@babi-1-bilstm-attention-random-0": "TIMEOUT",
                      "report": "CANCELLED", "finish": "CANCELLED"}, proc.stdout
    chain = root / "results/babi-1/bilstm-attention/random/recursive/s0"
    finished = {p.name: p.read_text() for p in chain.glob("k*.json")}
    assert sorted(finished) == ["k40.json"]  # step 70 never wrote its record
    # Slurm's SIGTERM at the limit reached the chain mid-step: it ended its runs KILLED, none is left RUNNING
    [job] = [job for job in submission(root)["jobs"] if job["state"] == "TIMEOUT"]
    assert "stopped by SIGTERM" in (root / job["log"]).read_text()
    runs = mlflow_runs(root, "tiny")
    assert [r.info.status for r in runs if r.data.tags.get("roar.kind") == "chain"
            and r.data.tags.get("roar.measure") == "random"] == ["KILLED"]
    assert [r.info.status for r in runs if r.data.tags.get("roar.kind") == "step"
            and r.data.tags.get("roar.k") == "70"] == ["KILLED"]
    assert "RUNNING" not in {r.info.status for r in runs if r.data.tags.get("roar.kind") != "study"}

    resumed = submit(root)
    report("test_slurm: resubmitted after the time limit:", resumed.stdout)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert sorted(job["stage"] for job in submission(root)["jobs"]) == [
        "finish", "recursive@babi-1-bilstm-attention-random-0", "report"]
    assert {name: (chain / name).read_text() for name in finished} == finished  # step 40 reused as it was
    assert (chain / "k70.json").is_file() and (root / "reports" / "racu.csv").is_file()
    assert "up to date" in sh("dvc", "status", cwd=root)
    study = [r for r in mlflow_runs(root, "tiny") if r.data.tags["roar.kind"] == "study"]
    assert len(study) == 1 and study[0].info.status == "FINISHED"


def test_a_chain_job_stops_between_steps_before_its_time_limit_and_a_resubmission_resumes(cluster,
                                                                                          tmp_path: Path) -> None:
    """A chain job whose time limit leaves no room for a step (one minute, less the one-minute margin): it stops
    before its first step instead of being killed, exit 75, its MLflow chain run KILLED and none left RUNNING;
    the summary says to resubmit, and a resubmission with a longer limit finishes the study."""
    params = slurm_params(measures=["random"], seeds=[0])
    params["runtime"]["slurm"]["stages"]["recursive"] = {"time": "00:01:00"}
    root = make_project(tmp_path / "deadline", params)
    proc = submit(root)
    report("test_slurm: a chain job whose deadline comes before its first step (1-minute limit):", proc.stdout)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs = {job["stage"]: job for job in submission(root)["jobs"]}
    chain = jobs["recursive@babi-1-bilstm-attention-random-0"]
    assert (chain["state"], chain["exit_code"]) == ("FAILED", "75:0"), jobs
    assert "stopped before step k=40" in (root / chain["log"]).read_text()
    assert "1 chain job(s) stopped between steps before their time limit (exit 75)" in proc.stdout
    assert not list((root / "results/babi-1/bilstm-attention/random/recursive/s0").glob("k*.json"))
    runs = mlflow_runs(root, "tiny")
    assert [r.info.status for r in runs if r.data.tags.get("roar.kind") == "chain"
            and r.data.tags.get("roar.measure") == "random"] == ["KILLED"]
    assert "RUNNING" not in {r.info.status for r in runs if r.data.tags.get("roar.kind") != "study"}

    params["runtime"]["slurm"]["stages"]["recursive"] = {"time": "00:30:00"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    resumed = submit(root)
    report("test_slurm: resubmitted with a 30-minute limit:", resumed.stdout)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert (root / "reports" / "racu.csv").is_file() and "up to date" in sh("dvc", "status", cwd=root)
