"""Benchmarks of the product itself: engine fingerprint, latency, lcbench, parallel, server, sources
(:mod:`.bench_product` has start-up, reading, faults and pruning; :mod:`.bench_papers` the papers' own;
:mod:`.bench_warmstart` the warm start's)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from agent.cli.options import STARTER_FILE, write_json
from agent.cli.values import fidelity_values
from agent.config import PENDING
from agent.errors import TuneAgentError
from agent.execution.options import check_execution, checked_resources


@click.group(context_settings={"auto_envvar_prefix": "TUNE_AGENT_BENCH", "help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tune-agent")
def bench() -> None:
    """tune-agent's benchmarks: each writes its figures to a file under metrics/ (see the docs'
    Benchmarks pages)."""


@bench.command("fingerprint")
def bench_fingerprint() -> None:
    """This code's engine fingerprint: the hash a benchmark report's "engine" names (and its journal
    keys carry), so a figure can be matched to the code that made it."""
    from agent.bench.fingerprint import engine_fingerprint

    click.echo(engine_fingerprint("bench/transfer.py"))


@bench.command("latency")
@click.option("--job", default="cnn", show_default=True, help="Job whose search space is used.")
@click.option("--obs", "n_obs", multiple=True, type=int, default=(10, 100), show_default=True)
@click.option("--repeats", type=int, default=5, show_default=True)
def bench_latency(job: str, n_obs: tuple[int, ...], repeats: int) -> None:
    """Median BO suggestion latency (GP fit + acquisition) at N observations."""
    from agent.bench.latency import measure_latency
    from agent.jobs import load_job

    space = load_job(job).space
    for n in n_obs:
        click.echo(json.dumps(measure_latency(space, n, repeats=repeats)))


@bench.command("lcbench")
@click.option("--quick", is_flag=True, help="4 tasks spread over the scenario (2 seeds unless --seeds).")
@click.option(
    "--methods",
    default="random,tpe,gp,portfolio_gp,rgpe,tnp",
    show_default=True,
    help="Comma-separated samplers (random, tpe) and registry surrogates (gp, portfolio_gp, neighbour_gp, rgpe, tnp).",
)
@click.option("--seeds", type=int, default=None, help="Seeds per task [default: 5; 2 with --quick].")
@click.option("--tasks", type=int, default=None, help="Only the first N tasks.")
@click.option("--budget", type=int, default=30, show_default=True, help="Trials per study.")
@click.option("--workers", type=int, default=2, show_default=True)
@click.option(
    "--control",
    type=click.Choice(["none", "shuffled"]),
    default="none",
    show_default=True,
    help="shuffled: every source's responses permuted (negative-transfer control).",
)
@click.option(
    "--scenario",
    "folder",
    default=None,
    help="A YAHPO-format scenario folder [default: ../shared/benchmarks/yahpo/lcbench].",
)
@click.option("--target", default=None, help="Output to optimise [default: the scenario's, lcbench: val_accuracy].")
@click.option(
    "--maximize/--minimize", "maximize", default=None, help="Direction of --target [default: the scenario's]."
)
@click.option(
    "--fidelity", multiple=True, help="NAME=VALUE: evaluate at this fidelity instead of the full one (repeatable)."
)
@click.option("--out", default=".", show_default=True, help="Writes OUT/metrics/<scenario>*.json and OUT/plots/.")
@click.option(
    "--fresh", is_flag=True, help="Forget the journal of finished runs (OUT/data/bench-runs/) and recompute all."
)
@click.option(
    "--batch",
    type=int,
    default=1,
    show_default=True,
    help="Trials in flight per study, as `start --workers N` runs them (simulated equal-speed workers); "
    "writes OUT/metrics/<scenario>_batchN.json.",
)
@click.option(
    "--pending",
    type=click.Choice(PENDING),
    default="auto",
    show_default=True,
    help="With --batch: how running trials enter a BO step (start --pending); "
    "a choice other than auto writes OUT/metrics/<scenario>_batchN_<pending>.json.",
)
@click.option(
    "--ask-ahead",
    "ask_ahead",
    type=int,
    default=0,
    show_default=True,
    help="With --batch: trials asked beyond the batch, each started when one ends (start --ask-ahead); "
    "writes OUT/metrics/<scenario>_batchN[...]_aheadK.json.",
)
@click.option(
    "--tag",
    default=None,
    help="Name a side run: writes OUT/metrics/<scenario>[...]_TAG.json and plots/.../TAG/ instead of the main files.",
)
@click.option(
    "--history",
    "history_size",
    type=int,
    default=100,
    show_default=True,
    help="Configurations per source task in the history; another value writes ..._historyN.json.",
)
@click.option(
    "--sources",
    type=int,
    default=None,
    help=(
        "Source tasks in each run's history, drawn once per task [default: every other task]; writes ..._sourcesK.json."
    ),
)
@click.option(
    "--random-every",
    "random_every",
    type=int,
    default=None,
    help="start --random-every for every BO study (0: no interleaved random step) [default: the product's]; "
    "writes ..._random_everyN.json.",
)
def bench_lcbench(
    quick: bool,
    methods: str,
    seeds: int | None,
    tasks: int | None,
    budget: int,
    workers: int,
    control: str,
    folder: str | None,
    target: str | None,
    maximize: bool | None,
    fidelity: tuple[str, ...],
    out: str,
    fresh: bool,
    batch: int,
    pending: str,
    tag: str | None,
    ask_ahead: int,
    history_size: int,
    sources: int | None,
    random_every: int | None,
) -> None:
    """Leave-one-task-out transfer benchmark on a YAHPO Gym scenario, run as product studies."""
    from agent.bench.run import run_transfer_benchmark
    from agent.config import check_positive

    for option, value in (("--budget", budget), ("--workers", workers), ("--batch", batch)):
        check_positive(option, value)
    for option, given in (("--seeds", seeds), ("--tasks", tasks), ("--history", history_size), ("--sources", sources)):
        if given is not None:
            check_positive(option, given)
    check_execution(workers, ask_ahead=ask_ahead)
    if random_every is not None and random_every < 0:
        raise click.BadParameter("must be 0 (never) or a positive step count", param_hint="--random-every")
    report = run_transfer_benchmark(
        [m.strip() for m in methods.split(",") if m.strip()],
        Path(out),
        folder=folder,
        target=target,
        maximize=maximize,
        fidelity=fidelity_values(fidelity),
        quick=quick,
        seeds=seeds,
        tasks=tasks,
        budget=budget,
        workers=workers,
        control=control,
        progress=lambda line: click.echo(line, err=True),
        fresh=fresh,
        batch=batch,
        pending=pending,
        tag=tag,
        ask_ahead=ask_ahead,
        history_size=history_size,
        sources=sources,
        random_every=random_every,
    )
    click.echo(json.dumps(report, indent=2))


@bench.command("parallel")
@click.option("--job", default="mlp", show_default=True)
@click.option("--dataset", default="digits", show_default=True)
@click.option("--trials", type=int, default=24, show_default=True)
@click.option("--epochs", type=int, default=20, show_default=True)
@click.option(
    "--workers", default="1,2", show_default=True, help="Worker counts to compare; the first is the baseline."
)
@click.option(
    "--ask-ahead",
    "ask_ahead",
    default="1",
    show_default=True,
    help="--ask-ahead values to run each worker count above 1 with (e.g. 0,1).",
)
@click.option(
    "--wait",
    type=float,
    default=0.0,
    show_default=True,
    help="Seconds every training epoch also waits without using a core (a GPU-bound trial's "
    "share): the ratio then measures the orchestration, not the competition for cores.",
)
@click.option(
    "--process",
    is_flag=True,
    help="Run each count as its own `tune-agent start` process, timed from launch to exit (imports included).",
)
@click.option("--cpus-per-trial", type=int, default=1, show_default=True, help="As `start`'s, for the counts above 1.")
@click.option("--gpus-per-trial", type=float, default=0.0, show_default=True, help="As `start`'s, for every count.")
@click.option("--out", default="metrics/parallel.json", show_default=True)
def bench_parallel(
    job: str,
    dataset: str,
    trials: int,
    epochs: int,
    workers: str,
    ask_ahead: str,
    wait: float,
    process: bool,
    cpus_per_trial: int,
    gpus_per_trial: float,
    out: str,
) -> None:
    """Wall time of one study with 1, 2, ... workers (start --workers N), as ratios to the first."""
    from agent.bench.parallel import ParallelConfig, parse_workers, run_parallel_bench
    from agent.config import check_positive

    for option, value in (("--trials", trials), ("--epochs", epochs)):
        check_positive(option, value)
    if not wait >= 0 or wait == float("inf"):
        raise TuneAgentError(f"--wait takes seconds, 0 or more, got {wait}")
    checked_resources(cpus_per_trial, gpus_per_trial, here=True)
    config = ParallelConfig(
        job,
        dataset,
        trials,
        epochs,
        workers=parse_workers(workers),
        ask_ahead=parse_workers(ask_ahead, "--ask-ahead", 0),
        wait=wait,
        process=process,
        cpus_per_trial=cpus_per_trial,
        gpus_per_trial=gpus_per_trial,
    )
    report = run_parallel_bench(config, Path(out), progress=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(report, indent=2))


@bench.command("server")
@click.option(
    "--starter",
    default=STARTER_FILE,
    show_default=True,
    help="Studies to log (a starter history file, or a packaged one by name).",
)
@click.option("--agents", type=int, default=4, show_default=True, help="Concurrent writers, one MLflow client each.")
@click.option("--runs", type=int, default=10_000, show_default=True, help="Trial runs to log before the lookup.")
@click.option("--dataset", default="wine", show_default=True, help="The new dataset whose warm start is timed.")
@click.option("--models-dir", default="models", show_default=True)
@click.option("--out", default="metrics/server.json", show_default=True)
def bench_server(starter: str, agents: int, runs: int, dataset: str, models_dir: str, out: str) -> None:
    """A real team server (PostgreSQL): runs/s with concurrent agents, warm-start lookup over N trial runs."""
    from agent.bench.server import run_server_bench
    from agent.config import check_positive

    for option, value in (("--agents", agents), ("--runs", runs)):
        check_positive(option, value)
    if not Path(starter).is_file():
        raise TuneAgentError(f"starter history not found: {starter}")
    report = run_server_bench(
        Path(starter), agents, runs, dataset, models_dir=Path(models_dir), say=lambda line: click.echo(line, err=True)
    )
    write_json(Path(out), report)
    click.echo(json.dumps(report, indent=2))


@bench.command("sources")
@click.option("--sizes", default="240,2400,10000", show_default=True, help="Numbers of source datasets in the history.")
@click.option("--methods", default="gp,rgpe", show_default=True)
@click.option("--target", default="3945", show_default=True, help="The lcbench task studied (held out of the history).")
@click.option("--budget", type=int, default=12, show_default=True)
@click.option(
    "--fit-up-to",
    type=int,
    default=240,
    show_default=True,
    help="Above this many sources, each task's first fitted GP is reused for its other sources (fitting "
    "10,000 GPs takes about an hour on 2 cores).",
)
@click.option(
    "--scenario",
    default="lcbench",
    show_default=True,
    help="A YAHPO scenario: a name under the YAHPO root or a folder (`bench mixed-scenario` writes a "
    "mixed, conditional one).",
)
@click.option(
    "--out", default="metrics/sources.json", show_default=True, help="Also writes a plot beside it in plots/."
)
def bench_sources(sizes: str, methods: str, target: str, budget: int, fit_up_to: int, scenario: str, out: str) -> None:
    """Preparation and suggestion seconds of a study as the history grows to thousands of datasets."""
    from agent.bench.sources import measure_sources, plot_sources
    from agent.config import check_positive

    check_positive("--budget", budget)
    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise TuneAgentError(f"--sizes must be whole numbers separated by commas, got {sizes!r}") from None
    for n in counts:
        check_positive("--sizes", n)
    report = measure_sources(
        counts,
        [m.strip() for m in methods.split(",") if m.strip()],
        target,
        budget=budget,
        fit_up_to=fit_up_to,
        scenario=scenario,
        progress=lambda line: click.echo(line, err=True),
    )
    write_json(Path(out), report)
    plot = plot_sources(report, Path(out).resolve().parent.parent / "plots" / f"{Path(out).stem}.png")
    click.echo(json.dumps(report["runs"], indent=2))
    click.echo(f"plot: {plot}", err=True)


@bench.command("mixed-scenario")
@click.option("--out", default="data/lcbench_mixed", show_default=True, help="The scenario folder to write.")
@click.option("--tasks", type=int, default=118, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def bench_mixed_scenario(out: str, tasks: int, seed: int) -> None:
    """Write a YAHPO-format scenario of an XGBoost-shaped space (14 mixed, partly conditional
    hyperparameters) derived from lcbench: a stand-in for measuring cost on mixed spaces."""
    from agent.config import check_positive
    from agent.data.yahpo_mixed import write_mixed_scenario
    from agent.jobs.yahpo import yahpo_root

    check_positive("--tasks", tasks)
    folder = write_mixed_scenario(Path(out), yahpo_root() / "lcbench", tasks=tasks, seed=seed)
    click.echo(f"wrote {folder}: {tasks} tasks; use it as --scenario {folder} or --job yahpo:{folder.resolve()}")


COMMANDS = [bench]
