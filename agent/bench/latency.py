"""Suggestion latency of the BO step at a given number of observations (`tune-agent bench latency`).

Observations are drawn from a smooth synthetic response over a job's search space, so the figure
measures the GP fit plus acquisition optimisation only, not training.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from agent.space import SearchSpace
from agent.tuning.bo import propose_next


def synthetic_response(U: np.ndarray) -> np.ndarray:
    """A smooth multimodal test function on the cube (maximised)."""
    return -np.sum((U - 0.3) ** 2, axis=1) + 0.1 * np.sin(7 * U).sum(axis=1)


def measure_latency(space: SearchSpace, n_obs: int, repeats: int = 5, acq: str = "logei", seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    times = []
    state: dict = {}  # as in a study: each step starts from the previous fit's hyperparameters
    U = space.snap(rng.random((n_obs + repeats, space.dim)))
    y = synthetic_response(U)
    for r in range(repeats):
        start = time.perf_counter()
        propose_next(space, U[: n_obs + r], y[: n_obs + r], acq, iteration=n_obs, seed=seed + r, warm_state=state)
        times.append(time.perf_counter() - start)
    return {"n_obs": n_obs, "median_s": statistics.median(times), "max_s": max(times), "repeats": repeats}
