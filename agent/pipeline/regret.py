"""Lookup-table helpers of the warm-start evaluation: regret on a table and snapping a design to
its rows. The replay itself is the product's sampler (:mod:`agent.pipeline.replay`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normalised_regret(errors: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """Best-so-far regret after each evaluation in ``order``, in [0, 1]."""
    e = np.asarray(errors, dtype=float)
    lo, hi = np.nanmin(e), np.nanmax(e)
    span = hi - lo if hi > lo else 1.0
    best = np.minimum.accumulate(np.nan_to_num(e[list(order)], nan=hi))
    return np.clip((best - lo) / span, 0.0, 1.0)


def snap_to_table(points: np.ndarray, U: np.ndarray, exclude: set[int] | None = None) -> list[int]:
    """Nearest distinct table rows to each point (LHS/Sobol designs on a lookup table)."""
    taken = set(exclude or ())
    out = []
    for p in np.atleast_2d(points):
        d = ((U - p) ** 2).sum(axis=1)
        for i in np.argsort(d, kind="stable"):
            if int(i) not in taken:
                taken.add(int(i))
                out.append(int(i))
                break
    return out
