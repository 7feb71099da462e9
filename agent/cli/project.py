"""``tune-agent space --from PKG.MOD:Class``: a starter space file from a class's ``__init__``."""

from __future__ import annotations

import click


@click.command()
@click.option("--from", "source", required=True, metavar="PKG.MOD:CLASS", help="Your LightningModule or DataModule.")
def space(source: str) -> None:
    """Print a starter space file for your class: a range around each numeric default, the choices
    of a Literal or a bool, and the arguments it cannot guess as comments. Edit it, then
    `tune-agent start --model ... --data ... --space space.yaml`."""
    from agent.project.job import starter_file

    click.echo(starter_file(source), nl=False)


COMMANDS = [space]
