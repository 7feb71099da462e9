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
    pytest.mark.skipif(
        not _playwright(), reason="Playwright's Python package is not installed (pip install playwright)"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_ui_shows_the_study_its_dataset_objective_trials_and_report(store, cli) -> None:
    """A study with a default name; `tune-agent ui` prints a link per job, and that link opens the
    runs table in the training view with the objective and the job's hyperparameters as columns,
    nothing clicked but the assistant panel's Close (it opens itself on a browser's first visit)."""
    from playwright.sync_api import sync_playwright

    from mlflow import MlflowClient

    res = cli(
        "start",
        "--dataset",
        "wine",
        "--job",
        "agent.jobs.examples:logistic",
        "--trials",
        "3",
        "--epochs",
        "2",
        "--warm-start",
        "none",
        *store.args,
    )
    assert res.code == 0, res.err
    client = MlflowClient(store.uri)
    experiment = client.get_experiment_by_name("tune-agent/logistic")
    (study,) = store.kb().list_studies()
    assert study.name.startswith("wine-logistic-")  # the default name
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    ui = subprocess.Popen(
        [str(Path(sys.executable).with_name("tune-agent")), "ui", "--port", str(port), *store.args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        link = None
        for line in ui.stdout:  # the link comes before the server starts
            if "studies of job logistic" in line:
                link = line.split(": ", 1)[1].strip()
                break
        assert link == (
            f"{url}/#/experiments/{experiment.experiment_id}/runs?viewStateShareKey=tune-agent"
            "&workflowType=machine_learning"
        ), link
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
            page.goto(link)
            page.get_by_text(study.name, exact=True).first.wait_for(timeout=90_000)
            page.wait_for_timeout(1500)
            close = page.get_by_role("button", name="Close")
            if close.count():
                close.last.click()
            page.get_by_text("best_objective", exact=True).first.wait_for(timeout=30_000)
            page.wait_for_timeout(1000)
            text = page.inner_text("body")
            assert "Model training" in text  # the training view's sidebar, not the GenAI one
            assert study.name in text and "wine (" in text  # the study and its dataset (the Dataset column)
            cut = page.get_by_text(study.name, exact=True).first.evaluate(
                "e => [e, e.parentElement, e.parentElement.parentElement].some(x => x.scrollWidth > x.clientWidth + 1)"
            )
            assert not cut, f"the runs table cuts {study.name!r}"  # a default name fits its column
            for column in ("best_objective", "objective", "lr", "weight_decay", "optimizer"):
                assert column in text, column  # the objective and the hyperparameters, unclicked
            assert f"{study.best_value:.4f}"[:5] in text  # the objective, filled
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
