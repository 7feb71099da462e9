"""A user's Lightning project as a study's inputs: its job (a LightningModule with its DataModule,
or a LightningCLI script with its configs) loaded and its metrics checked, and a bounded sample of
its DataModule's training loader as the dataset the warm start measures. The project names its
dataset itself, and a LightningCLI job keeps what its probe found, in the study's settings
(:func:`project_settings`), so ``resume`` need not run it again.
"""

from __future__ import annotations

from typing import Any

from agent.config import StudyRequest
from agent.project.sample import SAMPLE_ROWS
from agent.tuning.heartbeat import phase
from agent.tuning.objectives import check_metrics


def project_inputs(req: StudyRequest, echo: Any, sample_size: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    """``(job, dataset, data sample, dataset summary)`` of a user's project: its classes checked
    against the space, then a sample of up to ``sample_size`` rows of its DataModule's training
    loader as the dataset the warm start measures."""
    from agent.project.spec import ProjectSpec

    spec = ProjectSpec.parse(req.job)
    if spec.is_cli:
        echo(f"loading your project: {spec.script} with {', '.join(spec.configs) or 'no --config'}")
    else:
        echo(f"loading your project: {spec.model}" + (f" and {spec.data}" if spec.data else "") + " (and Lightning)")
    phase(echo, "loading tune-agent's data and job libraries")
    from agent.data import describe_dataset, sample_dataset
    from agent.jobs import load_job

    phase(echo, "running your script up to its first batch" if spec.is_cli else "importing Lightning and your classes")
    if spec.is_cli and not spec.model:  # its first probe says what it found
        from agent.project.cli_job import CliProjectJob

        job: Any = CliProjectJob(spec, say=echo)
    else:
        job = load_job(req.job)
    check_metrics(req, job)
    echo(
        f"data sample: drawing up to {SAMPLE_ROWS} rows of {job.dataset_source()}'s training loader for the warm start"
    )
    phase(echo, f"sampling {job.dataset_source()}'s training loader")
    data = job.dataset(say=echo)
    phase(echo, "measuring the sample")
    return job, data, sample_dataset(data, sample_size, seed=req.seed), describe_dataset(data)


def project_settings(job: Any, data: Any) -> dict[str, Any]:
    """The settings a project job names itself: its dataset (the DataModule's name) and, for a
    LightningCLI job, what its probe found; empty for any other job."""
    own: dict[str, Any] = {"dataset": data.name} if getattr(job, "owns_data", False) else {}  # named by the project
    spec_text = getattr(job, "spec_text", None)
    if callable(spec_text):  # a LightningCLI job stores what its probe found, so resume need not run it again
        own["job"] = spec_text()
    return own
