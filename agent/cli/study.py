"""Commands of one study: start, create, resume, ask, tell, best, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from agent.cli.execution_options import execution_options
from agent.cli.options import (
    artifact_option,
    kb_for,
    launched,
    lazy_kb,
    preparing,
    study_options,
    talks,
    tracking_option,
)
from agent.cli.project_options import project_request_options
from agent.cli.short_help import ShortHelp
from agent.config import StudyRequest
from agent.errors import TuneAgentError
from agent.execution.options import check_execution

# what most studies set, with the one line --help shows; the rest are named in one line (--help-all shows
# every option with its full help)
COMMON = {
    "config": "YAML of option values; with --cli, your LightningCLI configs.",
    "model": "Your LightningModule class.",
    "data": "Your LightningDataModule class.",
    "cli": "Your LightningCLI script, run for each trial.",
    "space": "YAML of the arguments to tune (and fixed ones).",
    "trainer": "A Trainer argument for every trial (repeatable).",
    "job": "A built-in job (cnn, mlp, mlp-arch) or PKG.MOD:ATTR.",
    "dataset": "A built-in dataset or a file (.csv, .npz, images).",
    "trials": "Trials in the study's budget [20].",
    "epochs": "Epochs per trial [5].",
    "metric": "NAME or NAME:min|max; repeat it for a Pareto front.",
    "study-name": "Name of the study [DATASET-JOB-XXXX].",
    "seed": "Seed of the study [0].",
    "warm-start": "auto, learned, handcrafted or none [auto].",
    "surrogate": "gp, portfolio_gp, neighbour_gp, rgpe, tnp or auto.",
    "pruner": "Stop trials early: none, median or asha [none].",
    "workers": "Trials run at once [1].",
    "timeout": "Seconds after which no new trial starts.",
}


@click.command(cls=ShortHelp, common=COMMON)
@study_options
@execution_options
def start(
    workers: int,
    ray_address: str | None,
    timeout: float | None,
    ask_ahead: int,
    torch_threads: int | None,
    cpus_per_trial: int,
    gpus_per_trial: float,
    ray_working_dir: str | None,
    **kwargs: Any,
) -> None:
    """Run a tuning study of your Lightning project (--model/--data or --cli, with --space) or of a
    built-in JOB on DATASET, and log every trial to MLflow."""
    execution = check_execution(
        workers, timeout, ask_ahead, torch_threads, ray_address, cpus_per_trial, gpus_per_trial, ray_working_dir
    )
    req = StudyRequest.from_options(**project_request_options(kwargs))
    from agent.execution.launch import abandoning, run_prepared, start_workers_early

    launch = launched()
    early = start_workers_early(execution, req.job, fork=launch.fork)
    with (
        abandoning(early),
        preparing(f"preparing a study of {_what(req)}: loading libraries, data and history", log=True),
    ):
        from agent.execution.progress import ProgressReporter
        from agent.tuning.heartbeat import Heartbeat
        from agent.tuning.service import prepare_study

        with Heartbeat(click.echo) as beat:
            study, job, dataset, split = prepare_study(req, echo=beat, kb=lazy_kb(req))
    reporter = ProgressReporter(whole_process=True, launched_by=launch.client)
    run_prepared(study, job, dataset, split, reporter, execution, early, warn=_warn)


def _what(req: StudyRequest) -> str:
    from agent.project.spec import is_project_spec

    return "your Lightning project" if is_project_spec(req.job) else f"{req.job} on {req.dataset}"


def _warn(line: str) -> None:
    click.echo(line, err=True)


@click.command(cls=ShortHelp, common=COMMON)
@study_options
@talks("preparing the study")
def create(**kwargs: Any) -> None:
    """Create a study without running it, for `tune-agent ask` / `tell` from your own loop."""
    from agent.tuning.service import prepare_study

    req = StudyRequest.from_options(**project_request_options(kwargs))
    study, *_ = prepare_study(req, echo=click.echo, kb=lazy_kb(req))
    click.echo(f"created study {study.name} ({study.settings.trials} trials)")


@click.command()
@click.argument("study_name")
@click.option("--job", default=None, help="Refuse to resume unless the study used this job.")
@click.option("--dataset", default=None, help="Refuse to resume unless the study used this dataset.")
@click.option(
    "--join",
    is_flag=True,
    help="When another process runs the study, run beside it as one more worker within the same budget.",
)
@tracking_option
@artifact_option
@execution_options
def resume(
    study_name: str,
    job: str | None,
    dataset: str | None,
    join: bool,
    tracking_uri: str | None,
    artifact_root: str | None,
    workers: int,
    ray_address: str | None,
    timeout: float | None,
    ask_ahead: int,
    torch_threads: int | None,
    cpus_per_trial: int,
    gpus_per_trial: float,
    ray_working_dir: str | None,
) -> None:
    """Continue an interrupted study from what MLflow holds."""
    execution = check_execution(
        workers, timeout, ask_ahead, torch_threads, ray_address, cpus_per_trial, gpus_per_trial, ray_working_dir
    )
    from agent.execution.launch import abandoning, close_if_complete, reopen, run_prepared, start_workers_early

    launch = launched()
    early = start_workers_early(execution, job, fork=launch.fork)
    with abandoning(early):
        with preparing(f"opening study {study_name}: loading libraries, data and trials", log=True):
            from agent.execution.progress import ProgressReporter
            from agent.tuning.heartbeat import Heartbeat

            with Heartbeat(click.echo) as beat:
                stored = reopen(study_name, kb_for(tracking_uri, artifact_root, reads=True), job, dataset, join, beat)
        reporter = ProgressReporter(whole_process=True, launched_by=launch.client)
        if close_if_complete(stored, reporter.line):
            if early is not None:
                early.abandon()
            return
    run_prepared(
        stored.study, stored.job, stored.data, stored.split, reporter, execution, early, warn=_warn, lease=stored.lease
    )


@click.command()
@click.argument("study_name")
@tracking_option
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: ask always prints JSON.")
@talks("asking the study's sampler")
def ask(study_name: str, tracking_uri: str | None, as_json: bool) -> None:
    """Open the next trial of a study and print it as JSON: {"trial": n, "config": {...}}.

    Trials are numbered from 1 everywhere a person reads them (console, MLflow run names, ask,
    tell, best)."""
    from agent.tuning.service import open_study

    study, _ = open_study(study_name, kb=kb_for(tracking_uri, reads=True))
    trial = study.ask()
    click.echo(json.dumps({"trial": trial.number + 1, "origin": trial.origin, "config": dict(trial.config)}))


@click.command()
@click.argument("study_name")
@click.argument("trial", type=int)
@click.option("--value", type=float, default=None, help="The objective the trial reached.")
@click.option("--failed", default=None, help="Mark the trial failed with this reason.")
@tracking_option
@talks("telling the study")
def tell(study_name: str, trial: int, value: float | None, failed: str | None, tracking_uri: str | None) -> None:
    """Close trial TRIAL (numbered from 1, as `ask` printed it) with its objective value (or --failed REASON)."""
    from agent.tuning.service import open_study

    if (value is None) == (failed is None):
        raise TuneAgentError("give exactly one of --value or --failed")
    if trial < 1:
        raise TuneAgentError(f"trials are numbered from 1, got {trial}")
    study, _ = open_study(study_name, kb=kb_for(tracking_uri, reads=True), with_sampler=False)
    record = study.tell(study.trial_by_number(trial - 1), value=value, failed=failed)
    study.settle()
    click.echo(f"trial {trial}: {record.state}")


@click.command()
@click.argument("study_name")
@tracking_option
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: best always prints JSON.")
@click.option(
    "--register",
    "register_as",
    default=None,
    metavar="NAME",
    help=(
        "Register the best trial's kept model (or --trial N's) in MLflow's model registry as NAME, without "
        "training; a trial that kept none is trained once more first."
    ),
)
@click.option(
    "--trial",
    "number",
    type=int,
    default=None,
    help="A trial by number (from 1) instead of the best; --register of a study of several metrics needs one.",
)
@talks("reading the study")
def best(study_name: str, tracking_uri: str | None, as_json: bool, register_as: str | None, number: int | None) -> None:
    """Print the best configuration of a study as JSON, or the Pareto front of a study of several
    metrics (and register a trial's model with --register)."""
    from agent.tuning.objectives import best_summary
    from agent.tuning.service import load_study_data, open_study, read_study

    if register_as is not None and not register_as.strip():
        raise TuneAgentError("--register needs a model name")
    kb = kb_for(tracking_uri, reads=register_as is None)
    study, job = (
        open_study(study_name, kb=kb, with_sampler=False) if register_as else (read_study(study_name, kb), None)
    )
    if register_as is not None and number is None and study.settings.multi:
        raise TuneAgentError(
            f"study {study_name} has several metrics: --register needs --trial N, one of its front's trials "
            f"(tune-agent best {study_name} lists them)"
        )
    out = best_summary(study, number)
    if register_as is not None:
        from agent.ops.models import register_best

        def load() -> tuple[Any, Any, Any]:  # only for a trial that kept no model: it trains again
            return (job, *load_study_data(study, job))

        out["registered"] = register_best(study, load, register_as.strip(), number)
    click.echo(json.dumps(out, indent=2))


@click.command()
@click.argument("study_name")
@click.option("--out", default=None, help="Folder for report.html and its figures [default: report-STUDY].")
@click.option("--rebuild", is_flag=True, help="Build and log the report again even when the stored one is current.")
@tracking_option
@talks("writing the report")
def report(study_name: str, out: str | None, rebuild: bool, tracking_uri: str | None) -> None:
    """Write a study's report (best so far vs cold start, importance, neighbours, knowledge-base map,
    failures) as HTML, and log it with its figures on the study run (report/)."""
    from agent.tuning.report_store import report_files
    from agent.tuning.service import read_study

    study = read_study(study_name, kb_for(tracking_uri, reads=True))
    page, stored = report_files(
        study.kb, study.record, study.space, Path(out or f"report-{study_name}"), rebuild=rebuild
    )
    click.echo(
        f"report of {study_name}: {page} "
        + (
            "(the one on the study run: nothing it shows has changed since)"
            if stored
            else "(and report/report.html on the study run)"
        )
    )


COMMANDS = [start, create, resume, ask, tell, best, report]
