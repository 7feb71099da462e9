"""Initial designs: where a study evaluates before the surrogate has anything to say.

All designs live in the unit cube and come from :mod:`scipy.stats.qmc` (or a seeded uniform draw),
so the same seed gives the same points in every process — which is what lets an interrupted study
resume on exactly the design it started with.
"""

from __future__ import annotations

import numpy as np

from agent.config import INIT_METHODS
from agent.errors import TuneAgentError


def initial_design(method: str, n: int, dim: int, seed: int) -> np.ndarray:
    """Returns `n x dim` points in ``[0, 1]^dim``.

    Sobol points are drawn as a scrambled sequence of the next power of two and truncated, which
    keeps them deterministic for a seed (scipy warns about balance for non-powers of two).
    """
    if n <= 0:
        return np.empty((0, dim))
    from scipy.stats import qmc

    if method == "random":
        return np.random.default_rng(seed).random((n, dim))
    if method == "lhs":
        return qmc.LatinHypercube(d=dim, seed=seed).random(n)
    if method == "sobol":
        m = int(np.ceil(np.log2(max(n, 2))))
        return qmc.Sobol(d=dim, scramble=True, seed=seed).random_base2(m)[:n]
    if method == "halton":
        return qmc.Halton(d=dim, scramble=True, seed=seed).random(n)
    raise TuneAgentError(f"unknown initial design {method!r}; choose from {', '.join(INIT_METHODS)}")
