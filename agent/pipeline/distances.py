"""Target distances between historical datasets, computed from their validation errors.

This module owns the "ground-truth" dataset distances that meta-features are trained to match
(paper 003, eq. 2) or that nearest-dataset selection is judged against: the L1 distance between
validation-error vectors at shared configurations, a GP-surrogate bridge for datasets evaluated
at different configurations, and paper 000's Earth mover's distance between error histograms.

Validation error always means lower-is-better (e.g. ``1 - val_acc``); NaN marks a configuration
that was not evaluated or failed. Use :func:`error_matrix` to build the `datasets x configs`
matrix from stored trials, :func:`surrogate_error_matrix` when configurations differ, and then
:func:`target_distance_matrix` or :func:`emd_distance_matrix`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import qmc, rankdata

NORMALISATIONS = ("raw", "standard", "rank")
MIN_SHARED = 3


def _check_how(how: str) -> None:
    if how not in NORMALISATIONS:
        raise ValueError(f"unknown normalisation {how!r}; expected one of {NORMALISATIONS}")


def _normalise_row(row: np.ndarray, how: str) -> np.ndarray:
    out = np.full_like(row, np.nan)
    ok = np.isfinite(row)
    values = row[ok]
    if values.size == 0:
        return out
    if how == "raw":
        out[ok] = values
    elif how == "standard":
        std = values.std()
        out[ok] = (values - values.mean()) / (std if std > 0 else 1.0)
    else:
        ranks = rankdata(values, method="average")
        out[ok] = (ranks - 1.0) / (values.size - 1) if values.size > 1 else 0.0
    return out


def normalise_errors(E: np.ndarray, how: str) -> np.ndarray:
    """Normalises each dataset's (row's) finite errors; NaN stays NaN.

    ``raw`` keeps them; ``standard`` z-scores them (std 0 -> 1); ``rank`` replaces them by their
    average ranks scaled to [0, 1], which removes any monotone difference between datasets.
    """
    _check_how(how)
    E = np.atleast_2d(np.asarray(E, dtype=np.float64))
    return np.vstack([_normalise_row(row, how) for row in E]) if E.size else E.copy()


def target_distance_matrix(E: np.ndarray, how: str = "rank") -> np.ndarray:
    """Pairwise L1 distance between (normalised) error vectors over shared configs (paper 003 eq. 2).

    ``E`` is `n_datasets x n_configs`. For each pair only the configurations both datasets have
    finite errors for count, and the L1 sum is divided by their number (mean absolute
    difference): otherwise a pair with more shared evaluations would look farther apart merely
    because it has more terms, and pairs with different overlap would not be comparable. Fewer
    than 3 shared configurations give NaN. The result is symmetric with a zero diagonal; on fully
    shared coordinates it is a (scaled L1) metric.
    """
    N = normalise_errors(E, how)
    n = N.shape[0]
    D = np.full((n, n), np.nan)
    finite = np.isfinite(N)
    for i in range(n):
        diff = np.abs(N[i] - N[i:])
        shared = finite[i] & finite[i:]
        count = shared.sum(axis=1)
        total = np.where(shared, diff, 0.0).sum(axis=1)
        row = np.where(count >= MIN_SHARED, total / np.maximum(count, 1), np.nan)
        D[i, i:] = row
        D[i:, i] = row
    np.fill_diagonal(D, np.where(finite.sum(axis=1) >= MIN_SHARED, 0.0, np.nan))
    return D


def _shared_design(d: int, n_points: int, seed: int) -> np.ndarray:
    sobol = qmc.Sobol(d, scramble=True, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # balance warning when n_points is not a power of two
        return sobol.random(n_points)


def _surrogate_mean(X: np.ndarray, e: np.ndarray, design: np.ndarray) -> np.ndarray:
    """Posterior mean at ``design`` of a GP on one dataset; failures are imputed as worst error."""
    import torch

    from agent.surrogates.gp import fit_gp, impute_failures

    if not np.isfinite(e).any():
        return np.full(len(design), np.nan)
    y = -impute_failures(-e)  # the BO helper imputes the minimum; errors are minimised
    if len(y) < 2 or np.ptp(y) == 0:
        return np.full(len(design), float(y.mean()))
    train_X = torch.as_tensor(X, dtype=torch.float64)
    train_Y = torch.as_tensor(y, dtype=torch.float64).reshape(-1, 1)
    model = fit_gp(train_X, train_Y)
    with torch.no_grad():
        mean = model.posterior(torch.as_tensor(design, dtype=torch.float64)).mean
    return mean.reshape(-1).cpu().numpy()


def surrogate_error_matrix(
    points: Sequence[np.ndarray], errors: Sequence[np.ndarray], n_points: int = 128, seed: int = 0
) -> np.ndarray:
    """Each dataset's GP-predicted errors on one shared scrambled Sobol set: `n_datasets x n_points`.

    For datasets evaluated at different configurations. ``points[i]`` are dataset i's unit-cube
    configurations `n_i x d` (same ``d`` for all) and ``errors[i]`` its `n_i` errors (NaN =
    failed). Feed the result to :func:`target_distance_matrix`.
    """
    from agent.surrogates.gp import torch_threads

    if len(points) != len(errors):
        raise ValueError(f"{len(points)} point sets but {len(errors)} error vectors")
    if not points:
        return np.empty((0, n_points))
    Xs = [np.atleast_2d(np.asarray(p, dtype=np.float64)) for p in points]
    es = [np.asarray(e, dtype=np.float64).reshape(-1) for e in errors]
    dims = {X.shape[1] for X in Xs}
    if len(dims) != 1:
        raise ValueError(f"all point sets need the same dimension, got {sorted(dims)}")
    for X, e in zip(Xs, es):
        if len(X) != len(e):
            raise ValueError(f"{len(X)} points but {len(e)} errors")
    design = _shared_design(dims.pop(), n_points, seed)
    with torch_threads(1):
        return np.vstack([_surrogate_mean(X, e, design) for X, e in zip(Xs, es)])


def emd_distance_matrix(E: np.ndarray, bins: int = 10, how: str = "raw") -> np.ndarray:
    """Earth mover's distance between the datasets' histograms of (normalised) errors (paper 000).

    Histograms share bin edges spanning all finite values; the ground cost is the distance between
    bin centres, so the EMD is in error units. Rows without finite errors give NaN.
    """
    import ot

    N = normalise_errors(E, how)
    values = N[np.isfinite(N)]
    n = N.shape[0]
    if values.size == 0:
        return np.full((n, n), np.nan)
    edges = np.histogram_bin_edges(values, bins=bins, range=(values.min(), values.max()))
    centres = 0.5 * (edges[:-1] + edges[1:])
    cost = np.abs(centres[:, None] - centres[None, :])
    hists = [_histogram(row, edges) for row in N]
    D = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i, n):
            if hists[i] is not None and hists[j] is not None:
                D[i, j] = D[j, i] = 0.0 if i == j else max(float(ot.emd2(hists[i], hists[j], cost)), 0.0)
    return D


def _histogram(row: np.ndarray, edges: np.ndarray) -> np.ndarray | None:
    values = row[np.isfinite(row)]
    if values.size == 0:
        return None
    counts, _ = np.histogram(values, bins=edges)
    return counts / counts.sum()


def error_matrix(values_by_dataset: Sequence[Mapping[str, float]], config_keys: Sequence[str]) -> np.ndarray:
    """`n_datasets x len(config_keys)` errors from per-dataset ``{config_key: error}``; NaN if missing."""
    E = np.full((len(values_by_dataset), len(config_keys)), np.nan)
    column = {key: j for j, key in enumerate(config_keys)}
    for i, values in enumerate(values_by_dataset):
        for key, value in values.items():
            j = column.get(key)
            if j is not None and value is not None and math.isfinite(float(value)):
                E[i, j] = float(value)
    return E
