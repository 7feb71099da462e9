"""Crash safety after a real SIGKILL, and a study against a real `mlflow server` over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from agent.knowledge.records import TRIAL_KILLED, TRIAL_OK, TRIAL_RUNNING


def _states(store, name: str) -> list:
    kb = store.kb()
    study = kb.find_study(name)
    return [] if study is None else kb.trials(study)


def test_resume_after_sigkill_finishes_the_budget_without_duplicates(store, cli) -> None:
    exe = Path(sys.executable).with_name("tune-agent")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen(
        [
            str(exe),
            "start",
            "--dataset",
            "digits",
            "--job",
            "mlp",
            "--trials",
            "6",
            "--n-init",
            "3",
            "--epochs",
            "4",
            "--study-name",
            "S",
            *store.args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    deadline = time.time() + 240
    try:
        # Read the store only once the study exists: the child is still migrating the schema before.
        for line in proc.stdout:  # type: ignore[union-attr]
            if line.startswith("trial 1/"):
                break
        while time.time() < deadline:
            trials = _states(store, "S")
            ok = sum(t.state == TRIAL_OK for t in trials)
            if ok >= 2 and any(t.state == TRIAL_RUNNING for t in trials):
                break
            assert proc.poll() is None, "study ended before it could be killed"
            time.sleep(0.05)
        else:
            pytest.fail("study never reached two finished trials")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = _states(store, "S")
    running = [t for t in before if t.state == TRIAL_RUNNING]
    assert len(running) == 1

    # the resumes run in this process (the kill needed a process of its own; they do not, and a
    # fresh one costs each about 9 s of imports)
    res = cli("resume", "S", *store.args)
    assert res.code == 0, res.err
    assert "closed as killed" in res.out

    after = _states(store, "S")
    ok = [t for t in after if t.state == TRIAL_OK]
    assert sorted(t.number for t in ok) == list(range(6))  # budget honoured, no slot twice
    assert not any(t.state == TRIAL_RUNNING for t in after)
    killed = [t for t in after if t.state == TRIAL_KILLED]
    assert [t.trial_id for t in killed] == [running[0].trial_id]
    reused = {t.trial_id for t in before if t.state == TRIAL_OK}
    assert reused <= {t.trial_id for t in ok}  # finished trials were kept, not re-run
    assert store.kb().find_study("S").status == "finished"
    # Resuming a finished study does nothing.
    again = cli("resume", "S", *store.args)
    assert again.code == 0 and len(_states(store, "S")) == len(after)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path: Path):
    port = _free_port()
    exe = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [
            str(exe),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "server-art"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(url + "/health", timeout=2).ok:
                break
        except requests.RequestException:
            time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("mlflow server did not come up")
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def test_study_against_a_real_tracking_server(mlflow_server, cli, monkeypatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--trials",
        "2",
        "--n-init",
        "1",
        "--epochs",
        "2",
        "--study-name",
        "shared",
        "--tracking-uri",
        mlflow_server,
    )
    assert res.code == 0, res.err
    from mlflow import MlflowClient

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("tune-agent/mlp")
    runs = client.search_runs([exp.experiment_id])
    kinds = sorted(r.data.tags["tune_agent.kind"] for r in runs)
    assert kinds == ["study", "trial", "trial"]
    parent = next(r for r in runs if r.data.tags["tune_agent.kind"] == "study")
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "dataset")} >= {"dataset/sample.npz"}
    for trial in (r for r in runs if r.data.tags["tune_agent.kind"] == "trial"):  # models kept through the server
        assert {"model", "network"} <= {a.path for a in client.list_artifacts(trial.info.run_id)}
    best = cli("best", "shared", "--tracking-uri", mlflow_server)
    assert best.code == 0 and '"value"' in best.out
    registered = cli("best", "shared", "--register", "iris-shared", "--tracking-uri", mlflow_server)
    assert registered.code == 0, registered.err
    assert json.loads(registered.out)["registered"]["source"] == "kept"


def test_a_new_store_killed_while_mlflow_builds_its_tables_is_not_broken(tmp_path: Path) -> None:
    """SIGKILL while MLflow migrates a new sqlite store used to leave a file every later command
    failed on; the schema is now built aside and moved into place whole."""
    db = tmp_path / "mlflow.db"
    code = (
        "from pathlib import Path; from agent.knowledge.mlflow.store_file import create_sqlite_store; "
        f"create_sqlite_store(Path({str(db)!r}))"
    )
    # the migrations themselves (no schema template to copy), as on a first run
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "TUNE_AGENT_STORE_TEMPLATE": "0"})
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob(".mlflow.db.creating-*")):
        time.sleep(0.01)
    assert list(tmp_path.glob(".mlflow.db.creating-*")), "the store was never being created"
    time.sleep(0.3)  # well inside the migrations, which take seconds
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not db.exists()  # nothing half-built where the store belongs

    from agent.knowledge import open_knowledge_base

    kb = open_knowledge_base(f"sqlite:///{db}", str(tmp_path / "artifacts"))
    kb.open()  # the next command creates the store afresh
    assert kb.list_studies() == [] and db.exists()


def test_a_new_store_is_a_copy_of_the_schema_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The migrations run once per MLflow version (into the user's cache); every new store after
    that is a copy with the schema MLflow would have built and a Default experiment of its own."""
    import sqlite3

    from agent.knowledge.mlflow.store_file import create_sqlite_store, schema_template

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    template = schema_template()
    assert template is not None and template.parent == tmp_path / "cache" / "tune-agent" and template.exists()
    copied, migrated = tmp_path / "copied.db", tmp_path / "migrated.db"
    create_sqlite_store(copied)
    monkeypatch.setenv("TUNE_AGENT_STORE_TEMPLATE", "0")
    assert schema_template() is None
    create_sqlite_store(migrated)

    def schema(db: Path) -> tuple[set, list]:
        with sqlite3.connect(db) as c:
            tables = set(c.execute("SELECT type, name, tbl_name FROM sqlite_master"))
            default = c.execute("SELECT experiment_id, name, artifact_location FROM experiments").fetchall()
        return tables, default

    assert schema(copied) == schema(migrated)  # same tables and indexes, same Default experiment
    assert schema(copied)[1] == [(0, "Default", str(tmp_path / "mlruns" / "0"))]
    from agent.knowledge import open_knowledge_base

    kb = open_knowledge_base(f"sqlite:///{copied}", str(tmp_path / "artifacts"))
    kb.open()
    assert kb.list_studies() == []
