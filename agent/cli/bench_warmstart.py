"""Benchmarks of the warm start: end to end on held-out tables (warmstart), its cost as the history
grows (scale, neighbours), the benchmark's source histories (history) and the learned meta-features'
training data (metafeature-data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from agent.cli.options import artifact_option, kb_for, tracking_option, write_json
from agent.errors import TuneAgentError


@click.command("warmstart")
@click.option("--job", "job_name", default="mlp", show_default=True)
@click.option("--targets", type=int, default=20, show_default=True, help="Held-out R-package tables (one per package).")
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--trials", type=int, default=10, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True)
@click.option(
    "--methods",
    default=",".join(["cold", "handcrafted", "handcrafted+prior_mean", "portfolio", "rgpe", "default"]),
    show_default=True,
)
@click.option(
    "--out",
    default=".",
    show_default=True,
    help="Writes OUT/metrics/warmstart_e2e.json; journal in OUT/data/bench-runs/.",
)
@click.option(
    "--params",
    "params_file",
    default="params.yaml",
    show_default=True,
    help="Pipeline settings for the per-fold meta-models (meta_features, transfer, distances); "
    "the defaults when the default file is absent.",
)
@tracking_option
def bench_warmstart(
    job_name: str,
    targets: int,
    seeds: int,
    trials: int,
    epochs: int,
    workers: int,
    methods: str,
    out: str,
    params_file: str,
    tracking_uri: str | None,
) -> None:
    """End to end, leave-one-source-out: real studies on held-out tables with the bootstrap as history."""
    from agent.bench.warmstart_e2e import METHODS, E2EConfig, run_e2e
    from agent.config import check_positive
    from agent.pipeline.stages import load_params

    for option, value in (
        ("--targets", targets),
        ("--seeds", seeds),
        ("--trials", trials),
        ("--epochs", epochs),
        ("--workers", workers),
    ):
        check_positive(option, value)
    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or "cold" not in chosen:
        raise TuneAgentError(f"--methods must include cold and name only {', '.join(METHODS)}; got {methods!r}")
    config = E2EConfig(job_name, targets, seeds, trials, epochs, workers, chosen)
    journal = Path(out) / "data" / "bench-runs" / f"warmstart_e2e-{job_name}-{trials}x{epochs}.jsonl"
    if Path(params_file).is_file():
        params = load_params(Path(params_file))
    elif params_file != "params.yaml":
        raise TuneAgentError(f"--params {params_file}: no such file")
    else:
        params = {}
    # No meta-model at the top (the methods that use none run as before `dvc repro`); the learned
    # methods' per-source extractors in fold-* folders under it, kept for a resumed run.
    models = journal.parent / f"warmstart_e2e-{job_name}-models"
    models.mkdir(parents=True, exist_ok=True)
    report = run_e2e(
        kb_for(tracking_uri),
        config,
        journal,
        models,
        progress=click.echo,
        params=params,
        normalisation=params.get("distances", {}).get("normalisation", "rank"),
    )
    path = write_json(Path(out) / "metrics" / "warmstart_e2e.json", report)
    for m, row in report["methods"].items():
        click.echo(f"{m:24s} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    click.echo(f"wrote {path}")


@click.command("scale")
@click.option("--scenario", "folder", default=None, help="A YAHPO scenario folder [default: lcbench].")
@click.option("--task", default="3945", show_default=True)
@click.option("--sizes", default="100,300", show_default=True, help="Configurations per source task.")
@click.option("--methods", default="gp,rgpe", show_default=True)
@click.option("--budget", type=int, default=15, show_default=True)
@click.option("--out", default=None, help="Also write the result to this JSON file.")
def bench_scale(folder: str | None, task: str, sizes: str, methods: str, budget: int, out: str | None) -> None:
    """Seconds per suggestion of each method as the history grows."""
    from agent.bench.scale import measure_scale
    from agent.bench.transfer import check_methods
    from agent.jobs.yahpo import yahpo_root

    names = [m.strip() for m in methods.split(",") if m.strip()]
    check_methods(names)
    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise TuneAgentError(f"--sizes takes comma-separated integers, got {sizes!r}") from None
    report = measure_scale(
        str(Path(folder) if folder else yahpo_root() / "lcbench"),
        task,
        counts,
        names,
        budget,
        progress=lambda line: click.echo(line, err=True),
    )
    if out:
        write_json(Path(out), report)
    click.echo(json.dumps(report, indent=2))


@click.command("history")
@click.option("--job", "job_spec", default="yahpo:lcbench", show_default=True, help="A surrogate-benchmark job.")
@click.option("--configs", type=int, default=100, show_default=True, help="Random configurations per task.")
@click.option("--exclude", multiple=True, help="Tasks to leave out (e.g. the one you will tune).")
@click.option("--seed", type=int, default=0, show_default=True)
@tracking_option
@artifact_option
def bench_history(
    job_spec: str,
    configs: int,
    exclude: tuple[str, ...],
    seed: int,
    tracking_uri: str | None,
    artifact_root: str | None,
) -> None:
    """Import the benchmark's source histories (random configurations of every task) into the store."""
    from agent.bench.transfer import BenchConfig, history_store, make_histories
    from agent.config import check_positive
    from agent.jobs import load_job

    check_positive("--configs", configs)
    if not job_spec.startswith("yahpo:"):
        raise TuneAgentError(f"--job must be a surrogate-benchmark job (yahpo:SCENARIO), got {job_spec!r}")
    job: Any = load_job(job_spec)  # a YahpoJob: tasks and a scenario
    for task in exclude:
        job.task(task)  # an unknown task is one line, exit 2
    config = BenchConfig(scenario=str(job.scenario.folder), history_size=configs, history_seed=seed)
    histories = make_histories(job, config)
    tasks = [t for t in job.scenario.instances if t not in exclude]
    history_store(job, histories, tasks, kb=kb_for(tracking_uri, artifact_root))
    click.echo(f"imported {len(tasks)} tasks x {configs} configurations of {job.name} ({job.metric}, {job.mode})")


@click.command("neighbours")
@click.option("--dataset", default="mnist-5k", show_default=True)
@click.option(
    "--history",
    "n_history",
    type=int,
    default=1000,
    show_default=True,
    help="Random historical meta-feature vectors to search (without --tracking-uri).",
)
@click.option("--models-dir", default="models", show_default=True)
@click.option(
    "--job",
    "job_name",
    default="mlp",
    show_default=True,
    help="With --tracking-uri: the job whose history is searched.",
)
@click.option(
    "--tracking-uri",
    default=None,
    help=(
        "Time the product's warm start (load, sample, meta-features, neighbour search) over this store's real "
        "history instead."
    ),
)
@click.option(
    "--sanity",
    "sanity",
    default=None,
    metavar="STARTER",
    is_flag=False,
    flag_value="mlp",
    help="Instead: do the meta-features place the datasets of a starter history sensibly (images near "
    "images, families together, units irrelevant, no table far from all)? Writes OUT/metrics/neighbour_sanity.json.",
)
@click.option("--out", default=".", show_default=True, help="With --sanity: where metrics/ is written.")
def bench_neighbours(
    dataset: str, n_history: int, models_dir: str, job_name: str, tracking_uri: str | None, sanity: str | None, out: str
) -> None:
    """Time meta-features of a new dataset plus the neighbour search over N historical datasets."""
    from agent.bench.neighbours import measure_neighbour_search, measure_warm_start

    if sanity is not None:
        from agent.bench.neighbour_sanity import neighbour_sanity

        report = neighbour_sanity(Path(sanity), progress=click.echo)
        path = write_json(Path(out) / "metrics" / "neighbour_sanity.json", report)
        click.echo(json.dumps({k: report[k] for k in ("image_to_image", "family_in_5", "units_stable")}))
        click.echo(f"wrote {path}")
        return
    if tracking_uri is not None:
        click.echo(json.dumps(measure_warm_start(kb_for(tracking_uri), dataset, job_name, Path(models_dir))))
        return
    click.echo(json.dumps(measure_neighbour_search(dataset, n_history, Path(models_dir))))


@click.command("metafeature-data")
@click.option(
    "--export",
    "export_dir",
    default="data/export",
    show_default=True,
    help="The history's export (`tune-agent meta export`): the targets and their neighbours.",
)
@click.option(
    "--extra",
    "extra_dir",
    required=True,
    help="Another export whose datasets only train the extractors (e.g. tables the per-package cap left out, "
    "bootstrapped on the same shared configurations).",
)
@click.option(
    "--factor",
    type=int,
    default=4,
    show_default=True,
    help="Training steps of the two longer arms, as a multiple of meta_features.steps.",
)
@click.option(
    "--params",
    "params_file",
    default="params.yaml",
    show_default=True,
    help="Pipeline settings (evaluate, meta_features, distances).",
)
@click.option(
    "--out",
    default=".",
    show_default=True,
    help="Writes OUT/metrics/metafeature_data.json; extractors cached in OUT/data/.",
)
def bench_metafeature_data(export_dir: str, extra_dir: str, factor: int, params_file: str, out: str) -> None:
    """Do learned meta-features improve with more training tasks? The evaluate replay's learned
    neighbours from extractors trained on the history, on it for longer, and on it plus EXTRA datasets."""
    from agent.bench.metafeature_data import run_metafeature_data
    from agent.pipeline.stages import load_params

    for option, folder in (("--export", export_dir), ("--extra", extra_dir)):
        if not Path(folder).is_dir():
            raise TuneAgentError(
                f"{option} {folder}: no such export folder (write one with `tune-agent meta export --out DIR`)"
            )
    if factor < 1:
        raise TuneAgentError(f"--factor must be at least 1, got {factor}")
    report = run_metafeature_data(
        Path(export_dir),
        Path(extra_dir),
        load_params(Path(params_file)),
        Path(out),
        factor,
        say=lambda line: click.echo(line, err=True),
    )
    click.echo(
        json.dumps({m: {k: v for k, v in r.items() if k.startswith("regret")} for m, r in report["methods"].items()})
    )
    click.echo(json.dumps(report["rank_correlation"]))


COMMANDS = [bench_warmstart, bench_scale, bench_history, bench_neighbours, bench_metafeature_data]
