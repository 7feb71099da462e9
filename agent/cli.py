"""The ``tune-agent`` command line: thin click commands over the services in ``agent.tuning``.

Each command parses, calls one service function and renders. :func:`main` is the one place that
maps exceptions to exit codes: a :class:`~agent.errors.TuneAgentError` or a usage error becomes one
line on stderr and exit code 2. Every option can come from the environment as
``TUNE_AGENT_<OPTION>`` (e.g. ``TUNE_AGENT_TRACKING_URI``); ``MLFLOW_TRACKING_URI`` is honoured too.
Heavy libraries are imported inside the commands so ``--help`` stays fast.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

import click

from agent.config import ACQUISITIONS, INIT_METHODS, KERNELS, PENDING, PRIOR_MEANS, PRUNERS, SAMPLERS, WARM_METHODS, StudyConfig
from agent.errors import TuneAgentError

tracking_option = click.option(
    "--tracking-uri", default=None, help="MLflow tracking URI [default: $MLFLOW_TRACKING_URI or sqlite:///mlflow/mlflow.db]"
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text (for scripts).")
artifact_option = click.option(
    "--artifact-root", default=None, help="Where new experiments store artifacts [default: mlflow/artifacts for the embedded store]"
)


@click.group(context_settings={"auto_envvar_prefix": "TUNE_AGENT", "help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tune-agent")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Bayesian optimisation of PyTorch Lightning jobs, with every run kept in MLflow."""
    ctx.obj = Stores()


class Stores:
    """``ctx.obj``: the invocation's knowledge base, opened once (by URI scheme) on first use."""

    def __init__(self) -> None:
        self._open: dict[tuple[str | None, str | None], Any] = {}

    def get(self, tracking_uri: str | None, artifact_root: str | None = None) -> Any:
        key = (tracking_uri, artifact_root)
        if key not in self._open:
            from agent.knowledge import open_knowledge_base

            self._open[key] = open_knowledge_base(tracking_uri, artifact_root)
        return self._open[key]


def _kb(tracking_uri: str | None, artifact_root: str | None = None) -> Any:
    return click.get_current_context().find_object(Stores).get(tracking_uri, artifact_root)


STARTER_FILE = "starter/mlp.npz"


def surrogate_choices() -> tuple[str, ...]:
    from agent.surrogates.names import CHOICES  # the names only: --help imports neither numpy nor torch

    return CHOICES


def _load_config_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--config FILE.yaml``: option defaults from a file whose keys are the option names; flags
    given on the command line (or in the environment) still win."""
    if not value:
        return value
    import yaml

    try:
        data = yaml.safe_load(open(value, encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise TuneAgentError(f"cannot read --config {value}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise TuneAgentError(f"--config {value} must hold a mapping of option names to values")
    known = {p.name for p in ctx.command.params if p.name and p.name != "config"}
    settings = {str(k).replace("-", "_"): v for k, v in data.items()}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise TuneAgentError(f"--config {value}: unknown option {unknown[0]!r}; options are {', '.join(sorted(known))}")
    ctx.default_map = {**(ctx.default_map or {}), **settings}
    return value


def study_options(fn: Any) -> Any:
    options = [
        click.option("--config", "config", default=None, is_eager=True, expose_value=False, callback=_load_config_file,
                     help="YAML file of option values (keys are the option names, e.g. trials: 30); flags override it."),
        click.option("--dataset", required=True, help="Built-in name (digits, mnist-5k, mnist1d, breast-cancer, wine, iris; variants like 'digits?classes=0-4&fraction=0.3') or a path (.npz, .csv, .parquet, ImageFolder directory)."),
        click.option("--job", required=True, help="Built-in job (cnn, mlp) or a user job 'package.module:attr'."),
        click.option("--label", default=None, help="Label column of a .csv/.parquet dataset."),
        click.option("--drop", multiple=True, help="A .csv/.parquet column to leave out, e.g. an ID (repeatable)."),
        click.option("--trials", type=int, default=StudyConfig.default("trials"), show_default=True, help="Trials in the study's budget."),
        click.option("--epochs", type=int, default=StudyConfig.default("epochs"), show_default=True, help="Epochs per trial."),
        click.option("--time-limit", type=float, default=None, help="Seconds per trial before it is stopped and marked failed."),
        click.option("--metric", default=None, help="Objective metric [default: the job's, e.g. val_loss]."),
        click.option("--mode", type=click.Choice(["min", "max"]), default=None, help="Minimise or maximise the metric [default: the job's]."),
        click.option("--init", "init", type=click.Choice(INIT_METHODS), default=StudyConfig.default("init"), show_default=True, help="Initial design."),
        click.option("--n-init", type=int, default=None, help="Initial design size [default: min(5, trials)]."),
        click.option("--acq", type=click.Choice(ACQUISITIONS), default=StudyConfig.default("acq"), show_default=True, help="Acquisition function."),
        click.option("--random-every", type=int, default=StudyConfig.default("random_every"), show_default=True, help="With the cold GP, every Nth BO step tries a uniform random configuration instead (0: never)."),
        click.option("--seed", type=int, default=StudyConfig.default("seed"), show_default=True),
        click.option("--val-fraction", type=float, default=StudyConfig.default("val_fraction"), show_default=True, help="Share of data held out for validation (stratified, seeded)."),
        click.option("--study-name", default=None, help="Name of the study [default: <dataset>-<job>-<time>]."),
        click.option("--warm-start", type=click.Choice(WARM_METHODS), default=StudyConfig.default("warm_start"), show_default=True, help="Meta-features used to find similar historical datasets (auto: the ones the last `dvc repro` evaluation found better; hand-crafted before)."),
        click.option("--k", type=int, default=StudyConfig.default("k"), show_default=True, help="Nearest historical datasets whose best configurations are tried first."),
        click.option("--prior-mean", type=click.Choice(PRIOR_MEANS), default=None, help="GP prior mean: the nearest datasets' surfaces by meta-features, or by the study's own observations (re-chosen every trial) [default: neighbours when warm-started, observations when the history has no dataset samples]."),
        click.option("--models-dir", default=StudyConfig.default("models_dir"), show_default=True, help="Where `dvc repro` put the meta-models."),
        click.option("--surrogate", type=click.Choice(surrogate_choices()), default=StudyConfig.default("surrogate"), show_default=True, help="Surrogate model (the registry: agent/surrogates/registry.py): cold GP, a portfolio start, the neighbours' prior mean, RGPE or TNP over the history; auto picks by the amount of history."),
        click.option("--kernel", type=click.Choice(KERNELS), default=StudyConfig.default("kernel"), show_default=True,
                     help="GP kernel: arc (paper 002) embeds conditional hyperparameters so inactive ones do not count; auto picks it for spaces with conditions."),
        click.option("--pruner", type=click.Choice(PRUNERS), default=StudyConfig.default("pruner"), show_default=True,
                     help="Stop trials early on the per-epoch metric: median (below the median of earlier trials at that epoch) or asha (asynchronous successive halving, rungs at 1, 3, 9, ... epochs, top third goes on)."),
        click.option("--pending", type=click.Choice(PENDING), default=StudyConfig.default("pending"), show_default=True,
                     help="With --workers > 1, how running trials enter a BO step: joint (qLogEI over them as pending points; auto for the GP family), believer (the model assumes its own mean there), liar (the worst score there; auto for the TNP, whose posterior is independent per point and always uses it; with --sampler tpe, Optuna's constant liar, which TPE otherwise goes without). `bench lcbench --batch 4 --pending P` measures them."),
        click.option("--sampler", type=click.Choice(SAMPLERS), default=StudyConfig.default("sampler"), show_default=True, help="bo (the surrogate above), random, tpe (Optuna's TPESampler) hts (paper 001: a learned map of a similar dataset's best configurations) or hts-anchored (ours: that map anchored at the identity until the target's trials can be predicted, then BO once a round of mapped points stops improving)."),
        click.option("--source", default=None, metavar="STUDY",
                     help="With --sampler hts or hts-anchored: the historical study whose dataset is the source [default: the warm start's nearest neighbour]."),
        tracking_option,
        artifact_option,
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _request(kwargs: dict[str, Any]) -> Any:
    return StudyConfig(**kwargs)


def _lazy_kb(req: Any) -> Any:
    """The store, opened only once the request passed its checks (bad input opens nothing)."""
    return lambda: _kb(req.tracking_uri, req.artifact_root)


def execution_options(fn: Any) -> Any:
    """Where trials run and for how long: not part of a study, so a resume may choose differently."""
    fn = click.option("--timeout", type=float, default=None,
                      help="Seconds: start no trial after this long (running ones finish); the study stays resumable.")(fn)
    fn = click.option("--gpus-per-trial", type=float, default=0.0, show_default=True,
                      help="A trial trains on a GPU when above 0: in this process, or on Ray with this share of a GPU "
                           "reserved per trial (0.5: two trials share one; Ray Tune's resources_per_trial). At most 1.")(fn)
    fn = click.option("--cpus-per-trial", type=int, default=1, show_default=True,
                      help="With Ray workers, CPUs each trial's task reserves and the torch threads it trains on.")(fn)
    fn = click.option("--torch-threads", type=int, default=None,
                      help="Torch threads of a trial trained in this process (--workers 1) [default: torch's own, "
                           "one per core]; fewer leave cores to other work. Ray workers take --cpus-per-trial.")(fn)
    fn = click.option("--ask-ahead", type=int, default=1, show_default=True,
                      help="With --workers > 1, trials proposed beyond the workers and held here, each started the moment a trial ends, so a free worker does not wait for the next proposal; 0: propose only for a free worker, knowing every finished result.")(fn)
    fn = click.option("--ray-working-dir", default=None, metavar="DIR",
                      help="With Ray workers, a folder shipped to every worker and put first on its import path "
                           "(Ray's runtime_env working_dir): where your --job module lives, when the nodes do not have it.")(fn)
    fn = click.option("--ray-address", default=None,
                      help="Run the trials as Ray tasks on this cluster (e.g. 10.0.0.5:6379; every node needs tune-agent installed).")(fn)
    return click.option("--workers", type=int, default=1, show_default=True,
                        help="Trials run at once (Ray tasks of --cpus-per-trial CPUs and --gpus-per-trial GPUs each); each new trial is proposed knowing the running ones.")(fn)


@contextlib.contextmanager
def _preparing(what: str) -> Iterator[None]:
    """On a terminal, a transient status line within a fraction of a second of the command, while
    the heavy libraries, the dataset and the history load (it disappears when the study's own lines
    start, so bad input still ends in its one line). Pipes and logs get nothing extra."""
    if not sys.stdout.isatty():
        yield
        return
    from rich.console import Console

    with Console(highlight=False).status(f"tune-agent: {what}", spinner="dots"):
        yield


def talks(what: str) -> Any:
    """A command that shows a transient status line on a terminal at once while it loads (see
    :func:`_preparing`); its own output prints above it."""
    import functools

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with _preparing(what):
                return fn(*args, **kwargs)

        return run

    return wrap


def _checked_resources(cpus_per_trial: int, gpus_per_trial: float, torch_threads: int | None = None,
                       on_ray: bool = True, here: bool = False) -> Any:
    """The per-trial options as :class:`~agent.execution.resources.TrialResources`, or one line, exit 2;
    ``here``: the trials run on this machine, which then needs a GPU for ``--gpus-per-trial``."""
    from agent.execution.resources import TrialResources, local_gpu_problem, problem

    resources = TrialResources(cpus_per_trial, gpus_per_trial, torch_threads)
    wrong = problem(resources, on_ray)
    if wrong is None and here:
        missing = local_gpu_problem(gpus_per_trial)
        wrong = None if missing is None else ("--gpus-per-trial", missing)
    if wrong is not None:
        raise click.BadParameter(wrong[1], param_hint=wrong[0])
    return resources


def _checked_folder(path: str, option: str) -> str:
    if not Path(path).is_dir():
        raise click.BadParameter(f"{path} is not a folder", param_hint=option)
    return str(Path(path).resolve())


def _check_workers(workers: int, timeout: float | None = None, ask_ahead: int = 0, torch_threads: int | None = None,
                   ray_address: str | None = None, cpus_per_trial: int = 1, gpus_per_trial: float = 0.0,
                   ray_working_dir: str | None = None) -> tuple[Any, str | None]:
    """The execution options checked (one line, exit 2, before anything loads or is written);
    returns the trials' :class:`~agent.execution.resources.TrialResources` and the absolute
    ``--ray-working-dir``, which also goes first on this process's import path, so that ``--job``
    finds its module there too."""
    if workers < 1:
        raise click.BadParameter(f"must be at least 1, got {workers}", param_hint="--workers")
    on_ray = workers > 1 or ray_address is not None
    if ray_working_dir is not None:
        if not on_ray:
            raise click.BadParameter("ships a folder to Ray workers (--workers above 1 or --ray-address); a trial in "
                                     "this process imports from this machine", param_hint="--ray-working-dir")
        ray_working_dir = _checked_folder(ray_working_dir, "--ray-working-dir")
    if ask_ahead < 0:
        raise click.BadParameter(f"must be 0 or more, got {ask_ahead}", param_hint="--ask-ahead")
    if timeout is not None and not timeout > 0:
        raise click.BadParameter(f"must be positive seconds, got {timeout}", param_hint="--timeout")
    if ray_address is not None:  # refused in seconds, where ray.init would retry for minutes
        from agent.ops.doctor import ray_address_problem

        unreachable = ray_address_problem(ray_address)
        if unreachable is not None:
            raise click.BadParameter(unreachable, param_hint="--ray-address")
    # last: a GPU wanted on this machine is looked for with torch, seconds to import
    resources = _checked_resources(cpus_per_trial, gpus_per_trial, torch_threads, on_ray, here=ray_address is None)
    if ray_working_dir is not None:
        sys.path.insert(0, ray_working_dir)
    return resources, ray_working_dir


@cli.command()
@study_options
@execution_options
def start(workers: int, ray_address: str | None, timeout: float | None, ask_ahead: int, torch_threads: int | None,
          cpus_per_trial: int, gpus_per_trial: float, ray_working_dir: str | None, **kwargs: Any) -> None:
    """Run a tuning study of JOB on DATASET and log every trial to MLflow."""
    resources, ray_working_dir = _check_workers(workers, timeout, ask_ahead, torch_threads, ray_address, cpus_per_trial,
                                                gpus_per_trial, ray_working_dir)
    execution = _execution(workers, ray_address, timeout, ask_ahead, resources, ray_working_dir)
    req = _request(kwargs)
    early = _start_workers_early(execution, req.job)
    with _abandoning(early), _preparing(f"preparing a study of {req.job} on {req.dataset}: loading libraries, data and history"):
        from agent.execution.progress import ProgressReporter
        from agent.tuning.service import prepare_study

        study, job, dataset, split = prepare_study(req, echo=click.echo, kb=_lazy_kb(req))
    _run(study, job, dataset, split, ProgressReporter(whole_process=True), execution, early)


def _execution(workers: int, ray_address: str | None, timeout: float | None, ask_ahead: int, resources: Any,
               working_dir: str | None) -> Any:
    """The checked execution options as one :class:`~agent.execution.resources.ExecutionSettings`."""
    from agent.execution.resources import ExecutionSettings

    return ExecutionSettings(workers, ray_address, timeout, ask_ahead, resources, working_dir)


def _start_workers_early(execution: Any, job_spec: str | None) -> Any:
    """Ray's start begun now, on a background thread, to overlap the imports and the preparation
    that follow (:class:`agent.execution.ray_start.RayStart`); None when the study runs in this process."""
    from agent.execution.ray_start import start_workers_early

    return start_workers_early(execution.workers, execution.ray_address, job_spec, execution.resources,
                               execution.working_dir)


@contextlib.contextmanager
def _abandoning(early: Any) -> Iterator[None]:
    """Stops a Ray instance begun early when what follows fails (bad input, a missing study)."""
    try:
        yield
    except BaseException:
        if early is not None:
            early.abandon()
        raise


@cli.command()
@study_options
@talks("preparing the study")
def create(**kwargs: Any) -> None:
    """Create a study without running it, for `tune-agent ask` / `tell` from your own loop."""
    from agent.tuning.service import prepare_study

    req = _request(kwargs)
    study, *_ = prepare_study(req, echo=click.echo, kb=_lazy_kb(req))
    click.echo(f"created study {study.name} ({study.settings.trials} trials)")


def _run(study: Any, job: Any, dataset: Any, split: Any, reporter: Any, execution: Any, early: Any = None) -> None:
    from agent.errors import StoreError, WorkersLostError
    from agent.execution.runner import run_study
    from agent.execution.workers import make_executor

    try:
        try:
            with _abandoning(early):
                executor = make_executor(study, job, dataset, split, execution, early)
        except TuneAgentError as exc:  # the study is in the store; the workers are what failed
            raise type(exc)(f"{str(exc).rstrip('.')}; study {study.name} is kept: once the workers can start, continue with: "
                            f"tune-agent resume {study.name}") from None
        resources, timeout = execution.resources, execution.timeout
        if execution.parallel:
            from agent.samplers.base import pending_note

            ahead = f", {executor.ask_ahead} more asked ahead" if executor.ask_ahead else ""
            each = f", {executor.per_trial} each" if executor.per_trial else ""
            reporter.line(f"running {executor.capacity} trial(s) at once on {executor.where}{each}{ahead}; "
                          f"{pending_note(study.sampler)}")
            executor.say = reporter.line  # a Ray executor's later word on the cluster (a node that fits joined)
        elif resources is not None and resources.gpus > 0:
            reporter.line("trials train on the GPU (Lightning accelerator 'gpu', one device)")
        for note in executor.notes:
            reporter.line(note)
        timing = run_study(study, job, dataset, split, reporter, executor=executor, timeout=timeout)
        if timing.timed_out:
            done = study.settings.trials - study.remaining()
            click.echo(f"--timeout {timeout:g} s reached after {done} of {study.settings.trials} trials; "
                       f"continue with: tune-agent resume {study.name}", err=True)
    except KeyboardInterrupt:
        click.echo(f"interrupted; continue with: tune-agent resume {study.name}", err=True)
        sys.exit(130)
    except StoreError as exc:  # the store went away mid-study: what was told is kept there
        raise StoreError(f"{exc}; once the store is back, continue with: tune-agent resume {study.name}") from None
    except WorkersLostError as exc:
        raise WorkersLostError(f"{exc}; continue with: tune-agent resume {study.name} ({exc.hint})") from None


@cli.command()
@click.argument("study_name")
@click.option("--job", default=None, help="Refuse to resume unless the study used this job.")
@click.option("--dataset", default=None, help="Refuse to resume unless the study used this dataset.")
@tracking_option
@artifact_option
@execution_options
def resume(study_name: str, job: str | None, dataset: str | None, tracking_uri: str | None, artifact_root: str | None,
           workers: int, ray_address: str | None, timeout: float | None, ask_ahead: int, torch_threads: int | None,
           cpus_per_trial: int, gpus_per_trial: float, ray_working_dir: str | None) -> None:
    """Continue an interrupted study from what MLflow holds."""
    resources, ray_working_dir = _check_workers(workers, timeout, ask_ahead, torch_threads, ray_address, cpus_per_trial,
                                                gpus_per_trial, ray_working_dir)
    execution = _execution(workers, ray_address, timeout, ask_ahead, resources, ray_working_dir)
    early = _start_workers_early(execution, job)
    with _abandoning(early):
        with _preparing(f"opening study {study_name}: loading libraries, data and trials"):
            from agent.execution.progress import ProgressReporter
            from agent.tuning.service import check_resume_matches, load_study_data, open_study

            study, job_obj = open_study(study_name, kb=_kb(tracking_uri, artifact_root))
            check_resume_matches(study, job_obj, job, dataset)
            data, split = load_study_data(study, job_obj)
        closed = study.recover()
        reporter = ProgressReporter(whole_process=True)
        for t in closed:
            reporter.line(f"trial {t.number + 1} was left running by a dead process: closed as killed, slot re-run")
        if study.remaining() <= 0:
            study.set_status("finished")
            reporter.line(f"study {study_name} already has all {study.settings.trials} trials")
            if early is not None:
                early.abandon()
            return
    _run(study, job_obj, data, split, reporter, execution, early)


@cli.command()
@click.argument("study_name")
@tracking_option
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: ask always prints JSON.")
@talks("asking the study's sampler")
def ask(study_name: str, tracking_uri: str | None, as_json: bool) -> None:
    """Open the next trial of a study and print it as JSON: {"trial": n, "config": {...}}.

    Trials are numbered from 1 everywhere a person reads them (console, MLflow run names, ask,
    tell, best)."""
    from agent.tuning.service import open_study

    study, _ = open_study(study_name, kb=_kb(tracking_uri))
    trial = study.ask()
    click.echo(json.dumps({"trial": trial.number + 1, "origin": trial.origin, "config": dict(trial.config)}))


@cli.command()
@click.argument("study_name")
@click.argument("trial", type=int)
@click.option("--value", type=float, default=None, help="The objective the trial reached.")
@click.option("--failed", default=None, help="Mark the trial failed with this reason.")
@tracking_option
@talks("telling the study")
def tell(study_name: str, trial: int, value: float | None, failed: str | None, tracking_uri: str | None) -> None:
    """Close trial TRIAL (numbered from 1, as `ask` printed it) with its objective value (or --failed REASON)."""
    from agent.tuning.service import open_study

    if (value is None) == (failed is None):
        raise TuneAgentError("give exactly one of --value or --failed")
    if trial < 1:
        raise TuneAgentError(f"trials are numbered from 1, got {trial}")
    study, _ = open_study(study_name, kb=_kb(tracking_uri), with_sampler=False)
    record = study.tell(study.trial_by_number(trial - 1), value=value, failed=failed)
    study.set_status("finished" if study.remaining() <= 0 else "running")
    click.echo(f"trial {trial}: {record.state}")


@cli.command()
@click.argument("study_name")
@tracking_option
@click.option("--json", "as_json", is_flag=True, help="Accepted for symmetry: best always prints JSON.")
@click.option("--register", "register_as", default=None, metavar="NAME",
              help="Retrain the best configuration once and register it in MLflow's model registry as NAME.")
@talks("reading the study")
def best(study_name: str, tracking_uri: str | None, as_json: bool, register_as: str | None) -> None:
    """Print the best configuration of a study as JSON (and register its model with --register)."""
    from agent.tuning.service import load_study_data, open_study

    study, job = open_study(study_name, kb=_kb(tracking_uri), with_sampler=False)
    trial = study.best()
    if trial is None:
        raise TuneAgentError(f"study {study_name!r} has no successful trial yet")
    out = {"study": study_name, "trial": trial.number + 1, "metric": study.settings.metric, "value": trial.value, "config": dict(trial.config)}
    if register_as is not None:
        from agent.ops.models import register_best

        if not register_as.strip():
            raise TuneAgentError("--register needs a model name")
        data, split = load_study_data(study, job)
        out["registered"] = register_best(study, job, data, split, register_as.strip())
    click.echo(json.dumps(out, indent=2))


@cli.command()
@click.argument("study_name")
@click.option("--out", default=None, help="Folder for report.html and its figures [default: report-STUDY].")
@tracking_option
@talks("writing the report")
def report(study_name: str, out: str | None, tracking_uri: str | None) -> None:
    """Write a study's report (best so far vs cold start, importance, neighbours, knowledge-base map,
    failures) as HTML, and log it with its figures on the study run (report/)."""
    from pathlib import Path

    from agent.tuning.report import write_report
    from agent.tuning.service import open_study

    study, job = open_study(study_name, kb=_kb(tracking_uri), with_sampler=False)
    page = write_report(study.kb, study.record, job.space, Path(out or f"report-{study_name}"))
    click.echo(f"report of {study_name}: {page} (and report/report.html on the study run)")


@cli.command()
@tracking_option
@json_option
@talks("reading the store")
def history(tracking_uri: str | None, as_json: bool) -> None:
    """List studies and the datasets they ran on."""
    from agent.ops.history import history_rows, render_history

    kb = _kb(tracking_uri)
    click.echo(json.dumps(history_rows(kb), indent=2) if as_json else render_history(kb))


@cli.command()
@tracking_option
@artifact_option
@click.option("--models-dir", default="models", show_default=True)
@click.option("--ray-address", default=None,
              help="Also check the Ray cluster at this address: its nodes, CPUs and GPUs, and that each node can "
                   "find tune-agent, torch and Lightning installed.")
@click.option("--job", default=None, help="With --ray-address: check that each node finds this job's module.")
@click.option("--ray-working-dir", default=None, metavar="DIR", help="With --ray-address: ship DIR as `start` would, and look there.")
@click.option("--cpus-per-trial", type=int, default=1, show_default=True, help="With --ray-address: count the trials that fit at once.")
@click.option("--gpus-per-trial", type=float, default=0.0, show_default=True, help="With --ray-address: count the trials that fit at once.")
@json_option
@talks("checking the installation")
def doctor(tracking_uri: str | None, artifact_root: str | None, models_dir: str, ray_address: str | None,
           job: str | None, ray_working_dir: str | None, cpus_per_trial: int, gpus_per_trial: float, as_json: bool) -> None:
    """Check the store, the history, the meta-models, versions and threads (and a Ray cluster); exit 1
    if something is broken."""
    from agent.ops.doctor import healthy, render, run_doctor

    resources = _checked_resources(cpus_per_trial, gpus_per_trial)
    for option, value in (("--job", job), ("--ray-working-dir", ray_working_dir)):
        if value is not None and ray_address is None:
            raise click.BadParameter("checks the Ray cluster's nodes: give --ray-address too", param_hint=option)
    if ray_working_dir is not None:
        ray_working_dir = _checked_folder(ray_working_dir, "--ray-working-dir")
    checks = run_doctor(tracking_uri, artifact_root, Path(models_dir), ray_address, job, ray_working_dir, resources)
    click.echo(render(checks, as_json))
    if not healthy(checks):
        sys.exit(1)


@cli.command()
@click.option("--data-dir", required=True, help="Where the server keeps PostgreSQL's cluster, the artifacts and logs (made on first start).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address MLflow listens on (0.0.0.0 to serve the team's network).")
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--pg-port", type=int, default=5433, show_default=True, help="PostgreSQL's port (127.0.0.1 only).")
@click.option("--auth", is_flag=True, help="MLflow's basic-auth app: users and per-experiment permissions.")
def server(data_dir: str, host: str, port: int, pg_port: int, auth: bool) -> None:
    """Run a team tracking server: mlflow server on PostgreSQL, artifacts proxied; Ctrl-C stops both."""
    from pathlib import Path

    from agent.knowledge.team_server import TeamServer

    code = TeamServer(Path(data_dir).resolve(), host, port, pg_port, auth).serve(say=click.echo)
    if code:
        raise TuneAgentError(f"mlflow server exited with code {code}; see {Path(data_dir) / 'logs' / 'mlflow.log'}")


@cli.command()
@click.option("--port", type=int, default=5000, show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to serve on (0.0.0.0: the whole network).")
@tracking_option
@artifact_option
def ui(port: int, host: str, tracking_uri: str | None, artifact_root: str | None) -> None:
    """Serve the MLflow UI for the store (127.0.0.1 unless --host says otherwise)."""
    import os

    from agent.knowledge import DEFAULT_ARTIFACT_ROOT, check_reachable, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    check_reachable(uri)
    if uri.startswith(("http://", "https://")):
        raise TuneAgentError(f"{uri} is already a tracking server: open it in a browser")
    root = artifact_root or DEFAULT_ARTIFACT_ROOT
    args = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--default-artifact-root", root, "--host", host, "--port", str(port)]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    click.echo(f"MLflow UI on http://{shown}:{port} (Ctrl-C stops it)")
    from agent.knowledge import store_exists

    if store_exists(uri):  # the studies' experiments, one per job: where to start browsing
        studies = _kb(tracking_uri, artifact_root).list_studies()
        for job in sorted({s.job for s in studies}):
            click.echo(f"  studies of job {job}: experiment tune-agent/{job} (open it from the Experiments list; "
                       "Model training view, columns best_objective and the Dataset column)")
    from agent.knowledge.team_server import without_job_runner

    os.execve(sys.executable, args, without_job_runner(dict(os.environ)))


@cli.command()
@click.option("--job", default="mlp", show_default=True, help="Job run on every dataset.")
@click.option("--sources", default="digits,mnist-5k,mnist1d,breast-cancer,wine,iris,rtables", show_default=True,
              help="Comma-separated: built-in sources (five derived datasets each) and 'rtables' (the R-package tables of agent/data/rtables.csv).")
@click.option("--dataset", "datasets", multiple=True, help="Explicit dataset specs (repeatable) instead of --sources.")
@click.option("--configs", type=int, default=64, show_default=True, help="Size of the shared Sobol set of configurations.")
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--max-rows", type=int, default=1000, show_default=True, help="R tables larger than this are a stratified sample of this many rows.")
@click.option("--workers", type=int, default=2, show_default=True, help="Studies run side by side (processes, one torch thread each).")
@click.option("--limit", type=int, default=None, help="Only the first N datasets.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the shared Sobol set.")
@click.option("--starter", is_flag=False, flag_value=STARTER_FILE, default=None,
              help=f"Import a starter history (default {STARTER_FILE}) into the store instead of training anything.")
@click.option("--export", "export_to", default=None, help="Write the store's finished bootstrap studies of --job to this starter file.")
@click.option("--models-dir", default="models", show_default=True,
              help="With --starter: where the history's source models are stored (models/source_models.jsonl).")
@tracking_option
@artifact_option
def bootstrap(job: str, sources: str, datasets: tuple[str, ...], configs: int, epochs: int, max_rows: int, workers: int,
              limit: int | None, seed: int, starter: str | None, export_to: str | None, models_dir: str,
              tracking_uri: str | None, artifact_root: str | None) -> None:
    """Build a knowledge base: JOB over many real datasets on one shared set of configurations."""
    from pathlib import Path

    from agent.config import check_positive
    from agent.pipeline.bootstrap import run_bootstrap, source_specs

    if starter is not None or export_to is not None:
        from agent.knowledge.starter import export_starter, import_starter

        if starter is not None and export_to is not None:
            raise TuneAgentError("--starter imports and --export writes: give one of them")
        kb = _kb(tracking_uri, artifact_root)
        if export_to is not None:
            from agent.jobs import load_job

            space = load_job(job).space.to_dict()
            click.echo(json.dumps(export_starter(kb, Path(export_to), job, space, progress=click.echo)))
        else:
            from agent.tuning.source_models import update_for_job

            imported = import_starter(kb, Path(starter), progress=click.echo)
            built = update_for_job(kb, models_dir, job, progress=click.echo)
            click.echo(f"source models: {built['sources']} sources, {built['fitted']} GP(s) fitted in {built['seconds']} s "
                       f"-> {built['file']}" + (f" (not written: {built['not_written']})" if "not_written" in built else ""))
            click.echo(json.dumps(imported))
        return

    for option, value in (("--configs", configs), ("--epochs", epochs), ("--workers", workers), ("--max-rows", max_rows)):
        check_positive(option, value)
    specs = list(datasets) or source_specs([s.strip() for s in sources.split(",") if s.strip()], max_rows)
    if limit is not None:
        check_positive("--limit", limit)
        specs = specs[:limit]
    _kb(tracking_uri, artifact_root).open()  # the store exists, whole, before the workers open it
    click.echo(f"bootstrap: {len(specs)} datasets x {configs} configurations of {job}, {workers} worker(s)")
    summary = run_bootstrap(job, specs, configs, epochs, seed, tracking_uri, artifact_root, echo=click.echo,
                            workers=workers)
    click.echo(json.dumps(summary))


@cli.command("import")
@click.argument("table", type=click.Path(path_type=str))
@click.option("--space", "space_file", required=True, help="Search space JSON (as in a study's space.json).")
@click.option("--job-name", required=True, help="Name the imported evaluations go under (experiment tune-agent/NAME).")
@click.option("--metric", default="value", show_default=True)
@click.option("--mode", type=click.Choice(["min", "max"]), default="max", show_default=True)
@tracking_option
@artifact_option
def import_cmd(table: str, space_file: str, job_name: str, metric: str, mode: str, tracking_uri: str | None, artifact_root: str | None) -> None:
    """Import a table of external evaluations (task, hyperparameters, value) as finished studies."""
    from pathlib import Path

    from agent.knowledge.importer import import_table, load_space, read_table

    space = load_space(Path(space_file))
    frame = read_table(Path(table))
    summary = import_table(_kb(tracking_uri, artifact_root), frame, space, job_name, metric, mode)
    click.echo(json.dumps(summary))


params_option = click.option("--params", "params_file", default="params.yaml", show_default=True, help="Pipeline settings.")


@cli.group()
def meta() -> None:
    """Stages of the meta-model pipeline (run by `dvc repro`; see dvc.yaml)."""


@meta.command("export")
@click.option("--out", default="data/export", show_default=True)
@params_option
@tracking_option
def meta_export(out: str, params_file: str, tracking_uri: str | None) -> None:
    """Export trials, dataset samples and summaries from the tracking store."""
    from pathlib import Path

    from agent.pipeline.stages import load_params, stage_export

    n = stage_export(_kb(tracking_uri), load_params(Path(params_file)).get("export", {}), Path(out))
    click.echo(f"exported {n} historical datasets to {out}")


@meta.command("source-models")
@click.option("--models-dir", default="models", show_default=True)
@click.option("--job", default=None, help="The job whose history to model [default: params.yaml export.job].")
@params_option
@tracking_option
def meta_source_models(models_dir: str, job: str | None, params_file: str, tracking_uri: str | None) -> None:
    """Fit and store the history's source GPs, signal checks and portfolios (models/source_models.jsonl):
    what transfer surrogates load instead of fitting in every study. Only what is new is fitted."""
    from pathlib import Path

    from agent.pipeline.stages import load_params
    from agent.tuning.source_models import update_for_job

    job = job or load_params(Path(params_file)).get("export", {}).get("job", "mlp")
    click.echo(json.dumps(update_for_job(_kb(tracking_uri), models_dir, str(job), progress=click.echo)))


@meta.command("distances")
@params_option
def meta_distances(params_file: str) -> None:
    """Target distances between historical datasets (paper 003 eq. 2, or EMD)."""
    from pathlib import Path

    from agent.pipeline.stages import DISTANCES_FILE, load_params, stage_distances

    D = stage_distances(load_params(Path(params_file)).get("distances", {}))
    click.echo(f"wrote {DISTANCES_FILE}: {len(D)} x {len(D)}")


@meta.command("train")
@click.option("--models-dir", default="models", show_default=True)
@params_option
@tracking_option
def meta_train(models_dir: str, params_file: str, tracking_uri: str | None) -> None:
    """Train the Siamese meta-feature extractor (logged to MLflow)."""
    from pathlib import Path

    from agent.pipeline.stages import load_params, stage_train

    params = load_params(Path(params_file)).get("meta_features", {})
    summary = stage_train(_kb(tracking_uri), params, Path(models_dir),
                          Path("metrics/train_metafeatures.json"), Path("plots/metafeature_learning.csv"))
    click.echo(json.dumps(summary))


@meta.command("train-transfer")
@click.option("--models-dir", default="models", show_default=True)
@params_option
def meta_train_transfer(models_dir: str, params_file: str) -> None:
    """Meta-train the Transferable Neural Process surrogate on the exported history."""
    from pathlib import Path

    from agent.pipeline.stages import load_params
    from agent.pipeline.metamodels import stage_train_transfer

    params = load_params(Path(params_file)).get("transfer", {})
    click.echo(json.dumps(stage_train_transfer(params, Path(models_dir), Path("metrics/train_transfer.json"))))


@cli.command("evaluate")
@params_option
def evaluate_cmd(params_file: str) -> None:
    """Leave-one-source-out warm-start replay of every dataset; writes metrics/warmstart.json."""
    from pathlib import Path

    from agent.pipeline.stages import load_params
    from agent.pipeline.evaluation import stage_evaluate

    params = load_params(Path(params_file))
    report = stage_evaluate(params.get("evaluate", {}), params.get("meta_features", {}),
                            Path("metrics/warmstart.json"), Path("plots"), choice_dir=Path("models"))
    click.echo(json.dumps({"datasets": report["datasets"], "sources": report["sources"],
                           "rank_correlation": {m: report["rank_correlation"][m]["mean"] for m in ("handcrafted", "learned")},
                           "regret@5": {m: v.get("regret@5") for m, v in report["methods"].items()},
                           "auto": report["auto_choice"]["method"]}))


meta.add_command(evaluate_cmd, "evaluate")


@cli.command()
@click.option("--dataset", required=True, help="Dataset whose nearest historical datasets to list.")
@click.option("--job", default="mlp", show_default=True)
@click.option("--label", default=None)
@click.option("--drop", multiple=True, help="A .csv/.parquet column to leave out (repeatable).")
@click.option("--warm-start", type=click.Choice(["auto", "learned", "handcrafted"]), default="auto", show_default=True)
@click.option("--k", type=int, default=3, show_default=True)
@click.option("--models-dir", default="models", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@tracking_option
@json_option
@talks("loading the dataset and the history")
def neighbors(dataset: str, job: str, label: str | None, drop: tuple[str, ...], warm_start: str, k: int, models_dir: str, seed: int, tracking_uri: str | None,
              as_json: bool) -> None:
    """Print the nearest historical datasets, their distances and best configurations."""
    from pathlib import Path

    from agent.data import describe_dataset, load_dataset, sample_dataset
    from agent.jobs import load_job
    from agent.tuning.service import SAMPLE_SIZE
    from agent.tuning.warmstart import plan_warm_start

    ds = load_dataset(dataset, label=label, drop=drop)
    job_obj = load_job(job)
    kb = _kb(tracking_uri)
    warm = plan_warm_start(kb, job_obj, ds, sample_dataset(ds, SAMPLE_SIZE, seed=seed), describe_dataset(ds),
                           warm_start, k, Path(models_dir))
    if as_json:
        click.echo(json.dumps({"dataset": ds.name, "job": job_obj.name, "method": warm.method, "message": warm.message,
                               "far_from_history": warm.far, "distance_ratio": warm.distance_ratio,
                               "neighbours": [{"dataset": n.name, "distance": n.distance, "best_value": n.best_value,
                                               "best_config": dict(n.best_config)} for n in warm.neighbours]}, indent=2))
        return
    click.echo(warm.message.replace("; starting cold", "; a study would start cold"))  # a query starts nothing
    for n in warm.neighbours:
        click.echo(f"{n.distance:10.4g}  {n.name}  best={n.best_value:.5g}  {json.dumps(dict(n.best_config))}")


@cli.group()
def bench() -> None:
    """Benchmarks (figures for the issues' closing notes)."""


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


def _fidelity(values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for item in values:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise TuneAgentError(f"--fidelity takes NAME=NUMBER, got {item!r}") from None
        if not sep or not name.strip():
            raise TuneAgentError(f"--fidelity takes NAME=NUMBER, got {item!r}")
    return out


@bench.command("lcbench")
@click.option("--quick", is_flag=True, help="4 tasks x 2 seeds (minutes) instead of every task x 5.")
@click.option("--methods", default="random,tpe,gp,portfolio_gp,rgpe,tnp", show_default=True,
              help="Comma-separated samplers (random, tpe) and registry surrogates (gp, portfolio_gp, neighbour_gp, rgpe, tnp).")
@click.option("--seeds", type=int, default=5, show_default=True)
@click.option("--tasks", type=int, default=None, help="Only the first N tasks.")
@click.option("--budget", type=int, default=30, show_default=True, help="Trials per study.")
@click.option("--workers", type=int, default=2, show_default=True)
@click.option("--control", type=click.Choice(["none", "shuffled"]), default="none", show_default=True,
              help="shuffled: every source's responses permuted (negative-transfer control).")
@click.option("--scenario", "folder", default=None, help="A YAHPO-format scenario folder [default: ../shared/benchmarks/yahpo/lcbench].")
@click.option("--target", default=None, help="Output to optimise [default: the scenario's, lcbench: val_accuracy].")
@click.option("--maximize/--minimize", "maximize", default=None, help="Direction of --target [default: the scenario's].")
@click.option("--fidelity", multiple=True, help="NAME=VALUE: evaluate at this fidelity instead of the full one (repeatable).")
@click.option("--out", default=".", show_default=True, help="Writes OUT/metrics/<scenario>*.json and OUT/plots/.")
@click.option("--fresh", is_flag=True, help="Forget the journal of finished runs (OUT/data/bench-runs/) and recompute all.")
@click.option("--batch", type=int, default=1, show_default=True,
              help="Trials in flight per study, as `start --workers N` runs them (simulated equal-speed workers); "
                   "writes OUT/metrics/<scenario>_batchN.json.")
@click.option("--pending", type=click.Choice(PENDING), default="auto", show_default=True,
              help="With --batch: how running trials enter a BO step (start --pending); "
                   "a choice other than auto writes OUT/metrics/<scenario>_batchN_<pending>.json.")
@click.option("--ask-ahead", "ask_ahead", type=int, default=0, show_default=True,
              help="With --batch: trials asked beyond the batch, each started when one ends (start --ask-ahead); "
                   "writes OUT/metrics/<scenario>_batchN[...]_aheadK.json.")
@click.option("--tag", default=None,
              help="Name a side run: writes OUT/metrics/<scenario>[...]_TAG.json and plots/.../TAG/ instead of the main files.")
def bench_lcbench(quick: bool, methods: str, seeds: int, tasks: int | None, budget: int, workers: int, control: str,
                  folder: str | None, target: str | None, maximize: bool | None, fidelity: tuple[str, ...], out: str,
                  fresh: bool, batch: int, pending: str, tag: str | None, ask_ahead: int) -> None:
    """Leave-one-task-out transfer benchmark on a YAHPO Gym scenario, run as product studies."""
    from pathlib import Path

    from agent.bench.run import run_transfer_benchmark
    from agent.config import check_positive

    for option, value in (("--seeds", seeds), ("--budget", budget), ("--workers", workers), ("--batch", batch)):
        check_positive(option, value)
    if tasks is not None:
        check_positive("--tasks", tasks)
    _check_workers(workers, ask_ahead=ask_ahead)
    report = run_transfer_benchmark([m.strip() for m in methods.split(",") if m.strip()], Path(out), folder=folder,
                                    target=target, maximize=maximize, fidelity=_fidelity(fidelity), quick=quick,
                                    seeds=seeds, tasks=tasks, budget=budget, workers=workers, control=control,
                                    progress=lambda line: click.echo(line, err=True), fresh=fresh, batch=batch, pending=pending,
                                    tag=tag, ask_ahead=ask_ahead)
    click.echo(json.dumps(report, indent=2))


@bench.command("parallel")
@click.option("--job", default="mlp", show_default=True)
@click.option("--dataset", default="digits", show_default=True)
@click.option("--trials", type=int, default=24, show_default=True)
@click.option("--epochs", type=int, default=20, show_default=True)
@click.option("--workers", default="1,2", show_default=True, help="Worker counts to compare; the first is the baseline.")
@click.option("--ask-ahead", "ask_ahead", default="1", show_default=True,
              help="--ask-ahead values to run each worker count above 1 with (e.g. 0,1).")
@click.option("--wait", type=float, default=0.0, show_default=True,
              help="Seconds every training epoch also waits without using a core (a GPU-bound trial's "
                   "share): the ratio then measures the orchestration, not the competition for cores.")
@click.option("--process", is_flag=True,
              help="Run each count as its own `tune-agent start` process, timed from launch to exit (imports included).")
@click.option("--cpus-per-trial", type=int, default=1, show_default=True, help="As `start`'s, for the counts above 1.")
@click.option("--gpus-per-trial", type=float, default=0.0, show_default=True, help="As `start`'s, for every count.")
@click.option("--out", default="metrics/parallel.json", show_default=True)
def bench_parallel(job: str, dataset: str, trials: int, epochs: int, workers: str, ask_ahead: str, wait: float,
                   process: bool, cpus_per_trial: int, gpus_per_trial: float, out: str) -> None:
    """Wall time of one study with 1, 2, ... workers (start --workers N), as ratios to the first."""
    from pathlib import Path

    from agent.bench.parallel import ParallelConfig, parse_workers, run_parallel_bench
    from agent.config import check_positive

    for option, value in (("--trials", trials), ("--epochs", epochs)):
        check_positive(option, value)
    if not wait >= 0 or wait == float("inf"):
        raise TuneAgentError(f"--wait takes seconds, 0 or more, got {wait}")
    _checked_resources(cpus_per_trial, gpus_per_trial, here=True)
    config = ParallelConfig(job, dataset, trials, epochs, workers=parse_workers(workers),
                            ask_ahead=parse_workers(ask_ahead, "--ask-ahead", 0), wait=wait, process=process,
                            cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial)
    report = run_parallel_bench(config, Path(out), progress=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(report, indent=2))


@bench.command("server")
@click.option("--starter", default="starter/mlp.npz", show_default=True, help="Studies to log (a starter history file).")
@click.option("--agents", type=int, default=4, show_default=True, help="Concurrent writers, one MLflow client each.")
@click.option("--runs", type=int, default=10_000, show_default=True, help="Trial runs to log before the lookup.")
@click.option("--dataset", default="wine", show_default=True, help="The new dataset whose warm start is timed.")
@click.option("--models-dir", default="models", show_default=True)
@click.option("--out", default="metrics/server.json", show_default=True)
def bench_server(starter: str, agents: int, runs: int, dataset: str, models_dir: str, out: str) -> None:
    """A real team server (PostgreSQL): runs/s with concurrent agents, warm-start lookup over N trial runs."""
    from pathlib import Path

    from agent.bench.server import run_server_bench
    from agent.config import check_positive

    for option, value in (("--agents", agents), ("--runs", runs)):
        check_positive(option, value)
    if not Path(starter).is_file():
        raise TuneAgentError(f"starter history not found: {starter}")
    report = run_server_bench(Path(starter), agents, runs, dataset, models_dir=Path(models_dir),
                              say=lambda line: click.echo(line, err=True))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(json.dumps(report, indent=2))


@bench.command("sources")
@click.option("--sizes", default="240,2400,10000", show_default=True, help="Numbers of source datasets in the history.")
@click.option("--methods", default="gp,rgpe", show_default=True)
@click.option("--target", default="3945", show_default=True, help="The lcbench task studied (held out of the history).")
@click.option("--budget", type=int, default=12, show_default=True)
@click.option("--fit-up-to", type=int, default=240, show_default=True,
              help="Above this many sources, each task's first fitted GP is reused for its other sources (fitting "
                   "10,000 GPs takes about an hour on 2 cores).")
@click.option("--out", default="metrics/sources.json", show_default=True)
def bench_sources(sizes: str, methods: str, target: str, budget: int, fit_up_to: int, out: str) -> None:
    """Preparation and suggestion seconds of a study as the history grows to thousands of datasets."""
    from pathlib import Path

    from agent.bench.sources import measure_sources
    from agent.config import check_positive

    check_positive("--budget", budget)
    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise TuneAgentError(f"--sizes must be whole numbers separated by commas, got {sizes!r}") from None
    for n in counts:
        check_positive("--sizes", n)
    report = measure_sources(counts, [m.strip() for m in methods.split(",") if m.strip()], target, budget=budget,
                             fit_up_to=fit_up_to, progress=lambda line: click.echo(line, err=True))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(json.dumps(report["runs"], indent=2))


@bench.command("startup")
@click.option("--repeats", type=int, default=5, show_default=True)
@click.option("--dataset", default="iris", show_default=True)
@click.option("--job", default="mlp", show_default=True)
@click.option("--out", default=None, help="[default: metrics/startup.json, with --warm metrics/startup_warm.json]")
@click.option("--warm", "starter", is_flag=False, flag_value=STARTER_FILE, default=None,
              help=f"Warm against cold on a starter history (default {STARTER_FILE}): time to first trial of the "
                   "default warm-started study, a cold one, and one with no stored source models.")
@click.option("--no-refit", is_flag=True, help="With --warm: skip the run without stored source models (minutes).")
def bench_startup(repeats: int, dataset: str, job: str, out: str | None, starter: str | None, no_refit: bool) -> None:
    """Seconds from `tune-agent start` to its first output and first trial, on a terminal and a pipe."""
    from pathlib import Path

    from agent.bench.startup import run_startup_bench, run_warm_startup_bench
    from agent.config import check_positive

    check_positive("--repeats", repeats)
    if starter is not None:
        if not Path(starter).is_file():
            raise TuneAgentError(f"starter history not found: {starter}")
        report = run_warm_startup_bench(Path(starter), repeats, job, refit=not no_refit,
                                        say=lambda line: click.echo(line, err=True))
    else:
        report = run_startup_bench(repeats, dataset, job)
    out = out or ("metrics/startup_warm.json" if starter is not None else "metrics/startup.json")
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(json.dumps(report["summary"], indent=2))


@bench.command("faults")
@click.option("--studies", type=int, default=20, show_default=True)
@click.option("--trials", type=int, default=4, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", default="metrics/faults.json", show_default=True)
def bench_faults(studies: int, trials: int, epochs: int, seed: int, out: str) -> None:
    """Kill campaign: studies SIGKILLed at random moments (a new store's first second included), then resumed."""
    from pathlib import Path

    from agent.bench.faults import run_fault_campaign
    from agent.config import check_positive

    for option, value in (("--studies", studies), ("--trials", trials), ("--epochs", epochs)):
        check_positive(option, value)
    report = run_fault_campaign(studies, trials, epochs, seed=seed, say=lambda line: click.echo(line, err=True))
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))


@bench.command("pruning")
@click.option("--job", default="cnn", show_default=True)
@click.option("--dataset", default="mnist-5k", show_default=True)
@click.option("--trials", type=int, default=20, show_default=True)
@click.option("--epochs", type=int, default=9, show_default=True)
@click.option("--pruners", default="none,asha,median", show_default=True, help="Compared in this order; the first sets the target.")
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--same-time/--same-trials", default=True, show_default=True,
              help="The other pruners get the first's wall time as --timeout (and 3x its trials), or its trial count.")
@click.option("--out", default="metrics/pruning.json", show_default=True)
def bench_pruning(job: str, dataset: str, trials: int, epochs: int, pruners: str, seeds: int, same_time: bool,
                  out: str) -> None:
    """Wall time to reach the unpruned study's best validation value, per pruner (start --pruner P)."""
    from pathlib import Path

    from agent.bench.pruning import PruningBenchConfig, run_pruning_bench
    from agent.config import PRUNERS, check_positive

    for option, value in (("--trials", trials), ("--epochs", epochs), ("--seeds", seeds)):
        check_positive(option, value)
    chosen = tuple(p.strip() for p in pruners.split(",") if p.strip())
    unknown = [p for p in chosen if p not in PRUNERS]
    if not chosen or unknown:
        raise TuneAgentError(f"--pruners takes names from {', '.join(PRUNERS)}, got {pruners!r}")
    config = PruningBenchConfig(job, dataset, trials, epochs, seeds=seeds, pruners=chosen, same_time=same_time)
    report = run_pruning_bench(config, Path(out), progress=lambda line: click.echo(line, err=True))
    click.echo(json.dumps({k: v for k, v in report.items() if k != "seeds"}, indent=2))


@bench.command("arc")
@click.option("--dataset", default="mnist-5k", show_default=True)
@click.option("--job", "job_name", default="mlp-arch", show_default=True, help="A job whose space has conditions.")
@click.option("--studies", type=int, default=10, show_default=True, help="BO studies that make the data (seeds 0..N-1).")
@click.option("--trials", type=int, default=30, show_default=True)
@click.option("--epochs", type=int, default=1, show_default=True)
@click.option("--prefix", default="arc-data-", show_default=True, help="Study names: PREFIX<seed>.")
@click.option("--folds", type=int, default=10, show_default=True)
@click.option("--bo-seeds", type=int, default=0, show_default=True,
              help="Also run BO with the arc and the plain kernel, this many seeds each (studies arc-bo-<kernel>-<seed>).")
@click.option("--table/--no-table", default=True, show_default=True,
              help="--no-table keeps the table already in OUT/metrics/arc.json and only adds the BO comparison.")
@click.option("--out", default=".", show_default=True, help="Writes OUT/metrics/arc.json.")
@tracking_option
@artifact_option
def bench_arc(dataset: str, job_name: str, studies: int, trials: int, epochs: int, prefix: str, folds: int, bo_seeds: int,
              table: bool, out: str, tracking_uri: str | None, artifact_root: str | None) -> None:
    """Paper 002's Table 1: NMSE of six regression models on BO data of a conditional job."""
    import time
    from pathlib import Path

    from agent.config import check_positive
    from agent.jobs import load_job

    for option, value in (("--studies", studies), ("--trials", trials), ("--epochs", epochs), ("--folds", folds)):
        check_positive(option, value)
    job = load_job(job_name)
    if not job.space.has_conditions:
        raise TuneAgentError(f"job {job_name} has no conditional hyperparameters: the arc kernel has nothing to model")
    start = time.perf_counter()
    _kb(tracking_uri, artifact_root).open()
    path = Path(out) / "metrics" / "arc.json"
    if table:
        report = _arc_table(job, job_name, dataset, studies, trials, epochs, prefix, folds, tracking_uri, artifact_root,
                            start)
    elif path.is_file():
        report = json.loads(path.read_text())
    else:
        raise TuneAgentError(f"--no-table needs the table already in {path}")
    if bo_seeds > 0:
        from agent.pipeline.arc_table import kernel_bo_comparison, run_studies

        for kernel in ("arc", "plain"):  # studies arc-bo-<kernel>-<seed>, seeds 0..N-1
            run_studies(dataset, job_name, bo_seeds, trials, epochs, f"arc-bo-{kernel}-", tracking_uri, artifact_root,
                        kernel=kernel, echo=click.echo)
        bo = kernel_bo_comparison(_kb(tracking_uri, artifact_root), job.space, "arc-bo-", ("arc", "plain"), bo_seeds,
                                  job.name)
        report["bo"] = {"protocol": f"BO of {job_name} on {dataset} with each kernel, {bo_seeds} seeds, {trials} trials, "
                                    "mean best-so-far validation error", **bo}
        click.echo(f"BO best error: {json.dumps(bo)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    click.echo(f"wrote {path}")


def _arc_table(job: Any, job_name: str, dataset: str, studies: int, trials: int, epochs: int, prefix: str, folds: int,
               tracking_uri: str | None, artifact_root: str | None, start: float) -> dict[str, Any]:
    import time

    from agent.pipeline.arc_table import MODELS, PAPER, collect, nmse_table, run_studies

    run_studies(dataset, job_name, studies, trials, epochs, prefix, tracking_uri, artifact_root, kernel="plain",
                echo=click.echo)
    collected = time.perf_counter() - start
    U, errors, names = collect(_kb(tracking_uri, artifact_root), job.space, prefix, job.name)
    table = nmse_table(job.space, U, errors, folds=folds)
    better = [scale for scale in ("original", "log") if table["arc_gp"][scale][0] < table["gp"][scale][0]]
    for m in MODELS:
        paper = f"   (paper {PAPER[m][0]} / {PAPER[m][1]})" if m in PAPER else "   (ours)"
        click.echo(f"{m:16s} original {table[m]['original'][0]:.3f} +- {table[m]['original'][1]:.3f}   "
                   f"log {table[m]['log'][0]:.3f} +- {table[m]['log'][1]:.3f}{paper}")
    return {
        "protocol": f"{len(names)} BO studies of {job_name} on {dataset} ({trials} trials, {epochs} epoch(s), seeds "
                    f"0..{studies - 1}; plain-GP BO), {len(errors)} finished trials; validation error 1 - val_acc; "
                    f"{folds}-fold NMSE (MSE / fold variance), mean and standard error",
        "models": table, "paper_table_1": {m: {"original": PAPER[m][0], "log": PAPER[m][1]} for m in MODELS if m in PAPER},
        "claim_holds": bool(better), "arc_beats_gp_on": better,
        "seconds": {"studies": round(collected, 1), "table": round(time.perf_counter() - start - collected, 1)},
    }


@bench.command("warmstart")
@click.option("--job", "job_name", default="mlp", show_default=True)
@click.option("--targets", type=int, default=20, show_default=True, help="Held-out R-package tables (one per package).")
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--trials", type=int, default=10, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True)
@click.option("--methods", default=",".join(["cold", "handcrafted", "handcrafted+prior_mean", "portfolio", "rgpe", "default"]),
              show_default=True)
@click.option("--out", default=".", show_default=True, help="Writes OUT/metrics/warmstart_e2e.json; journal in OUT/data/bench-runs/.")
@click.option("--params", "params_file", default="params.yaml", show_default=True,
              help="Pipeline settings for the per-fold meta-models (meta_features, transfer, distances); "
                   "the defaults when the default file is absent.")
@tracking_option
def bench_warmstart(job_name: str, targets: int, seeds: int, trials: int, epochs: int, workers: int, methods: str, out: str,
                    params_file: str, tracking_uri: str | None) -> None:
    """End to end, leave-one-source-out: real studies on held-out tables with the bootstrap as history."""
    from pathlib import Path

    from agent.bench.warmstart_e2e import METHODS, E2EConfig, run_e2e
    from agent.pipeline.stages import load_params
    from agent.config import check_positive

    for option, value in (("--targets", targets), ("--seeds", seeds), ("--trials", trials), ("--epochs", epochs),
                          ("--workers", workers)):
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
    report = run_e2e(_kb(tracking_uri), config, journal, models, progress=click.echo, params=params,
                     normalisation=params.get("distances", {}).get("normalisation", "rank"))
    path = Path(out) / "metrics" / "warmstart_e2e.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    for m, row in report["methods"].items():
        click.echo(f"{m:24s} " + "  ".join(f"{k} {v}" for k, v in row.items()))
    click.echo(f"wrote {path}")


@bench.command("hts")
@click.option("--job", "job_name", default="mlp", show_default=True)
@click.option("--pair", "pairs", nargs=2, multiple=True, metavar="SOURCE TARGET",
              help="Dataset specs of a source and a target, each bootstrapped in the store (repeat) "
                   "[default: digits mnist-5k, mnist-5k mnist1d and two tabular pairs of the starter].")
@click.option("--seeds", type=int, default=3, show_default=True)
@click.option("--trials", type=int, default=20, show_default=True)
@click.option("--epochs", type=int, default=2, show_default=True)
@click.option("--workers", type=int, default=2, show_default=True)
@click.option("--n-init", type=int, default=None, help="m of paper 001's Algorithm 1 (LHS points before the first map), "
              "and cold BO's initial design [default: the product's].")
@click.option("--out", default=".", show_default=True, help="Writes OUT/metrics/hts_pairs[_mM].json; journal in OUT/data/bench-runs/.")
@tracking_option
def bench_hts(job_name: str, pairs: tuple[tuple[str, str], ...], seeds: int, trials: int, epochs: int, workers: int,
              n_init: int | None, out: str, tracking_uri: str | None) -> None:
    """HTS (paper 001) and hts-anchored against cold BO on real job pairs: the evaluation ratio to reach cold's result."""
    from pathlib import Path

    from agent.bench.hts_pairs import PAIRS, HtsPairsConfig, run_hts_pairs
    from agent.config import check_positive

    for option, value in (("--seeds", seeds), ("--trials", trials), ("--epochs", epochs), ("--workers", workers)):
        check_positive(option, value)
    if n_init is not None:
        check_positive("--n-init", n_init)
    config = HtsPairsConfig(job_name, tuple(pairs) or PAIRS, seeds, trials, epochs, workers, n_init)
    suffix = "" if n_init is None else f"_m{n_init}"
    journal = Path(out) / "data" / "bench-runs" / f"hts_pairs-{job_name}-{trials}x{epochs}{suffix}.jsonl"
    report = run_hts_pairs(_kb(tracking_uri), config, journal, progress=click.echo)
    path = Path(out) / "metrics" / f"hts_pairs{suffix}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    for key, row in report["pairs"].items():
        shown = "not reached" if row["ratio"] is None else f"{row['ratio']}x"
        a = row["anchored"]
        anchored = "not reached" if a["ratio"] is None else f"{a['ratio']}x"
        click.echo(f"{key}: cold {row['cold_final']} at trial {row['cold_trials']}, hts reaches it at "
                   f"{row['hts_trials'] or '-'} ({shown}; {row['seeds_reached']}/{seeds} seeds), hts-anchored at "
                   f"{a['hts_trials'] or '-'} ({anchored}; {a['seeds_reached']}/{seeds} seeds)")
    click.echo(f"wrote {path}")


@bench.command("scale")
@click.option("--scenario", "folder", default=None, help="A YAHPO scenario folder [default: lcbench].")
@click.option("--task", default="3945", show_default=True)
@click.option("--sizes", default="100,300", show_default=True, help="Configurations per source task.")
@click.option("--methods", default="gp,rgpe", show_default=True)
@click.option("--budget", type=int, default=15, show_default=True)
@click.option("--out", default=None, help="Also write the result to this JSON file.")
def bench_scale(folder: str | None, task: str, sizes: str, methods: str, budget: int, out: str | None) -> None:
    """Seconds per suggestion of each method as the history grows."""
    from pathlib import Path

    from agent.bench.scale import measure_scale
    from agent.bench.transfer import check_methods
    from agent.jobs.yahpo import yahpo_root

    names = [m.strip() for m in methods.split(",") if m.strip()]
    check_methods(names)
    try:
        counts = [int(x) for x in sizes.split(",") if x.strip()]
    except ValueError:
        raise TuneAgentError(f"--sizes takes comma-separated integers, got {sizes!r}") from None
    report = measure_scale(str(Path(folder) if folder else yahpo_root() / "lcbench"), task, counts, names, budget,
                           progress=lambda line: click.echo(line, err=True))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(report, indent=2) + "\n")
    click.echo(json.dumps(report, indent=2))


@bench.command("history")
@click.option("--job", "job_spec", default="yahpo:lcbench", show_default=True, help="A surrogate-benchmark job.")
@click.option("--configs", type=int, default=100, show_default=True, help="Random configurations per task.")
@click.option("--exclude", multiple=True, help="Tasks to leave out (e.g. the one you will tune).")
@click.option("--seed", type=int, default=0, show_default=True)
@tracking_option
@artifact_option
def bench_history(job_spec: str, configs: int, exclude: tuple[str, ...], seed: int, tracking_uri: str | None,
                  artifact_root: str | None) -> None:
    """Import the benchmark's source histories (random configurations of every task) into the store."""
    from agent.bench.transfer import BenchConfig, history_store, make_histories
    from agent.config import check_positive
    from agent.jobs import load_job

    check_positive("--configs", configs)
    if not job_spec.startswith("yahpo:"):
        raise TuneAgentError(f"--job must be a surrogate-benchmark job (yahpo:SCENARIO), got {job_spec!r}")
    job = load_job(job_spec)
    for task in exclude:
        job.task(task)  # an unknown task is one line, exit 2
    config = BenchConfig(scenario=str(job.scenario.folder), history_size=configs, history_seed=seed)
    histories = make_histories(job, config)
    tasks = [t for t in job.scenario.instances if t not in exclude]
    history_store(job, histories, tasks, kb=_kb(tracking_uri, artifact_root))
    click.echo(f"imported {len(tasks)} tasks x {configs} configurations of {job.name} ({job.metric}, {job.mode})")


@bench.command("neighbours")
@click.option("--dataset", default="mnist-5k", show_default=True)
@click.option("--history", "n_history", type=int, default=1000, show_default=True,
              help="Random historical meta-feature vectors to search (without --tracking-uri).")
@click.option("--models-dir", default="models", show_default=True)
@click.option("--job", "job_name", default="mlp", show_default=True, help="With --tracking-uri: the job whose history is searched.")
@click.option("--tracking-uri", default=None,
              help="Time the product's warm start (load, sample, meta-features, neighbour search) over this store's real history instead.")
def bench_neighbours(dataset: str, n_history: int, models_dir: str, job_name: str, tracking_uri: str | None) -> None:
    """Time meta-features of a new dataset plus the neighbour search over N historical datasets."""
    from pathlib import Path

    from agent.bench.neighbours import measure_neighbour_search, measure_warm_start

    if tracking_uri is not None:
        click.echo(json.dumps(measure_warm_start(_kb(tracking_uri), dataset, job_name, Path(models_dir))))
        return
    click.echo(json.dumps(measure_neighbour_search(dataset, n_history, Path(models_dir))))


def _environment_names(group: click.Group, path: str = "TUNE_AGENT") -> None:
    """Every option of every command reads ``TUNE_AGENT_<OPTION>`` (``TUNE_AGENT_TRACKING_URI``,
    ``TUNE_AGENT_TRIALS``: one setting for every command that has the option, as README says) and,
    winning over it, click's per-command ``TUNE_AGENT_<COMMAND>_<OPTION>``
    (``TUNE_AGENT_START_TRIALS``); ``--help`` shows both."""
    for name, command in group.commands.items():
        here = f"{path}_{name.replace('-', '_').upper()}"
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar is None and param.name:
                option = param.name.upper()
                param.envvar = [f"{here}_{option}", f"TUNE_AGENT_{option}"]
                param.show_envvar = True
        if isinstance(command, click.Group):
            _environment_names(command, here)


_environment_names(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps errors to one line and an exit code."""
    import warnings

    # Library deprecation notices (torch.jit inside BoTorch/GPyTorch) are not the user's business.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.jit.*")
    # BoTorch retries a failed acquisition line search from new starting points and says so in a
    # five-line RuntimeWarning; the retry is its business, the study's lines say what was proposed.
    warnings.filterwarnings("ignore", message=r"Optimization failed", category=RuntimeWarning, module=r"botorch\..*")
    try:
        cli.main(args=argv, prog_name="tune-agent", standalone_mode=False)
    except TuneAgentError as exc:
        click.echo(f"tune-agent: error: {exc}", err=True)
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


if __name__ == "__main__":
    main()
