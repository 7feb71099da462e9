"""`tune-agent-bench parallel`: the waiting job and a count run as its own `tune-agent start`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.bench.parallel import ParallelConfig, run_parallel_bench
from agent.bench.waiting_job import WAIT_JOB_ENV, waiting_job
from agent.errors import JobError


@pytest.mark.slow  # a benchmark command's run: with the benchmarks, out of the default suite
def test_each_count_can_run_as_its_own_start_process_with_epochs_that_wait(tmp_path: Path) -> None:
    """A real `tune-agent start` process per count, on the mlp job whose epochs also wait: the
    trials are all logged, each took at least its waits, and the environment is left as it was."""
    out = tmp_path / "parallel.json"
    config = ParallelConfig(trials=2, epochs=2, workers=(1,), wait=0.5, process=True)
    report = run_parallel_bench(config, out)
    (row,) = report["runs"]
    assert row["workers"] == 1 and row["trials"] == 2 and row["best"] is not None
    assert row["fit_seconds"] >= 2 * 2 * 0.5  # two trials of two epochs, each epoch waiting 0.5 s
    assert row["wall_seconds"] > row["fit_seconds"] and row["wall_ratio"] == 1.0
    assert "launch to exit" in report["protocol"] and "waits 0.5 s" in report["protocol"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    with pytest.raises(JobError, match=WAIT_JOB_ENV):
        waiting_job()  # outside the bench, the spec says what it needs
