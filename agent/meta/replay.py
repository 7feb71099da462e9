"""BO replayed over a lookup table: how a warm start would have done, without retraining anything.

A held-out dataset's evaluated configurations (`m x d` cube points with their validation errors)
are the only candidates; every method starts from its own initial configurations and then runs
the same GP + acquisition loop over the remaining candidates. Regret is normalised per dataset by
the min and max error of its table, as in paper 003's evaluation.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

FIT_MAXITER = 30


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


def _acquisition_scores(model: Any, X: Any, best: float, acq: str, t: int, dim: int) -> np.ndarray:
    import torch
    from botorch.acquisition import LogExpectedImprovement, UpperConfidenceBound

    from agent.surrogates.gp import ucb_beta

    fn = LogExpectedImprovement(model, best_f=best) if acq == "ei" else UpperConfidenceBound(model, beta=ucb_beta(t, dim))
    with torch.no_grad():
        return fn(X.unsqueeze(1)).detach().cpu().numpy()


def replay_bo(
    errors: np.ndarray,
    U: np.ndarray,
    init: Sequence[int],
    budget: int,
    acq: str = "ei",
    mean_factory: Callable[[], Any] | None = None,
) -> list[int]:
    """Evaluation order: ``init`` first, then GP + EI/UCB picks over the unevaluated rows."""
    import torch

    from agent.surrogates.gp import fit_gp, torch_threads

    order = [int(i) for i in init][:budget]
    y_all = -np.nan_to_num(np.asarray(errors, dtype=float), nan=np.nanmax(errors))
    state: dict = {}
    X_all = torch.as_tensor(U, dtype=torch.double)
    with torch_threads(1):
        while len(order) < min(budget, len(U)):
            rest = [i for i in range(len(U)) if i not in set(order)]
            if len(order) < 2:
                order.append(rest[0])
                continue
            train_Y = torch.as_tensor(y_all[order], dtype=torch.double).reshape(-1, 1)
            mean = mean_factory() if mean_factory else None
            model = fit_gp(X_all[order], train_Y, mean_module=mean, warm_state=state, maxiter=FIT_MAXITER)
            scores = _acquisition_scores(model, X_all[rest], float(train_Y.max()), acq, len(order), U.shape[1])
            order.append(rest[int(np.argmax(scores))])
    return order
