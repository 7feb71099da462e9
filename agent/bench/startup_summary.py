"""What the start-up and reading benchmarks report: the arms' names, medians over their runs, the
ratios between arms and the protocols (:mod:`agent.bench.startup` runs the commands)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

WARM = ", warm process"  # an arm's suffix: the command run by a warm process (agent.warm.process)
FIRST_FETCH = "warm, first fetch"  # a teammate's first start: an empty cache, the published version fetched
IN_PROCESS = ", trials in this process"  # the arm's suffix: TUNE_AGENT_TRIAL_PROCESS=0

STARTUP_PROTOCOL = (
    "fresh process (TUNE_AGENT_DAEMON=0) and fresh embedded store per run; 'warm process': the "
    "console script hands the command to a warm process started before the runs; first output: the "
    "first non-blank bytes on the terminal (a pseudo-terminal) or the pipe; first trial: the line "
    "'trial 1/'; training starts: the line 'trial 1 done' less the seconds it says the trial trained"
)
WARM_PROTOCOL = (
    "one store with the starter history, its source models built and published by bootstrap starter "
    "in a folder of its own; each study run from another folder (no models/ there; the published "
    "meta-models fetched into the benchmark's cache), a fresh process, piped, on a CSV new to the "
    "history (80% of wine's rows, its own seed); the "
    "arms alternated; first trial: the line 'trial 1/'; training starts: the line 'trial 1 done' "
    "less the seconds it says the trial trained; 'trials in this process': "
    "TUNE_AGENT_TRIAL_PROCESS=0; 'warm process': run by a warm process started before the runs (every "
    "other arm TUNE_AGENT_DAEMON=0); 'warm, first fetch': an empty cache each run (the published version fetched)"
)
READING_PROTOCOL = (
    "wall seconds of `python -m agent.cli CMD --tracking-uri URI`, each a fresh process, output "
    "to a pipe, imports included; 'warm process': `tune-agent CMD ...` handed to a warm process "
    "started before the runs; commands and code versions alternated; medians over repeats"
)


def startup_summary(
    rows: Mapping[str, list[dict[str, Any]]], others: Mapping[str, list[float | None]]
) -> dict[str, Any]:
    """Per start-up mode: the median seconds to the first output, the first trial and the start of
    its training, and whether every run showed the progress display and exited 0; per other
    command: the median seconds to its first output on a terminal."""
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
    for command, seconds in others.items():
        done = sorted(f for f in seconds if f is not None)
        summary[f"terminal: {command}"] = {"median_first_output_s": round(done[len(done) // 2], 3) if done else None}
    return summary


def warm_arms(in_process: bool, warm: bool) -> list[str]:
    """The warm-startup benchmark's arms (the empty-cache one aside)."""
    return (
        ["warm", "cold"]
        + ([f"warm{IN_PROCESS}", f"cold{IN_PROCESS}"] if in_process else [])
        + ([f"warm{WARM}", f"cold{WARM}"] if warm else [])
    )


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    return round(values[len(values) // 2], 2) if values else None


def warm_summary(runs: Mapping[str, list[dict[str, Any]]], in_process: bool, warm: bool, refit: bool) -> dict[str, Any]:
    """Per arm with a trial: the median seconds to the first trial and to its training's start;
    then the ratios between the arms the options ran."""
    summary: dict[str, Any] = {}
    for arm, rows in runs.items():
        firsts = [r["first_trial_s"] for r in rows if r["first_trial_s"] is not None]
        if firsts:
            summary[arm] = {
                "median_first_trial_s": _median(firsts),
                "median_training_starts_s": _median([r["training_s"] for r in rows if r["training_s"] is not None]),
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
    return summary


def reading_ratios(
    median: Mapping[str, float], commands: Sequence[str], codes: Mapping[str, Path | None], warm: bool
) -> dict[str, dict[str, float]]:
    """Per reading command: this code's median over each baseline's, and (``warm``) the warm
    process's median over a fresh process's."""
    ratios = {
        c: round(median[f"{c}, this code"] / median[f"{c}, {label}"], 3)
        for c in commands
        for label in codes
        if label.startswith("baseline")
    }
    warmed = (
        {c: round(median[f"{c}, this code{WARM}"] / median[f"{c}, this code"], 3) for c in commands} if warm else {}
    )
    return {"this_over_baseline": ratios, "warm_process_over_fresh": warmed}
