"""The surrogate contract: what a surrogate declares (:class:`SurrogateSpec`), what it is given
(:class:`SurrogateInputs`), and what it does once prepared for a study (:class:`Surrogate`).

A surrogate is prepared once per study (fit the source GPs, load a meta-trained network, pick a
portfolio) and then asked, at every BO step, for a BoTorch ``Model`` of the target
(:meth:`Surrogate.step_model`). The sampler (:class:`agent.samplers.bo.BoSampler`) owns
everything else — initial design, failure imputation, normal scores, the acquisition, interleaved
random steps, the cold-start fallback — so a surrogate only decides what it knows.

Sources are the historical datasets run with the same job and search space, each as cube points
and the normal scores of its maximised values (:func:`source_tasks`), sorted by name, so the same
history gives the same sources in every process and backend.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.space import SearchSpace

MIN_SOURCE_POINTS = 5
# Bump when :func:`agent.surrogates.source_gp.fit_source_gps` changes what it fits: stored source fits
# (and the portfolios made from them, :mod:`agent.surrogates.source_store`) of another revision are ignored.
FIT_REVISION = 1
# A source GP's means over more than MEAN_CHUNK_ABOVE candidates are taken MEAN_CHUNK at a time.
MEAN_CHUNK_ABOVE, MEAN_CHUNK = 4096, 512


@dataclass(frozen=True)
class AcqBudget:
    """How hard the acquisition is maximised (BoTorch ``optimize_acqf`` arguments).

    A neural surrogate whose gradient steps are dear trades restarts and iterations for a larger
    batched random start.
    """

    num_restarts: int = 4
    raw_samples: int = 128
    maxiter: int = 60


@dataclass(frozen=True)
class StepModel:
    """The model of one BO step and how much of it comes from the history.

    ``source_weight`` is the share of the prediction that the source tasks carry (1 for a model that
    is all history, 0 when a negative-transfer guard has dropped every source; a target-only model
    has none and reports 1, meaning "no reason to fall back").
    """

    model: Any  # a BoTorch ``Model``
    source_weight: float = 1.0


@dataclass(frozen=True)
class SourceTask:
    """One historical dataset as surrogate data: `n x d` cube points, `n` maximised normal scores."""

    key: str
    name: str
    U: np.ndarray
    y: np.ndarray
    dims: tuple[int, ...] | None = None  # history of another space: the target dimensions it informs

    @property
    def digest(self) -> str:
        """The content's hash: the cache key of anything fitted to it."""
        h = hashlib.sha256(np.ascontiguousarray(self.U).tobytes())
        h.update(np.ascontiguousarray(self.y).tobytes())
        h.update(repr(self.dims).encode())
        return h.hexdigest()[:20]


def source_tasks(history: Sequence[Any], space: SearchSpace, match: Any = None) -> list[SourceTask]:
    """Historical datasets (:class:`agent.knowledge.history.HistoricalDataset`) with at least
    ``MIN_SOURCE_POINTS`` evaluations in ``space``, as :class:`SourceTask`, sorted by name.

    With ``match`` (a :class:`~agent.space.SpaceMatch`: history of another space) configurations are
    translated into ``space`` and each source informs only the matched dimensions: its GP sees
    those alone (the rest is left to the target's GP)."""
    out = []
    for h in sorted(history, key=lambda h: (h.name, h.key)):
        task = source_task(h, space, match)
        if len(task.y) >= MIN_SOURCE_POINTS:
            out.append(task)
    return out


def source_task(h: Any, space: SearchSpace, match: Any = None) -> SourceTask:
    """One historical dataset as a :class:`SourceTask`, however few its evaluations."""
    from agent.knowledge.history import surface_data
    from agent.surrogates.gp import impute_failures, normal_scores

    dims = None if match is None else tuple(i for i, n in enumerate(space.names) if n in match.matched)
    U, y = surface_data(h, space, match)
    return SourceTask(h.key, h.name, U, normal_scores(impute_failures(y)) if len(y) else y, dims)


def _fit_key(source: SourceTask, inputs: SurrogateInputs | None) -> tuple[str, str]:
    """(the kernel a source's GP is fitted with, the key of that fit in memory)."""
    kernel = inputs.kernel if inputs is not None else "plain"
    return kernel, source.digest if kernel == "plain" else f"{source.digest}/{kernel}"


def portfolio_id(sources: Sequence[SourceTask], kernel: str, size: int) -> str:
    """The key of one portfolio: its sources' digests (in order), the kernel, the size and the fit revision."""
    h = hashlib.sha256(f"{kernel}/{size}/{FIT_REVISION}".encode())
    for s in sources:
        h.update(s.digest.encode())
    return h.hexdigest()[:24]


class SourceFits:
    """Models fitted to source tasks, kept by content so a source is fitted once per process.

    A study makes a fresh one; the benchmark keeps one per worker, where a task is a source for
    every other target. Holds each source's GP (frozen, eval mode), whether that GP carries a
    response surface (:func:`agent.surrogates.source_gp.informative`), and its neighbour surface.
    """

    def __init__(self, store: Any = None) -> None:
        self._gps: dict[str, tuple[Any, bool]] = {}
        self._r2: dict[str, float] = {}  # each fitted or loaded source GP's leave-one-out R² (its signal)
        self._means: dict[tuple[str, ...], np.ndarray] = {}
        self._portfolios: dict[str, np.ndarray] = {}
        self.store = store  # a :class:`~agent.surrogates.source_store.SourceModelStore`, or None: memory only
        self.fitted = 0  # source GPs fitted (not loaded) by this object: 0 when the store is current

    def mean_on(self, source: SourceTask, points: np.ndarray, inputs: SurrogateInputs | None = None) -> np.ndarray:
        """``source``'s GP posterior mean (`n`) at cube points ``points`` (`n x d`), cached by content."""
        key = (
            source.digest,
            hashlib.sha256(np.ascontiguousarray(points).tobytes()).hexdigest()[:20],
            inputs.kernel if inputs is not None else "plain",
        )
        if key not in self._means:
            import torch

            from agent.surrogates.gp import torch_threads

            model = self.gp(source, inputs)[0]
            # No gpytorch.settings flag here (skip_posterior_variances would save a few ms): those
            # flags are process-wide, and two threads entering and leaving one at once leave it on,
            # so every later posterior in the process would have zero variance.
            with torch_threads(1), torch.no_grad():
                X = torch.as_tensor(points, dtype=torch.double)
                # GPyTorch builds the test points' prior covariance (`n x n`): 0.4 s and 470 MB at
                # 7,680 candidates, so a large set goes in chunks (the means agree to ~1e-15)
                step = len(X) if len(X) <= MEAN_CHUNK_ABOVE else MEAN_CHUNK
                self._means[key] = torch.cat(
                    [model.posterior(X[i : i + step]).mean.reshape(-1) for i in range(0, len(X), step)]
                ).numpy()
        return self._means[key]

    def means_on(
        self, sources: Sequence[SourceTask], points: np.ndarray, inputs: SurrogateInputs | None = None
    ) -> np.ndarray:
        """Every source's GP posterior mean at ``points`` (`s x n`), the GPs not yet asked evaluated
        stacked, all at once (:mod:`agent.surrogates.gp_stack`: one batched kernel call, not one
        posterior per source, 10 ms each), the rest from :meth:`mean_on`'s cache."""
        import torch

        from agent.surrogates.gp_stack import _GPStack, _predictor

        digest = hashlib.sha256(np.ascontiguousarray(points).tobytes()).hexdigest()[:20]
        kernel = inputs.kernel if inputs is not None else "plain"
        todo = [s for s in sources if (s.digest, digest, kernel) not in self._means]
        if len(todo) > 1:
            from agent.surrogates.gp import torch_threads

            stack = _predictor([self.gp(s, inputs)[0] for s in todo])
            if isinstance(stack, _GPStack):
                step = max(1, int(4e6 // (len(todo) * stack.X.shape[1])))  # bounded memory: s x step x N values
                X = torch.as_tensor(points, dtype=torch.double)
                with torch_threads(1), torch.no_grad():
                    means = torch.cat([stack.means_at(X[i : i + step]) for i in range(0, len(X), step)], dim=-1)
                for source, row in zip(todo, means.numpy()):
                    self._means[(source.digest, digest, kernel)] = row
        return np.stack([self.mean_on(s, points, inputs) for s in sources]) if sources else np.empty((0, len(points)))

    def gp(self, source: SourceTask, inputs: SurrogateInputs | None = None) -> tuple[Any, bool]:
        """(the source's GP, whether it passes the signal check); with the kernel of ``inputs``
        (the arc kernel in a conditional space), BoTorch's default without."""
        kernel, key = _fit_key(source, inputs)
        if key not in self._gps:
            from agent.surrogates.source_gp import fit_source_gps, restore_source_gp

            covar = inputs.covar if inputs is not None and source.dims is None else None  # filtered: plain kernel
            stored = self.store.fit(source.digest, kernel) if self.store is not None else None
            if stored is not None:
                try:
                    model = restore_source_gp(source.U, source.y, stored["state"], covar=covar, dims=source.dims)
                    self._gps[key] = (model, bool(stored["informative"]))
                    self._r2[key] = float(stored["r2"])
                    return self._gps[key]
                except (ValueError, KeyError, TypeError, RuntimeError):
                    pass  # a record that does not fit this model (another kernel's layout): refit it
            from agent.surrogates.gp import gp_state
            from agent.surrogates.source_gp import SIGNAL_MIN_R2, source_signal

            model = fit_source_gps([(source.U, source.y)], covar=covar, dims=source.dims)[0]
            self.fitted += 1
            self._r2[key] = source_signal(model)
            self._gps[key] = (model, self._r2[key] >= SIGNAL_MIN_R2)  # as source_gp.informative decides
            if self.store is not None:
                self.store.add_fit(source.digest, kernel, gp_state(model), self._gps[key][1], self._r2[key])
        return self._gps[key]

    def fit_many(
        self, sources: Sequence[SourceTask], inputs: SurrogateInputs, workers: int, tick: Callable[[int], None]
    ) -> None:
        """The GPs of ``sources`` (:meth:`missing` ones) fitted ``workers`` processes at a time
        (:func:`agent.surrogates.source_gp.fit_states`), then held and stored as :meth:`gp` does."""
        from agent.surrogates.source_gp import SIGNAL_MIN_R2, fit_states, restore_source_gp

        tasks = [(s.U, s.y, s.dims) for s in sources]
        for i, (source, (state, r2)) in enumerate(
            zip(sources, fit_states(tasks, inputs.space, inputs.kernel, workers))
        ):
            kernel, key = _fit_key(source, inputs)
            covar = inputs.covar if source.dims is None else None
            model = restore_source_gp(source.U, source.y, state, covar=covar, dims=source.dims)
            self.fitted += 1
            self._r2[key] = r2
            self._gps[key] = (model, r2 >= SIGNAL_MIN_R2)
            if self.store is not None:
                self.store.add_fit(source.digest, kernel, state, r2 >= SIGNAL_MIN_R2, r2)
            tick(i + 1)

    def verdict(self, source: SourceTask, inputs: SurrogateInputs | None = None) -> tuple[bool, float]:
        """(whether the source's GP passes the signal check, its leave-one-out R²), from the store
        without rebuilding the GP when it is there."""
        kernel, key = _fit_key(source, inputs)
        if key not in self._gps and self.store is not None:
            stored = self.store.fit(source.digest, kernel)
            if stored is not None and "r2" in stored:
                return bool(stored["informative"]), float(stored["r2"])
        informative = self.gp(source, inputs)[1]
        return informative, self._r2[key]

    def missing(self, sources: Sequence[SourceTask], inputs: SurrogateInputs | None = None) -> list[SourceTask]:
        """The sources whose GP is neither in memory nor in the store: the ones a study would fit."""
        out, seen = [], set()
        for s in sources:  # two sources with the same content (ranks on one configuration set) are one fit
            kernel, key = _fit_key(s, inputs)
            if (
                key not in seen
                and key not in self._gps
                and (self.store is None or self.store.fit(s.digest, kernel) is None)
            ):
                seen.add(key)
                out.append(s)
        return out

    def portfolio(
        self, sources: Sequence[SourceTask], size: int, inputs: SurrogateInputs, compute: Callable[[], np.ndarray]
    ) -> np.ndarray:
        """The greedy portfolio of ``sources`` (``compute`` makes it), kept in memory and the store."""
        pid = portfolio_id(sources, inputs.kernel, size)
        if pid not in self._portfolios:
            stored = self.store.portfolio(pid) if self.store is not None else None
            if stored is None:
                stored = compute()
                if self.store is not None:
                    self.store.add_portfolio(pid, stored)
            self._portfolios[pid] = stored
        return self._portfolios[pid]

    def informative(self, sources: Sequence[SourceTask], inputs: SurrogateInputs | None = None) -> list[SourceTask]:
        """The sources whose own response surface is predictable (the negative-transfer guard)."""
        return [s for s in sources if self.verdict(s, inputs)[0]]


@dataclass(frozen=True)
class SurrogateInputs:
    """Everything a surrogate may use to prepare itself for one study.

    Attributes:
        sources: the history for this job and space (excluding the study's own dataset).
        neighbour_keys: keys of the warm start's meta-feature neighbours, nearest first (used by
            the neighbours' prior mean).
        prior_mean: ``neighbours``, ``observations`` or ``constant`` (GP-family surrogates).
        models_dir: where meta-trained networks live (``dvc repro`` output, or a benchmark fold).
        kernel: ``plain`` (BoTorch's default) or ``arc`` (paper 002, conditional spaces), for
            every GP the surrogate fits: the target's, and RGPE's source GPs.
    """

    space: SearchSpace
    sources: tuple[SourceTask, ...] = ()
    models_dir: Path = Path("models")
    seed: int = 0
    k: int = 3
    prior_mean: str = "constant"
    neighbour_keys: tuple[str, ...] = ()
    fits: SourceFits = field(default_factory=SourceFits, compare=False)
    kernel: str = "plain"

    def covar(self) -> Any:
        """A fresh kernel for one GP fit (``None``: BoTorch's default)."""
        if self.kernel == "arc":
            from agent.surrogates.arc import make_arc_kernel

            return make_arc_kernel(self.space)
        return None


class Surrogate(abc.ABC):
    """A surrogate prepared for one study.

    Attributes:
        name: the registry name it runs as (a transfer surrogate whose guard dropped every source
            runs as ``gp`` and says so).
        note: one line saying what it chose and why (shown to the user, stored on the study).
        budget: how hard the acquisition is maximised on its models.
        interleave_random: whether the sampler's interleaved random steps apply (GP family).
        pending: how trials still running enter a BO step. ``"joint"``: the model's posterior is
            joint over points, so the acquisition is BoTorch's MC ``qLogEI``/``qUCB`` with the
            running points as ``X_pending`` (a point near a running one gains little). ``"liar"``:
            the posterior is independent per point (the TNP's), which would make ``X_pending``
            blind to nearness, so each running point joins the observations at the worst observed
            score (constant liar, Ginsbourger et al. 2010) before the model is built.
    """

    name: str = ""
    note: str = ""
    budget: AcqBudget = AcqBudget()
    interleave_random: bool = True
    pending: str = "joint"

    def start_points(self) -> np.ndarray:
        """Cube points `k x d` evaluated before any model is fitted (portfolio, learned inits)."""
        return np.empty((0, 0))

    def fallback(self) -> Surrogate | None:
        """The surrogate the sampler alternates with once this one stalls (``None``: it never
        does; the GP family relies on interleaved random steps instead)."""
        return None

    @abc.abstractmethod
    def step_model(self, train_X: Any, train_Y: Any, state: dict[str, Any]) -> StepModel:
        """The model for one BO step on double tensors `n x d`, `n x 1` (maximised normal scores).

        ``state`` is a dict the sampler keeps between steps (e.g. warm-started GP hyperparameters).
        """


@dataclass(frozen=True)
class SurrogateSpec:
    """A registry entry.

    Attributes:
        needs_history: without sources it cannot run (the study falls back to ``gp``).
        meta_model: the file in ``models_dir`` it needs (``None``: needs no meta-training); its
            hash is recorded on the study, and ``resume`` refuses when it changed.
        prepare: builds the :class:`Surrogate` for one study from its inputs.
        revision: bumped whenever what the surrogate (or the sampler around it) suggests changes,
            so the benchmark's journal recomputes its runs instead of reusing stale ones.
    """

    name: str
    summary: str
    needs_history: bool
    prepare: Callable[[SurrogateInputs], Surrogate]
    meta_model: str | None = None
    revision: int = 1

    def meta_model_version(self, models_dir: Path) -> str | None:
        """The hash of the meta-model this surrogate would load from ``models_dir``, or None."""
        if self.meta_model is None:
            return None
        path = Path(models_dir) / self.meta_model
        if not path.is_file():
            return None
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
