"""Ray's start begun before the study is prepared (agent.tuning.ray_start): a local instance that
outlives the thread that started it, warmed workers, and a refusal of bad input that neither waits
for Ray nor leaves it running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)}


def test_a_local_ray_study_runs_on_workers_started_before_it_was_prepared(store) -> None:  # noqa: ANN001
    """`start --workers 2` on a local instance: Ray started on a background thread (its processes
    would die with that thread, were it to end), its workers warmed, every trial logged once and
    nothing from Ray's start on stderr."""
    from agent.knowledge.base import TRIAL_OK

    run = subprocess.run([sys.executable, "-m", "agent.cli", "start", "--dataset", "iris", "--job",
                          "agent.jobs.examples:logistic", "--trials", "4", "--epochs", "2", "--workers", "2",
                          "--warm-start", "none", "--study-name", "local-ray", *store.args],
                         env=ENV, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "running 2 trial(s) at once on a local Ray instance, 1 more asked ahead" in run.stdout
    assert "SIGTERM handler" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-2000:]
    trials = store.kb().trials(store.kb().find_study("local-ray"))
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == TRIAL_OK for t in trials), [(t.number, t.state, t.reason) for t in trials]


def test_bad_input_with_workers_is_refused_in_one_line_and_stops_the_ray_it_began(tmp_path: Path) -> None:
    """Ray's start is begun before the dataset is checked; the refusal is one line, exit 2, and
    the instance begun is stopped (abandoned without the refusal waiting for Ray's start)."""
    script = f"""
import contextlib, io, json, threading
import ray
from agent.cli import main
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        main(["start", "--dataset", "no-such-dataset", "--job", "mlp", "--workers", "2", "--warm-start", "none",
              "--tracking-uri", "sqlite:///{tmp_path / 'mlflow.db'}"])
        code = 0
    except SystemExit as exc:
        code = exc.code
began = [t for t in threading.enumerate() if t.name == "tune-agent-ray-start"]
for t in began:
    t.join(timeout=120)
print(json.dumps({{"exit": code, "output": err.getvalue().strip(), "began": len(began),
                  "ended": not any(t.is_alive() for t in began), "ray": ray.is_initialized()}}))
"""
    run = subprocess.run([sys.executable, "-c", script], env=ENV, cwd=REPO, capture_output=True, text=True, timeout=200)
    assert run.returncode == 0, run.stderr[-2000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["exit"] == 2
    assert len(seen["output"].splitlines()) == 1 and "no-such-dataset" in seen["output"], seen["output"]
    assert seen["began"] == 1 and seen["ended"] and not seen["ray"]  # begun, then stopped: nothing left running
