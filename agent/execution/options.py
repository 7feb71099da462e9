"""Execution options checked in one place, for the command line and the Python API alike: how many
trials run at once, where (this process, a local Ray instance, a cluster), with what each trains
on, and for how long. A bad value raises :class:`~agent.errors.OptionError` naming the option,
before anything loads or is written."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.errors import OptionError
from agent.execution.resources import ExecutionSettings, TrialResources, local_gpu_problem, problem

# Trials a Ray study asks beyond its workers and holds in this process: when a trial ends, the next
# one starts on its worker at once, and the finished one is told and the next asked while it runs.
# Without it a worker waits out the driver's BO step (0.3-0.65 s with running points on the
# 16-core machine, against 2.3 s trials in `bench parallel`). The cost: a trial asked ahead sees
# the trial that ends just before it starts as running, not as its result (as a batch one larger).
ASK_AHEAD = 1


def ray_address_problem(address: str, timeout: float = 5.0) -> str | None:
    """Why ``--ray-address`` cannot be a Ray cluster's address (malformed, nothing answering, a Ray
    Client address without ``ray[client]``), or None. Checked in seconds, where ``ray.init`` would
    retry for minutes; ``auto`` and ``local`` are Ray's to resolve."""
    import importlib.util
    import socket

    if address in ("auto", "local"):
        return None
    rest = address[len("ray://") :] if address.startswith("ray://") else address
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"expected HOST:PORT (the head's GCS port, e.g. 10.0.0.5:6379), ray://HOST:PORT or auto, got {address!r}"
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        return (
            f"{address} is a Ray Client address, which needs pip install 'ray[client]'; "
            "or give the head's own address, HOST:6379"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        return (
            f"cannot reach the Ray cluster at {address} ({exc.strerror or type(exc).__name__}): is its head running "
            f"(`ray start --head --port={port}` there)? Leave --ray-address out to run the trials on a local instance"
        )
    return None


def checked_resources(
    cpus_per_trial: int,
    gpus_per_trial: float,
    torch_threads: int | None = None,
    on_ray: bool = True,
    here: bool = False,
) -> TrialResources:
    """The per-trial options as :class:`~agent.execution.resources.TrialResources`, or :class:`OptionError`;
    ``here``: the trials run on this machine, which then needs a GPU for ``--gpus-per-trial``."""
    resources = TrialResources(cpus_per_trial, gpus_per_trial, torch_threads)
    wrong = problem(resources, on_ray)
    if wrong is None and here:
        missing = local_gpu_problem(gpus_per_trial)
        wrong = None if missing is None else ("--gpus-per-trial", missing)
    if wrong is not None:
        raise OptionError(wrong[1], param_hint=wrong[0])
    return resources


def checked_folder(path: str, option: str) -> str:
    if not Path(path).is_dir():
        raise OptionError(f"{path} is not a folder", param_hint=option)
    return str(Path(path).resolve())


def check_execution(
    workers: int,
    timeout: float | None = None,
    ask_ahead: int = 0,
    torch_threads: int | None = None,
    ray_address: str | None = None,
    cpus_per_trial: int = 1,
    gpus_per_trial: float = 0.0,
    ray_working_dir: str | None = None,
) -> ExecutionSettings:
    """The execution options checked (:class:`OptionError` before anything loads or is written), as
    one :class:`~agent.execution.resources.ExecutionSettings`; an absolute ``--ray-working-dir``
    also goes first on this process's import path, so that ``--job`` finds its module there too."""
    if workers < 1:
        raise OptionError(f"must be at least 1, got {workers}", param_hint="--workers")
    on_ray = workers > 1 or ray_address is not None
    if ray_working_dir is not None:
        if not on_ray:
            raise OptionError(
                "ships a folder to Ray workers (--workers above 1 or --ray-address); a trial in "
                "this process imports from this machine",
                param_hint="--ray-working-dir",
            )
        ray_working_dir = checked_folder(ray_working_dir, "--ray-working-dir")
    if ask_ahead < 0:
        raise OptionError(f"must be 0 or more, got {ask_ahead}", param_hint="--ask-ahead")
    if timeout is not None and not timeout > 0:
        raise OptionError(f"must be positive seconds, got {timeout}", param_hint="--timeout")
    if ray_address is not None:  # refused in seconds, where ray.init would retry for minutes
        unreachable = ray_address_problem(ray_address)
        if unreachable is not None:
            raise OptionError(unreachable, param_hint="--ray-address")
    # last: a GPU wanted on this machine is looked for with torch, seconds to import
    resources = checked_resources(cpus_per_trial, gpus_per_trial, torch_threads, on_ray, here=ray_address is None)
    if ray_working_dir is not None:
        sys.path.insert(0, ray_working_dir)
    return ExecutionSettings(workers, ray_address, timeout, ask_ahead, resources, ray_working_dir)
