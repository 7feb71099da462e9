"""A study of several objectives or with constraints: each trial's objective values, its
feasibility, the Pareto front of the feasible finished trials and the hypervolume it dominates.

A trial's value of the primary metric is its ``value``; the others are the final values it
reported (``final_<metric>`` on its run, or ``<metric>`` where a user's own loop told it so).
A pruned, failed or running trial is never on the front.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import TRIAL_OK, TrialRecord

# The reference point sits this fraction of each objective's observed range beyond its worst value.
REFERENCE_MARGIN = 0.1


def metric_value(trial: TrialRecord, name: str, settings: StudySettings) -> float | None:
    """``trial``'s value of metric ``name`` (None when it reported none)."""
    if name == settings.metric:
        return trial.value
    extra: Mapping[str, Any] = trial.extra or {}
    value = extra.get(f"final_{name}", extra.get(name))
    return float(value) if value is not None else None


def objective_values(trial: TrialRecord, settings: StudySettings) -> dict[str, float] | None:
    """Every objective's value of a finished trial, or None when one is missing or not finite."""
    out = {}
    for name, _ in settings.objective_list():
        value = metric_value(trial, name, settings)
        if value is None or not math.isfinite(value):
            return None
        out[name] = value
    return out


def feasible(trial: TrialRecord, settings: StudySettings) -> bool:
    """Whether ``trial`` meets every constraint (False when a constrained metric is missing)."""
    for name, op, bound in settings.constraint_list():
        value = metric_value(trial, name, settings)
        if value is None or not math.isfinite(value):
            return False
        if (op == "<=" and value > bound) or (op == ">=" and value < bound):
            return False
    return True


def maximised(values: Mapping[str, float], settings: StudySettings) -> np.ndarray:
    """The objective values signed so that larger is better, in the settings' order."""
    return np.array([(1.0 if mode == "max" else -1.0) * values[name] for name, mode in settings.objective_list()])


def non_dominated(points: np.ndarray) -> np.ndarray:
    """A mask of the rows of ``points`` (`n x m`, maximised) that no other row dominates."""
    keep = np.ones(len(points), dtype=bool)
    for i, p in enumerate(points):
        others = np.delete(points, i, axis=0)
        if len(others) and np.any(np.all(others >= p, axis=1) & np.any(others > p, axis=1)):
            keep[i] = False
    return keep


def pareto_front(trials: Sequence[TrialRecord], settings: StudySettings) -> list[TrialRecord]:
    """The feasible finished trials no other feasible finished trial dominates, by trial number."""
    rows, values = [], []
    for t in sorted(trials, key=lambda t: t.number):
        if t.state != TRIAL_OK or not feasible(t, settings):
            continue
        v = objective_values(t, settings)
        if v is not None:
            rows.append(t)
            values.append(maximised(v, settings))
    if not rows:
        return []
    mask = non_dominated(np.array(values))
    return [t for t, keep in zip(rows, mask) if keep]


def front_order(trials: Sequence[TrialRecord], settings: StudySettings) -> list[TrialRecord]:
    """The successful trials, best first for a study of several objectives: the feasible ones with
    every objective front by front (the Pareto front, then the front of the rest, ...), each front
    by its primary metric; then the others by their primary metric. Ties: the earlier trial first."""
    sign = 1.0 if settings.mode == "max" else -1.0

    def primary(t: TrialRecord) -> tuple[float, int]:
        return (-sign * float(t.value or 0.0), t.number)

    ok = [t for t in trials if t.state == TRIAL_OK and t.value is not None]
    ranked, values, rest = [], [], []
    for t in ok:
        v = objective_values(t, settings) if feasible(t, settings) else None
        if v is None:
            rest.append(t)
        else:
            ranked.append(t)
            values.append(maximised(v, settings))
    out: list[TrialRecord] = []
    left = list(range(len(ranked)))
    while left:
        mask = non_dominated(np.array([values[i] for i in left]))
        front = [left[j] for j, keep in enumerate(mask) if keep]
        out += sorted((ranked[i] for i in front), key=primary)
        left = [i for i in left if i not in front]
    return out + sorted(rest, key=primary)


def reference_point(trials: Sequence[TrialRecord], settings: StudySettings) -> np.ndarray | None:
    """A maximised reference point: each objective's worst value over the feasible finished trials
    (all finished ones while none is feasible, as the sampler's), less :data:`REFERENCE_MARGIN` of
    its range (a unit where the range is 0); None without a trial. A trial that breaks a bound by
    far (a network of 500,000 parameters under n_params<=20000) would otherwise set the yardstick."""
    done = [t for t in trials if t.state == TRIAL_OK]
    meeting = [t for t in done if feasible(t, settings)]
    values = [objective_values(t, settings) for t in (meeting or done)]
    points = np.array([maximised(v, settings) for v in values if v is not None])
    if not len(points):
        return None
    spread = points.max(axis=0) - points.min(axis=0)
    return points.min(axis=0) - REFERENCE_MARGIN * np.where(spread > 0, spread, 1.0)


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """The volume that ``points`` (`n x m`, maximised) dominate above ``reference``: exact by a
    sweep for two objectives, BoTorch's box decomposition for more."""
    above = points[np.all(points > reference, axis=1)] if len(points) else points
    if not len(above):
        return 0.0
    if above.shape[1] == 1:
        return float(above.max() - reference[0])
    if above.shape[1] == 2:
        ordered = above[np.argsort(-above[:, 0])]
        volume, best_y = 0.0, reference[1]
        for x, y in ordered:
            if y > best_y:
                volume += (x - reference[0]) * (y - best_y)
                best_y = y
        return float(volume)
    import torch
    from botorch.utils.multi_objective.hypervolume import Hypervolume

    return float(Hypervolume(torch.as_tensor(reference)).compute(torch.as_tensor(above)))


def front_summary(trials: Sequence[TrialRecord], settings: StudySettings) -> dict[str, Any]:
    """The front (trial numbers from 1, values, configurations), its hypervolume and the
    reference point it is measured from (in the metrics' own units)."""
    front = pareto_front(trials, settings)
    reference = reference_point(trials, settings)
    modes = [1.0 if mode == "max" else -1.0 for _, mode in settings.objective_list()]
    volume = 0.0
    if reference is not None and front:
        volume = hypervolume(
            np.array([maximised(objective_values(t, settings) or {}, settings) for t in front]), reference
        )
    return {
        "pareto": [
            {"trial": t.number + 1, "values": objective_values(t, settings), "config": dict(t.config)} for t in front
        ],
        "hypervolume": volume,
        "reference": None
        if reference is None
        else {name: float(sign * r) for (name, _), sign, r in zip(settings.objective_list(), modes, reference)},
    }


def front_ends(
    evaluations: Sequence[Any],
    metric: str,
    objectives: Sequence[tuple[str, str]],
    constraints: Sequence[tuple[str, str, float]],
) -> tuple[Any, Any] | None:
    """A historical dataset's evaluations (:class:`agent.knowledge.history.Evaluation`, whose
    ``value`` is ``metric``'s) at the two ends of their front over ``objectives`` (the best on the
    first, the best on the last) among those meeting ``constraints``; None when no evaluation
    reported every metric and met every bound (history from before those metrics were reported)."""

    def reported(e: Any, name: str) -> float | None:
        value = e.value if name == metric else e.metrics.get(name)
        return float(value) if value is not None and math.isfinite(float(value)) else None

    rows, points = [], []
    for e in evaluations:
        values = [reported(e, name) for name, _ in objectives]
        bounds = [reported(e, name) for name, _, _ in constraints]
        if any(v is None for v in values + bounds):
            continue
        if any(
            (op == "<=" and v > bound) or (op == ">=" and v < bound)  # type: ignore[operator]
            for (_, op, bound), v in zip(constraints, bounds)
        ):
            continue
        rows.append(e)
        points.append([v if mode == "max" else -v for (_, mode), v in zip(objectives, values)])  # type: ignore[operator]
    if not rows:
        return None
    P = np.array(points)
    front = [i for i, keep in enumerate(non_dominated(P)) if keep]
    first = max(front, key=lambda i: P[i, 0])
    last = max(front, key=lambda i: P[i, -1])
    return rows[first], rows[last]
