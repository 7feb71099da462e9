"""A kill campaign as a user makes one: the ``start``/``resume`` command killed, not its whole group.

Each study starts on a fresh embedded store; the command (the client, when a warm process runs the
study; the study's own process otherwise) is SIGKILLed at a uniform moment in [0, an uninterrupted
study's duration], and the study is continued with ``tune-agent resume`` (whose first run is itself
killed at a uniform moment, half the time) until a continuation ends by itself. A continuation
refused because the study still runs elsewhere (the killed command's process not yet gone) is
tried again a second later, as a person would. Then, per study: one study run, exactly the budget
finished, no trial left running, and no configuration finished twice. Run with the warm process on
(``warm``) and off: killing a client must take the command it forked down with it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.bench.faults import _start_args

CONTINUE_TRIES = 12
BUSY = "is being run by"


def _env(warm_dir: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "TUNE_AGENT_"))}
    if warm_dir is None:
        return {**env, "TUNE_AGENT_DAEMON": "0"}
    return {**env, "TUNE_AGENT_DAEMON": "1", "TUNE_AGENT_DAEMON_DIR": str(warm_dir)}


def _kill_client(args: list[str], env: dict[str, str], cwd: Path, at: float) -> bool:
    """Runs ``args`` and SIGKILLs that one process ``at`` seconds in; whether it was still running."""
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + at
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return killed


def _resume_args(exe: str, store: Path, name: str) -> list[str]:
    uri = f"sqlite:///{store / 'mlflow.db'}"
    return [exe, "resume", name, "--tracking-uri", uri, "--artifact-root", str(store / "artifacts")]


def _continue(
    exe: str, start: list[str], store: Path, name: str, env: dict[str, str], kill_at: float | None
) -> dict[str, Any]:
    """Continues until a continuation ends by itself: how many runs, kills and busy refusals it took."""
    runs = kills = busy = 0
    for _ in range(CONTINUE_TRIES):
        runs += 1
        args = _resume_args(exe, store, name)
        if kill_at is not None:  # the first continuation is killed too (when it is still running then)
            kills += _kill_client(args, env, store, kill_at)
            kill_at = None
            continue
        done = subprocess.run(args, env=env, cwd=store, capture_output=True, text=True, timeout=600)
        if done.returncode == 2 and BUSY in done.stderr:
            busy += 1
            time.sleep(1.0)
            continue
        if done.returncode == 2 and "no study named" in done.stderr:  # killed before the study existed
            done = subprocess.run(start, env=env, cwd=store, capture_output=True, text=True, timeout=600)
        return {"runs": runs, "continuation_kills": kills, "busy_refusals": busy, "exit": done.returncode,
                "error": done.stderr.strip().splitlines()[-1:] if done.returncode else []}  # fmt: skip
    return {"runs": runs, "continuation_kills": kills, "busy_refusals": busy, "exit": None, "error": ["gave up"]}


def _check(store: Path, name: str, trials: int) -> dict[str, Any]:
    from agent.knowledge import open_knowledge_base
    from agent.knowledge.records import COUNTED_STATES, TRIAL_OK, TRIAL_RUNNING

    kb = open_knowledge_base(f"sqlite:///{store / 'mlflow.db'}", str(store / "artifacts"))
    runs = [s for s in kb.list_studies() if s.name == name]
    if not runs:
        return {"ok": False, "why": "no study"}
    study = runs[-1]
    trial_runs = kb.trials(study)
    counted = [t.number for t in trial_runs if t.state in COUNTED_STATES]
    finished = [json.dumps(dict(t.config), sort_keys=True) for t in trial_runs if t.state == TRIAL_OK]
    row = {
        "study_runs": len(runs),
        "status": study.status,
        "counted": len(counted),
        "running": sum(t.state == TRIAL_RUNNING for t in trial_runs),
        "slots_twice": len(counted) - len(set(counted)),
        "configs_finished_twice": len(finished) - len(set(finished)),
        "killed_closed": sum(t.state not in COUNTED_STATES + (TRIAL_RUNNING,) for t in trial_runs),
    }
    row["ok"] = (
        row["study_runs"] == 1
        and study.status == "finished"
        and sorted(counted) == list(range(trials))
        and row["running"] == 0
        and row["configs_finished_twice"] == 0
    )
    return row


def run_client_campaign(
    studies: int = 20,
    trials: int = 4,
    epochs: int = 2,
    dataset: str = "iris",
    job: str = "agent.jobs.examples:logistic",
    seed: int = 0,
    warm: bool = False,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The campaign (see the module docstring), with the warm process on or off."""
    from contextlib import ExitStack

    from agent.bench.fingerprint import engine_fingerprint, environment
    from agent.bench.timed_run import console_script, warm_process

    exe = console_script()
    rng = random.Random(seed)
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tune-agent-faults-")))
        env = stack.enter_context(warm_process(root, say)) if warm else _env(None)
        # an uninterrupted study's span as the campaign runs it (through the warm process, with one);
        # the first pays one-time costs (a cold file cache, the warm process's first fork): the second's
        full = [_timed_study(exe, root / f"probe-{i}", env, (trials, epochs, dataset, job)) for i in range(2)][-1]
        say(f"an uninterrupted study takes {full:.1f} s; {studies} studies, warm process {'on' if warm else 'off'}")
        rows = [
            _one_study(i, studies, rng, full, root, exe, env, (trials, epochs, dataset, job), say)
            for i in range(studies)
        ]
    return {
        "command": f"tune-agent-bench faults --clients {'--warm ' if warm else ''}--studies {studies}",
        "engine": engine_fingerprint("bench/faults_clients.py"),
        "environment": environment(),
        "warm_process": warm,
        "studies": studies,
        "trials": trials,
        "epochs": epochs,
        "dataset": dataset,
        "job": job,
        "uninterrupted_seconds": round(full, 1),
        "ok": sum(r["ok"] for r in rows),
        "killed_while_running": sum(r["killed"] for r in rows),
        "continuations_killed": sum(r["continuation_kills"] for r in rows),
        "busy_refusals": sum(r["busy_refusals"] for r in rows),
        "running_left": sum(r.get("running", 0) for r in rows),
        "configs_finished_twice": sum(r.get("configs_finished_twice", 0) for r in rows),
        "rows": rows,
        "protocol": (__doc__ or "").split("\n\n", 1)[1].replace("\n", " ").strip(),
    }


def _timed_study(exe: str, store: Path, env: dict[str, str], study: tuple[int, int, str, str]) -> float:
    """Seconds of one uninterrupted study on a fresh store, run as the campaign runs them."""
    trials, epochs, dataset, job = study
    store.mkdir()
    start = time.perf_counter()
    args = _start_args(exe, store, "probe", trials, epochs, dataset, job)
    subprocess.run(args, env=env, cwd=store, capture_output=True, check=True, timeout=600)
    return time.perf_counter() - start


def _one_study(
    i: int,
    studies: int,
    rng: random.Random,
    full: float,
    root: Path,
    exe: str,
    env: dict[str, str],
    study: tuple[int, int, str, str],
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Study ``i``: started and killed, continued until done, checked."""
    trials, epochs, dataset, job = study
    at = rng.uniform(0.0, full)
    again = rng.uniform(0.0, full) if rng.random() < 0.5 else None
    store = root / f"study-{i}"
    store.mkdir()
    name = f"kill-{i}"
    start = _start_args(exe, store, name, trials, epochs, dataset, job)
    killed = _kill_client(start, env, store, at)
    row = {"study": i, "kill_at_s": round(at, 2), "killed": killed,
           "continuation_killed_at_s": None if again is None else round(again, 2),
           **_continue(exe, start, store, name, env, again), **_check(store, name, trials)}  # fmt: skip
    say(f"  {i + 1}/{studies}: killed at {at:.1f} s, {row['runs']} continuation(s): "
        f"{'ok' if row['ok'] else 'NOT ok: ' + json.dumps(row)}")  # fmt: skip
    return row
