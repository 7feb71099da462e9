"""Where a study's trials run: in this process, or N at a time on Ray (``--workers N``).

:func:`agent.execution.runner.run_study` keeps ``capacity`` trials running; each new one is asked
while the others are pending, so the sampler spreads them (``X_pending``). An executor only runs
what it is given and hands back finished trials one at a time, in the order they end:

- :class:`InlineExecutor`: one trial at a time in this process, logging live to MLflow.
- :class:`QueuedExecutor`: a benchmark job (a surrogate lookup, instant) with ``capacity`` trials
  in flight that finish in the order they started: N equally fast workers, simulated exactly, so
  the benchmark measures batch BO through the same loop.
- :class:`~agent.execution.ray_workers.RayExecutor`: one long-lived Ray Core actor per trial slot,
  on a local Ray instance started for the study (``--workers N``) or on a cluster
  (``--ray-address``). Ray Core rather than Ray Tune's trial runner: the study already owns
  scheduling, state and resumption (MLflow is the record), so a worker only trains what it is
  given; Tune would bring a second scheduler and a second record of every trial. Each worker keeps
  torch, Lightning, the job and the data (and a GPU share's CUDA context) from one trial to the
  next. Workers train with a recording logger and the driver writes what they logged to the
  trial's run, so only this process talks to the store (a worker may be on a machine that cannot
  reach an embedded sqlite file). A worker that dies (SIGKILL, out of memory, its node lost) is
  replaced and its trial retried once; a second death is a failed trial, never a lost one. Each
  worker reserves ``--cpus-per-trial`` CPUs and ``--gpus-per-trial`` of a GPU, as Ray Tune's
  ``resources_per_trial`` (:mod:`agent.execution.resources`).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Protocol

from agent.execution.options import ASK_AHEAD
from agent.execution.resources import ExecutionSettings, TrialResources
from agent.execution.trial import TrialOutcome, run_trial
from agent.knowledge.records import TrialRecord
from agent.tuning.study import Study

if TYPE_CHECKING:
    from agent.execution.ray_start import RayStart


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

    def __init__(
        self, study: Study, job: Any, dataset: Any, split: Any, resources: TrialResources | None = None
    ) -> None:
        self.study, self.job, self.dataset, self.split = study, job, dataset, split
        self.resources = resources or TrialResources()
        self.notes: list[str] = []  # said once the study starts
        self._queue: deque[TrialRecord] = deque()
        self.on_epoch: Any = None  # set by the study loop: the reporter hears each epoch
        from agent.jobs.base import BenchmarkJob

        # loading a built-in job does not import Lightning: the study imports it here, so trial 1 starts
        # with it loaded (a LightningCLI job's trials run its script in a process of their own)
        if not isinstance(job, BenchmarkJob) and not getattr(job, "runs_script", False):
            import lightning.pytorch  # noqa: F401

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


def make_executor(
    study: Study,
    job: Any,
    dataset: Any,
    split: Any,
    execution: ExecutionSettings | None = None,
    started: RayStart | None = None,
) -> TrialExecutor:
    """The executor for ``execution`` (:class:`~agent.execution.resources.ExecutionSettings`; default:
    one trial at a time here): inline for one local worker, queued for a benchmark job, Ray
    otherwise (``ask_ahead``: see :data:`agent.execution.options.ASK_AHEAD`; ``started``: Ray's start begun by
    :func:`start_workers_early`, stopped here when the study does not run on Ray)."""
    from agent.jobs.base import BenchmarkJob

    execution = execution if execution is not None else ExecutionSettings(ask_ahead=ASK_AHEAD)
    workers, ray_address, ask_ahead = execution.workers, execution.ray_address, execution.ask_ahead
    resources, working_dir = execution.resources, execution.working_dir
    on_ray = not isinstance(job, BenchmarkJob) and (workers > 1 or ray_address is not None)
    process = None
    if started is not None:  # a benchmark starts nothing early, so never imports this module
        from agent.execution.trial_process import TrialProcess

        process = started if isinstance(started, TrialProcess) else None
    if (
        started is not None
        and not on_ray
        and (
            process is None
            or isinstance(job, BenchmarkJob)
            or getattr(job, "runs_script", False)  # a LightningCLI job: its script is the trial's process
            or not study.kb.trial_writers
        )
    ):
        started.abandon()
        process = None
    if isinstance(job, BenchmarkJob):
        return (
            QueuedExecutor(study, job, dataset, split, workers, ask_ahead)
            if workers > 1
            else InlineExecutor(study, job, dataset, split)
        )
    if not on_ray and process is not None:
        from agent.execution.trial_process import ProcessExecutor

        return ProcessExecutor(
            study,
            job,
            dataset,
            split,
            resources,
            process,
            lambda: InlineExecutor(study, job, dataset, split, resources),
        )
    if not on_ray:
        return InlineExecutor(study, job, dataset, split, resources)
    from agent.execution.ray_workers import RayExecutor  # Ray only where a study runs on it

    return RayExecutor(study, job, dataset, split, workers, ray_address, ask_ahead, started, resources, working_dir)
