"""`kill` (SIGTERM) on a command that runs worker processes ends them with it: before, a stopped
`bench lcbench` left its two pool workers computing, orphaned, for an hour."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pool_workers(pid: int) -> list[int]:
    """The process-pool workers among ``pid``'s children (not multiprocessing's resource tracker)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    workers = []
    for child in out:
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "spawn_main" in cmd:
            workers.append(int(child))
    return workers


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(600)
def test_sigterm_ends_the_pool_workers_of_a_bootstrap_too(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "bootstrap",
            "train",
            "--dataset",
            "wine",
            "--dataset",
            "iris",
            "--dataset",
            "breast-cancer",
            "--configs",
            "64",
            "--epochs",
            "3",
            "--workers",
            "2",
            "--tracking-uri",
            uri,
            "--artifact-root",
            str(tmp_path / "art"),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
            time.sleep(0.5)
            workers = _pool_workers(proc.pid)
        assert len(workers) == 2, "the bootstrap's two workers never started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == -signal.SIGTERM  # still ends as SIGTERM ends a process
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.5)
        assert not [w for w in workers if _alive(w)], "pool workers outlived their parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers + _pool_workers(proc.pid):
            if _alive(w):
                os.kill(w, signal.SIGKILL)
