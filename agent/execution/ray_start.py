"""Ray's start, begun on a background thread before anything else of ``tune-agent start``.

Kept apart from :mod:`agent.execution.workers` so that the command line can begin it before it
imports the study's libraries: this module imports nothing heavy (Ray itself is imported on the
thread).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from agent.errors import TuneAgentError
from agent.execution.resources import TrialResources


class TrialWorker:
    """A long-lived Ray worker (an actor) that trains a study's trials one after another.

    Created when Ray is up, before the study is prepared, so that its imports (torch, Lightning,
    the trial code) and, for a GPU share, its CUDA context overlap the study's preparation; it then
    keeps them, and the job and data it is given with its first trial, for every trial after. Ray
    Core tasks gave none of this back: a task that reserves a GPU runs on a fresh worker process
    each time (Ray's default for GPU tasks, ``max_calls=1``), so every GPU trial paid the imports and
    a new CUDA context again, and every task deserialised the job and data again. An actor holds
    its reservation (``--cpus-per-trial``, ``--gpus-per-trial``) for its life, which also keeps
    the GPU a share was given fixed for the context it made."""

    def __init__(self, threads: int = 1, accelerator: str = "cpu") -> None:
        import lightning.pytorch  # noqa: F401
        import torch

        from agent.execution.trial import quiet_lightning

        torch.set_num_threads(threads)
        quiet_lightning()
        if accelerator != "cpu" and torch.cuda.is_available():
            torch.zeros(1, device="cuda")  # the CUDA context now, not in the first trial
        self.threads, self.accelerator = threads, accelerator
        self._given: tuple[Any, Any, Any] | None = None

    def pid(self) -> int:
        return os.getpid()

    def run(
        self,
        job: Any,
        dataset: Any,
        split: Any,
        config: dict[str, Any],
        number: int,
        settings: Any,
        pruning: Any = None,
        scratch: str | None = None,
    ) -> tuple[Any, list[Any], int]:
        """One training run of ``config`` and what it logged. ``job``, ``dataset`` and ``split``
        come with this worker's first trial (Ray resolves them from its object store once) and are
        None after: the worker keeps them."""
        import torch

        from agent.execution.trial import recording_logger, train_config

        if job is not None:
            self._given = (job, dataset, split)
        if self._given is None:
            raise RuntimeError("this worker was given no job")  # the executor always sends it first
        job, dataset, split = self._given
        torch.set_num_threads(self.threads)
        logger = recording_logger()
        try:
            outcome = train_config(
                job,
                config,
                number,
                settings,
                dataset,
                split,
                logger,
                pruning,
                accelerator=self.accelerator,
                scratch=Path(scratch) if scratch else None,  # the driver's folder: a shared filesystem on a cluster
            )
        finally:
            if self.accelerator != "cpu" and torch.cuda.is_available():
                torch.cuda.empty_cache()  # what this trial cached goes back to the trials sharing the GPU
        return outcome, logger.records, os.getpid()


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    sys.exit(signum)


def _not_the_sigterm_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("SIGTERM handler is not set")


class RayStart:
    """Ray's start on a background thread, begun before the study is prepared (``tune-agent start``
    and ``resume`` begin it first thing), so that it overlaps this process's imports and the
    study's preparation instead of following them. ``ray.init`` takes seconds of waiting (the
    node registers, its API server comes up: 8 s on the 16-core machine); once it is up, one
    :class:`TrialWorker` per trial slot is created, shaped as the trials, and imports torch,
    Lightning and the trial code while the study is prepared (:meth:`workers` hands them over).

    The thread lives until :meth:`stop`: a local instance's processes are started to die with
    their parent, and on Linux the parent is the thread that started them, so a thread that ended
    would take the instance with it. :meth:`wait` blocks until Ray is up; :meth:`stop` ends an
    instance this process started; :meth:`abandon` does so without waiting, when no study follows."""

    def __init__(
        self,
        capacity: int,
        address: str | None = None,
        resources: TrialResources | None = None,
        working_dir: str | None = None,
    ) -> None:
        self.capacity, self.address = capacity, address
        self.resources = resources or TrialResources()
        self.working_dir = working_dir  # shipped to every worker (Ray's runtime_env working_dir)
        self.own = False  # whether this process started the instance (and stops it)
        self._error: BaseException | None = None
        self._abandoned = False
        self._lock = threading.Lock()
        self._up, self._release = threading.Event(), threading.Event()
        self._workers: list[Any] = []
        self._actor: Any = None  # TrialWorker as a Ray actor class, with the trials' resources
        if threading.current_thread() is threading.main_thread():
            # what ray.init sets on the main thread, and cannot from another (it warns instead):
            # SIGTERM ends the study as Ctrl-C does, its running trials closed as killed
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        logging.getLogger("ray._private.worker").addFilter(_not_the_sigterm_warning)
        self._thread = threading.Thread(target=self._start, name="tune-agent-ray-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        abandoned = False
        try:
            ray = import_ray()
            if not ray.is_initialized():
                # a local instance turns token authentication on and says so at WARNING on every start
                logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
                logging.getLogger("ray._private.runtime_env.packaging").setLevel(logging.WARNING)  # "pushing ..."
                env = {"runtime_env": {"working_dir": self.working_dir}} if self.working_dir else {}
                if self.address is None:
                    # the trials' CPUs; the GPUs are those Ray finds on this machine
                    ray.init(
                        num_cpus=self.capacity * self.resources.cpus,
                        include_dashboard=False,
                        log_to_driver=False,
                        configure_logging=False,
                        **env,
                    )
                else:
                    ray.init(address=self.address, log_to_driver=False, configure_logging=False, **env)
                self.own = True
            if not self._abandoned:
                self._workers = [self.new_worker() for _ in range(self.capacity)]
        except BaseException as exc:
            self._error = exc
        finally:
            with self._lock:  # abandon() either sees this start up, or this start sees it abandoned
                self._up.set()
                abandoned = self._abandoned
        if abandoned:
            self.stop()
        self._release.wait()

    def wait(self) -> bool:
        """Blocks until Ray is up; whether this process started it. One-line
        :class:`~agent.errors.TuneAgentError` when it could not be started or reached."""
        self._up.wait()
        exc = self._error
        if exc is not None:
            self._release.set()
            if isinstance(exc, TuneAgentError):
                raise exc
            text = str(exc).strip()
            raise TuneAgentError(
                f"cannot reach the Ray cluster at {self.address or 'a new local instance'}: "
                f"{text.splitlines()[0] if text else type(exc).__name__}"
            ) from None
        return self.own

    def new_worker(self) -> Any:
        """A fresh :class:`TrialWorker` actor with the trials' resources (Ray is up). Ray does not
        restart it: a worker that dies is replaced by the executor, which retries its trial once."""
        if self._actor is None:
            ray = import_ray()
            self._actor = ray.remote(max_restarts=0, max_task_retries=0, **self.resources.ray_options())(TrialWorker)
        return self._actor.remote(self.resources.cpus, self.resources.accelerator)

    def workers(self) -> list[Any]:
        """The workers created at the start (one per trial slot), handed over once."""
        handed, self._workers = self._workers, []
        return handed

    def stop(self, shutdown: bool = True) -> None:
        """Ends what this start began: the instance, when this process started it (unless
        ``shutdown`` is False: a cluster found gone), and the thread."""
        with self._lock:
            if shutdown and self._up.is_set() and self.own and self._error is None and not self._release.is_set():
                import_ray().shutdown()
            self._release.set()

    def abandon(self) -> None:
        """No study follows (its preparation failed, or it runs in this process after all): an
        instance this process started is stopped, now or the moment its start ends, without
        holding up the caller (a refusal of bad input is not delayed by Ray's start)."""
        with self._lock:
            self._abandoned = True
            up = self._up.is_set()
        if up:
            self.stop()


def start_workers_early(
    workers: int,
    ray_address: str | None,
    job_spec: str | None = None,
    resources: TrialResources | None = None,
    working_dir: str | None = None,
) -> RayStart | None:
    """A :class:`RayStart` when the study will run on Ray (``--workers`` above 1 or a
    ``--ray-address``, and not a benchmark job, whose trials are lookups run in this process)."""
    from agent.jobs.registry import YAHPO_PREFIX

    if (workers <= 1 and ray_address is None) or (job_spec or "").strip().startswith(YAHPO_PREFIX):
        return None
    return RayStart(workers, ray_address, resources, working_dir)


def import_ray() -> Any:
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency; a broken install says so plainly
        raise TuneAgentError("--workers needs Ray: pip install 'ray[default]'") from None
    return ray


__all__ = ("RayStart", "TrialWorker", "import_ray", "start_workers_early")
