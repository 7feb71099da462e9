"""Filling a knowledge base, the services behind ``tune-agent bootstrap``: train one shared set of
configurations over many datasets (:func:`bootstrap_history`), import a starter history with its
source models (:func:`import_history`), or export one (:func:`export_history`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.knowledge.base import KnowledgeBase


def bootstrap_history(
    job: str,
    datasets: tuple[str, ...],
    sources: str,
    limit: int | None,
    run: dict[str, Any],
    store: Callable[[], KnowledgeBase],
    echo: Any = print,
) -> dict[str, Any]:
    """Runs (or resumes) ``job`` over ``datasets`` (explicit specs) or the datasets of ``sources``
    (comma-separated), at most ``limit``; ``run`` holds ``configs``, ``epochs``, ``workers``,
    ``max_rows``, ``seed``, ``tracking_uri`` and ``artifact_root``. ``store`` opens the store once
    the options passed their checks; it is made whole before the workers open it."""
    from agent.config import check_positive
    from agent.pipeline.bootstrap import run_bootstrap, source_specs

    for option in ("configs", "epochs", "workers", "max_rows"):
        check_positive("--" + option.replace("_", "-"), run[option])
    specs = list(datasets) or source_specs([s.strip() for s in sources.split(",") if s.strip()], run["max_rows"])
    if limit is not None:
        check_positive("--limit", limit)
        specs = specs[:limit]
    store().open()
    echo(f"bootstrap: {len(specs)} datasets x {run['configs']} configurations of {job}, {run['workers']} worker(s)")
    return run_bootstrap(
        job,
        specs,
        run["configs"],
        run["epochs"],
        run["seed"],
        run["tracking_uri"],
        run["artifact_root"],
        echo=echo,
        check_content=bool(datasets),  # --dataset specs; the default sources are clean
        workers=run["workers"],
    )


def import_history(kb: KnowledgeBase, starter: str, models_dir: str, job: str, echo: Any = print) -> dict[str, Any]:
    """Imports the starter history ``starter`` (a file, or a packaged one by name), then brings the
    stored source models of ``job`` up to date; returns what was imported."""
    from agent.knowledge.starter import import_starter
    from agent.tuning.heartbeat import Heartbeat
    from agent.tuning.source_models import update_for_job

    with Heartbeat(echo) as beat:  # no silent phase: listing 2,250 studies alone takes seconds
        beat.phase("reading the starter file and the studies the store holds")
        imported = import_starter(kb, starter, progress=beat)
        beat(
            f"imported {imported['imported']} studies in {imported['seconds']} s"
            + (f" ({imported['per_second']} per second)" if imported["per_second"] else "")
            + (f"; {imported['skipped']} the store holds skipped" if imported["skipped"] else "")
        )
        beat.phase("reading the history and building its source models")
        built = update_for_job(kb, models_dir, job, progress=beat)
        beat(
            f"source models: {built['sources']} sources, {built['fitted']} GP(s) fitted in {built['seconds']} s "
            f"-> {built['file']}"
            + (f" (not written: {built['not_written']})" if "not_written" in built else "")
            + (f"; published as version {built['published']}" if "published" in built else "")
        )
    imported["stages"] = {"import_s": imported["seconds"], "source_models_s": built["seconds"]}
    return imported


def export_history(kb: KnowledgeBase, out: str, job: str, echo: Any = print) -> dict[str, Any]:
    """Writes the store's finished bootstrap studies of ``job`` to the starter file ``out``."""
    from agent.jobs import load_job
    from agent.knowledge.starter import export_starter

    return export_starter(kb, Path(out), job, load_job(job).space.to_dict(), progress=echo)
