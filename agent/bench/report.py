"""The transfer benchmark's report: metrics JSON, a wide regret CSV and a regret plot per scenario.

Files are named after the scenario (``metrics/<scenario>[_<control>].json``,
``plots/<scenario>_regret.csv|png``) so several scenarios can sit side by side.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np

RANK_AT = 5


# -- report --------------------------------------------------------------------------------------
def average_ranks(regret: dict[str, list[list[float]]], trial: int) -> dict[str, float]:
    """Mean rank of each method (1 = lowest regret) at ``trial``, ties averaged, over all runs."""
    from scipy.stats import rankdata

    names = list(regret)
    at = np.array([[curve[trial - 1] for curve in regret[m]] for m in names])  # methods x runs
    ranks = rankdata(at, axis=0, method="average")
    return {m: float(r) for m, r in zip(names, ranks.mean(axis=1))}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """The metrics file's content; trial counts beyond the budget are left out."""
    budget = len(next(iter(result["regret"].values()))[0])
    ranks = average_ranks(result["regret"], min(RANK_AT, budget))
    methods = {}
    for name, curves in result["regret"].items():
        curves_arr = np.asarray(curves)
        entry = {
            f"regret@{k}": round(float(curves_arr[:, k - 1].mean()), 4)
            for k in result["config"]["report_at"]
            if k <= budget
        }
        methods[name] = {**entry, f"rank@{RANK_AT}": round(ranks[name], 4)}
    return {
        "tasks": len(result["tasks"]),
        "seeds": result["seeds"],
        "methods": methods,
        "suggest_seconds": {m: round(s, 5) for m, s in result["suggest_seconds"].items()},
        # median seconds from a run's start (its store already holding the history) to its first suggestion
        "first_trial_seconds": {m: round(s, 3) for m, s in result.get("first_trial_seconds", {}).items()},
        # median seconds a (task, seed) spent building its history's source models before its studies,
        # as `tune-agent meta publish` builds them for the product (shared by that cell's methods)
        "source_models_seconds": {m: round(s, 3) for m, s in result.get("source_models_seconds", {}).items()},
        "wall_seconds": round(result["wall_seconds"], 2),
        "runs_from_journal": result.get("runs_from_journal", {}),
    }


def write_report(result: dict[str, Any], metrics_path: Path, plots_dir: Path) -> None:
    """Writes the metrics file, ``<scenario>_regret.csv`` and ``<scenario>_regret.png`` in ``plots_dir``."""
    metrics_path, plots_dir = Path(metrics_path), Path(plots_dir)
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(summarise(result), indent=2) + "\n")
    means = {m: np.asarray(c).mean(axis=0) for m, c in result["regret"].items()}
    name = result["scenario"]
    with open(plots_dir / f"{name}_regret.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["trial", *means])  # wide: one column per method, one DVC plot line each
        budget = len(next(iter(means.values())))
        writer.writerows([t + 1, *(round(float(c[t]), 6) for c in means.values())] for t in range(budget))
    _plot(
        means,
        plots_dir / f"{name}_regret.png",
        f"{name} (YAHPO Gym), {result['job']}, {len(result['tasks'])} tasks x {result['seeds']} seeds",
    )


def _plot(means: dict[str, np.ndarray], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for m, curve in means.items():
        # A log axis cannot show 0: regrets below 1e-4 are drawn at 1e-4.
        ax.plot(np.arange(1, len(curve) + 1), np.maximum(curve, 1e-4), label=m)
    ax.set(yscale="log", xlabel="trials", ylabel="mean normalised regret", title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
