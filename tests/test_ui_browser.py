"""The MLflow UI as the history browser, checked in a real (headless) Chromium: `tune-agent ui`
serves a store holding a tiny study; the study list shows the study with its dataset and objective,
its trials with their objective values, and its report. The screenshot becomes the README's.

Runs when Chromium (Debian's `chromium` package: `apt-get install -y chromium`) and Playwright's
Python package are installed; skipped with the reason otherwise."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO / "docs" / "ui-study-list.png"


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _playwright() -> bool:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = [
    pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed (apt-get install -y chromium)"),
    pytest.mark.skipif(not _playwright(), reason="Playwright's Python package is not installed (pip install playwright)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_ui_shows_the_study_its_dataset_objective_trials_and_report(store, cli) -> None:  # noqa: ANN001
    from mlflow import MlflowClient
    from playwright.sync_api import sync_playwright

    res = cli("start", "--dataset", "wine", "--job", "agent.jobs.examples:logistic", "--trials", "3", "--epochs", "2",
              "--warm-start", "none", "--study-name", "ui-study", *store.args)
    assert res.code == 0, res.err
    client = MlflowClient(store.uri)
    experiment = client.get_experiment_by_name("tune-agent/logistic")
    study = store.kb().find_study("ui-study")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    ui = subprocess.Popen([str(Path(sys.executable).with_name("tune-agent")), "ui", "--port", str(port), *store.args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        else:
            pytest.fail("tune-agent ui did not come up")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1700, "height": 560})
            # the study list: the experiment's runs, sorted by the study's objective, browsed as
            # README says: the "Model training" view, the assistant panel closed, the objective
            # columns added from "Columns"
            page.goto(f"{url}/#/experiments/{experiment.experiment_id}/runs?orderByKey=metrics.%60best_objective%60"
                      "&orderByAsc=true")
            page.get_by_text("ui-study", exact=True).first.wait_for(timeout=90_000)
            page.get_by_text("Model training", exact=True).first.click()
            page.wait_for_timeout(1000)
            close = page.get_by_role("button", name="Close")
            if close.count():
                close.last.click()
            page.get_by_role("button", name="Columns").first.click()
            page.wait_for_timeout(800)
            for column in ("best_objective", "objective"):
                page.get_by_text(column, exact=True).first.click()
                page.wait_for_timeout(300)
            page.keyboard.press("Escape")
            page.wait_for_timeout(1500)
            text = page.inner_text("body")
            assert "ui-study" in text and "wine (" in text  # the study and its dataset (the Dataset column)
            assert "best_objective" in text and f"{study.best_value:.4f}"[:5] in text  # its objective, filled
            SCREENSHOT.parent.mkdir(exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=False)
            # the study's own page: its objective and its report among the artifacts
            page.goto(f"{url}/#/experiments/{experiment.experiment_id}/runs/{study.study_id}")
            page.get_by_text("best_objective").first.wait_for(timeout=60_000)
            page.goto(f"{url}/#/experiments/{experiment.experiment_id}/runs/{study.study_id}/artifacts")
            page.get_by_text("report", exact=True).first.wait_for(timeout=60_000)
            # a trial's page: its objective value
            trial = store.kb().trials(study)[0]
            page.goto(f"{url}/#/experiments/{experiment.experiment_id}/runs/{trial.trial_id}")
            page.get_by_text("objective", exact=True).first.wait_for(timeout=60_000)
            assert f"{trial.value:.4g}"[:4] in page.inner_text("body")
            browser.close()
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        ui.wait(timeout=30)
