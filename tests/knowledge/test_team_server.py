"""The team tracking server on a real PostgreSQL: `tune-agent server` makes the cluster, serves
MLflow over it with proxied artifacts, four agents log into it at once without losing a run, and
Ctrl-C (SIGTERM) stops MLflow and PostgreSQL."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_available() -> bool:
    from agent.errors import TuneAgentError
    from agent.knowledge.team_server import pg_binary

    try:
        for tool in ("initdb", "pg_ctl", "psql"):
            pg_binary(tool)
        import psycopg  # noqa: F401
    except (TuneAgentError, ImportError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _pg_available(), reason="PostgreSQL binaries or psycopg are not installed")


@pytest.fixture
def team_server():  # noqa: ANN201
    """`tune-agent server` in a folder PostgreSQL's own user can reach (pytest's tmp is private to root)."""
    from agent.knowledge.team_server import wait_until_up

    data = Path(tempfile.mkdtemp(prefix="tune-agent-server-", dir="/tmp"))
    data.chmod(0o755)
    port, pg_port = _free_port(), _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "server", "--data-dir", str(data), "--port", str(port),
                             "--pg-port", str(pg_port)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_up(url, 180, proc), proc.stdout.read() if proc.poll() is not None else "server not up"
        yield url, data, pg_port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)
        shutil.rmtree(data, ignore_errors=True)


def _agent(url: str, dataset: str, name: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.Popen([sys.executable, "-m", "agent.cli", "start", "--dataset", dataset, "--job",
                             "agent.jobs.examples:logistic", "--trials", "3", "--epochs", "1", "--warm-start", "none",
                             "--study-name", name, "--tracking-uri", url], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_four_agents_log_into_postgres_at_once_and_the_server_stops_clean(team_server) -> None:  # noqa: ANN001
    from agent.knowledge.base import TRIAL_OK
    from agent.knowledge.mlflow_store import MlflowKnowledgeBase
    from agent.knowledge.team_server import pg_binary

    url, data, pg_port, proc = team_server
    datasets = ("iris", "wine", "breast-cancer", "digits")
    agents = [_agent(url, d, f"team-{d}") for d in datasets]
    for a in agents:
        out, err = a.communicate(timeout=240)
        assert a.returncode == 0, err[-2000:]
        assert "View run" not in out + err  # MLflow's link lines stay out of the product's output
    kb = MlflowKnowledgeBase(url)
    for d in datasets:
        trials = kb.trials(kb.find_study(f"team-{d}"))
        assert sorted(t.number for t in trials) == [0, 1, 2], d  # every trial once
        assert all(t.state == TRIAL_OK for t in trials)
    # the runs are rows in PostgreSQL, and the dataset samples went through MLflow's artifact proxy
    rows = subprocess.run([pg_binary("psql"), "-h", "127.0.0.1", "-p", str(pg_port), "-U", "tune_agent", "-d", "mlflow",
                           "-tAc", "SELECT count(*) FROM runs"], capture_output=True, text=True, check=True)
    assert int(rows.stdout.strip()) == 4 * 4
    assert any(p.name.endswith(".npz") or p.suffix == ".json" for p in (data / "artifacts").rglob("*"))
    # a fifth process reading the history sees the four finished studies
    res = subprocess.run([sys.executable, "-m", "agent.cli", "history", "--tracking-uri", url], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert all(f"team-{d}" in res.stdout for d in datasets)
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 0
    stopped = time.monotonic() - start
    assert "tracking server and PostgreSQL stopped" in proc.stdout.read()
    assert not (data / "postgres" / "postmaster.pid").exists()
    assert stopped < 60
