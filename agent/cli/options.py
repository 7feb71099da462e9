"""What the commands share: the store of the invocation, the options of a study and of its
execution, and the checks that turn bad values into one line and exit code 2 before anything loads."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from agent.cli.config_file import load_config_file
from agent.cli.values import KeepModels
from agent.config import ACQUISITIONS, INIT_METHODS, KERNELS, PENDING, PRIOR_MEANS, StudyRequest
from agent.registry import PRUNERS, SAMPLERS, SURROGATES, WARM_STARTS
from agent.warm.launch import Launch

tracking_option = click.option(
    "--tracking-uri",
    default=None,
    help="MLflow tracking URI [default: $MLFLOW_TRACKING_URI or sqlite:///mlflow/mlflow.db]",
)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text (for scripts).")


artifact_option = click.option(
    "--artifact-root",
    default=None,
    help="Where new experiments store artifacts [default: mlflow/artifacts for the embedded store]",
)


class Stores:
    """``ctx.obj``: the invocation's knowledge base, opened once (by URI scheme) on first use, and
    how its process was launched (:class:`~agent.warm.launch.Launch`)."""

    def __init__(self, launch: Launch | None = None) -> None:
        self._open: dict[tuple[str | None, str | None, bool], Any] = {}
        self.launch = launch or Launch()

    def get(self, tracking_uri: str | None, artifact_root: str | None = None, reads: bool = False) -> Any:
        key = (tracking_uri, artifact_root, reads)
        if key not in self._open:
            from agent.knowledge import open_knowledge_base

            self._open[key] = open_knowledge_base(tracking_uri, artifact_root, fast_reads=reads)
        return self._open[key]


def launched() -> Launch:
    """How this invocation's process was launched (a fork of the warm process, or fresh)."""
    stores = click.get_current_context().find_object(Stores)
    return stores.launch if stores is not None else Launch()


def kb_for(tracking_uri: str | None, artifact_root: str | None = None, reads: bool = False) -> Any:
    """The invocation's store; ``reads``: an embedded store is read through sqlite3 (no MLflow import
    for a command that only reads, ``best``, ``history``, ``report``; no SQLAlchemy objects for a
    study's reads of the history) and written through MLflow."""
    stores = click.get_current_context().find_object(Stores)
    assert stores is not None, "the command group makes the invocation's Stores"
    return stores.get(tracking_uri, artifact_root, reads)


STARTER_FILE = "mlp"  # the packaged starter history of job mlp (agent/knowledge/starters/)


# `start` and `create`: what a study is asked for, in --help's order (StudyRequest's fields)
STUDY_OPTIONS = [
    click.option(
        "--config",
        "config",
        default=None,
        is_eager=True,
        expose_value=False,
        callback=load_config_file,
        multiple=True,
        help=(
            "YAML file of option values (keys are the option names, e.g. trials: 30); flags override it. With "
            "--cli, a LightningCLI config file (trainer/model/data sections) for your script (repeatable)."
        ),
    ),
    click.option(
        "--dataset",
        default=None,
        help=(
            "Built-in name (digits, mnist-5k, mnist1d, breast-cancer, wine, iris; variants like "
            "'digits?classes=0-4&fraction=0.3') or a path (.npz, .csv, .parquet, ImageFolder directory)."
        ),
    ),
    click.option(
        "--job",
        default=None,
        help="A registered job (cnn, mlp, mlp-arch, a plugin's), yahpo:SCENARIO or 'package.module:attr'.",
    ),
    click.option("--label", default=None, help="Label column of a .csv/.parquet dataset."),
    click.option("--drop", multiple=True, help="A .csv/.parquet column to leave out, e.g. an ID (repeatable)."),
    click.option(
        "--trials",
        type=int,
        default=StudyRequest.default("trials"),
        show_default=True,
        help="Trials in the study's budget.",
    ),
    click.option(
        "--epochs", type=int, default=StudyRequest.default("epochs"), show_default=True, help="Epochs per trial."
    ),
    click.option(
        "--time-limit", type=float, default=None, help="Seconds per trial before it is stopped and marked failed."
    ),
    click.option(
        "--metric",
        "metrics",
        multiple=True,
        help=(
            "Objective metric, NAME or NAME:min|max [default: the job's, e.g. val_loss]. Repeat it for several "
            "objectives (a Pareto front; the first is the primary), e.g. --metric val_loss:min --metric n_params:min."
        ),
    ),
    click.option(
        "--constraint",
        "constraints",
        multiple=True,
        help='A bound a trial must meet to count, "NAME<=V" or "NAME>=V" (repeatable), e.g. "n_params<=20000".',
    ),
    click.option(
        "--mode",
        type=click.Choice(["min", "max"]),
        default=None,
        help="Minimise or maximise the metric [default: the job's].",
    ),
    click.option(
        "--init",
        "init",
        type=click.Choice(INIT_METHODS),
        default=StudyRequest.default("init"),
        show_default=True,
        help="Initial design.",
    ),
    click.option("--n-init", type=int, default=None, help="Initial design size [default: min(5, trials)]."),
    click.option(
        "--acq",
        type=click.Choice(ACQUISITIONS),
        default=StudyRequest.default("acq"),
        show_default=True,
        help="Acquisition function.",
    ),
    click.option(
        "--random-every",
        type=int,
        default=StudyRequest.default("random_every"),
        show_default=True,
        help="With the cold GP, every Nth BO step tries a uniform random configuration instead (0: never).",
    ),
    click.option("--seed", type=int, default=StudyRequest.default("seed"), show_default=True),
    click.option(
        "--val-fraction",
        type=float,
        default=StudyRequest.default("val_fraction"),
        show_default=True,
        help="Share of data held out for validation (stratified, seeded).",
    ),
    click.option(
        "--study-name",
        default=None,
        help="Name of the study [default: <dataset>-<job>-<4 random characters>, e.g. digits-cnn-k3f9].",
    ),
    click.option(
        "--warm-start",
        type=click.Choice(WARM_STARTS.choices()),
        default=StudyRequest.default("warm_start"),
        show_default=True,
        help=(
            "Meta-features used to find similar historical datasets (auto: the ones the last `dvc repro` "
            "evaluation found better; hand-crafted until one has run)."
        ),
    ),
    click.option(
        "--k",
        type=int,
        default=StudyRequest.default("k"),
        show_default=True,
        help="Nearest historical datasets whose best configurations are tried first.",
    ),
    click.option(
        "--prior-mean",
        type=click.Choice(PRIOR_MEANS),
        default=None,
        help=(
            "GP prior mean: the nearest datasets' surfaces by meta-features, or by the study's own "
            "observations (re-chosen every trial) [default: neighbours when warm-started, observations "
            "when the history has no dataset samples]."
        ),
    ),
    click.option(
        "--models-dir",
        default=StudyRequest.default("models_dir"),
        show_default=True,
        help="Where `dvc repro` put the meta-models.",
    ),
    click.option(
        "--surrogate",
        type=click.Choice(SURROGATES.choices()),  # names only: imports neither numpy nor torch
        default=StudyRequest.default("surrogate"),
        show_default=True,
        help=(
            "Surrogate model (the registry: agent/surrogates/registry.py): cold GP, a portfolio start, "
            "the neighbours' prior mean, RGPE or TNP over the history; auto picks by the amount of "
            "history."
        ),
    ),
    click.option(
        "--kernel",
        type=click.Choice(KERNELS),
        default=StudyRequest.default("kernel"),
        show_default=True,
        help=(
            "GP kernel: arc (paper 002) embeds conditional hyperparameters so inactive ones do not count; "
            "auto picks it for spaces with conditions."
        ),
    ),
    click.option(
        "--keep-models",
        type=KeepModels(),
        default=StudyRequest.default("keep_models"),
        show_default=True,
        help=(
            "Keep the trained models of the best K trials on their trial runs (MLflow pyfunc and pytorch "
            "models; a model pushed out of the top K is deleted); 0 keeps none, all keeps every "
            "successful trial's. `best --register` registers a kept model without training."
        ),
    ),
    click.option(
        "--pruner",
        type=click.Choice(PRUNERS.choices()),
        default=StudyRequest.default("pruner"),
        show_default=True,
        help=(
            "Stop trials early on the per-epoch metric: median (below the median of earlier trials at "
            "that epoch) or asha (asynchronous successive halving, rungs at 1, 3, 9, ... epochs, top "
            "third goes on)."
        ),
    ),
    click.option(
        "--pending",
        type=click.Choice(PENDING),
        default=StudyRequest.default("pending"),
        show_default=True,
        help=(
            "With --workers > 1, how running trials enter a BO step: joint (qLogEI over them as pending "
            "points; auto for the GP family), believer (the model assumes its own mean there), liar (the "
            "worst score there; auto for the TNP, whose posterior is independent per point and always "
            "uses it; with --sampler tpe, Optuna's constant liar, which TPE otherwise goes without). "
            "`bench lcbench --batch 4 --pending P` measures them."
        ),
    ),
    click.option(
        "--sampler",
        type=click.Choice(SAMPLERS.choices()),
        default=StudyRequest.default("sampler"),
        show_default=True,
        help=(
            "bo (the surrogate above), random, tpe (Optuna's TPESampler) hts (paper 001: a learned map of "
            "a similar dataset's best configurations) or hts-anchored (ours: that map anchored at the "
            "identity until the target's trials can be predicted, then BO once a round of mapped points "
            "stops improving)."
        ),
    ),
    click.option(
        "--source",
        default=None,
        metavar="STUDY",
        help=(
            "With --sampler hts or hts-anchored: the historical study whose dataset is the source "
            "[default: the warm start's nearest neighbour]."
        ),
    ),
    tracking_option,
    artifact_option,
]


def study_options(fn: Any) -> Any:
    """Decorates a command with :data:`STUDY_OPTIONS`, your project's options after the first three."""
    from agent.cli.project_options import PROJECT_OPTIONS

    options = [*STUDY_OPTIONS[:3], *PROJECT_OPTIONS, *STUDY_OPTIONS[3:]]
    for option in reversed(options):
        fn = option(fn)
    return fn


def lazy_kb(req: Any) -> Any:
    """The store, opened only once the request passed its checks (bad input opens nothing); an
    embedded one's reads (the history, a study's trials) through sqlite3, its writes through MLflow
    (:mod:`agent.knowledge.mlflow.sqlite_reads`: a warm start read the history 1 s faster)."""
    return lambda: kb_for(req.tracking_uri, req.artifact_root, reads=True)


# `start` and `resume`: where trials run and for how long, in --help's order; not part of a study,
# so a resume may choose differently (checked by agent.execution.options.check_execution)
@contextlib.contextmanager
def preparing(what: str, log: bool = False) -> Iterator[None]:
    """On a terminal, a transient status line within a fraction of a second of the command, while
    the heavy libraries, the dataset and the history load (it disappears when the study's own lines
    start, so bad input still ends in its one line). ``log``: a command whose output is a log, not
    an answer for a script (``start``, ``resume``, ``neighbors`` without ``--json``): in a pipe, the
    same words once its own process is still preparing 1.5 s after launch (:func:`_said_if_slow`)."""
    if not sys.stdout.isatty():
        with _said_if_slow(what) if log else contextlib.nullcontext():
            yield
        return
    from rich.console import Console

    with Console(highlight=False).status(f"tune-agent: {what}", spinner="dots"):
        yield


SILENT_AT_MOST = 1.5  # seconds after its launch by which a command in a log has said something


@contextlib.contextmanager
def _said_if_slow(what: str) -> Iterator[None]:
    """``tune-agent: WHAT`` on stdout, the command's log, :data:`SILENT_AT_MOST` seconds after the
    console script's launch (its imports are most of that) unless the block has ended by then;
    stderr stays the one line of bad input or a refusal, however long finding it took."""
    import threading
    import time

    launched = getattr(sys.modules.get("agent.cli.entry"), "LAUNCHED", None)
    if launched is None:  # in the warm process, or called from Python: its imports are done
        yield
        return
    timer = threading.Timer(
        max(0.0, SILENT_AT_MOST - (time.perf_counter() - launched)), lambda: click.echo(f"tune-agent: {what}")
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def talks(what: str, log: bool = False) -> Any:
    """A command that shows a transient status line on a terminal at once while it loads (see
    :func:`preparing`); its own output prints above it. ``log``: its text output is a log (not with
    ``--json``)."""
    import functools

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with preparing(what, log=log and not kwargs.get("as_json")):
                return fn(*args, **kwargs)

        return run

    return wrap


params_option = click.option(
    "--params", "params_file", default="params.yaml", show_default=True, help="Pipeline settings."
)


def write_json(path: Path, report: Any) -> Path:
    """A benchmark's report at ``path`` (its folder made), as every ``bench`` command writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path
