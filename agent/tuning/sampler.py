"""Samplers decide the next configuration from a study's history (Optuna's sampler role).

:class:`BoSampler` is paper 000's Algorithm 1: the first ``n_init`` slots come from a seeded
initial design (or from seed configurations handed in, e.g. a warm start), every later slot from
one BO step over the finished trials. Slot ``n`` always gets the same design point, so a study
resumed after a crash continues on the design it started with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from agent.config import StudySettings
from agent.knowledge.base import TRIAL_FAILED, TRIAL_OK, TrialRecord
from agent.space import SearchSpace
from agent.tuning.bo import interleaved_random, propose_next, random_unseen
from agent.tuning.design import initial_design


@dataclass(frozen=True)
class Suggestion:
    config: dict[str, Any]
    origin: str


class BoSampler:
    """Initial design, then GP + LogEI/UCB. ``seeds`` ``(config, origin)`` take the first slots."""

    def __init__(
        self,
        space: SearchSpace,
        settings: StudySettings,
        seeds: Sequence[tuple[Mapping[str, Any], str]] = (),
        mean_module_factory: Any = None,
        model_builder: Any = None,
    ) -> None:
        self.space = space
        self.settings = settings
        self.seeds = [(dict(c), origin) for c, origin in seeds]
        self.mean_module_factory = mean_module_factory
        self.model_builder = model_builder
        self._gp_state: dict = {}
        n_design = max(settings.n_init - len(self.seeds), 0)
        self._design = space.snap(initial_design(settings.init, n_design, space.dim, settings.seed)) if n_design else np.empty((0, space.dim))

    def observations(self, history: Sequence[TrialRecord]) -> tuple[np.ndarray, np.ndarray]:
        """Cube points `n x d` and maximised values `n` (NaN for failed) of finished trials."""
        rows, values = [], []
        for t in history:
            if t.state not in (TRIAL_OK, TRIAL_FAILED):
                continue
            try:
                rows.append(self.space.encode(t.config))
            except Exception:  # noqa: BLE001 - a hand-edited record outside the space is skipped
                continue
            values.append(np.nan if t.value is None else self.settings.sign * t.value)
        U = np.array(rows) if rows else np.empty((0, self.space.dim))
        return U, np.array(values, dtype=float)

    def suggest(self, number: int, history: Sequence[TrialRecord]) -> Suggestion:
        if number < len(self.seeds):
            return Suggestion(*self.seeds[number])
        k = number - len(self.seeds)
        if k < len(self._design):
            return Suggestion(self.space.decode(self._design[k]), f"init:{self.settings.init}")
        U, y = self.observations(history)
        seed = self.settings.seed * 100003 + number
        if self.model_builder is None and interleaved_random(number - self.settings.n_init + 1, self.settings.random_every):
            return Suggestion(self.space.decode(random_unseen(self.space, U, np.random.default_rng(seed))), "random:interleaved")
        mean = self.mean_module_factory(U, y) if self.mean_module_factory else None
        u = propose_next(
            self.space,
            U,
            y,
            self.settings.acq,
            iteration=number - self.settings.n_init + 1,
            seed=seed,
            mean_module=mean,
            warm_state=self._gp_state,
            model_builder=self.model_builder,
        )
        return Suggestion(self.space.decode(u), f"bo:{self.settings.acq}")
