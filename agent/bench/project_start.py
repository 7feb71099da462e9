"""Your own Lightning project against a built-in job: seconds to the first trial and per trial.

Three arms on the same data (scikit-learn's 8x8 digits) and an MLP in each, every run a fresh
process (no warm process) on a fresh embedded store in a copy of ``examples/lightning_project``,
output piped, the arms alternated round by round so a busy machine weighs on each alike:

- ``builtin``: ``start --dataset digits --job mlp``;
- ``module``: ``start --model lightning_project.model:LitClassifier --data
  lightning_project.data:DigitsData --space space.yaml`` (the classes built in the trial's process);
- ``cli``: ``start --cli main.py --config base.yaml --space space.yaml`` (the user's script run
  for each trial, its classes and data sample from one probe run first).

For each run: seconds to the first line, to the first trial's line and to its end, the longest
silence before the first trial, the whole command, and the mean seconds a trial took as the study
reported it. Medians over rounds, and each project arm's ratio to ``builtin`` in the same run.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ARMS = ("builtin", "module", "cli")
TRIAL_DONE = re.compile(r"trial \d+ done \([^)]*\): .*? in ([0-9.]+) s")
PROTOCOL = (
    "Each run: a fresh `tune-agent start` process (TUNE_AGENT_DAEMON=0), output piped, on a fresh "
    "embedded store in a fresh copy of examples/lightning_project; arms alternated within each round. "
    "first_line/first_trial/trial_one_done: seconds from launch; longest_silence: the longest gap "
    "between lines (or from launch) before the first trial's line; trial_seconds: the mean of what "
    "the study reported per trial. Figures are medians over rounds; ratios divide by the builtin arm's."
)


def arm_command(arm: str, trials: int, epochs: int) -> list[str]:
    base = ["start", "--trials", str(trials), "--epochs", str(epochs), "--warm-start", "none"]
    if arm == "builtin":
        return [*base, "--dataset", "digits", "--job", "mlp"]
    if arm == "module":
        model, data = "lightning_project.model:LitClassifier", "lightning_project.data:DigitsData"
        return [*base, "--model", model, "--data", data, "--space", "space.yaml"]
    return [*base, "--cli", "main.py", "--config", "base.yaml", "--space", "space.yaml"]


def timed_run(argv: list[str], cwd: Path, timeout: float = 900) -> dict[str, Any]:
    """Runs ``argv`` piped and notes when each line came."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "TUNE_AGENT_"))}
    env.update({"TUNE_AGENT_DAEMON": "0", "PYTHONUNBUFFERED": "1"})
    start = time.perf_counter()
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: list[tuple[float, str]] = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append((time.perf_counter() - start, line.rstrip()))
    code = process.wait(timeout=timeout)
    total = time.perf_counter() - start
    return {"code": code, "total": total, "lines": lines}


def run_figures(run: dict[str, Any]) -> dict[str, float]:
    lines = run["lines"]
    first_trial = next((t for t, line in lines if line.startswith("trial 1/")), float("nan"))
    done = next((t for t, line in lines if line.lstrip().startswith("trial 1 done")), float("nan"))
    before = [0.0] + [t for t, _ in lines if t <= first_trial]
    gaps = [b - a for a, b in zip(before, before[1:])]
    trial_seconds = [float(m.group(1)) for _, line in lines if (m := TRIAL_DONE.search(line))]
    return {
        "first_line": lines[0][0] if lines else float("nan"),
        "first_trial": first_trial,
        "trial_one_done": done,
        "longest_silence": max(gaps) if gaps else float("nan"),
        "total": float(run["total"]),
        "trial_seconds": statistics.mean(trial_seconds) if trial_seconds else float("nan"),
    }


def run_project_start_bench(
    project: Path, rounds: int = 3, trials: int = 3, epochs: int = 2, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """The benchmark (see the module docstring); ``project`` is ``examples/lightning_project``."""
    from agent.bench.fingerprint import engine_fingerprint, environment

    exe = str(Path(sys.executable).with_name("tune-agent"))
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    for round_ in range(rounds):
        for arm in ARMS if round_ % 2 == 0 else tuple(reversed(ARMS)):
            with tempfile.TemporaryDirectory(prefix="tune-agent-project-bench-") as tmp:
                folder = Path(tmp) / "project"
                shutil.copytree(
                    project, folder, ignore=shutil.ignore_patterns("mlflow", "models", "report", "__pycache__")
                )
                run = timed_run([exe, *arm_command(arm, trials, epochs)], folder)
            if run["code"] != 0:
                tail = " | ".join(line for _, line in run["lines"][-3:])
                raise RuntimeError(f"arm {arm} failed with exit code {run['code']}: {tail}")
            figures = run_figures(run)
            runs[arm].append(figures)
            say(
                f"round {round_ + 1}/{rounds} {arm}: first trial at {figures['first_trial']:.1f} s, "
                f"longest silence {figures['longest_silence']:.1f} s, {figures['trial_seconds']:.1f} s a trial"
            )
    summary = {arm: {k: statistics.median(r[k] for r in runs[arm]) for k in runs[arm][0]} for arm in ARMS}
    ratios = {
        arm: {k: summary[arm][k] / summary["builtin"][k] for k in ("first_trial", "trial_seconds", "total")}
        for arm in ("module", "cli")
    }
    return {
        "command": f"tune-agent-bench project --rounds {rounds} --trials {trials} --epochs {epochs}",
        "engine": engine_fingerprint("bench/project_start.py"),
        "environment": environment(),
        "protocol": PROTOCOL,
        "summary": summary,
        "ratio_to_builtin": ratios,
        "runs": runs,
    }
