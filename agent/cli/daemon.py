"""``tune-agent daemon``: the warm process (:mod:`agent.warm.process`) started, seen and stopped."""

from __future__ import annotations

import json
import time

import click

from agent.errors import TuneAgentError


def _folder():
    from agent.warm import process as warm_process

    try:
        return warm_process.folder()
    except warm_process.Unusable as exc:
        raise TuneAgentError(
            f"the warm process's folder cannot be used: {exc}",
            hint=f"set {warm_process.DIR_ENV} to a folder only you can open",
        ) from None


@click.group()
def daemon() -> None:
    """The warm process that keeps tune-agent's libraries imported between commands.

    A command started from the same environment as a running one is run by it (a fork of it) and
    begins in a fraction of a second instead of seconds of imports; the first command of an
    environment starts one at its end. It ends after 15 minutes without a command
    (TUNE_AGENT_DAEMON_IDLE seconds); TUNE_AGENT_DAEMON=0 never uses or starts one."""


@daemon.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per warm process.")
def status(as_json: bool) -> None:
    """Say which warm processes run, and whether this environment's is one of them."""
    from agent.warm import process as warm_process

    where = _folder()
    mine = warm_process.socket_path(where, warm_process.key())
    rows = []
    for path in warm_process.all_sockets(where):
        answer = warm_process.ask(path, {"control": "status"}, timeout=2.0)
        if answer is not None:
            rows.append({**answer, "this_environment": path == mine})
    if as_json:
        for row in rows:
            click.echo(json.dumps(row))
        return
    if not rows:
        gap = warm_process.platform_gap()
        why = (
            f"; this platform lacks {gap}: none is started"
            if gap is not None
            else ""
            if warm_process.enabled()
            else "; TUNE_AGENT_DAEMON=0: none is started"
        )
        click.echo(f"no warm process runs (folder {where}){why}")
        return
    for row in rows:
        which = "this environment's" if row["this_environment"] else "another environment's"
        click.echo(
            f"pid {row['pid']}: {which}, up {time.time() - row['since']:.0f} s, {row['served']} command(s) "
            f"run, {row['running']} running now, {row['rss_mb']:.0f} MB resident"
        )


@daemon.command("start")
@click.option(
    "--wait",
    "wait_s",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds to wait until it serves (0: do not wait).",
)
def start(wait_s: float) -> None:
    """Start this environment's warm process now (it starts by itself after a first command)."""
    from agent.warm import process as warm_process

    where = _folder()
    path = warm_process.socket_path(where, warm_process.key())
    if warm_process.ask(path, {"control": "status"}, timeout=2.0) is not None:
        click.echo(f"this environment's warm process already runs ({path})")
        return
    pid = warm_process.start_in_background()  # None: one is starting already (its imports)
    if wait_s > 0:
        click.echo(
            f"starting this environment's warm process: its imports take about 10 s on two cores "
            f"(waiting up to {wait_s:g} s)",
            err=True,
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        answer = warm_process.ask(path, {"control": "status"}, timeout=2.0)
        if answer is not None:
            click.echo(f"warm process {answer['pid']} serves {path}")
            return
        time.sleep(0.2)
    if wait_s > 0:
        raise TuneAgentError(
            f"the warm process did not serve within {wait_s:g} s",
            hint=f"its log: {where / (warm_process.key() + '.log')}",
        )
    click.echo(
        f"warm process {pid if pid is not None else '(started earlier)'} started; it serves once its imports are done"
    )


@daemon.command("stop")
def stop() -> None:
    """Stop every warm process of this user (a running command finishes first)."""
    from agent.warm import process as warm_process

    where = _folder()
    stopped = [
        path
        for path in warm_process.all_sockets(where)
        if warm_process.ask(path, {"control": "stop"}, timeout=2.0) is not None
    ]
    click.echo(f"stopped {len(stopped)} warm process(es)")


COMMANDS = [daemon]
