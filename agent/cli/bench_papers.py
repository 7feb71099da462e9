"""Benchmarks of the papers' claims on real jobs: arc (paper 002's Table 1 on a conditional space),
hts (paper 001 against cold BO on job pairs) and zero-shot (the greedy portfolio's ceiling)."""

from __future__ import annotations

from pathlib import Path

import click

from agent.cli.options import artifact_option, kb_for, tracking_option, write_json


@click.command("arc")
@click.option("--dataset", default="mnist-5k", show_default=True)
@click.option("--job", "job_name", default="mlp-arch", show_default=True, help="A job whose space has conditions.")
@click.option(
    "--studies", type=int, default=10, show_default=True, help="BO studies that make the data (seeds 0..N-1)."
)
@click.option("--trials", type=int, default=30, show_default=True)
@click.option("--epochs", type=int, default=1, show_default=True)
@click.option("--prefix", default="arc-data-", show_default=True, help="Study names: PREFIX<seed>.")
@click.option("--folds", type=int, default=10, show_default=True)
@click.option(
    "--bo-seeds",
    type=int,
    default=0,
    show_default=True,
    help="Also run BO with the arc and the plain kernel, this many seeds each (studies arc-bo-<kernel>-<seed>).",
)
@click.option(
    "--table/--no-table",
    default=True,
    show_default=True,
    help="--no-table keeps the table already in OUT/metrics/arc.json and only adds the BO comparison.",
)
@click.option("--out", default=".", show_default=True, help="Writes OUT/metrics/arc.json.")
@tracking_option
@artifact_option
def bench_arc(
    dataset: str,
    job_name: str,
    studies: int,
    trials: int,
    epochs: int,
    prefix: str,
    folds: int,
    bo_seeds: int,
    table: bool,
    out: str,
    tracking_uri: str | None,
    artifact_root: str | None,
) -> None:
    """Paper 002's Table 1: NMSE of six regression models on BO data of a conditional job."""
    from agent.bench.arc import ArcBench, run_arc_bench
    from agent.config import check_positive

    for option, value in (("--studies", studies), ("--trials", trials), ("--epochs", epochs), ("--folds", folds)):
        check_positive(option, value)
    path = run_arc_bench(
        ArcBench(dataset, job_name, studies, trials, epochs, prefix, folds, bo_seeds, table, out),
        lambda: kb_for(tracking_uri, artifact_root),
        tracking_uri,
        artifact_root,
        echo=click.echo,
    )
    click.echo(f"wrote {path}")


@click.command("hts")
@click.option("--job", "job_name", default="mlp", show_default=True)
@click.option(
    "--pair",
    "pairs",
    nargs=2,
    multiple=True,
    metavar="SOURCE TARGET",
    help="Dataset specs of a source and a target, each bootstrapped in the store (repeat) "
    "[default: digits mnist-5k, mnist-5k mnist1d and two tabular pairs of the starter].",
)
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--trials", type=int, default=20, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True)
@click.option(
    "--n-init",
    type=int,
    default=None,
    help="m of paper 001's Algorithm 1 (LHS points before the first map), "
    "and cold BO's initial design [default: the product's].",
)
@click.option(
    "--out",
    default=".",
    show_default=True,
    help="Writes OUT/metrics/hts_pairs[_mM].json; journal in OUT/data/bench-runs/.",
)
@tracking_option
def bench_hts(
    job_name: str,
    pairs: tuple[tuple[str, str], ...],
    seeds: int,
    trials: int,
    epochs: int,
    workers: int,
    n_init: int | None,
    out: str,
    tracking_uri: str | None,
) -> None:
    """HTS (paper 001) and hts-anchored against cold BO on real job pairs: the evaluation ratio to reach
    cold's result."""
    from agent.bench.hts_pairs import PAIRS, HtsPairsConfig, run_hts_pairs
    from agent.config import check_positive

    for option, value in (("--seeds", seeds), ("--trials", trials), ("--epochs", epochs), ("--workers", workers)):
        check_positive(option, value)
    if n_init is not None:
        check_positive("--n-init", n_init)
    config = HtsPairsConfig(job_name, tuple(pairs) or PAIRS, seeds, trials, epochs, workers, n_init)
    suffix = "" if n_init is None else f"_m{n_init}"
    journal = Path(out) / "data" / "bench-runs" / f"hts_pairs-{job_name}-{trials}x{epochs}{suffix}.jsonl"
    report = run_hts_pairs(kb_for(tracking_uri), config, journal, progress=click.echo)
    path = write_json(Path(out) / "metrics" / f"hts_pairs{suffix}.json", report)
    for key, row in report["pairs"].items():
        shown = "not reached" if row["ratio"] is None else f"{row['ratio']}x"
        a = row["anchored"]
        anchored = "not reached" if a["ratio"] is None else f"{a['ratio']}x"
        click.echo(
            f"{key}: cold {row['cold_final']} at trial {row['cold_trials']}, hts reaches it at "
            f"{row['hts_trials'] or '-'} ({shown}; {row['seeds_reached']}/{seeds} seeds), hts-anchored at "
            f"{a['hts_trials'] or '-'} ({anchored}; {a['seeds_reached']}/{seeds} seeds)"
        )
    click.echo(f"wrote {path}")


@click.command("zero-shot")
@click.option(
    "--scenario", default=None, help="A YAHPO-format scenario folder [default: ../shared/benchmarks/yahpo/lcbench]."
)
@click.option("--out", default="metrics/zero_shot_lcbench.json", show_default=True)
def bench_zero_shot(scenario: str | None, out: str) -> None:
    """The zero-shot start's ceiling on a YAHPO scenario: the product's greedy portfolio against other
    normalisations, a Sobol-widened candidate set and the same rule on the sources' true values."""
    import json

    from agent.bench.zero_shot import run_zero_shot_bench
    from agent.jobs.yahpo import yahpo_root

    report = run_zero_shot_bench(scenario or str(yahpo_root() / "lcbench"), say=lambda line: click.echo(line, err=True))
    write_json(Path(out), report)
    click.echo(json.dumps({"variants": report["variants"], "best_fixed_first": report["best_fixed_first"]}, indent=2))


COMMANDS = [bench_arc, bench_hts, bench_zero_shot]
