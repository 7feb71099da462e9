"""Hyperparameter Transfer using Surrogates (HTS, paper 001, Algorithm 1).

A map ``g`` from the unit cube to itself is learned so that a source configuration that performed
well, mapped through ``g``, performs comparably well on the target:

1. ``S_S``: a cubic RBF surrogate with a linear tail (scipy's ``RBFInterpolator``) fitted to the
   source's evaluations;
2. ``m`` Latin-hypercube configurations are evaluated on the target;
3. each round: ``S_T`` is fitted to the target's evaluations so far; two independent LHS arrays
   (:data:`RANK_SAMPLES` points each) are sorted, one by ``S_S`` and one by ``S_T``; ``g`` (one
   hidden layer of ``20 k`` sigmoid units, outputs squashed into [0, 1]) is trained to map the
   ``i``-th best point of the first to the ``i``-th best of the second (rank matching); the ``r``
   best source configurations, mapped through ``g``, are the next ``r`` target evaluations.

``hts-anchored`` (ours, not the paper's) answers the failure measured on real training
(docs/benchmarks/hts.md): with a few chance-level target trials ``S_T`` is nearly flat, the rank matching
is noise and ``g`` sends every source configuration to the middle of the cube. Here ``g`` is a
residual map ``x + h(x)`` (``h`` starts at zero) trained on the rank-matched pairs with weight
``1 - a`` and on the identity with weight ``a``, where ``a = 1 - max(0, rho)`` and ``rho`` is the
leave-one-out Spearman correlation of ``S_T`` on the target's trials: while the target surrogate
cannot predict a held-out trial, the source's best configurations are tried as they are; as it
learns to, the paper's map takes over.

Everything here is a pure function of the evaluations and a seed; the sampler around it
(:class:`agent.samplers.bo.HtsSampler`) decides slots and keeps no state the trials do not hold.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

RANK_SAMPLES = 10_000  # the paper's LHS array size
HIDDEN_PER_DIM = 20  # the paper's 20 k hidden units
TRAIN_STEPS = 300


def lhs(n: int, d: int, seed: int) -> np.ndarray:
    """``n`` Latin-hypercube points in ``[0, 1]^d`` (scipy's ``qmc.LatinHypercube``)."""
    from scipy.stats import qmc

    return qmc.LatinHypercube(d=d, seed=seed).random(n)


def rbf_surrogate(U: np.ndarray, y: np.ndarray) -> Any:
    """The paper's surrogate: cubic RBF with a linear polynomial tail (scipy's ``RBFInterpolator``).

    Duplicate configurations are averaged (the interpolant needs distinct nodes); a tiny smoothing
    keeps the system solvable when nodes nearly coincide.
    """
    from scipy.interpolate import RBFInterpolator

    U = np.asarray(U, dtype=float)
    y = np.asarray(y, dtype=float)
    keys, inverse = np.unique(np.round(U, 9), axis=0, return_inverse=True)
    means = np.bincount(inverse.ravel(), weights=y) / np.bincount(inverse.ravel())
    degree = 1 if len(keys) > U.shape[1] + 1 else 0
    with (
        warnings.catch_warnings()
    ):  # too few nodes for the linear tail yet (the first rounds): a constant one, knowingly
        warnings.filterwarnings("ignore", message=".*degree.*should not be below", category=UserWarning)
        return RBFInterpolator(keys, means, kernel="cubic", degree=degree, smoothing=1e-8)


def rank_matched_pairs(
    source: Any, target: Any, d: int, seed: int, n: int = RANK_SAMPLES
) -> tuple[np.ndarray, np.ndarray]:
    """Training set ``M``: LHS points sorted by the source surrogate (inputs) and an independent LHS
    array sorted by the target surrogate (outputs), best first in both (values are maximised)."""
    A, B = lhs(n, d, seed), lhs(n, d, seed + 1)
    return A[np.argsort(-source(A), kind="stable")], B[np.argsort(-target(B), kind="stable")]


class _ResidualMap:
    """``g(x) = clip(x + h(x), 0, 1)``: the identity until ``h`` learns otherwise."""

    def __init__(self, h: Any) -> None:
        self.h = h

    def __call__(self, x: Any) -> Any:
        return (x + self.h(x)).clamp(0.0, 1.0)

    def parameters(self) -> Any:
        return self.h.parameters()

    def eval(self) -> _ResidualMap:
        self.h.eval()
        return self


def train_map(
    inputs: np.ndarray, outputs: np.ndarray, seed: int, steps: int = TRAIN_STEPS, anchor: float | None = None
) -> Any:
    """The transfer function ``g``: one hidden layer of ``20 d`` sigmoid units, sigmoid outputs,
    trained with Adam on the mean squared distance between ``g(input)`` and its rank-matched output.

    With ``anchor`` (in [0, 1]; ``hts-anchored``) ``g`` is the residual map :class:`_ResidualMap`
    with the same hidden layer, and the loss adds ``anchor`` times the distance of ``g(input)``
    from ``input`` to ``1 - anchor`` times the rank-matching term."""
    import torch

    torch.manual_seed(seed)
    d = inputs.shape[1]
    if anchor is None:
        net: Any = torch.nn.Sequential(
            torch.nn.Linear(d, HIDDEN_PER_DIM * d),
            torch.nn.Sigmoid(),
            torch.nn.Linear(HIDDEN_PER_DIM * d, d),
            torch.nn.Sigmoid(),
        ).double()
    else:
        last = torch.nn.Linear(HIDDEN_PER_DIM * d, d)
        torch.nn.init.zeros_(last.weight)
        torch.nn.init.zeros_(last.bias)
        net = _ResidualMap(
            torch.nn.Sequential(torch.nn.Linear(d, HIDDEN_PER_DIM * d), torch.nn.Sigmoid(), last).double()
        )
    X, Y = torch.as_tensor(inputs, dtype=torch.double), torch.as_tensor(outputs, dtype=torch.double)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(seed)
    a = 0.0 if anchor is None else float(anchor)
    for _ in range(steps):
        idx = torch.randint(0, len(X), (512,), generator=gen)
        out = net(X[idx])
        loss = (1.0 - a) * ((out - Y[idx]) ** 2).sum(-1).mean()
        if a > 0.0:
            loss = loss + a * ((out - X[idx]) ** 2).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    net.eval()
    return net


def loo_spearman(U: np.ndarray, y: np.ndarray) -> float:
    """How well the target surrogate predicts a trial it has not seen: the Spearman correlation
    between each finite trial's value and the RBF fitted to all the others (0 when undefined)."""
    from scipy.stats import spearmanr

    ok = np.isfinite(y)
    U, y = np.asarray(U, dtype=float)[ok], np.asarray(y, dtype=float)[ok]
    if len(y) < 4 or np.ptp(y) == 0:
        return 0.0
    pred = np.array([rbf_surrogate(np.delete(U, i, 0), np.delete(y, i))(U[i : i + 1])[0] for i in range(len(y))])
    rho = spearmanr(pred, y).statistic
    return float(rho) if np.isfinite(rho) else 0.0


def anchor_weight(target_U: np.ndarray, target_y: np.ndarray) -> float:
    """``hts-anchored``'s weight on the identity: ``1 - max(0, rho)`` (:func:`loo_spearman`)."""
    return 1.0 - max(0.0, loo_spearman(target_U, target_y))


def hts_round(
    source_U: np.ndarray,
    source_y: np.ndarray,
    target_U: np.ndarray,
    target_y: np.ndarray,
    seed: int,
    anchored: bool = False,
) -> np.ndarray:
    """One round of Algorithm 1 (steps 5-8): the source configurations, best first, mapped through a
    freshly trained ``g``. Values are maximised (the sampler passes signed values). ``anchored``:
    the ``hts-anchored`` map (module docstring)."""
    import torch

    from agent.surrogates.gp import torch_threads

    ok_s, ok_t = np.isfinite(source_y), np.isfinite(target_y)
    S_S = rbf_surrogate(source_U[ok_s], source_y[ok_s])
    S_T = rbf_surrogate(target_U[ok_t], target_y[ok_t])
    d = source_U.shape[1]
    with torch_threads(1):
        inputs, outputs = rank_matched_pairs(S_S, S_T, d, seed)
        anchor = anchor_weight(target_U[ok_t], target_y[ok_t]) if anchored else None
        g = train_map(inputs, outputs, seed, anchor=anchor)
        order = np.argsort(-np.where(ok_s, source_y, -np.inf), kind="stable")
        with torch.no_grad():
            return g(torch.as_tensor(source_U[order], dtype=torch.double)).numpy()
