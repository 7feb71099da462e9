"""The Gaussian process every surrogate of this package builds on, and the y transforms BO uses.

Owns :func:`fit_gp` (BoTorch's ``SingleTaskGP`` with its default priors), the one
:func:`standardise`, the failure imputation and the rank-based normal scores applied to a study's
values before any model sees them, and :func:`torch_threads`, which pins torch's threads around
the small fits (two busy cores oversubscribed by default threading turned a 0.1 s fit into 8-18 s).
Use it when a module needs a GP on cube points; use :mod:`agent.surrogates.registry` to choose
a surrogate for a study.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

# L-BFGS iterations per GP fit: each costs ~3 ms; warm-started fits converge well within this.
FIT_MAXITER = 50
COLD_FIT_UNTIL = 40
UCB_DELTA = 0.1


class GpFitWarning(UserWarning):
    """A GP fit did not converge; the model keeps the hyperparameters it had (the prior's)."""


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Pins torch's intra-op threads; tiny GP fits oversubscribe busy cores otherwise."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def standardise(y: Any) -> tuple[Any, float, float]:
    """`n` (or `n x 1`) values, array or tensor → (standardised, mean, std).

    Fewer than two values or no spread keep std 1, so a constant target is not blown up.
    """
    n = y.size if isinstance(y, np.ndarray) else y.numel()
    mean = float(y.mean()) if n else 0.0
    std = float(y.std(ddof=1) if isinstance(y, np.ndarray) else y.std()) if n > 1 else 1.0
    std = std if std > 1e-12 and math.isfinite(std) else 1.0
    return (y - mean) / std, mean, std


def impute_failures(y: np.ndarray) -> np.ndarray:
    """Replaces NaN (failed trials) with the worst finite value."""
    y = np.asarray(y, dtype=float).copy()
    ok = np.isfinite(y)
    if ok.any():
        y[~ok] = y[ok].min()
    return y


def normal_scores(y: np.ndarray) -> np.ndarray:
    """Rank-based Gaussian copula: values → standard-normal quantiles of their ranks.

    Validation losses of diverged trials (e.g. 67 next to 0.3) would dominate a standardised GP;
    ranks keep the order BO needs and bound every outlier.
    """
    from scipy.stats import norm, rankdata

    y = np.asarray(y, dtype=float)
    if len(y) < 2:
        return np.zeros_like(y)
    return norm.ppf((rankdata(y) - 0.5) / len(y))


def fit_gp(
    train_X: Any,
    train_Y: Any,
    mean_module: Any = None,
    warm_state: dict | None = None,
    maxiter: int = FIT_MAXITER,
    covar_module: Any = None,
    input_dims: Any = None,
) -> Any:
    """Fits a ``SingleTaskGP`` with BoTorch's default priors to `n x d` / `n x 1` data.

    The model is BoTorch's standard one (Hvarfner et al. 2024, "vanilla BO"): an ARD RBF kernel with
    a dimension-scaled LogNormal lengthscale prior, a LogNormal noise prior and standardised
    outcomes. On LCBench it escaped local optima that an ARD Matérn-5/2 + outputscale GP with
    warm-started, bounded fits got stuck in.

    Args:
        mean_module: an optional GPyTorch mean (e.g. the neighbours' prior mean); constant if None.
        covar_module: an optional GPyTorch kernel (e.g. the arc kernel of conditional spaces);
            BoTorch's default if None.
        input_dims: the only input dimensions the GP sees (BoTorch's ``FilterFeatures``); all if None.
        warm_state: carries hyperparameters between consecutive BO steps. While the study has at
            most ``COLD_FIT_UNTIL`` points every fit starts from the prior and runs to convergence
            (hyperparameters move a lot while data is scarce, and a warm start can trap them); past
            that, the fit starts from the previous step's values and is bounded by ``maxiter``.

    A fit that BoTorch gives up on (``ModelFittingError``) warns with :class:`GpFitWarning` and
    keeps the prior's hyperparameters; any other exception propagates.
    """
    from botorch.exceptions.errors import ModelFittingError
    from botorch.fit import fit_gpytorch_mll
    from gpytorch.mlls import ExactMarginalLogLikelihood

    model = make_gp(train_X, train_Y, mean_module, covar_module, input_dims)
    warm = bool(warm_state) and train_X.shape[0] > COLD_FIT_UNTIL
    if warm:
        model.covar_module.load_state_dict(warm_state["covar"])  # type: ignore[index]
        model.likelihood.load_state_dict(warm_state["likelihood"])  # type: ignore[index]
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    options = {"options": {"maxiter": maxiter}} if warm else None
    try:
        fit_gpytorch_mll(mll, optimizer_kwargs=options)
    except ModelFittingError as exc:
        warnings.warn(
            f"GP fit on {train_X.shape[0]} points failed ({exc}); using prior hyperparameters",
            GpFitWarning,
            stacklevel=2,
        )
    if warm_state is not None:
        warm_state["covar"] = model.covar_module.state_dict()
        warm_state["likelihood"] = model.likelihood.state_dict()
    return model


def make_gp(
    train_X: Any, train_Y: Any, mean_module: Any = None, covar_module: Any = None, input_dims: Any = None
) -> Any:
    """The unfitted ``SingleTaskGP`` that :func:`fit_gp` fits (its priors' hyperparameters)."""
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize

    transform = None
    if input_dims is not None:
        import torch
        from botorch.models.transforms.input import FilterFeatures

        transform = FilterFeatures(torch.as_tensor(list(input_dims), dtype=torch.long))
    with warnings.catch_warnings():
        if train_Y.shape[0] > 1 and bool((train_Y == train_Y[0]).all()):  # every value alike (all at chance):
            from botorch.exceptions.warnings import InputDataWarning  # "not standardized" tells nothing then

            warnings.simplefilter("ignore", InputDataWarning)
        return SingleTaskGP(
            train_X,
            train_Y,
            mean_module=mean_module,
            covar_module=covar_module,
            outcome_transform=Standardize(m=1),
            input_transform=transform,
        )


def gp_state(model: Any) -> dict[str, Any]:
    """A fitted GP's hyperparameters (raw, as fitted) as plain lists: JSON keeps float64 exactly.
    Buffers (priors, constraints, the outcome transform's statistics) are left out: the same
    construction on the same data remakes them."""
    return {
        name: {"shape": list(t.shape), "values": t.detach().double().reshape(-1).tolist()}
        for name, t in model.named_parameters()
    }


def restore_gp(
    train_X: Any, train_Y: Any, state: dict[str, Any], covar_module: Any = None, input_dims: Any = None
) -> Any:
    """The GP :func:`fit_gp` fitted to these data, rebuilt from :func:`gp_state` without fitting
    (same construction, then the stored hyperparameters: its posterior is the fitted one's)."""

    model = make_gp(train_X, train_Y, covar_module=covar_module, input_dims=input_dims)
    load_state(model, state)
    return model


def load_state(model: Any, state: dict[str, Any]) -> None:
    """Sets ``model``'s hyperparameters to ``state`` (:func:`gp_state`); ``ValueError`` when their
    names differ, ``RuntimeError`` when a shape does."""
    import torch

    current = dict(model.named_parameters())
    if set(current) != set(state):
        raise ValueError(f"stored GP hyperparameters {sorted(state)} do not fit this model's {sorted(current)}")
    with torch.no_grad():
        for name, entry in state.items():
            current[name].copy_(torch.tensor(entry["values"], dtype=current[name].dtype).reshape(entry["shape"]))


def ucb_beta(iteration: int, dim: int, delta: float = UCB_DELTA) -> float:
    """GP-UCB's growing β_t = 2 log(d t² π² / 6δ) (Srinivas et al. 2010, used by paper 000).

    BoTorch's ``beta`` is κ², so this is passed as is.
    """
    t = max(iteration, 1)
    return 2.0 * math.log(dim * t**2 * math.pi**2 / (6.0 * delta))
