"""roar pipeline's progress: stages done of all, the running ones, time left, the summary by kind; its stages' stop
on a signal."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from roar.launch.local import Progress, StageProcesses, process_tree, wait_for_processes

REPO = Path(__file__).resolve().parents[3]

STAGES = ["prepare@a", "train_k0@a-0", "train_k0@a-1", "recursive@a-x-0", "recursive@a-x-1", "recursive@a-y-0"]


def test_time_left_is_the_mean_of_finished_stages_of_the_kind_over_the_workers() -> None:
    progress = Progress(STAGES, jobs=2)
    assert progress.seconds_left() is None
    progress.started("prepare@a")
    progress.finished("prepare@a", 10.0)
    # nothing of the other kinds has finished: every stage left is expected to take the overall mean, 10 s
    assert progress.seconds_left() == 5 * 10.0 / 2
    for stage, seconds in (("train_k0@a-0", 30.0), ("recursive@a-x-0", 100.0)):
        progress.started(stage)
        progress.finished(stage, seconds)
    # left: train_k0@a-1 (30 s, mean of its kind), recursive@a-x-1 and @a-y-0 (100 s each)
    assert progress.seconds_left() == (30 + 100 + 100) / 2


def test_line_names_the_running_stages_and_the_time_left() -> None:
    progress = Progress(STAGES, jobs=2)
    progress.started("prepare@a")
    progress.started("train_k0@a-0")
    progress.finished("prepare@a", 12.34)
    assert progress.line("prepare@a", True, 12.34) == (
        "[1/6] prepare@a: ok in 12.3 s; running: train_k0@a-0; ~31 s left")
    progress.finished("train_k0@a-0", 600.0)
    assert progress.line("train_k0@a-0", False, 600.0).startswith("[2/6] train_k0@a-0: FAILED in 600.0 s; ~")
    assert progress.line("train_k0@a-0", False, 600.0).endswith(" min left")


def test_summary_by_kind() -> None:
    progress = Progress(STAGES, jobs=2)
    for stage, seconds in zip(STAGES, (1.0, 20.0, 40.0, 100.0, 300.0, 200.0)):
        progress.finished(stage, seconds)
    lines = progress.summary().splitlines()
    assert lines[0].split() == ["stage", "kind", "stages", "total", "s", "mean", "s", "max", "s"]
    assert lines[1].split() == ["prepare", "1", "1.0", "1.0", "1.0"]
    assert lines[2].split() == ["train_k0", "2", "60.0", "30.0", "40.0"]
    assert lines[3].split() == ["recursive", "3", "600.0", "200.0", "300.0"]
    assert progress.line("recursive@a-y-0", True, 200.0) == "[6/6] recursive@a-y-0: ok in 200.0 s"


def test_local_pipeline_spawns_dvc_with_the_tool_env(monkeypatch, tmp_path):
    """The stage list (the first dvc roar runs) finds dvc with the virtualenv off PATH."""
    from roar.launch.local import stage_names

    shutil.copy(REPO / "dvc.yaml", tmp_path)
    shutil.copy(REPO / "params.yaml", tmp_path)
    shutil.copy(REPO / "provenance.yaml", tmp_path)
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert "report" in stage_names(tmp_path)


def test_a_study_run_in_pieces_starts_whole_seeds_with_their_random_baseline_first() -> None:
    """Under a time budget the stages of seed 0 come before seed 1's, and within a seed the random chains
    (the RACU baseline) before the costliest (integrated gradients); without one, the costliest first."""
    from roar.launch.local import _cost_rank, piece_rank

    stages = [f"{kind}@babi-1-bilstm-attention-{measure}-{seed}" for seed in (1, 0)
              for kind, measure in (("recursive", "integrated-gradient"), ("roar", "random"),
                                    ("recursive", "attention"), ("recursive", "random"))]
    assert sorted(stages, key=piece_rank) == [
        "recursive@babi-1-bilstm-attention-random-0", "roar@babi-1-bilstm-attention-random-0",
        "recursive@babi-1-bilstm-attention-integrated-gradient-0", "recursive@babi-1-bilstm-attention-attention-0",
        "recursive@babi-1-bilstm-attention-random-1", "roar@babi-1-bilstm-attention-random-1",
        "recursive@babi-1-bilstm-attention-integrated-gradient-1", "recursive@babi-1-bilstm-attention-attention-1"]
    assert sorted(stages, key=_cost_rank)[:2] == ["recursive@babi-1-bilstm-attention-integrated-gradient-0",
                                                  "recursive@babi-1-bilstm-attention-integrated-gradient-1"]


def test_a_stopped_stage_of_a_study_folder_gets_its_cached_outputs_ignored_there(tmp_path: Path, monkeypatch) -> None:
    """The .gitignore entries go beside the study folder's outputs, not those of the same stage name in the
    project root's dvc.yaml (the default study has stages of the same names); uncached outputs stay tracked."""
    import subprocess

    from roar.core.tools import tool_env
    from roar.launch.local import ignore_cached_outputs

    stage = ("stages:\n  chain:\n    cmd: 'true'\n    outs:\n      - models/s0:\n          persist: true\n"
             "      - results/s0:\n          persist: true\n          cache: false\n")
    study = tmp_path / "studies" / "one"
    for folder in (tmp_path, study):
        (folder / "models" / "s0").mkdir(parents=True)
        (folder / "dvc.yaml").write_text(stage)
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        subprocess.run(command, cwd=tmp_path, check=True, env=tool_env())
    monkeypatch.chdir(tmp_path)  # as `roar pipeline --study one` runs: from the project root
    ignore_cached_outputs(study, "chain")
    assert (study / "models" / ".gitignore").read_text().splitlines() == ["/s0"]
    assert not (tmp_path / "models" / ".gitignore").exists()
    assert not (study / "results" / ".gitignore").exists()


STAGE = """
import os, signal, subprocess, sys, time
from pathlib import Path
# like `dvc repro`: ignores SIGINT while its command runs, and waits for it
signal.signal(signal.SIGINT, signal.SIG_IGN)
command = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
from pathlib import Path
def stop(signum, frame):
    time.sleep(0.5)  # ends its runs, then exits "more to do"
    Path("stopped").write_text(signal.Signals(signum).name)
    sys.exit(75)
signal.signal(signal.SIGINT, stop)
Path("ready").write_text("")
time.sleep(60)
'''], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
sys.exit(command.wait())
"""


def test_a_stop_reaches_each_stage_as_sigint_and_starts_no_more(tmp_path: Path) -> None:
    """SIGTERM to the pipeline: its stages' process trees get SIGINT, which DVC ignores and its command answers by
    stopping cleanly (exit 75); later stages do not start."""
    processes = StageProcesses()
    result: dict[str, subprocess.CompletedProcess | None] = {}
    worker = threading.Thread(target=lambda: result.update(
        chain=processes.run([sys.executable, "-c", STAGE], tmp_path, dict(os.environ), "chain")))
    worker.start()
    for _ in range(200):
        if (tmp_path / "ready").exists():
            break
        time.sleep(0.05)
    assert not processes.stopping
    processes.stop(signal.SIGTERM)
    worker.join(timeout=30)
    assert result["chain"].returncode == 75 and (tmp_path / "stopped").read_text() == "SIGINT"
    assert processes.signal_name == "SIGTERM"
    assert processes.run([sys.executable, "-c", "open('started', 'w')"], tmp_path, dict(os.environ), "next") is None
    assert not (tmp_path / "started").exists()
    processes.stop(signal.SIGINT)  # a second signal only says so
    assert processes.signal_name == "SIGTERM"


def test_a_stage_runs_in_the_pipelines_process_group(tmp_path: Path) -> None:
    """Whatever ends the pipeline's whole group (Ctrl-C, a hang-up, kill -9 of the group) must end its stages too."""
    processes = StageProcesses()
    done = processes.run([sys.executable, "-c", "import os; print(os.getpgrp())"], tmp_path, dict(os.environ), "s")
    assert int(done.stdout) == os.getpgrp()


def test_a_stopped_stage_ends_when_its_whole_tree_ended(tmp_path: Path) -> None:
    """A stage whose DVC died of the signal (sent to every process) leaves its command unwinding its runs: the
    pipeline waits for the stage's whole tree, as it was when stopped, before it counts the stage as stopped."""
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, "
                               "'-c', 'import time; time.sleep(1.5)']); time.sleep(60)"])
    for _ in range(100):
        tree = process_tree(parent.pid)
        if len(tree) == 2:
            break
        time.sleep(0.05)
    assert len(tree) == 2
    parent.kill()  # the child lives on, reparented
    started = time.monotonic()
    wait_for_processes(tree)
    assert time.monotonic() - started >= 0.5
    assert not tree[1].is_running() or tree[1].status() == psutil.STATUS_ZOMBIE  # ended; a zombie until reaped
    stuck = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                              "signal.SIG_IGN); time.sleep(60)"])
    wait_for_processes(process_tree(stuck.pid), timeout=0.5)
    assert stuck.wait(timeout=10) == -signal.SIGKILL
