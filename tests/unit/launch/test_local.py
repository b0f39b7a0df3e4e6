"""roar pipeline's progress: stages done of all, the running ones, time left, the summary by kind."""

from __future__ import annotations

import shutil
from pathlib import Path

from roar.launch.local import Progress

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
