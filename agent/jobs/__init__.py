"""Jobs: what the tuner trains. The job protocol, the built-in jobs and how to load a user's job.

- :class:`Job` (``base``): the protocol a job implements.
- :func:`load_job` / :func:`job_names` (``registry``): ``"cnn"``, ``"mlp"``, a job another
  package registers (entry points ``tune_agent.jobs``) or ``"package.module:attr"``.
- :class:`ArrayDataModule` (``datamodule``): the in-memory DataModule the built-ins use.
- :class:`ClassifierModule` (``classifier``): shared steps logging ``train_loss``, ``train_acc``,
  ``val_loss`` and ``val_acc`` per epoch.
- ``cnn`` (paper 003), ``mlp`` (LCBench funnel), ``mlp_arch`` (paper 002's conditional space) and
  ``examples`` (a user-job template). A built-in job's module holds its space and job class;
  its network and LightningModule live in ``<job>_net``, imported by ``build`` (the first trial),
  so loading a job costs no Lightning import.
"""

from __future__ import annotations

from typing import Any

from agent.jobs.base import Job, validate_job
from agent.jobs.registry import job_names, load_job

# Lightning takes seconds to import: the Lightning parts load on first use, so a refused job or
# dataset, and a surrogate-benchmark job, never pay for it.
_LAZY = {
    "ArrayDataModule": "agent.jobs.datamodule",
    "ClassifierModule": "agent.jobs.classifier",
    "CNNJob": "agent.jobs.cnn",
    "MLPJob": "agent.jobs.mlp",
    "MLPArchJob": "agent.jobs.mlp_arch",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agent.jobs' has no attribute {name!r}")


__all__ = ["ArrayDataModule", "CNNJob", "ClassifierModule", "Job", "MLPJob", "job_names", "load_job", "validate_job"]
