"""Trials on long-lived Ray workers (``--workers N``, ``--ray-address``): :class:`RayExecutor`.

An executor of :mod:`agent.execution.workers`, kept in a module of its own: only a study that runs
on Ray imports it (a benchmark's trials run in its own process), which is why the benchmarks'
engine fingerprint leaves it out (:mod:`agent.bench.fingerprint`).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from agent.errors import TuneAgentError, WorkersLostError
from agent.execution import ray_start
from agent.execution.pruning import pruning_state
from agent.execution.ray_start import RayStart
from agent.execution.resources import TrialResources, fit_note, trial_slots
from agent.execution.trial import TrialOutcome, replay_logged
from agent.knowledge.records import TrialRecord
from agent.tuning.scratch import trial_scratch
from agent.tuning.study import Study

WORKER_RETRIES = 1
HEAD_CHECK_SECONDS = 5.0  # with nothing finished for this long, the Ray head is checked
HEAD_CHECK_TRIES = 3  # refused connections, a second apart, before the cluster counts as lost
WORKER_DIED = "worker died"
WAIT_REMINDER_SECONDS = 60.0  # while no trial fits the cluster, said again this often


class _Worker:
    """A :class:`~agent.execution.ray_start.TrialWorker` actor's handle, and whether it holds the
    study's job and data (sent with its first trial, kept once that trial came back)."""

    def __init__(self, handle: Any) -> None:
        self.handle, self.given = handle, False


def _missing_module(exc: BaseException) -> str | None:
    """The module a Ray worker could not import, when that is why it failed: the job's own failures
    are caught inside the trial (:func:`~agent.execution.trial.train_config`), so a missing module
    here is one the worker needs to unpickle the job or run tune-agent at all."""
    found = re.search(r"ModuleNotFoundError: No module named '([^']+)'", str(exc))
    return found.group(1) if found else None


class RayExecutor:
    """``capacity`` long-lived workers (:class:`~agent.execution.ray_start.TrialWorker` actors, made
    as Ray starts), each reserving ``resources`` (``--cpus-per-trial``, ``--gpus-per-trial``) and
    training one trial at a time; the job and data go to each worker once, with its first trial.
    ``address`` None starts a local Ray instance with ``capacity`` trials' CPUs (and the GPUs Ray
    finds) for this study and stops it at :meth:`close`. A worker that dies is replaced by a fresh
    one and its trial runs again, once."""

    def __init__(
        self,
        study: Study,
        job: Any,
        dataset: Any,
        split: Any,
        capacity: int,
        address: str | None = None,
        ask_ahead: int = 1,
        started: RayStart | None = None,  # workers.ASK_AHEAD
        resources: TrialResources | None = None,
        working_dir: str | None = None,
    ) -> None:
        ray = ray_start.import_ray()
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
            raise TuneAgentError(
                f"the local Ray instance has no room for a trial of {self.resources.describe()} "
                f"(Ray found {ray.cluster_resources().get('GPU', 0):g} GPUs here)"
            )
        note = fit_note(slots, capacity, self.resources, self.where)
        self.notes = [note] if note else []
        self.say: Callable[[str], None] = lambda line: None  # the command line's: a node that fits joined, ...
        self._slots, self._said_at = slots, time.monotonic()
        self._job, self._dataset, self._split = ray.put(job), ray.put(dataset), ray.put(split)
        self._idle: deque[_Worker] = deque(_Worker(h) for h in self._start.workers())  # workers with no trial
        # object ref -> (trial, attempts so far, the worker running it)
        self._running: dict[Any, tuple[TrialRecord, int, _Worker]] = {}
        self.pids: list[int] = []  # the process each finished trial trained in, in the order they ended
        self._gcs = ray.get_runtime_context().gcs_address  # the head, checked while trials run
        self._lost = False

    def submit(self, trial: TrialRecord, attempts: int = 0) -> None:
        pruning = pruning_state(self.study.settings, self.study.trials)  # the curves finished so far
        worker = self._idle.popleft() if self._idle else _Worker(self._start.new_worker())
        data = (None, None, None) if worker.given else (self._job, self._dataset, self._split)
        scratch = str(trial_scratch(self.study.kb, self.study.record.study_id, trial.number))
        ref = worker.handle.run.remote(*data, dict(trial.config), trial.number, self.study.settings, pruning, scratch)
        self._running[ref] = (trial, attempts, worker)

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
        whose worker died is submitted again (once, on a fresh worker) and does not count as ended."""
        ray = ray_start.import_ray()
        while self._running:
            ready, _ = ray.wait(list(self._running), num_returns=1, timeout=timeout)
            if not ready:
                return None
            (ref,) = ready
            trial, attempts, worker = self._running.pop(ref)
            start = time.perf_counter()
            try:
                outcome, records, pid = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the call raised: a bug outside the job's own code
                self._idle.append(worker)  # the worker itself lives on
                missing = _missing_module(exc)
                if missing is not None:  # every trial would fail the same way: the workers lack the code
                    raise self._cannot_load(missing) from exc
                return trial, TrialOutcome(
                    None, f"worker error: {str(exc).strip().splitlines()[-1][:400]}", time.perf_counter() - start
                )
            except (
                ray.exceptions.RayActorError,
                ray.exceptions.WorkerCrashedError,
                ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError,
                ray.exceptions.RaySystemError,
            ) as exc:
                missing = _missing_module(exc)  # a worker that could not even be made: tune-agent is missing
                if missing is not None:
                    raise self._cannot_load(missing) from exc
                self._discard(worker)
                if attempts < WORKER_RETRIES:
                    self.submit(trial, attempts + 1)  # on a fresh worker
                    continue
                return trial, TrialOutcome(
                    None, f"{WORKER_DIED} {attempts + 1} times ({type(exc).__name__})", retries=attempts
                )
            worker.given = True
            self._idle.append(worker)
            self.pids.append(pid)
            replay_logged(records, self.study.kb.trial_logger(self.study.record, trial))
            outcome.retries = attempts
            return trial, outcome
        return None

    def _cannot_load(self, missing: str) -> WorkersLostError:
        return WorkersLostError(
            f"the Ray workers cannot load the job: no module named {missing!r} on {self.where}; install it "
            "on every node, or ship the folder that holds it with --ray-working-dir DIR",
            remedy="with --ray-working-dir DIR, or once every node has the module",
        )

    def _discard(self, worker: _Worker) -> None:
        """A worker that died, or whose trial is abandoned: ended, and forgotten."""
        if not self._lost:
            try:
                ray_start.import_ray().kill(worker.handle, no_restart=True)
            except Exception:
                pass

    def _check_head(self) -> None:
        """Raises :class:`WorkersLostError` when the cluster's head (its GCS) refuses connections
        for a few seconds: Ray itself would end this process with a log line 60 s later."""
        import socket

        host, _, port = self._gcs.rpartition(":")
        for _attempt in range(HEAD_CHECK_TRIES):
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
        slots = trial_slots(ray_start.import_ray().nodes(), self.resources)
        now = time.monotonic()
        if slots != self._slots:
            self._slots, self._said_at = slots, now
            self.say(
                f"{self.where} now fits {slots} trial(s) of {self.per_trial} at once"
                + ("" if slots else ": the trials wait for a node that has")
            )
        elif slots == 0 and now - self._said_at >= WAIT_REMINDER_SECONDS:
            self._said_at = now
            self.say(
                f"still no node of {self.where} has {self.per_trial} for a trial; the trials wait "
                "(Ctrl-C stops the study and keeps it for `tune-agent resume`)"
            )

    def cancel(self) -> None:
        if self._lost:  # nothing left to cancel on
            self._running.clear()
            return
        for _, _, worker in list(self._running.values()):
            self._discard(worker)  # an actor's running call cannot be force-cancelled: its worker ends
        self._running.clear()

    def close(self) -> None:
        if self._running:
            self.cancel()
        while self._idle:  # a cluster's workers outlive this study unless ended (a local instance goes with it)
            self._discard(self._idle.popleft())
        self._start.stop(shutdown=not self._lost)


__all__ = ("RayExecutor", "WORKER_DIED", "WORKER_RETRIES")
