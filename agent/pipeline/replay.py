"""The warm-start evaluation's replay, run by the product's own sampler over a lookup table.

A held-out dataset's evaluated configurations (`m x d` cube points with their validation errors)
are the only candidates (:class:`agent.samplers.bo.BoSampler` with ``candidates``); a method's
initial configurations come first, then the sampler's BO steps — the same GP, normal scores,
interleaved random steps and acquisition as ``tune-agent start`` — pick among the rows not yet
tried. Regret is normalised per dataset by the min and max error of its table (paper 003).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agent.config import RANDOM_EVERY, StudySettings
from agent.knowledge.records import TRIAL_FAILED, TRIAL_OK, TrialRecord
from agent.pipeline.regret import normalised_regret
from agent.samplers.acquisition import point_key
from agent.samplers.bo import BoSampler
from agent.space import SearchSpace
from agent.surrogates.contract import SurrogateInputs
from agent.surrogates.gp import normal_scores
from agent.surrogates.source_fits import SourceFits, SourceTask
from agent.surrogates.specs import GpSurrogate

ACQ_NAMES = {"ei": "logei", "logei": "logei", "ucb": "ucb"}  # the evaluation's names -> the product's
# Neighbours' GPs by content, kept for the worker's life: a dataset is a neighbour of many targets.
_FITS = SourceFits()


def replay_order(
    space: SearchSpace,
    errors: np.ndarray,
    U: np.ndarray,
    init: Sequence[int],
    budget: int,
    acq: str = "ei",
    prior: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
    stop_at_best: bool = False,
) -> list[int]:
    """Rows of the table in the order a study would evaluate them (errors minimised).

    ``prior`` maps neighbour names to their error rows on the same table: the GP's prior mean is
    then their surfaces (paper 000, Algorithm 3), as ``--prior-mean neighbours`` does. With
    ``stop_at_best`` the replay ends once the table's best row was evaluated: the best-so-far curve
    (what the evaluation reports) cannot change after that, so the BO steps would be wasted.
    """
    U = space.snap(np.asarray(U))
    rows = {point_key(u): i for i, u in enumerate(U)}
    budget = min(budget, len(U))
    sampler = _table_sampler(space, U, init, budget, acq, prior, seed)
    trials: list[TrialRecord] = []
    order: list[int] = []
    for number in range(budget):
        s = sampler.suggest(number, trials)
        row = rows[point_key(space.snap(space.encode(s.config))[0])]
        value = float(errors[row])
        ok = np.isfinite(value)
        trials.append(
            TrialRecord(
                str(number), number, TRIAL_OK if ok else TRIAL_FAILED, s.config, value if ok else None, s.origin
            )
        )
        order.append(row)
        if stop_at_best and ok and value <= np.nanmin(errors):
            break
    return order


def _table_sampler(
    space: SearchSpace,
    U: np.ndarray,
    init: Sequence[int],
    budget: int,
    acq: str,
    prior: Mapping[str, np.ndarray] | None,
    seed: int,
) -> BoSampler:
    """The product's BO sampler restricted to the table's rows ``U`` (snapped), starting from the
    rows ``init``, with the ``prior`` neighbours' surfaces as its GP's prior mean when given."""
    sources = tuple(
        SourceTask(name, name, U[np.isfinite(e)], normal_scores(-e[np.isfinite(e)]))
        for name, e in (prior or {}).items()
    )
    inputs = SurrogateInputs(
        space,
        sources,
        seed=seed,
        prior_mean="neighbours" if sources else "constant",
        neighbour_keys=tuple(s.key for s in sources),
        fits=_FITS,
    )
    init = [int(i) for i in init][:budget]
    settings = StudySettings(
        job="replay",
        job_name="replay",
        dataset="table",
        dataset_name="table",
        fingerprint="-",
        space_signature=space.signature(),
        metric="error",
        mode="min",
        trials=budget,
        n_init=max(len(init), 1),
        acq=ACQ_NAMES[acq],
        random_every=RANDOM_EVERY,
        seed=seed,
    )
    return BoSampler(
        space, settings, GpSurrogate(inputs), [(space.decode(U[i]), "init:table") for i in init], candidates=U
    )


def replay_dataset(task: Mapping[str, Any]) -> dict[str, list[float]]:
    """All methods on one held-out dataset; returns ``{method: regret curve}`` (worker-safe)."""
    import torch

    torch.set_num_threads(1)
    t, U, E, budget, space = task["target"], task["U"], task["E"], task["budget"], task["space"]
    curves: dict[str, list[float]] = {}
    seen: dict[tuple, list[float]] = {}  # methods that start from the same rows replay once
    for name, init, acq, prior in task["runs"]:
        same = (tuple(init), acq, tuple(prior or ()))
        if same not in seen:
            neighbours = {str(j): E[j] for j in prior} if prior else None
            order = replay_order(space, E[t], U, init, budget, acq, neighbours, seed=t, stop_at_best=True)
            curve = normalised_regret(E[t], order).tolist()
            seen[same] = curve + [curve[-1]] * (min(budget, len(U)) - len(curve))  # 0 from the best row on
        curves[name] = seen[same]
    return curves
