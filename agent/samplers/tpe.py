"""TPE: Optuna's ``TPESampler`` behind the sampler contract (the only sampler that imports optuna);
with several metrics, Optuna's multi-objective TPE (Ozaki et al. 2020)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.config import StudySettings
from agent.knowledge.records import COUNTED_STATES, CURVE_PREFIX, TRIAL_OK, TRIAL_PRUNED, TRIAL_RUNNING, TrialRecord
from agent.samplers.base import Suggestion
from agent.space import Float, Int, SearchSpace


class TpeSampler:
    """Optuna's default ``TPESampler``, rebuilt from the trials at every slot (seeded per slot), so
    it resumes like every sampler here. Log parameters get log distributions; conditional
    parameters are suggested define-by-run, so they stay conditional. Parallel workers' slots
    differ by their seeds; running trials enter only with ``--pending liar``, as Optuna's RUNNING
    trials under its ``constant_liar``: on lcbench (34 tasks x 5 seeds, 4 in flight) that was
    worse than leaving them out (+.0043/+.0039 regret over sequential at 20/30 trials against
    +.0003/+.0015)."""

    def __init__(self, space: SearchSpace, settings: StudySettings) -> None:
        self.space, self.settings = space, settings

    def _distribution(self, name: str) -> Any:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        p = self.space[name]
        if isinstance(p, Float):
            return FloatDistribution(p.low, p.high, log=p.log)
        if isinstance(p, Int):
            return IntDistribution(p.low, p.high, log=p.log)
        return CategoricalDistribution(p.choices)

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        import logging

        import optuna
        from optuna.trial import TrialState, create_trial

        optuna.logging.set_verbosity(logging.WARNING)
        objectives = self.settings.objective_list()  # several: Optuna's multi-objective TPE
        study = optuna.create_study(
            directions=["maximize" if mode == "max" else "minimize" for _, mode in objectives],
            sampler=optuna.samplers.TPESampler(
                seed=self.settings.seed * 100003 + number, constant_liar=self.settings.pending == "liar"
            ),
        )
        for t in sorted(trials, key=lambda t: t.number):
            dists = {n: self._distribution(n) for n in t.config}
            if t.state == TRIAL_RUNNING and self.settings.pending == "liar":
                study.add_trial(create_trial(params=dict(t.config), distributions=dists, state=TrialState.RUNNING))
                continue
            if t.state not in COUNTED_STATES:
                continue
            values = self._values(t)
            ok = t.state == TRIAL_OK and values is not None
            state = TrialState.COMPLETE if ok else TrialState.PRUNED if t.state == TRIAL_PRUNED else TrialState.FAIL
            curve = _curve(t) if state == TrialState.PRUNED and len(objectives) == 1 else None
            study.add_trial(
                create_trial(
                    params=dict(t.config),
                    distributions=dists,
                    values=values if ok else None,
                    intermediate_values=curve,
                    state=state,
                )
            )
        trial = study.ask()
        config: dict[str, Any] = {}
        for p in self.space.params:
            if self.space.is_active(p, config):
                if isinstance(p, Float):
                    config[p.name] = trial.suggest_float(p.name, p.low, p.high, log=p.log)
                elif isinstance(p, Int):
                    config[p.name] = trial.suggest_int(p.name, p.low, p.high, log=p.log)
                else:
                    config[p.name] = trial.suggest_categorical(p.name, list(p.choices))
        return Suggestion(config, "tpe")

    def _values(self, trial: TrialRecord) -> list[float] | None:
        """The trial's value of each objective (the primary first), or None when one is missing."""
        if not self.settings.multi:
            return [float(trial.value)] if trial.value is not None else None
        from agent.samplers.pareto import objective_values

        values = objective_values(trial, self.settings)
        return None if values is None else [values[name] for name, _ in self.settings.objective_list()]

    def pending_note(self) -> str:
        if self.settings.pending == "liar":
            return "running trials enter TPE as Optuna's RUNNING trials (constant liar)"
        return "TPE draws every slot with its own seed and leaves running trials out (--pending liar gives them to it)"


def _curve(trial: TrialRecord) -> dict[int, float]:
    """A pruned trial's per-epoch values (Optuna ranks pruned trials by them)."""
    curve = {
        int(k[len(CURVE_PREFIX) :]): float(v)
        for k, v in trial.extra.items()
        if k.startswith(CURVE_PREFIX) and k[len(CURVE_PREFIX) :].isdigit()
    }
    return curve or ({1: float(trial.value)} if trial.value is not None else {})
