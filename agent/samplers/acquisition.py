"""One Bayesian-optimisation step's acquisition: build it and maximise it over the search space.

Used by :class:`agent.samplers.bo.BoSampler` after the initial design (paper 000, Algorithm 1).
Everything here maximises: a ``min`` objective is negated by the caller. The model comes from the
surrogate registry (:mod:`agent.surrogates.registry`); this module only owns the acquisition
(LogEI, or GP-UCB with a growing beta), its optimisation on the space (categoricals enumerated when
few) and the bookkeeping of which points were already evaluated.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from agent.space import SearchSpace
from agent.surrogates.contract import AcqBudget
from agent.surrogates.gp import ucb_beta

MAX_ENUMERATED_CATEGORIES = 32
# Quasi-MC samples of the joint posterior when trials are running (BoTorch's default is 512; the
# acquisition is evaluated on `raw_samples` points, so 256 halves its cost at a noise far below
# the differences between candidates that matter).
PENDING_MC_SAMPLES = 256


def interleaved_random(bo_step: int, every: int) -> bool:
    """Whether BO step ``bo_step`` (1 = the first step after the initial design) is a random one."""
    return every > 0 and bo_step > 0 and bo_step % every == 0


def point_key(u: np.ndarray) -> tuple[float, ...]:
    """A snapped cube point as a hashable key, to tell whether it was already evaluated."""
    return tuple(np.round(u, 9))


def evaluated_keys(space: SearchSpace, U: np.ndarray) -> set[tuple[float, ...]]:
    return {point_key(u) for u in space.snap(np.atleast_2d(U))} if len(U) else set()


def random_unseen(
    space: SearchSpace, U: np.ndarray, rng: np.random.Generator, candidate: np.ndarray | None = None
) -> np.ndarray:
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


def build_acquisition(
    model: Any, train_Y: Any, acq: str, iteration: int, dim: int, X_pending: Any = None, seed: int = 0
) -> Any:
    """LogEI or UCB on ``model``; with ``X_pending`` (running trials, `p x d`) their Monte-Carlo
    versions ``qLogEI``/``qUCB`` over the candidate joined with the pending points, so a candidate
    is worth only what it adds to what the running trials will probably find."""
    from botorch.acquisition import LogExpectedImprovement, UpperConfidenceBound

    if acq not in ("logei", "ucb"):
        raise ValueError(f"unknown acquisition {acq!r}")  # StudySettings validated it: a bug
    if X_pending is not None and len(X_pending):
        import torch
        from botorch.acquisition import qLogExpectedImprovement, qUpperConfidenceBound
        from botorch.sampling import SobolQMCNormalSampler

        sampler = SobolQMCNormalSampler(sample_shape=torch.Size([PENDING_MC_SAMPLES]), seed=seed)
        if acq == "logei":
            return qLogExpectedImprovement(model, best_f=train_Y.max(), sampler=sampler, X_pending=X_pending)
        return qUpperConfidenceBound(model, beta=ucb_beta(iteration, dim), sampler=sampler, X_pending=X_pending)
    if acq == "logei":
        return LogExpectedImprovement(model, best_f=train_Y.max())
    return UpperConfidenceBound(model, beta=ucb_beta(iteration, dim))


def believed(model: Any, X_pending: Any) -> Any:
    """``model`` conditioned on the running points (`p x d`) as if each had returned the model's
    own posterior mean there (the Kriging believer, Ginsbourger et al. 2010), its hyperparameters
    kept: the mean is unchanged and the variance at and near a running point shrinks as if it had
    been observed, so an acquisition on the result prefers what the running trials leave uncertain.
    Raises ``NotImplementedError`` for a model BoTorch cannot condition (an ensemble such as RGPE).
    """
    import torch

    with torch.no_grad():
        mean = model.posterior(X_pending).mean
    return model.condition_on_observations(X_pending, mean)


def structural_fixings(space: SearchSpace) -> list[dict[int, float]] | None:
    """The space's structures, each as the cube coordinates it fixes, or None when there are too
    many to enumerate (more than ``MAX_ENUMERATED_CATEGORIES``) or none at all.

    A structure is one value for every categorical and every parent of a condition (``num_layers``
    of ``mlp-arch``), at the centre of that value's slice of the unit interval, with every dimension
    the values make inactive fixed at its encoding (``INACTIVE``), as a trial's point has it. The
    acquisition is then maximised per structure over the active continuous dimensions only: the arc
    kernel's activity mask is constant there (across a parent's bin edge it jumps, and a line search
    over the jump fails), and a plain GP never sees an inactive coordinate away from where every
    trial has it.
    """
    from agent.space import INACTIVE, Categorical, Int

    parents = {p.condition.parent for p in space.params if p.condition is not None}
    dims = [i for i, p in enumerate(space.params) if isinstance(p, Categorical) or p.name in parents]
    if not dims:
        return None
    values: list[list[float]] = []
    for i in dims:
        param = space.params[i]
        if isinstance(param, Categorical):
            values.append([param.to_unit(c) for c in param.choices])
        elif isinstance(param, Int) and param.high - param.low < MAX_ENUMERATED_CATEGORIES:
            values.append([param.to_unit(k) for k in range(param.low, param.high + 1)])
        else:  # a float parent or a wide integer: too many structures to try one by one
            return None
    if math.prod(len(v) for v in values) > MAX_ENUMERATED_CATEGORIES:
        return None
    fixings: dict[tuple[tuple[int, float], ...], dict[int, float]] = {}
    for combo in itertools.product(*values):
        u = np.full(space.dim, INACTIVE)
        u[dims] = combo
        active = space.active_mask(u)[0]
        fixed = {i: float(u[i]) for i in dims if active[i]}
        fixed.update({i: INACTIVE for i in range(space.dim) if not active[i]})
        fixings.setdefault(tuple(sorted(fixed.items())), fixed)  # nested conditions repeat structures
    return list(fixings.values())


def optimize_on_space(acqf: Any, space: SearchSpace, seed: int, budget: AcqBudget = AcqBudget()) -> np.ndarray:
    """Maximises ``acqf`` over the cube (`d`), over the structures of :func:`structural_fixings`
    when the space's categoricals and condition parents have few combinations, else over the whole
    cube."""
    import torch
    from botorch.optim import optimize_acqf

    d = space.dim
    bounds = torch.stack([torch.zeros(d), torch.ones(d)]).double()
    options: dict[str, bool | float | int | str] = {"seed": seed, "maxiter": budget.maxiter}
    fixed = structural_fixings(space)
    if fixed:
        return _optimize_over_structures(acqf, bounds, fixed, seed, budget)
    x, _ = optimize_acqf(
        acqf, bounds, q=1, num_restarts=budget.num_restarts, raw_samples=budget.raw_samples, options=options
    )
    return x.detach().cpu().numpy().reshape(-1)


RAW_BATCH = 2048  # raw points per batched acquisition call


def _starts(scores: Any, owner: Any, n: int) -> Any:
    """Indices of the refinement's starting points: the best raw point of each of the ``n`` best
    structures (a structure's rank: its best raw score), then the best remaining points up to ``n``."""
    import torch

    per_structure = torch.full((int(owner.max()) + 1,), -1, dtype=torch.long)
    order = torch.argsort(scores, descending=True)
    for i in order.tolist():
        k = int(owner[i])
        if per_structure[k] < 0:
            per_structure[k] = i
    leaders = [int(i) for i in per_structure[per_structure >= 0]]
    leaders = sorted(leaders, key=lambda i: -float(scores[i]))[:n]
    rest = [int(i) for i in order.tolist() if int(i) not in set(leaders)][: max(n - len(leaders), 0)]
    return torch.as_tensor(leaders + rest)


def _optimize_over_structures(
    acqf: Any, bounds: Any, fixed: list[dict[int, float]], seed: int, budget: AcqBudget
) -> np.ndarray:
    """Raw points of every structure scored together in batched calls, then one batched gradient
    refinement from the best of them (:func:`_starts`), each start held inside its own structure
    (its fixed coordinates masked out of the search): the gradient work, a model evaluation per
    iteration, does not grow with the number of structures, as one ``optimize_acqf`` per structure
    made it do (with a transfer surrogate, times the sources)."""
    import torch
    from botorch.generation.gen import gen_candidates_scipy
    from torch.quasirandom import SobolEngine

    per = max(budget.raw_samples // 2, 16)
    d = bounds.shape[-1]
    raw = SobolEngine(d, scramble=True, seed=seed).draw(per * len(fixed)).double()
    owner = torch.arange(len(fixed)).repeat_interleave(per)
    free = torch.ones(len(fixed), d, dtype=raw.dtype)
    values = torch.zeros(len(fixed), d, dtype=raw.dtype)
    for k, fixings in enumerate(fixed):
        cols = torch.as_tensor(list(fixings))
        free[k, cols] = 0.0
        values[k, cols] = torch.as_tensor(list(fixings.values()), dtype=raw.dtype)
    raw = raw * free[owner] + values[owner]  # each structure's share of the raw points takes its fixings
    with torch.no_grad():
        scores = torch.cat([acqf(raw[i : i + RAW_BATCH].unsqueeze(1)) for i in range(0, len(raw), RAW_BATCH)])
    starts = _starts(scores, owner, 2 * budget.num_restarts)
    # Every structure fixes every categorical and parent (to a value or to INACTIVE): those
    # coordinates name a point's structure, and the refinement never moves them (zero gradient)
    naming = (free == 0).all(dim=0)

    def held(Z: Any) -> Any:  # each point's fixed coordinates stay its structure's
        flat = Z.reshape(-1, d)
        k = ((flat[:, None, naming] - values[None, :, naming]) ** 2).sum(-1).argmin(-1)
        return acqf((flat * free[k] + values[k]).reshape(Z.shape))

    torch.manual_seed(seed)
    found, _ = gen_candidates_scipy(
        raw[starts].unsqueeze(1),
        held,  # type: ignore[arg-type]  # BoTorch calls it as one: any callable of X does
        bounds[0],
        bounds[1],
        options={"maxiter": budget.maxiter},
    )
    owners = owner[starts]
    found = found * free[owners].unsqueeze(1) + values[owners].unsqueeze(1)
    with torch.no_grad():
        value = acqf(found)
    i = int(torch.argmax(value))
    best = found[i] if float(value[i]) >= float(scores[starts[0]]) else raw[starts[0]].unsqueeze(0)
    return best.detach().cpu().numpy().reshape(-1)
