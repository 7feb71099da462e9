"""Trials trained in a second process started as `start` begins (agent/execution/trial_process.py):
the same runs as training in the study's process, a study's process that never imports Lightning,
a trial that kills its process is one failed trial, a job that cannot be pickled trains here, and
Ctrl-C stops the trial's process with the study. The rest of the suite trains in-process
(TUNE_AGENT_TRIAL_PROCESS=0 in conftest): these tests turn it back on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMED = {"duration_s", "final_fit_seconds"}  # the trial's seconds, its fit's: measurements, never equal twice


def _runs(store, name: str) -> list[tuple]:
    """Each trial of study ``name`` as MLflow holds it: state, value, config, params, every metric's
    (step, value) history, the run's status."""
    from mlflow import MlflowClient

    client = MlflowClient(store.uri)
    kb = store.kb()
    out = []
    for t in kb.trials(kb.find_study(name)):
        run = client.get_run(t.trial_id)
        # as a set: MLflow keeps one of two equal rows logged in the same millisecond
        history = {
            k: sorted({(m.step, round(m.value, 6)) for m in client.get_metric_history(t.trial_id, k)})
            for k in sorted(run.data.metrics)
            if k not in TIMED
        }
        out.append((t.number, t.state, t.value, dict(t.config), dict(run.data.params), history, run.info.status))
    return out


def test_a_study_in_the_trial_process_logs_what_one_in_the_study_process_does(store, cli, monkeypatch) -> None:
    # three trials, the third a BO step (its imports warmed on a thread while trial 1 trained); the
    # pruner's state goes to the trial process with each trial and its curve comes back
    args = [
        "--dataset",
        "iris",
        "--job",
        "mlp",
        "--trials",
        "3",
        "--n-init",
        "2",
        "--epochs",
        "2",
        "--warm-start",
        "none",
        "--surrogate",
        "gp",
        "--pruner",
        "median",
        *store.args,
    ]
    monkeypatch.setenv("TUNE_AGENT_TRIAL_PROCESS", "0")
    res = cli("start", *args, "--study-name", "here")
    assert res.code == 0, res.err
    monkeypatch.setenv("TUNE_AGENT_TRIAL_PROCESS", "1")
    res = cli("start", *args, "--study-name", "there")
    assert res.code == 0, res.err
    here, there = _runs(store, "here"), _runs(store, "there")
    assert [r[1] for r in there] == ["ok", "ok", "ok"]
    assert store.kb().trials(store.kb().find_study("there"))[2].origin.startswith("bo:")
    for a, b in zip(here, there):
        assert a[5].keys() == b[5].keys(), a[5].keys() ^ b[5].keys()
        assert {k: (a[5][k], b[5][k]) for k in a[5] if a[5][k] != b[5][k]} == {}
    assert there == here  # values, configs, params, per-epoch metrics and run status, trial for trial
    assert len(there[0][5]["val_loss"]) == 2  # two epochs, each logged as it ended


def test_the_study_process_never_imports_lightning(store, tmp_path) -> None:
    code = (
        "import sys\nfrom agent.cli import main\ntry:\n    main("
        + repr(
            [
                "start",
                "--dataset",
                "iris",
                "--job",
                "mlp",
                "--trials",
                "1",
                "--epochs",
                "1",
                "--warm-start",
                "none",
                "--study-name",
                "light",
                *store.args,
            ]
        )
        + ")\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "print('LIGHTNING', 'lightning' in sys.modules, 'lightning.pytorch' in sys.modules)"
    )
    env = {**os.environ, "TUNE_AGENT_TRIAL_PROCESS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-1500:]
    assert "LIGHTNING False False" in done.stdout, done.stdout[-800:]
    assert "trial 1 done (1/1): val_loss=" in done.stdout  # trained, in the other process


def test_a_trial_that_kills_its_process_fails_alone_and_the_next_gets_a_fresh_one(
    store, cli, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("TUNE_AGENT_TRIAL_PROCESS", "1")
    monkeypatch.setenv("CRASH_MARKER", str(tmp_path / "crashed"))
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "tests.tuning.crash_job:job",
        "--trials",
        "3",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "crash",
        *store.args,
    )
    assert res.code == 0, res.out + res.err
    trials = store.kb().trials(store.kb().find_study("crash"))
    assert [t.state for t in trials] == ["failed", "ok", "ok"]
    assert trials[0].reason == "the trial's process died: killed by SIGKILL (out of memory?)"
    assert "trial 1 done (1/3): failed: the trial's process died: killed by SIGKILL" in res.out
    assert (tmp_path / "crashed").read_text() != str(os.getpid())  # it died in the other process, not here


def test_a_job_that_cannot_be_pickled_trains_in_the_study_process(store, cli, monkeypatch) -> None:
    monkeypatch.setenv("TUNE_AGENT_TRIAL_PROCESS", "1")
    res = cli(
        "start",
        "--dataset",
        "iris",
        "--job",
        "tests.tuning.trial_process_jobs:unpicklable",
        "--trials",
        "2",
        "--epochs",
        "1",
        "--warm-start",
        "none",
        "--study-name",
        "pickle",
        *store.args,
    )
    assert res.code == 0, res.out + res.err
    assert "the job cannot be sent to a trial process (" in res.out and "its trials train in this process" in res.out
    assert [t.state for t in store.kb().trials(store.kb().find_study("pickle"))] == ["ok", "ok"]


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_ctrl_c_stops_the_trial_process_with_the_study_and_resume_finishes_it(store, tmp_path) -> None:
    pids = tmp_path / "pids"
    env = {
        **os.environ,
        "TUNE_AGENT_TRIAL_PROCESS": "1",
        "SLOW_PIDS": str(pids),
        "SLOW_SECONDS": "120",
        "PYTHONPATH": str(REPO),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    study = ["--tracking-uri", store.uri, "--artifact-root", store.artifacts]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "start",
            "--dataset",
            "iris",
            "--job",
            "tests.tuning.trial_process_jobs:slow",
            "--trials",
            "2",
            "--epochs",
            "1",
            "--warm-start",
            "none",
            "--study-name",
            "slow",
            *study,
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (pids.exists() and pids.read_text().strip()) and proc.poll() is None:
            time.sleep(0.2)
        assert pids.exists(), "the first trial never began"
        child = int(pids.read_text().split()[0])
        assert child != proc.pid and _alive(child)
        proc.send_signal(signal.SIGINT)  # Ctrl-C reaches the study's process
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "tune-agent resume slow" in err, (out, err)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.2)
    assert not _alive(child), "the trial process outlived the study"
    trials = store.kb().trials(store.kb().find_study("slow"))
    assert [t.state for t in trials] == ["killed"]
    env["SLOW_SECONDS"] = "0"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "resume", "slow", *study],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-1500:]
    finished = store.kb().trials(store.kb().find_study("slow"))
    assert sorted(t.number for t in finished if t.state == "ok") == [0, 1], [(t.number, t.state) for t in finished]
