"""One Bayesian-optimisation step: fit the surrogate, optimise the acquisition, snap to the space.

Used by :class:`agent.tuning.sampler.BoSampler` after the initial design (paper 000, Algorithm 1).
Everything here maximises: a ``min`` objective is negated by the caller. The surrogate is a BoTorch
``SingleTaskGP`` with an ARD Matérn-5/2 kernel on standardised outcomes; failed trials are imputed
with the worst observed value so the GP steers away from them without a separate classifier.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Any, Iterator

import numpy as np

from agent.space import SearchSpace

ACQUISITIONS = ("logei", "ucb")
UCB_DELTA = 0.1
MAX_ENUMERATED_CATEGORIES = 32
# Every RANDOM_EVERY-th BO step of the cold GP is a uniform random configuration (interleaved
# random search, as in SMAC: Hutter, Hoos, Leyton-Brown 2011; Lindauer et al. 2022). A GP that has
# found a local trend keeps refining it under LogEI while a narrow better region elsewhere goes
# unsampled; on LCBench about 6 % of cold-GP runs stalled that way (README, Benchmarks).
RANDOM_EVERY = 4
# L-BFGS iterations per GP fit: each costs ~3 ms; warm-started fits converge well within this.
FIT_MAXITER = 50
COLD_FIT_UNTIL = 40


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


def interleaved_random(bo_step: int, every: int = RANDOM_EVERY) -> bool:
    """Whether BO step ``bo_step`` (1 = the first step after the initial design) is a random one."""
    return every > 0 and bo_step > 0 and bo_step % every == 0


def point_key(u: np.ndarray) -> tuple[float, ...]:
    """A snapped cube point as a hashable key, to tell whether it was already evaluated."""
    return tuple(np.round(u, 9))


def evaluated_keys(space: SearchSpace, U: np.ndarray) -> set[tuple[float, ...]]:
    return {point_key(u) for u in space.snap(np.atleast_2d(U))} if len(U) else set()


def random_unseen(space: SearchSpace, U: np.ndarray, rng: np.random.Generator,
                  candidate: np.ndarray | None = None) -> np.ndarray:
    """``candidate`` (a snapped point; a uniform random one when None) unless a row of ``U``
    already holds it; then random snapped points until one is new (100 tries: a tiny space may be full)."""
    seen = evaluated_keys(space, U)
    if candidate is None:
        candidate = space.snap(rng.random(space.dim))[0]
    for _ in range(100):
        if point_key(candidate) not in seen:
            break
        candidate = space.snap(rng.random(space.dim))[0]
    return candidate


def ucb_beta(iteration: int, dim: int, delta: float = UCB_DELTA) -> float:
    """GP-UCB's growing β_t = 2 log(d t² π² / 6δ) (Srinivas et al. 2010, used by paper 000).

    BoTorch's ``beta`` is κ², so this is passed as is.
    """
    t = max(iteration, 1)
    return 2.0 * math.log(dim * t**2 * math.pi**2 / (6.0 * delta))


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
    train_X: Any, train_Y: Any, mean_module: Any = None, warm_state: dict | None = None, maxiter: int = FIT_MAXITER
) -> Any:
    """Fits a ``SingleTaskGP`` with BoTorch's default priors to `n x d` / `n x 1` data.

    The model is BoTorch's standard one (Hvarfner et al. 2024, "vanilla BO"): ARD RBF kernel with a
    dimension-scaled LogNormal lengthscale prior, LogNormal noise prior, standardised outcomes. On
    the LCBench benchmark it escaped local optima that an ARD Matérn-5/2 + outputscale GP with
    warm-started, bounded fits got stuck in (`metrics/lcbench.json`, method ``gp``).

    Args:
        mean_module: an optional GPyTorch mean (e.g. the neighbours' prior mean); constant if None.
        warm_state: carries hyperparameters between consecutive BO steps. While the study has at
            most ``COLD_FIT_UNTIL`` points every fit starts from the prior and runs to convergence
            (hyperparameters move a lot while data is scarce, and a warm start can trap them); past
            that, the fit starts from the previous step's values and is bounded by ``maxiter``,
            which keeps the step fast at 100+ observations.
    """
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    model = SingleTaskGP(train_X, train_Y, mean_module=mean_module, outcome_transform=Standardize(m=1))
    warm = bool(warm_state) and train_X.shape[0] > COLD_FIT_UNTIL
    if warm:
        model.covar_module.load_state_dict(warm_state["covar"])  # type: ignore[index]
        model.likelihood.load_state_dict(warm_state["likelihood"])  # type: ignore[index]
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    options = {"options": {"maxiter": maxiter}} if warm else None
    try:
        fit_gpytorch_mll(mll, optimizer_kwargs=options)
    except Exception:  # noqa: BLE001 - a failed fit keeps the prior hyperparameters, still usable
        pass
    if warm_state is not None:
        warm_state["covar"] = model.covar_module.state_dict()
        warm_state["likelihood"] = model.likelihood.state_dict()
    return model


def build_acquisition(model: Any, train_Y: Any, acq: str, iteration: int, dim: int) -> Any:
    from botorch.acquisition import LogExpectedImprovement, UpperConfidenceBound

    if acq == "logei":
        return LogExpectedImprovement(model, best_f=train_Y.max())
    if acq == "ucb":
        return UpperConfidenceBound(model, beta=ucb_beta(iteration, dim))
    raise ValueError(f"unknown acquisition {acq!r}")


ACQ_BUDGET = {"num_restarts": 4, "raw_samples": 128, "maxiter": 60}


def optimize_on_space(acqf: Any, space: SearchSpace, seed: int) -> np.ndarray:
    """Maximises ``acqf`` over the cube; categoricals are enumerated when there are few combos.

    The search budget is ``ACQ_BUDGET`` unless the model asks for another through an
    ``acq_budget`` attribute (same keys): a neural surrogate whose gradient steps are dear can
    trade restarts and iterations for a larger batched random start.
    """
    import torch
    from botorch.optim import optimize_acqf, optimize_acqf_mixed

    budget = {**ACQ_BUDGET, **(getattr(getattr(acqf, "model", None), "acq_budget", None) or {})}
    d = space.dim
    bounds = torch.stack([torch.zeros(d), torch.ones(d)]).double()
    options = {"seed": seed, "maxiter": budget["maxiter"]}
    cat_dims = space.categorical_dims()
    combos = list(
        itertools.product(*[range(len(space.params[i].choices)) for i in cat_dims])  # type: ignore[union-attr]
    )
    if cat_dims and len(combos) <= MAX_ENUMERATED_CATEGORIES:
        fixed = [
            {i: (k + 0.5) / len(space.params[i].choices) for i, k in zip(cat_dims, combo)}  # type: ignore[union-attr]
            for combo in combos
        ]
        x, _ = optimize_acqf_mixed(
            acqf, bounds, q=1, num_restarts=budget["num_restarts"], raw_samples=max(budget["raw_samples"] // 2, 16),
            fixed_features_list=fixed, options=options,
        )
    else:
        x, _ = optimize_acqf(acqf, bounds, q=1, num_restarts=budget["num_restarts"], raw_samples=budget["raw_samples"],
                             options=options)
    return x.detach().cpu().numpy().reshape(-1)


def propose_next(
    space: SearchSpace,
    U: np.ndarray,
    y: np.ndarray,
    acq: str,
    iteration: int,
    seed: int,
    mean_module: Any = None,
    warm_state: dict | None = None,
    model_builder: Any = None,
) -> np.ndarray:
    """Next point (`d`) given observed points `n x d` and values `n` (maximised; NaN = failed).

    ``warm_state`` (a dict the caller keeps between steps) carries GP hyperparameters forward.
    ``model_builder(train_X, train_Y, warm_state)`` replaces the GP with any BoTorch ``Model``
    (a transfer surrogate); the acquisition and its optimisation stay the same.
    """
    import torch

    rng = np.random.default_rng(seed)
    y = impute_failures(y)
    if not np.isfinite(y).any():
        return space.snap(rng.random(space.dim))[0]
    y = normal_scores(y)
    with torch_threads(1):
        train_X = torch.as_tensor(np.asarray(U), dtype=torch.double)
        train_Y = torch.as_tensor(y, dtype=torch.double).reshape(-1, 1)
        if model_builder is not None:
            model = model_builder(train_X, train_Y, warm_state)
        else:
            model = fit_gp(train_X, train_Y, mean_module=mean_module, warm_state=warm_state)
        acqf = build_acquisition(model, train_Y, acq, iteration, space.dim)
        torch.manual_seed(seed)
        x = optimize_on_space(acqf, space, seed)
    # An acquisition peak on an evaluated configuration (integer lattice) explores instead.
    return random_unseen(space, U, rng, space.snap(x)[0])
