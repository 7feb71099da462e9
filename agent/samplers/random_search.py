"""Random search: uniform configurations of the space, one seeded stream per slot."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import TrialRecord
from agent.samplers.base import Suggestion
from agent.space import SearchSpace


class RandomSampler:
    """Uniform configurations of the space, one seeded stream per slot."""

    def __init__(self, space: SearchSpace, settings: StudySettings) -> None:
        self.space, self.settings = space, settings

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        u = np.random.default_rng([self.settings.seed, number]).random(self.space.dim)
        return Suggestion(self.space.decode(self.space.snap(u)[0]), "random")

    def pending_note(self) -> str:
        return "random search draws every slot on its own, whatever runs"
