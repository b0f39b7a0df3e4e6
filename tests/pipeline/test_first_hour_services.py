"""A fresh clone's first hour (issue 24) on a real git + DVC project: the tiny study run by ``.venv/bin/roar``
without the virtualenv on PATH (the session's tiny study is run so), ``roar study status`` here and in a clone,
and a rerun's ``dvc.lock``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.pipeline.conftest import BIN, TinyStudy, commit, copy_project, project_env, sh


@pytest.fixture(scope="module")
def ran(tiny_study: TinyStudy) -> tuple[Path, str]:
    """The session's tiny study, committed as a user commits it (``dvc.lock``); ``roar pipeline``'s output."""
    commit(tiny_study.root, "ran the tiny study")
    return tiny_study.root, tiny_study.out


def test_venv_roar_runs_the_pipeline_without_the_venv_on_path(ran) -> None:
    _, out = ran
    assert "[roar] pipeline finished" in out and "outputs pushed" in out
    assert "workflowType=machine_learning" in out  # the MLflow runs link


def test_study_status_here_after_a_change_and_in_a_clone(ran, tmp_path) -> None:
    root, _ = ran
    status = sh(str(BIN / "roar"), "study", "status", cwd=root)
    assert status.split() == ["default", "up", "to", "date"], status
    params = root / "params.yaml"
    text = params.read_text()
    try:
        params.write_text(text.replace("target: predicted", "target: gold"))
        stale = sh("roar", "study", "status", cwd=root)
        assert stale.startswith("default stale: params changed: importance.target"), stale
    finally:
        params.write_text(text)
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", str(root), str(clone), cwd=tmp_path)
    local = subprocess.run(["dvc", "remote", "list"], cwd=root, capture_output=True, text=True,
                           env=project_env(root)).stdout.split()[1]
    missing = sh("roar", "study", "status", cwd=clone)
    assert missing.startswith("default not run here: outputs neither here nor in the DVC cache; the DVC remote"), missing
    empty = tmp_path / "empty-remote"
    empty.mkdir()
    sh("dvc", "remote", "modify", "--local", "storage", "url", str(empty), cwd=clone)
    nowhere = sh("roar", "study", "status", cwd=clone)  # DVC's cloud status alone calls this "in the remote"
    assert nowhere.strip() == f"default not run here: outputs neither here, in the DVC cache nor (all) in the " \
                              f"DVC remote {empty}; run it with `roar pipeline`", nowhere
    sh("dvc", "remote", "modify", "--local", "storage", "url", local, cwd=clone)
    pullable = sh("roar", "study", "status", cwd=clone)
    assert pullable.strip() == f"default not run here: outputs in the DVC remote {local} only; pull them with " \
                               "`dvc pull dvc.yaml`", pullable


def test_a_rerun_of_unchanged_inputs_leaves_dvc_lock_unchanged(ran, tmp_path) -> None:
    """Forced again (on a copy), the data preparation and the k = 0 trainings rewrite their run records and
    leave every output hash in ``dvc.lock`` as it was (a rerun from scratch: test_fresh_clone)."""
    root = copy_project(ran[0], tmp_path / "tiny")
    before = yaml.safe_load((root / "dvc.lock").read_text())
    runs_before = {p: p.read_text() for p in sorted((root / "runs").rglob("k0/*.json"))}
    k0_stages = [name for name in before["stages"] if name.startswith("train_k0@")]
    assert len(k0_stages) == 2, k0_stages  # seeds 0 and 1
    log = sh("dvc", "repro", "--force", *k0_stages, cwd=root)
    ran_stages = sorted(re.findall(r"Running stage '([^']+)'", log))
    assert ran_stages == sorted(["prepare@babi-1-bilstm-attention", *k0_stages]), log
    after = yaml.safe_load((root / "dvc.lock").read_text())
    runs_after = {p: p.read_text() for p in sorted((root / "runs").rglob("k0/*.json"))}
    assert runs_before and runs_after.keys() == runs_before.keys()
    assert all(runs_after[p] != runs_before[p] for p in runs_before)  # the k = 0 models were trained again
    changed = sorted(f"{stage}: {out['path']}" for stage, entry in after["stages"].items()
                     for out, old in zip(entry.get("outs", []), before["stages"][stage].get("outs", []))
                     if out != old)
    assert not changed, f"{len(changed)} output hash(es) changed:\n" + "\n".join(changed)


def test_mlflow_ui_click_path_from_the_home_page_to_the_runs(ran, tmp_path) -> None:
    """A user's path in a fresh browser: MLflow 3.17 opens an experiment on its GenAI overview whatever the
    experiment's kind tag says (its GenAI / Model training switch decides, GenAI until set), so the experiments
    list shows roar's description naming the switch; home page -> the switch -> click the experiment -> runs."""
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from tests.pipeline.test_mlflow_ui import CHROMEDRIVER, CHROMIUM, _require_browser, show

    from tests.pipeline.conftest import free_port, server_process

    _require_browser()
    root, _ = ran
    url = f"http://127.0.0.1:{free_port()}"
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1800,1100"):
        options.add_argument(argument)
    options.binary_location = next(path for path in map(shutil.which, CHROMIUM) if path)
    with server_process([str(BIN / "mlflow"), "ui", "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                         "--host", "127.0.0.1", "--port", url.rsplit(":", 1)[1]], f"{url}/health", "mlflow ui",
                        timeout=120, env=project_env(root), log=tmp_path / "mlflow-ui.log"):
        driver = webdriver.Chrome(service=Service(shutil.which(CHROMEDRIVER)), options=options)
        try:
            show(driver, f"{url}/#/experiments", "tiny", "roar study: its runs are in the UI's Model training view")
            show(driver, f"{url}/", "Welcome to MLflow", "Model training")
            driver.find_element("xpath", "//*[normalize-space(text())='Model training']").click()
            from mlflow.tracking import MlflowClient

            experiment_id = MlflowClient(f"sqlite:///{root / 'mlflow.db'}").get_experiment_by_name("tiny").experiment_id
            from selenium.webdriver.support.ui import WebDriverWait

            def experiment_link(_):  # the home page re-renders after the switch: wait for the link to be there
                return next((a for a in driver.find_elements("css selector", "a")
                             if (a.get_attribute("href") or "").endswith(f"/experiments/{experiment_id}")), False)

            WebDriverWait(driver, 60, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,)) \
                .until(experiment_link).click()
            text = show(driver, None, "Run Name", "tiny:pipeline")
            assert "Traces\n0" not in text and "/runs" in driver.current_url
        finally:
            driver.quit()
