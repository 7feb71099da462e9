"""Finding jobs by name: registered jobs, YAHPO scenarios and user jobs given as ``package.module:attr``.

Job names live in :data:`agent.registry.JOBS` (the built-ins, then other packages' entry points
in the group ``tune_agent.jobs``). :func:`load_job` resolves a spec to an object meeting the job
protocol (checked by :func:`agent.jobs.base.validate_job`) or raises a one-line
:class:`~agent.errors.JobError` saying what is wrong.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from agent.errors import JobError, TuneAgentError
from agent.jobs.base import Job, validate_job
from agent.project.spec import is_project_spec
from agent.registry import JOBS

YAHPO_PREFIX = "yahpo:"  # a YAHPO Gym surrogate scenario: agent.jobs.yahpo


def job_names() -> tuple[str, ...]:
    """Every registered job's name: the built-ins, then other packages' entry points."""
    return JOBS.names()


def check_job_spec(spec: str) -> None:
    """The cheap part of :func:`load_job`: a spec that cannot name a job is refused before any import."""
    spec = str(spec).strip()
    if spec.startswith(YAHPO_PREFIX) or spec in JOBS or is_project_spec(spec):
        return
    if ":" not in spec:
        raise JobError(
            f"unknown job {spec!r}; registered jobs: {', '.join(JOBS.names())}, yahpo:SCENARIO "
            "(or give package.module:attr)"
        )
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise JobError(f"job spec {spec!r} must look like package.module:attr")


def load_job(spec: str) -> Job:
    """Returns the job named by ``spec``: ``"cnn"``, ``"mlp"`` or ``"package.module:attr"``.

    ``attr`` may be a job instance, a job class (instantiated without arguments) or a zero-argument
    factory returning a job.
    """
    spec = str(spec).strip()
    if spec.startswith(YAHPO_PREFIX):
        from agent.jobs.yahpo import YahpoJob

        return validate_job(YahpoJob.from_spec(spec), spec)
    if is_project_spec(spec):  # a user's Lightning project, as `start --model/--data` or `--cli` made it
        return load_project_job(spec)
    check_job_spec(spec)
    if spec in JOBS:
        try:
            target = JOBS.load(spec)
        except TuneAgentError as exc:
            raise JobError(str(exc)) from None
        return validate_job(_instantiate(target, spec), spec)
    module_name, _, attr = spec.partition(":")
    target = _import_attr(module_name, attr, spec)
    return validate_job(_instantiate(target, spec), spec)


def load_project_job(spec: str) -> Any:
    """The job of a stored project spec (:mod:`agent.project.spec`)."""
    from agent.project.spec import ProjectSpec

    parsed = ProjectSpec.parse(spec)
    if parsed.is_cli:
        from agent.project.cli_job import CliProjectJob

        return CliProjectJob(parsed)
    from agent.project.job import ProjectJob

    return ProjectJob(parsed)


def _import_attr(module_name: str, attr: str, spec: str) -> Any:
    import os
    import sys

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:  # `--job myjob:job` finds ./myjob.py, as `python -m` would
        sys.path.append(here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise JobError(
            f"cannot import module {module_name!r} for job {spec!r}: {exc} (looked on the Python path and "
            f"in {here}; PYTHONPATH=DIR adds a folder)"
        ) from None
    except Exception as exc:  # a user's module failing at import time
        raise JobError(
            f"importing module {module_name!r} for job {spec!r} failed: {type(exc).__name__}: {_one_line(exc)}"
        ) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise JobError(f"module {module_name!r} has no attribute {attr!r} (job {spec!r})")
        target = getattr(target, part)
    return target


def _instantiate(target: Any, spec: str) -> Any:
    """Instances pass through; classes and zero-argument factories are called."""
    looks_like_job = not isinstance(target, type) and hasattr(target, "space")
    if looks_like_job or not callable(target):
        return target
    factory: Callable[[], Any] = target
    try:
        return factory()
    except Exception as exc:
        raise JobError(f"creating job {spec!r} failed: {type(exc).__name__}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."
