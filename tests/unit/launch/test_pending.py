"""Which stages must run (roar.launch.pending), on real DVC projects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from roar.launch.local import _output_files, refuse_unreproduced
from roar.launch.pending import Unreproduced, pending_stages, unreproduced


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


def _entry(cmd: str, deps: dict, outs: dict, params: dict | None = None) -> dict:
    entry = {"cmd": cmd, "deps": [{"path": p, "md5": h} for p, h in deps.items()],
             "outs": [{"path": p, "md5": h} for p, h in outs.items()]}
    return entry | ({"params": params} if params else {})


def test_unreproduced_is_a_stage_remade_with_its_locked_inputs_whose_outputs_moved() -> None:
    before = {"stages": {
        "k0@0": _entry("train 0", {"data": "d1"}, {"models/k0/s0": "m0"}, {"p.yaml": {"lr": 1}}),
        "k0@1": _entry("train 1", {"data": "d1"}, {"models/k0/s1": "m1"}, {"p.yaml": {"lr": 1}}),
        "k0@2": _entry("train 2", {"data": "d1"}, {"models/k0/s2": "m2"}, {"p.yaml": {"lr": 1}}),
        "chain@0": _entry("chain 0", {"models/k0/s0/model.safetensors": "w", "data": "d1"}, {"results/s0": "r"}),
        "chain@1": _entry("chain 1", {"models/k0/s1": "m1"}, {"results/s1": "r1"}),
        "report": _entry("report", {"models": "all", "results": "r"}, {"reports": "t"})}}
    after = {"stages": dict(before["stages"])}
    after["stages"]["k0@0"] = _entry("train 0", {"data": "d1"}, {"models/k0/s0": "OTHER"}, {"p.yaml": {"lr": 1}})
    after["stages"]["k0@1"] = _entry("train 1", {"data": "d1"}, {"models/k0/s1": "m1"}, {"p.yaml": {"lr": 1}})
    after["stages"]["k0@2"] = _entry("train 2", {"data": "d1"}, {"models/k0/s2": "NEW"}, {"p.yaml": {"lr": 2}})
    after["stages"]["k0@3"] = _entry("train 3", {"data": "d1"}, {"models/k0/s3": "m3"})
    found = unreproduced(before, after, ["k0@0", "k0@1", "k0@2", "k0@3"])
    # s0: same inputs, other bytes, read by chain@0 (a file inside the folder) and by the report, which does not
    # count (remade at every call); s1 reproduced; s2's params changed (its model may move); s3 never ran before
    assert found == [Unreproduced("k0@0", ("models/k0/s0",), ("chain@0",))]
    assert unreproduced({}, after, ["k0@0"]) == []


class _Tracker:
    def __init__(self) -> None:
        self.ended: list[tuple[str, bool]] = []

    def end(self, run: str, failed: bool = False) -> None:
        self.ended.append((run, failed))


def test_a_stage_remade_into_other_bytes_stops_the_pipeline_and_leaves_the_workspace_as_committed(tmp_path: Path) -> None:
    """A real DVC project whose stages a and c write other bytes at every run (as a model trained on another kind
    of CPU), each with its record (uncached, as git carries it). Remade after the loss of the cache, a is refused
    with what reads it (b): dvc.lock goes back to the committed one, a's output is removed and its record put back.
    c, which nothing reads (a seed with no finished chain), is kept with its new bytes."""
    env = _project(tmp_path, '''stages:
  a: {cmd: "head -c 8 /dev/urandom > a.bin && md5sum a.bin > ra.txt", outs: [a.bin, {ra.txt: {cache: false}}]}
  b: {cmd: "cat a.bin > b.bin && echo 1 > r.txt", deps: [a.bin], outs: [b.bin, {r.txt: {cache: false}}]}
  c: {cmd: "head -c 8 /dev/urandom > c.bin", outs: [c.bin]}
''')
    subprocess.run(["dvc", "repro", "-q"], cwd=tmp_path, check=True, env=env)
    committed = (tmp_path / "dvc.lock").read_text()
    record = (tmp_path / "ra.txt").read_bytes()
    shutil.rmtree(tmp_path / ".dvc" / "cache")
    (tmp_path / "a.bin").unlink()
    (tmp_path / "c.bin").unlink()
    before = _output_files(tmp_path, committed, ["c"])
    assert _output_files(tmp_path, committed, ["a"]) == {"ra.txt": record}
    subprocess.run(["dvc", "repro", "-q", "--single-item", "--no-run-cache", "c"], cwd=tmp_path, check=True, env=env)
    said: list[str] = []
    refuse_unreproduced(tmp_path, committed, ["c"], before, _Tracker(), "study-run", said.append)
    assert said == ["[roar] c wrote other bytes than dvc.lock held (c.bin; another kind of CPU); no finished stage "
                    "reads them: kept"]
    committed = (tmp_path / "dvc.lock").read_text()  # c's new bytes locked
    before = _output_files(tmp_path, committed, ["a"])
    subprocess.run(["dvc", "repro", "-q", "--single-item", "--no-run-cache", "a"], cwd=tmp_path, check=True, env=env)
    assert (tmp_path / "dvc.lock").read_text() != committed and (tmp_path / "ra.txt").read_bytes() != record
    tracker = _Tracker()
    with pytest.raises(RuntimeError, match=r"a: a\.bin, ra\.txt differ; 1 finished stage\(s\) read them"):
        refuse_unreproduced(tmp_path, committed, ["a"], before, tracker, "study-run")
    assert (tmp_path / "dvc.lock").read_text() == committed
    assert not (tmp_path / "a.bin").exists() and (tmp_path / "ra.txt").read_bytes() == record
    assert tracker.ended == [("study-run", True)]
    assert pending_stages(tmp_path) == {}  # as before the call: b is done by its record
