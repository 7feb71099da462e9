"""The team tracking server on a real PostgreSQL: `tune-agent server` makes the cluster (passwords
required), serves MLflow over it with proxied artifacts, four agents log into it at once without
losing a run, each user's studies are theirs to change and everyone's to read, Ctrl-C (SIGTERM)
stops MLflow and PostgreSQL, and a SIGKILL of the server leaves nothing running."""

from __future__ import annotations

import contextlib
import json
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
    from agent.ops.postgres import pg_binary

    try:
        for tool in ("initdb", "pg_ctl", "psql"):
            pg_binary(tool)
        import psycopg  # noqa: F401
    except (TuneAgentError, ImportError):
        return False
    return True


pytestmark = pytest.mark.skipif(not _pg_available(), reason="PostgreSQL binaries or psycopg are not installed")


@contextlib.contextmanager
def serving(auth: bool = False):
    """`tune-agent server` in a folder PostgreSQL's own user can reach (pytest's tmp is private to root)."""
    from agent.ops.team_server import wait_until_up

    data = Path(tempfile.mkdtemp(prefix="tune-agent-server-", dir="/tmp"))
    data.chmod(0o755)
    port, pg_port = _free_port(), _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "server",
            "--data-dir",
            str(data),
            "--port",
            str(port),
            "--pg-port",
            str(pg_port),
            *(["--auth"] if auth else []),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until_up(url, 180, proc), proc.stdout.read() if proc.poll() is not None else "server not up"
        yield url, data, pg_port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=90)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="module")
def team_server():
    """One auth-enabled server for the module (starting one costs ~20 s); the last test stops it."""
    with serving(auth=True) as server:
        yield server


def _admin(data: Path) -> dict[str, str]:
    ini = (data / "auth" / "basic_auth.ini").read_text()
    password = next(line.split("=", 1)[1].strip() for line in ini.splitlines() if line.startswith("admin_password"))
    return {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": password}


def _agent(url: str, dataset: str, name: str, **creds: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")} | creds
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "start",
            "--dataset",
            dataset,
            "--job",
            "agent.jobs.examples:logistic",
            "--trials",
            "3",
            "--epochs",
            "1",
            "--warm-start",
            "none",
            "--study-name",
            name,
            "--tracking-uri",
            url,
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_four_agents_log_into_postgres_at_once(team_server, monkeypatch) -> None:
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase
    from agent.knowledge.records import TRIAL_OK
    from agent.ops.postgres import pg_binary

    url, data, pg_port, proc = team_server
    datasets = ("iris", "wine", "breast-cancer", "digits")
    admin = _admin(data)
    agents = [_agent(url, d, f"team-{d}", **admin) for d in datasets]
    for a in agents:
        out, err = a.communicate(timeout=240)
        assert a.returncode == 0, err[-2000:]
        assert "View run" not in out + err  # MLflow's link lines stay out of the product's output
    for key, value in admin.items():
        monkeypatch.setenv(key, value)
    kb = MlflowKnowledgeBase(url)
    for d in datasets:
        trials = kb.trials(kb.find_study(f"team-{d}"))
        assert sorted(t.number for t in trials) == [0, 1, 2], d  # every trial once
        assert all(t.state == TRIAL_OK for t in trials)
    # the runs are rows in PostgreSQL, and the dataset samples went through MLflow's artifact proxy
    psql = [
        pg_binary("psql"),
        "-h",
        "127.0.0.1",
        "-p",
        str(pg_port),
        "-U",
        "tune_agent",
        "-d",
        "mlflow",
        "-tAc",
        "SELECT count(*) FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid WHERE t.key = 'tune_agent.kind' "
        "AND t.value IN ('study', 'trial')",
    ]
    password = (data / "auth" / "postgres_password").read_text().strip()
    rows = subprocess.run(psql, capture_output=True, text=True, check=True, env={**os.environ, "PGPASSWORD": password})
    assert int(rows.stdout.strip()) == 4 * 4
    # the four studies ended at once and each published its source: the store's meta-models hold all four
    from agent.jobs import load_job
    from agent.knowledge.meta_cache import fetch
    from agent.surrogates.source_store import SourceModelStore
    from agent.tuning.published import scope_of

    job = load_job("agent.jobs.examples:logistic")
    got = fetch(kb, scope_of(job.name, job.space))
    assert got.record is not None and got.paths("source_models/"), got
    published = SourceModelStore(Path(tempfile.mkdtemp()) / "none", got.paths("source_models/"))
    names = {r["name"] for r in published.records() if r["type"] == "source"}
    assert {kb.find_study(f"team-{d}").dataset for d in datasets} <= names, names
    # without the password PostgreSQL refuses everyone, MLflow's login cannot be gone around
    bare = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"PGPASSFILE": os.devnull}
    refused = subprocess.run(
        [*psql[:-1], "SELECT 1"], capture_output=True, text=True, env=bare, stdin=subprocess.DEVNULL
    )
    assert refused.returncode != 0 and "password" in refused.stderr
    assert (data / "auth").stat().st_mode & 0o777 == 0o700
    for secret in (data / "auth").iterdir():
        assert secret.stat().st_mode & 0o777 == 0o600, secret.name
    assert any(p.name.endswith(".npz") or p.suffix == ".json" for p in (data / "artifacts").rglob("*"))
    # a fifth process reading the history sees the four finished studies
    res = subprocess.run(
        [sys.executable, "-m", "agent.cli", "history", "--tracking-uri", url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **admin},
    )
    assert res.returncode == 0, res.stderr
    assert all(f"team-{d}" in res.stdout for d in datasets)


def test_credentials_come_from_the_environment_and_studies_belong_to_their_owner(team_server, cli, monkeypatch) -> None:
    """A wrong password gets one line and exit 2. A second user's study goes to that user's own
    experiment; the user reads the admin's studies (history, warm start) but cannot log to, tag or
    delete their runs, the server refuses (403), and a command that would is one line, exit 2.
    (In this process, through the real entry point: a fresh process per refusal cost ~10 s each.)"""
    from mlflow.server import get_app_client

    import mlflow
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase

    url, data, _, _ = team_server
    admin = _admin(data)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def as_user(user: str, password: str) -> None:
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)

    def start(name: str, user: str, password: str):
        as_user(user, password)
        return cli(
            "start",
            "--dataset",
            "wine",
            "--job",
            "agent.jobs.examples:logistic",
            "--trials",
            "2",
            "--epochs",
            "1",
            "--warm-start",
            "none",
            "--study-name",
            name,
            "--tracking-uri",
            url,
        )

    wrong = start("wrong-password", "admin", "nope")
    assert wrong.code == 2
    assert (
        wrong.err.strip()
        .splitlines()[-1]
        .startswith(f"tune-agent: error: tracking server {url} refused the request as user 'admin' (401)")
    )
    assert "Traceback" not in wrong.err

    as_user(*admin.values())
    get_app_client("basic-auth", tracking_uri=url).create_user("bob", "bob-password-123")
    mine = start("by-bob", "bob", "bob-password-123")
    assert mine.code == 0, mine.err[-2000:]
    # bob reads the team's meta-models but may not add to them (READ): one line, the study's result stands
    assert "not published" in mine.out and "bob has no permission to publish" in mine.out, mine.out
    kb = MlflowKnowledgeBase(url)
    theirs, bobs = kb.find_study("team-iris"), kb.find_study("by-bob")  # bob reads everyone's studies
    assert theirs is not None and bobs is not None and bobs.tags.get("owner") == "bob"
    client = mlflow.MlflowClient(url)
    assert client.get_experiment(client.get_run(bobs.study_id).info.experiment_id).name.endswith("/bob")
    trial = kb.trials(theirs)[0]
    for attempt in (
        lambda: client.log_metric(trial.trial_id, "objective", 999.0),
        lambda: client.set_tag(trial.trial_id, "tune_agent.state", "ok"),
        lambda: client.delete_run(trial.trial_id),
    ):
        with pytest.raises(mlflow.exceptions.MlflowException) as refused:
            attempt()
        assert "PERMISSION_DENIED" in str(refused.value) or "403" in str(refused.value)
    changed = cli("resume", "team-iris", "--tracking-uri", url)  # resuming writes the study's status
    assert changed.code == 2 and len(changed.err.strip().splitlines()) == 1, changed.err
    assert "bob has no permission for this (403)" in changed.err
    as_user(*admin.values())
    assert kb.trials(theirs)[0].value == trial.value  # untouched


def test_users_are_added_listed_and_removed_as_the_team_guide_says(team_server, cli, monkeypatch) -> None:
    """`tune-agent server user add/list/remove` on the server's host (the admin's password read from
    its folder): a read teammate's study publishes to the team's meta-models without a 403, an edit
    teammate may change another's study run, a removed one is refused."""
    import mlflow
    from agent.knowledge.mlflow.backend import MlflowKnowledgeBase

    url, data, _, _ = team_server
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    admin = ["--data-dir", str(data), "--tracking-uri", url]
    added = cli("server", "user", "add", "dora", *admin)
    assert added.code == 0, added.err
    dora = next(line.split()[1] for line in added.out.splitlines() if line.startswith("password: "))
    edit = cli("server", "user", "add", "erin", "--role", "edit", "--password", "erin-password-1234", *admin)
    assert edit.code == 0, edit.err
    listed = cli("server", "user", "list", "--json", *admin)
    assert listed.code == 0 and {"dora", "erin"} <= {u["username"] for u in json.loads(listed.out)}
    again = cli("server", "user", "add", "dora", *admin)
    assert again.code == 2 and len(again.err.strip().splitlines()) == 1, again.err

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "dora")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", dora)
    res = cli("start", "--dataset", "iris", "--job", "agent.jobs.examples:logistic", "--trials", "2", "--epochs", "1",
              "--warm-start", "none", "--study-name", "by-dora", "--tracking-uri", url)  # fmt: skip
    assert res.code == 0, res.err[-2000:]
    assert "no permission to publish" not in res.out and "not published" not in res.out, res.out
    kb = MlflowKnowledgeBase(url)
    dora_trial = kb.trials(kb.find_study("by-dora"))[0]

    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "erin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "erin-password-1234")
    mlflow.MlflowClient(url).set_tag(dora_trial.trial_id, "reviewed", "yes")  # edit: another's run too

    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME")
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD")
    removed = cli("server", "user", "remove", "dora", *admin)
    assert removed.code == 0, removed.err
    listed = cli("server", "user", "list", "--json", *admin)
    assert "dora" not in {u["username"] for u in json.loads(listed.out)}
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "dora")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", dora)
    refused = cli("history", "--tracking-uri", url)
    assert refused.code == 2 and len(refused.err.strip().splitlines()) == 1, refused.err
    assert "401" in refused.err or "dora not found" in refused.err, refused.err


def test_the_admin_password_is_made_once() -> None:
    from agent.ops.team_users import auth_environment

    with tempfile.TemporaryDirectory() as folder:
        made, env = auth_environment(Path(folder) / "auth", "admin")
        assert len(made) >= 18 and made in Path(env["MLFLOW_AUTH_CONFIG_PATH"]).read_text()
        again, _ = auth_environment(Path(folder) / "auth", "admin")
        assert again == ""


def client_experiment(url: str, study: str) -> str:
    """The experiment id holding ``study``'s run."""
    import mlflow

    client = mlflow.MlflowClient(url)
    run = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], f"attributes.run_name = '{study}'"
    )[0]
    return run.info.experiment_id


def test_a_killed_server_leaves_nothing_running_and_a_second_start_says_so() -> None:
    """SIGKILL of `tune-agent server`: PostgreSQL and MLflow die with it (parent-death signal); a
    server still up on the same data dir is refused in one line pointing to --stop."""
    from agent.ops.team_server import TeamServer

    with serving() as (url, data, pg_port, proc):
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent.cli",
                "server",
                "--data-dir",
                str(data),
                "--port",
                str(_free_port()),
                "--pg-port",
                str(_free_port()),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2 and "--stop" in second.stderr and len(second.stderr.strip().splitlines()) == 1
        pids = [
            int((data / "postgres" / "postmaster.pid").read_text().split()[0]),
            int((data / "logs" / "mlflow.pid").read_text()),
        ]
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not any(_running(pid) for pid in pids)
        assert TeamServer(data).running() == []


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


def test_sigterm_stops_mlflow_and_postgres(team_server) -> None:
    _, data, _, proc = team_server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 0  # a guard against a hang, not a speed claim
    assert "tracking server and PostgreSQL stopped" in proc.stdout.read()
    assert not (data / "postgres" / "postmaster.pid").exists()
