"""The job protocol: what a user's training job must provide, and how we check that it does.

A *job* turns one configuration of its search space into a Lightning model and data module for
one dataset split. The tuning loop only ever talks to jobs through :class:`Job`; this module owns
that contract (:class:`Job`), the structural check used when loading a job (:func:`validate_job`),
and small helpers shared by the built-in jobs (dataset sanity checks, config look-ups).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from agent.errors import JobError
from agent.space import SearchSpace

# what agent.jobs.classifier.ClassifierModule logs per epoch; here, where a job's class can read
# it without importing Lightning
CLASSIFIER_METRICS = ("val_loss", "val_acc", "train_loss", "train_acc")
# What every trial of a Lightning job reports besides what its module logs: its trainable
# parameters and the wall time of its Trainer.fit (agent.execution.trial.train_config), so a study
# can trade accuracy against size or time (--metric n_params:min, --constraint "n_params<=20000").
ALWAYS_REPORTED = ("n_params", "fit_seconds")

if TYPE_CHECKING:  # pragma: no cover - typing only
    import lightning.pytorch as pl

MODES = ("min", "max")


@runtime_checkable
class Job(Protocol):
    """What a user's job implements; ``--job package.module:attr`` loads one.

    Attributes:
        name: short identifier, used in logs and run names.
        space: the :class:`~agent.space.SearchSpace` the tuner searches (at least one parameter).
        metric: the default objective, a name the LightningModule logs (e.g. ``"val_loss"``).
        mode: ``"min"`` or ``"max"`` for ``metric``.

    Methods:
        check_dataset(dataset): raise :class:`~agent.errors.JobError` (one line) when the job
            cannot train on ``dataset`` (wrong kind or shape); return ``None`` otherwise.
        build(config, dataset, train_idx, val_idx, seed): return ``(LightningModule,
            LightningDataModule)`` ready for ``Trainer.fit``. ``config`` holds only the *active*
            parameters of ``space`` (conditional parameters whose parent does not match are
            absent). ``train_idx`` / ``val_idx`` index rows of ``dataset.X``. ``seed`` must make
            initialisation and shuffling reproducible.

    The LightningModule should log ``train_loss``, ``train_acc``, ``val_loss`` and ``val_acc`` per
    epoch; :class:`agent.jobs.classifier.ClassifierModule` does that for classifiers. A job may
    declare them as ``metrics`` (a tuple of names): ``--metric`` is then checked against it before
    the study is made, instead of failing its first trials.
    """

    name: str
    space: SearchSpace
    metric: str
    mode: str

    def check_dataset(self, dataset: Any) -> None: ...

    def build(
        self, config: dict, dataset: Any, train_idx: np.ndarray, val_idx: np.ndarray, seed: int
    ) -> tuple[pl.LightningModule, pl.LightningDataModule]: ...


@dataclass(frozen=True)
class BenchmarkTask:
    """One task of a surrogate benchmark: what a study records in place of a dataset."""

    name: str
    instance: str
    fingerprint: str


@runtime_checkable
class BenchmarkJob(Protocol):
    """A job whose trials query a benchmark's surrogate instead of training (e.g. ``yahpo:lcbench``).

    Everything else — warm start, surrogates, MLflow logging, resume — is the product's: such a job
    gives a tuning study of seconds, and the benchmarks are loops over these studies.

    Methods:
        task(spec): the :class:`BenchmarkTask` named by ``--dataset``; raises :class:`JobError`
            (one line) for an unknown one.
        evaluate(config, task): the objective of ``config`` (active parameters only) on ``task``.
    """

    name: str
    space: SearchSpace
    metric: str
    mode: str

    def task(self, spec: str) -> BenchmarkTask: ...

    def evaluate(self, config: Mapping[str, Any], task: BenchmarkTask) -> float: ...


def validate_job(job: Any, label: str) -> Job:
    """Returns ``job`` if it meets the protocol, else raises a one-line :class:`JobError`."""
    problems = []
    name = getattr(job, "name", None)
    if not isinstance(name, str) or not name:
        problems.append("'name' must be a non-empty str")
    space = getattr(job, "space", None)
    if not isinstance(space, SearchSpace):
        problems.append(f"'space' must be an agent.space.SearchSpace, got {type(space).__name__}")
    elif space.dim < 1:
        problems.append("'space' has no parameters")
    if not isinstance(getattr(job, "metric", None), str):
        problems.append("'metric' must be a str")
    mode = getattr(job, "mode", None)
    if mode not in MODES:
        problems.append(f"'mode' must be 'min' or 'max', got {mode!r}")
    methods = ("task", "evaluate") if isinstance(job, BenchmarkJob) else ("check_dataset", "build")
    for method in methods:
        if not callable(getattr(job, method, None)):
            problems.append(f"'{method}' must be callable")
    if problems:
        raise JobError(f"job {label!r} does not meet the job protocol: {'; '.join(problems)}")
    return job


def check_arrays(job_name: str, dataset: Any) -> None:
    """Raises :class:`JobError` unless ``dataset`` has matching ``X``/``y`` and >= 2 classes."""
    X, y = getattr(dataset, "X", None), getattr(dataset, "y", None)
    label = getattr(dataset, "name", "?")
    if not isinstance(X, np.ndarray) or not isinstance(y, np.ndarray):
        raise JobError(f"job {job_name!r} needs numpy X and y; dataset {label} has neither")
    if X.ndim < 2 or y.ndim != 1 or X.shape[0] != y.shape[0] or X.shape[0] < 2:
        raise JobError(
            f"job {job_name!r} needs X (n x ...) and y (n) with n >= 2; dataset {label} has X {X.shape} and y {y.shape}"
        )
    if int(dataset.num_classes) < 2:
        raise JobError(f"job {job_name!r} needs at least 2 classes; dataset {label} has fewer")


def require(config: Mapping[str, Any], names: tuple[str, ...], job_name: str) -> None:
    """Raises :class:`JobError` naming the first parameter ``config`` lacks."""
    missing = [n for n in names if n not in config]
    if missing:
        raise JobError(f"config for job {job_name!r} lacks {', '.join(missing)}")
