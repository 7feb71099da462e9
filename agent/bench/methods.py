"""The optimisers compared by the transfer benchmarks, behind one small protocol.

A :class:`Method` is built for one search space, told the target task and the histories of the
source tasks (:meth:`Method.start`), then asked for one point of the unit cube at a time given the
target's observations so far (:meth:`Method.suggest`, maximising). This module owns the baselines of
the LCBench study (Zimmer et al. 2021, through the YAHPO Gym surrogate of Pfisterer et al. 2022):

- ``random``: uniform points of the cube, snapped to the space;
- ``tpe``: Optuna's default ``TPESampler`` driven through ask/tell;
- ``gp``: the product's cold start, 5 Sobol points then SingleTaskGP + LogEI
  (:func:`agent.tuning.bo.propose_next`), every 4th step a random configuration;
- ``portfolio_gp``: a zero-shot greedy portfolio of 5 history configurations, then ``gp``;

and :class:`SurrogateMethod`, the hook through which transfer surrogates (RGPE, TNP, ...) plug into
the harness: they only supply a BoTorch model builder and, optionally, their own initial points.

Factories take the :class:`SearchSpace` (``Callable[[SearchSpace], Method]``) and must be picklable
(module-level classes, functions or :func:`functools.partial` of them): benchmark workers rebuild
methods in their own processes.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from agent.space import Float, Int, SearchSpace
from agent.tuning.bo import (build_acquisition, evaluated_keys, fit_gp, interleaved_random, optimize_on_space,
                             point_key, propose_next, random_unseen, torch_threads)
from agent.tuning.design import initial_design

History = list[tuple[np.ndarray, np.ndarray]]
PORTFOLIO_SIZE = 5
N_INIT = 5


class Method(Protocol):
    name: str

    def start(self, task_index: int, history: History, seed: int) -> None: ...

    def suggest(self, U: np.ndarray, y: np.ndarray) -> np.ndarray: ...


@dataclass
class TaskContext:
    """What a method knows about the run: passed to surrogate builders and initial designs."""

    space: SearchSpace
    task_index: int
    history: History
    seed: int
    cache: dict[str, Any] = field(default_factory=dict)  # per-run scratch for builders


class RandomSearch:
    """Uniform points of the unit cube, snapped to the space."""

    name = "random"

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._rng = np.random.default_rng(0)

    def start(self, task_index: int, history: History, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def suggest(self, U: np.ndarray, y: np.ndarray) -> np.ndarray:
        return self.space.snap(self._rng.random(self.space.dim))[0]


class TpeSearch:
    """Optuna's default TPE (seeded) through ask/tell; log parameters get log distributions."""

    name = "tpe"

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self._study: Any = None
        self._pending: Any = None
        self._told = 0

    def start(self, task_index: int, history: History, seed: int) -> None:
        import optuna

        optuna.logging.set_verbosity(logging.WARNING)
        sampler = optuna.samplers.TPESampler(seed=seed)
        self._study = optuna.create_study(direction="maximize", sampler=sampler)
        self._pending, self._told = None, 0

    def _distribution(self, name: str) -> Any:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        p = self.space[name]
        if isinstance(p, Float):
            return FloatDistribution(p.low, p.high, log=p.log)
        if isinstance(p, Int):
            return IntDistribution(p.low, p.high, log=p.log)
        return CategoricalDistribution(p.choices)  # type: ignore[union-attr]

    def _catch_up(self, U: np.ndarray, y: np.ndarray) -> None:
        """Tells the pending trial its value; adds observations TPE did not propose as trials."""
        from optuna.trial import create_trial

        if self._pending is not None and len(y) > self._told:
            self._study.tell(self._pending, float(y[self._told]))
            self._pending, self._told = None, self._told + 1
        for u, v in zip(U[self._told:], y[self._told:]):
            config = self.space.decode(u)
            dists = {n: self._distribution(n) for n in config}
            self._study.add_trial(create_trial(params=config, distributions=dists, value=float(v)))
            self._told += 1

    def suggest(self, U: np.ndarray, y: np.ndarray) -> np.ndarray:
        self._catch_up(np.atleast_2d(U) if len(U) else U, np.asarray(y, dtype=float))
        trial = self._study.ask()
        config: dict[str, Any] = {}
        for p in self.space.params:  # define-by-run, so conditional parameters stay conditional
            if self.space.is_active(p, config):
                config[p.name] = _suggest(trial, p)
        self._pending = trial
        return self.space.encode(config)


def _suggest(trial: Any, p: Any) -> Any:
    if isinstance(p, Float):
        return trial.suggest_float(p.name, p.low, p.high, log=p.log)
    if isinstance(p, Int):
        return trial.suggest_int(p.name, p.low, p.high, log=p.log)
    return trial.suggest_categorical(p.name, list(p.choices))


class GpSearch:
    """The product's cold start: Sobol initial design, then SingleTaskGP + LogEI each step, every
    ``RANDOM_EVERY``-th step a random configuration instead (:func:`agent.tuning.bo.interleaved_random`)."""

    name = "gp"

    def __init__(self, space: SearchSpace, n_init: int = N_INIT) -> None:
        self.space = space
        self.n_init = n_init
        self._init = np.empty((0, space.dim))
        self._seed = 0
        self._state: dict = {}

    def initial_points(self, task_index: int, history: History, seed: int) -> np.ndarray:
        return self.space.snap(initial_design("sobol", self.n_init, self.space.dim, seed))

    def start(self, task_index: int, history: History, seed: int) -> None:
        self._seed, self._state = seed, {}
        self._init = self.initial_points(task_index, history, seed)

    def suggest(self, U: np.ndarray, y: np.ndarray) -> np.ndarray:
        n = len(y)
        if n < len(self._init):
            return self._init[n]
        if interleaved_random(n - len(self._init) + 1):
            return random_unseen(self.space, U, np.random.default_rng(self._seed * 1000 + n))
        return self.propose(U, y)

    def propose(self, U: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One GP + LogEI step."""
        n = len(y)
        return propose_next(self.space, U, y, "logei", iteration=n, seed=self._seed * 1000 + n,
                            warm_state=self._state)


# -- zero-shot portfolio ---------------------------------------------------------------------
_SOURCE_MODELS: dict[str, Any] = {}  # per process: one GP per source history, keyed by its bytes


def _source_model(U: np.ndarray, y: np.ndarray) -> Any:
    import torch

    key = hashlib.sha1(np.ascontiguousarray(U).tobytes() + np.ascontiguousarray(y).tobytes()).hexdigest()
    if key not in _SOURCE_MODELS:
        X = torch.as_tensor(U, dtype=torch.double)
        Y = torch.as_tensor(y, dtype=torch.double).reshape(-1, 1)
        _SOURCE_MODELS[key] = fit_gp(X, Y).eval()
    return _SOURCE_MODELS[key]


def source_regrets(history: History, candidates: np.ndarray) -> np.ndarray:
    """Normalised regret (`sources x candidates`) of candidates under each source's GP mean.

    Each source's posterior mean is scaled by the min and max it observed, so 0 is its best observed
    value; predictions above that best clip to 0.
    """
    import torch

    rows = []
    with torch_threads(1), torch.no_grad():
        X = torch.as_tensor(candidates, dtype=torch.double)
        for U, y in history:
            mean = _source_model(U, y).posterior(X).mean.reshape(-1).numpy()
            span = max(float(y.max() - y.min()), 1e-12)
            rows.append(np.clip((y.max() - mean) / span, 0.0, None))
    return np.array(rows)


def greedy_portfolio(regrets: np.ndarray, size: int) -> list[int]:
    """Columns that greedily minimise the mean over rows of the best-so-far regret."""
    best = np.full(regrets.shape[0], np.inf)
    chosen: list[int] = []
    for _ in range(min(size, regrets.shape[1])):
        score = np.minimum(best[:, None], regrets).mean(axis=0)
        score[chosen] = np.inf
        pick = int(np.argmin(score))
        chosen.append(pick)
        best = np.minimum(best, regrets[:, pick])
    return chosen


class PortfolioGpSearch(GpSearch):
    """Starts from a greedy portfolio of history configurations, then continues as ``gp``.

    Candidates are the configurations the source tasks evaluated (their union); each is scored on
    every source through that source's GP posterior mean (fitted once per process and cached), since
    the sources were evaluated at different random configurations.
    """

    name = "portfolio_gp"

    def initial_points(self, task_index: int, history: History, seed: int) -> np.ndarray:
        if not history:
            return super().initial_points(task_index, history, seed)
        candidates = self.space.snap(np.concatenate([U for U, _ in history]))
        chosen = greedy_portfolio(source_regrets(history, candidates), min(self.n_init, PORTFOLIO_SIZE))
        return candidates[chosen]


# -- generic surrogate hook --------------------------------------------------------------------
ModelBuilder = Callable[[Any, Any, TaskContext], Any]
InitPoints = Callable[[TaskContext], np.ndarray]


class SurrogateMethod:
    """Initial points, then LogEI over the cube on a model from ``build_model``.

    ``build_model(train_X, train_Y, context)`` gets double tensors (`n x d`, `n x 1`, maximised) and
    returns a fitted BoTorch model whose posterior is on the scale of ``train_Y``; ``init_points``
    (context -> `k x d` cube points) replaces the Sobol design when given.

    Negative-transfer guard: ``has_signal(context)`` (when given) is asked once per run; when it
    says no source carries a signal the history is ignored and the run is ``gp``'s, step for step,
    as the product runs the cold GP when its guard leaves no source.

    Cold-start fallback: a transfer model that reports ``source_weight == 0`` (RGPE after its
    negative-transfer guard dropped every source) says the history is no help, and the points it
    chose so far were picked from that history, so they may all sit in one corner. Until ``n_init``
    space-filling points have been evaluated, such a step takes the next point of the cold start's
    Sobol design (the same one ``gp`` uses) instead, so a useless history costs the few trials it
    steered and then the method proceeds like ``gp``.
    """

    def __init__(self, space: SearchSpace, name: str, build_model: ModelBuilder, n_init: int = N_INIT,
                 init_points: InitPoints | None = None, has_signal: Callable[[TaskContext], bool] | None = None) -> None:
        self.space, self.name = space, name
        self.build_model, self.n_init, self.init_points = build_model, n_init, init_points
        self.has_signal = has_signal
        self.context = TaskContext(space, 0, [], 0)
        self._init = np.empty((0, space.dim))
        self._cold: GpSearch | None = None

    def start(self, task_index: int, history: History, seed: int) -> None:
        self.context = TaskContext(self.space, task_index, history, seed)
        self._cold = None
        if self.has_signal is not None and not self.has_signal(self.context):
            self._cold = GpSearch(self.space)
            self._cold.start(task_index, history, seed)
            return
        raw = (self.init_points(self.context) if self.init_points is not None
               else initial_design("sobol", self.n_init, self.space.dim, seed))
        self._init = self.space.snap(raw) if len(raw) else np.empty((0, self.space.dim))

    def suggest(self, U: np.ndarray, y: np.ndarray) -> np.ndarray:
        import torch

        if self._cold is not None:
            return self._cold.suggest(U, y)
        n = len(y)
        if n < len(self._init):
            return self._init[n]
        seed = self.context.seed * 1000 + n
        with torch_threads(1):
            X = torch.as_tensor(np.asarray(U), dtype=torch.double)
            Y = torch.as_tensor(np.asarray(y, dtype=float), dtype=torch.double).reshape(-1, 1)
            model = self.build_model(X, Y, self.context)
            fallback = self._cold_start_point(model, U)
            if fallback is not None:
                return fallback
            torch.manual_seed(seed)
            x = optimize_on_space(build_acquisition(model, Y, "logei", n, self.space.dim), self.space, seed)
        return random_unseen(self.space, U, np.random.default_rng(seed), self.space.snap(x)[0])


    def _cold_start_point(self, model: Any, U: np.ndarray) -> np.ndarray | None:
        """The next unevaluated Sobol point while the sources carry no weight (see class docs)."""
        if getattr(model, "source_weight", 1.0) > 0:
            return None
        cache = self.context.cache
        if "cold_design" not in cache:
            cache["cold_design"] = self.space.snap(initial_design("sobol", N_INIT, self.space.dim, self.context.seed))
            cache["cold_used"] = 0
        seen = evaluated_keys(self.space, U)
        design = cache["cold_design"]
        while cache["cold_used"] < len(design):
            point = design[cache["cold_used"]]
            cache["cold_used"] += 1
            if point_key(point) not in seen:
                return point
        return None


def single_task_gp(train_X: Any, train_Y: Any, context: TaskContext) -> Any:
    """The cold-start surrogate as a :data:`ModelBuilder` (reference for plug-ins)."""
    return fit_gp(train_X, train_Y)


METHODS: dict[str, Callable[[SearchSpace], Method]] = {
    "random": RandomSearch,
    "tpe": TpeSearch,
    "gp": GpSearch,
    "portfolio_gp": PortfolioGpSearch,
}


def make_methods(names: Sequence[str]) -> dict[str, Callable[[SearchSpace], Method]]:
    """Factories of the named baselines; raises ``KeyError`` listing the known names."""
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise KeyError(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    return {n: METHODS[n] for n in names}
