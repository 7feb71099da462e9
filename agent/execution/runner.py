"""Runs trials of a Lightning job inside a study until the budget is spent.

A trial is one real ``Trainer.fit`` in this process, logging per-epoch metrics to its MLflow run.
Whatever goes wrong inside a trial (an exception, a non-finite loss, the time limit) is recorded as
a failed trial with its reason and the study goes on; Ctrl-C closes the running trial as killed so
``tune-agent resume`` re-runs its slot. The study stops early only when most of its budget failed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.errors import StudyError, StudyFailedError, WorkersLostError
from agent.execution.keep import ModelKeeper
from agent.execution.pruning import curve_metrics
from agent.execution.trial import (
    quiet_lightning,
    run_trial,  # noqa: F401 - re-exported
)
from agent.execution.workers import InlineExecutor
from agent.knowledge.records import TRIAL_KILLED, TRIAL_OK, TRIAL_PRUNED, TrialRecord
from agent.tuning.study import Study


@dataclass
class StudyTiming:
    wall_seconds: float = 0.0
    fit_seconds: float = 0.0
    ask_seconds: list[float] = field(default_factory=list)
    workers: int = 1
    timed_out: bool = False  # ``timeout`` stopped the run before the trial budget was spent
    batched_tells: int = 0  # trials told with the one before them, no ask between (ended while the driver was busy)
    first_result_seconds: float | None = None  # from the loop's start to the first trial's end reaching it
    first_wait_seconds: float = 0.0  # the first trial waited this long for its process to be ready (trial_process)

    @property
    def overhead(self) -> float:
        return 1.0 - self.fit_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def utilisation(self) -> float:
        """Share of the workers' wall time spent in ``Trainer.fit``."""
        return self.fit_seconds / (self.wall_seconds * self.workers) if self.wall_seconds > 0 else 0.0


def run_study(
    study: Study,
    job: Any,
    dataset: Any,
    split: tuple[Any, Any] | None,
    reporter: Any,
    trace_plot: bool = True,
    executor: Any = None,
    timeout: float | None = None,
    n_trials: int | None = None,
) -> StudyTiming:
    """Asks, trains and tells until the budget is spent; returns where the time went.

    ``timeout`` (seconds of this call, as Optuna's ``optimize(timeout=...)``): no trial starts
    after it, the running ones finish, and a study with trials left ends ``interrupted`` (resumable)
    with ``timed_out`` set on the returned timing. ``n_trials``: at most this many trials start in
    this call (Optuna's ``optimize(n_trials=...)``); the study ends ``interrupted`` as with a timeout
    when budget is left.

    ``executor`` (:mod:`agent.execution.workers`) runs the trials: by default one at a time in this
    process; a parallel one keeps ``capacity`` trials running, each asked with the others pending,
    and, with ``ask_ahead`` k, k more asked and held here, each started the moment a trial ends,
    before that trial is told, so a free worker does not wait for the next BO step.
    ``trace_plot`` False skips the trace figure (the benchmark runs thousands of studies).
    """
    quiet_lightning()
    executor = executor if executor is not None else InlineExecutor(study, job, dataset, split)
    if hasattr(executor, "on_epoch"):
        executor.on_epoch = getattr(reporter, "epoch_done", None)
    timing = StudyTiming(workers=executor.capacity)
    loop = _StudyLoop(study, executor, reporter, timing, timeout, n_trials)
    loop.keeper = ModelKeeper(study, job, reporter.line)
    study.set_status("running")
    try:
        reporter.begin(study, loop.trials)
        _run_loop(study, executor, loop)
        timing.first_wait_seconds = float(getattr(executor, "first_wait", 0.0))
        timing.wall_seconds = time.perf_counter() - loop.wall_start
        _end_study(study, loop.trials, reporter, timing, trace_plot)
    finally:
        getattr(reporter, "close", lambda: None)()  # however the study ends, its heartbeat stops
    return timing


def _run_loop(study: Study, executor: Any, loop: _StudyLoop) -> None:
    """The study loop run; an interrupt or lost workers close what was running and leave the study
    ``interrupted``."""
    try:
        loop.run()
    except (KeyboardInterrupt, SystemExit):
        _close(study, executor, loop.running | loop.untold, "interrupted by the user", loop.ready)
        study.set_status("interrupted")
        raise KeyboardInterrupt from None
    except WorkersLostError as exc:  # the cluster went away: its trials are killed, the study resumable
        closed = loop.running | loop.untold
        _close(study, executor, closed, str(exc), loop.ready)
        study.set_status("interrupted")
        raise WorkersLostError(
            f"{exc}; trial(s) {', '.join(str(n + 1) for n in sorted(closed))} closed as killed", exc.remedy
        ) from None
    finally:
        executor.close()


def _end_study(study: Study, trials: list[TrialRecord], reporter: Any, timing: StudyTiming, trace_plot: bool) -> None:
    """The study's status once its loop ended (``interrupted`` with budget left), its trace figure,
    report and source model (``trace_plot``), and the reporter's last word."""
    timing.timed_out = study.remaining(trials) > 0
    study.set_status("interrupted" if timing.timed_out else "finished")
    if trace_plot:
        log_trace_plot(study, trials)
    reporter.end(study, study.best(trials), timing)
    if trace_plot:
        _log_report(study, reporter)
        if not timing.timed_out:
            _add_source_model(study, reporter)


class _StudyLoop:
    """The asks, trials and tells of one :func:`run_study` call: the study's trials as this loop
    keeps them (:func:`_with`), those running on the executor, those asked ahead and waiting for a
    worker (``ready``), and those ended on a worker but not yet told (``untold``: closed as killed
    if the study stops)."""

    def __init__(
        self,
        study: Study,
        executor: Any,
        reporter: Any,
        timing: StudyTiming,
        timeout: float | None,
        n_trials: int | None,
    ) -> None:
        self.study, self.executor, self.reporter, self.timing = study, executor, reporter, timing
        self.timeout, self.n_trials = timeout, n_trials
        self.ahead = executor.ask_ahead
        self.wall_start = time.perf_counter()
        self.trials = study.trials()
        self.running: dict[int, TrialRecord] = {}
        self.untold: dict[int, TrialRecord] = {}
        self.ready: deque[TrialRecord] = deque()
        self.asked = 0
        self.keeper: ModelKeeper | None = None  # the trained models kept (run_study sets it)

    def timed_out(self) -> bool:
        return self.timeout is not None and time.perf_counter() - self.wall_start >= self.timeout

    def run(self) -> None:
        """Until no trial runs: the budget spent, ``n_trials`` asked, or the timeout passed."""
        while True:
            if self.ready and self.timed_out():  # asked ahead but not started: their slots stay free for resume
                self.trials = _close_ready(
                    self.study, self.ready, self.trials, f"not started before --timeout {self.timeout:g} s"
                )
            self._start_ready()
            self._ask()
            if not self.running:
                break
            done = self._tell(self._collect())
            if self.study.failed_majority(self.trials):
                _close(self.study, self.executor, self.running, "the study stopped: most trials failed", self.ready)
                self.study.set_status("failed")
                raise StudyFailedError(
                    f"study {self.study.name!r} stopped: most trials failed (last reason: {done.reason})"
                )

    def _start_ready(self) -> None:
        while self.ready and len(self.running) < self.executor.capacity:
            trial = self.ready.popleft()
            self.reporter.trial_started(trial)
            if self.keeper is not None:
                self.keeper.before(trial, self.trials)
            self.executor.submit(trial)
            self.running[trial.number] = trial

    def _ask(self) -> None:
        """Asks while a worker (or, with ``ask_ahead``, a place in ``ready``) is free and budget is
        left; in a shared study (``resume --join``), the other runners' trials read first, and no
        slot left free of theirs ends the asking."""
        if self.study.shared:
            self.trials = self.study.trials()
        while (
            len(self.running) + len(self.ready) < self.executor.capacity + self.ahead
            and self.study.remaining(self.trials) - len(self.running) - len(self.ready) > 0
            and not self.timed_out()
            and (self.n_trials is None or self.asked < self.n_trials)
        ):
            ask_start = time.perf_counter()
            try:
                trial = self.study.ask(self.trials)
            except StudyError:
                if self.study.shared:  # the study's other runners hold every slot left
                    return
                raise
            self.asked += 1
            self.timing.ask_seconds.append(time.perf_counter() - ask_start)
            self.ready.append(trial)
            self.trials = _with(self.trials, trial)
            self._start_ready()

    def _collect(self) -> deque[tuple[TrialRecord, Any]]:
        """The trials that ended: the one waited for and any that ended while the driver was busy
        (all told before the next ask); the next trials start before these are told."""
        ended = deque([self.executor.wait()])
        if self.timing.first_result_seconds is None:
            self.timing.first_result_seconds = time.perf_counter() - self.wall_start
        while (also := self.executor.poll()) is not None:
            ended.append(also)
        for trial, _ in ended:
            self.untold[trial.number] = self.running.pop(trial.number)
        if not self.timed_out():
            self._start_ready()
        self.timing.batched_tells += len(ended) - 1
        return ended

    def _tell(self, ended: deque[tuple[TrialRecord, Any]]) -> TrialRecord:
        """Tells the study each ended trial's outcome; the last one told."""
        while True:
            trial, outcome = ended.popleft()
            self.timing.fit_seconds += outcome.fit_seconds
            extra = {f"final_{k}": v for k, v in outcome.metrics.items()} | curve_metrics(outcome.curve)
            if outcome.retries:
                extra["worker_retries"] = float(outcome.retries)
            if outcome.resumed_from:  # continued from its killed run's checkpoint
                extra["resumed_from_epoch"] = float(outcome.resumed_from)
                self.reporter.line(
                    f"  trial {trial.number + 1} continued from its checkpoint after epoch {outcome.resumed_from}"
                )
            if outcome.note:
                self.reporter.line(f"  trial {trial.number + 1}: {outcome.note}")
            done = self.study.tell(
                trial,
                value=outcome.value,
                failed=outcome.reason or None,
                duration=outcome.fit_seconds,
                metrics=extra,
                state=TRIAL_PRUNED if outcome.pruned else None,
            )
            self.untold.pop(trial.number)
            self.trials = _with(self.trials, done)
            self.reporter.trial_finished(done, self.study.best(self.trials), self.trials)
            if self.keeper is not None:
                self.keeper.ended(done, self.trials)
            if not ended:
                return done


def _add_source_model(study: Study, reporter: Any) -> None:
    """The ended study's dataset joins the stored source models (one GP fit; the portfolios of the
    history with it), so the next study looks it up instead of fitting it. A by-product: one that
    cannot be made is a note, and the next study fits what is missing."""
    from agent.errors import StoreError
    from agent.tuning.heartbeat import phase
    from agent.tuning.published import open_source_models, publish_added
    from agent.tuning.source_models import history_revision, update_source_models

    s = study.settings
    start = time.perf_counter()
    # seconds (a GP fit, the history's portfolios): said first, so the end of a study is never silent
    reporter.line(f"source models: adding this study's dataset to {s.models_dir}")
    phase(reporter, "adding this study's dataset to the source models (the stored ones read, its GP fitted)")
    store = open_source_models(study.kb, s.models_dir, s.job_name, study.space, reporter.line)
    try:
        done = update_source_models(study.kb, s.models_dir, s.job_name, study.space, s.kernel, store=store)
    except StoreError:
        raise
    except Exception as exc:
        reporter.line(f"source models not updated: {type(exc).__name__}: {exc}")
        return
    phase(reporter, "publishing the source models to the store")
    published = publish_added(
        study.kb, store, s.job_name, study.space, lambda: history_revision(study.kb, s.job_name, study.space)
    )
    if "not_written" in done:
        reporter.line(f"source models not updated: cannot write {done['not_written']}")
    elif done["fitted"]:
        reporter.line(
            f"source models: {done['fitted']} GP(s) fitted and stored in {done['file']} "
            f"({done['sources']} sources, {time.perf_counter() - start:.1f} s)"
        )
    if published is not None:
        reporter.line(published)


def _with(trials: list[TrialRecord], record: TrialRecord) -> list[TrialRecord]:
    """``trials`` as the store lists them after ``record`` was opened or closed: this loop is the
    study's only writer, so it keeps the list instead of reading it back after every ask and tell
    (a search of the store each, on the driver's critical path when workers wait for it). Ordered as
    :meth:`KnowledgeBase.trials` orders them: by number, a slot's re-runs after its earlier runs."""
    kept = [t for t in trials if t.trial_id != record.trial_id]
    at = next((i for i, t in enumerate(trials) if t.trial_id == record.trial_id), None)
    if at is not None:
        kept.insert(at, record)
        return kept
    return sorted(kept + [record], key=lambda t: t.number)


def _close(study: Study, executor: Any, running: Mapping[int, TrialRecord], reason: str, ready: Any) -> None:
    """Cancels the running trials and closes them, and those asked ahead, as killed, freeing
    their slots for ``resume``."""
    executor.cancel()
    for trial in running.values():
        study.tell(trial, state=TRIAL_KILLED, failed=reason)
    _close_ready(study, ready, [], reason)


def _close_ready(study: Study, ready: Any, trials: list[TrialRecord], reason: str) -> list[TrialRecord]:
    """Closes the trials asked ahead that no worker started as killed (their slots stay free)."""
    while ready:
        trials = _with(trials, study.tell(ready.popleft(), state=TRIAL_KILLED, failed=reason))
    return trials


def _log_report(study: Study, reporter: Any) -> None:
    """The study's report on its run (``report/report.html``); one that cannot be made is a note."""
    from agent.errors import StoreError
    from agent.tuning.report_store import write_report

    try:
        write_report(study.kb, study.record, study.space)
    except StoreError:
        raise
    except Exception as exc:
        reporter.line(f"report not written: {type(exc).__name__}: {exc}")
        return
    reporter.line(f"report: report/report.html on the study run (tune-agent report {study.name} writes it here too)")


def log_trace_plot(study: Study, trials: list[TrialRecord]) -> None:
    """The optimisation trace (each trial and best so far) as ``trace.png`` on the study run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    finished = sorted((t for t in trials if t.state == TRIAL_OK and t.value is not None), key=lambda t: t.number)
    pruned = [(t.number + 1, t.value) for t in trials if t.state == TRIAL_PRUNED and t.value is not None]
    xs = [t.number + 1 for t in finished]
    ys = [t.value for t in finished if t.value is not None]  # all of them: finished holds only valued trials
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if ys:
        best = np.minimum.accumulate(ys) if study.settings.mode == "min" else np.maximum.accumulate(ys)
        ax.scatter(xs, ys, s=18, label="trial", color="tab:blue")
        ax.step(xs, best, where="post", label="best so far", color="tab:orange")
    if pruned:
        ax.scatter(
            [x for x, _ in pruned],
            [y for _, y in pruned],
            s=18,
            marker="x",
            color="tab:gray",
            label="pruned (last value)",
        )
    ax.set_xlabel("trial")
    ax.set_ylabel(study.settings.metric)
    ax.set_title(f"{study.name}: {study.settings.mode} {study.settings.metric}")
    ax.legend(loc="best")
    fig.tight_layout()
    study.kb.log_study_figure(study.record, fig, "trace.png")
    plt.close(fig)
