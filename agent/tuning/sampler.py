"""Samplers decide the next configuration of a study from its trials (Optuna's sampler role).

The contract (:class:`Sampler`): ``suggest(number, trials)`` returns the configuration for trial
slot ``number`` and its origin, given every trial of the study so far — finished, failed and
running. Running trials are the pending points of parallel workers: a sampler must not suggest
one of them again, and the BO sampler conditions its step on them (``X_pending``, a believed or a
lying model: the study's ``pending`` setting, :func:`pending_strategy`), so N workers spread out
instead of piling on one point; TPE takes them (as Optuna's RUNNING trials) only when told. A
sampler keeps no state that the trials do not also hold (caches aside), so a study resumed in
another process continues where it stopped.

- :class:`BoSampler`, the product's: the study's initial configurations (warm-start seeds, then the
  surrogate's own start points such as a portfolio or the TNP's learned configurations), then an
  initial design up to ``n_init``, then one BO step per slot on the surrogate's model. This class is
  the one place that imputes failures, turns values into normal scores, interleaves random steps
  for the GP family and falls back to the cold start's design when a transfer model has dropped
  every source.
- :class:`RandomSampler`: uniform configurations.
- :class:`TpeSampler`: Optuna's ``TPESampler`` behind the same contract.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from agent.config import StudySettings
from agent.knowledge.base import COUNTED_STATES, TRIAL_OK, TRIAL_PRUNED, TRIAL_RUNNING, TrialRecord
from agent.space import Float, Int, SearchSpace
from agent.surrogates.contract import Surrogate
from agent.tuning.bo import (believed, build_acquisition, evaluated_keys, interleaved_random, optimize_on_space, point_key,
                             random_unseen)
from agent.design import initial_design

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


@dataclass(frozen=True)
class Suggestion:
    config: dict[str, Any]
    origin: str


class Sampler(Protocol):
    """Suggests trial ``number``'s configuration from the study's trials (all states)."""

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion: ...


def encoded(space: SearchSpace, trials: Sequence[TrialRecord], states: tuple[str, ...], sign: float) -> tuple[np.ndarray, np.ndarray]:
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
        except Exception:  # noqa: BLE001 - a hand-edited record outside the space is skipped
            continue
        values.append(np.nan if t.value is None else sign * t.value)
        pruned.append(t.state == TRIAL_PRUNED)
    U = np.array(rows) if rows else np.empty((0, space.dim))
    y, is_pruned = np.array(values, dtype=float), np.array(pruned, dtype=bool)
    finished = y[~is_pruned & np.isfinite(y)]
    if is_pruned.any() and len(finished):
        y[is_pruned] = np.fmin(y[is_pruned], finished.min())
    return U, y


class BoSampler:
    """Initial configurations, a design up to ``n_init``, then BO on the prepared surrogate.

    ``candidates`` (cube points `m x d`) restricts every suggestion to those rows: a lookup table
    of evaluated configurations, as in the warm-start evaluation's replay. The acquisition is then
    maximised over the rows not yet tried, and design or random points become the nearest free row.
    """

    def __init__(self, space: SearchSpace, settings: StudySettings, surrogate: Surrogate,
                 initial: Sequence[tuple[Mapping[str, Any], str]] = (), candidates: np.ndarray | None = None) -> None:
        self.space = space
        self.settings = settings
        self.surrogate = surrogate
        self.initial = [(dict(c), origin) for c, origin in initial]
        self.candidates = None if candidates is None else space.snap(np.atleast_2d(candidates))
        self._state: dict[str, Any] = {}
        n_design = max(settings.n_init - len(self.initial), 0)
        self._design = (space.snap(initial_design(settings.init, n_design, space.dim, settings.seed))
                        if n_design else np.empty((0, space.dim)))

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        if number < len(self.initial):
            return Suggestion(*self.initial[number])
        k = number - len(self.initial)
        U, y = encoded(self.space, trials, COUNTED_STATES, self.settings.sign)
        running, _ = encoded(self.space, trials, (TRIAL_RUNNING,), self.settings.sign)
        seen = np.vstack([U, running])
        if k < len(self._design):
            return Suggestion(self.space.decode(self._restrict(self._design[k], seen)), f"init:{self.settings.init}")
        seed = self.settings.seed * 100003 + number
        rng = np.random.default_rng(seed)
        bo_step = number - self.settings.n_init + 1
        if self.surrogate.interleave_random and interleaved_random(bo_step, self.settings.random_every):
            return Suggestion(self.space.decode(self._random(seen, rng)), "random:interleaved")
        fallback = self.surrogate.fallback()
        if fallback is not None and self.settings.random_every > 0 and stalled(trials, self.settings.sign):
            u, _ = self.propose(U, y, seen, bo_step, seed, rng, surrogate=fallback, state_key="fallback",
                                pending=running)
            return Suggestion(self.space.decode(u), FALLBACK_ORIGIN)
        u, origin = self.propose(U, y, seen, bo_step, seed, rng, pending=running)
        return Suggestion(self.space.decode(u), origin)

    def propose(self, U: np.ndarray, y: np.ndarray, seen: np.ndarray, bo_step: int, seed: int,
                rng: np.random.Generator, surrogate: Surrogate | None = None,
                state_key: str = "model", pending: np.ndarray | None = None) -> tuple[np.ndarray, str]:
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
            acqf = build_acquisition(step.model, train_Y, self.settings.acq, bo_step, self.space.dim,
                                     X_pending=X_pending, seed=seed)
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


def pending_note(sampler: Any) -> str:
    """How ``sampler`` treats running trials, in words for the user of a parallel study."""
    if isinstance(sampler, BoSampler):
        return "running trials enter each BO step as " + PENDING_WORDS[pending_strategy(sampler.settings.pending,
                                                                                          sampler.surrogate)]
    if isinstance(sampler, TpeSampler):
        if sampler.settings.pending == "liar":
            return "running trials enter TPE as Optuna's RUNNING trials (constant liar)"
        return "TPE draws every slot with its own seed and leaves running trials out (--pending liar gives them to it)"
    if isinstance(sampler, HtsSampler):
        return "an HTS round's slots are fixed when it starts, so running trials do not change them"
    return "random search draws every slot on its own, whatever runs"


def stalled(trials: Sequence[TrialRecord], sign: float, steps: int = STALL_STEPS) -> bool:
    """Whether the next step belongs to the target GP: the transfer model has taken ``steps`` BO
    steps since the best finished trial without beating it, and the last finished trial was not
    already a fallback step (so the two alternate until one of them improves)."""
    done = sorted((t for t in trials if t.state in COUNTED_STATES), key=lambda t: t.number)
    scores = [sign * t.value if t.state == TRIAL_OK and t.value is not None else -np.inf for t in done]
    if not done or not np.isfinite(max(scores)):
        return False
    after = done[int(np.argmax(scores)) + 1:]
    transfer_steps = sum(t.origin.startswith("bo:") and t.origin != FALLBACK_ORIGIN for t in after)
    return transfer_steps >= steps and done[-1].origin != FALLBACK_ORIGIN


class RandomSampler:
    """Uniform configurations of the space, one seeded stream per slot."""

    def __init__(self, space: SearchSpace, settings: StudySettings) -> None:
        self.space, self.settings = space, settings

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        u = np.random.default_rng([self.settings.seed, number]).random(self.space.dim)
        return Suggestion(self.space.decode(self.space.snap(u)[0]), "random")


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
        return CategoricalDistribution(p.choices)  # type: ignore[union-attr]

    def suggest(self, number: int, trials: Sequence[TrialRecord]) -> Suggestion:
        import logging

        import optuna
        from optuna.trial import TrialState, create_trial

        optuna.logging.set_verbosity(logging.WARNING)
        direction = "maximize" if self.settings.mode == "max" else "minimize"
        study = optuna.create_study(direction=direction,
                                    sampler=optuna.samplers.TPESampler(seed=self.settings.seed * 100003 + number,
                                                                       constant_liar=self.settings.pending == "liar"))
        for t in sorted(trials, key=lambda t: t.number):
            dists = {n: self._distribution(n) for n in t.config}
            if t.state == TRIAL_RUNNING and self.settings.pending == "liar":
                study.add_trial(create_trial(params=dict(t.config), distributions=dists, state=TrialState.RUNNING))
                continue
            if t.state not in COUNTED_STATES:
                continue
            ok = t.state == TRIAL_OK and t.value is not None
            state = TrialState.COMPLETE if ok else TrialState.PRUNED if t.state == TRIAL_PRUNED else TrialState.FAIL
            study.add_trial(create_trial(params=dict(t.config), distributions=dists,
                                         value=float(t.value) if ok else None,  # type: ignore[arg-type]
                                         intermediate_values=_curve(t) if state == TrialState.PRUNED else None,
                                         state=state))
        trial = study.ask()
        config: dict[str, Any] = {}
        for p in self.space.params:
            if self.space.is_active(p, config):
                if isinstance(p, Float):
                    config[p.name] = trial.suggest_float(p.name, p.low, p.high, log=p.log)
                elif isinstance(p, Int):
                    config[p.name] = trial.suggest_int(p.name, p.low, p.high, log=p.log)
                else:
                    config[p.name] = trial.suggest_categorical(p.name, list(p.choices))  # type: ignore[union-attr]
        return Suggestion(config, "tpe")


def _curve(trial: TrialRecord) -> dict[int, float]:
    """A pruned trial's per-epoch values (Optuna ranks pruned trials by them)."""
    from agent.tuning.pruning import CURVE_PREFIX

    curve = {int(k[len(CURVE_PREFIX):]): float(v) for k, v in trial.extra.items()
             if k.startswith(CURVE_PREFIX) and k[len(CURVE_PREFIX):].isdigit()}
    return curve or ({1: float(trial.value)} if trial.value is not None else {})


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

    def __init__(self, space: SearchSpace, settings: StudySettings, sources: Sequence[Any],
                 preferred: str | None = None, r: int = HTS_ROUND, anchored: bool = False,
                 after: "Sampler | None" = None) -> None:
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

            self._rounds[j] = self.space.snap(hts_round(source.U, source.y, U, impute_failures(y),
                                                        self.settings.seed * 100003 + j, anchored=self.anchored))
        keys = evaluated_keys(self.space, seen)
        fresh = [u for u in self._rounds[j] if point_key(u) not in keys]
        if len(fresh) > 0:
            # the best mapped point not tried yet (earlier slots of the round, running ones included)
            return Suggestion(self.space.decode(fresh[0]), f"{self.kind}:{source.name}")
        rng = np.random.default_rng(self.settings.seed * 100003 + number)
        return Suggestion(self.space.decode(random_unseen(self.space, seen, rng)), f"random:{self.kind}-exhausted")

    def handed_over(self, j: int, trials: Sequence[TrialRecord]) -> bool:
        """Whether some round before ``j`` finished every slot without beating the best trial
        numbered before it (a pure function of the trials, so resumes and parallel workers agree)."""
        by_number = {t.number: t for t in trials if t.state in COUNTED_STATES}

        def best(upto: int) -> float:
            vals = [self.settings.sign * t.value for n, t in by_number.items()
                    if n < upto and t.state == TRIAL_OK and t.value is not None]
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
