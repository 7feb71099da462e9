"""HTS (paper 001) as a sampler: rounds of source configurations mapped onto the target."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import COUNTED_STATES, TRIAL_OK, TRIAL_RUNNING, TrialRecord
from agent.samplers.acquisition import evaluated_keys, point_key, random_unseen
from agent.samplers.base import Sampler, Suggestion, encoded
from agent.space import SearchSpace

HTS_ROUND = 3  # r: mapped source configurations per round (paper 001 studies r; 3 suits 20-30-trial budgets)


class HtsSampler:
    """HTS (paper 001, Algorithm 1; the math in :mod:`agent.surrogates.hts`) behind the sampler contract.

    Slots ``0..m-1`` are a Latin hypercube (``m`` = ``n_init``); then round ``j`` (``r`` slots) maps
    the source's best configurations through a ``g`` trained on the target's trials finished before
    the round began, so the slots of a round are fixed once it starts, whatever runs in parallel
    and whenever the study resumes. The source is ``preferred`` (the warm start's nearest
    neighbour) when the history holds it, otherwise the source whose surrogate ranks the ``m``
    initial results most like they came out (Spearman correlation), chosen once. ``anchored``:
    the ``hts-anchored`` map (ours: the identity until the target surrogate predicts held-out trials),
    and once a whole round has finished without beating the best trial before it, every later slot
    goes to ``after`` (BO on a plain GP: the mapped ranking is used up and HTS itself never explores).
    """

    def __init__(
        self,
        space: SearchSpace,
        settings: StudySettings,
        sources: Sequence[Any],
        preferred: str | None = None,
        r: int = HTS_ROUND,
        anchored: bool = False,
        after: Sampler | None = None,
    ) -> None:
        from agent.surrogates.hts import lhs

        if not sources:
            raise ValueError("HTS needs a source: history for this job and space")
        self.space, self.settings, self.sources, self.r = space, settings, list(sources), r
        self.anchored, self.kind, self.after = anchored, "hts-anchored" if anchored else "hts", after
        self.m = settings.n_init
        self.preferred = next((s for s in self.sources if s.key == preferred), None)
        self._design = space.snap(lhs(self.m, space.dim, settings.seed))
        self._rounds: dict[int, np.ndarray] = {}
        self._source: Any = self.preferred

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        running, _ = encoded(self.space, trials, (TRIAL_RUNNING,), self.settings.sign)
        done, _ = encoded(self.space, trials, COUNTED_STATES, self.settings.sign)
        seen = np.vstack([done, running])
        if number < self.m:
            return Suggestion(self.space.decode(self._design[number]), "init:lhs")
        j = (number - self.m) // self.r  # the round; its slots take its mapped points in order
        start = self.m + j * self.r
        if self.after is not None and self.handed_over(j, trials):
            return self.after.suggest(number, trials)
        before = [t for t in trials if t.number < start]
        U, y = encoded(self.space, before, COUNTED_STATES, self.settings.sign)
        source = self.source(U, y)
        if j not in self._rounds:
            from agent.surrogates.gp import impute_failures
            from agent.surrogates.hts import hts_round

            self._rounds[j] = self.space.snap(
                hts_round(
                    source.U, source.y, U, impute_failures(y), self.settings.seed * 100003 + j, anchored=self.anchored
                )
            )
        keys = evaluated_keys(self.space, seen)
        fresh = [u for u in self._rounds[j] if point_key(u) not in keys]
        if len(fresh) > 0:
            # the best mapped point not tried yet (earlier slots of the round, running ones included)
            return Suggestion(self.space.decode(fresh[0]), f"{self.kind}:{source.name}")
        rng = np.random.default_rng(self.settings.seed * 100003 + number)
        return Suggestion(self.space.decode(random_unseen(self.space, seen, rng)), f"random:{self.kind}-exhausted")

    def pending_note(self) -> str:
        return "an HTS round's slots are fixed when it starts, so running trials do not change them"

    def handed_over(self, j: int, trials: Sequence[TrialRecord]) -> bool:
        """Whether some round before ``j`` finished every slot without beating the best trial
        numbered before it (a pure function of the trials, so resumes and parallel workers agree)."""
        by_number = {t.number: t for t in trials if t.state in COUNTED_STATES}

        def best(upto: int) -> float:
            vals = [
                self.settings.sign * t.value
                for n, t in by_number.items()
                if n < upto and t.state == TRIAL_OK and t.value is not None
            ]
            return max(vals, default=-np.inf)

        for k in range(j):
            lo, hi = self.m + k * self.r, self.m + (k + 1) * self.r
            if all(n in by_number for n in range(lo, hi)) and not best(hi) > best(lo):
                return True
        return False

    def source(self, U: np.ndarray, y: np.ndarray) -> Any:
        if self._source is None:
            from scipy.stats import spearmanr

            from agent.surrogates.hts import rbf_surrogate

            ok = np.isfinite(y)
            best, best_rho = self.sources[0], -np.inf
            for s in self.sources:
                rho = spearmanr(rbf_surrogate(s.U, s.y)(U[ok]), y[ok]).statistic if ok.sum() > 2 else 0.0
                rho = -np.inf if not np.isfinite(rho) else float(rho)
                if rho > best_rho:
                    best, best_rho = s, rho
            self._source = best
        return self._source
