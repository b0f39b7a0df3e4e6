"""A training finished in one study folder is restored, not retrained, in another with the same stage inputs,
also on a fresh clone whose DVC run cache is empty (real git and DVC)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from roar.core.tools import tool_env
from roar.launch.shared_trainings import share_finished_trainings

# A training stage as a study's dvc.yaml writes it: a grid entry, its model and record uncached (they travel
# with git). Each real run appends a line to trainings.log, outside the outputs.
DVC_YAML = """
stages:
  train_k0:
    foreach: [0]
    do:
      cmd: python -c "import pathlib; pathlib.Path('models/k0/s${item}').mkdir(parents=True, exist_ok=True);
        pathlib.Path('models/k0/s${item}/model.txt').write_text(open('data.txt').read() + ' lr=${train.lr}');
        open('../../trainings.log', 'a').write('trained\\n')"
      deps: [data.txt]
      params: [train.lr]
      outs:
      - models/k0/s${item}:
          cache: false
"""


def sh(*args: str, cwd: Path) -> str:
    proc = subprocess.run(args, cwd=cwd, env=tool_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def project(tmp_path: Path, lr: dict[str, str]) -> dict[str, Path]:
    sh("git", "init", "-q", cwd=tmp_path)
    sh("dvc", "init", "-q", cwd=tmp_path)
    folders = {}
    for name, value in lr.items():
        folder = tmp_path / "studies" / name
        folder.mkdir(parents=True)
        (folder / "dvc.yaml").write_text(DVC_YAML)
        (folder / "params.yaml").write_text(f"train:\n  lr: {value}\n")
        (folder / "data.txt").write_text("questions")
        folders[name] = folder
    return folders


def test_a_finished_training_is_restored_in_another_study_on_a_fresh_clone(tmp_path: Path) -> None:
    folders = project(tmp_path, {"gold": "0.001", "predicted": "0.001", "other-lr": "0.01"})
    sh("dvc", "repro", cwd=folders["gold"])
    shutil.rmtree(tmp_path / ".dvc" / "cache", ignore_errors=True)  # a fresh clone: the gold study's outputs came through git
    log = tmp_path / "trainings.log"
    assert log.read_text().count("trained") == 1

    messages = []
    saved = share_finished_trainings(folders["predicted"], ["train_k0@0", "recursive@x-0"], messages.append)
    assert saved == ["studies/gold/dvc.yaml:train_k0@0"] and "run cache" in messages[0]
    assert "is cached - skipping run" in sh("dvc", "repro", cwd=folders["predicted"])
    assert log.read_text().count("trained") == 1  # restored, not trained
    model = "models/k0/s0/model.txt"
    assert (folders["predicted"] / model).read_text() == (folders["gold"] / model).read_text() == "questions lr=0.001"
    assert "up to date" in sh("dvc", "status", "dvc.yaml", cwd=folders["predicted"])

    # other params: DVC's key differs, so the stage trains
    share_finished_trainings(folders["other-lr"], ["train_k0@0"], messages.append)
    sh("dvc", "repro", cwd=folders["other-lr"])
    assert log.read_text().count("trained") == 2
    assert (folders["other-lr"] / model).read_text() == "questions lr=0.01"


def test_a_training_not_up_to_date_is_not_shared(tmp_path: Path) -> None:
    folders = project(tmp_path, {"gold": "0.001", "predicted": "0.001"})
    sh("dvc", "repro", cwd=folders["gold"])
    (folders["gold"] / "data.txt").write_text("other questions")  # its lock no longer holds what made the model
    assert share_finished_trainings(folders["predicted"], ["train_k0@0"], print) == []
    assert share_finished_trainings(folders["predicted"], ["recursive@x-0"], print) == []  # no training pending
