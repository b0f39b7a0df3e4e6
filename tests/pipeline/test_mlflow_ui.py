"""MLflow as a comparison tool: the tiny study's runs as the UI shows them, in a real headless browser.

``mlflow ui`` serves the tiny study's store on 127.0.0.1; Debian's chromium, driven by selenium through
chromium-driver, opens the runs page, the chart view of the chains of one seed and the report run's
artifacts, and saves a screenshot of each (to ``ROAR_SCREENSHOTS`` when set, else under pytest's tmp;
the session summary names the folder). Without chromium the browser tests skip, unless
``ROAR_REQUIRE_BROWSER=1`` (CI), which makes them fail.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.pipeline.conftest import BIN, REPORT, TinyStudy, free_port, project_env, server_process

from roar.tracking.mlflow_tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG, runs_page_url


CHROMEDRIVER = "chromedriver"
CHROMIUM = ("chromium", "chromium-browser")
SEED0_CHAINS = "tags.`roar.kind` = 'chain' and tags.`roar.seed` = '0'"


def tiny_client(study: TinyStudy):
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{study.root / 'mlflow.db'}")


def by_kind(study: TinyStudy, kind: str) -> list:
    return [r for r in study.runs if r.data.tags["roar.kind"] == kind]


def test_runs_carry_what_the_ui_compares(tiny_study: TinyStudy) -> None:
    """The experiment is a model-training one; chains hold their curve over k and their RACU; runs name
    their source and commit; train runs list the dataset they trained on."""
    client = tiny_client(tiny_study)
    experiment = client.get_experiment_by_name("tiny")
    assert experiment.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    study_run = by_kind(tiny_study, "study")[0].info.run_id
    for run in tiny_study.runs:
        tags = run.data.tags
        assert tags["mlflow.source.type"] == "PROJECT" and tags["mlflow.source.name"] == str(tiny_study.root)
        assert tags["mlflow.source.git.commit"] == tags["roar.git_commit"].removesuffix("-dirty")
        assert len(tags["mlflow.source.git.commit"]) == 40
        assert tags["mlflow.project.entryPoint"] in ("pipeline", "train-reference", "chain", "report")
        if tags["roar.kind"] != "study":
            assert tags["roar.study_run"] == study_run
    chains = {(r.data.tags["roar.measure"], r.data.tags["roar.seed"]): r for r in by_kind(tiny_study, "chain")
              if r.data.tags["roar.measure"] not in ("shared",)}
    assert len(chains) == 4
    for (measure, seed), run in chains.items():
        history = client.get_metric_history(run.info.run_id, "retrained_accuracy")
        assert [m.step for m in history] == [0, 40, 70]
        # the k = 0 point is the shared k = 0 model's test accuracy; the others the step records'
        k0 = next(r for r in by_kind(tiny_study, "train") if r.data.tags["roar.measure"] == "shared"
                  and r.data.tags["roar.seed"] == seed and r.data.tags["roar.k"] == "0")
        assert history[0].value == k0.data.metrics["test_accuracy"]
        record = tiny_study.root / f"results/babi-1/bilstm-attention/{measure}/recursive/s{seed}/k70.json"
        assert history[2].value == json.loads(record.read_text())["value"]
    # RACU is logged by the report stage on the measured chains (random is the baseline: none)
    racu_seeds = (tiny_study.root / "reports/racu_seeds.csv").read_text().splitlines()
    for seed in ("0", "1"):
        metrics = client.get_run(chains["attention", seed].info.run_id).data.metrics
        row = next(line.split(",") for line in racu_seeds if line.split(",")[5:7] == ["retrained", seed])
        assert metrics["racu"] == pytest.approx(float(row[7])) and "racu_k0_model" in metrics
        assert "racu" not in client.get_run(chains["random", seed].info.run_id).data.metrics
    for run in by_kind(tiny_study, "train"):
        inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
        assert [i.dataset.digest for i in inputs] == [run.data.tags["roar.data_hash"][:36]]
        assert inputs[0].dataset.name == f"babi-1-k{run.data.tags['roar.k']}"


@dataclass
class UI:
    url: str
    experiment_id: str
    screenshots: Path


def _require_browser() -> None:
    """Skip (or fail, with ROAR_REQUIRE_BROWSER=1) when chromium, its driver or selenium is missing."""
    missing = [name for name in (CHROMEDRIVER, "|".join(CHROMIUM))
               if not any(shutil.which(n) for n in name.split("|"))]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        reason = f"no {', '.join(missing)}: apt-get install chromium chromium-driver; pip install selenium"
        if os.environ.get("ROAR_REQUIRE_BROWSER") == "1":
            pytest.fail(f"ROAR_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def ui(tiny_study: TinyStudy, tmp_path_factory) -> Iterator[UI]:
    """``mlflow ui`` on 127.0.0.1 over the tiny study's store."""
    _require_browser()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    screenshots = Path(os.environ.get("ROAR_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    screenshots.mkdir(parents=True, exist_ok=True)
    experiment_id = tiny_client(tiny_study).get_experiment_by_name("tiny").experiment_id
    log = tmp_path_factory.mktemp("mlflow-ui") / "mlflow-ui.log"
    with server_process([str(BIN / "mlflow"), "ui", "--backend-store-uri", f"sqlite:///{tiny_study.root / 'mlflow.db'}",
                         "--host", "127.0.0.1", "--port", str(port)], f"{url}/health", "mlflow ui", timeout=120,
                        env=project_env(tiny_study.root), log=log):
        REPORT.append(f"MLflow UI screenshots: {screenshots}")
        yield UI(url, experiment_id, screenshots)


@pytest.fixture
def browser(ui: UI):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1800,1100"):
        options.add_argument(argument)
    chromium = next(path for path in map(shutil.which, CHROMIUM) if path)
    options.binary_location = chromium
    driver = webdriver.Chrome(service=Service(shutil.which(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def show(driver, url: str | None, *texts: str, timeout: float = 90) -> str:
    """Open ``url`` (None: stay) and wait until the page shows every one of ``texts``; returns the page's text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    if url:
        driver.get(url)
    try:
        WebDriverWait(driver, timeout, poll_frequency=0.5).until(
            lambda d: all(text in d.find_element("tag name", "body").text for text in texts))
    except TimeoutException:
        body = driver.find_element("tag name", "body").text
        pytest.fail(f"{url} did not show {texts} within {timeout:.0f} s; the page says:\n{body[:2000]}")
    return driver.find_element("tag name", "body").text


def screenshot(driver, ui: UI, name: str) -> Path:
    for close in driver.find_elements("css selector", 'button[aria-label="Close"]'):  # the assistant side panel
        if close.is_displayed():
            close.click()
    path = ui.screenshots / f"{name}.png"
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000
    return path


def test_runs_page_lists_the_study(ui: UI, browser, tiny_study: TinyStudy) -> None:
    text = show(browser, runs_page_url(ui.experiment_id, ui.url), "Run Name", "Source", "tiny:pipeline")
    assert "No data available" not in text  # not the GenAI overview
    assert "tiny" in text.split()
    screenshot(browser, ui, "runs")


def test_chart_view_compares_the_chains_of_one_seed(ui: UI, browser) -> None:
    url = f"{runs_page_url(ui.experiment_id, ui.url)}&{urllib.parse.urlencode({'searchFilter': SEED0_CHAINS})}"
    show(browser, url, "5 matching runs")  # the 4 chains of seed 0 and the study run they nest under
    for expand in browser.find_elements("css selector", 'button[data-component-id*="runnamecellrenderer"]'):
        expand.click()  # the chart view draws the runs the table shows: unfold the study run
    show(browser, None, "babi-1/bilstm-attention/attention/recursive/s0")
    browser.execute_script("arguments[0].click()", browser.find_element("css selector", 'input[value="CHART"]'))
    show(browser, None, "Model metrics")  # charts below the fold render only when scrolled to: search them
    browser.find_element("css selector", 'input[placeholder="Search metric charts"]').send_keys("retrained_accuracy")
    text = show(browser, None, "retrained_accuracy",
                "babi-1/bilstm-attention/attention/recursive/s0 (retrained_accuracy)")
    assert "babi-1/bilstm-attention/random/recursive/s0" in text
    assert "recursive/s1" not in text  # the search string kept seed 0 only
    screenshot(browser, ui, "chart-seed0")


def test_report_run_holds_tables_and_figures(ui: UI, browser, tiny_study: TinyStudy) -> None:
    report = by_kind(tiny_study, "report")[0].info.run_id
    url = f"{ui.url}/#/experiments/{ui.experiment_id}/runs/{report}/artifacts?workflowType=machine_learning"
    show(browser, url, "racu.csv", "racu_seeds.csv", "figures")
    screenshot(browser, ui, "report-artifacts")
