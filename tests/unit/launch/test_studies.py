"""Study folders: generated dvc.yaml files, names, resolution; the offline plots page."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from roar.cli import app
from roar.report.dvc_plots import offline_page, vega_libraries
from roar.core.errors import RoarError
from roar.config.layout import project_root
from roar.launch.studies import new_study, resolve_study, stale_studies, study_dvc_yaml, study_names, sync_studies
from roar.tracking.mlflow_tracker import tracking_uri

REPO = Path(__file__).resolve().parents[3]


def test_committed_study_folders_match_the_root_dvc_yaml() -> None:
    stale = [str(p.relative_to(REPO)) for p in stale_studies(REPO)]
    assert stale == [], f"run `roar study sync` and commit: {stale}"
    assert {"paper-babi-1", "rotten-tomatoes", "rotten-tomatoes-minilm"} <= set(study_names(REPO))


def test_study_dvc_yaml_moves_only_the_code_fingerprints_file() -> None:
    top = yaml.safe_load((REPO / "dvc.yaml").read_text())
    study = yaml.safe_load(study_dvc_yaml((REPO / "dvc.yaml").read_text()))
    assert study["plots"] == top["plots"] and set(study["stages"]) == set(top["stages"])
    for name, stage in top["stages"].items():
        moved = study["stages"][name]
        assert {k: v for k, v in moved.items() if k != "params"} == {k: v for k, v in stage.items() if k != "params"}
        expected = [{"../../provenance.yaml": item["provenance.yaml"]} if isinstance(item, dict) else item
                    for item in stage["params"]]
        assert moved["params"] == expected and any(isinstance(item, dict) for item in moved["params"])
    assert "- data/prepared/${item.dataset}/${item.model}" in study_dvc_yaml((REPO / "dvc.yaml").read_text())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".dvc").mkdir()
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    return tmp_path


def test_new_study_sync_and_resolve(project: Path) -> None:
    folder = new_study("quick-copy", project / "params.yaml", project)
    assert (folder / "params.yaml").read_text() == (project / "params.yaml").read_text()  # comments kept
    assert stale_studies(project) == [] and resolve_study("quick-copy", project) == folder
    assert resolve_study("default", folder) == project and resolve_study(None, folder) == folder
    assert project_root(folder / "data") == project.resolve()
    # the MLflow store is the project's, wherever a stage runs
    assert tracking_uri(folder) == f"sqlite:///{project.resolve() / 'mlflow.db'}"
    # a changed root dvc.yaml makes the copy stale: refused until `roar study sync`
    (project / "dvc.yaml").write_text((project / "dvc.yaml").read_text().replace("roar report", "roar report --track"))
    assert stale_studies(project) == [folder]
    with pytest.raises(RoarError, match="roar study sync"):
        resolve_study("quick-copy", project)
    assert sync_studies(project) == [folder] and "roar report --track" in (folder / "dvc.yaml").read_text()
    assert resolve_study("quick-copy", project) == folder


@pytest.mark.parametrize("name, message", [("Bad Name", "not allowed"), ("default", "not allowed"),
                                           ("quick", "exists")])
def test_new_study_refuses_bad_names(project: Path, name: str, message: str) -> None:
    (project / "studies" / "quick").mkdir(parents=True)
    with pytest.raises(RoarError, match=message):
        new_study(name, project / "params.yaml", project)


def test_new_study_checks_the_params_first(project: Path) -> None:
    bad = project / "bad.yaml"
    bad.write_text("study: {name: x}\n")
    with pytest.raises(ValueError):
        new_study("bad", bad, project)
    assert not (project / "studies" / "bad").exists()


def test_unknown_study_names_the_known_ones(project: Path) -> None:
    new_study("a", project / "params.yaml", project)
    with pytest.raises(RoarError, match="study 'b' not found.*studies: default, a"):
        resolve_study("b", project)


def test_offline_page_inlines_dvcs_vega_versions() -> None:
    assert [name for name, _ in vega_libraries()] == ["vega", "vega-lite", "vega-embed"]
    page = offline_page([("vega", "5.0.0", "var a = '</script>';")])
    assert "{plot_divs}" in page and "{refresh_tag}" in page and "{scripts}" not in page  # no CDN scripts
    assert "var a = '<\\/script>';" in page and "/* vega@5.0.0 */" in page
    assert 'renderer: "svg"' in page


def test_study_status_says_why_a_study_is_stale():
    from roar.launch.studies import _why_stale

    lock = {"stages": {"recursive@a": {"outs": [{"path": "results/a/s0"}]}, "report": {"outs": []}}}
    status = {"recursive@a": [{"changed deps": {"../../provenance.yaml": {"fingerprints.chain.gradient": "modified"},
                                                "params.yaml": {"importance.target": "modified"},
                                                "data/prepared/a": "deleted"}},
                              {"changed outs": {"results/a/s0": "not in cache"}}],
              "report": [{"changed deps": {"results": "modified"}}]}  # results: made by the chains, not an input
    why = _why_stale(status, lock)
    assert why[0].startswith("code of chain.gradient changed (`roar provenance verify`")
    assert why[1:] == ["params changed: importance.target"]
    # outputs missing (upstream ones too): not stale, only not run here
    only_missing = {"recursive@a": [{"changed deps": {"data/prepared/a": "deleted"}},
                                    {"changed outs": {"results/a/s0": "not in cache"}}],
                    "report": [{"changed deps": {"results": "modified"}}]}
    assert _why_stale(only_missing, lock) == []
    unlocked = {f"new@b-{i}": [{"changed outs": {"x": "not in cache"}}] for i in (2, 1, 3)}
    assert _why_stale(unlocked, lock) == [  # one clause for all of them (a study run in pieces has dozens)
        "3 stage(s) not in dvc.lock, e.g. new@b-1 (not run yet: a study run in pieces, or a grid that grew; "
        "`roar pipeline` runs them)"]


def test_study_status_of_a_study_never_run(tmp_path, monkeypatch):
    from roar.launch.studies import NOT_RUN, new_study, study_status

    for name in ("dvc.yaml", "params.yaml", "provenance.yaml"):
        shutil.copy(REPO / name, tmp_path / name)
    (tmp_path / ".dvc").mkdir()
    new_study("other", REPO / "params.yaml", tmp_path)
    status = study_status(tmp_path, "other")
    assert (status.state, status.folder) == (NOT_RUN, "studies/other")
    assert status.line() == ("other                        not run here: no dvc.lock (never run in this project); "
                             "run it with `roar pipeline --study other`")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["study", "status", "other"])
    assert result.exit_code == 0 and "not run here" in result.output, result.output


def test_study_status_of_a_study_a_pipeline_is_running_names_the_lock_holder(tmp_path):
    """``dvc status`` takes DVC's lock: while a pipeline writes the study's outputs, the status says busy and
    who holds the lock instead of failing with DVC's traceback."""
    import os
    import subprocess
    import sys

    import yaml
    from dvc.fs import LocalFileSystem
    from dvc.rwlock import rwlock

    from roar.launch.studies import BUSY, study_status

    # In its own process: an earlier in-process DVC command may have left DVC's log handler on a closed stream.
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"make": {"cmd": "echo a > out.txt",
                                                                           "outs": ["out.txt"]}}}))
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"make": {
        "cmd": "echo a > out.txt", "outs": [{"path": "out.txt", "md5": "0" * 32, "size": 2}]}}}))
    command = "dvc repro make (a running pipeline)"
    with rwlock(str(tmp_path / ".dvc" / "tmp"), LocalFileSystem(), command, [],
                [os.fspath(tmp_path / "out.txt")], False):
        status = study_status(tmp_path, "default")
    assert (status.state, status.folder) == (BUSY, ".")
    assert status.why == f"a DVC command holds its lock (PID {os.getpid()}): {command}", status.why
    assert status.todo == "ask again when it has finished"
    assert study_status(tmp_path, "default").state != BUSY  # the lock released


def test_study_status_says_when_step_records_git_should_carry_are_missing(tmp_path):
    """A locked stage whose uncached output (a step record: git carries it, no DVC remote does) is absent: the
    status says so and that only recomputing restores it (the four studies run before records travelled with
    git read "code of report changed" and sent users to `roar provenance verify`, which cannot help them)."""
    import subprocess
    import sys

    from roar.launch.studies import STALE, UP_TO_DATE, study_status

    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"chain": {
        "cmd": "echo a > rec.json", "outs": [{"rec.json": {"cache": False}}]}}}))
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"chain": {
        "cmd": "echo a > rec.json", "outs": [{"path": "rec.json", "hash": "md5",
                                              "md5": "60b725f10c9c85c70d97880dfe8191b3", "size": 2}]}}}))
    status = study_status(tmp_path, "default")
    assert status.state == STALE, status
    assert status.why.startswith("1 stage(s) lack their step records, which git should carry, e.g. chain"), status.why
    assert "`roar pipeline` recomputes them" in status.why
    (tmp_path / "rec.json").write_text("a\n")
    assert study_status(tmp_path, "default").state == UP_TO_DATE


def test_study_status_with_an_rwlock_a_killed_dvc_process_left_unreadable_says_what_to_do(tmp_path):
    """DVC fails every command on an empty ``.dvc/tmp/rwlock`` (a process killed mid-write); the status says so in
    one line and names the cure instead of raising DVC's RWLockFileCorruptedError."""
    import subprocess
    import sys

    from roar.launch.studies import BUSY, study_status

    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"make": {"cmd": "echo a > out.txt",
                                                                           "outs": ["out.txt"]}}}))
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {"make": {
        "cmd": "echo a > out.txt", "outs": [{"path": "out.txt", "md5": "0" * 32, "size": 2}]}}}))
    (tmp_path / ".dvc" / "tmp").mkdir(exist_ok=True)
    (tmp_path / ".dvc" / "tmp" / "rwlock").write_text("")
    status = study_status(tmp_path, "default")
    assert status.state == BUSY and "rwlock is unreadable" in status.why, status
    assert status.todo.startswith("`roar pipeline` removes it")


def _with_k0_models(params: Path, store: str) -> Path:
    text = params.read_text()
    params.write_text(text.replace("study:\n", f"study:\n  k0_models: {store}\n", 1))
    return params


def test_k0_models_in_git_makes_only_the_k0_model_outputs_uncached(project: Path) -> None:
    from dvc.repo import Repo

    source = project / "k0-in-git.yaml"
    shutil.copy(project / "params.yaml", source)
    folder = new_study("k0-in-git", _with_k0_models(source, "git"), project)
    plain = yaml.safe_load(study_dvc_yaml((project / "dvc.yaml").read_text()))
    moved = yaml.safe_load((folder / "dvc.yaml").read_text())
    assert moved["stages"]["train_k0"]["outs"] == [{"models/${item.dataset}/${item.model}/k0/s${item.seed}":
                                                    {"cache": False}}, *plain["stages"]["train_k0"]["outs"][1:]]
    assert {k: v for k, v in moved["stages"].items() if k != "train_k0"} == \
        {k: v for k, v in plain["stages"].items() if k != "train_k0"}
    # DVC reads it so: the k = 0 models are outputs git carries, the all-masked ones stay in the cache
    (project / ".dvc" / "config").write_text("[core]\n    no_scm = true\n")
    with Repo(str(folder)) as repo:
        uncached = {str(out) for stage in repo.index.stages for out in stage.outs if not out.use_cache
                    and "/results/" not in f"/{out}" and "reports" not in str(out)}
    assert uncached and all("/k0/" in path for path in uncached)
    assert stale_studies(project) == []
    # switched back by hand without a sync: the folder's dvc.yaml is stale and refused until synced
    (folder / "params.yaml").write_text((folder / "params.yaml").read_text().replace("k0_models: git", "k0_models: dvc"))
    assert stale_studies(project) == [folder]


def test_k0_models_in_git_is_refused_at_the_project_root(project: Path) -> None:
    _with_k0_models(project / "params.yaml", "git")
    with pytest.raises(RoarError, match="k0_models = 'git'.*study folders"):
        resolve_study("default", project)


def test_k0_models_other_values_are_refused(project: Path) -> None:
    from roar.config.params import load_params

    with pytest.raises(RoarError, match="study.k0_models.*'s3'.*dvc, git"):
        load_params(_with_k0_models(project / "params.yaml", "s3"))
