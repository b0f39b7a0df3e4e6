"""Run a whole study: DVC stages in dependency waves, independent chains in parallel.

Each wave runs ``dvc repro --single-item <stage>`` (earlier waves made its inputs) for its stages on a pool of ``jobs``
workers (DVC releases its repository lock while a stage's command runs, so independent stages
of one workspace run side by side). All stages share one MLflow study run, passed down through
``ROAR_STUDY_RUN_ID``. A final plain ``dvc repro`` runs whatever is left (the report) and
proves the pipeline complete.

:func:`submit_pipeline` is the Slurm executor's entry (one job per stage that is not done, see
:mod:`roar.launch.slurm`); :func:`finish_pipeline` is its last job.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from threading import Lock
from typing import Protocol

import psutil

from roar.config.catalog import MEASURE_SPECS
from roar.config.layout import stage_kind
from roar.core.tools import tool_env
from roar.launch.pending import pending_stages
from roar.launch.shared_trainings import share_finished_trainings
from roar.pipeline.deadline import CHAIN_STAGE_KINDS, EXIT_MORE_TO_DO, STOPPED_IN_DVC, on_stop_signals

# The all-masked models are only needed by the report, so they fill the chains' wave.
WAVES = (("prepare",), ("train_k0",), ("recursive", "roar", "train_all_masked"), ("report",))
# The study run's tag naming the folder it ran in (``.`` or ``studies/<name>``; see roar.launch.studies).
STUDY_FOLDER_TAG = "roar.study_folder"


class StartGate(Protocol):
    """Decides whether a stage may start and when a chain stage stops between steps
    (:class:`roar.launch.budget.TimeBudget`), and hears how long each took."""

    def admits(self, stage: str) -> bool: ...

    def stage_env(self, stage: str) -> dict[str, str]: ...

    def finished(self, stage: str, seconds: float) -> None: ...

    def stopped_at_deadline(self, stage: str, seconds: float) -> None: ...


class StoppedEarly(Exception):
    """The pipeline stopped with ``refused`` stages not started or stopped before their end: its gate refused them
    (the partial report is written), or a signal stopped it (``signal_name``: no report, the next call writes
    it). Finished work is kept."""

    def __init__(self, refused: list[str], signal_name: str | None = None):
        super().__init__(f"{len(refused)} stage(s) not done")
        self.refused, self.signal_name = refused, signal_name


class StageProcesses:
    """The ``dvc repro`` processes running now and the signal that stops them.

    SIGTERM or SIGINT to ``roar pipeline`` alone (a shutdown, Slurm, ``kill``) would otherwise end it and leave its
    stages running on. Instead it starts no more stages and sends SIGINT to each stage's process tree: DVC ignores
    SIGINT while its stage command runs, the command stops cleanly (its runs KILLED, exit 75,
    :mod:`roar.pipeline.deadline`) and DVC reports it. The stages stay in the pipeline's process group, so that
    whatever ends the whole group (Ctrl-C, a hang-up, ``kill -9 -<pgid>``) ends them with it and leaves none behind.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._running: dict[str, subprocess.Popen] = {}
        self._stopped: dict[str, list[psutil.Process]] = {}
        self._lock = threading.Lock()

    @property
    def stopping(self) -> bool:
        return self.signal_name is not None

    def run(self, args: list[str], root: Path, env: dict, stage: str) -> subprocess.CompletedProcess | None:
        """Run ``args`` for ``stage`` to its end, and when stopped until its whole tree ended; None when stopping."""
        with self._lock:
            if self.stopping:
                return None
            proc = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            self._running[stage] = proc
        try:
            out, err = proc.communicate()
        finally:
            with self._lock:
                del self._running[stage]
                stopped = self._stopped.pop(stage, [])
        if stopped:
            wait_for_processes(stopped)  # DVC killed first (a signal to every process) leaves its command ending
        return subprocess.CompletedProcess(args, proc.returncode, out, err)

    def stop(self, signum: int, frame: object = None) -> None:
        """The signal handler: stop every running stage (once; later signals only say so)."""
        if self.stopping:
            print(f"[roar] {signal.Signals(signum).name}: already stopping, waiting for the stages under way "
                  "(kill -9 ends them at once, leaving their runs to the next call)", file=sys.stderr, flush=True)
            return
        with self._lock:
            self.signal_name = signal.Signals(signum).name
            for stage, proc in self._running.items():
                self._stopped[stage] = process_tree(proc.pid)
            trees = list(self._stopped.values())
        print(f"[roar] {self.signal_name}: stopping the {len(trees)} stage(s) under way; their finished steps "
              "are kept", file=sys.stderr, flush=True)
        for tree in trees:
            for process in tree:
                try:
                    process.send_signal(signal.SIGINT)
                except psutil.NoSuchProcess:
                    pass

    @contextmanager
    def stopping_on_signals(self) -> Iterator[None]:
        """SIGTERM and SIGINT call :meth:`stop` inside (where Python allows handlers: the main thread)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        with on_stop_signals(self.stop):
            yield


def process_tree(pid: int) -> list[psutil.Process]:
    """Process ``pid`` and all its descendants (none when it already ended)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def wait_for_processes(processes: list[psutil.Process], timeout: float = 300.0) -> None:
    """Until each of ``processes`` ended (a zombie counts as ended: an orphan is reaped by whatever runs as PID 1,
    which in a container may never do it), at most ``timeout`` seconds; then SIGKILL what is left (the next call
    ends its runs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        processes = [p for p in processes if _running(p)]
        if not processes:
            return
        time.sleep(0.2)
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cost_rank(stage: str) -> tuple[int, str]:
    """Within a wave, costlier stages start first (the measures' ``cost_rank``) so that the pool does
    not end on one long chain; stages of no measure last."""
    by_cost = sorted(MEASURE_SPECS.values(), key=lambda m: m.cost_rank)
    for measure in by_cost:
        if f"-{measure.name}-" in stage:
            return measure.cost_rank, stage
    return by_cost[-1].cost_rank + 1, stage


def piece_rank(stage: str) -> tuple[int, int, tuple[int, str]]:
    """The start order under a time budget (a study run in pieces): whole seeds first and, within a seed, its
    random chains (every measure's RACU baseline) before the costliest. A stop then leaves seeds that the
    partial report can score, not the costliest measure of every seed and no baseline to score it against."""
    seed = stage.rpartition("-")[2]
    return (int(seed) if seed.isdigit() else -1, 0 if "-random-" in stage else 1, _cost_rank(stage))


def stage_names(root: Path) -> list[str]:
    out = subprocess.run(["dvc", "stage", "list", "--name-only"], cwd=root, env=tool_env(), capture_output=True,
                         text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def _repro(root: Path, env: dict, stage: str, started: Callable[[str], None], gate: StartGate | None,
           processes: StageProcesses) -> tuple[str, int | None, float, str]:
    """``dvc repro`` of one stage: (stage, exit status, seconds, output tail); status None when ``gate`` refused it
    or ``processes`` is stopping, ``EXIT_MORE_TO_DO`` when its command stopped with work left (at the gate's
    deadline or on a signal; DVC itself exits 255)."""
    if processes.stopping or (gate is not None and not gate.admits(stage)):
        return stage, None, 0.0, ""
    started(stage)
    start = time.perf_counter()
    proc = processes.run(["dvc", "--wait-for-lock", "repro", "--single-item", stage], root,
                         env | (gate.stage_env(stage) if gate is not None else {}), stage)
    if proc is None:
        return stage, None, 0.0, ""
    output = proc.stdout[-2000:] + proc.stderr[-4000:]
    code = EXIT_MORE_TO_DO if proc.returncode and STOPPED_IN_DVC.search(output) else proc.returncode
    return stage, code, time.perf_counter() - start, output


class Progress:
    """Stages done of all, the running ones, and an estimate of the time left: each stage not yet
    finished is expected to take the mean time of the finished stages of its kind (of all finished
    stages when none of its kind has finished), spread over ``jobs`` workers."""

    def __init__(self, stages: list[str], jobs: int):
        self.stages, self.jobs = stages, jobs
        self.running: list[str] = []
        self.seconds: dict[str, float] = {}
        self._lock = Lock()

    def started(self, stage: str) -> None:
        with self._lock:
            self.running.append(stage)

    def finished(self, stage: str, seconds: float | None) -> None:
        """``stage`` ended after ``seconds`` (None: it stopped with work left, so it says nothing of its kind's
        time)."""
        with self._lock:
            if stage in self.running:
                self.running.remove(stage)
            if seconds is not None:
                self.seconds[stage] = seconds

    def _by_kind(self) -> dict[str, list[float]]:
        """The seconds of the finished stages, by stage kind."""
        kinds: dict[str, list[float]] = {}
        for stage, seconds in self.seconds.items():
            kinds.setdefault(stage_kind(stage), []).append(seconds)
        return kinds

    def seconds_left(self) -> float | None:
        """None until a stage has finished."""
        if not self.seconds:
            return None
        by_kind = self._by_kind()
        overall = sum(self.seconds.values()) / len(self.seconds)
        left = [stage for stage in self.stages if stage not in self.seconds]
        total = sum((sum(v) / len(v)) if (v := by_kind.get(stage_kind(s))) else overall for s in left)
        return total / self.jobs

    def line(self, stage: str, ok: bool, seconds: float) -> str:
        """``[7/23] stage: ok in 12.3 s; running: a, b; ~4 min left``."""
        text = f"[{len(self.seconds)}/{len(self.stages)}] {stage}: {'ok' if ok else 'FAILED'} in {seconds:.1f} s"
        with self._lock:
            running = list(self.running)
        if running:
            text += f"; running: {', '.join(running)}"
        left = self.seconds_left()
        if left is not None and len(self.seconds) < len(self.stages):
            text += f"; ~{left / 60:.0f} min left" if left >= 90 else f"; ~{left:.0f} s left"
        return text

    def summary(self) -> str:
        """Seconds by stage kind: stages, total, mean, longest."""
        kinds = self._by_kind()
        lines = [f"{'stage kind':<18} {'stages':>6} {'total s':>9} {'mean s':>8} {'max s':>8}"]
        lines += [f"{kind:<18} {len(v):>6} {sum(v):>9.1f} {sum(v) / len(v):>8.1f} {max(v):>8.1f}"
                  for kind, v in kinds.items()]
        return "\n".join(lines)


@contextmanager
def workspace_lock(root: Path) -> Iterator[None]:
    """Hold the workspace's pipeline lock, or refuse at once when another ``roar pipeline`` holds it.

    An ``fcntl`` lock dies with its process, so a pipeline killed with SIGKILL leaves no stale lock.
    """
    path = root / ".roar.pipeline.lock"
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise RuntimeError(f"another `roar pipeline` (pid {holder}) is running in {root.resolve()}; "
                               "wait for it to finish or stop it, then run again (finished steps are kept)") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fh.truncate(0)
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_pipeline(root: Path = Path("."), jobs: int = 2, log=print, gate: StartGate | None = None,
                 remake_missing: bool = False) -> dict[str, float]:
    """Reproduce every stage that must run (:mod:`roar.launch.pending`; with ``remake_missing`` also those
    whose only change is cached outputs absent here); returns each stage's wall seconds and logs the call in
    ``runs/pipeline.jsonl`` (:mod:`roar.tracking.pipeline_log`), however it ends. Raises on the first
    failure, and at once when another pipeline runs in the same workspace. With a ``gate`` (a time budget), a
    stage starts only when it admits it; after a wave with a refused stage the pipeline writes the partial
    report, ends the study run and raises :class:`StoppedEarly` (a rerun resumes)."""
    from roar.tracking.pipeline_log import FAILED, FINISHED, STOPPED, PipelineCall, stopped_by
    from roar.tracking.mlflow_tracker import git_commit

    with workspace_lock(root):
        call, outcome = PipelineCall(root, jobs, git_commit(root)), FAILED
        try:
            timings = _run_pipeline(root, jobs, log, gate, remake_missing, call.stage_seconds)
            outcome = FINISHED
            return timings
        except StoppedEarly as stop:
            outcome = stopped_by(stop.signal_name) if stop.signal_name else STOPPED
            raise
        finally:
            if call.stage_seconds or outcome != FAILED:  # a call refused before any stage ran leaves no line
                call.end(outcome)


def _open_study_run(root: Path):
    """The tracker and the (re)opened, RUNNING study run of ``root``'s params and commit."""
    from roar.config.params import load_params, study_from_params
    from roar.tracking.protocol import open_study_run
    from roar.tracking.mlflow_tracker import NOTE_TAG, Tracker, experiment_note

    params = load_params(root / "params.yaml")
    tracker = Tracker(study_from_params(params).name, root)
    study_run = open_study_run(tracker, params, owned=True)
    tracker.set_tag(study_run, STUDY_FOLDER_TAG, study_folder(root))
    tracker.set_tag(study_run, NOTE_TAG, experiment_note(tracker.experiment_id))
    return params, tracker, study_run


def study_folder(root: Path) -> str:
    """``root`` relative to its project: ``.`` for the default study, ``studies/<name>`` for a study folder."""
    from roar.config.layout import project_root

    return Path(root).resolve().relative_to(project_root(root)).as_posix()


def push_study(root: Path, env: dict | None = None) -> int:
    """``dvc push`` of ``root``'s own ``dvc.yaml`` (a plain ``dvc push`` would push every study of the
    project, and fail on those whose outputs this workspace never made); returns the exit status."""
    return subprocess.run(["dvc", "push", "-q", "dvc.yaml"], cwd=root, env=tool_env(env)).returncode


def _run_pipeline(root: Path, jobs: int, log, gate: StartGate | None, remake_missing: bool,
                  stage_seconds: dict[str, float]) -> dict[str, float]:
    """The waves; ``stage_seconds`` gets each stage's wall seconds as it ends (the pipeline log keeps them
    when a later stage fails or the budget stops the call)."""
    env = tool_env()  # before the study run opens: refuses at once when dvc is nowhere
    _, tracker, study_run = _open_study_run(root)
    tracker.client.set_tag(study_run, "roar.executor", "local")
    env |= {"ROAR_STUDY_RUN_ID": study_run, "MLFLOW_TRACKING_URI": tracker.uri}
    names = stage_names(root)
    pending = pending_stages(root, remake_missing, log)
    if len(pending) < len(names):
        log(f"[roar] {len(names) - len(pending)} of {len(names)} stage(s) done: up to date, or with their records "
            "committed and their cached outputs not needed here (--remake-missing remakes those)")
    share_finished_trainings(root, pending, log)
    order = _cost_rank if gate is None else piece_rank
    waves = [sorted((n for n in names if stage_kind(n) in wave and n in pending), key=order) for wave in WAVES]
    progress = Progress([stage for wave in waves for stage in wave], jobs)
    processes = StageProcesses()
    with processes.stopping_on_signals():
        refused = _run_waves(root, env, jobs, log, gate, remake_missing, stage_seconds, waves, progress, processes,
                             tracker, study_run)
    log(progress.summary())
    if processes.stopping:
        tracker.set_tag(study_run, "roar.stopped_early", f"{processes.signal_name}: stages left; run again to resume")
        tracker.end(study_run, status="KILLED")
        raise StoppedEarly(refused, processes.signal_name)
    if refused:
        _stop_early(root, env, tracker, study_run, log)
        raise StoppedEarly(refused)
    timings = dict(progress.seconds)
    start = time.perf_counter()
    final = _final_repro(root, env)
    timings["final dvc repro"] = time.perf_counter() - start
    tracker.end(study_run, failed=final != 0)
    if final != 0:
        raise RuntimeError(f"the final `dvc repro` failed (exit {final}); see its output above")
    return timings


def _run_waves(root: Path, env: dict, jobs: int, log, gate: StartGate | None, remake_missing: bool,
               stage_seconds: dict[str, float], waves: list[list[str]], progress: Progress,
               processes: StageProcesses, tracker, study_run: str) -> list[str]:
    """Run the waves until one leaves stages not done (refused by the gate, stopped at its deadline or by a
    signal); returns those. Raises on the first failure."""
    lock = root / "dvc.lock"
    refused: list[str] = []
    for wave, stages in zip(WAVES, waves):
        if not stages:
            continue
        log(f"[roar] {len(stages)} stage(s): {', '.join(wave)} ({jobs} at a time)")
        checked = wave in (("prepare",), ("train_k0",)) and not remake_missing
        lock_before = lock.read_text() if checked and lock.is_file() else ""
        outputs_before = _output_files(root, lock_before, stages) if checked else {}
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(_repro, root, env, stage, progress.started, gate, processes) for stage in stages]
            for future in as_completed(futures):
                stage, code, seconds, output = future.result()
                if code is None:
                    refused.append(stage)
                    progress.finished(stage, None)
                    if not processes.stopping:
                        log(f"[roar]   {stage}: not started (it would not finish within the time budget)")
                    continue
                stage_seconds[stage] = seconds
                if code != 0 and processes.stopping:  # stopped by the signal, or killed with DVC by it
                    progress.finished(stage, None)
                    if stage_kind(stage) in CHAIN_STAGE_KINDS:
                        ignore_cached_outputs(root, stage)
                    refused.append(stage)
                    log(f"[roar]   {stage}: stopped by {processes.signal_name} after {seconds:.0f} s (its finished "
                        "steps are kept)")
                    continue
                if code == EXIT_MORE_TO_DO and gate is not None:
                    progress.finished(stage, None)
                    gate.stopped_at_deadline(stage, seconds)
                    ignore_cached_outputs(root, stage)
                    refused.append(stage)
                    log(f"[roar]   {stage}: stopped between steps after {seconds:.0f} s, its next step would not "
                        "finish within the time budget (its finished steps are kept)")
                    continue
                progress.finished(stage, seconds)
                if gate is not None:
                    gate.finished(stage, seconds)
                log(f"[roar]   {progress.line(stage, code == 0, seconds)}")
                if code != 0:
                    pool.shutdown(wait=True, cancel_futures=True)  # running stages end; queued ones never start
                    tracker.end(study_run, failed=True)
                    raise RuntimeError(f"stage {stage} failed:\n{output}")
        if checked:  # before a budget stop, too
            refuse_unreproduced(root, lock_before, [s for s in stages if s not in refused], outputs_before,
                                tracker, study_run, log)
        if refused:  # the next waves build on this one: stop here
            break
    return refused


def ignore_cached_outputs(root: Path, stage: str) -> None:
    """Write the ``.gitignore`` entries of ``stage``'s DVC-cached outputs (models, masked data), as DVC does when a
    stage completes: a chain stopped between steps leaves them on disk, and the study's folders are committed
    at every stop."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:  # the project's repository: name the study folder's dvc.yaml, not the cwd's
        for found in repo.stage.collect(f"{Path(root).resolve() / 'dvc.yaml'}:{stage}"):
            for out in found.outs:
                if out.use_cache:
                    out.ignore()


def _output_files(root: Path, lock_before: str, stages: list[str]) -> dict[str, bytes]:
    """The bytes of the locked outputs of ``stages`` that are files here now (the step records, which git
    carries), so that a refused remake can put them back."""
    import yaml

    entries = (yaml.safe_load(lock_before or "{}") or {}).get("stages") or {}
    paths = [out["path"] for stage in stages for out in (entries.get(stage) or {}).get("outs") or []]
    return {path: (root / path).read_bytes() for path in paths if (root / path).is_file()}


def refuse_unreproduced(root: Path, lock_before: str, stages: list[str], outputs_before: dict[str, bytes],
                        tracker, study_run: str, log=print) -> None:
    """Stop when a stage remade with its locked inputs wrote other bytes than ``dvc.lock`` holds (another kind
    of CPU) and finished stages read them: they would go stale and be recomputed. The lock is put back and the
    remade outputs removed or, where ``outputs_before`` holds their earlier bytes (the records), put back, so the
    workspace is as before the call. A remade output that no finished stage
    reads (a seed whose chains have not run) is kept, and said."""
    import shutil

    import yaml

    from roar.core.fileio import write_text_atomic
    from roar.launch.pending import unreproduced

    lock = root / "dvc.lock"
    if not stages or not lock_before or not lock.is_file():  # nothing ran, or nothing was locked before
        return
    found = unreproduced(yaml.safe_load(lock_before or "{}") or {}, yaml.safe_load(lock.read_text()) or {}, stages)
    refused = [item for item in found if item.dependents]
    if not refused:
        for item in found:
            log(f"[roar] {item.stage} wrote other bytes than dvc.lock held ({', '.join(item.outputs)}; another kind "
                "of CPU); no finished stage reads them: kept")
        return
    write_text_atomic(lock, lock_before)
    for out in {out for item in found for out in item.outputs}:
        path = root / out
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        if out in outputs_before:
            path.write_bytes(outputs_before[out])
    tracker.end(study_run, failed=True)
    lines = [f"  {item.stage}: {', '.join(item.outputs)} differ; {len(item.dependents)} finished stage(s) read them"
             for item in refused]
    raise RuntimeError(
        "stopped: remade with the code, params and inputs of dvc.lock, these stages wrote other bytes than it holds "
        "(float kernels differ across CPU types: docs/method.md, 'Byte-identical on one machine'):\n"
        + "\n".join(lines) + "\n"
        "dvc.lock and the records are put back as they were. To keep the finished stages, run this study where its committed outputs "
        "are (`dvc pull` from its DVC remote, or a machine of the CPU type named in runs/pipeline.jsonl); to "
        "recompute the whole study on this machine instead, run again with --remake-missing.")


def chain_steps_done(root: Path) -> bool:
    """Whether any chain step of the study at ``root`` has its record: a partial report has something to show."""
    return any((root / "results").rglob("k*.json"))


def _stop_early(root: Path, env: dict, tracker, study_run: str, log) -> None:
    """The partial report (the RACU of the seeds done; excluded.csv and the README name the chains and seeds
    still missing), then the study run ended FINISHED and tagged as stopped early."""
    code = 0
    if chain_steps_done(root):
        log("[roar] writing the partial report")
        code = subprocess.run(["dvc", "--wait-for-lock", "repro", "--single-item", "report"], cwd=root, env=env,
                              stdout=sys.stdout, stderr=sys.stderr).returncode
    else:
        log("[roar] no chain step has finished yet: no report")
    tracker.set_tag(study_run, "roar.stopped_early", "time budget: stages left; run again to resume")
    tracker.end(study_run, failed=code != 0)
    if code != 0:
        raise RuntimeError(f"the partial report failed (`dvc repro report`, exit {code}); see its output above")


def _final_repro(root: Path, env: dict) -> int:
    """A whole-pipeline ``dvc repro``: proves the pipeline complete (after the waves or the Slurm jobs it finds
    nothing to run). A stage whose only change is cached outputs absent here is done
    (:mod:`roar.launch.pending`): ``--allow-missing``."""
    return subprocess.run(["dvc", "--wait-for-lock", "repro", "--allow-missing"], cwd=root, env=env,
                          stdout=sys.stdout, stderr=sys.stderr).returncode


def submit_pipeline(root: Path = Path("."), push: bool = True, wait: bool = False, poll: float = 10.0,
                    log=print, remake_missing: bool = False):
    """Submit the stages that are not done as Slurm jobs (:mod:`roar.launch.slurm`); with ``wait``, poll
    until they finish and end the study run FAILED if any did not complete. Returns the submission."""
    from roar.launch import slurm
    from roar.tracking.mlflow_tracker import PROCESS_TAG

    slurm.check_cluster()
    with workspace_lock(root):
        slurm.check_no_live_jobs(root)
        params, tracker, study_run = _open_study_run(root)
        # The jobs, not this process, end the study run: no orphan check may end it when we exit.
        tracker.client.delete_tag(study_run, PROCESS_TAG)
        tracker.client.set_tag(study_run, "roar.executor", "slurm")
        try:
            submission = slurm.submit(root, (params.get("runtime") or {}).get("slurm"), study_run,
                                      slurm.study_env(study_run, tracker.uri), push, log, remake_missing)
        except BaseException:
            tracker.end(study_run, failed=True)
            raise
        if not submission.jobs:
            tracker.end(study_run)
            log("[roar] every stage is up to date; nothing submitted")
            return submission
    if wait:
        wait_for(root, submission, tracker, study_run, poll, log)
    return submission


def wait_for(root: Path, submission, tracker, study_run: str, poll: float, log) -> None:
    """Wait for a submission's jobs; the study run ends FAILED if one did not complete."""
    from roar.launch import slurm

    slurm.wait(submission, poll, log)
    if any(job.state != "COMPLETED" for job in submission.jobs):
        tracker.end(study_run, failed=True)


def finish_pipeline(root: Path, study_run_id: str, push: bool) -> None:
    """The last Slurm job: a final ``dvc repro`` (proves the study complete), the optional push,
    and the end of the study run."""
    from roar.config.params import load_params, study_from_params
    from roar.tracking.mlflow_tracker import Tracker

    tracker = Tracker(study_from_params(load_params(root / "params.yaml")).name, root)
    env = tool_env(ROAR_STUDY_RUN_ID=study_run_id, MLFLOW_TRACKING_URI=tracker.uri)
    code = _final_repro(root, env)
    if code == 0 and push:
        code = push_study(root, env)
    tracker.end(study_run_id, failed=code != 0)
    if code != 0:
        raise RuntimeError(f"the final `dvc repro`{' or `dvc push`' if push else ''} failed (exit {code})")


def result_outputs(root: Path) -> list[str]:
    """The ``results/`` outputs recorded in ``dvc.lock``: all that the report stage reads."""
    import yaml

    lock = yaml.safe_load((root / "dvc.lock").read_text())
    return sorted({out["path"] for stage in lock["stages"].values() for out in stage.get("outs", [])
                   if out["path"].startswith("results/")})


def reproduce_report(root: Path = Path("."), remote: str | None = None) -> None:
    """Re-run the report stage from this commit's per-point results.

    The step records travel with git; only those of commits from before they did (DVC-cached
    outputs then) and absent here are pulled. The CSV and Markdown tables are git-tracked DVC
    outputs, so ``git diff reports/`` afterwards shows any difference from what the commit recorded.
    """
    outputs = result_outputs(root)
    if not outputs:
        raise FileNotFoundError("dvc.lock records no results/ outputs; nothing to reproduce")
    env = tool_env()
    missing = [path for path in outputs if not (root / path).exists()]
    if missing:
        subprocess.run(["dvc", "pull", "-q", *(["-r", remote] if remote else []), *missing], cwd=root, env=env,
                       check=True)
    subprocess.run(["dvc", "repro", "--force", "--single-item", "report"], cwd=root, env=env, check=True)
