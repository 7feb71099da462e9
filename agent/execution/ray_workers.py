"""Trials as Ray Core tasks (``--workers N``, ``--ray-address``): :class:`RayExecutor`.

An executor of :mod:`agent.execution.workers`, kept in a module of its own: only a study that runs
on Ray imports it (a benchmark's trials run in its own process), which is why the benchmarks'
engine fingerprint leaves it out (:mod:`agent.bench.fingerprint`).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Callable

from agent.errors import TuneAgentError, WorkersLostError
from agent.knowledge.base import TrialRecord
from agent.execution.pruning import pruning_state
from agent.execution.ray_start import RayStart, import_ray
from agent.execution.resources import TrialResources, fit_note, trial_slots
from agent.execution.trial import TrialOutcome, recording_logger, replay_logged, train_config
from agent.tuning.study import Study

WORKER_RETRIES = 1
HEAD_CHECK_SECONDS = 5.0  # with nothing finished for this long, the Ray head is checked
HEAD_CHECK_TRIES = 3  # refused connections, a second apart, before the cluster counts as lost
WORKER_DIED = "worker died"
WAIT_REMINDER_SECONDS = 60.0  # while no trial fits the cluster, said again this often


def _remote_trial(job: Any, config: dict[str, Any], number: int, settings: Any, dataset: Any,
                  split: Any, pruning: Any = None, threads: int = 1,
                  accelerator: str = "cpu") -> tuple[TrialOutcome, list[Any], int]:
    """The body of a Ray task: one training run on ``threads`` torch threads (the CPUs the task
    reserved) and ``accelerator``, and what it logged."""
    import torch

    from agent.execution.trial import quiet_lightning

    torch.set_num_threads(threads)
    quiet_lightning()
    logger = recording_logger()
    outcome = train_config(job, config, number, settings, dataset, split, logger, pruning, accelerator=accelerator)
    return outcome, logger.records, os.getpid()


def _missing_module(exc: BaseException) -> str | None:
    """The module a Ray task could not import, when that is why it failed: the job's own failures
    are caught inside the task (:func:`~agent.execution.trial.train_config`), so a missing module
    here is one the worker needs to unpickle the job or run tune-agent at all."""
    found = re.search(r"ModuleNotFoundError: No module named '([^']+)'", str(exc))
    return found.group(1) if found else None


class RayExecutor:
    """Ray Core tasks (see the module doc), each reserving ``resources`` (``--cpus-per-trial``,
    ``--gpus-per-trial``). ``address`` None starts a local Ray instance with ``capacity`` trials'
    CPUs (and the GPUs Ray finds) for this study and stops it at :meth:`close`."""

    def __init__(self, study: Study, job: Any, dataset: Any, split: Any, capacity: int,
                 address: str | None = None, ask_ahead: int = 1, started: RayStart | None = None,  # workers.ASK_AHEAD
                 resources: TrialResources | None = None, working_dir: str | None = None) -> None:
        ray = import_ray()
        self.study, self.capacity, self.ask_ahead = study, capacity, ask_ahead
        self.resources = resources or TrialResources()
        self.where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        self.per_trial = self.resources.describe()
        self._start = started or RayStart(capacity, address, self.resources, working_dir)
        self._start.wait()
        # a task asking for more than any node has waits in Ray's queue without a word: say so
        slots = trial_slots(ray.nodes(), self.resources)
        if slots == 0 and self._start.own and address is None:
            self._start.stop()
            raise TuneAgentError(f"the local Ray instance has no room for a trial of {self.resources.describe()} "
                                 f"(Ray found {ray.cluster_resources().get('GPU', 0):g} GPUs here)")
        note = fit_note(slots, capacity, self.resources, self.where)
        self.notes = [note] if note else []
        self.say: Callable[[str], None] = lambda line: None  # the command line's: a node that fits joined, ...
        self._slots, self._said_at = slots, time.monotonic()
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
            self._check_fit()  # and, when the workers did not all fit, has a node that fits joined?

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
                missing = _missing_module(exc)
                if missing is not None:  # every trial would fail the same way: the workers lack the code
                    raise WorkersLostError(
                        f"the Ray workers cannot load the job: no module named {missing!r} on {self.where}; install it "
                        "on every node, or ship the folder that holds it with --ray-working-dir DIR",
                        remedy="with --ray-working-dir DIR, or once every node has the module")
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

    def _check_fit(self) -> None:
        """When fewer trials than the workers fit the cluster (``self.notes`` said so), counts them
        again: a node that joined or left is said, and while none fits, a reminder once a minute."""
        if self._slots >= self.capacity:
            return
        slots = trial_slots(import_ray().nodes(), self.resources)
        now = time.monotonic()
        if slots != self._slots:
            self._slots, self._said_at = slots, now
            self.say(f"{self.where} now fits {slots} trial(s) of {self.per_trial} at once"
                     + ("" if slots else ": the trials wait for a node that has"))
        elif slots == 0 and now - self._said_at >= WAIT_REMINDER_SECONDS:
            self._said_at = now
            self.say(f"still no node of {self.where} has {self.per_trial} for a trial; the trials wait "
                     "(Ctrl-C stops the study and keeps it for `tune-agent resume`)")

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


__all__ = ("RayExecutor", "WORKER_DIED", "WORKER_RETRIES")
