"""Source GP means from what a stored fit keeps, in numpy: no torch import.

A study's first trial needs the portfolio's scores over the sources it attends to, and a study
process that has not yet imported torch (a cold one never does before its first trial) would
spend about a second importing it only for them. A plain-kernel source GP (BoTorch's default
kernel: RBF or Matérn-5/2, with or without an outputscale; constant mean; Gaussian noise;
``Standardize``) is stored with its constrained hyperparameters beside its raw state
(:func:`agent.surrogates.gp_stack.stack_summary`), and :func:`stored_means` evaluates its posterior
mean from them and the source's data exactly as the GP would. Arc-kernel GPs keep the torch path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

JITTER = 1e-8  # added to every source GP's noise when its kernel matrix is factorised


def imputed(y: np.ndarray) -> np.ndarray:
    """A source's values with failures imputed with its worst value (0 where none is finite)."""
    from agent.surrogates.gp import impute_failures

    z = impute_failures(np.asarray(y, dtype=float).reshape(-1))
    return np.where(np.isfinite(z), z, 0.0)


def source_targets(y: np.ndarray) -> np.ndarray:
    """A source's values as its GP is fitted to them: :func:`imputed`, then standardised (the ``Y``
    of :func:`agent.surrogates.source_gp.source_data`)."""
    from agent.surrogates.gp import standardise

    return standardise(imputed(y))[0]


def conditioned_targets(Y: np.ndarray) -> np.ndarray:
    """The targets (`n`) a GP of :func:`agent.surrogates.gp.make_gp` on ``Y`` is conditioned on: ``Y``
    through its ``Standardize`` outcome transform (unbiased spread; none below 1e-8)."""
    Y = np.asarray(Y, dtype=float).reshape(-1)
    return (Y - Y.mean()) / _spread(Y)


def _spread(Y: np.ndarray) -> float:
    spread = float(Y.std(ddof=1)) if len(Y) > 1 else 1.0
    return spread if spread >= 1e-8 else 1.0


def _kernel(kind: str, A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """``kind`` (``rbf`` or ``matern52``) between rows already divided by the lengthscales."""
    d2 = np.maximum((A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * A @ B.T, 0.0)
    if kind == "rbf":
        return np.exp(-0.5 * d2)
    r = np.sqrt(np.maximum(d2, 1e-30))
    return (1.0 + math.sqrt(5.0) * r + 5.0 / 3.0 * d2) * np.exp(-math.sqrt(5.0) * r)


def stored_means(tasks: Sequence[tuple[np.ndarray, np.ndarray, Mapping[str, Any]]], points: np.ndarray) -> np.ndarray:
    """Each task's (cube points `n x d`, values `n`, stack summary) GP posterior mean at ``points``
    (`M x d`), in the units of its standardised values: `len(tasks) x M`."""
    from scipy.linalg import cho_factor, cho_solve

    P = np.asarray(points, dtype=float)
    out = np.empty((len(tasks), len(P)))
    for i, (U, y, summary) in enumerate(tasks):
        ls = np.asarray(summary["lengthscale"], dtype=float).reshape(-1)
        kind, scale = summary["kind"], float(summary["outputscale"])
        const, noise = float(summary["constant"]), float(summary["noise"])
        X = np.asarray(U, dtype=float) / ls
        z = source_targets(y)
        K = scale * _kernel(kind, X, X) + (noise + JITTER) * np.eye(len(X))
        alpha = cho_solve(cho_factor(K, lower=True), conditioned_targets(z) - const)
        out[i] = z.mean() + _spread(z) * (const + scale * _kernel(kind, P / ls, X) @ alpha)
    return out
