"""Jobs: what the tuner trains. The job protocol, the built-in jobs and how to load a user's job.

- :class:`Job` (``base``): the protocol a job implements.
- :func:`load_job` / :data:`BUILTIN_JOBS` (``registry``): ``"cnn"``, ``"mlp"`` or
  ``"package.module:attr"``.
- :class:`ArrayDataModule` (``datamodule``): the in-memory DataModule the built-ins use.
- :class:`ClassifierModule` (``classifier``): shared steps logging ``train_loss``, ``train_acc``,
  ``val_loss`` and ``val_acc`` per epoch.
- ``cnn`` (paper 003), ``mlp`` (LCBench funnel) and ``examples`` (a user-job template).
"""

from __future__ import annotations

from agent.jobs.base import Job, validate_job
from agent.jobs.classifier import ClassifierModule
from agent.jobs.cnn import CNNJob
from agent.jobs.datamodule import ArrayDataModule
from agent.jobs.mlp import MLPJob
from agent.jobs.registry import BUILTIN_JOBS, load_job

__all__ = [
    "ArrayDataModule",
    "BUILTIN_JOBS",
    "CNNJob",
    "ClassifierModule",
    "Job",
    "MLPJob",
    "load_job",
    "validate_job",
]
