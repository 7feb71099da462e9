"""Commands of the store and the installation: history, doctor, ui, import (bootstrap: :mod:`.bootstrap`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from agent.cli.options import artifact_option, json_option, kb_for, talks, tracking_option
from agent.errors import TuneAgentError
from agent.execution.options import checked_folder, checked_resources


@click.command()
@tracking_option
@json_option
@talks("reading the store")
def history(tracking_uri: str | None, as_json: bool) -> None:
    """List studies and the datasets they ran on."""
    from agent.ops.history import history_rows, render_history

    kb = kb_for(tracking_uri, reads=True)
    click.echo(json.dumps(history_rows(kb), indent=2) if as_json else render_history(kb))


@click.command()
@tracking_option
@artifact_option
@click.option("--models-dir", default="models", show_default=True)
@click.option(
    "--ray-address",
    default=None,
    help="Also check the Ray cluster at this address: its nodes, CPUs and GPUs, and that each node can "
    "find tune-agent, torch and Lightning installed.",
)
@click.option("--job", default=None, help="With --ray-address: check that each node finds this job's module.")
@click.option(
    "--ray-working-dir",
    default=None,
    metavar="DIR",
    help="With --ray-address: ship DIR as `start` would, and look there.",
)
@click.option(
    "--cpus-per-trial",
    type=int,
    default=1,
    show_default=True,
    help="With --ray-address: count the trials that fit at once.",
)
@click.option(
    "--gpus-per-trial",
    type=float,
    default=0.0,
    show_default=True,
    help="With --ray-address: count the trials that fit at once.",
)
@json_option
@talks("checking the installation")
def doctor(
    tracking_uri: str | None,
    artifact_root: str | None,
    models_dir: str,
    ray_address: str | None,
    job: str | None,
    ray_working_dir: str | None,
    cpus_per_trial: int,
    gpus_per_trial: float,
    as_json: bool,
) -> None:
    """Check the store, the history, the meta-models, versions and threads (and a Ray cluster); exit 1
    if something is broken."""
    from agent.ops.doctor import healthy, render, run_doctor

    resources = checked_resources(cpus_per_trial, gpus_per_trial)
    for option, value in (("--job", job), ("--ray-working-dir", ray_working_dir)):
        if value is not None and ray_address is None:
            raise click.BadParameter("checks the Ray cluster's nodes: give --ray-address too", param_hint=option)
    if ray_working_dir is not None:
        ray_working_dir = checked_folder(ray_working_dir, "--ray-working-dir")
    checks = run_doctor(tracking_uri, artifact_root, Path(models_dir), ray_address, job, ray_working_dir, resources)
    click.echo(render(checks, as_json))
    if not healthy(checks):
        sys.exit(1)


def _job_links(kb: Any, base: str, echo: Any = click.echo) -> None:
    """One line per job with studies: the link that opens its experiment's runs in the training
    view with tune-agent's saved view (written now for an experiment that has none)."""
    latest = {s.job: s for s in kb.list_studies()}  # oldest first: the last of each job wins
    for job in sorted(latest):
        space = kb.load_study_space(latest[job])
        link = kb.runs_view(job, space, base) if space is not None else None
        if link is None:
            echo(f"  studies of job {job}: experiment tune-agent/{job} (open it from the Experiments list)")
        else:
            echo(f"  studies of job {job}, each trial's objective and hyperparameters: {link}")


@click.command()
@click.option("--port", type=int, default=5000, show_default=True)
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to serve on (0.0.0.0: the whole network)."
)
@tracking_option
@artifact_option
def ui(port: int, host: str, tracking_uri: str | None, artifact_root: str | None) -> None:
    """Serve the MLflow UI for the store (127.0.0.1 unless --host says otherwise)."""
    from agent.knowledge import DEFAULT_ARTIFACT_ROOT, check_reachable, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    check_reachable(uri)
    if uri.startswith(("http://", "https://")):  # a server already serves the UI: only the links
        click.echo(f"{uri} is already a tracking server: open it in a browser")
        _job_links(kb_for(tracking_uri, artifact_root), uri)
        return
    root = artifact_root or DEFAULT_ARTIFACT_ROOT
    args = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        uri,
        "--default-artifact-root",
        root,
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        "2",  # one person's browser: two start in half the time of MLflow's default four
    ]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    from agent.knowledge import store_exists
    from agent.ops.team_server import serve_ui
    from agent.tuning.heartbeat import Heartbeat, phase

    with Heartbeat(click.echo) as beat:
        beat(f"MLflow UI on http://{shown}:{port}: starting it")

        def links() -> None:  # the studies' experiments, one per job: where to start browsing
            phase(beat, "reading the studies' jobs for their links")
            _job_links(kb_for(tracking_uri, artifact_root), f"http://{shown}:{port}", beat)

        # read while the server starts (its own process): a store made by the server is not read
        code = serve_ui(args, f"http://{shown}:{port}", beat, meanwhile=links if store_exists(uri) else None)
    if code:
        raise TuneAgentError(f"mlflow ui exited with code {code}")


@click.command("import")
@click.argument("table", type=click.Path(path_type=str))
@click.option("--space", "space_file", required=True, help="Search space JSON (as in a study's space.json).")
@click.option("--job-name", required=True, help="Name the imported evaluations go under (experiment tune-agent/NAME).")
@click.option("--metric", default="value", show_default=True)
@click.option("--mode", type=click.Choice(["min", "max"]), default="max", show_default=True)
@tracking_option
@artifact_option
def import_cmd(
    table: str,
    space_file: str,
    job_name: str,
    metric: str,
    mode: str,
    tracking_uri: str | None,
    artifact_root: str | None,
) -> None:
    """Import a table of external evaluations (task, hyperparameters, value) as finished studies
    (tasks whose study the store holds are skipped: an interrupted import runs again)."""
    from agent.knowledge.importer import import_table, load_space, read_table

    space = load_space(Path(space_file))
    frame = read_table(Path(table))
    kb = kb_for(tracking_uri, artifact_root)
    summary = import_table(kb, frame, space, job_name, metric, mode, progress=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(summary))


COMMANDS = [history, doctor, ui, import_cmd]
