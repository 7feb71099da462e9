"""BO for several objectives and constraints: one GP per objective and per constraint, and
BoTorch's qLogNEHVI (Daulton et al. 2021, "Parallel Bayesian Optimization of Multiple Noisy
Objectives with Expected Hypervolume Improvement"; the log form of Ament et al. 2023,
"Unexpected Improvements to Expected Improvement for Bayesian Optimization").

The study's warm-start configurations and initial design come first, as for one objective
(:class:`~agent.samplers.bo.BoSampler`); then each step maximises the expected hypervolume
improvement over the feasible front of the finished trials, a constraint ``NAME<=V`` entering as
the modelled outcome ``NAME - V`` that must be at most 0 (BoTorch's constraint callables). Running
trials enter as ``X_pending``; pruned and failed trials are left out of every model (a pruned
trial's value is where it was stopped, not a result of its configuration).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from agent.config import StudySettings
from agent.knowledge.records import TRIAL_OK, TrialRecord
from agent.samplers.acquisition import interleaved_random, optimize_on_space, random_unseen
from agent.samplers.base import Suggestion
from agent.samplers.bo import BoSampler
from agent.samplers.pareto import REFERENCE_MARGIN, maximised, metric_value, objective_values
from agent.space import SearchSpace
from agent.surrogates.contract import AcqBudget, Surrogate

ORIGIN = "bo:qlognehvi"
# qLogNEHVI's Monte-Carlo integral over the baseline's front: each candidate costs the samples
# times the front's box decomposition, so fewer restarts than one objective's LogEI.
BUDGET = AcqBudget(num_restarts=2, raw_samples=128, maxiter=50)
MC_SAMPLES = 64


class MultiObjectiveSampler(BoSampler):
    """Warm start and design as :class:`BoSampler`, then qLogNEHVI over one GP per outcome."""

    def __init__(
        self,
        space: SearchSpace,
        settings: StudySettings,
        surrogate: Surrogate,
        initial: Sequence[tuple[Mapping[str, Any], str]] = (),
    ) -> None:
        super().__init__(space, settings, surrogate, initial)

    def pending_note(self) -> str:
        return "running trials enter each qLogNEHVI step as pending points (X_pending)"

    def warm_up(self) -> None:
        if self.settings.trials > max(self.settings.n_init, len(self.initial)):
            import botorch.acquisition.multi_objective  # noqa: F401

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        early = self.before_bo(number, trials)
        if early is not None:
            return early
        _, _, running, seen = self.observed(trials)
        seed, rng = self.step_seed(number)
        if interleaved_random(number - self.settings.n_init + 1, self.settings.random_every):
            return Suggestion(self.space.decode(self._random(seen, rng)), "random:interleaved")
        X, Y, C = self.outcomes(trials)
        if len(X) < 2:
            return Suggestion(self.space.decode(self._random(seen, rng)), "random:no-finite-value")
        x = self._step(X, Y, C, running, seed)
        return Suggestion(self.space.decode(random_unseen(self.space, seen, rng, self.space.snap(x)[0])), ORIGIN)

    def outcomes(self, trials: Sequence[TrialRecord]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The finished trials with every outcome: cube points `n x d`, maximised objectives
        `n x m`, constraint slacks `n x c` (at most 0 where the constraint holds)."""
        rows, ys, cs = [], [], []
        for t in sorted(trials, key=lambda t: t.number):
            if t.state != TRIAL_OK:
                continue
            values = objective_values(t, self.settings)
            slacks = self._slacks(t)
            if values is None or slacks is None:
                continue
            try:
                rows.append(self.space.encode(t.config))
            except Exception:
                continue
            ys.append(maximised(values, self.settings))
            cs.append(slacks)
        m, c = len(self.settings.objective_list()), len(self.settings.constraint_list())
        if not rows:
            return np.empty((0, self.space.dim)), np.empty((0, m)), np.empty((0, c))
        return np.array(rows), np.array(ys), np.array(cs).reshape(len(rows), c)

    def _slacks(self, trial: TrialRecord) -> list[float] | None:
        out = []
        for name, op, bound in self.settings.constraint_list():
            value = metric_value(trial, name, self.settings)
            if value is None or not np.isfinite(value):
                return None
            out.append(value - bound if op == "<=" else bound - value)
        return out

    def _step(self, X: np.ndarray, Y: np.ndarray, C: np.ndarray, running: np.ndarray, seed: int) -> np.ndarray:
        import torch
        from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
        from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
        from botorch.models import ModelListGP
        from botorch.sampling import SobolQMCNormalSampler

        from agent.surrogates.gp import fit_gp, torch_threads

        _without_jit_kernel()
        m, c = Y.shape[1], C.shape[1]
        with torch_threads(1):
            train_X = torch.as_tensor(X, dtype=torch.double)
            outcomes = np.hstack([Y, C])
            models = [
                fit_gp(train_X, torch.as_tensor(outcomes[:, i : i + 1], dtype=torch.double)) for i in range(m + c)
            ]
            model = ModelListGP(*models)
            reference = _reference(Y, C)
            constraints = [_outcome(m + i) for i in range(c)] or None
            acqf = qLogNoisyExpectedHypervolumeImprovement(
                model=model,
                ref_point=reference.tolist(),
                X_baseline=train_X,
                sampler=SobolQMCNormalSampler(torch.Size([MC_SAMPLES]), seed=seed),
                objective=IdentityMCMultiOutputObjective(outcomes=list(range(m))) if c else None,
                constraints=constraints,
                X_pending=torch.as_tensor(running, dtype=torch.double) if len(running) else None,
                prune_baseline=True,
            )
            torch.manual_seed(seed)
            return optimize_on_space(acqf, self.space, seed, BUDGET)


def _reference(Y: np.ndarray, C: np.ndarray) -> np.ndarray:
    """The maximised reference point: the worst value of each objective over the feasible trials
    (all of them while none is feasible), less :data:`REFERENCE_MARGIN` of its range."""
    ok = np.all(C <= 0, axis=1) if C.shape[1] else np.ones(len(Y), dtype=bool)
    rows = Y[ok] if ok.any() else Y
    spread = rows.max(axis=0) - rows.min(axis=0)
    return rows.min(axis=0) - REFERENCE_MARGIN * np.where(spread > 0, spread, 1.0)


def _outcome(index: int) -> Any:
    """BoTorch's constraint callable for outcome ``index`` (feasible where at most 0)."""

    def slack(samples: Any) -> Any:
        return samples[..., index]

    return slack


def _without_jit_kernel() -> None:
    """BoTorch compiles a fused C++ kernel for qLogNEHVI on its first use (a C++ compiler and ninja
    at run time, about 30 s on 2 cores, a line on stderr, a cache under ~/.cache/torch_extensions).
    Measured on a wine/mlp front of 8 trials with 2 objectives and a constraint, a step takes
    1.1-3.3 s either way (the kernel's share of it is within 5 %), so the study never compiles it:
    BoTorch's own flag that a load was tried is set first. A BoTorch without that flag compiles as
    it would."""
    import botorch.acquisition.multi_objective.logei as logei

    if hasattr(logei, "_load_attempted") and getattr(logei, "_C", None) is None:
        logei._load_attempted = True
