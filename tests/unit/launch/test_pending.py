"""Which stages must run (roar.launch.pending), on real DVC projects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from roar.launch.pending import pending_stages


def _project(root: Path, dvc_yaml: str) -> dict:
    (root / "dvc.yaml").write_text(dvc_yaml)
    env = {**os.environ}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=root, check=True, env=env)
    return env


def test_pending_stages_are_the_changed_ones_and_everything_downstream(tmp_path: Path) -> None:
    """A real DVC project: a -> b@1, b@2 -> c; after a and b@1 ran, a change to b@1's command
    leaves b@1 and c to run (b@2 is up to date), c after b@1 only."""
    env = _project(tmp_path, '''stages:
  a: {cmd: echo a > a.txt, outs: [a.txt]}
  b:
    foreach: [1, 2]
    do: {cmd: "cat a.txt > b${item}.txt", deps: [a.txt], outs: ["b${item}.txt"]}
  c: {cmd: cat b1.txt b2.txt > c.txt, deps: [b1.txt, b2.txt], outs: [c.txt]}
''')
    assert pending_stages(tmp_path) == {"a": [], "b@1": ["a"], "b@2": ["a"], "c": ["b@1", "b@2"]}
    subprocess.run(["dvc", "repro", "-q"], cwd=tmp_path, check=True, env=env)
    assert pending_stages(tmp_path) == {}
    (tmp_path / "dvc.yaml").write_text((tmp_path / "dvc.yaml").read_text().replace(
        'cmd: "cat a.txt > b${item}.txt"', 'cmd: "cat a.txt a.txt > b${item}.txt"'))
    assert pending_stages(tmp_path) == {"b@1": [], "b@2": [], "c": ["b@1", "b@2"]}
    subprocess.run(["dvc", "repro", "-q", "--single-item", "b@1"], cwd=tmp_path, check=True, env=env)
    assert pending_stages(tmp_path) == {"b@2": [], "c": ["b@2"]}


def test_a_stage_whose_only_change_is_its_missing_cache_is_done_unless_a_stage_to_run_needs_it(tmp_path: Path) -> None:
    """A new machine: dvc.lock and the uncached records (r*.txt, as the step records) but no DVC cache and no
    cached outputs (a.txt, b*.txt, as models). Nothing must run; once b@2's record is lost, b@2 runs and with it
    a, whose output b@2 reads, and c, which reads b@2's record; b@1 stays done."""
    env = _project(tmp_path, '''stages:
  a: {cmd: echo a > a.txt, outs: [a.txt]}
  b:
    foreach: [1, 2]
    do:
      cmd: "cat a.txt > b${item}.txt && echo ${item} > r${item}.txt"
      deps: [a.txt]
      outs: ["b${item}.txt", {"r${item}.txt": {cache: false}}]
  c: {cmd: cat r1.txt r2.txt > c.txt, deps: [r1.txt, r2.txt], outs: [{c.txt: {cache: false}}]}
''')
    subprocess.run(["dvc", "repro", "-q"], cwd=tmp_path, check=True, env=env)
    shutil.rmtree(tmp_path / ".dvc" / "cache")
    for name in ("a.txt", "b1.txt", "b2.txt"):
        (tmp_path / name).unlink()
    assert pending_stages(tmp_path) == {}
    (tmp_path / "r2.txt").unlink()
    assert pending_stages(tmp_path) == {"a": [], "b@2": ["a"], "c": ["b@2"]}


def test_an_rwlock_left_unreadable_by_a_killed_dvc_process_is_removed_and_a_readable_one_kept(tmp_path: Path) -> None:
    """A DVC process killed while rewriting ``.dvc/tmp/rwlock`` (a Slurm job at its time limit, CI of stop 29) leaves
    it empty, and every DVC command after it failed with RWLockFileCorruptedError. pending_stages removes that file,
    says so in one line, and answers; a readable one (another study's live lock entries) is left as it was."""
    env = _project(tmp_path, "stages:\n  a: {cmd: echo a > a.txt, outs: [a.txt]}\n")
    rwlock = tmp_path / ".dvc" / "tmp" / "rwlock"
    rwlock.parent.mkdir(parents=True, exist_ok=True)
    rwlock.write_text("")
    said: list[str] = []
    assert pending_stages(tmp_path, log=said.append) == {"a": []}
    json.loads(rwlock.read_text())  # rebuilt by DVC's status, readable
    assert len(said) == 1 and "removed .dvc/tmp/rwlock" in said[0] and "killed" in said[0], said
    subprocess.run(["dvc", "repro", "-q"], cwd=tmp_path, check=True, env=env)  # DVC runs again after it
    live = '{"write": {"/elsewhere/out": {"pid": 1, "cmd": "dvc repro"}}}'
    rwlock.write_text(live)
    said.clear()
    assert pending_stages(tmp_path, log=said.append) == {}
    assert rwlock.read_text() == live and said == []
