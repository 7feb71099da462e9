"""What a person waits for: seconds from pressing Enter on ``tune-agent start`` to its first
output and to its first trial, on a pseudo-terminal (as a person sees it) and through a pipe (as a
log sees it). Each run is a fresh process on a fresh embedded store; medians over ``repeats``."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRIAL_ONE_DONE = re.compile(rb"trial 1 done \([^)]*\): .*? in ([0-9.]+) s")
WARM = ", warm process"  # an arm's suffix: the command run by a warm process (agent.ops.warm_process)
FIRST_FETCH = "warm, first fetch"  # a teammate's first start: an empty cache, the published version fetched


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The benchmark's own environment less any tune-agent or tracking setting; a fresh process
    (``TUNE_AGENT_DAEMON=0``) unless ``extra`` says otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "TUNE_AGENT_"))}
    env.update({"COLUMNS": "120", "TERM": env.get("TERM", "xterm"), "TUNE_AGENT_DAEMON": "0", **(extra or {})})
    return env


@contextlib.contextmanager
def warm_process(root: Path, say: Any = print, extra: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """A warm process of its own (in ``root``) for the arms that use one, started and waited for
    before them and stopped after; yields the environment those arms run with, whole: taken now,
    since this process's own environment changes as it imports (scikit-learn sets ``KMP_*``
    variables), and a command from another environment is not the warm process's to run."""
    exe = str(Path(sys.executable).with_name("tune-agent"))
    env = _env({"TUNE_AGENT_DAEMON": "1", "TUNE_AGENT_DAEMON_DIR": str(root / "warm-process"), **(extra or {})})
    say("starting a warm process for the arms that use one")
    started = subprocess.run(
        [exe, "daemon", "start", "--wait", "600"], env=env, capture_output=True, text=True, timeout=660
    )
    if started.returncode != 0:
        raise RuntimeError(f"the warm process did not start: {started.stderr.strip()[-300:]}")
    try:
        yield env
    finally:
        status = subprocess.run([exe, "daemon", "status"], env=env, capture_output=True, text=True, timeout=60)
        say(f"the warm process at the end: {status.stdout.strip()}")
        subprocess.run([exe, "daemon", "stop"], env=env, capture_output=True, timeout=60)


def _timed_run(
    args: list[str],
    cwd: Path,
    tty: bool,
    marker: bytes,
    timeout: float = 300,
    env_extra: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Seconds to the first output, to ``marker`` and to trial 1's end; ``training_s``: when trial
    1's training began (its end less the seconds it says it trained), wherever it trained. ``env``:
    the whole environment (a warm process's arms); else :func:`_env` with ``env_extra``."""
    env = dict(env) if env is not None else _env(env_extra)
    if tty:
        leader, follower = pty.openpty()
        proc = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=follower, stdout=follower, stderr=follower, close_fds=True
        )
        os.close(follower)
        read_fd = leader
    else:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        read_fd = proc.stdout.fileno()  # type: ignore[union-attr]
    start = time.perf_counter()
    first = marked = done = None
    seen = b""
    while time.perf_counter() - start < timeout:
        ready, _, _ = select.select([read_fd], [], [], 0.05)
        if ready:
            try:
                chunk = os.read(read_fd, 65536)
            except OSError:  # the pty closes when the process ends
                chunk = b""
            if not chunk:
                break
            now = time.perf_counter() - start
            if first is None and chunk.strip():
                first = now
            seen += chunk
            if marked is None and marker in seen:
                marked = now
            if done is None and TRIAL_ONE_DONE.search(seen):
                done = now
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    if tty:
        os.close(read_fd)
    text = seen.decode(errors="replace")
    found = TRIAL_ONE_DONE.search(seen)
    training = round(done - float(found.group(1)), 3) if done is not None and found else None
    return {
        "first_output_s": first,
        "first_trial_s": marked,
        "training_s": training,
        "exit": proc.returncode,
        "progress_display": "\x1b[" in text and "ETA" in text,
        "fitted_sources": "source models: fitting" in text,
        "fetched": "meta-models: fetching" in text,
        "tail": text[-300:],
    }


def run_startup_bench(
    repeats: int = 5, dataset: str = "iris", job: str = "mlp", warm: bool = True, say: Any = print
) -> dict[str, Any]:
    """Fresh processes on a terminal and a pipe; ``warm``: piped again, run by a warm process."""
    exe = str(Path(sys.executable).with_name("tune-agent"))
    modes = ["terminal", "pipe"] + ([f"pipe{WARM}"] if warm else [])
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    others: dict[str, list[float | None]] = {}
    with (
        tempfile.TemporaryDirectory() as home,
        warm_process(Path(home), say) if warm else contextlib.nullcontext({}) as extra,
    ):
        for i in range(repeats):
            for mode in modes:
                with tempfile.TemporaryDirectory() as tmp:
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
                        f"sqlite:///{Path(tmp) / 'mlflow.db'}",
                        "--artifact-root",
                        str(Path(tmp) / "art"),
                    ]
                    rows[mode].append(
                        _timed_run(
                            args, Path(tmp), mode == "terminal", b"trial 1/", env=extra if mode.endswith(WARM) else None
                        )
                    )
                    if mode == "terminal":  # other commands on the store the study left
                        store = ["--tracking-uri", f"sqlite:///{Path(tmp) / 'mlflow.db'}"]
                        for command in (["history", *store], ["best", f"startup-{i}", *store]):
                            run = _timed_run([exe, *command], Path(tmp), True, b"\n")
                            others.setdefault(command[0], []).append(run["first_output_s"])
    summary = {}
    for mode, runs in rows.items():
        firsts = sorted(r["first_output_s"] for r in runs if r["first_output_s"] is not None)
        trials = sorted(r["first_trial_s"] for r in runs if r["first_trial_s"] is not None)
        trained = sorted(r["training_s"] for r in runs if r["training_s"] is not None)
        summary[mode] = {
            "median_first_output_s": round(firsts[len(firsts) // 2], 3) if firsts else None,
            "median_first_trial_s": round(trials[len(trials) // 2], 3) if trials else None,
            "median_training_starts_s": round(trained[len(trained) // 2], 3) if trained else None,
            "progress_display": all(r["progress_display"] for r in runs),
            "all_exit_0": all(r["exit"] == 0 for r in runs),
        }
    for command, firsts in others.items():
        done = sorted(f for f in firsts if f is not None)
        summary[f"terminal: {command}"] = {"median_first_output_s": round(done[len(done) // 2], 3) if done else None}
    return {
        "command": f"tune-agent start --dataset {dataset} --job {job} --trials 2 --epochs 2 --warm-start none",
        "repeats": repeats,
        "summary": summary,
        "runs": {m: [{k: v for k, v in r.items() if k != "tail"} for r in runs] for m, runs in rows.items()},
        "protocol": "fresh process (TUNE_AGENT_DAEMON=0) and fresh embedded store per run; 'warm process': the "
        "console script hands the command to a warm process started before the runs; first output: the "
        "first non-blank bytes on the terminal (a pseudo-terminal) or the pipe; first trial: the line "
        "'trial 1/'; training starts: the line 'trial 1 done' less the seconds it says the trial trained",
    }


def _table(path: Path, seed: int) -> Path:
    """A CSV new to any history: a random 80% of scikit-learn's wine table (its own fingerprint)."""
    import numpy as np
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True, as_frame=True)
    frame = X.assign(label=y)
    rows = np.random.default_rng(seed).permutation(len(frame))[: int(0.8 * len(frame))]
    frame.iloc[np.sort(rows)].to_csv(path, index=False)
    return path


IN_PROCESS = ", trials in this process"  # the arm's suffix: TUNE_AGENT_TRIAL_PROCESS=0


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
    models built and published once, by ``bootstrap --starter`` in its own folder. Two times per
    run: the line ``trial 1/`` (the trial asked and its run made) and when its training began (its
    end less the seconds it says it trained). ``warm``: both again, each command run by a warm
    process (:mod:`agent.ops.warm_process`) started before the runs."""
    exe = str(Path(sys.executable).with_name("tune-agent"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = ["--tracking-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifact-root", str(root / "art")]
        builder, teammate = root / "bootstrap", root / "teammate"
        builder.mkdir()
        teammate.mkdir()
        cache = {"TUNE_AGENT_CACHE": str(root / "cache")}
        say(f"importing {starter} and building and publishing its source models (once, in {builder})")
        start = time.perf_counter()
        built = subprocess.run(
            [exe, "bootstrap", "--starter", str(starter), *store],
            cwd=builder,
            capture_output=True,
            text=True,
            timeout=3600,
            env=_env(cache),
        )
        if built.returncode != 0:
            raise RuntimeError(f"bootstrap --starter failed: {built.stderr.strip()[-300:]}")
        bootstrap_s = time.perf_counter() - start
        arms = (
            ["warm", "cold"]
            + ([f"warm{IN_PROCESS}", f"cold{IN_PROCESS}"] if in_process else [])
            + ([f"warm{WARM}", f"cold{WARM}"] if warm else [])
        )
        runs: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
        plan = [(arm, i) for i in range(repeats) for arm in arms]
        if refit:
            runs[FIRST_FETCH] = []
            plan += [(FIRST_FETCH, i) for i in range(repeats)]
        stack = contextlib.ExitStack()
        served = {**stack.enter_context(warm_process(root, say, cache)), **cache} if warm else {}
        for n, (arm, i) in enumerate(plan):
            table = _table(root / f"table-{n}.csv", seed=n)
            extra = ["--warm-start", "none", "--surrogate", "gp"] if arm.startswith("cold") else []
            args = [
                exe,
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
            run = _timed_run(
                args,
                teammate,
                False,
                b"trial 1/",
                timeout=3600,
                env_extra=env,
                env=served if arm.endswith(WARM) else None,
            )
            runs[arm].append({k: v for k, v in run.items() if k != "tail"})
            fitted = run["fitted_sources"]
            say(
                f"{arm} {i + 1}: first trial at {run['first_trial_s']:.1f} s, training from {run['training_s']} s"
                + (" (source GPs fitted)" if fitted else "")
                if run["first_trial_s"] is not None
                else f"{arm} {i + 1}: no trial started (exit {run['exit']}): {run['tail'][-200:]}"
            )
        stack.close()
    summary: dict[str, Any] = {}

    def median(values: list[float]) -> float | None:
        values = sorted(values)
        return round(values[len(values) // 2], 2) if values else None

    for arm, rows in runs.items():
        firsts = [r["first_trial_s"] for r in rows if r["first_trial_s"] is not None]
        if firsts:
            summary[arm] = {
                "median_first_trial_s": median(firsts),
                "median_training_starts_s": median([r["training_s"] for r in rows if r["training_s"] is not None]),
                "runs": len(rows),
                "all_exit_0": all(r["exit"] == 0 for r in rows),
            }

    def ratio(a: str, b: str, key: str = "median_training_starts_s") -> float | None:
        if a in summary and b in summary and summary[a].get(key) and summary[b].get(key):
            return round(summary[a][key] / summary[b][key], 2)
        return None

    summary["warm_over_cold"] = ratio("warm", "cold", "median_first_trial_s")
    summary["warm_over_cold_training"] = ratio("warm", "cold")
    if in_process:
        summary["trial_process_over_in_process_cold"] = ratio("cold", f"cold{IN_PROCESS}")
        summary["trial_process_over_in_process_warm"] = ratio("warm", f"warm{IN_PROCESS}")
    if warm:
        summary["warm_process_over_fresh_cold"] = ratio(f"cold{WARM}", "cold")
        summary["warm_process_over_fresh_warm"] = ratio(f"warm{WARM}", "warm")
        summary["warm_over_cold_warm_process"] = ratio(f"warm{WARM}", f"cold{WARM}")
    if refit:
        summary["first_fetch_over_warm"] = ratio(FIRST_FETCH, "warm", "median_first_trial_s")
    return {
        "command": f"tune-agent start --dataset TABLE.csv --job {job} --trials 1 --epochs 1 [--warm-start none "
        "--surrogate gp]",
        "history": str(starter),
        "bootstrap_seconds": round(bootstrap_s, 1),
        "summary": summary,
        "runs": runs,
        "protocol": "one store with the starter history, its source models built and published by bootstrap --starter "
        "in a folder of its own; each study run from another folder (no models/ there; the published "
        "meta-models fetched into the benchmark's cache), a fresh process, piped, on a CSV new to the "
        "history (80% of wine's rows, its own seed); the "
        "arms alternated; first trial: the line 'trial 1/'; training starts: the line 'trial 1 done' "
        "less the seconds it says the trial trained; 'trials in this process': "
        "TUNE_AGENT_TRIAL_PROCESS=0; 'warm process': run by a warm process started before the runs (every "
        "other arm TUNE_AGENT_DAEMON=0); 'warm, first fetch': an empty cache each run (the published version fetched)",
    }


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
    with (
        tempfile.TemporaryDirectory() as tmp,
        warm_process(Path(tmp), say) if warm else contextlib.nullcontext({}) as extra,
    ):
        for i in range(repeats):
            for command in commands:
                for label, code in codes.items():
                    args = {
                        "best": ["best", study],
                        "history": ["history"],
                        "report": ["report", study, "--out", str(Path(tmp) / "report")],
                        "report --rebuild": ["report", study, "--rebuild", "--out", str(Path(tmp) / "report")],
                        "neighbors": ["neighbors", "--dataset", dataset, "--job", job],
                        "doctor": ["doctor", "--models-dir", str(Path(tmp) / "models")],
                    }[command]
                    env = dict(extra) if label.endswith(WARM) else _env()
                    if code is not None:
                        env["PYTHONPATH"] = str(code)
                    launcher = (
                        [str(Path(sys.executable).with_name("tune-agent"))]
                        if label.endswith(WARM)
                        else [sys.executable, "-m", "agent.cli"]
                    )
                    start = time.perf_counter()
                    done = subprocess.run(
                        [*launcher, *args, "--tracking-uri", tracking_uri],
                        cwd=tmp,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=600,
                    )
                    wall = time.perf_counter() - start
                    if done.returncode != 0:
                        raise RuntimeError(f"{label}: {' '.join(args)} failed: {done.stderr.strip()[-300:]}")
                    runs.setdefault(f"{command}, {label}", []).append(round(wall, 3))
                    say(f"{i + 1}/{repeats} {command} ({label}): {wall:.2f} s")
                    shutil.rmtree(Path(tmp) / "report", ignore_errors=True)
    median = {key: sorted(v)[len(v) // 2] for key, v in runs.items()}
    ratios = {
        c: round(median[f"{c}, this code"] / median[f"{c}, {label}"], 3)
        for c in commands
        for label in codes
        if label.startswith("baseline")
    }
    warmed = (
        {c: round(median[f"{c}, this code{WARM}"] / median[f"{c}, this code"], 3) for c in commands} if warm else {}
    )
    return {
        "protocol": "wall seconds of `python -m agent.cli CMD --tracking-uri URI`, each a fresh process, output "
        "to a pipe, imports included; 'warm process': `tune-agent CMD ...` handed to a warm process "
        "started before the runs; commands and code versions alternated; medians over repeats",
        "tracking_uri": tracking_uri,
        "study": study,
        "neighbors_of": [dataset, job],
        "repeats": repeats,
        "runs": runs,
        "median_s": median,
        "this_over_baseline": ratios,
        "warm_process_over_fresh": warmed,
    }
