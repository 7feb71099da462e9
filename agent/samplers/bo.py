"""The product's sampler: warm-start configurations, an initial design, then BO on a surrogate.

:class:`BoSampler` runs every surrogate of :mod:`agent.surrogates` (the cold GP, the transfer
models of papers 000, 001, 003, 004), so initial designs, warm starts, failure imputation, running
trials and the fallback to the target's own GP behave the same whichever surrogate a study has.
Its acquisition and the optimisation on the search space are in :mod:`agent.samplers.acquisition`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import COUNTED_STATES, TRIAL_OK, TRIAL_RUNNING, TrialRecord
from agent.samplers.acquisition import (
    believed,
    build_acquisition,
    evaluated_keys,
    interleaved_random,
    optimize_on_space,
    point_key,
    random_unseen,
)
from agent.samplers.base import Suggestion, encoded
from agent.samplers.design import initial_design
from agent.space import SearchSpace
from agent.surrogates.contract import Surrogate

# Size of the cold start's design that a transfer model falls back to when its guard has dropped
# every source (the design a cold ``gp`` study of the same seed starts with).
COLD_DESIGN = 5
# A source-weighted model that has taken STALL_STEPS BO steps since the study's best trial without
# beating it has stopped learning from the target (on held-out YAHPO scenarios RGPE stalled at
# regret .28 where both portfolios reached 0; on lcbench the TNP stayed at .075 on a task where
# portfolio_gp reached 0). From then until something improves, every other step is the target's own
# GP (constant mean, the cold ``gp``'s model on the same observations): the study alternates
# between the transfer model and the fallback it must never do worse than.
STALL_STEPS = 5
FALLBACK_ORIGIN = "bo:target-gp"


class BoSampler:
    """Initial configurations, a design up to ``n_init``, then BO on the prepared surrogate.

    ``candidates`` (cube points `m x d`) restricts every suggestion to those rows: a lookup table
    of evaluated configurations, as in the warm-start evaluation's replay. The acquisition is then
    maximised over the rows not yet tried, and design or random points become the nearest free row.
    """

    def __init__(
        self,
        space: SearchSpace,
        settings: StudySettings,
        surrogate: Surrogate,
        initial: Sequence[tuple[Mapping[str, Any], str]] = (),
        candidates: np.ndarray | None = None,
    ) -> None:
        self.space = space
        self.settings = settings
        self.surrogate = surrogate
        self.initial = [(dict(c), origin) for c, origin in initial]
        self.candidates = None if candidates is None else space.snap(np.atleast_2d(candidates))
        self._state: dict[str, Any] = {}
        n_design = max(settings.n_init - len(self.initial), 0)
        self._design = (
            space.snap(initial_design(settings.init, n_design, space.dim, settings.seed))
            if n_design
            else np.empty((0, space.dim))
        )

    def pending_note(self) -> str:
        return (
            "running trials enter each BO step as "
            + PENDING_WORDS[pending_strategy(self.settings.pending, self.surrogate)]
        )

    def warm_up(self) -> None:
        """Imports what a BO step needs (torch, BoTorch, GPyTorch: about 2 s on 2 cores), for a study
        whose first trials train in another process (:mod:`agent.execution.trial_process`), so the
        first BO step does not wait for it; nothing when the budget ends before a BO step. Changes
        nothing else."""
        if self.settings.trials <= max(self.settings.n_init, len(self.initial)):
            return
        import botorch.acquisition
        import botorch.fit
        import botorch.models
        import botorch.optim
        import botorch.sampling  # noqa: F401
        import gpytorch.mlls  # noqa: F401
        import torch  # noqa: F401

        warm = getattr(self.surrogate, "warm_up", None)  # e.g. RGPE's source GPs, restored from the store
        if callable(warm):
            warm()

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        early = self.before_bo(number, trials)
        if early is not None:
            return early
        U, y, running, seen = self.observed(trials)
        seed, rng = self.step_seed(number)
        bo_step = number - self.settings.n_init + 1
        if self.surrogate.interleave_random and interleaved_random(bo_step, self.settings.random_every):
            return Suggestion(self.space.decode(self._random(seen, rng)), "random:interleaved")
        fallback = self.surrogate.fallback()
        if fallback is not None and self.settings.random_every > 0 and stalled(trials, self.settings.sign):
            u, _ = self.propose(
                U, y, seen, bo_step, seed, rng, surrogate=fallback, state_key="fallback", pending=running
            )
            return Suggestion(self.space.decode(u), FALLBACK_ORIGIN)
        u, origin = self.propose(U, y, seen, bo_step, seed, rng, pending=running)
        return Suggestion(self.space.decode(u), origin)

    def before_bo(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion | None:
        """Slot ``number``'s warm-start configuration or design point, or None once BO begins."""
        if number < len(self.initial):
            return Suggestion(*self.initial[number])
        k = number - len(self.initial)
        if k >= len(self._design):
            return None
        seen = self.observed(trials)[3]
        return Suggestion(self.space.decode(self._restrict(self._design[k], seen)), f"init:{self.settings.init}")

    def observed(self, trials: Sequence[TrialRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The finished trials' cube points and maximised values, the running trials' points, and
        every point tried or trying (``seen``: never suggested again)."""
        U, y = encoded(self.space, trials, COUNTED_STATES, self.settings.sign)
        running, _ = encoded(self.space, trials, (TRIAL_RUNNING,), self.settings.sign)
        return U, y, running, np.vstack([U, running])

    def step_seed(self, number: int) -> tuple[int, np.random.Generator]:
        """Slot ``number``'s seed and random generator: the same step draws the same on resume."""
        seed = self.settings.seed * 100003 + number
        return seed, np.random.default_rng(seed)

    def propose(
        self,
        U: np.ndarray,
        y: np.ndarray,
        seen: np.ndarray,
        bo_step: int,
        seed: int,
        rng: np.random.Generator,
        surrogate: Surrogate | None = None,
        state_key: str = "model",
        pending: np.ndarray | None = None,
    ) -> tuple[np.ndarray, str]:
        """One BO step on ``surrogate`` (default: the study's): (snapped cube point, origin).

        ``pending`` (cube points `p x d` of running trials) enters as the surrogate declares
        (:attr:`~agent.surrogates.contract.Surrogate.pending`)."""
        surrogate = surrogate or self.surrogate
        import torch

        from agent.surrogates.gp import impute_failures, normal_scores, torch_threads

        y = impute_failures(y)
        if not np.isfinite(y).any():
            return self._random(seen, rng), "random:no-finite-value"
        pending = pending if pending is not None and len(pending) else None
        with torch_threads(1):
            train_X = torch.as_tensor(U, dtype=torch.double)
            train_Y = torch.as_tensor(normal_scores(y), dtype=torch.double).reshape(-1, 1)
            model_X, model_Y, X_pending = train_X, train_Y, None
            how = pending_strategy(self.settings.pending, surrogate)
            P = None if pending is None else torch.as_tensor(pending, dtype=torch.double)
            if P is not None and how == "liar":
                model_X = torch.cat([train_X, P])
                model_Y = torch.cat([train_Y, torch.full((len(P), 1), float(train_Y.min()), dtype=torch.double)])
            elif P is not None and how == "joint":
                X_pending = P
            step = self._step_model(surrogate, state_key, model_X, model_Y)
            if P is not None and how == "believer":
                try:
                    step = replace(step, model=believed(step.model, P))
                except NotImplementedError:  # an ensemble (RGPE) or a neural process: refitted on the belief
                    with torch.no_grad():
                        belief = step.model.posterior(P).mean.reshape(-1, 1)
                    step = self._step_model(surrogate, state_key, torch.cat([train_X, P]), torch.cat([train_Y, belief]))
            if step.source_weight <= 0:
                fallback = self.cold_start_point(seen)
                if fallback is not None:
                    return self._restrict(fallback, seen), "init:cold-fallback"
            acqf = build_acquisition(
                step.model, train_Y, self.settings.acq, bo_step, self.space.dim, X_pending=X_pending, seed=seed
            )
            if self.candidates is not None:
                free = self._free(seen)
                with torch.no_grad():
                    scores = acqf(torch.as_tensor(free, dtype=torch.double).unsqueeze(1))
                return free[int(torch.argmax(scores))], f"bo:{self.settings.acq}"
            torch.manual_seed(seed)
            x = optimize_on_space(acqf, self.space, seed, surrogate.budget)
        # An acquisition peak on an evaluated configuration (integer lattice) explores instead.
        return random_unseen(self.space, seen, rng, self.space.snap(x)[0]), f"bo:{self.settings.acq}"

    def _step_model(self, surrogate: Surrogate, state_key: str, X: Any, Y: Any) -> Any:
        """``surrogate``'s model on ``X``/``Y``, fitted once for the same data: asks between two
        results (workers freed together, trials asked ahead) differ only in their running points,
        which enter the acquisition (``joint``) or a copy of the model (``believer``), not the fit."""
        key = (id(surrogate), state_key, X.numpy().tobytes(), Y.numpy().tobytes())
        cached = self._state.get("last_step")
        if cached is not None and cached[0] == key:
            return cached[1]
        step = surrogate.step_model(X, Y, self._state.setdefault(state_key, {}))
        self._state["last_step"] = (key, step)
        return step

    def _free(self, seen: np.ndarray) -> np.ndarray:
        """Candidate rows not yet tried (all of them again when every row was)."""
        assert self.candidates is not None
        keys = evaluated_keys(self.space, seen)
        free = np.array([u for u in self.candidates if point_key(u) not in keys])
        return free if len(free) else self.candidates

    def _restrict(self, u: np.ndarray, seen: np.ndarray) -> np.ndarray:
        """``u``, or with candidates the nearest free candidate row."""
        if self.candidates is None:
            return u
        free = self._free(seen)
        return free[int(np.argmin(((free - u) ** 2).sum(axis=1)))]

    def _random(self, seen: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.candidates is None:
            return random_unseen(self.space, seen, rng)
        free = self._free(seen)
        return free[int(rng.integers(len(free)))]

    def cold_start_point(self, seen: np.ndarray) -> np.ndarray | None:
        """The first point of the cold start's design not yet tried, while the model's sources carry
        no weight: the configurations the history steered may all sit in one corner, so a useless
        history costs the few trials it steered and the study then proceeds like ``gp``."""
        keys = evaluated_keys(self.space, seen)
        design = self.space.snap(initial_design(self.settings.init, COLD_DESIGN, self.space.dim, self.settings.seed))
        return next((u for u in design if point_key(u) not in keys), None)


def pending_strategy(setting: str, surrogate: Surrogate) -> str:
    """How running trials enter a BO step of ``surrogate`` under the study's ``pending`` setting
    (:data:`agent.config.PENDING`): the surrogate's own declaration for ``auto``, and for ``joint``
    on a surrogate whose posterior is independent per point (the TNP: ``X_pending`` would not see
    nearness there). ``believer`` and ``liar`` suit every surrogate: both join the running points
    to the data, at the model's mean or at the worst score."""
    if setting == "auto" or (setting == "joint" and surrogate.pending != "joint"):
        return surrogate.pending
    return setting


PENDING_WORDS = {
    "joint": "pending points of the acquisition (qLogEI over X_pending)",
    "believer": "observations at the model's own mean (Kriging believer)",
    "liar": "observations at the worst score (constant liar)",
}


def stalled(trials: Sequence[TrialRecord], sign: float, steps: int = STALL_STEPS) -> bool:
    """Whether the next step belongs to the target GP: the transfer model has taken ``steps`` BO
    steps since the best finished trial without beating it, and the last finished trial was not
    already a fallback step (so the two alternate until one of them improves)."""
    done = sorted((t for t in trials if t.state in COUNTED_STATES), key=lambda t: t.number)
    scores = [sign * t.value if t.state == TRIAL_OK and t.value is not None else -np.inf for t in done]
    if not done or not np.isfinite(max(scores)):
        return False
    after = done[int(np.argmax(scores)) + 1 :]
    transfer_steps = sum(t.origin.startswith("bo:") and t.origin != FALLBACK_ORIGIN for t in after)
    return transfer_steps >= steps and done[-1].origin != FALLBACK_ORIGIN
