"""What one trial trains with: CPUs and threads, and a GPU or a share of one.

``--cpus-per-trial`` and ``--gpus-per-trial`` are Ray Tune's ``resources_per_trial`` for a
tune-agent study: on Ray each trial is a task that reserves ``cpus`` CPUs (and trains on as many
torch threads) and ``gpus`` GPUs (a fraction lets trials share one, as Ray schedules fractional
GPUs); in this process (``--workers 1``) a trial trains on the GPU when ``gpus`` is above 0. A
trial never trains on more than one device: Lightning's multi-device strategies start processes
of their own, which a Ray task should not. Without ``--gpus-per-trial`` trials train on the CPU,
as Ray Tune's trials do by default, whatever the machine has.

This module imports nothing heavy: the command line checks its options before any library loads
(except torch, for ``--gpus-per-trial`` in this process, to see whether there is a GPU at all).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

EPS = 1e-6  # Ray keeps resources in units of 1/10000: 1 / 0.1 must count as 10 trials, not 9


@dataclass(frozen=True)
class ExecutionSettings:
    """How a study's trials run, checked once at the CLI edge and passed down whole (``start``,
    ``resume``, ``bench parallel`` -> :func:`agent.execution.workers.make_executor` -> the executor).

    Attributes:
        workers: trials at once (``--workers``); above 1, or with ``ray_address``, on Ray.
        ray_address: a Ray cluster (``--ray-address``); None: a local Ray instance when ``workers`` > 1.
        timeout: seconds of this ``start``/``resume`` after which no trial starts (``--timeout``).
        ask_ahead: trials asked beyond the workers (``--ask-ahead``).
        resources: what each trial trains with (CPUs and torch threads, a GPU share).
        working_dir: a folder shipped to Ray's workers (``--ray-working-dir``).
    """

    workers: int = 1
    ray_address: str | None = None
    timeout: float | None = None
    ask_ahead: int = 1
    resources: TrialResources | None = None
    working_dir: str | None = None

    @property
    def parallel(self) -> bool:
        """Whether trials run on Ray workers (a surrogate-benchmark job aside)."""
        return self.workers > 1 or self.ray_address is not None


@dataclass(frozen=True)
class TrialResources:
    cpus: int = 1  # on Ray: CPUs a trial's task reserves, and its torch threads
    gpus: float = 0.0  # above 0: the trial trains on a GPU (on Ray, this share of one)
    torch_threads: int | None = None  # a trial trained in this process; None: torch's own count

    @property
    def accelerator(self) -> str:
        return "gpu" if self.gpus > 0 else "cpu"

    def ray_options(self) -> dict[str, Any]:
        return {"num_cpus": self.cpus, "num_gpus": self.gpus}

    def describe(self) -> str:
        cpus = f"{self.cpus} CPU{'s' if self.cpus != 1 else ''}"
        return f"{cpus} and {self.gpus:g} GPU" if self.gpus > 0 else cpus


def problem(resources: TrialResources, on_ray: bool) -> tuple[str, str] | None:
    """``(option, what is wrong)`` for settings no trial could run with, else None. Checks only
    the numbers and where they apply; whether a GPU exists is :func:`local_gpu_problem`'s."""
    if resources.cpus < 1:
        return "--cpus-per-trial", f"must be at least 1, got {resources.cpus}"
    if not 0 <= resources.gpus <= 1 or math.isnan(resources.gpus):
        return "--gpus-per-trial", (
            f"must be between 0 and 1, got {resources.gpus:g}: a trial trains on one device "
            "(a fraction shares a GPU between trials on Ray)"
        )
    if resources.torch_threads is not None and resources.torch_threads < 1:
        return "--torch-threads", f"must be at least 1, got {resources.torch_threads}"
    if on_ray and resources.torch_threads is not None:
        return "--torch-threads", (
            "applies to trials trained in this process (--workers 1); a Ray worker trains on --cpus-per-trial threads"
        )
    if not on_ray and resources.cpus != 1:
        return "--cpus-per-trial", (
            "applies to Ray workers (--workers above 1 or --ray-address); a trial trained in "
            "this process takes --torch-threads"
        )
    return None


def local_gpu_problem(gpus: float) -> str | None:
    """Why a trial on this machine cannot have ``gpus`` (a GPU torch can use), or None."""
    if gpus <= 0:
        return None
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return None
    build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    return (
        f"this machine has no GPU torch can use (torch {torch.__version__}, {build}); "
        "leave --gpus-per-trial out to train on the CPU, or run the trials on a cluster with --ray-address"
    )


def trial_slots(nodes: Iterable[Mapping[str, Any]], resources: TrialResources) -> int:
    """Trials that fit at once on the alive ``nodes`` (as ``ray.nodes()`` lists them): a trial's
    CPUs and GPU share must come from one node."""
    total = 0
    for node in nodes:
        if not node.get("Alive", True):
            continue
        have = node.get("Resources", {})
        fits = math.floor(have.get("CPU", 0.0) / resources.cpus + EPS)
        if resources.gpus > 0:
            fits = min(fits, math.floor(have.get("GPU", 0.0) / resources.gpus + EPS))
        total += max(fits, 0)
    return total


def fit_note(slots: int, capacity: int, resources: TrialResources, where: str) -> str | None:
    """What the user is told when ``capacity`` trials at once do not fit ``where``: fewer run at
    once, or none until a node that fits joins (an autoscaling cluster adds one on demand)."""
    if slots >= capacity:
        return None
    need = f"{resources.describe()} a trial"
    if slots == 0:
        return (
            f"no node of {where} has {need}: the trials wait until one joins (an autoscaling cluster adds one); "
            "Ctrl-C stops the study and keeps it for `tune-agent resume`"
        )
    return f"{where} fits {slots} trial(s) of {need} at once: {capacity - slots} of the {capacity} workers wait"


__all__ = ("TrialResources", "fit_note", "local_gpu_problem", "problem", "trial_slots")
