"""How `start` and `resume` run their trials: the execution options (workers, Ray, threads,
resources, time limit), as one decorator."""

from __future__ import annotations

from typing import Any

import click

from agent.execution.options import ASK_AHEAD

EXECUTION_OPTIONS = [
    click.option(
        "--workers",
        type=int,
        default=1,
        show_default=True,
        help=(
            "Trials run at once (Ray tasks of --cpus-per-trial CPUs and --gpus-per-trial GPUs each); each new "
            "trial is proposed knowing the running ones."
        ),
    ),
    click.option(
        "--ray-address",
        default=None,
        help="Run the trials as Ray tasks on this cluster (e.g. 10.0.0.5:6379; every node needs tune-agent installed).",
    ),
    click.option(
        "--ray-working-dir",
        default=None,
        metavar="DIR",
        help="With Ray workers, a folder shipped to every worker and put first on its import path "
        "(Ray's runtime_env working_dir): where your --job module lives, when the nodes do not have it.",
    ),
    click.option(
        "--ask-ahead",
        type=int,
        default=ASK_AHEAD,
        show_default=True,
        help=(
            "With --workers > 1, trials proposed beyond the workers and held here, each started the moment a "
            "trial ends, so a free worker does not wait for the next proposal; 0: propose only for a free "
            "worker, knowing every finished result."
        ),
    ),
    click.option(
        "--torch-threads",
        type=int,
        default=None,
        help="Torch threads of a trial trained in this process (--workers 1) [default: torch's own, "
        "one per core]; fewer leave cores to other work. Ray workers take --cpus-per-trial.",
    ),
    click.option(
        "--cpus-per-trial",
        type=int,
        default=1,
        show_default=True,
        help="With Ray workers, CPUs each trial's task reserves and the torch threads it trains on.",
    ),
    click.option(
        "--gpus-per-trial",
        type=float,
        default=0.0,
        show_default=True,
        help="A trial trains on a GPU when above 0: in this process, or on Ray with this share of a GPU "
        "reserved per trial (0.5: two trials share one; Ray Tune's resources_per_trial). At most 1.",
    ),
    click.option(
        "--timeout",
        type=float,
        default=None,
        help="Seconds: start no trial after this long (running ones finish); the study stays resumable.",
    ),
]


def execution_options(fn: Any) -> Any:
    """Decorates a command with :data:`EXECUTION_OPTIONS`."""
    for option in reversed(EXECUTION_OPTIONS):
        fn = option(fn)
    return fn
