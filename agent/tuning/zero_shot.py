"""How good a zero-shot start can be on a benchmark table: the product's greedy portfolio against
other normalisations, a larger candidate set, and the same greedy rule on the sources' true values.

Given every task's configurations and values (a leave-one-task-out benchmark), each task's source GP
(the product's fit, on normal scores) predicts a shared candidate set: the pooled history
configurations, optionally with a scrambled Sobol set over the cube. For each target task the other
tasks' predictions are normalised per source (``minmax``: the product's rule,
:func:`agent.surrogates.specs.source_regrets`; ``normal``: z-scores over the candidates; ``rank``),
the greedy portfolio is built (:func:`agent.surrogates.specs.greedy_portfolio`) and its true regret
on the target is read. ``oracle`` builds the portfolio from the other tasks' true values on the same
candidates: what the rule gives with perfect source surfaces. ``best fixed`` is the candidate with
the least mean true regret over every task (the target included): no first configuration chosen
from this set without the target's data does better on average.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agent.surrogates.contract import SurrogateInputs
from agent.surrogates.gp import impute_failures, normal_scores
from agent.surrogates.source_fits import SourceFits, SourceTask
from agent.surrogates.specs import greedy_portfolio

NORMALISATIONS = ("minmax", "normal", "rank")


def zero_shot_table(
    space: Any,
    histories: Mapping[str, tuple[np.ndarray, np.ndarray]],
    truth: Callable[[str, np.ndarray], np.ndarray],
    ranges: Mapping[str, tuple[float, float]],
    sobol: int = 2048,
    size: int = 10,
    report_at: Sequence[int] = (1, 3, 5, 10),
) -> dict[str, Any]:
    """Mean true regret at ``report_at`` of every variant over the tasks of ``histories`` (each
    task's cube points and maximised values); ``truth(task, U)`` gives maximised values, ``ranges``
    each task's (worst, best) for the regret's scale."""
    from scipy.stats import qmc

    tasks = sorted(histories)
    sources = [
        SourceTask(t, t, histories[t][0], normal_scores(impute_failures(np.asarray(histories[t][1], float))))
        for t in tasks
    ]
    fits = SourceFits()
    inputs = SurrogateInputs(space, tuple(sources), fits=fits)
    pooled = space.snap(np.concatenate([histories[t][0] for t in tasks]))
    origin = np.concatenate([[i] * len(histories[t][0]) for i, t in enumerate(tasks)])
    extra = space.snap(qmc.Sobol(space.dim, seed=0).random(sobol)) if sobol else np.empty((0, space.dim))
    C = np.concatenate([pooled, extra])
    origin = np.concatenate([origin, -np.ones(len(extra), dtype=int)])
    M = fits.means_on(sources, C, inputs)
    targets = [fits.gp(s, inputs)[0].train_targets for s in sources]  # the scale source_regrets reads
    top = np.array([float(z.max()) for z in targets])
    span = np.array([max(float(z.max() - z.min()), 1e-12) for z in targets])
    T = np.array([truth(t, C) for t in tasks])
    low = np.array([ranges[t][0] for t in tasks])
    high = np.array([ranges[t][1] for t in tasks])
    regret = np.clip((high[:, None] - T) / (high - low)[:, None], 0.0, None)
    variants: dict[str, list[np.ndarray]] = {}
    for i in range(len(tasks)):
        for name, curve in _target_curves(i, M, origin, top, span, regret, size).items():
            variants.setdefault(name, []).append(curve)
    out = {
        name: {f"regret@{t}": round(float(np.mean([c[t - 1] for c in curves])), 4) for t in report_at if t <= size}
        for name, curves in variants.items()
    }
    pooled_cols = np.where(origin >= 0)[0]
    return {
        "variants": out,
        "best_fixed_first": {
            "history": round(float(regret[:, pooled_cols].mean(0).min()), 4),
            "history+sobol": round(float(regret.mean(0).min()), 4),
        },
        "candidates": {"history": int(len(pooled)), "sobol": int(len(extra))},
        "tasks": len(tasks),
    }


def _target_curves(
    i: int, M: np.ndarray, origin: np.ndarray, top: np.ndarray, span: np.ndarray, regret: np.ndarray, size: int
) -> dict[str, np.ndarray]:
    """Target ``i``'s best-so-far true regret under each variant's portfolio, the others as sources."""
    rows = np.array([s for s in range(len(M)) if s != i])
    out = {}
    for candidates in ("history", "history+sobol"):
        cols = np.where((origin != i) & ((origin >= 0) | (candidates != "history")))[0]
        m = M[np.ix_(rows, cols)]
        scores = {
            "minmax": np.clip((top[rows, None] - m) / span[rows, None], 0.0, None),
            "normal": (m.max(1, keepdims=True) - m) / np.maximum(m.std(1, keepdims=True), 1e-12),
            "rank": np.argsort(np.argsort(-m, axis=1), axis=1) / max(m.shape[1] - 1, 1),
            "oracle": regret[np.ix_(rows, cols)],
        }
        for name, S in scores.items():
            out[f"{name}, {candidates}"] = np.minimum.accumulate(regret[i, cols[greedy_portfolio(S, size)]])
    return out
