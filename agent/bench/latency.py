"""Suggestion latency of the BO step at a given number of observations (`tune-agent-bench latency`).

Observations are drawn from a smooth synthetic response over a job's search space, so the figure
measures the GP fit plus acquisition optimisation only, not training.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.space import SearchSpace
from agent.tuning.study import cold_sampler


def synthetic_response(U: np.ndarray) -> np.ndarray:
    """A smooth multimodal test function on the cube (maximised)."""
    return -np.sum((U - 0.3) ** 2, axis=1) + 0.1 * np.sin(7 * U).sum(axis=1)


def measure_latency(
    space: SearchSpace, n_obs: int, repeats: int = 5, acq: str = "logei", seed: int = 0
) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    times = []
    settings = StudySettings(
        job="latency",
        job_name="latency",
        dataset="synthetic",
        dataset_name="synthetic",
        fingerprint="-",
        space_signature=space.signature(),
        metric="y",
        mode="max",
        trials=n_obs + repeats + 1,
        n_init=1,
        acq=acq,
        random_every=0,
        seed=seed,
    )
    sampler = cold_sampler(space, settings)  # one sampler: each step warm-starts from the previous fit
    U = space.snap(rng.random((n_obs + repeats, space.dim)))
    y = synthetic_response(U)
    for r in range(repeats):
        start = time.perf_counter()
        sampler.propose(
            U[: n_obs + r], y[: n_obs + r], U[: n_obs + r], n_obs, seed + r, np.random.default_rng(seed + r)
        )
        times.append(time.perf_counter() - start)
    return {"n_obs": n_obs, "median_s": statistics.median(times), "max_s": max(times), "repeats": repeats}
