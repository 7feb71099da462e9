"""The Python API, shaped as an Optuna user expects it::

    import agent

    study = agent.create_study("mine", dataset="wine", job="mlp", trials=20)
    study.optimize(n_trials=5)                       # the job trains itself, as `tune-agent start`

    def objective(trial):                            # or your own training, one trial at a time
        model = MyModule(**trial.params)
        trainer = pl.Trainer(max_epochs=10, callbacks=[TuneAgentCallback(trial)], logger=trial.logger())
        trainer.fit(model, train_loader, val_loader)
        return float(trainer.callback_metrics["val_loss"])   # or return None: the callback set it

    study.optimize(objective, n_trials=10, timeout=600)
    study.optimize(n_jobs=4)                         # the job's trials four at a time, on Ray
    study.best_trial.number, study.best_value, study.best_params

A study made here is the one ``tune-agent start`` makes: the same request checks, warm start from
the history, surrogate plan and MLflow record (the study run, one run per trial), so ``history``,
``best``, ``report``, ``resume`` and the MLflow UI show it like any other. Trials are numbered
from 1 everywhere a person reads them (run names, tags, console, :attr:`FrozenTrial.number`,
:attr:`~agent.tuning.study.TrialHandle.number`).

A failing objective is recorded as a failed trial with its reason (one line on stderr) and the
study goes on; Ctrl-C frees the running trial's slot and is raised again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.config import StudyRequest
from agent.errors import StudyError, UnknownStudyError
from agent.knowledge.records import TrialRecord
from agent.tuning.study import Study, TrialHandle

__all__ = ["FrozenTrial", "Trial", "TuningStudy", "create_study", "load_study"]


@dataclass(frozen=True)
class FrozenTrial:
    """A stored trial as a person reads it: ``number`` from 1, ``params`` the configuration."""

    number: int
    params: Mapping[str, Any]
    value: float | None
    state: str
    origin: str
    reason: str = ""
    duration: float | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, record: TrialRecord) -> FrozenTrial:
        return cls(
            record.number + 1,
            dict(record.config),
            record.value,
            record.state,
            record.origin,
            record.reason,
            record.duration,
            dict(record.extra),
        )


class TuningStudy:
    """A stored study with Optuna's verbs (see the module docstring). ``study.study`` is the
    ask/tell handle the product's loop uses (:class:`agent.tuning.study.Study`, slots from 0)."""

    def __init__(self, study: Study, job: Any = None, data: Any = None, split: Any = None) -> None:
        self.study = study
        self._job, self._data, self._split = job, data, split
        self._models: Any = None  # the ModelKeeper of this handle's own-loop trials

    def __repr__(self) -> str:  # no store read: a repr is printed by debuggers and logs
        return f"TuningStudy({self.name!r}, budget {self.study.settings.trials})"

    # -- what it is ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.study.name

    @property
    def metric(self) -> str:
        return self.study.settings.metric

    @property
    def direction(self) -> str:
        """``"minimize"`` or ``"maximize"``, as Optuna says it."""
        return "minimize" if self.study.settings.mode == "min" else "maximize"

    @property
    def status(self) -> str:
        return self.study.record.status

    @property
    def trials(self) -> list[FrozenTrial]:
        """Every trial the store holds, by number (a slot's re-run after a killed run)."""
        return [FrozenTrial.of(t) for t in self.study.trials()]

    @property
    def best_trial(self) -> FrozenTrial:
        best = self.study.best()
        if best is None:
            raise StudyError(f"study {self.name!r} has no finished trial yet")
        return FrozenTrial.of(best)

    @property
    def best_trials(self) -> list[FrozenTrial]:
        """The Pareto front (Optuna's name): the feasible finished trials no other one dominates
        over every objective; for a one-metric study without constraints, the best trial."""
        from agent.samplers.pareto import pareto_front

        settings = self.study.settings
        if not settings.multi:
            best = self.study.best()
            return [FrozenTrial.of(best)] if best is not None else []
        return [FrozenTrial.of(t) for t in pareto_front(self.study.trials(), settings)]

    @property
    def directions(self) -> list[str]:
        """Each objective's ``"minimize"`` or ``"maximize"``, the primary first."""
        return ["minimize" if mode == "min" else "maximize" for _, mode in self.study.settings.objective_list()]

    @property
    def best_value(self) -> float:
        value = self.best_trial.value
        assert value is not None  # a best trial is ok, with a value
        return value

    @property
    def best_params(self) -> dict[str, Any]:
        return dict(self.best_trial.params)

    def remaining(self) -> int:
        """Trials of the budget not yet finished (ok, failed or pruned)."""
        return self.study.remaining()

    # -- running it ------------------------------------------------------------------------------
    def trial(self) -> Any:
        """``with study.trial() as trial:`` one trial of your own loop (:meth:`Study.trial`); a
        model :class:`agent.lightning.TuneAgentCallback` saved is kept when the trial ranks
        among the best ``keep_models``, as ``tune-agent start`` keeps them."""
        return self.study.trial(keeper=self._keeper())

    def _keeper(self) -> Any:
        if self._models is None:
            import sys

            from agent.execution.keep import ModelKeeper

            self._models = ModelKeeper(self.study, None, lambda line: print(line, file=sys.stderr))
        return self._models

    def ask(self) -> TrialHandle:
        """The next trial (its ``params``/``config`` are the sampler's proposal); close it with :meth:`tell`."""
        return TrialHandle(self.study, self.study.ask())

    def tell(self, trial: TrialHandle, value: float | None = None, failed: str | None = None) -> FrozenTrial:
        """Closes ``trial``: ``value`` (finite: ok) or ``failed`` (a reason)."""
        done = self.study.tell(trial.record, value=value, failed=failed, metrics=trial.metrics)
        self.study.settle()
        return FrozenTrial.of(done)

    def optimize(
        self,
        objective: Callable[[TrialHandle], Any] | None = None,
        n_trials: int | None = None,
        timeout: float | None = None,
        show_progress: bool = False,
        n_jobs: int = 1,
        **execution: Any,
    ) -> None:
        """Runs up to ``n_trials`` more trials (default: the rest of the budget); none starts after
        ``timeout`` seconds. Without ``objective`` the job trains each trial as ``tune-agent start``
        does (its report and source model at the end), ``n_jobs`` at a time (on Ray above 1), with
        ``start``'s execution options by their Python names (``ray_address``, ``cpus_per_trial``,
        ``gpus_per_trial``, ``torch_threads``, ``ask_ahead``), checked as the command line checks
        them. With ``objective``, ``objective(trial)`` trains each trial here, one at a time, and
        returns the value (or None when :class:`agent.lightning.TuneAgentCallback` set it)."""
        from agent.execution.options import ASK_AHEAD, check_execution

        if n_trials is not None and n_trials < 1:
            raise StudyError(f"n_trials must be at least 1, got {n_trials}")
        settings = check_execution(n_jobs, timeout, **{"ask_ahead": ASK_AHEAD, **execution})
        if objective is None:
            self._run_job(n_trials, settings, show_progress)
            return
        if n_jobs != 1 or execution:
            raise StudyError(
                "an objective runs its trials here, one at a time: n_jobs and execution options need the job"
            )
        start = time.perf_counter()
        done = 0
        while self.study.remaining() > 0 and (n_trials is None or done < n_trials):
            if timeout is not None and time.perf_counter() - start >= timeout:
                break
            with self.trial() as trial:
                value = objective(trial)
                if value is not None:
                    trial.value = float(value)
            done += 1

    def _run_job(self, n_trials: int | None, execution: Any, show_progress: bool) -> None:
        from agent.execution.progress import ProgressReporter, SilentReporter
        from agent.execution.runner import run_study
        from agent.execution.workers import make_executor

        if self._job is None:
            from agent.tuning.service import load_study_data, open_study

            self.study, self._job = open_study(self.name, kb=self.study.kb)
            self._data, self._split = load_study_data(self.study, self._job)
        reporter = ProgressReporter() if show_progress else SilentReporter()
        executor = make_executor(self.study, self._job, self._data, self._split, execution)
        run_study(
            self.study,
            self._job,
            self._data,
            self._split,
            reporter,
            executor=executor,
            timeout=execution.timeout,
            n_trials=n_trials,
        )

    def __iter__(self) -> Iterator[FrozenTrial]:
        return iter(self.trials)


def create_study(
    name: str | None = None,
    *,
    dataset: str | None = None,
    job: str | None = None,
    model: str | type | None = None,
    data: str | type | None = None,
    space: str | Mapping[str, Any] | None = None,
    trainer: Mapping[str, Any] | None = None,
    dataset_name: str | None = None,
    trials: int = 20,
    tracking_uri: str | None = None,
    load_if_exists: bool = False,
    **options: Any,
) -> TuningStudy:
    """A new study, as ``tune-agent start`` makes it (checked, warm-started, stored) without
    running a trial: of a built-in ``job`` on a ``dataset``, or of your own LightningModule
    ``model`` and DataModule ``data`` (classes, or ``"package.module:Class"``) over ``space`` (a
    space file's path or its content as a mapping), with ``trainer`` arguments for every trial and
    ``dataset_name`` for the history. ``options`` are ``start``'s options by their Python names
    (``epochs=10``, ``warm_start="none"``, ``surrogate="rgpe"``, ``pruner="asha"``, ``seed=1``,
    ...); several objectives as ``metrics=["val_loss:min", "n_params:min"]`` and bounds as
    ``constraints=["n_params<=20000"]`` (then :attr:`TuningStudy.best_trials` is the front).
    ``load_if_exists``: a study of that name in the store is opened instead (Optuna's flag)."""
    from agent.tuning.service import prepare_study

    if load_if_exists and name is not None:
        try:
            return load_study(name, tracking_uri=tracking_uri)
        except UnknownStudyError:
            pass
    if "metric" in options:  # one metric by its old name: the same as metrics=[metric]
        options["metrics"] = (options.pop("metric"),)
    if model is not None or data is not None or space is not None:
        if dataset is not None or job is not None:
            raise StudyError("give either dataset and job, or your model, data and space")
        from agent.project.spec import project_spec

        job = project_spec(
            space=space,
            model=_class_spec(model),
            data=_class_spec(data),
            trainer=dict(trainer or {}),
            dataset_name=dataset_name,
        )
        dataset = dataset_name or ""
    if dataset is None or job is None:
        raise StudyError("create_study needs dataset and job, or model, data and space")
    request = StudyRequest.from_options(
        dataset=dataset, job=job, trials=trials, study_name=name, tracking_uri=tracking_uri, **options
    )
    prepared = prepare_study(request, echo=lambda line: None)
    return TuningStudy(prepared.study, prepared.job, prepared.data, prepared.split)


def _class_spec(value: str | type | None) -> str | None:
    """A class as ``package.module:Class`` (a class defined in ``__main__`` cannot be imported again)."""
    if value is None or isinstance(value, str):
        return value
    if value.__module__ == "__main__":
        raise StudyError(
            f"{value.__qualname__} is defined in the script itself: trials, resume and workers import it, so "
            "move it into a module and pass it (or 'package.module:Class')"
        )
    return f"{value.__module__}:{value.__qualname__}"


def load_study(name: str, tracking_uri: str | None = None) -> TuningStudy:
    """A stored study by name, with the sampler it was planned with; trials a dead process left
    running are closed as killed, freeing their slots (as ``tune-agent resume`` does)."""
    from agent.tuning.service import open_study

    study, _ = open_study(name, tracking_uri=tracking_uri)
    study.recover()
    return TuningStudy(study)


Trial = TrialHandle  # what an objective receives (Optuna's name for it)
