"""`dvc plots show` of the tiny study, opened in headless Chromium: the ROAR curves render offline."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.pipeline.conftest import TinyStudy, project_env, sh


REQUIRED = os.environ.get("ROAR_REQUIRE_BROWSER") == "1"


def _skip_or_fail(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} (ROAR_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


def _browser():
    """A headless Chromium driven by selenium, or a skip (a failure with ROAR_REQUIRE_BROWSER=1)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _skip_or_fail("selenium not installed (pip install -e '.[test]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        _skip_or_fail("chromium or chromedriver missing (Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,900"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(driver))


def test_dvc_plots_page_draws_the_roar_curves_offline(tiny_study: TinyStudy, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    project = tiny_study.root
    browser = _browser()
    try:
        proc = subprocess.run(["roar", "plots-offline"], cwd=project, env=project_env(project), capture_output=True,
                              text=True)
        if proc.returncode != 0:  # npm or its registry not reachable
            _skip_or_fail(f"roar plots-offline failed: {proc.stderr.strip()}")
        out = tmp_path / "plots"
        sh("dvc", "plots", "show", "-o", str(out), cwd=project)
        page = (out / "index.html").read_text()
        assert "cdn.jsdelivr.net" not in page and "vega-lite@5" in page  # the libraries are inlined
        browser.get((out / "index.html").as_uri())
        plot = "#reports_curves_csv svg"
        WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, f"{plot} .mark-line path"))
        texts = [t.get_attribute("textContent") for t in browser.find_elements(By.CSS_SELECTOR, f"{plot} text")]
        # the legend names both measures; the panel names dataset, model, chain kind and metric; the axes
        assert {"random", "attention", "masked (k)", "test metric"} <= set(texts), texts
        assert "babi-1 / bilstm-attention / Recursive ROAR / test accuracy" in texts
        lines = browser.find_elements(By.CSS_SELECTOR, f"{plot} .mark-line path")
        bands = browser.find_elements(By.CSS_SELECTOR, f"{plot} .mark-area path")
        assert len(lines) == 2 and len(bands) == 2  # a curve and an interval band per measure
        dashes = {line.get_attribute("stroke-dasharray") for line in lines}
        assert dashes == {"1,0", "6,4"}, dashes  # random is the dashed baseline, the measure solid
        assert not browser.find_elements(By.CSS_SELECTOR, ".vega-embed .error, .error-message")
        folder = Path(os.environ.get("ROAR_SCREENSHOTS", tmp_path))
        folder.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(folder / "dvc-plots.png"))
    finally:
        browser.quit()
