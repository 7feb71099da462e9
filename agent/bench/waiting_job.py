"""The waiting job of `tune-agent-bench parallel --wait`: a Lightning job whose every training
epoch also waits off the cores, as a trial bound by an accelerator or a remote read does.

The bench's studies name it by its spec (:data:`WAITING_SPEC`), in this process or in the
``tune-agent start`` processes it runs; the job it wraps and the seconds it waits travel in the
environment (:func:`waiting_env`), so Ray's workers and a fresh process build the same job.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

WAIT_JOB_ENV, WAIT_SECONDS_ENV = "TUNE_AGENT_WAIT_JOB", "TUNE_AGENT_WAIT_SECONDS"
WAITING_SPEC = "agent.bench.waiting_job:waiting_job"


class WaitingJob:
    """``inner`` (a Lightning job) whose every training epoch also sleeps ``wait`` seconds.

    Real training still runs; the sleep stands for the part of a trial that holds no core of this
    machine (a GPU step, a remote data read). Pickled whole to Ray's workers, as any job is."""

    def __init__(self, inner: Any, wait: float) -> None:
        self.inner, self.wait = inner, float(wait)
        self.name = f"{inner.name}+wait{self.wait:g}"
        self.space, self.metric, self.mode = inner.space, inner.metric, inner.mode

    def check_dataset(self, dataset: Any) -> None:
        self.inner.check_dataset(dataset)

    def build(self, config: dict, dataset: Any, train_idx: Any, val_idx: Any, seed: int) -> tuple[Any, Any]:
        from functools import partial

        module, data = self.inner.build(config, dataset, train_idx, val_idx, seed)
        # Lightning adds what a module's configure_callbacks returns to the Trainer's callbacks
        module.configure_callbacks = partial(_epoch_wait, self.wait)
        return module, data


def _epoch_wait(seconds: float) -> list[Any]:
    import lightning.pytorch as pl

    class EpochWait(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            time.sleep(seconds)

    return [EpochWait()]


def waiting_job() -> WaitingJob:
    """The job spec ``agent.bench.waiting_job:waiting_job``: the job named by ``TUNE_AGENT_WAIT_JOB``,
    each epoch waiting ``TUNE_AGENT_WAIT_SECONDS`` (set by the bench, for its own process or for
    the ``tune-agent start`` processes it runs)."""
    from agent.errors import JobError
    from agent.jobs import load_job

    if WAIT_JOB_ENV not in os.environ:
        raise JobError(f"{WAITING_SPEC} is the bench's: it needs {WAIT_JOB_ENV} and {WAIT_SECONDS_ENV}")
    return WaitingJob(load_job(os.environ[WAIT_JOB_ENV]), float(os.environ.get(WAIT_SECONDS_ENV, "0")))


@contextlib.contextmanager
def waiting_env(job: str, wait: float) -> Iterator[None]:
    """With a ``wait`` above 0, :func:`waiting_job`'s variables for ``job``, then as they were."""
    before = {k: os.environ.get(k) for k in (WAIT_JOB_ENV, WAIT_SECONDS_ENV)}
    if wait > 0:
        os.environ[WAIT_JOB_ENV], os.environ[WAIT_SECONDS_ENV] = job, repr(wait)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
