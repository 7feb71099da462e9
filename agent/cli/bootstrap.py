"""``tune-agent bootstrap``: build a knowledge base. Four commands, one per way: ``starter`` imports a
starter history, ``train`` runs a job over many real datasets, ``export`` writes a store's bootstrap
studies to a starter file, ``clean`` rewrites a starter file without the studies its content rules
leave out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from agent.cli.options import STARTER_FILE, artifact_option, kb_for, tracking_option


@click.group()
def bootstrap() -> None:
    """Build a knowledge base: import the starter history, or train a job over many real datasets."""


def _new_store(tracking_uri: str | None, artifact_root: str | None) -> Any:
    """A knowledge base built into a new place: its folder is made, and said."""
    from agent.knowledge import make_store_folder

    made = make_store_folder(tracking_uri)
    if made is not None:
        click.echo(f"tracking store folder {made} did not exist: made it")
    return kb_for(tracking_uri, artifact_root)


@bootstrap.command()
@click.argument("file", default=STARTER_FILE)
@click.option("--job", default="mlp", show_default=True, help="Job whose studies the starter file holds.")
@click.option(
    "--models-dir",
    default="models",
    show_default=True,
    help="Where the history's source models are stored (models/source_models.jsonl).",
)
@tracking_option
@artifact_option
def starter(file: str, job: str, models_dir: str, tracking_uri: str | None, artifact_root: str | None) -> None:
    """Import a starter history FILE (a file, or a packaged one by name; the packaged mlp one by
    default) into the store and build its source models; run again, it skips the studies the store
    holds finished."""
    from agent.pipeline import knowledge_base

    kb = _new_store(tracking_uri, artifact_root)
    click.echo(json.dumps(knowledge_base.import_history(kb, file, models_dir, job, echo=click.echo)))


@bootstrap.command()
@click.option("--job", default="mlp", show_default=True, help="Job run on every dataset.")
@click.option(
    "--sources",
    default="digits,mnist-5k,mnist1d,breast-cancer,wine,iris,rtables",
    show_default=True,
    help=(
        "Comma-separated: built-in sources (five derived datasets each) and 'rtables' (the R-package tables "
        "of agent/data/rtables.csv)."
    ),
)
@click.option("--dataset", "datasets", multiple=True, help="Explicit dataset specs (repeatable) instead of --sources.")
@click.option(
    "--configs", type=int, default=64, show_default=True, help="Size of the shared Sobol set of configurations."
)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option(
    "--max-rows",
    type=int,
    default=1000,
    show_default=True,
    help="R tables larger than this are a stratified sample of this many rows.",
)
@click.option(
    "--workers",
    type=int,
    default=2,
    show_default=True,
    help="Studies run side by side (processes, one torch thread each).",
)
@click.option("--limit", type=int, default=None, help="Only the first N datasets.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the shared Sobol set.")
@tracking_option
@artifact_option
def train(
    job: str,
    sources: str,
    datasets: tuple[str, ...],
    configs: int,
    epochs: int,
    max_rows: int,
    workers: int,
    limit: int | None,
    seed: int,
    tracking_uri: str | None,
    artifact_root: str | None,
) -> None:
    """Run JOB over many real datasets on one shared set of configurations, each a finished study."""
    from agent.pipeline import knowledge_base

    run = {
        "configs": configs,
        "epochs": epochs,
        "workers": workers,
        "max_rows": max_rows,
        "seed": seed,
        "tracking_uri": tracking_uri,
        "artifact_root": artifact_root,
    }

    def store() -> Any:
        return _new_store(tracking_uri, artifact_root)

    click.echo(json.dumps(knowledge_base.bootstrap_history(job, datasets, sources, limit, run, store, echo=click.echo)))


@bootstrap.command()
@click.argument("file")
@click.option("--job", default="mlp", show_default=True, help="Job whose finished bootstrap studies are written.")
@tracking_option
@artifact_option
def export(file: str, job: str, tracking_uri: str | None, artifact_root: str | None) -> None:
    """Write the store's finished bootstrap studies of --job to the starter file FILE."""
    from agent.pipeline import knowledge_base

    click.echo(json.dumps(knowledge_base.export_history(kb_for(tracking_uri, artifact_root), file, job)))


@bootstrap.command()
@click.argument("file")
def clean(file: str) -> None:
    """Rewrite the starter file FILE without the studies the content rules leave out (a held-out table's
    content, a second copy of a dataset, an R table no longer selected), saying each."""
    from agent.pipeline.bootstrap import clean_starter

    result = clean_starter(Path(file), Path(file), echo=click.echo)
    click.echo(json.dumps({"studies": result["studies"], "left_out": len(result["dropped"]), "bytes": result["bytes"]}))


COMMANDS = [bootstrap]
