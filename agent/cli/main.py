"""The ``tune-agent`` command line: the group, its commands, and the one place errors become exit codes.

Each command (:mod:`.study`, :mod:`.store`, :mod:`.bootstrap`, :mod:`.team`, :mod:`.pipeline`, :mod:`.project`,
:mod:`.daemon`) parses, calls one service function and renders; the options they share are in
:mod:`.options`. The benchmarks (:mod:`.bench` with :mod:`.bench_product`, :mod:`.bench_papers`,
:mod:`.bench_warmstart`, :mod:`.bench_paper003`) are a command line of their own, ``tune-agent-bench``
(:func:`bench_main`), apart from the product's.
:func:`main` maps a :class:`~agent.errors.TuneAgentError` to one line on stderr (its message, then
its hint) and its exit code (2: bad input); a usage error is one line and exit code 2 too. Every
option can come from the environment as ``TUNE_AGENT_<OPTION>`` (e.g. ``TUNE_AGENT_TRACKING_URI``;
a benchmark's ``TUNE_AGENT_BENCH_<COMMAND>_<OPTION>``);
``MLFLOW_TRACKING_URI`` is honoured too. Heavy libraries are imported inside the commands so
``--help`` stays fast (a test checks it imports neither numpy nor torch).
"""

from __future__ import annotations

import sys

import click

from agent.cli import (
    bench,
    bench_paper003,
    bench_papers,
    bench_product,
    bench_warmstart,
    bootstrap,
    daemon,
    pipeline,
    project,
    store,
    study,
    team,
)
from agent.cli.options import Stores
from agent.errors import StudyInterrupted, TuneAgentError
from agent.warm.launch import Launch


@click.group(context_settings={"auto_envvar_prefix": "TUNE_AGENT", "help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tune-agent")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Bayesian optimisation of PyTorch Lightning jobs, with every run kept in MLflow."""
    if ctx.obj is None:  # main() hands one over, with how this process was launched
        ctx.obj = Stores()


for _module in (study, project, store, bootstrap, team, pipeline, daemon):
    for _command in _module.COMMANDS:
        cli.add_command(_command)
for _command in bench_papers.COMMANDS + bench_warmstart.COMMANDS + bench_product.COMMANDS + bench_paper003.COMMANDS:
    bench.bench.add_command(_command)


def _environment_names(group: click.Group, path: str = "TUNE_AGENT") -> None:
    """Every option of every command reads ``TUNE_AGENT_<OPTION>`` (``TUNE_AGENT_TRACKING_URI``,
    ``TUNE_AGENT_TRIALS``: one setting for every command that has the option, as
    docs/guide/options.md says) and, winning over it, click's per-command
    ``TUNE_AGENT_<COMMAND>_<OPTION>`` (``TUNE_AGENT_START_TRIALS``); ``--help`` shows both. The
    name is the option's own (``--json``: ``TUNE_AGENT_JSON``, ``--trial``: ``TUNE_AGENT_TRIAL``),
    not the Python parameter's behind it."""
    for name, command in group.commands.items():
        here = f"{path}_{name.replace('-', '_').upper()}"
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar is None and param.name and param.expose_value:
                longs = [o for o in param.opts if o.startswith("--")]
                option = (longs[0][2:] if longs else param.name).replace("-", "_").upper()
                param.envvar = [f"{here}_{option}", f"TUNE_AGENT_{option}"]
                param.show_envvar = True
        if isinstance(command, click.Group):
            _environment_names(command, here)


_environment_names(cli)
_environment_names(bench.bench, "TUNE_AGENT_BENCH")


def _end_workers_then_die(signum: int, frame: object) -> None:
    """SIGTERM still ends this process at once, as by default, but first the worker processes it
    started (a process pool's: bootstrap, evaluate, the benchmarks' folds and runs; a DataLoader's):
    by default they were left running as orphans (a `bench lcbench` stopped with `kill` left its two
    workers computing for an hour). A study on Ray replaces this with its own handler."""
    import multiprocessing
    import os
    import signal

    for child in multiprocessing.active_children():
        child.terminate()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def bench_main(argv: list[str] | None = None) -> None:
    """``tune-agent-bench``: the benchmarks' own command line, its errors mapped as :func:`main` maps them."""
    main(argv, group=bench.bench, prog="tune-agent-bench")


def main(
    argv: list[str] | None = None, launch: Launch | None = None, group: click.Group = cli, prog: str = "tune-agent"
) -> None:
    """Entry point: maps errors to one line and an exit code. ``launch``: how this process came to
    be (a fork of the warm process, :mod:`agent.warm.server`); a fresh process by default."""
    import signal
    import threading
    import warnings

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _end_workers_then_die)

    # Library deprecation notices (torch.jit inside BoTorch/GPyTorch) are not the user's business.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit.*")
    # BoTorch retries a failed acquisition line search from new starting points and says so in a
    # five-line RuntimeWarning; the retry is its business, the study's lines say what was proposed.
    warnings.filterwarnings("ignore", message=r"Optimization failed", category=RuntimeWarning, module=r"botorch\..*")
    try:
        group.main(args=argv, prog_name=prog, standalone_mode=False, obj=Stores(launch or Launch()))
    except StudyInterrupted as exc:
        click.echo(f"tune-agent: {exc.line()}", err=True)
        sys.exit(exc.exit_code)
    except TuneAgentError as exc:
        click.echo(f"tune-agent: error: {exc.line()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("tune-agent: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"tune-agent: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("tune-agent: interrupted", err=True)
        sys.exit(130)
