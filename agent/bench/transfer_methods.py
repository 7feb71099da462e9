"""Transfer methods of the benchmark: RGPE and TNP behind :class:`agent.bench.methods.SurrogateMethod`.

- ``rgpe`` (Feurer, Letham, Bakshy 2018): the best zero-shot configuration of the history first
  (a one-point greedy portfolio), then LogEI on the ranking-weighted ensemble of the source GPs and
  the target GP. Source GPs are fitted once per (process, target task) and cached; sources without
  a response surface (:func:`agent.surrogates.rgpe.informative`) are left out from the start, and
  with none left the run is ``gp``'s.
- ``tnp`` (paper 004): the TNP's learned initial configuration first, then LogEI on the fine-tuned
  TNP. It attends only to the sources that pass the same signal check as RGPE's; with none left it
  runs as ``gp`` (Sobol design, then the target GP). No target is ever seen in meta-training: tasks are split into ``TNP_FOLDS`` folds by index
  and the model used for a target is meta-trained on the other folds (:func:`pretrain_tnp_folds`
  runs before the workers start; the workers only load).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agent.bench.methods import (History, PortfolioGpSearch, SurrogateMethod, TaskContext, greedy_portfolio,
                                 source_regrets)
from agent.tuning.bo import propose_next
from agent.space import SearchSpace

TNP_FOLDS = 5
_SOURCES: dict[str, Any] = {}  # per benchmark worker process: (fitted GP, informative) by source


def _history_key(history: History) -> str:
    h = hashlib.sha256()
    for U, y in history:
        h.update(np.ascontiguousarray(U).tobytes())
        h.update(np.ascontiguousarray(y).tobytes())
    return h.hexdigest()[:16]


def _source_gps(context: TaskContext) -> tuple[list[Any], list[bool]]:
    """The source GPs of this history and which carry a signal.

    Each source's GP is fitted once per worker process and kept by the source's own bytes, so a
    task that is a source for many targets (leave-one-task-out) is fitted once, not per target.
    """
    from agent.surrogates.rgpe import fit_source_gps, informative

    fitted = []
    for U, y in context.history:
        key = _history_key([(U, y)])
        if key not in _SOURCES:
            model = fit_source_gps([(U, y)])[0]
            _SOURCES[key] = (model, informative([model])[0])
        fitted.append(_SOURCES[key])
    return [m for m, _ in fitted], [k for _, k in fitted]


def _has_signal(context: TaskContext) -> bool:
    """Whether any source passes the signal check; with none, RGPE and TNP run as ``gp``."""
    return any(_source_gps(context)[1])


def _rgpe_start(context: TaskContext) -> np.ndarray:
    """The best zero-shot configuration of the informative sources."""
    _, keep = _source_gps(context)
    useful = [h for h, k in zip(context.history, keep) if k]
    candidates = context.space.snap(np.concatenate([U for U, _ in useful]))
    return candidates[greedy_portfolio(source_regrets(useful, candidates), 1)]


def rgpe_model(train_X: Any, train_Y: Any, context: TaskContext) -> Any:
    from agent.surrogates.rgpe import build_rgpe

    models, keep = _source_gps(context)
    useful = [m for m, k in zip(models, keep) if k]
    return build_rgpe(useful, train_X, train_Y, seed=context.seed, warm_state=context.cache.setdefault("gp", {}))


class RgpeSearch(SurrogateMethod):
    name = "rgpe"

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space, "rgpe", rgpe_model, n_init=1, init_points=_rgpe_start, has_signal=_has_signal)


# -- observation-based neighbours ---------------------------------------------------------------
_SURFACES: dict[str, Any] = {}  # per worker process: neighbour surfaces by source


def _surfaces(history: History) -> list[Any]:
    from agent.surrogates.neighbour_mean import fit_neighbour_surface

    out = []
    for U, y in history:
        key = _history_key([(U, y)])
        if key not in _SURFACES:
            _SURFACES[key] = fit_neighbour_surface(U, y)
        out.append(_SURFACES[key])
    return out


class ObsNeighbourGpSearch(PortfolioGpSearch):
    """``portfolio_gp`` whose GP has the neighbours' prior mean (paper 000, Algorithm 3), the
    neighbours being the 3 source tasks nearest to the target by its own observations (paper 003's
    distance on the target's configurations), re-chosen at every step: the warm-start issue's prior
    mean for a target without a dataset sample."""

    name = "obs_neighbour_gp"
    k = 3

    def start(self, task_index: int, history: History, seed: int) -> None:
        from agent.surrogates.neighbour_mean import ObservationNeighbours

        super().start(task_index, history, seed)
        self._neighbours = ObservationNeighbours([], k=self.k, surfaces=_surfaces(history))

    def propose(self, U: np.ndarray, y: np.ndarray) -> np.ndarray:
        n = len(y)
        return propose_next(self.space, U, y, "logei", iteration=n, seed=self._seed * 1000 + n,
                            warm_state=self._state, mean_module=self._neighbours(U, y))


# -- TNP ---------------------------------------------------------------------------------------
def tnp_cache_dir() -> Path:
    import os

    return Path(os.environ.get("TUNE_AGENT_BENCH_CACHE", "data/bench-cache"))


def fold_of(task_index: int) -> int:
    return task_index % TNP_FOLDS


def _fold_path(fold: int, n_tasks: int, config_key: str, sources: History) -> Path:
    """Cache file of one fold's TNP, named by what it was trained on: the task count, the TNP
    settings and the training sources' contents (so a control's shuffled histories never reuse a
    network meta-trained on the real ones)."""
    return tnp_cache_dir() / f"tnp-{n_tasks}tasks-fold{fold}-{config_key}-{_history_key(sources)[:8]}.pt"


def _fold_sources(history: History, fold: int, target_index: int | None = None) -> History:
    """The tasks outside ``fold``; ``history`` is every task (``target_index`` None) or every task
    but the target at ``target_index`` (the target is in ``fold``, so nothing outside is missing)."""
    indices = [i for i in range(len(history) + 1) if i != target_index][:len(history)]
    return [h for i, h in zip(indices, history) if fold_of(i) != fold]


def _config() -> Any:
    from agent.surrogates.tnp import TNPConfig

    return TNPConfig()


def _config_key() -> str:
    import json

    return hashlib.sha256(json.dumps(_config().to_dict(), sort_keys=True).encode()).hexdigest()[:8]


def pretrain_tnp_folds(histories: list[tuple[np.ndarray, np.ndarray]], folds: Sequence[int] | None = None) -> list[Path]:
    """Meta-trains one TNP per fold on the tasks outside it (skipped when cached); ``folds``
    limits the work to the folds of the target tasks that will run (all by default)."""
    from agent.surrogates.tnp_train import meta_train_tnp

    paths = []
    for fold in (range(TNP_FOLDS) if folds is None else sorted(set(folds))):
        sources = _fold_sources(histories, fold)
        path = _fold_path(fold, len(histories), _config_key(), sources)
        if not path.exists():
            tnp, _ = meta_train_tnp(sources, _config())
            path.parent.mkdir(parents=True, exist_ok=True)
            tnp.save(str(path))
        paths.append(path)
    return paths


def _tnp(context: TaskContext) -> Any:
    """The fold's meta-trained TNP; its source bank holds only the informative sources."""
    from agent.surrogates.tnp import TNP, SourceBank

    if "tnp" not in context.cache:
        n_tasks = len(context.history) + 1
        fold = fold_of(context.task_index)
        path = _fold_path(fold, n_tasks, _config_key(), _fold_sources(context.history, fold, context.task_index))
        context.cache["tnp"] = TNP.load(str(path))
        _, keep = _source_gps(context)
        useful = [h for h, k in zip(context.history, keep) if k]
        context.cache["bank"] = SourceBank(useful)
    return context.cache["tnp"]


def tnp_model(train_X: Any, train_Y: Any, context: TaskContext) -> Any:
    from agent.surrogates.tnp import build_tnp_model

    tnp = _tnp(context)
    return build_tnp_model(tnp, context.cache["bank"], train_X, train_Y, seed=context.seed)


class TnpSearch(SurrogateMethod):
    name = "tnp"

    def __init__(self, space: SearchSpace) -> None:
        super().__init__(space, "tnp", tnp_model, n_init=1, init_points=lambda c: _tnp(c).initial_configs()[:1],
                         has_signal=_has_signal)
