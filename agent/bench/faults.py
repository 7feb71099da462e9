"""A kill campaign: studies SIGKILLed at a uniformly random moment between process start and study
end (the first second of a brand-new embedded store included), then continued as a user would
(``resume NAME``; ``start`` again when the study was never created), then checked: every study
finished with its full budget, no trial left running, no slot twice.

One uninterrupted study measures how long a study takes; each of the ``studies`` runs then gets a
fresh store and a kill time drawn uniformly from [0, that duration].
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "TUNE_AGENT_"))}
    return {**env, "TUNE_AGENT_DAEMON": "0"}  # the study's own process is what is killed


def _start_args(exe: str, store: Path, name: str, trials: int, epochs: int, dataset: str, job: str) -> list[str]:
    return [
        exe,
        "start",
        "--dataset",
        dataset,
        "--job",
        job,
        "--trials",
        str(trials),
        "--epochs",
        str(epochs),
        "--warm-start",
        "none",
        "--study-name",
        name,
        "--tracking-uri",
        f"sqlite:///{store / 'mlflow.db'}",
        "--artifact-root",
        str(store / "artifacts"),
    ]


def _check(store: Path, name: str, trials: int) -> dict[str, Any]:
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.records import COUNTED_STATES, TRIAL_RUNNING

    kb = open_knowledge_base(f"sqlite:///{store / 'mlflow.db'}", str(store / "artifacts"))
    study = kb.find_study(name)
    if study is None:
        return {"finished": False, "why": "no study"}
    runs = kb.trials(study)
    counted = [t.number for t in runs if t.state in COUNTED_STATES]
    return {
        "finished": study.status == "finished" and sorted(counted) == list(range(trials)),
        "status": study.status,
        "counted": len(counted),
        "running": sum(t.state == TRIAL_RUNNING for t in runs),
        "duplicated": len(counted) - len(set(counted)),
        "killed_closed": len(runs) - len(counted),
    }


def run_fault_campaign(
    studies: int = 20,
    trials: int = 4,
    epochs: int = 2,
    dataset: str = "iris",
    job: str = "agent.jobs.examples:logistic",
    seed: int = 0,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    exe = str(Path(sys.executable).with_name("tune-agent"))
    rng = random.Random(seed)
    probes = [_probe(exe, trials, epochs, dataset, job) for _attempt in range(2)]
    full = probes[-1]  # the first run pays one-time costs (cold file cache): the second's is the span
    say(
        f"an uninterrupted study takes {full:.1f} s (the first, cold, {probes[0]:.1f} s); killing {studies} studies "
        f"at uniform moments in [0, {full:.1f}] s"
    )
    rows = []
    for i in range(studies):
        at = rng.uniform(0.0, full)
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp)
            name = f"kill-{i}"
            start_args = _start_args(exe, store, name, trials, epochs, dataset, job)
            killed = _kill_at(start_args, store, at)
            how, resumed = _continue(exe, start_args, store, name)
            row = {
                "study": i,
                "kill_at_s": round(at, 2),
                "killed": killed,
                "continued_with": how,
                "exit": resumed.returncode,
                "error": resumed.stderr.strip().splitlines()[-1:] if resumed.returncode else [],
                **_check(store, name, trials),
            }
            rows.append(row)
            say(
                f"  {i + 1}/{studies}: killed at {at:.1f} s ({'running' if killed else 'already done'}), "
                f"{how}: {'finished' if row['finished'] else 'NOT finished'} ({row.get('counted', 0)}/{trials} trials)"
            )
    return {
        "studies": studies,
        "trials": trials,
        "epochs": epochs,
        "dataset": dataset,
        "job": job,
        "uninterrupted_seconds": round(full, 1),
        "first_run_seconds": round(probes[0], 1),
        "finished": sum(r["finished"] for r in rows),
        "killed_while_running": sum(r["killed"] for r in rows),
        "running_left": sum(r.get("running", 0) for r in rows),
        "duplicated": sum(r.get("duplicated", 0) for r in rows),
        "rows": rows,
        "protocol": "fresh embedded store per study; SIGKILL of the agent's process group at a uniform moment "
        "in [0, uninterrupted duration] (a second, warm run's); then `resume NAME` (or `start` again when "
        "resume says the "
        "study was never created); finished = status finished with every slot counted once",
    }


def _probe(exe: str, trials: int, epochs: int, dataset: str, job: str) -> float:
    """Seconds of one uninterrupted study on a fresh store."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe"
        probe.mkdir()
        start = time.perf_counter()
        subprocess.run(
            _start_args(exe, probe, "probe", trials, epochs, dataset, job),
            env=_env(),
            cwd=probe,
            capture_output=True,
            check=True,
            timeout=600,
        )
        return time.perf_counter() - start


def _kill_at(start_args: list[str], store: Path, at: float) -> bool:
    """Starts a study and SIGKILLs its process group ``at`` seconds later; whether it was still running."""
    proc = subprocess.Popen(
        start_args, env=_env(), cwd=store, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    time.sleep(at)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return killed


def _continue(exe: str, start_args: list[str], store: Path, name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """Continues a killed study as a user would: ``resume NAME``, or ``start`` again when resume says
    the study was never created; how, and the command's outcome."""
    resumed = subprocess.run(
        [
            exe,
            "resume",
            name,
            "--tracking-uri",
            f"sqlite:///{store / 'mlflow.db'}",
            "--artifact-root",
            str(store / "artifacts"),
        ],
        env=_env(),
        cwd=store,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if resumed.returncode == 2 and "no study named" in resumed.stderr:
        # killed before the study existed: resume said how to start it
        return "start again", subprocess.run(
            start_args, env=_env(), cwd=store, capture_output=True, text=True, timeout=600
        )
    return "resume", resumed
