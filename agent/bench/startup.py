"""What a person waits for: seconds from pressing Enter on ``tune-agent start`` to its first
output and to its first trial, on a pseudo-terminal (as a person sees it) and through a pipe (as a
log sees it). Each run is a fresh process on a fresh embedded store; medians over ``repeats``. The
commands that read a store are timed here too; :mod:`agent.bench.timed_run` runs and times each one."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.bench.startup_summary import (
    FIRST_FETCH,
    IN_PROCESS,
    READING_PROTOCOL,
    STARTUP_PROTOCOL,
    WARM,
    WARM_PROTOCOL,
    reading_ratios,
    startup_summary,
    warm_arms,
    warm_summary,
)
from agent.bench.timed_run import bench_env, console_script, maybe_warm, timed_run, warm_process


def run_startup_bench(
    repeats: int = 5, dataset: str = "iris", job: str = "mlp", warm: bool = True, say: Any = print
) -> dict[str, Any]:
    """Fresh processes on a terminal and a pipe; ``warm``: piped again, run by a warm process."""
    modes = ["terminal", "pipe"] + ([f"pipe{WARM}"] if warm else [])
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    others: dict[str, list[float | None]] = {}
    with tempfile.TemporaryDirectory() as home, maybe_warm(Path(home), warm, say) as extra:
        for i in range(repeats):
            for mode in modes:
                with tempfile.TemporaryDirectory() as tmp:
                    _startup_run(Path(tmp), mode, i, dataset, job, extra, rows, others)
    return {
        "command": f"tune-agent start --dataset {dataset} --job {job} --trials 2 --epochs 2 --warm-start none",
        "repeats": repeats,
        "summary": startup_summary(rows, others),
        "runs": {m: [{k: v for k, v in r.items() if k != "tail"} for r in runs] for m, runs in rows.items()},
        "protocol": STARTUP_PROTOCOL,
    }


def _startup_run(
    tmp: Path,
    mode: str,
    i: int,
    dataset: str,
    job: str,
    extra: dict[str, str],
    rows: dict[str, list[dict[str, Any]]],
    others: dict[str, list[float | None]],
) -> None:
    """One start-up run in ``mode`` on a fresh store in ``tmp``, added to ``rows``; on a terminal,
    the first output of other commands on the store it left too (added to ``others``)."""
    exe = console_script()
    args = [
        exe,
        "start",
        "--dataset",
        dataset,
        "--job",
        job,
        "--trials",
        "2",
        "--epochs",
        "2",
        "--warm-start",
        "none",
        "--study-name",
        f"startup-{i}",
        "--tracking-uri",
        f"sqlite:///{tmp / 'mlflow.db'}",
        "--artifact-root",
        str(tmp / "art"),
    ]
    rows[mode].append(timed_run(args, tmp, mode == "terminal", b"trial 1/", env=extra if mode.endswith(WARM) else None))
    if mode == "terminal":  # other commands on the store the study left
        store = ["--tracking-uri", f"sqlite:///{tmp / 'mlflow.db'}"]
        for command in (["history", *store], ["best", f"startup-{i}", *store]):
            run = timed_run([exe, *command], tmp, True, b"\n")
            others.setdefault(command[0], []).append(run["first_output_s"])


def new_table(path: Path, seed: int) -> Path:
    """A CSV new to any history: a random 80% of scikit-learn's wine table (its own fingerprint)."""
    import numpy as np
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True, as_frame=True)
    frame = X.assign(label=y)
    rows = np.random.default_rng(seed).permutation(len(frame))[: int(0.8 * len(frame))]
    frame.iloc[np.sort(rows)].to_csv(path, index=False)
    return path


def run_warm_startup_bench(
    starter: Path,
    repeats: int = 3,
    job: str = "mlp",
    refit: bool = True,
    in_process: bool = True,
    warm: bool = True,
    say: Any = print,
) -> dict[str, Any]:
    """Time to first trial of the default warm-started ``start`` against a cold one (``--warm-start
    none --surrogate gp``) on the starter history, each run on a CSV new to the history, piped,
    alternated, from a folder that is not the bootstrap's (a teammate's: no ``models/``, the
    store's published meta-models fetched into a cache of the benchmark's own); ``in_process``:
    both again with every trial trained in the study's process (``TUNE_AGENT_TRIAL_PROCESS=0``);
    ``refit``: the warm start once more with an empty cache each run (a teammate's very first
    start: the published version fetched, nothing fitted). The history is imported and its source
    models built and published once, by ``bootstrap starter`` in its own folder. Two times per
    run: the line ``trial 1/`` (the trial asked and its run made) and when its training began (its
    end less the seconds it says it trained). ``warm``: both again, each command run by a warm
    process (:mod:`agent.warm.process`) started before the runs."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = ["--tracking-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifact-root", str(root / "art")]
        teammate = root / "teammate"
        teammate.mkdir()
        cache = {"TUNE_AGENT_CACHE": str(root / "cache")}
        bootstrap_s = bootstrap_starter(starter, root / "bootstrap", store, cache, say)["seconds"]
        arms = warm_arms(in_process, warm)
        runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
        plan = [(arm, i) for i in range(repeats) for arm in arms]
        if refit:
            runs[FIRST_FETCH] = []
            plan += [(FIRST_FETCH, i) for i in range(repeats)]
        stack = contextlib.ExitStack()
        served = {**stack.enter_context(warm_process(root, say, cache)), **cache} if warm else {}
        for n, (arm, i) in enumerate(plan):
            run = warm_run(root, teammate, arm, n, job, store, cache, served)
            runs[arm].append({k: v for k, v in run.items() if k != "tail"})
            say(_said(arm, i, run))
        stack.close()
    return {
        "command": f"tune-agent start --dataset TABLE.csv --job {job} --trials 1 --epochs 1 [--warm-start none "
        "--surrogate gp]",
        "history": str(starter),
        "bootstrap_seconds": round(bootstrap_s, 1),
        "summary": warm_summary(runs, in_process, warm, refit),
        "runs": runs,
        "protocol": WARM_PROTOCOL,
    }


def bootstrap_starter(
    starter: Path, builder: Path, store: list[str], cache: dict[str, str], say: Any, timeout: float = 3600
) -> dict[str, Any]:
    """Imports ``starter`` and builds and publishes its source models (``bootstrap starter`` in
    ``builder``): the seconds it took and the report it printed last (counts, rate, stages)."""
    builder.mkdir(parents=True, exist_ok=True)
    say(f"importing {starter} and building and publishing its source models (once, in {builder})")
    start = time.perf_counter()
    built = subprocess.run(
        [console_script(), "bootstrap", "starter", str(starter), *store],
        cwd=builder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=bench_env(cache),
    )
    if built.returncode != 0:
        raise RuntimeError(f"bootstrap starter failed: {built.stderr.strip()[-300:]}")
    return {"seconds": time.perf_counter() - start, "report": json.loads(built.stdout.strip().splitlines()[-1])}


def warm_run(
    root: Path,
    teammate: Path,
    arm: str,
    n: int,
    job: str,
    store: list[str],
    cache: dict[str, str],
    served: dict[str, str],
) -> dict[str, Any]:
    """The ``n``-th run of the warm-startup benchmark: ``arm``'s ``start`` on a table of its own,
    from the ``teammate`` folder, timed."""
    table = new_table(root / f"table-{n}.csv", seed=n)
    extra = ["--warm-start", "none", "--surrogate", "gp"] if arm.startswith("cold") else []
    args = [
        console_script(),
        "start",
        "--dataset",
        str(table),
        "--job",
        job,
        "--trials",
        "1",
        "--epochs",
        "1",
        "--study-name",
        f"{arm.split(',')[0].replace(' ', '-')}-{n}",
        *extra,
        *store,
    ]
    env = {**cache, **({"TUNE_AGENT_TRIAL_PROCESS": "0"} if arm.endswith(IN_PROCESS) else {})}
    if arm == FIRST_FETCH:
        env["TUNE_AGENT_CACHE"] = str(root / f"cache-{n}")
    return timed_run(
        args, teammate, False, b"trial 1/", timeout=3600, env_extra=env, env=served if arm.endswith(WARM) else None
    )


def _said(arm: str, i: int, run: dict[str, Any]) -> str:
    """The line that reports one warm-startup run."""
    if run["first_trial_s"] is None:
        return f"{arm} {i + 1}: no trial started (exit {run['exit']}): {run['tail'][-200:]}"
    fitted = " (source GPs fitted)" if run["fitted_sources"] else ""
    return f"{arm} {i + 1}: first trial at {run['first_trial_s']:.1f} s, training from {run['training_s']} s{fitted}"


READING_COMMANDS = ("best", "history", "report", "report --rebuild", "neighbors", "doctor")


def run_reading_bench(
    tracking_uri: str,
    study: str,
    repeats: int = 3,
    baseline: Path | None = None,
    commands: tuple[str, ...] = READING_COMMANDS,
    dataset: str = "wine",
    job: str = "mlp",
    warm: bool = False,
    say: Any = print,
) -> dict[str, Any]:
    """Wall seconds of the commands that read a store (``best STUDY``, ``history``, ``report
    STUDY``, ``report STUDY --rebuild`` (the page built and logged again, as when anything it shows
    changed), ``neighbors --dataset DATASET --job JOB``, ``doctor``), each a fresh process with output to a pipe,
    imports included; with ``baseline`` (a
    folder holding another version's ``agent`` package, e.g. from ``git archive``) the same commands
    of that code too, alternated with this code's, so both see the same machine; ``warm``: this code's
    commands again through the console script, run by a warm process (``tune-agent daemon``)."""
    import shutil

    codes = {"this code": None} | ({f"baseline ({baseline})": baseline} if baseline is not None else {})
    if warm:
        codes[f"this code{WARM}"] = None
    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp, maybe_warm(Path(tmp), warm, say) as extra:
        for i in range(repeats):
            for command in commands:
                for label, code in codes.items():
                    args = _reading_args(command, study, Path(tmp), dataset, job)
                    env = dict(extra) if label.endswith(WARM) else bench_env()
                    if code is not None:
                        env["PYTHONPATH"] = str(code)
                    wall = _reading_run(args, label, tracking_uri, tmp, env)
                    runs.setdefault(f"{command}, {label}", []).append(round(wall, 3))
                    say(f"{i + 1}/{repeats} {command} ({label}): {wall:.2f} s")
                    shutil.rmtree(Path(tmp) / "report", ignore_errors=True)
    median = {key: sorted(v)[len(v) // 2] for key, v in runs.items()}
    return {
        "protocol": READING_PROTOCOL,
        "tracking_uri": tracking_uri,
        "study": study,
        "neighbors_of": [dataset, job],
        "repeats": repeats,
        "runs": runs,
        "median_s": median,
        **reading_ratios(median, commands, codes, warm),
    }


def _reading_args(command: str, study: str, tmp: Path, dataset: str, job: str) -> list[str]:
    """The arguments of one reading command (its name in :data:`READING_COMMANDS`)."""
    return {
        "best": ["best", study],
        "history": ["history"],
        "report": ["report", study, "--out", str(tmp / "report")],
        "report --rebuild": ["report", study, "--rebuild", "--out", str(tmp / "report")],
        "neighbors": ["neighbors", "--dataset", dataset, "--job", job],
        "doctor": ["doctor", "--models-dir", str(tmp / "models")],
    }[command]


def _reading_run(args: list[str], label: str, tracking_uri: str, cwd: str, env: dict[str, str]) -> float:
    """Wall seconds of one reading command, through the console script for a warm process's
    ``label``, else as ``python -m agent.cli``; a failure is an error."""
    launcher = [console_script()] if label.endswith(WARM) else [sys.executable, "-m", "agent.cli"]
    start = time.perf_counter()
    done = subprocess.run(
        [*launcher, *args, "--tracking-uri", tracking_uri],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{label}: {' '.join(args)} failed: {done.stderr.strip()[-300:]}")
    return wall
