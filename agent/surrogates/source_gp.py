"""One GP per historical dataset (a *source*): fitted once, checked for signal, rebuilt from stored
hyperparameters.

Every transfer surrogate (RGPE, the TNP's guard, the portfolio, the neighbours' prior mean) starts
from these models; :class:`agent.surrogates.source_fits.SourceFits` caches them and
:mod:`agent.surrogates.source_store` keeps their hyperparameters, so a study rebuilds them
(:func:`restore_source_gp`) instead of fitting them (:func:`fit_source_gps`). The signal check
(:func:`source_signal`, :func:`informative`) is the zero-shot half of RGPE's negative-transfer guard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from botorch.models.model import Model
from torch import Tensor

from agent.surrogates.gp import fit_gp, standardise, torch_threads
from agent.surrogates.stored_means import JITTER, imputed

SIGNAL_MIN_R2 = 0.4


def fit_source_gps(
    sources: Sequence[tuple[np.ndarray, np.ndarray]],
    covar: Callable[[], Any] | None = None,
    dims: Sequence[int] | None = None,
) -> list[Model]:
    """One ``SingleTaskGP`` per source task (`n_i x d` cube points, `n_i` maximised values).

    Each source's y is standardised first (failed trials imputed with its worst value). The models
    are put in eval mode with frozen hyperparameters; fit them once and cache the list. ``covar``
    makes each GP's kernel (e.g. the arc kernel); BoTorch's default when it is None or returns None.
    ``dims`` (history of another space) restricts each GP to those input dimensions (BoTorch's
    ``FilterFeatures``): it is flat along the others, which the target's GP learns alone.
    """
    models = []
    with torch_threads(1):
        for X, y in sources:
            model = fit_gp(*source_data(X, y), covar_module=covar() if covar is not None else None, input_dims=dims)
            models.append(_frozen(model))
    return models


def restore_source_gp(
    X: np.ndarray,
    y: np.ndarray,
    state: dict[str, Any],
    covar: Callable[[], Any] | None = None,
    dims: Sequence[int] | None = None,
) -> Model:
    """The GP :func:`fit_source_gps` fits to one source, rebuilt from its stored hyperparameters
    (:func:`agent.surrogates.gp.gp_state`) without fitting."""
    from agent.surrogates.gp import restore_gp

    with torch_threads(1):
        return _frozen(
            restore_gp(*source_data(X, y), state, covar_module=covar() if covar is not None else None, input_dims=dims)
        )


def source_data(X: np.ndarray, y: np.ndarray) -> tuple[Tensor, Tensor]:
    """A source's training tensors: failures imputed with its worst value, y standardised."""
    z, _, _ = standardise(torch.as_tensor(imputed(y), dtype=torch.double))
    return torch.as_tensor(np.asarray(X), dtype=torch.double), z.reshape(-1, 1)


def _frozen(model: Any) -> Any:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def source_signal(model: Any) -> float:
    """Leave-one-out R² of a fitted exact GP on its own training data (closed form).

    A source whose responses cannot be predicted from its configurations (pure noise, or values
    shuffled over configurations) has nothing to transfer, whatever the target. Measured on the 34
    LCBench tasks (100 random configurations each): real surfaces score 0.55 to 0.97, the same
    values shuffled over the configurations −0.08 to 0.29 (above 0 because the hyperparameters
    are fitted to the same points); ``SIGNAL_MIN_R2`` sits in that gap.
    LOO residuals are ``[K^-1 r]_i / [K^-1]_ii`` (Rasmussen & Williams 2006, eq. 5.12).
    """
    with torch.no_grad():
        X = model.train_inputs[0].double()
        y = model.train_targets.double()
        n = X.shape[0]
        if n < 3:
            return 0.0
        K = model.covar_module(X).to_dense().double()
        K = K + (model.likelihood.noise.double().reshape(()) + JITTER) * torch.eye(n, dtype=torch.double)
        Kinv = torch.cholesky_inverse(torch.linalg.cholesky(K))
        resid = y - model.mean_module(X).double().reshape(-1)
        loo = (Kinv @ resid) / Kinv.diagonal()
        total = float((y - y.mean()).pow(2).sum())
        return 1.0 - float(loo.pow(2).sum()) / total if total > 0 else 0.0


def informative(models: Sequence[Model], min_r2: float = SIGNAL_MIN_R2) -> list[bool]:
    """Which source GPs carry a response surface at all (:func:`source_signal` ≥ ``min_r2``).

    The zero-shot half of the negative-transfer guard: it needs no target observation, so a
    history of noise never steers even the first trials. Sources that are structured but unlike
    the target are left to the ranking-based guards in :func:`rgpe_weights`.
    """
    return [source_signal(m) >= min_r2 for m in models]


def fit_states(
    tasks: Sequence[tuple[np.ndarray, np.ndarray, tuple[int, ...] | None]], space: Any, kernel: str, workers: int
) -> Iterator[tuple[dict[str, Any], float]]:
    """Each task's (cube points, normal scores, filtered dims) GP as :func:`fit_source_gps` fits it:
    its hyperparameters (:func:`agent.surrogates.gp.gp_state`) and its signal (:func:`source_signal`),
    in order, ``workers`` spawned processes at a time (one torch thread each), each fitting a share.
    The same state as a fit here: one thread, the same data, the same optimiser start."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    per = max(1, min(16, -(-len(tasks) // (4 * workers))))  # small shares: progress is heard as they end
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_one_thread) as pool:
        futures = [pool.submit(_fit_chunk, tasks[i : i + per], space, kernel) for i in range(0, len(tasks), per)]
        for future in futures:
            yield from future.result()


def _one_thread() -> None:
    """A fitting worker: one torch thread, and none of the library notices the command hides."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit.*")
    warnings.filterwarnings("ignore", message=r"Optimization failed", category=RuntimeWarning, module=r"botorch\..*")
    torch.set_num_threads(1)


def _fit_chunk(tasks: Sequence[tuple[np.ndarray, np.ndarray, Any]], space: Any, kernel: str) -> list[tuple[Any, float]]:
    from agent.surrogates.arc import make_arc_kernel
    from agent.surrogates.gp import gp_state

    out = []
    for U, y, dims in tasks:
        covar = (lambda: make_arc_kernel(space)) if kernel == "arc" and dims is None else None
        model = fit_source_gps([(U, y)], covar=covar, dims=dims)[0]
        out.append((gp_state(model), source_signal(model)))
    return out
