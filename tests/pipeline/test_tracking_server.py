"""A shared tracking server: the tiny study run by ``roar pipeline`` with ``MLFLOW_TRACKING_URI``
pointing at a real ``mlflow server`` on 127.0.0.1 (SQL backend, artifacts proxied to an S3 bucket
on a real S3-protocol server, moto) records the same run tree as the SQLite default, and its
artifacts are objects in the bucket. The stages get no S3 credentials: only the server has them."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.conftest import tiny_params
from tests.pipeline.conftest import (BIN, REPORT, S3_CREDENTIALS, TinyStudy, free_port, make_project,
                                     mlflow_runs, project_env, s3_server, server_process, sh)

BUCKET = "roar-mlflow"
PARENT_KIND = {"chain": "study", "step": "chain", "importance": "step", "train": "step", "report": "study"}
# What a run is, without the ids, times and commit that differ between two runs of one study.
KEY_TAGS = ("roar.kind", "mlflow.runName", "roar.dataset", "roar.model", "roar.measure", "roar.seed", "roar.k",
            "roar.recursive", "roar.strategy", "roar.study", "roar.study_key", "roar.data_hash")


@dataclass
class Served:
    root: Path
    uri: str
    runs: list
    objects: dict[str, bytes]  # key -> content of every object in the bucket


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    """The tiny study run against ``mlflow server`` + moto, both started here and always stopped."""
    import boto3

    tmp = tmp_path_factory.mktemp("tracking-server")
    with s3_server(BUCKET) as endpoint:
        port = free_port()
        uri = f"http://127.0.0.1:{port}"
        server_env = project_env(None, **S3_CREDENTIALS, MLFLOW_S3_ENDPOINT_URL=endpoint)
        args = [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{tmp / 'server.db'}",
                "--artifacts-destination", f"s3://{BUCKET}/mlflow", "--host", "127.0.0.1", "--port", str(port),
                "--workers", "2"]
        with server_process(args, f"{uri}/health", "mlflow server", timeout=180, env=server_env,
                            log=tmp / "server.log"):
            root = make_project(tmp / "tiny", tiny_params())
            sh("roar", "pipeline", "--jobs", "2", cwd=root, env=project_env(root, MLFLOW_TRACKING_URI=uri))
            runs = mlflow_runs(root, "tiny", uri)
            s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id="test", aws_secret_access_key="test")
            keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                    for o in page.get("Contents", [])]
            objects = {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys}
            yield Served(root, uri, runs, objects)


def describe(runs: list) -> collections.Counter:
    """The run tree as a multiset: each run's key tags, status, metric and param names, and the
    (kind, name) path of its ancestors."""
    by_id = {r.info.run_id: r for r in runs}
    tree = collections.Counter()
    for run in runs:
        ancestors, parent = [], by_id.get(run.data.tags.get("mlflow.parentRunId"))
        while parent is not None:
            ancestors.append((parent.data.tags["roar.kind"], parent.data.tags["mlflow.runName"]))
            parent = by_id.get(parent.data.tags.get("mlflow.parentRunId"))
        tree[(tuple(run.data.tags.get(t, "") for t in KEY_TAGS), run.info.status, tuple(sorted(run.data.metrics)),
              tuple(sorted(run.data.params)), tuple(ancestors))] += 1
    return tree


def kinds(runs: list) -> dict[str, int]:
    return dict(sorted(collections.Counter(r.data.tags["roar.kind"] for r in runs).items()))


def test_nothing_tracked_locally(served: Served) -> None:
    assert not (served.root / "mlflow.db").exists() and not (served.root / "mlartifacts").exists()


def test_run_tree_equals_the_sqlite_default(served: Served, tiny_study: TinyStudy) -> None:
    REPORT.append(f"test_tracking_server: runs by kind: server {kinds(served.runs)}, sqlite {kinds(tiny_study.runs)}")
    assert kinds(served.runs) == kinds(tiny_study.runs)
    assert kinds(served.runs)["step"] > 0 and kinds(served.runs)["report"] == 1
    assert describe(served.runs) == describe(tiny_study.runs)


def test_parents_intact(served: Served) -> None:
    by_id = {r.info.run_id: r for r in served.runs}
    checked = 0
    for run in served.runs:
        kind = run.data.tags["roar.kind"]
        assert run.info.status == "FINISHED", run.data.tags["mlflow.runName"]
        parent = run.data.tags.get("mlflow.parentRunId")
        if kind == "study":
            assert parent is None
            continue
        assert parent in by_id, f"{kind} run {run.info.run_id}: parent {parent} missing"
        assert by_id[parent].data.tags["roar.kind"] == PARENT_KIND[kind]
        checked += 1
    REPORT.append(f"test_tracking_server: parents intact: {checked} of {len(served.runs) - 1} non-study runs")
    assert checked == len(served.runs) - 1


def test_artifacts_are_objects_in_the_s3_remote(served: Served, tiny_study: TinyStudy) -> None:
    (report,) = [r for r in served.runs if r.data.tags["roar.kind"] == "report"]
    # the server chose the location (proxied artifacts), not a path on the client's disk
    assert report.info.artifact_uri == f"mlflow-artifacts:/{report.info.experiment_id}/{report.info.run_id}/artifacts"
    prefix = f"mlflow/{report.info.experiment_id}/{report.info.run_id}/artifacts/"
    stored = {key.removeprefix(prefix): body for key, body in served.objects.items() if key.startswith(prefix)}
    reports = served.root / "reports"
    # the report stage logs its top-level files and figures/ (DVC writes reports/.gitignore after it)
    logged = [p for p in reports.iterdir() if p.is_file() and p.name != ".gitignore"] + \
        sorted((reports / "figures").iterdir())
    assert sorted(stored) == sorted(str(p.relative_to(reports)) for p in logged)
    for path in logged:  # byte for byte what the report stage wrote
        assert stored[str(path.relative_to(reports))] == path.read_bytes(), path.name
    assert stored["racu.csv"].decode().startswith("dataset,model,measure,recursive,strategy,racu_mean")
    # the same artifact names as the SQLite default keeps in <root>/mlartifacts
    (local_report,) = [r for r in tiny_study.runs if r.data.tags["roar.kind"] == "report"]
    local = Path(local_report.info.artifact_uri.removeprefix("file://"))
    assert local.is_relative_to(tiny_study.root / "mlartifacts")
    assert sorted(stored) == sorted(str(p.relative_to(local)) for p in local.rglob("*") if p.is_file())
    REPORT.append(f"test_tracking_server: S3 objects: {len(served.objects)} in s3://{BUCKET}/mlflow, "
                  f"{len(stored)} of the report run "
                  f"(racu.csv {len(stored['racu.csv'])} bytes, equal to reports/racu.csv)")


def test_no_server_at_the_uri_is_one_line_at_once(served: Served) -> None:
    import subprocess

    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    proc = subprocess.run(["roar", "pipeline"], cwd=served.root, env=project_env(served.root, MLFLOW_TRACKING_URI=uri),
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: MLFLOW_TRACKING_URI={uri}: no MLflow server answers there (")
    assert proc.stderr.count("\n") == 1
