"""Commands of the team tracking server: ``server`` runs it, ``server user add|list|remove`` manages its
users."""

from __future__ import annotations

import json
from pathlib import Path

import click

from agent.cli.options import json_option
from agent.errors import TuneAgentError


@click.group(invoke_without_command=True)
@click.option(
    "--data-dir",
    default=None,
    help="Where the server keeps PostgreSQL's cluster, the artifacts and logs (made on first start).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address MLflow listens on (0.0.0.0 to serve the team's network).",
)
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--pg-port", type=int, default=5433, show_default=True, help="PostgreSQL's port (127.0.0.1 only).")
@click.option("--auth", is_flag=True, help="MLflow's basic-auth app: users and per-experiment permissions.")
@click.option(
    "--stop",
    is_flag=True,
    help="Stop the PostgreSQL and MLflow of --data-dir that are still running (a server "
    "left by a killed process) and exit.",
)
@click.pass_context
def server(
    ctx: click.Context, data_dir: str | None, host: str, port: int, pg_port: int, auth: bool, stop: bool
) -> None:
    """Run a team tracking server: mlflow server on PostgreSQL, artifacts proxied; Ctrl-C stops both.
    `tune-agent server user add|list|remove` manages its users (with --auth)."""
    if ctx.invoked_subcommand is not None:
        return
    if not data_dir:
        raise TuneAgentError("server needs --data-dir DIR: where PostgreSQL's cluster, the artifacts and logs live")
    from agent.ops.team_server import TeamServer

    team = TeamServer(Path(data_dir).resolve(), host, port, pg_port, auth)
    try:
        team.data_dir.mkdir(parents=True, exist_ok=True)
        probe = team.data_dir / ".write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise TuneAgentError(f"cannot use --data-dir {data_dir}: {exc.strerror or type(exc).__name__}") from None
    if stop:
        team.stop(say=click.echo)
        return
    from agent.tuning.heartbeat import Heartbeat

    with Heartbeat(click.echo) as beat:
        code = team.serve(say=beat)
    if code:
        raise TuneAgentError(f"mlflow server exited with code {code}; see {Path(data_dir) / 'logs' / 'mlflow.log'}")


@server.group()
def user() -> None:
    """The team server's users (made by its admin): add, list, remove."""


_server_url = click.option(
    "--tracking-uri", default="http://127.0.0.1:5000", show_default=True, help="The team server's URL."
)
_admin_from = click.option(
    "--data-dir",
    "admin_dir",
    default=None,
    help="The server's folder, to read the admin's password from [default: MLFLOW_TRACKING_USERNAME/PASSWORD].",
)


@user.command("add")
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(["read", "edit"]),
    default="read",
    show_default=True,
    help="read: reads every study, runs their own; edit: may also change everyone's studies.",
)
@click.option(
    "--password", default=None, help="Their password (12 characters or more) [default: a random one, printed]."
)
@_server_url
@_admin_from
def user_add(name: str, role: str, password: str | None, tracking_uri: str, admin_dir: str | None) -> None:
    """Add a teammate; prints the password once when it is made here."""
    from agent.ops.team_users import add_user

    made = add_user(tracking_uri, name, role, password, admin_dir)
    click.echo(f"user {name} added ({role}); their studies publish to the team's meta-models")
    if password is None:
        click.echo(f"password: {made}  (shown once: give it to {name} for MLFLOW_TRACKING_PASSWORD)")


@user.command("list")
@_server_url
@_admin_from
@json_option
def user_list(tracking_uri: str, admin_dir: str | None, as_json: bool) -> None:
    """The server's users."""
    from agent.ops.team_users import list_users

    users = list_users(tracking_uri, admin_dir)
    if as_json:
        click.echo(json.dumps(users, indent=2, default=str))
        return
    for item in users:
        click.echo(f"{item.get('username')}{'  (admin)' if item.get('is_admin') else ''}")


@user.command("remove")
@click.argument("name")
@_server_url
@_admin_from
def user_remove(name: str, tracking_uri: str, admin_dir: str | None) -> None:
    """Remove a teammate (their studies stay)."""
    from agent.ops.team_users import remove_user

    remove_user(tracking_uri, name, admin_dir)
    click.echo(f"user {name} removed")


COMMANDS = [server]
