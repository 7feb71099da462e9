"""What a trial came to: :class:`TrialOutcome`, and the outcome of a fit that returned.

Shared by the trials that train here (:mod:`agent.execution.trial`) and those that run a user's
LightningCLI script (:mod:`agent.execution.cli_trial`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agent.execution.pruning import PruningState


@dataclass
class TrialOutcome:
    value: float | None
    reason: str = ""
    fit_seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    retries: int = 0  # times its worker died and it ran again (agent.execution.workers)
    pruned: bool = False  # stopped by the pruner: ``value`` is the last one it reached
    curve: dict[int, float] = field(default_factory=dict)  # per-epoch metric, kept when a pruner runs
    resumed_from: int = 0  # epochs its checkpoint had finished when this run began (0: from the start)
    note: str = ""  # one line for the study's output (a checkpoint that could not be used)


def _required(settings: Any) -> list[str]:
    required = getattr(settings, "required_metrics", None)
    return required() if callable(required) else []


def _fit_outcome(
    metric: str,
    metrics: dict[str, float],
    fit_seconds: float,
    stopped: str,
    pruning: PruningState | None,
    required: list[str] | None = None,
) -> TrialOutcome:
    """What a fit that returned comes to: failed when the guard ``stopped`` it (its reason), pruned
    when ``pruning`` says so, else ``metric``'s last value (failed when missing or not finite, or
    when a ``required`` metric, a further objective's or a constraint's, is missing)."""
    if stopped:
        return TrialOutcome(None, stopped, fit_seconds, metrics)
    curve = dict(pruning.curve) if pruning is not None else {}
    if pruning is not None and pruning.reason:
        return TrialOutcome(metrics.get(metric), pruning.reason, fit_seconds, metrics, pruned=True, curve=curve)
    if metric not in metrics:
        return TrialOutcome(None, f"job logged no metric {metric!r} (has {sorted(metrics)})", fit_seconds, metrics)
    value = metrics[metric]
    if not math.isfinite(value):
        return TrialOutcome(None, f"diverged: {metric} is {value}", fit_seconds, metrics)
    for name in required or ():
        if name not in metrics or not math.isfinite(metrics[name]):
            return TrialOutcome(
                None, f"job reported no finite {name!r}, an objective or constraint of this study", fit_seconds, metrics
            )
    return TrialOutcome(value, "", fit_seconds, metrics, curve=curve)
