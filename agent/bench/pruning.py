"""`tune-agent-bench pruning`: wall time to reach the unpruned study's best, with each pruner.

The same study (job, dataset, trials, epochs, seed; cold GP) runs once per pruner on a fresh sqlite
MLflow store, through the product's loop (`tune-agent start --pruner P`). The unpruned study's best
validation value is the target; for every pruner the figure is the wall time until its best so far
first reached that target (or "not reached"), as a ratio to the time the unpruned study took to
find it, measured in the same invocation.

With ``same_time`` (the default) the other pruners get what a user would give them: the first
pruner's wall time as a ``timeout`` and ``SAME_TIME_TRIALS``x its trials, so the time pruning saves
goes into more configurations; with the same trial count (``same_time=False``) a pruned study just
ends sooner with fewer configurations finished.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agent.execution.progress import SilentReporter

SAME_TIME_TRIALS = 3


@dataclass(frozen=True)
class PruningBenchConfig:
    job: str = "cnn"
    dataset: str = "mnist-5k"
    trials: int = 20
    epochs: int = 9
    seed: int = 0
    seeds: int = 1
    pruners: tuple[str, ...] = ("none", "asha", "median")
    same_time: bool = True


class TimelineReporter(SilentReporter):
    """Keeps (seconds since the study began, best value so far) after every finished trial."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.points: list[tuple[float, float | None]] = []

    def trial_finished(self, trial: Any, best: Any, trials: Any) -> None:
        self.points.append((time.perf_counter() - self.start, None if best is None else float(best.value)))


def time_to_reach(points: list[tuple[float, float | None]], target: float, sign: float) -> float | None:
    """First time the best so far was at least as good as ``target`` (``sign`` maximises)."""
    for seconds, best in points:
        if best is not None and sign * best >= sign * target - 1e-12:
            return seconds
    return None


def run_pruning_bench(
    config: PruningBenchConfig, out: Path | None = None, progress: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Every pruner on every seed; per seed the target is the first pruner's best."""
    import numpy as np

    seeds = [run_seed(config, seed, progress) for seed in range(config.seed, config.seed + config.seeds)]
    first = config.pruners[0]
    summary = {}
    for name in config.pruners:
        ratios = [s["runs"][name]["ratio_to_" + first] for s in seeds]
        reached = [r for r in ratios if r is not None]
        summary[name] = {
            "reached_target": f"{len(reached)}/{len(seeds)}",
            "median_ratio_where_reached": round(float(np.median(reached)), 3) if reached else None,
            "mean_wall_seconds": round(float(np.mean([s["runs"][name]["wall_seconds"] for s in seeds])), 1),
            # a pruner whose every trial was stopped before the time ran out (a busy machine) has none
            "mean_best": (
                float(np.mean(bests))
                if (bests := [s["runs"][name]["best"] for s in seeds if s["runs"][name]["best"] is not None])
                else None
            ),
        }
    budget = (
        f"the others get {first!r}'s wall time as --timeout and {SAME_TIME_TRIALS}x its trials"
        if config.same_time
        else "every pruner the same trials"
    )
    report = {
        "config": asdict(config),
        "summary": summary,
        "seeds": seeds,
        "protocol": f"per seed one cold-GP study per pruner ({config.trials} trials for {first!r}; {budget}); "
        f"target: the best {first!r} reached; seconds from study start until the best so far "
        f"reached it, ratio to {first!r}'s time to find it",
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
    return report


def run_seed(config: PruningBenchConfig, seed: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from agent.config import StudyRequest
    from agent.execution.runner import run_study
    from agent.knowledge.records import TRIAL_PRUNED
    from agent.tuning.service import prepare_study

    runs: dict[str, dict[str, Any]] = {}
    sign = 1.0
    timeout = None
    for pruner in config.pruners:
        trials_budget = config.trials if timeout is None else config.trials * SAME_TIME_TRIALS
        with tempfile.TemporaryDirectory(prefix="tune-agent-pruning-") as tmp:
            req = StudyRequest(
                dataset=config.dataset,
                job=config.job,
                trials=trials_budget,
                epochs=config.epochs,
                seed=seed,
                warm_start="none",
                surrogate="gp",
                pruner=pruner,
                study_name=f"pruning-{pruner}",
                tracking_uri=f"sqlite:///{Path(tmp) / 'mlflow.db'}",
                artifact_root=str(Path(tmp) / "art"),
            )
            study, job, data, split = prepare_study(req, echo=lambda _: None)
            sign = study.settings.sign
            reporter = TimelineReporter()
            timing = run_study(study, job, data, split, reporter, trace_plot=False, timeout=timeout)
            trials = study.trials()
            best = study.best(trials)
        if config.same_time and timeout is None:
            timeout = timing.wall_seconds
        runs[pruner] = {
            "wall_seconds": round(timing.wall_seconds, 1),
            "best": None if best is None else best.value,
            "trials": len(trials),
            "pruned_trials": sum(t.state == TRIAL_PRUNED for t in trials),
            "timeline": reporter.points,
        }
        progress(
            f"seed {seed} pruner {pruner}: {timing.wall_seconds:.0f} s, best {runs[pruner]['best']}, "
            f"{len(trials)} trials, {runs[pruner]['pruned_trials']} pruned"
        )
    first = config.pruners[0]
    target = runs[first]["best"]
    base_time = time_to_reach(runs[first]["timeline"], target, sign) if target is not None else None
    for run in runs.values():
        reached = time_to_reach(run["timeline"], target, sign) if target is not None else None
        run["seconds_to_target"] = None if reached is None else round(reached, 1)
        run["ratio_to_" + first] = None if reached is None or not base_time else round(reached / base_time, 3)
        run["timeline"] = [[round(s, 1), b] for s, b in run["timeline"]]
    return {"seed": seed, "target": target, "runs": runs}
