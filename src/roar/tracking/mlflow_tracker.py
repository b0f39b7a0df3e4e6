"""MLflow tracking: one explicit tracking URI and a run tree that spans processes.

study -> chain -> step -> (importance, train). Every DVC stage is its own process, so children
name their parent with the standard ``mlflow.parentRunId`` tag instead of MLflow's in-process
run stack. Runs carry the ``roar.*`` tags that :mod:`roar.pipeline.runner` and
:mod:`roar.pipeline.chain` set and MLflow's standard source tags (so that its UI fills the Source
column); a chain run carries its curve as a metric history over k, which MLflow's chart and
compare views draw side by side.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from roar.tracking.protocol import ended_status

KINDS = ("study", "chain", "step", "importance", "train", "report")
PARENT_TAG = "mlflow.parentRunId"
PROCESS_TAG = "roar.process"  # host:pid:start-time of the process that owns a RUNNING run
STUDY_RUN_TAG = "roar.study_run"  # the study run a run belongs to, however deep it is nested
LAUNCH_KIND = "launch"  # roar.kind given to the run of an `mlflow run` entry point that roar's runs nest under
# MLflow 3's UI reads this experiment tag to tell a model-training experiment from a GenAI one
# (MLflow 3.17's UI takes the kind from its GenAI / Model training switch instead; see runs_page_url).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
NOTE_TAG = "mlflow.note.content"  # an experiment's or a run's description in the UI


DATASET_ATTEMPTS = 5
# what a SQL backend says when a concurrent insert took the row first (SQLite, PostgreSQL, MySQL)
_UNIQUE_VIOLATION = re.compile(r"IntegrityError|UniqueViolation|unique constraint|Duplicate entry", re.IGNORECASE)


def lost_insert_race(error: Exception) -> bool:
    """Whether an MLflow store error is a unique-key violation, i.e. another process inserted the same
    row between this one's lookup and its insert."""
    return bool(_UNIQUE_VIOLATION.search(str(error)))


def process_identity(pid: int | None = None) -> str:
    """``host:pid:start`` of a process (start = its start time in clock ticks since boot, so that a
    reused pid is not mistaken for the original process); ``host:pid:`` where /proc is absent."""
    pid = os.getpid() if pid is None else pid
    try:
        # field 22 of /proc/<pid>/stat, counted after the parenthesised command name
        start = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        start = ""
    return f"{socket.gethostname()}:{pid}:{start}"


def process_alive(identity: str) -> bool | None:
    """Whether the process named by :func:`process_identity` still runs; None if it ran on
    another host (it cannot be checked from here)."""
    host, _, rest = identity.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return process_identity(int(pid)) == identity if start else True


def tracking_uri(root: Path = Path(".")) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else ``sqlite:///<project>/mlflow.db``: one store for the project's
    default study and its study folders (:func:`roar.config.layout.project_root`)."""
    from roar.config.layout import project_root

    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root(root) / 'mlflow.db'}"


def is_local_store(uri: str) -> bool:
    """Whether ``uri`` is a SQLite file (the one-user default): its experiments keep their artifacts
    beside it, under ``<root>/mlartifacts``. Any other store (a team's ``http(s)://`` server)
    decides the artifact location itself (e.g. ``mlflow-artifacts:/`` proxied to S3)."""
    return uri.startswith("sqlite:")


def check_server(uri: str, timeout: float = 10.0) -> None:
    """Fail in one line, at once, when an ``http(s)`` tracking URI has no server answering (MLflow's
    client would retry for minutes first). Any HTTP answer counts: an auth proxy may refuse /health."""
    if not uri.startswith(("http://", "https://")):
        return
    import ssl
    import urllib.error
    import urllib.request

    from roar.core.errors import RoarError

    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        pass
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLError):  # a server answers; MLflow's own TLS settings decide
            return
        raise RoarError(f"MLFLOW_TRACKING_URI={uri}: no MLflow server answers there ({reason}); start it "
                        "(`mlflow server ...`, see docs/operations.md, 'Tracking for a team') or unset "
                        "MLFLOW_TRACKING_URI to track in sqlite:///mlflow.db") from None


def _is_pipeline_output(path: str) -> bool:
    """Files that running the pipeline itself changes (DVC's lock and ignores, the step records and run facts,
    the report), at the project's top or in a study folder; ``path`` relative to the repository."""
    parts = path.split("/")
    if parts[0] == "studies" and len(parts) > 2:
        parts = parts[2:]
    return parts == ["dvc.lock"] or parts[-1] == ".gitignore" or parts[0] in ("reports", "results", "runs")


def git_commit(root: Path = Path(".")) -> str:
    """The checked-out commit, with ``-dirty`` when code, params or other tracked inputs differ
    from it ('' outside git). Changes that the pipeline itself makes do not count."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return ""
    dirty = [line[3:] for line in status if not _is_pipeline_output(line[3:].split(" -> ")[-1])]
    return commit + ("-dirty" if dirty else "")


def git_origin(root: Path = Path(".")) -> str:
    """The URL of the ``origin`` remote ('' when there is none or outside git)."""
    try:
        return subprocess.run(["git", "remote", "get-url", "origin"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def entry_point(argv: list[str] | None = None) -> str:
    """The command that made a run: the ``roar`` subcommand (``chain``, ``report``, ...), else the program."""
    argv = sys.argv if argv is None else argv
    program = Path(argv[0]).name if argv else ""
    if program == "roar" and len(argv) > 1:
        return argv[1]
    return program or "python"


def source_tags(commit: str, root: Path = Path(".")) -> dict[str, str]:
    """MLflow's standard source tags of a run made in the workspace ``root`` at ``commit`` (``-dirty`` allowed):
    the UI shows ``<source name>:<entry point>`` and the commit in its Source column and run page."""
    origin = git_origin(root)
    tags = {"mlflow.source.type": "PROJECT", "mlflow.source.name": origin or str(root.resolve()),
            "mlflow.project.entryPoint": entry_point()}
    if commit:
        tags["mlflow.source.git.commit"] = commit.removesuffix("-dirty")
    if origin:
        tags["mlflow.source.git.repoURL"] = origin
    return tags


def runs_page_url(experiment_id: str, base: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI page listing an experiment's runs. ``workflowType=machine_learning`` makes MLflow 3.17's
    UI open its model-training views (its default, kept per browser, is the GenAI overview)."""
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def experiment_note(experiment_id: str) -> str:
    """The experiment's description (the experiments list shows it): how to reach the runs in MLflow 3.17's UI,
    which opens an experiment on its GenAI overview whatever the experiment's kind tag says, until the
    GenAI / Model training switch (kept per browser) is set to Model training."""
    return (f"roar study: its runs are in the UI's Model training view (switch at the top left; MLflow keeps it "
            f"per browser), or open #/experiments/{experiment_id}/runs?workflowType=machine_learning "
            "(`roar mlflow-url` prints the full link)")


def study_runs_url(experiment: str, base: str = "http://127.0.0.1:5000", root: Path = Path(".")) -> str:
    """:func:`runs_page_url` of the experiment named ``experiment`` in this workspace's tracking store."""
    from mlflow.tracking import MlflowClient

    from roar.core.errors import RoarError

    uri = tracking_uri(root)
    check_server(uri)
    found = MlflowClient(uri).get_experiment_by_name(experiment)
    if found is None:
        raise RoarError(f"no MLflow experiment {experiment!r} in {uri}; run the study first (`make run` or "
                        "`roar pipeline`)")
    return runs_page_url(found.experiment_id, base)


class Tracker:
    """Thin layer over ``MlflowClient`` for runs with explicit parents and roar tags."""

    def __init__(self, experiment: str, root: Path = Path(".")):
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        self.root = root
        self.uri = tracking_uri(root)
        check_server(self.uri)
        self.client = MlflowClient(self.uri)
        self.commit = git_commit(root)
        self.source = source_tags(self.commit, root)
        with _lock(root):
            self.experiment_id = self._experiment_id(experiment)
        self.study_run_id: str | None = None  # set by study_run()
        self.launch_run = self._launch_run()
        self._launch_nested = False
        self.end_orphans()

    def _experiment_id(self, name: str) -> str:
        """Find or create the experiment ``name``. Workspaces on other machines may share a tracking
        server, so another process may create it first: then that one is used."""
        from mlflow.exceptions import MlflowException

        found = self.client.get_experiment_by_name(name)
        if found:
            if EXPERIMENT_KIND_TAG not in found.tags:  # an experiment made by an older roar or by hand
                self.client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            if NOTE_TAG not in found.tags:  # a description the user wrote stays
                self.client.set_experiment_tag(found.experiment_id, NOTE_TAG, experiment_note(found.experiment_id))
            return found.experiment_id
        from roar.config.layout import project_root

        location = (project_root(self.root) / "mlartifacts" / name).as_uri() if is_local_store(self.uri) else None
        try:
            experiment_id = self.client.create_experiment(name, artifact_location=location,
                                                          tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
        except MlflowException as error:
            if error.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.client.get_experiment_by_name(name).experiment_id
        self.client.set_experiment_tag(experiment_id, NOTE_TAG, experiment_note(experiment_id))
        return experiment_id

    def _launch_run(self) -> str | None:
        """The run that ``mlflow run`` made for the entry point that started this process (``MLFLOW_RUN_ID``),
        when it is in the study's experiment; roar's runs then nest under it. MLflow's UI nests runs only
        within one experiment, so a run elsewhere (``mlflow run`` without ``--experiment-name``) is named
        in one line and left alone."""
        run_id = os.environ.get("MLFLOW_RUN_ID")
        if not run_id:
            return None
        experiment = self.client.get_run(run_id).info.experiment_id
        if experiment != self.experiment_id:
            name = self.client.get_experiment(self.experiment_id).name
            print(f"[roar] MLFLOW_RUN_ID={run_id} is a run of experiment {experiment}, not of the study's "
                  f"experiment {name!r}; to nest the study's runs under it: mlflow run . --experiment-name {name} ...",
                  file=sys.stderr)
            return None
        return run_id

    def end_orphans(self) -> list[str]:
        """Mark KILLED every RUNNING run whose owning process (on this host) is gone: a stage or
        pipeline killed with SIGKILL cannot end its own runs, so the next process does."""
        from mlflow.entities import RunTag

        orphans = []
        for run in self.client.search_runs([self.experiment_id], "attributes.status = 'RUNNING'",
                                           max_results=50_000):
            identity = run.data.tags.get(PROCESS_TAG)
            if identity and process_alive(identity) is False:
                self.client.set_terminated(run.info.run_id, "KILLED")
                # log_batch: two stage processes may end the same orphan at once (see _nest_launch_run)
                self.client.log_batch(run.info.run_id, tags=[
                    RunTag("roar.ended_by", f"{process_identity()}: owner process gone")])
                orphans.append(run.info.run_id)
        return orphans

    def start(self, kind: str, name: str, parent: str | None, tags: dict, params: dict | None = None) -> str:
        """Create a running run of ``kind`` under ``parent``; returns its id."""
        if kind not in KINDS:
            raise ValueError(f"unknown run kind {kind!r}; allowed: {', '.join(KINDS)}")
        all_tags = {**self.source, "roar.kind": kind, "roar.git_commit": self.commit, "mlflow.runName": name,
                    PROCESS_TAG: process_identity(), **{k: str(v) for k, v in tags.items()}}
        if self.study_run_id and kind != "study":
            all_tags[STUDY_RUN_TAG] = self.study_run_id
        if parent and parent == self.study_run_id and self.launch_run:
            parent = self._nest_launch_run(parent)
        if parent:
            all_tags[PARENT_TAG] = parent
        run = self.client.create_run(self.experiment_id, tags=all_tags, run_name=name)
        if params:
            self.log_params(run.info.run_id, params)
        return run.info.run_id

    def _nest_launch_run(self, study_run: str) -> str:
        """Put the ``mlflow run`` entry point's run under the study run (once) and return it: the runs
        this process would hang under the study run go under it instead.

        Every stage process of the entry point does this, and parallel stages do it at the same instant:
        one ``log_batch`` of tags, which MLflow's SQL store retries when another process inserted the
        same tag first (``set_tag`` checks, then inserts, and fails on that race)."""
        from mlflow.entities import RunTag

        if not self._launch_nested:
            tags = {PARENT_TAG: study_run, STUDY_RUN_TAG: study_run, "roar.kind": LAUNCH_KIND,
                    "roar.git_commit": self.commit}
            self.client.log_batch(self.launch_run, tags=[RunTag(k, v) for k, v in tags.items()])
            self._launch_nested = True
        return self.launch_run

    def log_params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        self.client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in sorted(params.items())])

    def log_metrics(self, run_id: str, metrics: dict, step: int = 0) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()])

    def log_dataset(self, run_id: str, name: str, path: Path, digest: str, context: str) -> None:
        """Record a dataset folder as a run input (``mlflow.log_input``'s entity).

        MLflow's SQL store looks the dataset up, then inserts it: two stages that log one new dataset
        at once (the seeds' ``train_k0``) both insert, and the second breaks the store's unique
        (experiment, name, digest) key. The loser tries again and then finds the winner's row."""
        import time

        from mlflow.entities import Dataset, DatasetInput, InputTag
        from mlflow.exceptions import MlflowException

        dataset = Dataset(name=name, digest=digest[:36], source_type="local",
                          source=json.dumps({"uri": str(path)}))
        inputs = [DatasetInput(dataset, [InputTag("mlflow.data.context", context)])]
        for attempt in range(DATASET_ATTEMPTS):
            try:
                self.client.log_inputs(run_id, inputs)
                return
            except MlflowException as error:
                if attempt == DATASET_ATTEMPTS - 1 or not lost_insert_race(error):
                    raise
                time.sleep(0.05 * (attempt + 1))

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.client.set_tag(run_id, key, value)

    def log_chain_racu(self, per_seed) -> list[str]:
        """Each chain's per-seed RACU (rows of ``racu_seeds.csv``) as metrics of the chain's latest finished
        run in this study: ``racu`` and ``racu_unclipped`` for the retrained curve, ``racu_<curve>`` and
        ``racu_unclipped_<curve>`` (``k0_model``, ...) for the others. Returns the runs that got metrics."""
        import math

        runs = self.client.search_runs(
            [self.experiment_id], f"tags.`roar.kind` = 'chain' and tags.`{STUDY_RUN_TAG}` = '{self.study_run_id}' "
            "and attributes.status = 'FINISHED'", order_by=["attributes.start_time DESC"], max_results=50_000)
        latest: dict[tuple, str] = {}
        for run in runs:
            tags = run.data.tags
            key = tuple(tags.get(f"roar.{name}", "") for name in ("dataset", "model", "measure", "recursive", "seed"))
            latest.setdefault(key, run.info.run_id)
        metrics: dict[str, dict] = {}
        for row in per_seed.to_dict("records"):
            run_id = latest.get((row["dataset"], row["model"], row["measure"], str(row["recursive"]).lower(),
                                 str(row["seed"])))
            if run_id is None:
                continue
            suffix = "" if row["curve"] == "retrained" else "_" + row["curve"].replace("-", "_")
            for name in ("racu", "racu_unclipped"):
                if not math.isnan(row[name]):
                    metrics.setdefault(run_id, {})[name + suffix] = row[name]
        for run_id, values in metrics.items():
            self.log_metrics(run_id, values)
        return sorted(metrics)

    def end(self, run_id: str, failed: bool = False, status: str | None = None) -> None:
        self.client.set_terminated(run_id, status or ("FAILED" if failed else "FINISHED"))

    @contextmanager
    def run(self, kind: str, name: str, parent: str | None, tags: dict, params: dict | None = None):
        """A run that ends FINISHED, or FAILED if the block raises (KILLED if it was interrupted on purpose:
        :class:`~roar.tracking.protocol.RunInterrupted`)."""
        run_id = self.start(kind, name, parent, tags, params)
        try:
            yield run_id
        except BaseException as error:
            self.end(run_id, status=ended_status(error))
            raise
        self.end(run_id)

    def study_run(self, study_name: str, study_key: str, params: dict, owned: bool = False) -> str:
        """The study run of this grid, commit and workspace: ``ROAR_STUDY_RUN_ID``, else found or created once.

        ``owned``: the caller (``roar pipeline``) keeps the run RUNNING while it works and ends it;
        a study run that a single stage creates (plain ``dvc repro``) only groups the stages' runs
        and ends FINISHED at once (no process outlives it to end it later).
        """
        self.study_run_id = self._study_run(study_name, study_key, params, owned)
        return self.study_run_id

    def _study_run(self, study_name: str, study_key: str, params: dict, owned: bool) -> str:
        if os.environ.get("ROAR_STUDY_RUN_ID") and not owned:
            return os.environ["ROAR_STUDY_RUN_ID"]
        # one study run per workspace: teammates' clones that share a tracking server do not merge
        workspace = str(self.root.resolve()).replace("'", "")
        with _lock(self.root):
            runs = self.client.search_runs(
                [self.experiment_id],
                f"tags.`roar.kind` = 'study' and tags.`roar.study_key` = '{study_key}' "
                f"and tags.`roar.git_commit` = '{self.commit}' and tags.`roar.workspace` = '{workspace}'",
                max_results=1)
            if runs:
                run_id = runs[0].info.run_id
                if owned:  # reopened by this pipeline run
                    self.client.update_run(run_id, status="RUNNING")
                    self.client.set_tag(run_id, PROCESS_TAG, process_identity())
                return run_id
            run_id = self.start("study", study_name, None, {"roar.study_key": study_key, "roar.workspace": workspace},
                                params)
            if not owned:
                self.end(run_id)
        return run_id


def log_report(params: dict, reports: Path, racu, root: Path = Path(".")) -> str:
    """A ``report`` run under the study run: RACU values as metrics, tables and figures as artifacts; each
    chain run of the study gets its per-seed RACU (``reports/racu_seeds.csv``) as metrics."""
    import pandas as pd

    tracker, study_run, name = _study_tracker(params, root)
    with tracker.run("report", "report", study_run, {"roar.study": name}) as run_id:
        metrics, intervals = {}, {}
        for _, row in racu.iterrows():
            chain = f"{row['dataset']}.{row['model']}.{'recursive' if row['recursive'] else 'roar'}.{row['measure']}"
            for stat in ("racu_mean", "racu_low", "racu_high"):
                if pd.notna(row[stat]):  # no interval from a single seed
                    metrics[f"{stat}.{chain}"] = row[stat]
            intervals[f"interval.{chain}"] = f"{row.get('interval', '')} (n_seeds={row['n_seeds']})"
        tracker.log_metrics(run_id, metrics)
        tracker.log_params(run_id, intervals)
        _log_report_files(tracker, run_id, reports)
        if (reports / "racu_seeds.csv").is_file():
            tracker.log_chain_racu(pd.read_csv(reports / "racu_seeds.csv"))
    return run_id


def refresh_report(params: dict, reports: Path, racu, root: Path = Path(".")) -> str:
    """Log the report's files again to the study run's latest ``report`` run (a new run if it has none).

    ``roar pipeline`` rewrites the report files made from the run facts (``README.md``, ``compute.csv``,
    ``machines.csv``) after its report stage logged them: MLflow keeps what is on disk only if they are
    logged again (same artifact names, so they replace the earlier ones). The RACU, and so the run's
    metrics and params, are those the stage logged."""
    tracker, study_run, _ = _study_tracker(params, root)
    runs = tracker.client.search_runs(
        [tracker.experiment_id], f"tags.`roar.kind` = 'report' and tags.`mlflow.parentRunId` = '{study_run}'",
        order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        return log_report(params, reports, racu, root)
    _log_report_files(tracker, runs[0].info.run_id, reports)
    return runs[0].info.run_id


def _study_tracker(params: dict, root: Path) -> tuple["Tracker", str, str]:
    """The tracker, the study run and the study's name."""
    from roar.config.params import study_from_params
    from roar.tracking.protocol import open_study_run

    name = study_from_params(params).name
    tracker = Tracker(name, root)
    return tracker, open_study_run(tracker, params), name


def _log_report_files(tracker: "Tracker", run_id: str, reports: Path) -> None:
    """The report's top-level files and figures/ (not DVC's ``.gitignore``, written there after the stage)."""
    for path in sorted(reports.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            tracker.client.log_artifact(run_id, str(path))
    if (reports / "figures").is_dir():
        tracker.client.log_artifacts(run_id, str(reports / "figures"), "figures")


@contextmanager
def _lock(root: Path):
    """Serialise find-or-create across the parallel stage processes of one workspace."""
    path = root / ".roar.lock"
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
