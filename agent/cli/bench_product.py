"""Benchmarks of the product's own costs and faults: start-up, reading commands, the kill campaign,
pruning."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from agent.cli.options import STARTER_FILE, write_json
from agent.errors import TuneAgentError


@click.command("startup")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--dataset", default="iris", show_default=True)
@click.option("--job", default="mlp", show_default=True)
@click.option("--out", default=None, help="[default: metrics/startup.json, with --warm metrics/startup_warm.json]")
@click.option(
    "--warm",
    "starter",
    is_flag=False,
    flag_value=STARTER_FILE,
    default=None,
    help=f"Warm against cold on a starter history (default {STARTER_FILE}): time to first trial of the "
    "default warm-started study, a cold one, and one with an empty meta-model cache, each from a folder that "
    "is not the bootstrap's.",
)
@click.option(
    "--no-refit",
    is_flag=True,
    help="With --warm: skip the runs with an empty meta-model cache (a teammate's first start).",
)
@click.option(
    "--no-in-process",
    is_flag=True,
    help="With --warm: skip the arms that train in the study's process "
    "(TUNE_AGENT_TRIAL_PROCESS=0) beside the default trial process.",
)
@click.option(
    "--no-warm-process",
    is_flag=True,
    help="Skip the arms run by a warm process (`tune-agent daemon`); every other arm is a fresh process.",
)
def bench_startup(
    repeats: int,
    dataset: str,
    job: str,
    out: str | None,
    starter: str | None,
    no_refit: bool,
    no_in_process: bool,
    no_warm_process: bool,
) -> None:
    """Seconds from `tune-agent start` to its first output and first trial, on a terminal and a pipe."""
    from agent.bench.startup import run_startup_bench, run_warm_startup_bench
    from agent.config import check_positive

    check_positive("--repeats", repeats)
    if starter is not None:
        from agent.knowledge.starter import starter_path

        report = run_warm_startup_bench(
            starter_path(starter),
            repeats,
            job,
            refit=not no_refit,
            in_process=not no_in_process,
            warm=not no_warm_process,
            say=lambda line: click.echo(line, err=True),
        )
    else:
        report = run_startup_bench(
            repeats, dataset, job, warm=not no_warm_process, say=lambda line: click.echo(line, err=True)
        )
    out = out or ("metrics/startup_warm.json" if starter is not None else "metrics/startup.json")
    write_json(Path(out), report)
    click.echo(json.dumps(report["summary"], indent=2))


@click.command("project")
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--trials", type=int, default=3, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--project", default="examples/lightning_project", show_default=True, help="The example project.")
@click.option("--out", default="metrics/project_start.json", show_default=True)
def bench_project(rounds: int, trials: int, epochs: int, project: str, out: str) -> None:
    """Your Lightning project (--model/--data and --cli) against a built-in job: seconds to the first trial."""
    from agent.bench.project_start import run_project_start_bench
    from agent.config import check_positive

    check_positive("--rounds", rounds)
    if not (Path(project) / "space.yaml").is_file():
        raise TuneAgentError(f"--project {project}: no space.yaml there (run from the repository's root)")
    report = run_project_start_bench(Path(project), rounds, trials, epochs, say=lambda line: click.echo(line, err=True))
    write_json(Path(out), report)
    click.echo(json.dumps({"summary": report["summary"], "ratio_to_builtin": report["ratio_to_builtin"]}, indent=2))


@click.command("faults")
@click.option("--studies", type=int, default=20, show_default=True)
@click.option("--trials", type=int, default=4, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out", default=None, help="[default: metrics/faults.json, metrics/faults_mid_epoch.json with --mid-epoch]"
)
@click.option(
    "--mid-epoch",
    is_flag=True,
    help="Kill while a trial trains (after its first epoch checkpoint) and check that it continues from it "
    "(defaults then: --trials 2 --epochs 8 on digits with mlp).",
)
@click.option(
    "--clients",
    is_flag=True,
    help="Kill the start/resume command only (as a user would), resume until done; with --warm, through a "
    "warm process (metrics/faults_clients.json, metrics/faults_clients_warm.json).",
)
@click.option("--warm", is_flag=True, help="With --clients: the commands run in a warm process.")
def bench_faults(
    studies: int, trials: int, epochs: int, seed: int, out: str | None, mid_epoch: bool, clients: bool, warm: bool
) -> None:
    """Kill campaign: studies SIGKILLed at random moments (a new store's first second included), then resumed."""
    from agent.config import check_positive

    for option, value in (("--studies", studies), ("--trials", trials), ("--epochs", epochs)):
        check_positive(option, value)
    say = lambda line: click.echo(line, err=True)  # noqa: E731
    if clients:
        from agent.bench.faults_clients import run_client_campaign

        report = run_client_campaign(studies, trials, epochs, seed=seed, warm=warm, say=say)
        out = out or f"metrics/faults_clients{'_warm' if warm else ''}.json"
        write_json(Path(out), report)
        click.echo(json.dumps({k: v for k, v in report.items() if k not in ("rows", "environment")}, indent=2))
        return
    if mid_epoch:
        from agent.bench.faults_mid_epoch import EPOCHS, TRIALS, run_mid_epoch_campaign

        source = click.get_current_context().get_parameter_source
        given = [source(k) != ParameterSource.DEFAULT for k in ("trials", "epochs")]  # else the campaign's own
        report = run_mid_epoch_campaign(
            studies, trials if given[0] else TRIALS, epochs if given[1] else EPOCHS, seed=seed, say=say
        )
    else:
        from agent.bench.faults import run_fault_campaign

        report = run_fault_campaign(studies, trials, epochs, seed=seed, say=say)
    out = out or ("metrics/faults_mid_epoch.json" if mid_epoch else "metrics/faults.json")
    write_json(Path(out), report)
    click.echo(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))


@click.command("silence")
@click.option("--copies", type=int, default=1, show_default=True, help="The history: the starter this many times over.")
@click.option("--no-team", is_flag=True, help="Only the embedded store: no team server.")
@click.option("--out", default=None, help="[default: metrics/silence.json; metrics/silence_xN.json with --copies N]")
def bench_silence(copies: int, no_team: bool, out: str | None) -> None:
    """The longest silence of start, resume, neighbors, meta publish, server and ui (the promise: 2 s)."""
    from agent.bench.silence import run_silence_bench
    from agent.config import check_positive

    check_positive("--copies", copies)
    report = run_silence_bench(copies, team=not no_team, say=lambda line: click.echo(line, err=True))
    write_json(Path(out or ("metrics/silence.json" if copies == 1 else f"metrics/silence_x{copies}.json")), report)
    gaps = {name: row["longest_gap_s"] for name, row in report["commands"].items()}
    click.echo(json.dumps({"longest_gap_s": gaps, "within_promise": report["within_promise"]}, indent=2))


@click.command("kb-scale")
@click.option("--sizes", default="1,10,100", show_default=True, help="History sizes, in times the starter history.")
@click.option("--repeats", type=int, default=3, show_default=True)
@click.option(
    "--out", default="metrics/kb_scale.json", show_default=True, help="Also writes docs/benchmarks/kb_scale.png."
)
def bench_kb_scale(sizes: str, repeats: int, out: str) -> None:
    """First trial (warm, cold, empty cache), neighbors, history, meta publish, import and fit rates
    as the history grows to N times the starter."""
    from agent.bench.kb_scale import plot, run_kb_scale_bench
    from agent.config import check_positive

    check_positive("--repeats", repeats)
    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise TuneAgentError(f"--sizes takes whole numbers separated by commas, got {sizes!r}") from None
    if not counts or min(counts) < 1:
        raise TuneAgentError(f"--sizes takes whole numbers of 1 or more, got {sizes!r}")
    report = run_kb_scale_bench(counts, repeats, say=lambda line: click.echo(line, err=True))
    write_json(Path(out), report)
    plot(report, Path("docs/benchmarks/kb_scale.png"))  # the start-up page shows it
    click.echo(json.dumps({"sizes": report["sizes"], "promises": report["promises"]}, indent=2))


@click.command("pruning")
@click.option("--job", default="cnn", show_default=True)
@click.option("--dataset", default="mnist-5k", show_default=True)
@click.option("--trials", type=int, default=20, show_default=True)
@click.option("--epochs", type=int, default=9, show_default=True)
@click.option(
    "--pruners",
    default="none,asha,median",
    show_default=True,
    help="Compared in this order; the first sets the target.",
)
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option(
    "--same-time/--same-trials",
    default=True,
    show_default=True,
    help="The other pruners get the first's wall time as --timeout (and 3x its trials), or its trial count.",
)
@click.option("--out", default="metrics/pruning.json", show_default=True)
def bench_pruning(
    job: str, dataset: str, trials: int, epochs: int, pruners: str, seeds: int, same_time: bool, out: str
) -> None:
    """Wall time to reach the unpruned study's best validation value, per pruner (start --pruner P)."""
    from agent.bench.pruning import PruningBenchConfig, run_pruning_bench
    from agent.config import check_positive
    from agent.registry import PRUNERS

    for option, value in (("--trials", trials), ("--epochs", epochs), ("--seeds", seeds)):
        check_positive(option, value)
    chosen = tuple(p.strip() for p in pruners.split(",") if p.strip())
    unknown = [p for p in chosen if p not in PRUNERS.choices()]
    if not chosen or unknown:
        raise TuneAgentError(f"--pruners takes names from {', '.join(PRUNERS.choices())}, got {pruners!r}")
    config = PruningBenchConfig(job, dataset, trials, epochs, seeds=seeds, pruners=chosen, same_time=same_time)
    report = run_pruning_bench(config, Path(out), progress=lambda line: click.echo(line, err=True))
    click.echo(json.dumps({k: v for k, v in report.items() if k != "seeds"}, indent=2))


@click.command("reading")
@click.option("--tracking-uri", required=True, help="A store to read, e.g. one `bootstrap starter` filled.")
@click.option("--study", required=True, help="The study `best` and `report` read.")
@click.option("--dataset", default="wine", show_default=True, help="The dataset `neighbors` looks up.")
@click.option("--job", default="mlp", show_default=True, help="The job `neighbors` looks up.")
@click.option("--repeats", type=int, default=3, show_default=True)
@click.option(
    "--baseline",
    default=None,
    metavar="DIR",
    help="A folder with another version's agent package (git archive REV | tar -x -C DIR), timed alternately.",
)
@click.option("--out", default="metrics/reading_commands.json", show_default=True)
@click.option("--warm-process", "warm", is_flag=True, help="This code's commands again, run by a warm process.")
def bench_reading(
    tracking_uri: str, study: str, dataset: str, job: str, repeats: int, baseline: str | None, out: str, warm: bool
) -> None:
    """Seconds of `best`, `history`, `report` and `neighbors` in fresh processes, imports included."""
    from agent.bench.startup import run_reading_bench
    from agent.config import check_positive

    check_positive("--repeats", repeats)
    if baseline is not None and not (Path(baseline) / "agent" / "__init__.py").is_file():
        raise TuneAgentError(f"--baseline {baseline}: no agent package there")
    report = run_reading_bench(
        tracking_uri,
        study,
        repeats,
        Path(baseline) if baseline else None,
        dataset=dataset,
        job=job,
        warm=warm,
        say=lambda line: click.echo(line, err=True),
    )
    write_json(Path(out), report)
    click.echo(json.dumps(report["median_s"], indent=2))


@click.command("lcbench-mo")
@click.option(
    "--scenario",
    default=None,
    help="A YAHPO-format scenario folder with val_accuracy and time [default: ../shared/benchmarks/yahpo/lcbench].",
)
@click.option("--tasks", default="3945,7593,34539,126025", show_default=True, help="Task ids, comma-separated.")
@click.option("--seeds", type=int, default=2, show_default=True)
@click.option("--budget", type=int, default=30, show_default=True, help="Trials per study.")
@click.option("--methods", default="bo,tpe,random", show_default=True)
@click.option("--out", default="metrics/lcbench_multi_objective.json", show_default=True)
def bench_lcbench_mo(scenario: str | None, tasks: str, seeds: int, budget: int, methods: str, out: str) -> None:
    """Several objectives on LCBench: hypervolume regret of val_accuracy against time at 10 and 30
    trials, the product's qLogNEHVI against Optuna's multi-objective TPE and random search."""
    from agent.bench.multi_objective import METHODS, MoConfig, run_mo_benchmark
    from agent.config import check_positive
    from agent.jobs.yahpo import yahpo_root

    for option, value in (("--seeds", seeds), ("--budget", budget)):
        check_positive(option, value)
    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not chosen or any(m not in METHODS for m in chosen):
        raise TuneAgentError(f"--methods takes names from {', '.join(METHODS)}, got {methods!r}")
    folder = Path(scenario) if scenario else yahpo_root() / "lcbench"
    if not (folder / "model.onnx").exists() and not any(folder.glob("*.onnx")):
        raise TuneAgentError(f"--scenario {folder}: no YAHPO surrogate (.onnx) there")
    checkpoints = tuple(k for k in (10, 30) if k <= budget) or (budget,)
    config = MoConfig(
        str(folder.resolve()),
        tuple(t.strip() for t in tasks.split(",") if t.strip()),
        seeds,
        budget,
        checkpoints,
        chosen,
        extra={"command": "tune-agent-bench lcbench-mo " + " ".join(sys.argv[3:])},
    )
    report = run_mo_benchmark(config, progress=lambda line: click.echo(line, err=True))
    write_json(Path(out), report)
    click.echo(json.dumps(report["summary"], indent=2))


COMMANDS = [
    bench_startup,
    bench_project,
    bench_faults,
    bench_silence,
    bench_kb_scale,
    bench_pruning,
    bench_reading,
    bench_lcbench_mo,
]
