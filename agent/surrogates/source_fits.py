"""The history as surrogate data: each historical dataset a :class:`SourceTask` (cube points and
normal scores, keyed by its content's digest), and :class:`SourceFits`, which holds what is fitted to
the sources (each source's GP and signal check, their means at candidate points, the portfolios) once
per process, loading from and adding to a :class:`~agent.surrogates.source_store.SourceModelStore`.

Sources are the historical datasets run with the same job and search space, sorted by name, so the
same history gives the same sources in every process and backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from agent.space import SearchSpace


class FitInputs(Protocol):
    """What fitting a source's GP needs of a study's inputs
    (:class:`agent.surrogates.contract.SurrogateInputs` has it)."""

    @property
    def space(self) -> SearchSpace: ...

    @property
    def kernel(self) -> str: ...

    def covar(self) -> Any: ...


MIN_SOURCE_POINTS = 5
# Bump when :func:`agent.surrogates.source_gp.fit_source_gps` changes what it fits: stored source fits
# (and the portfolios made from them, :mod:`agent.surrogates.source_store`) of another revision are ignored.
FIT_REVISION = 1
# A source GP's means over more than MEAN_CHUNK_ABOVE candidates are taken MEAN_CHUNK at a time.
MEAN_CHUNK_ABOVE, MEAN_CHUNK = 4096, 512


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


def _fit_key(source: SourceTask, inputs: FitInputs | None) -> tuple[str, str]:
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
        self.rebuilt = 0  # source GPs rebuilt from stored hyperparameters as BoTorch models

    def mean_on(self, source: SourceTask, points: np.ndarray, inputs: FitInputs | None = None) -> np.ndarray:
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
        self, sources: Sequence[SourceTask], points: np.ndarray, inputs: FitInputs | None = None
    ) -> np.ndarray:
        """Every source's GP posterior mean at ``points`` (`s x n`). The GPs not yet asked are
        evaluated all at once: from their stored constrained hyperparameters in numpy when every one
        has them (:mod:`agent.surrogates.stored_means`: no torch import before a study's first
        trial), else stacked (:mod:`agent.surrogates.gp_stack`: one batched kernel call, not one
        posterior per source, 10 ms each); the rest come from :meth:`mean_on`'s cache."""
        digest = hashlib.sha256(np.ascontiguousarray(points).tobytes()).hexdigest()[:20]
        kernel = inputs.kernel if inputs is not None else "plain"
        todo = [s for s in sources if (s.digest, digest, kernel) not in self._means]
        stored = self._stored_summaries(todo, inputs) if len(todo) > 1 else None
        if stored is not None:  # every one a plain-kernel fit kept with its constrained hyperparameters
            from agent.surrogates.stored_means import stored_means

            means = stored_means([(s.U, s.y, summary) for s, summary in zip(todo, stored)], points)
            for source, row in zip(todo, means):
                self._means[(source.digest, digest, kernel)] = row
        elif len(todo) > 1:
            import torch

            from agent.surrogates.gp import torch_threads
            from agent.surrogates.gp_stack import _GPStack

            members = self._members(todo, inputs)
            if members is not None:
                stack = _GPStack(members)
                step = max(1, int(4e6 // (len(todo) * stack.X.shape[1])))  # bounded memory: s x step x N values
                X = torch.as_tensor(points, dtype=torch.double)
                with torch_threads(1), torch.no_grad():
                    stacked = torch.cat([stack.means_at(X[i : i + step]) for i in range(0, len(X), step)], dim=-1)
                for source, row in zip(todo, stacked.numpy()):
                    self._means[(source.digest, digest, kernel)] = row
        if not sources:
            return np.empty((0, len(points)))
        rows = [self._means.get((s.digest, digest, kernel)) for s in sources]
        return np.stack([self.mean_on(s, points, inputs) if r is None else r for s, r in zip(sources, rows)])

    def _stored_summaries(self, sources: Sequence[SourceTask], inputs: FitInputs | None) -> list[dict[str, Any]] | None:
        """The stored stack summaries of ``sources``' plain-kernel GPs (none of them in memory yet),
        or None when one lacks its summary: their means need no torch then."""
        if (inputs is not None and inputs.kernel != "plain") or self.store is None:
            return None
        out = []
        for s in sources:
            kernel, key = _fit_key(s, inputs)
            stored = None if s.dims is not None or key in self._gps else self.store.fit(s.digest, kernel)
            if stored is None or not isinstance(stored.get("stack"), dict):
                return None
            out.append(stored["stack"])
        return out

    def _members(self, sources: Sequence[SourceTask], inputs: FitInputs | None) -> list[Any] | None:
        """The sources' GPs as stack members (:class:`agent.surrogates.gp_stack.Member`): from the
        GP in memory, or straight from its stored hyperparameters without rebuilding a model; None
        when one cannot be stacked (the caller evaluates each GP then)."""
        from agent.surrogates.gp_stack import StateMembers, _is_stackable, member_of
        from agent.surrogates.source_gp import source_data

        states, out = StateMembers(inputs.covar if inputs is not None else None), []
        for s in sources:
            kernel, key = _fit_key(s, inputs)
            stored = self.store.fit(s.digest, kernel) if self.store is not None and key not in self._gps else None
            if stored is not None and s.dims is None:
                try:
                    out.append(states.member(*source_data(s.U, s.y), stored["state"]))
                    continue
                except (ValueError, KeyError, TypeError, RuntimeError):
                    pass  # a record that does not fit this model: the GP as gp() makes it
            model = self.gp(s, inputs)[0]
            if not _is_stackable(model):
                return None
            out.append(member_of(model))
        return out if len({m.kind for m in out}) == 1 else None

    def target_range(self, source: SourceTask) -> tuple[float, float]:
        """(min, max) of the standardised values ``source``'s GP is conditioned on, without the GP."""
        from agent.surrogates.stored_means import conditioned_targets, source_targets

        z = conditioned_targets(source_targets(source.y))
        return float(z.min()), float(z.max())

    def gp(self, source: SourceTask, inputs: FitInputs | None = None) -> tuple[Any, bool]:
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
                    self.rebuilt += 1
                    self._gps[key] = (model, bool(stored["informative"]))
                    self._r2[key] = float(stored["r2"])
                    return self._gps[key]
                except (ValueError, KeyError, TypeError, RuntimeError):
                    pass  # a record that does not fit this model (another kernel's layout): refit it
            from agent.surrogates.gp import gp_state
            from agent.surrogates.gp_stack import stack_summary
            from agent.surrogates.source_gp import SIGNAL_MIN_R2, source_signal

            model = fit_source_gps([(source.U, source.y)], covar=covar, dims=source.dims)[0]
            self.fitted += 1
            self._r2[key] = source_signal(model)
            self._gps[key] = (model, self._r2[key] >= SIGNAL_MIN_R2)  # as source_gp.informative decides
            if self.store is not None:
                self.store.add_fit(
                    source.digest, kernel, gp_state(model), self._gps[key][1], self._r2[key], stack_summary(model)
                )
        return self._gps[key]

    def fit_many(
        self, sources: Sequence[SourceTask], inputs: FitInputs, workers: int, tick: Callable[[int], None]
    ) -> None:
        """The GPs of ``sources`` (:meth:`missing` ones) fitted ``workers`` processes at a time
        (:func:`agent.surrogates.source_gp.fit_states`), then held and stored as :meth:`gp` does."""
        from agent.surrogates.gp_stack import stack_summary
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
                self.store.add_fit(source.digest, kernel, state, r2 >= SIGNAL_MIN_R2, r2, stack_summary(model))
            tick(i + 1)

    def verdict(self, source: SourceTask, inputs: FitInputs | None = None) -> tuple[bool, float]:
        """(whether the source's GP passes the signal check, its leave-one-out R²), from the store
        without rebuilding the GP when it is there."""
        kernel, key = _fit_key(source, inputs)
        if key not in self._gps and self.store is not None:
            stored = self.store.fit(source.digest, kernel)
            if stored is not None and "r2" in stored:
                return bool(stored["informative"]), float(stored["r2"])
        informative = self.gp(source, inputs)[1]
        return informative, self._r2[key]

    def missing(self, sources: Sequence[SourceTask], inputs: FitInputs | None = None) -> list[SourceTask]:
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
        self, sources: Sequence[SourceTask], size: int, inputs: FitInputs, compute: Callable[[], np.ndarray]
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

    def informative(self, sources: Sequence[SourceTask], inputs: FitInputs | None = None) -> list[SourceTask]:
        """The sources whose own response surface is predictable (the negative-transfer guard)."""
        return [s for s in sources if self.verdict(s, inputs)[0]]
