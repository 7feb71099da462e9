"""Runs trials of a Lightning job inside a study until the budget is spent.

A trial is one real ``Trainer.fit`` in this process, logging per-epoch metrics to its MLflow run.
Whatever goes wrong inside a trial (an exception, a non-finite loss, the time limit) is recorded as
a failed trial with its reason and the study goes on; Ctrl-C closes the running trial as killed so
``tune-agent resume`` re-runs its slot. The study stops early only when most of its budget failed.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.errors import StudyFailedError
from agent.knowledge.base import TRIAL_FAILED, TRIAL_KILLED, TRIAL_OK, TrialRecord
from agent.tuning.study import Study


@dataclass
class TrialOutcome:
    value: float | None
    reason: str = ""
    fit_seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class StudyTiming:
    wall_seconds: float = 0.0
    fit_seconds: float = 0.0

    @property
    def overhead(self) -> float:
        return 1.0 - self.fit_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0


def _guard_callback(time_limit: float | None) -> Any:
    import lightning.pytorch as pl

    class TrialGuard(pl.Callback):
        """Stops a trial whose loss stops being finite or whose time is up, and says why."""

        def __init__(self) -> None:
            self.reason = ""
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, idx: int) -> None:
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            if loss is not None and not bool(np.isfinite(float(loss))):
                self.reason = f"diverged: non-finite training loss at epoch {trainer.current_epoch}"
                trainer.should_stop = True
            elif time_limit is not None and time.perf_counter() - self.start > time_limit:
                self.reason = f"time limit of {time_limit:g} s exceeded at epoch {trainer.current_epoch}"
                trainer.should_stop = True

    return TrialGuard()


def quiet_lightning() -> None:
    """Lightning's banners and hints would drown the study's own progress lines."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning\..*")
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")


def run_benchmark_trial(study: Study, trial: TrialRecord, job: Any, task: Any) -> TrialOutcome:
    """Queries a benchmark job's surrogate once; a failure is the trial's outcome, never raised."""
    start = time.perf_counter()
    try:
        value = float(job.evaluate(dict(trial.config), task))
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the job is the trial's outcome
        return TrialOutcome(None, f"{type(exc).__name__}: {str(exc).strip()[:400]}", time.perf_counter() - start)
    seconds = time.perf_counter() - start
    if not math.isfinite(value):
        return TrialOutcome(None, f"diverged: {study.settings.metric} is {value}", seconds)
    return TrialOutcome(value, "", seconds, {study.settings.metric: value})


def run_trial(study: Study, trial: TrialRecord, job: Any, dataset: Any, split: tuple[Any, Any] | None) -> TrialOutcome:
    """Trains ``job`` once with ``trial.config``; never raises for a failure inside the trial."""
    from agent.jobs.base import BenchmarkJob

    if isinstance(job, BenchmarkJob):
        return run_benchmark_trial(study, trial, job, dataset)
    import lightning.pytorch as pl

    settings = study.settings
    seed = settings.seed * 1009 + trial.number
    pl.seed_everything(seed, workers=False, verbose=False)
    guard = _guard_callback(settings.time_limit)
    start = time.perf_counter()
    assert split is not None, "a training job needs its train/validation split"
    try:
        module, datamodule = job.build(dict(trial.config), dataset, split[0], split[1], seed)
        trainer = pl.Trainer(
            max_epochs=settings.epochs,
            accelerator="cpu",
            devices=1,
            logger=study.kb.trial_logger(study.record, trial),
            callbacks=[guard],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            log_every_n_steps=1,
            num_sanity_val_steps=0,
        )
        trainer.fit(module, datamodule=datamodule)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the user's job is the trial's outcome
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return TrialOutcome(None, f"{type(exc).__name__}: {message}"[:500], time.perf_counter() - start)
    fit_seconds = time.perf_counter() - start
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if np.ndim(v) == 0}
    if guard.reason:
        return TrialOutcome(None, guard.reason, fit_seconds, metrics)
    if settings.metric not in metrics:
        return TrialOutcome(None, f"job logged no metric {settings.metric!r} (has {sorted(metrics)})", fit_seconds, metrics)
    value = metrics[settings.metric]
    if not math.isfinite(value):
        return TrialOutcome(None, f"diverged: {settings.metric} is {value}", fit_seconds, metrics)
    return TrialOutcome(value, "", fit_seconds, metrics)


def run_study(study: Study, job: Any, dataset: Any, split: tuple[Any, Any] | None, reporter: Any,
              trace_plot: bool = True) -> StudyTiming:
    """Asks, trains and tells until the budget is spent; returns where the time went.

    ``trace_plot`` False skips the trace figure (the benchmark runs thousands of studies).
    """
    quiet_lightning()
    timing = StudyTiming()
    wall_start = time.perf_counter()
    trials = study.trials()
    study.set_status("running")
    reporter.begin(study, trials)
    while study.remaining(trials) > 0:
        trial = study.ask()
        reporter.trial_started(trial)
        try:
            outcome = run_trial(study, trial, job, dataset, split)
        except (KeyboardInterrupt, SystemExit):
            study.tell(trial, state=TRIAL_KILLED, failed="interrupted by the user")
            study.set_status("interrupted")
            raise KeyboardInterrupt from None
        timing.fit_seconds += outcome.fit_seconds
        done = study.tell(
            trial,
            value=outcome.value,
            failed=outcome.reason or None,
            duration=outcome.fit_seconds,
            metrics={f"final_{k}": v for k, v in outcome.metrics.items()},
        )
        trials = study.trials()
        reporter.trial_finished(done, study.best(trials), trials)
        if study.failed_majority(trials):
            study.set_status("failed")
            raise StudyFailedError(
                f"study {study.name!r} stopped: most trials failed (last reason: {done.reason})"
            )
    timing.wall_seconds = time.perf_counter() - wall_start
    study.set_status("finished")
    if trace_plot:
        log_trace_plot(study, trials)
    reporter.end(study, study.best(trials), timing)
    return timing


def log_trace_plot(study: Study, trials: list[TrialRecord]) -> None:
    """The optimisation trace (each trial and best so far) as ``trace.png`` on the study run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counted = sorted((t for t in trials if t.state in (TRIAL_OK, TRIAL_FAILED)), key=lambda t: t.number)
    xs = [t.number + 1 for t in counted if t.value is not None]
    ys = [t.value for t in counted if t.value is not None]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if ys:
        best = np.minimum.accumulate(ys) if study.settings.mode == "min" else np.maximum.accumulate(ys)
        ax.scatter(xs, ys, s=18, label="trial", color="tab:blue")
        ax.step(xs, best, where="post", label="best so far", color="tab:orange")
    ax.set_xlabel("trial")
    ax.set_ylabel(study.settings.metric)
    ax.set_title(f"{study.name}: {study.settings.mode} {study.settings.metric}")
    ax.legend(loc="best")
    fig.tight_layout()
    study.kb.log_study_figure(study.record, fig, "trace.png")
    plt.close(fig)
