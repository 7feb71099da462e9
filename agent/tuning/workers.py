"""Where a study's trials run: in this process, or N at a time on Ray (``--workers N``).

:func:`agent.tuning.runner.run_study` keeps ``capacity`` trials running; each new one is asked
while the others are pending, so the sampler spreads them (``X_pending``). An executor only runs
what it is given and hands back finished trials one at a time, in the order they end:

- :class:`InlineExecutor`: one trial at a time in this process, logging live to MLflow.
- :class:`QueuedExecutor`: a benchmark job (a surrogate lookup, instant) with ``capacity`` trials
  in flight that finish in the order they started: N equally fast workers, simulated exactly, so
  the benchmark measures batch BO through the same loop.
- :class:`RayExecutor`: Ray Core tasks, one per trial, on a local Ray instance started for the
  study (``--workers N``) or on a cluster (``--ray-address``). Ray Core rather than Ray Tune's
  trial runner: the study already owns scheduling, state and resumption (MLflow is the record),
  so a trial is just a remote function; Tune would bring a second scheduler and a second record
  of every trial. Workers train with a recording logger and the driver writes what they logged to
  the trial's run, so only this process talks to the store (a worker may be on a machine that
  cannot reach an embedded sqlite file). A worker that dies (SIGKILL, out of memory, its node
  lost) is retried once on a fresh worker; a second death is a failed trial, never a lost one.
  Each task reserves ``--cpus-per-trial`` CPUs and ``--gpus-per-trial`` of a GPU, as Ray Tune's
  ``resources_per_trial`` (:mod:`agent.tuning.resources`).
"""

from __future__ import annotations

import os
import time
from collections import deque
from typing import Any, Protocol

from agent.errors import TuneAgentError, WorkersLostError
from agent.knowledge.base import TrialRecord
from agent.tuning.pruning import pruning_state
from agent.tuning.ray_start import RayStart, import_ray
from agent.tuning.resources import TrialResources, fit_note, trial_slots
from agent.tuning.runner import TrialOutcome, recording_logger, replay_logged, run_trial, train_config
from agent.tuning.study import Study

WORKER_RETRIES = 1
HEAD_CHECK_SECONDS = 5.0  # with nothing finished for this long, the Ray head is checked
HEAD_CHECK_TRIES = 3  # refused connections, a second apart, before the cluster counts as lost
WORKER_DIED = "worker died"
# Trials a Ray study asks beyond its workers and holds in this process: when a trial ends, the next
# one starts on its worker at once, and the finished one is told and the next asked while it runs.
# Without it a worker waits out the driver's BO step (0.3-0.65 s with running points on the
# 16-core machine, against 2.3 s trials in `bench parallel`). The cost: a trial asked ahead sees
# the trial that ends just before it starts as running, not as its result (as a batch one larger).
ASK_AHEAD = 1


class TrialExecutor(Protocol):
    """Runs trials; ``wait`` returns the next one to finish with its outcome."""

    capacity: int
    ask_ahead: int  # trials the study loop asks beyond ``capacity`` and holds until a worker is free
    where: str  # said to the user: "this process", "a local Ray instance", the cluster's address
    notes: list[str]  # said to the user as the study starts: e.g. fewer trials fit the cluster at once
    per_trial: str  # what a trial reserves, said with ``where`` ("2 CPUs and 0.5 GPU"); "" in this process

    def submit(self, trial: TrialRecord) -> None: ...

    def wait(self) -> tuple[TrialRecord, TrialOutcome]: ...

    def poll(self) -> tuple[TrialRecord, TrialOutcome] | None:
        """A trial that has already ended (while the driver was busy) with its outcome, or None:
        never waits."""
        ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


class InlineExecutor:
    """One trial at a time, here."""

    capacity = 1
    ask_ahead = 0  # a trial asked ahead would only miss the result of the one before it
    where = "this process"
    per_trial = ""

    def __init__(self, study: Study, job: Any, dataset: Any, split: Any, resources: TrialResources | None = None) -> None:
        self.study, self.job, self.dataset, self.split = study, job, dataset, split
        self.resources = resources or TrialResources()
        self.notes: list[str] = []  # said once the study starts
        self._queue: deque[TrialRecord] = deque()
        self.on_epoch: Any = None  # set by the study loop: the reporter hears each epoch

    def submit(self, trial: TrialRecord) -> None:
        self._queue.append(trial)

    def wait(self) -> tuple[TrialRecord, TrialOutcome]:
        trial = self._queue.popleft()
        accelerator = self.resources.accelerator
        if self.resources.torch_threads is None:
            return trial, run_trial(self.study, trial, self.job, self.dataset, self.split, self.on_epoch, accelerator)
        from agent.surrogates.gp import torch_threads

        with torch_threads(self.resources.torch_threads):
            return trial, run_trial(self.study, trial, self.job, self.dataset, self.split, self.on_epoch, accelerator)

    def poll(self) -> tuple[TrialRecord, TrialOutcome] | None:
        return None  # a trial here runs inside wait()

    def cancel(self) -> None:
        self._queue.clear()

    def close(self) -> None:
        self._queue.clear()


class QueuedExecutor(InlineExecutor):
    """``capacity`` benchmark trials in flight, finishing first-in first-out (see the module doc)."""

    def __init__(self, study: Study, job: Any, dataset: Any, split: Any, capacity: int, ask_ahead: int = 0) -> None:
        super().__init__(study, job, dataset, split)
        self.capacity, self.ask_ahead = capacity, ask_ahead
        self.where = f"{capacity} simulated workers in this process (a benchmark job answers instantly)"
        self._done: deque[tuple[TrialRecord, TrialOutcome]] = deque()

    def submit(self, trial: TrialRecord) -> None:
        self._done.append((trial, run_trial(self.study, trial, self.job, self.dataset, self.split)))

    def wait(self) -> tuple[TrialRecord, TrialOutcome]:
        return self._done.popleft()

    def poll(self) -> tuple[TrialRecord, TrialOutcome] | None:
        return None  # simulated workers end one at a time, each told before the next ask

    def cancel(self) -> None:
        self._done.clear()


def _remote_trial(job: Any, config: dict[str, Any], number: int, settings: Any, dataset: Any,
                  split: Any, pruning: Any = None, threads: int = 1,
                  accelerator: str = "cpu") -> tuple[TrialOutcome, list[Any], int]:
    """The body of a Ray task: one training run on ``threads`` torch threads (the CPUs the task
    reserved) and ``accelerator``, and what it logged."""
    import torch

    from agent.tuning.runner import quiet_lightning

    torch.set_num_threads(threads)
    quiet_lightning()
    logger = recording_logger()
    outcome = train_config(job, config, number, settings, dataset, split, logger, pruning, accelerator=accelerator)
    return outcome, logger.records, os.getpid()


class RayExecutor:
    """Ray Core tasks (see the module doc), each reserving ``resources`` (``--cpus-per-trial``,
    ``--gpus-per-trial``). ``address`` None starts a local Ray instance with ``capacity`` trials'
    CPUs (and the GPUs Ray finds) for this study and stops it at :meth:`close`."""

    def __init__(self, study: Study, job: Any, dataset: Any, split: Any, capacity: int,
                 address: str | None = None, ask_ahead: int = ASK_AHEAD, started: RayStart | None = None,
                 resources: TrialResources | None = None) -> None:
        ray = import_ray()
        self.study, self.capacity, self.ask_ahead = study, capacity, ask_ahead
        self.resources = resources or TrialResources()
        self.where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        self.per_trial = self.resources.describe()
        self._start = started or RayStart(capacity, address, self.resources)
        self._start.wait()
        # a task asking for more than any node has waits in Ray's queue without a word: say so
        slots = trial_slots(ray.nodes(), self.resources)
        if slots == 0 and self._start.own and address is None:
            self._start.stop()
            raise TuneAgentError(f"the local Ray instance has no room for a trial of {self.resources.describe()} "
                                 f"(Ray found {ray.cluster_resources().get('GPU', 0):g} GPUs here)")
        note = fit_note(slots, capacity, self.resources, self.where)
        self.notes = [note] if note else []
        self._task = ray.remote(max_retries=0, **self.resources.ray_options())(_remote_trial)
        self._job, self._dataset, self._split = ray.put(job), ray.put(dataset), ray.put(split)
        self._running: dict[Any, tuple[TrialRecord, int]] = {}  # object ref -> (trial, attempts so far)
        self._gcs = ray.get_runtime_context().gcs_address  # the head, checked while trials run
        self._lost = False

    def submit(self, trial: TrialRecord, attempts: int = 0) -> None:
        pruning = pruning_state(self.study.settings, self.study.trials)  # the curves finished so far
        ref = self._task.remote(self._job, dict(trial.config), trial.number, self.study.settings,
                                self._dataset, self._split, pruning, self.resources.cpus, self.resources.accelerator)
        self._running[ref] = (trial, attempts)

    def wait(self) -> tuple[TrialRecord, TrialOutcome]:
        while True:
            assert self._running, "wait() with no trial running"  # the study loop waits only on running ones
            ended = self._next(HEAD_CHECK_SECONDS)
            if ended is not None:
                return ended
            self._check_head()  # nothing finished for a while: is the cluster still there?

    def poll(self) -> tuple[TrialRecord, TrialOutcome] | None:
        return self._next(0) if self._running and not self._lost else None

    def _next(self, timeout: float) -> tuple[TrialRecord, TrialOutcome] | None:
        """The next trial to end within ``timeout`` seconds with its outcome, or None; a trial
        whose worker died is submitted again (once) and does not count as ended."""
        ray = import_ray()
        while self._running:
            ready, _ = ray.wait(list(self._running), num_returns=1, timeout=timeout)
            if not ready:
                return None
            (ref,) = ready
            trial, attempts = self._running.pop(ref)
            start = time.perf_counter()
            try:
                outcome, records, _ = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the task raised: a bug outside the job's own code
                return trial, TrialOutcome(None, f"worker error: {str(exc).strip().splitlines()[-1][:400]}",
                                           time.perf_counter() - start)
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                    ray.exceptions.ObjectLostError, ray.exceptions.RaySystemError) as exc:
                if attempts < WORKER_RETRIES:
                    self.submit(trial, attempts + 1)
                    continue
                return trial, TrialOutcome(None, f"{WORKER_DIED} {attempts + 1} times ({type(exc).__name__})",
                                           retries=attempts)
            replay_logged(records, self.study.kb.trial_logger(self.study.record, trial))
            outcome.retries = attempts
            return trial, outcome
        return None

    def _check_head(self) -> None:
        """Raises :class:`WorkersLostError` when the cluster's head (its GCS) refuses connections
        for a few seconds: Ray itself would end this process with a log line 60 s later."""
        import socket

        host, _, port = self._gcs.rpartition(":")
        for attempt in range(HEAD_CHECK_TRIES):
            try:
                with socket.create_connection((host, int(port)), timeout=2):
                    return
            except OSError:
                time.sleep(1.0)
        self._lost = True
        raise WorkersLostError(f"{self.where} is gone: its head at {self._gcs} refuses connections")

    def cancel(self) -> None:
        if self._lost:  # nothing left to cancel on
            self._running.clear()
            return
        ray = import_ray()
        for ref in list(self._running):
            ray.cancel(ref, force=True)
        self._running.clear()

    def close(self) -> None:
        if self._running:
            self.cancel()
        self._start.stop(shutdown=not self._lost)


def make_executor(study: Study, job: Any, dataset: Any, split: Any, workers: int = 1,
                  ray_address: str | None = None, ask_ahead: int = ASK_AHEAD,
                  started: RayStart | None = None, resources: TrialResources | None = None) -> TrialExecutor:
    """The executor for ``--workers``/``--ray-address``: inline for one local worker, queued for a
    benchmark job, Ray otherwise (``ask_ahead``: see :data:`ASK_AHEAD`; ``started``: Ray's start
    begun by :func:`start_workers_early`, stopped here when the study does not run on Ray;
    ``resources``: what each trial trains with)."""
    from agent.jobs.base import BenchmarkJob

    if workers < 1:
        raise TuneAgentError(f"--workers must be at least 1, got {workers}")
    if ask_ahead < 0:
        raise TuneAgentError(f"--ask-ahead must be 0 or more, got {ask_ahead}")
    on_ray = not isinstance(job, BenchmarkJob) and (workers > 1 or ray_address is not None)
    if started is not None and not on_ray:
        started.abandon()
    if isinstance(job, BenchmarkJob):
        return (QueuedExecutor(study, job, dataset, split, workers, ask_ahead) if workers > 1
                else InlineExecutor(study, job, dataset, split))
    if not on_ray:
        return InlineExecutor(study, job, dataset, split, resources)
    return RayExecutor(study, job, dataset, split, workers, ray_address, ask_ahead, started, resources)
