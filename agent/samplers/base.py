"""The sampler contract: what every sampler of a study does (Optuna's sampler role).

``suggest(number, trials)`` returns the configuration for trial slot ``number`` and its origin,
given every trial of the study so far -- finished, failed and running. Running trials are the
pending points of parallel workers: a sampler must not suggest one of them again, and the BO
sampler conditions its step on them (``X_pending``, a believed or a lying model: the study's
``pending`` setting), so N workers spread out instead of piling on one point; TPE takes them (as
Optuna's RUNNING trials) only when told. A sampler keeps no state that the trials do not also hold
(caches aside), so a study resumed in another process continues where it stopped.

The samplers: :mod:`agent.samplers.bo` (the product's), :mod:`agent.samplers.random_search`,
:mod:`agent.samplers.tpe`, :mod:`agent.samplers.hts`; :mod:`agent.samplers.registry` names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from agent.knowledge.records import TRIAL_PRUNED, TrialRecord
from agent.space import SearchSpace


@dataclass(frozen=True)
class Suggestion:
    config: dict[str, Any]
    origin: str


class Sampler(Protocol):
    """Suggests trial ``number``'s configuration from the study's trials (all states)."""

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion: ...

    def pending_note(self) -> str: ...


def pending_note(sampler: Any) -> str:
    """How ``sampler`` treats running trials, in words for the user of a parallel study."""
    note = getattr(sampler, "pending_note", None)
    return note() if callable(note) else "the sampler draws every slot on its own, whatever runs"


def encoded(
    space: SearchSpace, trials: Sequence[TrialRecord], states: tuple[str, ...], sign: float
) -> tuple[np.ndarray, np.ndarray]:
    """Cube points `n x d` and maximised values `n` (NaN when failed or running) of ``trials`` in ``states``.

    A pruned trial's value is where it was stopped, not a result: it enters as a bound, never
    better than the worst finished trial (a pruner stops trials it judged worse than their peers),
    and lower still when its last value was."""
    rows, values, pruned = [], [], []
    for t in sorted(trials, key=lambda t: t.number):
        if t.state not in states:
            continue
        try:
            rows.append(space.encode(t.config))
        except Exception:
            continue
        values.append(np.nan if t.value is None else sign * t.value)
        pruned.append(t.state == TRIAL_PRUNED)
    U = np.array(rows) if rows else np.empty((0, space.dim))
    y, is_pruned = np.array(values, dtype=float), np.array(pruned, dtype=bool)
    finished = y[~is_pruned & np.isfinite(y)]
    if is_pruned.any() and len(finished):
        y[is_pruned] = np.fmin(y[is_pruned], finished.min())
    return U, y
